"""Browser end-to-end tests: register the ``e2e`` marker (harmless if pyproject.toml registers it too)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: end-to-end test in a real JupyterLab and headless Chromium (tests/e2e/, ~1 min)"
    )
