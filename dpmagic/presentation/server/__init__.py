"""``dpmagic serve``: a custodian server in front of the data, behind the same magics (docs/server.md).

:mod:`~dpmagic.presentation.server.config` (the custodian's file, token hashes), :mod:`~.state` (the data sets'
sessions, quotas, idempotency), :mod:`~.app` (the HTTP routes and hardening), :mod:`~.wire` (the JSON both ends
share).  The client is :class:`dpmagic.presentation.remote.RemoteSession` (``%dpsession --server URL``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["serve"]


def serve(config: str | Path, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Load ``config``, bind its data sets and serve them with uvicorn until interrupted."""
    import uvicorn

    from dpmagic.presentation.server.app import create_app
    from dpmagic.presentation.server.config import load_config
    from dpmagic.presentation.server.state import Custodian

    app = create_app(Custodian(load_config(config)))
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
