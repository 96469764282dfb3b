#!/usr/bin/env bash
# Install dpmagic with its test dependencies, lint, and run the whole test suite:
#   1. ruff lint and format check, mypy on dpmagic/ ([tool.mypy] in pyproject.toml) and the layer contract
#      (import-linter, [tool.importlinter] in pyproject.toml);
#   2. pytest (everything but the fuzz run; extra pytest arguments pass through "$@");
#   3. the dedicated bad-input fuzz run (10,000 hypothesis cases; DPMAGIC_FUZZ_EXAMPLES changes that).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_python.sh
"$PY" -m pip install --quiet -e ".[test]"
# the JupyterLab extension (SQL highlighting), built from its TypeScript source (labextension/, npm ci) and
# linked into this environment; the browser test checks it in JupyterLab and Notebook 7
PY="$PY" bash scripts/build_labextension.sh

# System packages of the browser test (Debian's Chromium) and the Spark tests (a Java 17 runtime): installed here
# when this user may (root; Java also through a password-less sudo), so that this one command sets up a fresh
# machine.  DPMAGIC_SKIP_SYSTEM_SETUP=1 skips it; without them those tests are skipped, loudly (below).
if [ "${DPMAGIC_SKIP_SYSTEM_SETUP:-}" != "1" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    bash scripts/e2e_setup.sh || echo "test.sh: the browser test's set-up failed (see above)" >&2
    bash scripts/java_setup.sh || echo "test.sh: the Java set-up failed (see above)" >&2
  elif ! command -v java >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    bash scripts/java_setup.sh || echo "test.sh: the Java set-up failed (see above)" >&2
  fi
fi
"$PY" -m ruff check dpmagic tests benchmarks scripts
"$PY" -m ruff format --check dpmagic tests benchmarks scripts
"$PY" -m mypy dpmagic
# import-linter's `lint-imports` script, run by this Python (the package has no __main__)
"$PY" -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())'

# The browser test needs Debian's Chromium and the playwright package; without them it is skipped — say so loudly.
browser_missing=""
chromium="${DPMAGIC_E2E_CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] || browser_missing="$chromium is missing"
"$PY" -c "import playwright.sync_api" 2>/dev/null || browser_missing="${browser_missing:+$browser_missing; }the Python package playwright is missing"
warn_browser() {
  if [ -n "$browser_missing" ] && [ "${DPMAGIC_E2E_REQUIRED:-}" != "1" ]; then
    {
      echo
      echo "!!! BROWSER TEST SKIPPED (tests/e2e/test_browser.py): $browser_missing."
      echo "!!! The live budget panel and plots were NOT checked in a real browser."
      echo "!!! Install what it needs with:  sudo bash scripts/e2e_setup.sh   (then re-run bash scripts/test.sh)"
      echo
    } >&2
  fi
}
warn_browser

run_pytest() {
  set +e
  "$PY" -m pytest -q "$@"
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
warn_browser   # again at the end, where it cannot scroll out of sight
