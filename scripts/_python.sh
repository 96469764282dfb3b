# Sourced by demo.sh and test.sh: choose the Python to install dpmagic into, as a newcomer's machine allows.
#   * inside a virtual environment (or conda): that one;
#   * otherwise the system python3 if pip may install into it;
#   * otherwise (PEP 668 "externally managed" Debian/Ubuntu Python, or no pip at all) a private virtual
#     environment in ./.venv, created once (as root, `apt-get install python3-venv` first if venv is missing).
# Sets PY to the interpreter to use.  Works the same as root and as a normal user.
export PIP_ROOT_USER_ACTION=ignore        # root: no "running pip as root" warning
export PIP_DISABLE_PIP_VERSION_CHECK=1
PY=python3
if ! command -v python3 >/dev/null 2>&1; then
  echo "dpmagic: python3 (>= 3.11) is needed; on Debian/Ubuntu: apt-get install python3 python3-venv" >&2
  exit 1
fi
if [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
elif python3 -c 'import sys, os; sys.exit(0 if (sys.prefix != sys.base_prefix or os.environ.get("CONDA_PREFIX")) else 1)'; then
  PY=python3
elif python3 -m pip --version >/dev/null 2>&1 && ! python3 -c 'import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
  PY=python3
else
  echo "dpmagic: the system Python is managed by the OS (or has no pip): creating a virtual environment in ./.venv"
  if ! python3 -m venv .venv 2>/dev/null; then
    rm -rf .venv
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
      ver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      echo "dpmagic: apt-get install python3-venv (python${ver}-venv)"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv "python${ver}-venv" >/dev/null || \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv .venv
    else
      echo "dpmagic: python3 -m venv failed; install it (Debian/Ubuntu: sudo apt-get install python3-venv) and re-run" >&2
      exit 1
    fi
  fi
  PY=.venv/bin/python
  "$PY" -m pip install --quiet --upgrade pip
fi
