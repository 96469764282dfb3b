#!/usr/bin/env bash
# Install what the browser end-to-end test (tests/e2e/test_browser.py) needs on a fresh Debian machine, as root:
# Debian's Chromium (/usr/bin/chromium), fonts for readable screenshots, and the Python `playwright` package.
# It never runs `playwright install` (that downloads Playwright's own browsers; the test drives /usr/bin/chromium).
# Idempotent: does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(chromium fonts-dejavu-core fonts-liberation)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "e2e_setup: need root to apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "e2e_setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -x /usr/bin/chromium ]; then
  echo "e2e_setup: /usr/bin/chromium is missing after installing the 'chromium' package" >&2
  exit 1
fi

. scripts/_python.sh   # the same Python as demo.sh / test.sh (a ./.venv on an OS-managed Python)
if ! "$PY" -c "import playwright.sync_api" 2>/dev/null; then
  echo "e2e_setup: pip install playwright"
  "$PY" -m pip install --quiet playwright
fi
echo "e2e_setup: $(/usr/bin/chromium --version 2>/dev/null | head -n 1); playwright $("$PY" -m pip show playwright 2>/dev/null | sed -n 's/^Version: //p')"
