from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from tests_support import DATA

from dpmagic import load_adult
from dpmagic.domain.schema import Schema


@pytest.fixture(autouse=True)
def private_ledger(tmp_path, monkeypatch):
    """Magics default to a durable ledger file: give every test its own."""
    monkeypatch.setenv("DPMAGIC_LEDGER", str(tmp_path / "ledger.sqlite"))


@pytest.fixture(scope="session")
def adult() -> tuple[pd.DataFrame, Schema]:
    return load_adult()


@pytest.fixture(scope="session")
def adult_schema(adult) -> Schema:
    return adult[1]


@pytest.fixture(scope="session")
def small_schema() -> Schema:
    return Schema.from_dict(
        {
            "table": "t",
            "columns": {
                "age": {"type": "int", "lower": 0, "upper": 10},
                "income": {"type": "float", "lower": 0.0, "upper": 100.0},
                "sex": {"type": "categorical", "values": ["F", "M"]},
                "grade": {"type": "categorical", "values": [1, 2, 3]},
                "city": {"type": "categorical", "values": ["a", "b", "c"]},
            },
        }
    )


@pytest.fixture
def small_df() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "age": [0, 3, 5, 5, 10, 7],
            "income": [0.0, 10.5, 50.0, 99.9, 100.0, 42.0],
            "sex": ["F", "M", "F", "M", "F", "F"],
            "grade": [1, 2, 3, 1, 2, 3],
            "city": ["a", "b", "c", "a", "b", "c"],
        }
    )


def pums_schema() -> Schema:
    return Schema.from_json(DATA / "pums.schema.json")


def schema_json(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "s.json"
    p.write_text(json.dumps(data))
    return p


@pytest.fixture(scope="module")
def ip():
    """A real IPython shell with dpmagic's magics loaded (one per test module)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext dpmagic", store_history=False)
    return shell


@pytest.fixture(scope="session")
def spark():
    """ONE local SparkSession for the whole test session (tests marked ``spark``; skip with ``-m "not spark"``)."""
    import os
    import shutil

    required = os.environ.get("DPMAGIC_SPARK_REQUIRED") == "1"  # CI (.ci/run): run, never skip
    if not required:
        pytest.importorskip("pyspark")
        if shutil.which("java") is None:
            pytest.skip("no Java runtime for Spark (bash scripts/java_setup.sh installs one)")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("dpmagic-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
