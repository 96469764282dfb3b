#!/usr/bin/env bash
# Install dpmagic and open the quickstart notebook in JupyterLab.
#   bash scripts/demo.sh              # JupyterLab on notebooks/quickstart.ipynb (prints the URL that opens it)
#   bash scripts/demo.sh --headless   # execute the notebook in a real kernel and print its results
# Works as a normal user and as root (JupyterLab gets --allow-root), in or out of a virtual environment
# (an OS-managed Python gets a private ./.venv: see scripts/_python.sh).  The demo's Jupyter configuration
# (jupyter-config/demo/: the notebooks' .md/.py text twins hidden in the file browser, no news or update toasts)
# applies to this server only (JUPYTER_CONFIG_PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DPMAGIC_DEMO_PYTHON:-}" ] && PY="$DPMAGIC_DEMO_PYTHON" || . scripts/_python.sh
if [ "${DPMAGIC_DEMO_NO_INSTALL:-}" != "1" ]; then   # =1: the browser test, on an environment set up already
  echo "dpmagic demo: installing into $("$PY" -c 'import sys; print(sys.prefix)')"
  "$PY" -m pip install --quiet -e .
  # SQL highlighting in %%dpquery / %%dpbatch cells: the JupyterLab extension, built from labextension/ (npm)
  PY="$PY" bash scripts/build_labextension.sh || echo "dpmagic demo: the JupyterLab extension was not built:" \
    "%%dpquery cells will not be highlighted as SQL (completion works without it)" >&2
fi

# where the `dpmagic` command is: on PATH only when this Python's bin directory is
bindir="$("$PY" -c 'import sys, os; print(os.path.join(sys.prefix, "bin"))')"
if [ "$(command -v dpmagic 2>/dev/null || true)" = "$bindir/dpmagic" ]; then
  cli="dpmagic"
else
  cli="$bindir/dpmagic"
  case "$bindir" in "$PWD"/*) cli="./${bindir#"$PWD"/}/dpmagic" ;; esac
fi
say_cli() {
  echo "dpmagic demo: the ledger and overlap commands:  $cli ledger show   $cli overlap --help"
  if [ "$cli" != "dpmagic" ] && [ -f "$(dirname "$cli")/activate" ]; then
    echo "              (or put them on PATH first:  source $(dirname "$cli")/activate)"
  fi
}

if [ "${1:-}" = "--headless" ]; then
  "$PY" scripts/run_notebook.py notebooks/quickstart.ipynb
  say_cli
  exit 0
fi
extra=()
if [ "$(id -u)" -eq 0 ]; then
  extra+=(--allow-root)   # JupyterLab refuses root without it ("Running as root is not recommended")
fi
export JUPYTER_CONFIG_PATH="$PWD/jupyter-config/demo${JUPYTER_CONFIG_PATH:+:$JUPYTER_CONFIG_PATH}"
port="${DPMAGIC_DEMO_PORT:-$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
token="${DPMAGIC_DEMO_TOKEN:-$("$PY" -c 'import secrets; print(secrets.token_hex(24))')}"
url="http://127.0.0.1:$port/lab/tree/quickstart.ipynb?token=$token"
echo
echo "dpmagic demo: open the quickstart notebook at"
echo
echo "    $url"
echo
say_cli
echo
exec "$PY" -m jupyterlab "${extra[@]}" --ServerApp.ip=127.0.0.1 "--ServerApp.port=$port" \
  --ServerApp.port_retries=0 "--IdentityProvider.token=$token" --ServerApp.root_dir=notebooks \
  --LabApp.default_url=/lab/tree/quickstart.ipynb "$@"
