"""Binding errors do not quote the data unless the custodian asks (issue 24, "binding errors quote the data").

A binding error used to name up to five undeclared category values and the exact number of values out of
bounds.  Binding may be done by a server or under a schema an analyst supplied, where such an error is a free
read of the rows; now the default message names the column and the kind of problem only, on every backend, and
``diagnostics=True`` (the data custodian's switch, for fixing the data) shows the details.
"""

from __future__ import annotations

import re

import duckdb
import pandas as pd
import pytest

from dpmagic import Session
from dpmagic.backends.bind import backend_for
from dpmagic.domain.schema import Schema
from dpmagic.errors import DataValidationError

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "race": {"type": "categorical", "values": ["A", "B"]},
            "age": {"type": "int", "lower": 0, "upper": 100},
            "w": {"type": "float", "lower": 0.0, "upper": 1.0},
        },
    }
)
GOOD = pd.DataFrame({"race": ["A", "B", "A"], "age": [1, 2, 3], "w": [0.5, 0.25, 0.75]})
SECRETS = ["Zorblax-7", "Quuxian", "1234567"]
BAD = {
    "race": GOOD.assign(race=["A", SECRETS[0], SECRETS[1]]),
    "age": GOOD.assign(age=[1, 1234567, 7654321]),
    "w": GOOD.assign(w=[0.5, 3.5, 17.25]),
}


def _sources(df: pd.DataFrame):
    yield "pandas", df
    yield "duckdb", duckdb.connect().from_df(df)


def _message(data, **kw) -> str:
    with pytest.raises(DataValidationError) as info:
        Session(data, SCHEMA, "epsilon=1", **kw)
    e = info.value
    return f"{e} {getattr(e, 'hint', '') or ''}"


@pytest.mark.parametrize("column", list(BAD))
def test_default_binding_errors_quote_no_value_and_no_count(column) -> None:
    for name, data in _sources(BAD[column]):
        msg = _message(data)
        assert f"column {column!r}" in msg and "outside its declared" in msg, name
        for secret in [*SECRETS, "3.5", "17.25", "7654321"]:
            assert secret not in msg, (name, msg)
        assert not re.search(r"\b2\b", msg), (name, msg)  # two bad values in each frame: no count either
        assert "diagnostics=True" in msg  # the custodian learns how to see them


def test_diagnostics_show_the_details_to_the_custodian() -> None:
    for name, data in _sources(BAD["race"]):
        msg = _message(data, diagnostics=True)
        assert SECRETS[0] in msg and SECRETS[1] in msg, name
    for name, data in _sources(BAD["age"]):
        assert "has 2 value(s) outside" in _message(data, diagnostics=True), name
    assert backend_for(GOOD, SCHEMA, diagnostics=True).schema is SCHEMA


@pytest.mark.spark
def test_spark_binding_errors_quote_no_value(spark) -> None:
    msg = _message(spark.createDataFrame(BAD["race"]))
    assert SECRETS[0] not in msg and SECRETS[1] not in msg
    assert SECRETS[0] in _message(spark.createDataFrame(BAD["race"]), diagnostics=True)
