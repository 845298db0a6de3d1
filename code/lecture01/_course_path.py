"""For a clone without `pip install -r requirements.txt`: puts code/ on sys.path, so the
course toolkit (the packages lecture01 and lecture09) imports by name. Every numbered
script imports this only when `import lecture01` fails; the install is the usual way."""

import sys
from pathlib import Path

CODE = str(Path(__file__).resolve().parents[1])
if CODE not in sys.path:
    sys.path.insert(0, CODE)
