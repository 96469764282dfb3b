#!/usr/bin/env bash
# Create one virtual environment per peer tool (the peers' own dependency pins never meet dpmagic's).
# Usage: bash benchmarks/peers/setup.sh [DIR]   (default DIR: ~/.cache/dpmagic-peers)
set -euo pipefail
DIR="${1:-$HOME/.cache/dpmagic-peers}"
mkdir -p "$DIR"
PY="${PYTHON:-python3}"
declare -A PKGS=(
  [tumult]="tmlt.analytics==0.21.0"
  [smartnoise]="smartnoise-sql==1.0.10"
  [diffprivlib]="diffprivlib==0.6.6 scikit-learn<1.7"  # 0.6.6 imports sklearn.tree._tree.DOUBLE, gone in 1.7
  [pipelinedp]="pipeline-dp==0.3.1"
  [opendp]="opendp==0.16.0"
)
for name in "${!PKGS[@]}"; do
  if [ ! -x "$DIR/$name/bin/python" ]; then "$PY" -m venv "$DIR/$name"; fi
  "$DIR/$name/bin/python" -m pip install -q --disable-pip-version-check ${PKGS[$name]} pandas numpy
  echo "$name: $("$DIR/$name/bin/python" -m pip freeze | grep -i -E "^(tmlt.analytics|smartnoise-sql|diffprivlib|pipeline-dp|opendp)==" | tr '\n' ' ')"
done
