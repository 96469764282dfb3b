"""``python -m dpmagic ...``: the ``dpmagic`` command without relying on PATH (e.g. from a notebook kernel)."""

from __future__ import annotations

import sys

from dpmagic.cli import main

if __name__ == "__main__":
    sys.exit(main())
