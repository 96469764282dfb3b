"""``%load_ext dpmagic`` stays light (issue 30, friction 9): registering the magics and the completion imports no
heavy library; they load when a feature needs them (timing: benchmarks/bench_load_ext.py, no timed assertion)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "pandas", "scipy", "sqlglot", "opendp", "networkx", "sympy", "matplotlib", "duckdb")


def test_load_ext_imports_no_heavy_library(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "before = set(sys.modules)\n"
        "shell.run_line_magic('load_ext', 'dpmagic')\n"
        "assert 'dpquery' in shell.magics_manager.magics['cell']\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules and m not in before]))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), IPYTHONDIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
