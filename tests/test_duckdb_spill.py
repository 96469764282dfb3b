"""DuckDB's spill files are raw data: a private directory, removed on close (issue 24, finding 5).

dpmagic's own connection spilled to ``/tmp/dpmagic_duckdb_<pid>``, made with the process umask (0755, files
0644) and a name any local user could predict and create first.  Now the directory is ``tempfile.mkdtemp``'s
(0700, unpredictable) and is removed with its files on close, when the backend is dropped and at exit.  The
same large MEDIAN also ran out of memory after the charge (a data-dependent failure): a query whose aggregate
state, bounded from public information, exceeds the memory limit is now refused before the charge, and any
engine failure after it is the session's one fixed message.
"""

from __future__ import annotations

import gc
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpmagic
from dpmagic import Session
from dpmagic.backends.duckdb import BYTES_PER_GROUP, DuckDBBackend
from dpmagic.domain.schema import Schema
from dpmagic.errors import ConfigurationError, DPMagicError

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "g": {"type": "categorical", "values": [f"g{i}" for i in range(100)]},
            "x": {"type": "int", "lower": 0, "upper": 10_000},
            "f": {"type": "float", "lower": 0.0, "upper": 1.0},
        },
    }
)


@pytest.fixture(scope="module")
def parquet(tmp_path_factory) -> Path:
    n = 300_000
    rng = np.random.default_rng(5)
    df = pd.DataFrame(
        {"g": rng.choice([f"g{i}" for i in range(100)], n), "x": rng.integers(0, 10_001, n), "f": rng.random(n)}
    )
    path = tmp_path_factory.mktemp("spill") / "t.parquet"
    con = duckdb.connect()
    con.register("df", df)
    con.execute(f"COPY df TO '{path}' (FORMAT parquet)")
    return path


BIG = "SELECT COUNT(*) FROM (SELECT DISTINCT hash(i) % 100000007 AS a, i % 77 AS b FROM range(3000000) t(i))"


def _watch(directory: str, work) -> set[str]:
    """The names of the files that appear in ``directory`` while ``work()`` runs."""
    seen: set[str] = set()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.update(os.listdir(directory))
            time.sleep(0.005)

    t = threading.Thread(target=poll)
    t.start()
    try:
        work()
    finally:
        done.set()
        t.join()
    return seen


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_spill_directory_is_private_unpredictable_and_removed_on_close(parquet) -> None:
    old = Path(tempfile.gettempdir()) / f"dpmagic_duckdb_{os.getpid()}"
    old.mkdir(mode=0o777, exist_ok=True)  # the old predictable name, pre-created by "another user"
    try:
        a = DuckDBBackend(str(parquet), SCHEMA, memory_limit="24MB", threads=1)
        b = DuckDBBackend(str(parquet), SCHEMA)
        assert a.spill_directory is not None and b.spill_directory is not None
        assert Path(a.spill_directory) != old and a.spill_directory != b.spill_directory
        assert Path(a.spill_directory).parent == Path(tempfile.gettempdir())
        assert _mode(a.spill_directory) == 0o700
        # a statement larger than 24 MB spills into it (files appear there), and the directory stays private
        seen = _watch(a.spill_directory, lambda: a._con.execute(BIG).fetchall())
        assert any(f.startswith("duckdb_temp") for f in seen)
        assert _mode(a.spill_directory) == 0o700
        spill = a.spill_directory
        a.close()
        assert not os.path.exists(spill)
        a.close()  # idempotent
        spill_b = b.spill_directory
        del b
        gc.collect()
        assert not os.path.exists(spill_b)  # removed when the backend is dropped
    finally:
        old.rmdir()


def test_spill_directory_is_removed_at_interpreter_exit(parquet) -> None:
    root = Path(dpmagic.__file__).resolve().parents[1]
    code = (
        "import sys\n"
        "from dpmagic.backends.duckdb import DuckDBBackend\n"
        "from dpmagic.domain.schema import Schema\n"
        f"s = Schema.from_dict({SCHEMA.to_dict()!r})\n"
        f"b = DuckDBBackend({str(parquet)!r}, s)\n"
        "print(b.spill_directory)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root, env={**os.environ}
    )
    spill = out.stdout.strip().splitlines()[-1]
    assert Path(spill).name.startswith("dpmagic_duckdb_") and not os.path.exists(spill)


def test_a_too_large_aggregate_is_refused_before_the_charge(parquet) -> None:
    """100 cells × (2 · 10,001 + 1) bins of a MEDIAN need more than a 16 MB limit: refused, nothing spent; the
    same query fits a larger limit; a COUNT under the small limit is answered."""
    sql = "SELECT g, MEDIAN(x) AS m FROM t GROUP BY g"
    con = duckdb.connect(config={"memory_limit": "16MB"})
    small = Session(con.read_parquet(str(parquet)), SCHEMA, "epsilon=1")
    assert 100 * 20_003 * BYTES_PER_GROUP > 16 * 10**6
    with pytest.raises(ConfigurationError, match="memory limit"):
        small.query(sql, epsilon=0.5)
    assert small.spent == 0 and len(small.accountant) == 0
    small.query("SELECT g, COUNT(*) AS n FROM t GROUP BY g", epsilon=0.5)
    big = Session(duckdb.connect(config={"memory_limit": "1GB"}).read_parquet(str(parquet)), SCHEMA, "epsilon=1")
    assert len(big.query(sql, epsilon=0.5).df) == 100


def test_an_engine_failure_after_the_charge_is_one_fixed_message(parquet, monkeypatch) -> None:
    s = Session(str(parquet), SCHEMA, "epsilon=1")

    def oom(self, statement):
        raise duckdb.OutOfMemoryException("Out of Memory Error: 123,456 bytes for value 0.1234")

    monkeypatch.setattr(DuckDBBackend, "_run", oom)
    with pytest.raises(DPMagicError) as info:
        s.query("SELECT MEDIAN(f) AS m FROM t", epsilon=0.5)
    assert str(info.value).startswith("internal error while answering") and "123" not in str(info.value)
    assert s.spent == pytest.approx(0.5)  # charged: the failure came after the read
