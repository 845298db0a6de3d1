"""The earlier draft of code 5 must run unchanged against our toolkit: its imports by bare
module name (`from dist_sim import iteration_cost, local_search, make_network`) and its
calls. draft_calls.py repeats them in a fresh process, set up the way the draft sets itself up."""

import subprocess
import sys
from pathlib import Path


def test_the_draft_calls_run_against_the_toolkit():
    script = Path(__file__).with_name("draft_calls.py")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("draft calls ok")
