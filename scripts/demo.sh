#!/usr/bin/env bash
# Install dpmagic and open the quickstart notebook in JupyterLab.
#   bash scripts/demo.sh              # JupyterLab on notebooks/quickstart.ipynb
#   bash scripts/demo.sh --headless   # execute the notebook in a real kernel and print its results
# Works as a normal user and as root (JupyterLab gets --allow-root), in or out of a virtual environment
# (an OS-managed Python gets a private ./.venv: see scripts/_python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_python.sh
echo "dpmagic demo: installing into $("$PY" -c 'import sys; print(sys.prefix)')"
"$PY" -m pip install --quiet -e .
# SQL highlighting in %%dpquery / %%dpbatch cells: the JupyterLab extension, built from labextension/ (npm)
PY="$PY" bash scripts/build_labextension.sh || echo "dpmagic demo: the JupyterLab extension was not built:" \
  "%%dpquery cells will not be highlighted as SQL (completion works without it)" >&2
if [ "${1:-}" = "--headless" ]; then
  exec "$PY" scripts/run_notebook.py notebooks/quickstart.ipynb
fi
extra=()
if [ "$(id -u)" -eq 0 ]; then
  extra+=(--allow-root)   # JupyterLab refuses root without it ("Running as root is not recommended")
fi
exec "$PY" -m jupyterlab "${extra[@]}" "$@" notebooks/quickstart.ipynb
