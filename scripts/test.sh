#!/usr/bin/env bash
# Install dpmagic with its test dependencies, lint, and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet -e ".[test]"
python3 -m ruff check dpmagic tests benchmarks
python3 -m ruff format --check dpmagic tests benchmarks
set +e
python3 -m pytest -q "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure for dpmagic" >&2
  exit 1
fi
exit "$status"
