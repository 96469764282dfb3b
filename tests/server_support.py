"""A real ``dpmagic serve`` in a subprocess on 127.0.0.1 and a free port (support module of test_server*.py)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from dpmagic.presentation.server.config import hash_token

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "dpmagic" / "data"
ADMIN = "admin-token-for-tests"
TOKENS = {"alice": "alice-token", "bob": "bob-token", "carol": "carol-token"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(
    where: Path, *, budget: str = "epsilon=1.0", quota: float = 0.6, floor: float = 0.0, rate: int = 100000
) -> Path:
    """A configuration serving PUMS (pandas) as ``pums`` to alice, bob and carol (carol: quota 0.25)."""
    shutil.copy(DATA / "pums.csv", where / "pums.csv")
    shutil.copy(DATA / "pums.schema.json", where / "pums.schema.json")
    analysts = "".join(
        f'\n[[analysts]]\nid = "{a}"\ntoken_hash = "{hash_token(t)}"\n'
        + ("quotas = { pums = 0.25 }\n" if a == "carol" else "")
        for a, t in TOKENS.items()
    )
    cfg = where / "server.toml"
    cfg.write_text(
        f"""[server]
state_dir = "state"
admin_token_hash = "{hash_token(ADMIN)}"
response_floor_seconds = {floor}
rate_limit_per_minute = {rate}
max_body_bytes = 16384

[[datasets]]
id = "pums"
data = "pums.csv"
schema = "pums.schema.json"
backend = "pandas"
budget = "{budget}"
analyst_quota = {quota}
{analysts}"""
    )
    return cfg


class Server:
    """``dpmagic serve --config CFG`` in a subprocess; :meth:`stop` ends it by its process id."""

    def __init__(self, config: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        full_env.pop("DPMAGIC_LEDGER_KEY_FILE", None)
        full_env.pop("DPMAGIC_LEDGER_KEY", None)
        self.log = config.parent / f"server-{self.port}.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dpmagic.presentation.cli",
                "serve",
                "--config",
                str(config),
                "--port",
                str(self.port),
            ],
            env=full_env,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the server did not start")
            time.sleep(0.2)

    def client(self, who: str) -> httpx.Client:
        token = ADMIN if who == "admin" else TOKENS.get(who, who)
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def audit(self, dataset: str = "pums") -> dict[str, Any]:
        with self.client("admin") as c:
            r = c.get(f"/v1/admin/datasets/{dataset}/audit")
            assert r.status_code == 200, r.text
            return dict(r.json())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
