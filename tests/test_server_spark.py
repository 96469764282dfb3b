"""A Spark-backed data set behind ``dpmagic serve`` (issue 31): a Parquet path read in place by the Spark backend,
as the duckdb one reads its file; the same released shapes and charges as a local pandas session.  A real server
process on 127.0.0.1 (its own local SparkSession).  No statistical assertions."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from server_support import DATA, TOKENS, Server, write_config

import dpmagic
from dpmagic.errors import ConfigurationError
from dpmagic.presentation.remote import RemoteSession
from dpmagic.presentation.server.config import load_config


def spark_config(where: Path, data: str = "pums.parquet") -> Path:
    """write_config's PUMS served from Parquet by the Spark backend."""
    cfg = write_config(where)
    import duckdb

    df = pd.read_csv(where / "pums.csv")  # noqa: F841 (read by DuckDB's replacement scan)
    con = duckdb.connect()
    con.execute(f"COPY df TO '{where / 'pums.parquet'}' (FORMAT parquet)")
    con.close()
    text = cfg.read_text().replace('data = "pums.csv"', f'data = "{data}"')
    cfg.write_text(text.replace('backend = "pandas"', 'backend = "spark"'))
    return cfg


def test_spark_backend_reads_parquet_only(tmp_path: Path) -> None:
    cfg = spark_config(tmp_path)
    assert load_config(cfg).datasets["pums"].backend == "spark"
    cfg.write_text(cfg.read_text().replace('data = "pums.parquet"', 'data = "pums.csv"'))
    with pytest.raises(ConfigurationError, match="the spark backend reads Parquet"):
        load_config(cfg)


@pytest.mark.spark
@pytest.mark.slow
def test_spark_dataset_through_the_server(tmp_path: Path) -> None:
    if os.environ.get("DPMAGIC_SPARK_REQUIRED") != "1":
        pytest.importorskip("pyspark")
        if shutil.which("java") is None:
            pytest.skip("no Java runtime for Spark (bash scripts/java_setup.sh installs one)")
    srv = Server(spark_config(tmp_path))
    try:
        remote = RemoteSession(srv.url, "pums", TOKENS["alice"])
        local = dpmagic.Session(pd.read_csv(DATA / "pums.csv"), DATA / "pums.schema.json", "epsilon=1.0")
        for sql in (
            "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex",
            "SELECT educ, AVG(income) FROM pums WHERE age >= 30 GROUP BY educ",
            "SELECT COUNT(*) FROM pums WHERE age < 30",
        ):
            theirs, mine = remote.query(sql, epsilon=0.05), local.query(sql, epsilon=0.05)
            assert list(theirs.df.columns) == list(mine.df.columns) and len(theirs.df) == len(mine.df), sql
            assert theirs.cost == pytest.approx(mine.cost), sql
        batch = remote.batch("identity(race)", epsilon=0.05, keep="races")
        assert len(batch.df) == 6
        assert remote.estimate("races").point(1).variance > 0  # a free follow-up
        quota = remote.budget().summary()
        local.batch("identity(race)", epsilon=0.05)
        assert quota["spent"] == pytest.approx(local.spent, rel=1e-9) and quota["queries"] == 4
        assert len(srv.audit()["entries"]) == 4 and all(e["released"] for e in srv.audit()["entries"])
        remote.close()
    finally:
        srv.stop()
