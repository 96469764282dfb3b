"""Schema-aware completion in ``%%dpquery`` / ``%%dpbatch`` cells (issue 30): the pure function, and the same
through a real kernel's ``complete_request`` (what JupyterLab, Notebook 7 and VS Code send on Tab)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dpmagic.domain.schema import Schema
from dpmagic.presentation.completion import complete, quote_ident, quote_value

REPO = Path(__file__).resolve().parents[1]

SCHEMA = Schema.from_dict(
    {
        "table": "people",
        "columns": {
            "age": {"type": "int", "lower": 0, "upper": 100},
            "sex": {"type": "categorical", "values": ["Female", "Male"]},
            "capital-gain": {"type": "int", "lower": 0, "upper": 100},
            "name": {"type": "categorical", "values": ["O'Brien", "Smith"]},
        },
    }
)


def _texts(cell: str, schema: Schema | None = SCHEMA, parsers: dict | None = None) -> tuple[str, list[str]]:
    found = complete(cell, len(cell), schema, parsers)
    assert found is not None
    return found[0], [t for t, _ in found[1]]


def test_columns_quoted_when_needed_and_first() -> None:
    frag, texts = _texts("%%dpquery\nSELECT COUNT(*) FROM people WHERE s")
    assert frag == "s" and texts[0] == "sex" and "SUM(" in texts and "SELECT" in texts
    frag, texts = _texts("%%dpquery\nSELECT SUM(cap")
    assert frag == "cap" and texts == ['"capital-gain"']
    frag, texts = _texts('%%dpquery\nSELECT SUM("cap')
    assert frag == '"cap' and texts == ['"capital-gain"']
    assert quote_ident("age") == "age" and quote_ident("capital-gain") == '"capital-gain"'
    assert quote_ident("select") == '"select"' and quote_ident('a"b') == '"a""b"'


def test_declared_categories_after_equals_and_in() -> None:
    assert _texts("%%dpquery\nSELECT COUNT(*) FROM people WHERE sex = '") == ("'", ["'Female'", "'Male'"])
    assert _texts("%%dpquery\nSELECT COUNT(*) FROM people WHERE sex = ") == ("", ["'Female'", "'Male'"])
    assert _texts("%%dpquery\nSELECT COUNT(*) FROM people WHERE sex <> 'f") == ("'f", ["'Female'"])
    assert _texts("%%dpquery\nSELECT COUNT(*) FROM people WHERE sex in ('Male', 'F") == ("'F", ["'Female'"])
    assert _texts("%%dpquery\nSELECT COUNT(*) FROM people WHERE name NOT IN (") == ("", ["'O''Brien'", "'Smith'"])
    assert quote_value("O'Brien") == "'O''Brien'" and quote_value(3) == "3"
    # a numeric column after '=' offers no strings
    frag, texts = _texts("%%dpquery\nSELECT COUNT(*) FROM people WHERE age = '")
    assert texts == []


def test_options_on_the_magic_line() -> None:
    from dpmagic.presentation.magics import DPMagic

    magics = DPMagic(None)
    parsers = {"dpquery": magics.dpquery.parser, "dpbatch": magics.dpbatch.parser}
    frag, texts = _texts("%%dpquery --e", parsers=parsers)
    assert frag == "--e" and texts == ["--epsilon"]
    frag, texts = _texts("%%dpquery --epsilon 0.1 --", parsers=parsers)
    assert "--dry-run" in texts and "--fnr" in texts and all(t.startswith("--") for t in texts)
    assert _texts("%%dpbatch --", parsers=parsers)[1]  # the batch magic's options too


def test_not_a_dpmagic_cell_and_no_session() -> None:
    assert complete("x = s", 5, SCHEMA) is None
    assert complete("%%sql\nSELECT s", 14, SCHEMA) is None
    frag, texts = _texts("%%dpquery\nSEL", schema=None)
    assert texts == ["SELECT"]


# --------------------------------------------------------------------------------------------------
# through a real kernel


@pytest.fixture(scope="module")
def kernel():
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(REPO))
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _run(kc, code: str) -> None:
    reply = kc.execute_interactive(code, timeout=120, output_hook=lambda msg: None)
    assert reply["content"]["status"] == "ok", reply["content"]


def _complete(kc, code: str) -> tuple[list[str], str]:
    kc.complete(code, len(code))
    reply = kc.get_shell_msg(timeout=60)["content"]
    assert reply["status"] == "ok"
    return reply["matches"], code[reply["cursor_start"] : reply["cursor_end"]]


def test_complete_request_in_a_real_kernel(kernel) -> None:
    kc = kernel
    _run(kc, "%load_ext dpmagic")
    # before any session: options and keywords
    matches, replaced = _complete(kc, "%%dpquery --e")
    assert matches == ["--epsilon"] and replaced == "--e"
    _run(
        kc,
        "import pandas as pd\n"
        "df = pd.DataFrame({'age': [30, 40], 'sex': ['Female', 'Male'], 'capital-gain': [0, 5]})\n"
        "schema = {'table': 'people', 'columns': {'age': {'type': 'int', 'lower': 0, 'upper': 100},\n"
        "  'sex': {'type': 'categorical', 'values': ['Female', 'Male']},\n"
        "  'capital-gain': {'type': 'int', 'lower': 0, 'upper': 100}}}",
    )
    _run(kc, "%dpsession df --schema schema --budget epsilon=1 --ledger memory --panel none")
    matches, replaced = _complete(kc, "%%dpquery\nSELECT COUNT(*) FROM people WHERE s")
    assert matches[0] == "sex" and replaced == "s" and "schema" not in matches  # no Python names in SQL
    matches, replaced = _complete(kc, "%%dpquery\nSELECT COUNT(*) FROM people WHERE sex = '")
    assert matches == ["'Female'", "'Male'"] and replaced == "'"
    matches, _ = _complete(kc, "%%dpbatch\nSELECT COUNT(*) FROM people GROUP BY cap")
    assert matches == ['"capital-gain"']
    # Python cells keep IPython's completion
    matches, _ = _complete(kc, "sche")
    assert "schema" in matches
