#!/usr/bin/env bash
# Install dpmagic with its test dependencies, lint, and run the whole test suite:
#   1. ruff lint and format check;
#   2. pytest (everything but the fuzz run; extra pytest arguments pass through "$@");
#   3. the dedicated bad-input fuzz run (10,000 hypothesis cases; DPMAGIC_FUZZ_EXAMPLES changes that).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet -e ".[test]"
python3 -m ruff check dpmagic tests benchmarks scripts
python3 -m ruff format --check dpmagic tests benchmarks scripts

run_pytest() {
  set +e
  python3 -m pytest -q "$@"
  local status=$?
  set -e
  if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure for dpmagic" >&2
    return 1
  fi
  return "$status"
}

run_pytest "$@"
run_pytest -m fuzz tests/test_fuzz.py
