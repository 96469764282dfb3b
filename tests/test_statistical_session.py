"""The statistical-privacy session: exact rescaled part counts, charged before reading, its own ledger kind,
labelled as NOT differential privacy, the partition never leaving the kernel, and the magic."""

from __future__ import annotations

import copy
import json
import pickle
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell
from tests_support import run_cell as run

from dpmagic import Session
from dpmagic.accountant.ledger import Ledger
from dpmagic.errors import BudgetExceededError, ConfigurationError, UnsupportedQueryError
from dpmagic.statistical import (
    SP_LABEL,
    BernoulliPrior,
    StatisticalSession,
    draw_partition,
    equal_part_sizes,
    property_delta,
)
from dpmagic.statistical.sp_session import sp_ledger_key

SCHEMA = {
    "dataset": "sp-demo",
    "table": "t",
    "columns": {
        "smoker": {"type": "int", "lower": 0, "upper": 1},
        "city": {"type": "categorical", "values": ["a", "b", "c"]},
        "age": {"type": "int", "lower": 0, "upper": 99},
    },
}
N = 200


@pytest.fixture
def df() -> pd.DataFrame:
    rng = np.random.default_rng(17)
    return pd.DataFrame(
        {
            "smoker": rng.integers(0, 2, N),
            "city": rng.choice(["a", "b", "c"], N, p=[0.5, 0.3, 0.2]),
            "age": rng.integers(0, 100, N),
        }
    )


def sp(df: pd.DataFrame, seed: int = 7, **kw) -> StatisticalSession:
    args = {"prior": "bernoulli(0.5)", "parts": 8, "epsilon": 0.2, "delta": 0.5, "column": "smoker"}
    args.update(kw)
    return StatisticalSession(df, SCHEMA, rng=random.Random(seed), **args)


def sp_events(ledger: Ledger) -> list:
    return [e for e in ledger.events() if e.key.startswith("sp|")]


# ------------------------------------------------------------------------------------------------- answers
@pytest.mark.parametrize(
    ("sql", "values"),
    [
        ("SELECT COUNT(*) FROM t WHERE smoker = 1", {1}),
        ("SELECT COUNT(*) AS zeros FROM t WHERE smoker = 0", {0}),
        ("SELECT COUNT(*) FROM t WHERE smoker >= 1", {1}),
        ("SELECT COUNT(*) FROM t WHERE NOT smoker = 1", {0}),
        ("SELECT COUNT(*) FROM t WHERE smoker IN (0)", {0}),
    ],
)
def test_answers_are_the_rescaled_exact_counts_of_the_secret_parts(df: pd.DataFrame, sql: str, values: set) -> None:
    s = sp(df, seed=11)
    parts = draw_partition(N, equal_part_sizes(N, 8), random.Random(11))  # the same draw, for the check only
    col = df["smoker"].to_numpy()
    spent = 0.0
    for k in range(3):
        r = s.query(sql)
        exact = int(np.isin(col[parts[k]], list(values)).sum())
        assert r.part == k and r.part_size == len(parts[k]) == 25
        assert r.estimate == exact * N / 25
        assert r.delta_part == property_delta(25, 0.5, 0.2)
        spent += 25 / N * r.delta_part
        assert r.delta_total == pytest.approx(spent, rel=1e-12) and r.delta_total >= spent * (1 - 1e-15)
        assert float(r.df.iloc[0, 0]) == r.estimate
    assert s.parts_left == 5


def test_categorical_prior_and_unequal_sizes(df: pd.DataFrame) -> None:
    sizes = [20, 50, 100]
    s = sp(df, seed=3, prior="categorical(0.5, 0.3, 0.2)", column="city", parts=None, sizes=sizes, delta=1.0)
    parts = draw_partition(N, sizes, random.Random(3))
    col = df["city"].to_numpy()
    for k, (sql, chosen, p) in enumerate(
        [
            ("SELECT COUNT(*) FROM t WHERE city IN ('a', 'b')", {"a", "b"}, 0.8),
            ("SELECT COUNT(*) FROM t WHERE city <> 'a'", {"b", "c"}, 0.5),
            ("SELECT COUNT(*) FROM t WHERE city = 'c'", {"c"}, 0.2),
        ]
    ):
        r = s.query(sql)
        assert r.estimate == int(np.isin(col[parts[k]], list(chosen)).sum()) * N / sizes[k]
        assert r.delta_part == property_delta(sizes[k], p, 0.2)


def test_int_column_categorical_prior_counts_a_range(df: pd.DataFrame) -> None:
    probs = ", ".join(["0.01"] * 100)
    s = sp(df, seed=5, prior=f"categorical({probs})", column="age", parts=4, delta=1.0)
    parts = draw_partition(N, equal_part_sizes(N, 4), random.Random(5))
    r = s.query("SELECT COUNT(*) FROM t WHERE age BETWEEN 18 AND 64")
    ages = df["age"].to_numpy()[parts[0]]
    assert r.estimate == int(((ages >= 18) & (ages <= 64)).sum()) * 4
    assert r.delta_part == property_delta(50, s.prior.probability(range(18, 65)), 0.2)
    assert "categorical over 100 values" in r.summary()


# ------------------------------------------------------------------------------------------------- ordering
class Guard:
    """A stand-in for the backend: checks the charge is in the ledger before any row is read, or fails on access."""

    def __init__(self, real, ledger: Ledger | None = None, expect: int = 0) -> None:
        self.real, self.ledger, self.expect, self.reads = real, ledger, expect, 0

    def _read(self) -> None:
        if self.ledger is None:
            raise AssertionError("the data was read for a refused query")
        charged = [e for e in sp_events(self.ledger) if e.kind == "sp-charge"]
        assert len(charged) == self.expect, "the charge must be durable before the rows are read"
        self.reads += 1

    def row_mask(self, query):  # noqa: ANN001, ANN201
        self._read()
        return self.real.row_mask(query)

    def mask(self, box):  # noqa: ANN001, ANN201
        self._read()
        return self.real.mask(box)


def test_charge_is_recorded_before_the_part_is_read(df: pd.DataFrame, tmp_path: Path) -> None:
    s = sp(df, ledger=tmp_path / "l.sqlite")
    for k in range(1, 4):
        guard = Guard(s.backend, Ledger(tmp_path / "l.sqlite"), expect=k)  # a second connection: committed events
        s.backend = guard
        s.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
        assert guard.reads == 1
        s.backend = guard.real


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT SUM(age) FROM t",
        "SELECT AVG(age) FROM t WHERE smoker = 1",
        "SELECT COUNT(*), SUM(age) FROM t WHERE smoker = 1",
        "SELECT city, COUNT(*) FROM t GROUP BY city",
        "SELECT COUNT(*) FROM t WHERE city = 'a'",
        "SELECT COUNT(*) FROM t WHERE smoker = 1 AND age > 30",
        # issue 24: age appears only in the exact filter (an OR across columns), not in the covering box
        "SELECT COUNT(*) FROM t WHERE smoker = 1 AND (age > 50 OR smoker = 0)",
        "SELECT COUNT(*) FROM t WHERE NOT (smoker = 1 AND age > 50)",
        "SELECT COUNT(*) FROM t WHERE smoker = 1 OR city = 'a'",
        "SELECT COUNT(*) FROM t",
        "SELECT COUNT(*) FROM t WHERE smoker IN (0, 1)",
        "SELECT COUNT(*) FROM t WHERE smoker > 1",
        "SELECT COUNT(*) FROM t WHERE nosuch = 1",
        "SELECT COUNT(*) FROM t JOIN u ON t.a = u.a",
    ],
)
def test_unsupported_queries_are_refused_before_anything_is_charged_or_read(df: pd.DataFrame, sql: str) -> None:
    s = sp(df)
    s.backend = Guard(None)
    before = len(s.ledger.events())
    with pytest.raises(Exception) as info:
        s.query(sql)
    assert "Error" in type(info.value).__name__ and "Assertion" not in type(info.value).__name__
    assert len(s.ledger.events()) == before and s.delta_spent == 0.0 and s.parts_left == 8


def test_the_whole_where_is_answered_or_refused_never_a_different_question(tmp_path: Path) -> None:
    """Issue 24: `smoker = 1 AND (age > 50 OR smoker = 0)` was answered as `smoker = 1` (its covering box; the exact
    filter, which names age, was ignored): 32 instead of 7.  The SP curve describes only the prior column, so the
    query is refused before any charge; the DP session answers the whole predicate (the same row mask)."""
    frame = pd.DataFrame(
        {
            "smoker": [1] * 32 + [0] * 18,
            "city": ["a"] * 50,
            "age": [60] * 7 + [30] * 25 + [70] * 18,  # 7 smokers above 50, 25 below; the non-smokers do not count
        }
    )
    sql = "SELECT COUNT(*) FROM t WHERE smoker = 1 AND (age > 50 OR smoker = 0)"
    s = StatisticalSession(
        frame, SCHEMA, "bernoulli(0.5)", parts=1, epsilon=0.2, delta=1.0, column="smoker", ledger=tmp_path / "l"
    )
    s.backend = Guard(None)
    before = len(s.ledger.events())
    with pytest.raises(UnsupportedQueryError, match="constrains column 'age'"):
        s.query(sql)
    assert len(s.ledger.events()) == before and s.delta_spent == 0.0 and s.parts_left == 1
    # one part holding every row: the SP answer of a prior-column query is its exact count
    t = StatisticalSession(frame, SCHEMA, "bernoulli(0.5)", parts=1, epsilon=0.2, delta=1.0, column="smoker")
    assert t.query("SELECT COUNT(*) FROM t WHERE smoker = 1 AND NOT (smoker = 0)").estimate == 32
    dp = Session(frame, SCHEMA, "epsilon=1e9")
    assert abs(float(dp.query(sql, epsilon=1e8).df.iloc[0, 0]) - 7) < 0.5  # noise scale 1e-8


def test_budget_refusals_spend_nothing(df: pd.DataFrame) -> None:
    one = property_delta(25, 0.5, 0.2) * 25 / N
    s = sp(df, delta=2.5 * one)  # two queries fit, the third does not
    s.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    s.query("SELECT COUNT(*) FROM t WHERE smoker = 0")
    s.backend, events, spent = Guard(None), len(s.ledger.events()), s.delta_spent
    with pytest.raises(BudgetExceededError, match="above the target"):
        s.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    assert len(s.ledger.events()) == events and s.delta_spent == spent and s.parts_left == 6
    preview = s.preview("SELECT COUNT(*) FROM t WHERE smoker = 1")
    assert preview.charge is None and "REFUSED" in repr(preview)
    # all parts used
    t = sp(df, parts=2, delta=1.0)
    t.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    t.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    t.backend, events = Guard(None), len(t.ledger.events())
    with pytest.raises(BudgetExceededError, match="all 2 parts"):
        t.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    assert len(t.ledger.events()) == events


def test_bad_priors_and_columns_are_refused(df: pd.DataFrame) -> None:
    for kw, match in [
        ({"prior": "gaussian(0, 1)"}, "unknown prior"),
        ({"prior": "bernoulli(1.5)"}, "must be a number in"),
        ({"prior": "bernoulli(0.5)", "column": "city"}, "not column 'city'"),
        ({"prior": "categorical(0.5, 0.5)", "column": "city"}, "one probability per declared value"),
        ({"prior": object()}, "only for i.i.d. Bernoulli or categorical"),
        ({"column": None}, "name the one the prior describes"),
        ({"column": "nosuch"}, "not declared"),
        ({"parts": N + 1}, "non-empty parts"),
    ]:
        with pytest.raises(ConfigurationError, match=match):
            sp(df, **kw)
    floats = {"table": "f", "columns": {"x": {"type": "float", "lower": 0.0, "upper": 1.0}}}
    with pytest.raises(ConfigurationError, match="float column"):
        StatisticalSession(pd.DataFrame({"x": [0.5]}), floats, "bernoulli(0.5)", parts=1, epsilon=1.0, delta=1.0)
    assert sp(df, prior=BernoulliPrior(0.3)).prior == BernoulliPrior(0.3)


# ------------------------------------------------------------------------------------------------- the ledger
def test_sp_and_dp_ledgers_never_mix_on_the_same_data(df: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    dp = Session(df, SCHEMA, "epsilon=1.0", ledger=path)
    dp.query("SELECT COUNT(*) FROM t WHERE smoker = 1", epsilon=0.25)
    s = sp(df, ledger=path)
    assert s.delta_spent == 0.0 and len(s.ledger_frame()) == 0  # SP sees none of the DP charges
    s.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    dp2 = Session(df, SCHEMA, "epsilon=1.0", ledger=path)  # DP re-bound: its own charges only
    assert dp2.spent == pytest.approx(0.25) and len(dp2.ledger_frame()) == 1
    dp2.query("SELECT COUNT(*) FROM t WHERE age < 50", epsilon=0.25)
    assert dp2.spent == pytest.approx(0.5)
    ledger = Ledger(path)
    assert s.ledger_key == "sp|" + dp.ledger_key == sp_ledger_key(dp.schema)
    assert {e.kind for e in ledger.events(dp.ledger_key)} <= {"open", "charge", "release"}
    assert {e.kind for e in ledger.events(s.ledger_key)} == {"sp-open", "sp-charge"}
    assert len(ledger) == 2  # the ledger's DP charge count ignores SP charges
    assert len(s.ledger_frame()) == 1 and s.delta_spent > 0


def test_sp_session_refuses_a_key_holding_dp_events(df: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    with ledger.transaction():
        ledger.append(sp_ledger_key(Session(df, SCHEMA, "epsilon=1.0").schema), "open", {"definition": "pure"})
    with pytest.raises(ConfigurationError, match="not a statistical-privacy key"):
        sp(df, ledger=path)


def test_public_parameters_and_charges_are_recorded(df: pd.DataFrame) -> None:
    s = sp(df)
    s.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    opening, charge = s.ledger.events(s.ledger_key)
    assert opening.kind == "sp-open" and charge.kind == "sp-charge"
    assert set(opening.body) == {
        "notion",
        "dataset",
        "table",
        "domain",
        "column",
        "prior",
        "prior_spec",
        "n",
        "parts",
        "sizes",
        "epsilon",
        "delta_target",
        "session",
    }
    assert opening.body["n"] == N and opening.body["sizes"] == [25] * 8 and opening.body["delta_target"] == 0.5
    assert opening.body["prior_spec"] == {"bernoulli": 0.5}
    assert set(charge.body) == {
        "notion",
        "sql",
        "part",
        "part_size",
        "p",
        "epsilon",
        "delta_part",
        "delta_total",
        "session",
    }
    assert charge.body["part"] == 0 and charge.body["delta_total"] == s.delta_spent
    assert SP_LABEL in opening.body["notion"]


def test_after_a_restart_the_unused_parts_are_spent(df: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    first = sp(df, ledger=path)
    first.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    spent = first.delta_spent
    del first  # the kernel restarts: the partition is gone
    again = sp(df, seed=8, ledger=path)
    assert again.locked and again.parts_left == 0 and again.delta_spent == spent
    assert "no further queries" in repr(again)
    again.backend = Guard(None)
    n_events = len(Ledger(path).events())
    with pytest.raises(BudgetExceededError, match="secret partition is gone"):
        again.query("SELECT COUNT(*) FROM t WHERE smoker = 0")
    assert "REFUSED" in repr(again.preview("SELECT COUNT(*) FROM t WHERE smoker = 0"))
    assert len(Ledger(path).events()) == n_events


def test_two_live_sessions_on_one_key_only_the_first_to_charge_may_continue(df: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    a, b = sp(df, seed=1, ledger=path), sp(df, seed=2, ledger=path)  # neither has charged: both may start
    assert not a.locked and not b.locked
    b.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    a.backend = Guard(None)
    with pytest.raises(BudgetExceededError, match="secret partition is gone"):
        a.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    b.query("SELECT COUNT(*) FROM t WHERE smoker = 0")  # the owner continues
    assert b.parts_left == 6 and a.parts_left == 0


# ------------------------------------------------------------------------------------------------- labels, secrecy
def test_every_output_says_it_is_not_differential_privacy(df: pd.DataFrame) -> None:
    s = sp(df)
    r = s.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    needle = "statistical privacy (NOT differential privacy): holds only if the rows are i.i.d. Bernoulli(0.5)"
    assert needle in repr(r) and needle in r.summary() and needle in repr(s) and needle in s.budget_line()
    assert "NOT differential privacy" in r._repr_html_() and "charged" in r._repr_html_()
    assert "NOT differential privacy" in s._repr_html_()
    assert needle in repr(s.preview("SELECT COUNT(*) FROM t WHERE smoker = 0"))


def test_the_partition_never_appears_in_outputs_or_ledger_bytes(df: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    s = sp(df, seed=23, ledger=path, parts=4, delta=1.0)
    parts = draw_partition(N, equal_part_sizes(N, 4), random.Random(23))
    outputs = []
    for _ in range(4):
        r = s.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
        outputs += [repr(r), r._repr_html_(), r.df.to_string()]
    outputs += [repr(s), s._repr_html_(), s.ledger_frame().to_string(), repr(s.accountant)]
    outputs.append(json.dumps(s.accountant.public_state()))
    for suffix in ("", "-wal", "-shm"):
        f = Path(str(path) + suffix)
        if f.exists():
            outputs.append(f.read_bytes().decode("latin-1"))
    blob = "\n".join(outputs)
    for part in parts:
        idx = part.tolist()
        for text in (json.dumps(idx), ",".join(map(str, idx)), str(idx), " ".join(map(str, idx))):
            assert text not in blob
        assert json.dumps(idx[:4]) not in blob and json.dumps(idx[-4:]) not in blob
    for obj in (s, s.accountant):
        with pytest.raises(TypeError):
            pickle.dumps(obj)
        with pytest.raises(TypeError):
            copy.deepcopy(obj)


def test_each_part_answers_once(df: pd.DataFrame) -> None:
    s = sp(df)
    r = s.query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    charge = s.accountant.charges[-1]
    assert r.part == charge.part
    with pytest.raises(Exception, match="already been answered"):
        s.accountant.answer_part(charge, lambda idx: 0)


# ------------------------------------------------------------------------------------------------- the magic


BIND = (
    '%dpsession df --schema schema --privacy statistical --prior "bernoulli(0.5)" --parts 8 --epsilon 0.2 '
    "--delta 0.5 --column smoker"
)


def test_magic_binds_an_sp_session_and_routes_queries(ip: InteractiveShell, df: pd.DataFrame, tmp_path: Path) -> None:
    from dpmagic.presentation.magics import current_session

    ledger = tmp_path / "magic.sqlite"
    ip.user_ns.update(df=df, schema=SCHEMA)
    result, cap = run(ip, f"{BIND} --ledger {ledger}")
    assert result.success, cap.stderr
    assert "STATISTICAL-PRIVACY" in cap.stdout and "NOT differential privacy" in cap.stdout
    assert f"n = {N} rows (disclosed" in cap.stdout
    s = current_session()
    assert isinstance(s, StatisticalSession)
    result, cap = run(ip, "%%dpquery\nSELECT COUNT(*) AS ones FROM t WHERE smoker = 1\n")
    assert result.success, cap.stderr
    r = result.result
    assert r.estimate == s.results[0].estimate and "NOT differential privacy" in r._repr_html_()
    result, cap = run(ip, "%%dpquery zeros <<\nSELECT COUNT(*) AS zeros FROM t WHERE smoker = 0\n")
    assert result.success and list(ip.user_ns["zeros"].columns) == ["zeros"]
    result, cap = run(ip, "%%dpquery --dry-run\nSELECT COUNT(*) FROM t WHERE smoker = 0\n")
    assert result.success and "Nothing was spent" in repr(result.result) and s.parts_left == 6
    # DP-only options and unsupported SQL: one readable line, nothing spent
    for cell, msg in [
        ("%%dpquery --epsilon 0.1\nSELECT COUNT(*) FROM t WHERE smoker = 0\n", "--epsilon does not apply"),
        ("%%dpquery\nSELECT SUM(age) FROM t\n", "only one COUNT(*)"),
    ]:
        result, cap = run(ip, cell)
        assert not result.success and msg in cap.stderr + cap.stdout and "Traceback" not in cap.stderr + cap.stdout
    assert s.parts_left == 6
    result, cap = run(ip, "b = %dpbudget --json")
    assert ip.user_ns["b"]["parts_left"] == 6 and "NOT differential privacy" in ip.user_ns["b"]["notion"]
    result, cap = run(ip, "%dpbudget")
    assert result.success and "NOT differential privacy" in cap.outputs[0].data["text/html"]
    result, cap = run(ip, "%dpplot budget")
    assert not result.success
    # a DP session on the same data, schema and ledger file: none of the SP charges
    result, cap = run(ip, f"%dpsession df --schema schema --budget epsilon=1 --ledger {ledger} --panel none")
    assert result.success, cap.stderr
    assert current_session().spent == 0.0 and "already charged: 0" in cap.stdout
    # re-binding SP after the "restart": refused
    result, cap = run(ip, f"{BIND} --ledger {ledger}")
    assert result.success and "no further queries" in cap.stdout
    result, cap = run(ip, "%%dpquery\nSELECT COUNT(*) FROM t WHERE smoker = 1\n")
    assert not result.success and "secret partition is gone" in cap.stderr + cap.stdout


def test_magic_option_checks(ip: InteractiveShell, df: pd.DataFrame) -> None:
    ip.user_ns.update(df=df, schema=SCHEMA)
    for line, msg in [
        ("%dpsession df --schema schema --privacy statistical --parts 8 --epsilon 0.2 --delta 0.5", "needs --prior"),
        (f"{BIND} --budget epsilon=1 --ledger memory", "--budget applies only to differential privacy"),
        ("%dpsession df --schema schema --budget epsilon=1 --parts 8 --ledger memory", "--parts applies only"),
    ]:
        result, cap = run(ip, line)
        assert not result.success and msg in cap.stderr + cap.stdout, cap.stderr
    with pytest.raises(UnsupportedQueryError):
        sp(df).query("SELECT COUNT(*) FROM t WHERE city = 'a'")


def test_ledger_show_lists_sp_keys_beside_dp_keys(df: pd.DataFrame, tmp_path: Path, capsys) -> None:
    from dpmagic.presentation.cli import main as cli_main

    path = tmp_path / "ledger.sqlite"
    Session(df, SCHEMA, "epsilon=1.0", ledger=path).query("SELECT COUNT(*) FROM t", epsilon=0.25)
    sp(df, ledger=path).query("SELECT COUNT(*) FROM t WHERE smoker = 1")
    capsys.readouterr()
    assert cli_main(["ledger", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "statistical privacy (NOT differential privacy), 1 part queries" in out
    assert "budget epsilon=1" in out
