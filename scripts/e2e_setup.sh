#!/usr/bin/env bash
# Install what the browser test (tests/e2e/test_browser.py) needs on a fresh Debian machine, as root:
# Debian's Chromium (/usr/bin/chromium) and the Python `playwright` package, which drives that browser.
# Never `playwright install`: it downloads browser builds, which this environment cannot fetch.
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "e2e_setup: /usr/bin/chromium is missing and installing it needs root (apt-get install chromium)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core > /dev/null
fi
python3 -m pip install --quiet playwright
/usr/bin/chromium --version 2>/dev/null || true
