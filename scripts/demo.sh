#!/usr/bin/env bash
# Install dpmagic and open the quickstart notebook in JupyterLab.
#   bash scripts/demo.sh              # JupyterLab on notebooks/quickstart.ipynb
#   bash scripts/demo.sh --headless   # execute the notebook in a real kernel and print its results
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet -e .
if [ "${1:-}" = "--headless" ]; then
  exec python3 scripts/run_notebook.py notebooks/quickstart.ipynb
fi
exec python3 -m jupyter lab notebooks/quickstart.ipynb
