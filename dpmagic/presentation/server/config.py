"""The custodian's configuration file of ``dpmagic serve`` (TOML or JSON), and token hashing.

::

    [server]
    state_dir = "state"                  # the ledger (ledger.sqlite) and the server's own state (server.sqlite)
    admin_token_hash = "sha256:…"        # the custodian's token (dpmagic serve hash-token)
    max_body_bytes = 65536               # larger requests: 413, read no further
    rate_limit_per_minute = 600          # per analyst; over it: 429
    response_floor_seconds = 0.25        # a request that read data answers on a multiple of this after it began
    spark_master = "local[2]"            # the Spark master of the server's one SparkSession (backend = "spark")

    [[datasets]]
    id = "adult"
    data = "adult.csv"                   # CSV or Parquet; relative paths are relative to this file
    schema = "adult.schema.json"
    backend = "pandas"                   # pandas (loaded in the server), duckdb (read in place) or spark
                                         # (a Parquet file or directory read by Spark in place)
    budget = "epsilon=1.0"               # the GLOBAL budget: everyone's queries, by their maximum overlap
    analyst_quota = 0.5                  # each analyst's own maximum overlap (default: the global budget)
    neighbors = "add-remove"             # or "replace"

    [[analysts]]
    id = "alice"
    token_hash = "sha256:…"
    quotas = { adult = 0.3 }             # overrides analyst_quota for this analyst

Tokens are 256-bit random strings (:func:`new_token`), so a plain SHA-256 is a sufficient hash at rest: a slow
hash (scrypt) protects guessable passwords and would only give a client a way to burn the server's CPU.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpmagic.errors import ConfigurationError

__all__ = ["ServerConfig", "DatasetConfig", "AnalystConfig", "load_config", "hash_token", "token_matches", "new_token"]

BACKENDS = ("pandas", "duckdb", "spark")
#: what the Spark backend reads (a Parquet file, or a directory of Parquet part files)
SPARK_SUFFIXES = (".parquet", ".pq", "")
_ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """``sha256:<hex>`` of a token: what the configuration and the server's state keep (never the token)."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, stored: str) -> bool:
    """Does ``token`` hash to ``stored``?  Constant-time in the comparison."""
    return hmac.compare_digest(hash_token(token).encode(), stored.encode())


def check_id(value: Any, what: str) -> str:
    """An analyst or data-set id: a non-empty string of letters, digits, ``-``, ``_``, ``.`` (at most 64)."""
    if not isinstance(value, str) or not value or len(value) > 64 or not set(value) <= _ID_CHARS:
        raise ConfigurationError(f"{what} must be 1-64 letters, digits, '-', '_' or '.', got {value!r}")
    return value


def check_hash(value: Any, what: str) -> str:
    if not (isinstance(value, str) and value.startswith("sha256:") and len(value) == 71):
        raise ConfigurationError(
            f"{what} must be 'sha256:<64 hex digits>' (dpmagic serve hash-token), got {value!r}",
            hint="never put a token itself in the configuration",
        )
    try:
        int(value[7:], 16)
    except ValueError:
        raise ConfigurationError(f"{what} is not hexadecimal") from None
    return value


@dataclass(frozen=True)
class DatasetConfig:
    id: str
    data: Path
    schema: Path
    backend: str
    budget: str
    analyst_quota: float | None
    neighbors: str = "add-remove"
    bound: str = "exact"


@dataclass(frozen=True)
class AnalystConfig:
    id: str
    token_hash: str
    quotas: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerConfig:
    state_dir: Path
    admin_token_hash: str
    datasets: dict[str, DatasetConfig]
    analysts: dict[str, AnalystConfig]
    max_body_bytes: int = 65536
    rate_limit_per_minute: int = 600
    response_floor_seconds: float = 0.25
    spark_master: str = "local[2]"


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
        raise ConfigurationError(f"{what} must be a positive number, got {value!r}")
    return float(value)


def load_config(path: str | Path) -> ServerConfig:
    """Read and check a configuration file (``.toml`` or ``.json``); one :class:`ConfigurationError` naming the
    first problem otherwise.  Relative paths are relative to the file's directory."""
    p = Path(path)
    if not p.is_file():
        raise ConfigurationError(f"no configuration file at {p}")
    try:
        raw = json.loads(p.read_text()) if p.suffix == ".json" else tomllib.loads(p.read_text())
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"{p} is not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigurationError(f"{p}: the configuration must be a table / object")
    base = p.parent
    server = raw.get("server", {})
    unknown = set(raw) - {"server", "datasets", "analysts"}
    if unknown:
        raise ConfigurationError(f"{p}: unknown section(s) {sorted(unknown)}")
    if "admin_token_hash" not in server:
        raise ConfigurationError(f"{p}: [server] needs admin_token_hash (dpmagic serve hash-token)")
    datasets: dict[str, DatasetConfig] = {}
    for d in raw.get("datasets", []):
        did = check_id(d.get("id"), "a data set's id")
        if did in datasets:
            raise ConfigurationError(f"data set {did!r} is declared twice")
        backend = d.get("backend", "pandas")
        if backend not in BACKENDS:
            raise ConfigurationError(f"data set {did!r}: backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        for k in ("data", "schema", "budget"):
            if not isinstance(d.get(k), str):
                raise ConfigurationError(f"data set {did!r} needs {k} (a string)")
        if backend == "spark" and Path(d["data"]).suffix.lower() not in SPARK_SUFFIXES:
            raise ConfigurationError(
                f"data set {did!r}: the spark backend reads Parquet (a .parquet file or a directory of them), "
                f"got {d['data']!r}",
                hint='convert the file to Parquet, or serve it with backend = "duckdb"',
            )
        quota = d.get("analyst_quota")
        datasets[did] = DatasetConfig(
            id=did,
            data=base / d["data"],
            schema=base / d["schema"],
            backend=backend,
            budget=d["budget"],
            analyst_quota=None if quota is None else _positive(quota, f"data set {did!r}: analyst_quota"),
            neighbors=d.get("neighbors", "add-remove"),
            bound=d.get("bound", "exact"),
        )
    if not datasets:
        raise ConfigurationError(f"{p}: no [[datasets]]")
    analysts: dict[str, AnalystConfig] = {}
    for a in raw.get("analysts", []):
        aid = check_id(a.get("id"), "an analyst's id")
        if aid in analysts:
            raise ConfigurationError(f"analyst {aid!r} is declared twice")
        quotas = a.get("quotas", {})
        for ds, q in quotas.items():
            if ds not in datasets:
                raise ConfigurationError(f"analyst {aid!r} has a quota on an undeclared data set {ds!r}")
            _positive(q, f"analyst {aid!r}: quota on {ds!r}")
        analysts[aid] = AnalystConfig(
            aid,
            check_hash(a.get("token_hash"), f"analyst {aid!r}: token_hash"),
            {k: float(v) for k, v in quotas.items()},
        )
    return ServerConfig(
        state_dir=base / server.get("state_dir", "state"),
        admin_token_hash=check_hash(server["admin_token_hash"], "[server] admin_token_hash"),
        datasets=datasets,
        analysts=analysts,
        max_body_bytes=int(_positive(server.get("max_body_bytes", 65536), "max_body_bytes")),
        rate_limit_per_minute=int(_positive(server.get("rate_limit_per_minute", 600), "rate_limit_per_minute")),
        response_floor_seconds=float(server.get("response_floor_seconds", 0.25)),
        spark_master=_master(server.get("spark_master", "local[2]")),
    )


def _master(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"[server] spark_master must be a Spark master URL such as local[2], got {value!r}")
    return value.strip()
