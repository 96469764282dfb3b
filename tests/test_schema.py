from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from dpmagic.domain.schema import CategoricalColumn, NumericColumn, Schema, UnsafeInferenceWarning
from dpmagic.errors import DataValidationError, SchemaError


def test_load_adult_schema(adult_schema: Schema) -> None:
    assert adult_schema.table == "adult"
    assert isinstance(adult_schema["age"], NumericColumn)
    assert adult_schema["age"].lower == 17 and adult_schema["age"].upper == 90
    assert isinstance(adult_schema["sex"], CategoricalColumn)
    assert adult_schema["sex"].values == ("Female", "Male")
    assert len(adult_schema) == 15


def test_roundtrip_dict(adult_schema: Schema) -> None:
    again = Schema.from_dict(adult_schema.to_dict())
    assert again.to_dict() == adult_schema.to_dict()
    assert again.fingerprint() == adult_schema.fingerprint()


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({}, "columns"),
        ({"columns": {}}, "columns"),
        ({"columns": {"a": {"type": "text"}}}, "unknown type"),
        ({"columns": {"a": {"type": "int", "lower": 0}}}, "upper"),
        ({"columns": {"a": {"type": "int", "lower": 5, "upper": 1}}}, "above upper"),
        ({"columns": {"a": {"type": "int", "lower": 0.5, "upper": 1}}}, "whole"),
        ({"columns": {"a": {"type": "float", "lower": "x", "upper": 1}}}, "finite number"),
        ({"columns": {"a": {"type": "categorical", "values": []}}}, "non-empty"),
        ({"columns": {"a": {"type": "categorical", "values": ["x", "x"]}}}, "duplicates"),
        ({"columns": {"a": {"type": "categorical"}}}, "values"),
        ({"columns": {"a": {"type": "categorical", "values": [None]}}}, "not a string or a number"),
        ({"columns": {"a": 3}}, "must be an object"),
        ([1, 2], "JSON object"),
    ],
)
def test_malformed_schema(bad: object, fragment: str) -> None:
    with pytest.raises(SchemaError, match=fragment):
        Schema.from_dict(bad)


def test_schema_json_errors(tmp_path) -> None:
    with pytest.raises(SchemaError, match="does not exist"):
        Schema.from_json(tmp_path / "nope.json")
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(SchemaError, match="not valid JSON"):
        Schema.from_json(p)


def test_validate_ok(adult) -> None:
    df, schema = adult
    out = schema.validate(df)
    assert len(out) == 32561
    assert out["age"].dtype == np.int64


def test_validate_errors(small_schema: Schema, small_df: pd.DataFrame) -> None:
    with pytest.raises(DataValidationError, match="missing from the data"):
        small_schema.validate(small_df.drop(columns=["age"]))
    with pytest.raises(DataValidationError, match="not declared in the schema"):
        small_schema.validate(small_df.assign(extra=1))
    with pytest.raises(DataValidationError, match="outside its declared categories: 'X'"):  # the custodian's view
        small_schema.validate(small_df.assign(sex=["F", "M", "X", "M", "F", "F"]), diagnostics=True)
    with pytest.raises(DataValidationError, match="outside its declared categories") as info:  # by default, no value
        small_schema.validate(small_df.assign(sex=["F", "M", "X", "M", "F", "F"]))
    assert "'X'" not in str(info.value)
    with pytest.raises(DataValidationError, match="outside its declared bounds"):
        small_schema.validate(small_df.assign(age=[0, 3, 5, 5, 11, 7]))
    with pytest.raises(DataValidationError, match="fractional"):
        small_schema.validate(small_df.assign(age=[0, 3, 5.5, 5, 10, 7]))
    with pytest.raises(DataValidationError, match="declared float but holds"):
        small_schema.validate(small_df.assign(income=["x"] * 6))
    with pytest.raises(DataValidationError, match="missing values"):
        small_schema.validate(small_df.assign(income=[np.nan, 1, 2, 3, 4, 5]))
    with pytest.raises(DataValidationError, match="DataFrame"):
        small_schema.validate([1, 2, 3])  # type: ignore[arg-type]


def test_validate_clamp_policy(small_schema: Schema, small_df: pd.DataFrame) -> None:
    df = small_df.assign(age=[-4, 3, 5, 5, 11, 7], income=[0.0, 1.0, 2.0, 3.0, 400.0, 5.0])
    out = small_schema.validate(df, out_of_range="clamp")
    assert out["age"].tolist() == [0, 3, 5, 5, 10, 7]
    assert out["income"].max() == 100.0
    assert df["age"].tolist()[0] == -4  # the caller's frame is untouched


def test_numeric_categories_normalised(small_schema: Schema, small_df: pd.DataFrame) -> None:
    out = small_schema.validate(small_df.assign(grade=[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]))
    assert out["grade"].tolist() == [1, 2, 3, 1, 2, 3]


def test_from_dataframe_categorical_and_bounds() -> None:
    df = pd.DataFrame(
        {"sex": pd.Categorical(["F", "M"], categories=["F", "M", "X"]), "age": [20, 30], "inc": [1.5, 2.5]}
    )
    s = Schema.from_dataframe(df, bounds={"age": (0, 120), "inc": (0, 10)})
    assert s["sex"].values == ("F", "M", "X")  # declared categories, including one absent from the rows
    assert s["age"].kind == "int" and s["inc"].kind == "float"
    with pytest.raises(SchemaError, match="no declared domain"):
        Schema.from_dataframe(df, bounds={"age": (0, 120)})
    with pytest.raises(SchemaError, match="unknown column"):
        Schema.from_dataframe(df, bounds={"age": (0, 1), "inc": (0, 1), "zzz": (0, 1)})


def test_from_dataframe_unsafe_infer_warns() -> None:
    df = pd.DataFrame({"a": [1, 5, 3], "b": ["x", "y", "x"]})
    with pytest.warns(UnsafeInferenceWarning):
        s = Schema.from_dataframe(df, unsafe_infer=True)
    assert s["a"].lower == 1 and s["a"].upper == 5
    assert s["b"].values == ("x", "y")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Schema.from_dataframe(df, bounds={"a": (0, 10)}, categories={"b": ["x", "y", "z"]})
