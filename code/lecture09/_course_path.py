"""For a clone without the install: the one bootstrap, code/lecture01/_course_path.py,
run from here so that lecture 9's scripts find it too (see that file)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parents[1] / "lecture01" / "_course_path.py"))
