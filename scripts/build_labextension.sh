#!/usr/bin/env bash
# Build dpmagic's JupyterLab extension (SQL highlighting in %%dpquery / %%dpbatch cells) from its TypeScript source
# in labextension/ with the standard tooling from the npm registry (npm ci: TypeScript, @jupyterlab/builder), into
# dpmagic/labextension/ (git-ignored), and make the Python environment's JupyterLab / Notebook 7 load it.
#   bash scripts/build_labextension.sh          # build if the source changed, then link into "$PY"'s prefix
#   bash scripts/build_labextension.sh --force  # always rebuild (CI: built from source, never trusted stale)
# A wheel (`pip install .`) ships the built extension in share/jupyter/labextensions/ (pyproject's data-files);
# an editable install (`pip install -e .`, what demo.sh and test.sh do) installs no data files, so this script
# links share/jupyter/labextensions/dpmagic-labextension to dpmagic/labextension/ (`jupyter labextension develop`).
# Needs Node.js >= 18 and npm; as root on Debian/Ubuntu it apt-get installs them when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${PY:-}" ] || . scripts/_python.sh
force="${1:-}"
out=dpmagic/labextension

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "build_labextension: apt-get install nodejs npm"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "build_labextension: Node.js and npm are needed to build the JupyterLab extension (SQL highlighting);" \
      "install them (Debian/Ubuntu: sudo apt-get install nodejs npm) and re-run" >&2
    exit 1
  fi
fi

stale=0
if [ "$force" = "--force" ] || [ ! -f "$out/package.json" ]; then
  stale=1
elif [ -n "$(find labextension/src labextension/style labextension/package.json labextension/package-lock.json labextension/tsconfig.json \
  -newer "$out/package.json" 2>/dev/null | head -n 1)" ]; then
  stale=1
fi
if [ "$stale" = 1 ]; then
  (
    cd labextension
    if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
      echo "build_labextension: npm ci (labextension/package-lock.json)"
      npm ci --no-audit --no-fund --loglevel=error
    fi
    rm -rf lib tsconfig.tsbuildinfo "../$out"
    npx --no-install tsc
    # @jupyterlab/builder's webpack build against the installed JupyterLab's core packages (shared singletons)
    core="$("$PY" -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')"
    npx --no-install build-labextension --core-path "$core" . >/dev/null
  )
  echo "build_labextension: built $out/ from labextension/src"
fi
[ -f "$out/package.json" ] && ls "$out"/static/remoteEntry.*.js >/dev/null

# link into the environment (an editable install has no data files); a wheel's copy is replaced by the link
dest="$("$PY" -c 'import os, sys; print(os.path.join(sys.prefix, "share", "jupyter", "labextensions"))')"
mkdir -p "$dest"
if [ "$(readlink -f "$dest/dpmagic-labextension" 2>/dev/null)" != "$(readlink -f "$out")" ]; then
  rm -rf "$dest/dpmagic-labextension"
  ln -s "$PWD/$out" "$dest/dpmagic-labextension"
fi
# JupyterLab must list it as enabled and OK
if ! "$PY" -m jupyterlab.labextensions list 2>&1 | grep -E "dpmagic-labextension v[0-9.]+ .*enabled.*OK" >/dev/null; then
  "$PY" -m jupyterlab.labextensions list >&2 || true
  echo "build_labextension: JupyterLab does not list dpmagic-labextension as enabled and OK" >&2
  exit 1
fi
echo "build_labextension: dpmagic-labextension enabled in $dest"
