"""``python -m dpmagic ...``: the ``dpmagic`` command without relying on PATH (e.g. from a notebook kernel)."""

from __future__ import annotations

from dpmagic.presentation.cli import run

if __name__ == "__main__":
    run()
