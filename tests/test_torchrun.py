"""Real-rank scripts run under torchrun as well as self-spawned: two torchrun agents on
127.0.0.1 play two machines (--nnodes 2 --node-rank k --rdzv-endpoint HOST:PORT), and
what rank 0 prints equals the golden quick-mode output of the self-spawned run."""

import os
import subprocess
import sys

import pytest

from conftest import LECTURE09, ROOT
from golden_compare import differences
from test_golden_outputs import GOLDEN_DIR, GOLDENS

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]     # what the torchrun command runs


def torchrun_nodes(script, args, nnodes, nproc_per_node, timeout_s=240):
    """Start one torchrun agent per "node" on this machine; [(status, stdout, stderr)] per node."""
    from lecture09.ranks.gloo_ranks import free_port
    endpoint = f"127.0.0.1:{free_port()}"
    agents = [subprocess.Popen([*TORCHRUN, "--nnodes", str(nnodes), "--node-rank", str(k),
                                "--nproc-per-node", str(nproc_per_node), "--rdzv-endpoint", endpoint,
                                str(script), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT.parent))
              for k in range(nnodes)]
    done = []
    try:
        for agent in agents:
            out, err = agent.communicate(timeout=timeout_s)
            done.append((agent.returncode, out, err))
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    return done


def test_launched_by_torchrun_reads_the_launchers_variables():
    from lecture09.ranks.gloo_ranks import launched_by_torchrun
    full = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert launched_by_torchrun(full)
    assert not launched_by_torchrun({})
    assert not launched_by_torchrun({k: v for k, v in full.items() if k != "MASTER_PORT"})


def test_a_torchrun_rank_destroys_its_process_group_at_exit():
    """Left to the interpreter's shutdown, gloo's threads can abort the rank (SIGABRT after
    it printed everything); run_ranks registers an exit handler that destroys the group
    first. An exit handler registered before run_ranks runs after it and sees no group."""
    from lecture09.ranks.gloo_ranks import free_port
    program = ("import atexit, torch.distributed as dist\n"
               "atexit.register(lambda: print('group left at exit:', not dist.is_initialized()))\n"
               "from lecture09.ranks.gloo_ranks import run_ranks\n"
               "print('results:', run_ranks(max, 1, timeout_s=30))\n")
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT.parent))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["results: [1]", "group left at exit: True"]


def test_two_nodes_on_loopback_print_what_the_self_spawned_run_prints():
    golden = next(g for g in GOLDENS if g.name == "lecture09_02_data_parallel")
    (status0, out0, err0), (status1, out1, err1) = torchrun_nodes(ROOT / golden.script, golden.args, 2, 1)
    assert status0 == 0 and status1 == 0, (err0[-2000:], err1[-2000:])
    assert out1 == ""                                             # only rank 0 prints
    expected = (GOLDEN_DIR / f"{golden.name}.txt").read_text(encoding="utf-8")
    assert differences(out0, expected, golden) == []


@pytest.mark.slow
@pytest.mark.sweep                  # bad input under torchrun: a further case
def test_a_world_size_torchrun_did_not_start_is_one_line():
    """02 needs 2 ranks; 3 started: a rank stops with one line and status 2, no traceback.

    torchrun's agent stops the other ranks as soon as one exits, so a slower rank may be
    stopped before it prints: between one and three such lines, never more than one per rank."""
    [(status, out, err)] = torchrun_nodes(LECTURE09 / "02_data_parallel.py", ["--demo", "1", "--quick"], 1, 3)
    assert status != 0
    lines = [line for line in err.splitlines() if line.startswith("错误 error:")]
    assert lines and all("torchrun started 3" in line for line in lines), err[-2000:]
    assert 1 <= len(lines) <= 3                                   # at most once per rank
    assert "exitcode  : 2" in err                                 # torchrun's report of the ranks
    assert 'code/lecture09' not in "".join(l for l in err.splitlines() if l.strip().startswith("File "))


# Every other script with real ranks, one torchrun agent with as many ranks as the demo
# needs; rank 0 prints what the self-spawned run prints (timings blanked, [实测] skipped).
# About 2.5 minutes in all (code 05's self-spawned run starts 4 processes per row): the
# sweep tier; the two-node run of code 02 above is in the main part.
# The engines' scripts (codes 09 and 10) start their own kinds of processes (torchft's
# Lighthouse and replica groups, hivemind's DHT peers), not torch.distributed ranks.
UNDER_TORCHRUN = [
    ("01_collectives.py", ["--demo", "5", "--quick", "--real-p", "2"], 2, ("gloo", "实测")),
    ("03_memory_zero.py", ["--demo", "4", "--quick"], 2, ("gloo",)),
    ("03_memory_zero.py", ["--demo", "6", "--quick"], 2, ("gloo",)),
    ("04_pipeline.py", ["--demo", "2", "--quick"], 2, ("gloo",)),
    ("04_pipeline.py", ["--demo", "3", "--quick"], 2, ("gloo",)),
    ("04_pipeline.py", ["--demo", "5", "--quick"], 2, ("gloo",)),
    ("04_pipeline.py", ["--demo", "6", "--quick"], 2, ("gloo",)),
    ("04_pipeline.py", ["--demo", "7", "--quick"], 2, ("gloo",)),
    ("05_decentralized.py", ["--demo", "2", "--quick", "--fp32", "--backend", "gloo"], 4, ("演示 2",)),
]


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("script,args,ranks,words", UNDER_TORCHRUN,
                         ids=[f"{s[:2]}:{' '.join(a)}" for s, a, _, _ in UNDER_TORCHRUN])
def test_every_real_rank_demo_prints_under_torchrun_what_it_prints_self_spawned(script, args, ranks, words):
    from conftest import run_script
    from golden_compare import Golden
    from test_golden_outputs import ELAPSED
    self_spawned = run_script(LECTURE09 / script, *args)
    [(status, out, err)] = torchrun_nodes(LECTURE09 / script, args, 1, ranks)
    assert status == 0, err[-2000:]
    assert all(word in out for word in words)
    compare = Golden(script, f"code/lecture09/{script}", tuple(args), mask=ELAPSED,
                     tolerant=(r"bits/字符", r"Δ", r"loss", r"损失"))
    assert differences(out, self_spawned, compare) == []
