"""Decision queries (GROUP BY … HAVING with FNR/FPR targets) wired through Session.run and %%dpquery.

Determinism: with β = 1e-12 and max_group_size = 1000 a COUNT condition has u = 300 and a discrete Laplace of
scale b = u / ln(1/(2β_i)) ≤ 11.5; the groups of the fixture sit at least 520 (> 45 b) away from the uncertain
region, so every probabilistic statement below fails with probability < 1e-9.
"""

from __future__ import annotations

import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from tests_support import DECISION_GROUPS, DECISION_SCHEMA, DECISION_SPEC, DECISION_SQL, decision_frame

from dpmagic.decision.having import decision_tree
from dpmagic.decision.release import DecisionPhaseMechanism
from dpmagic.decision.tree import And, Condition, Or
from dpmagic.domain.schema import Schema
from dpmagic.errors import BudgetExceededError, DPMagicError, QueryError
from dpmagic.presentation.magics import current_session
from dpmagic.query.sql import parse_query
from dpmagic.releases.backend import Backend
from dpmagic.session.session import Session

GROUPS, SCHEMA, SPEC, SQL, frame = DECISION_GROUPS, DECISION_SCHEMA, DECISION_SPEC, DECISION_SQL, decision_frame


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    return frame()


@pytest.fixture
def schema() -> Schema:
    return Schema.from_dict(SCHEMA)


class SpyBackend(Backend):
    """A backend stand-in: records how many charges the ledger holds each time data is read."""

    def __init__(self, session: Session) -> None:
        self.inner = session.backend
        self.session = session
        self.schema = session.backend.schema
        self.ledger_at_read: list[int] = []

    def evaluate(self, query, units=None, *, extended=None):  # type: ignore[no-untyped-def]
        self.ledger_at_read.append(len(self.session.accountant.entries()))
        return self.inner.evaluate(query, units, extended=extended)


def spied(data: pd.DataFrame, schema: Schema, budget: str = "epsilon=5") -> tuple[Session, SpyBackend]:
    s = Session(data, schema, budget)
    spy = SpyBackend(s)
    s.backend = spy  # type: ignore[assignment]
    return s, spy


# -- SQL → condition tree -------------------------------------------------------------------------------------


def test_having_becomes_condition_tree(schema: Schema) -> None:
    q = parse_query(SQL.format(r="N"), schema)
    tree = decision_tree(q, schema)
    assert isinstance(tree, Or) and isinstance(tree.children[0], And)
    assert tree.children[0].children == (Condition("count", None, ">", 700), Condition("sum", "x", ">", 6000))
    assert tree.children[1] == Condition("sum", "x", ">", 9500)
    flipped = parse_query("SELECT g FROM t GROUP BY g HAVING 5 < AVG(x)", schema)
    assert decision_tree(flipped, schema) == Condition("avg", "x", ">", 5)


@pytest.mark.parametrize(
    ("having", "named"),
    [
        ("COUNT(*) >= 5", ">="),
        ("COUNT(*) = 5", "="),
        ("NOT COUNT(*) > 5", "NOT"),
        ("COUNT(*) + 1 > 5", "aggregate with a number"),
        ("AVG(x) > 4.5", "whole-number threshold"),
        ("MAX(x) > 4", "MAX"),
        ("SUM(x * x) > 5", "row expression"),
    ],
)
def test_unsupported_having_refused_with_named_construct(schema: Schema, having: str, named: str) -> None:
    try:
        q = parse_query(f"SELECT g, COUNT(*) FROM t GROUP BY g HAVING {having}", schema)
    except DPMagicError as exc:  # refused by the SQL parser already (e.g. MAX): also one clear message
        assert named in str(exc) or "MAX" in str(exc).upper()
        return
    with pytest.raises(QueryError, match=named.replace("(", r"\(").replace("+", r"\+")):
        decision_tree(q, schema)


def test_no_group_by_or_having_refused(schema: Schema) -> None:
    with pytest.raises(QueryError, match="GROUP BY"):
        decision_tree(parse_query("SELECT COUNT(*) FROM t", schema), schema)
    with pytest.raises(QueryError, match="HAVING"):
        decision_tree(parse_query("SELECT g, COUNT(*) FROM t GROUP BY g", schema), schema)


# -- Session.decide ---------------------------------------------------------------------------------------------


def test_answer_matches_exact_and_every_read_is_charged_first(data: pd.DataFrame, schema: Schema) -> None:
    s, spy = spied(data, schema)
    ans = s.decide(SQL.format(r="N"), fnr=1e-12, fpr=0.1, max_group_size=1000)
    assert not ans.denied and ans.groups == ["A", "E"]  # the exact answer (failure probability < 1e-9)
    assert ans.fnr_bound <= 1e-12 and "proven" in ans.guarantees and "estimate" in ans.guarantees
    # one Session.run per read: the k-th read happens with exactly k charges in the ledger
    assert spy.ledger_at_read == list(range(1, len(ans.reads) + 1))
    assert len(s.accountant.entries()) == len(ans.reads) >= 2
    assert s.spent == pytest.approx(ans.cost) and ans.cost == pytest.approx(sum(r["cost"] for r in ans.reads))


def test_dry_run_reads_nothing_and_charges_nothing(data: pd.DataFrame, schema: Schema) -> None:
    s, spy = spied(data, schema)
    ans = s.decide(SQL.format(r="N"), fnr=0.05, fpr=0.1, max_group_size=1000, dry_run=True)
    assert ans.dry_run and ans.groups is None and ans.plan["phase_one_cost"] > 0
    assert "Phase One would charge" in ans.summary()
    assert spy.ledger_at_read == [] and s.spent == 0 and len(s.accountant.entries()) == 0


def test_over_max_epsilon_or_budget_spends_nothing(data: pd.DataFrame, schema: Schema) -> None:
    s, spy = spied(data, schema)
    dry = s.decide(SQL.format(r="N"), fnr=0.05, fpr=0.1, max_group_size=1000, dry_run=True)
    with pytest.raises(BudgetExceededError):
        s.decide(
            SQL.format(r="N"), fnr=0.05, fpr=0.1, max_group_size=1000, max_epsilon=dry.plan["phase_one_epsilon"] / 2
        )
    assert spy.ledger_at_read == [] and s.spent == 0
    s2, spy2 = spied(data, schema, budget=f"epsilon={dry.plan['phase_one_cost'] / 2}")
    with pytest.raises(BudgetExceededError):
        s2.decide(SQL.format(r="N"), fnr=0.05, fpr=0.1, max_group_size=1000)
    assert spy2.ledger_at_read == [] and s2.spent == 0
    with pytest.raises(QueryError, match="max_group_size"):
        s.decide(SQL.format(r="N"), fnr=0.05, fpr=0.1)
    assert s.spent == 0


def _near_threshold() -> pd.DataFrame:
    # 20 groups at 650 (inside the uncertain region (400, 700] of COUNT > 700), 5 empty ones: ProBE's estimate
    # of the false positives (≈ 20) exceeds α·N̂ (≈ 0.5), so Phase Two is needed.
    rows = [(f"g{i}", "N", 1, 0.5) for i in range(20) for _ in range(650)]
    return pd.DataFrame(rows, columns=["g", "r", "x", "f"])


def _near_schema() -> Schema:
    spec = {
        **SCHEMA,
        "columns": {**SCHEMA["columns"], "g": {"type": "categorical", "values": [f"g{i}" for i in range(25)]}},
    }
    return Schema.from_dict(spec)


@pytest.mark.parametrize("limit", ["max_epsilon", "budget"])
def test_phase_two_beyond_limit_spends_only_phase_one(limit: str) -> None:
    sql = "SELECT g, COUNT(*) FROM t GROUP BY g HAVING COUNT(*) > 700"
    sch = _near_schema()
    probe = Session(_near_threshold(), sch, "epsilon=5").decide(
        sql, fnr=1e-12, fpr=0.1, max_group_size=1000, dry_run=True
    )
    eps1 = probe.plan["phase_one_epsilon"]
    budget = "epsilon=5" if limit == "max_epsilon" else f"epsilon={eps1 * 1.5}"
    s, spy = spied(_near_threshold(), sch, budget)
    ans = s.decide(
        sql, fnr=1e-12, fpr=0.1, max_group_size=1000, max_epsilon=eps1 * 1.5 if limit == "max_epsilon" else None
    )
    assert ans.denied and ans.groups is None and "Phase Two" in (ans.reason or "")
    assert [r["phase"] for r in ans.reads] == [1] and spy.ledger_at_read == [1]
    assert s.spent == pytest.approx(eps1, rel=1e-9)


def test_disjoint_decision_queries_compose_in_parallel(data: pd.DataFrame, schema: Schema) -> None:
    s = Session(data, schema, "epsilon=5")
    north = s.decide(SQL.format(r="N"), fnr=1e-12, fpr=0.1, max_group_size=1000)
    south = s.decide(SQL.format(r="S"), fnr=1e-12, fpr=0.1, max_group_size=1000)
    assert north.groups == south.groups == ["A", "E"]
    assert s.spent == pytest.approx(max(north.cost, south.cost))  # not the sum: disjoint WHERE boxes
    assert s.spent < north.cost + south.cost


@pytest.mark.parametrize(("budget", "parameter"), [("rho=1", "rho"), ("mu=2", "mu")])
def test_zcdp_and_gdp_sessions_charge_the_converted_cost(
    data: pd.DataFrame, schema: Schema, budget: str, parameter: str
) -> None:
    from dpmagic.decision.mechanism import cost_of_epsilon

    s = Session(data, schema, budget)
    ans = s.decide(SQL.format(r="N"), fnr=1e-12, fpr=None, max_group_size=1000)
    assert ans.groups == ["A", "E"] and ans.parameter == parameter
    definition = "zcdp" if parameter == "rho" else "gdp"
    costs = [cost_of_epsilon(r["epsilon"], definition) for r in ans.reads]
    assert [r["cost"] for r in ans.reads] == costs
    assert s.spent == pytest.approx(sum(costs) if definition == "zcdp" else sum(c * c for c in costs) ** 0.5)


def test_replace_one_charges_twice_the_epsilon(data: pd.DataFrame, schema: Schema) -> None:
    s = Session(data, schema, "epsilon=5", neighbors="replace")
    ans = s.decide(SQL.format(r="N"), fnr=1e-12, fpr=None, max_group_size=1000, dry_run=True)
    plain = Session(data, schema, "epsilon=5").decide(
        SQL.format(r="N"), fnr=1e-12, fpr=None, max_group_size=1000, dry_run=True
    )
    assert ans.plan["phase_one_cost"] == pytest.approx(2 * plain.plan["phase_one_cost"])


def test_mechanism_declares_before_reading(data: pd.DataFrame, schema: Schema) -> None:
    from dpmagic.decision.probe import MeasureRequest
    from dpmagic.session.decide import make_plan

    s = Session(data, schema, "epsilon=5")
    q = s.parse(SQL.format(r="N"))
    p = make_plan(s, q, fnr=0.05, fpr=0.1, max_group_size=1000)
    c = p.conditions[0]
    req = MeasureRequest(
        c.index,
        c.statistic,
        None,
        c.statistic.kind,
        c.scale,
        c.statistic.sensitivity,
        c.epsilon,
        c.cost,
        tuple(GROUPS),
        1,
        c.u,
        c.beta,
    )
    m = DecisionPhaseMechanism(q, req, str(c.condition), definition="pure", replace_one=False)
    assert m.coverage == q.where and m.cost == pytest.approx(c.epsilon)
    d = m.describe()
    assert d["u"] == c.u and d["beta"] == c.beta and d["phase"] == 1 and d["groups_read"] == 5
    df = m.release(s.backend)
    assert list(df["group"]) == GROUPS and set(df.columns) == {"group", "noisy", "reported"}


# -- %%dpquery ----------------------------------------------------------------------------------------------------


def _run(ip: InteractiveShell, code: str):  # type: ignore[no-untyped-def]
    with capture_output() as cap:
        result = ip.run_cell(code, store_history=False)
    return result, cap


def test_magic_routes_decision_options(ip: InteractiveShell, data: pd.DataFrame) -> None:
    ip.user_ns.update(t=data, tschema=SCHEMA)
    result, cap = _run(ip, "%dpsession t --schema tschema --budget epsilon=5")
    assert result.success, cap.stderr
    cell = SQL.format(r="N")
    result, cap = _run(ip, f"%%dpquery --fnr 0.05 --fpr 0.1 --max-group-size 1000 --dry-run\n{cell}\n")
    assert result.success and result.result.dry_run and "Phase One would charge" in result.result.summary()
    result, cap = _run(ip, f"%%dpquery hits << --fnr 1e-12 --fpr 0.1 --max-group-size 1000 --max-epsilon 5\n{cell}\n")
    assert result.success, cap.stderr
    assert list(ip.user_ns["hits"]["g"]) == ["A", "E"]
    result, cap = _run(ip, f"%%dpquery --fnr 0.05 --fpr 0.1 --max-group-size 1000 --max-epsilon 1e-9\n{cell}\n")
    assert not result.success and "BudgetExceededError" in cap.stderr + str(result.error_in_exec)
    spent = current_session().spent
    result, cap = _run(ip, f"%%dpquery --fnr 0.05 --epsilon 0.1 --max-group-size 1000\n{cell}\n")
    assert not result.success and "--epsilon" in cap.stderr + str(result.error_in_exec)
    assert current_session().spent == spent


def test_two_group_keys_give_tuple_groups(data: pd.DataFrame, schema: Schema) -> None:
    s = Session(data, schema, "epsilon=5")
    ans = s.decide(
        "SELECT g, r, COUNT(*) FROM t GROUP BY g, r HAVING COUNT(*) > 700", fnr=1e-12, fpr=None, max_group_size=1000
    )
    assert ans.groups == [(g, r) for g in ("A", "B", "E") for r in ("N", "S")]


# -- float columns and the schema's max_group_size -------------------------------------------------------------


def _float_frame() -> pd.DataFrame:
    # AVG(f): A 0.9, B 0.1, C 0.9 over 30 rows only, D 0.45, E 0.75; SUM(f): A 900, B 100, C 27, D 450, E 750
    spec = {"A": (1000, 0.9), "B": (1000, 0.1), "C": (30, 0.9), "D": (1000, 0.45), "E": (1000, 0.75)}
    rows = [(g, "N", 1, f) for g, (n, f) in spec.items() for _ in range(n)]
    return pd.DataFrame(rows, columns=["g", "r", "x", "f"])


def test_float_avg_and_sum_conditions_are_decided_on_quantised_values(schema: Schema) -> None:
    s, spy = spied(_float_frame(), schema)
    ans = s.decide(
        "SELECT g FROM t GROUP BY g HAVING AVG(f) > 0.6 AND SUM(f) > 500.5", fnr=1e-12, fpr=0.1, max_group_size=1000
    )
    assert not ans.denied and ans.groups == ["A", "E"]
    assert spy.ledger_at_read == list(range(1, len(ans.reads) + 1))  # charged before every read
    texts = [c["statistic"] for c in ans.plan["conditions"]]
    assert all("q(f)" in t for t in texts)  # quantised statistics, exact integer sums
    s2 = Session(_float_frame(), schema, "epsilon=5")
    low = s2.decide("SELECT g FROM t GROUP BY g HAVING AVG(f) < 0.3", fnr=1e-12, fpr=0.1, max_group_size=1000)
    assert not low.denied and low.groups == ["B"]


def test_schema_declares_max_group_size_and_the_option_overrides_it() -> None:
    spec = {**SCHEMA, "max_group_size": 1000}
    sch = Schema.from_dict(spec)
    assert sch.max_group_size == 1000 and sch.to_dict()["max_group_size"] == 1000
    assert "max_group_size" not in Schema.from_dict(SCHEMA).to_dict()  # absent stays absent (compatible)
    s = Session(frame(), sch, "epsilon=5")
    default = s.decide(SQL.format(r="N"), fnr=0.05, fpr=0.1, dry_run=True)
    assert default.plan["conditions"][0]["public_range"] == [0.0, 1000.0]
    override = s.decide(SQL.format(r="N"), fnr=0.05, fpr=0.1, dry_run=True, max_group_size=2000)
    assert override.plan["conditions"][0]["public_range"] == [0.0, 2000.0]
    assert not s.decide(SQL.format(r="N"), fnr=1e-12, fpr=0.1).denied


@pytest.mark.parametrize("bad", [0, -3, 2.5, "100", True])
def test_schema_max_group_size_is_validated(bad: object) -> None:
    from dpmagic.errors import SchemaError

    with pytest.raises(SchemaError, match="max_group_size"):
        Schema.from_dict({**SCHEMA, "max_group_size": bad})


def test_decision_answer_shows_its_groups_under_the_group_by_column(data: pd.DataFrame) -> None:
    """Issue 27, item 6: in a terminal the answer lists the groups, and its frame names the GROUP BY column."""
    s = Session(data, SCHEMA, "epsilon=5")
    ans = s.decide(SQL.format(r="N"), fnr=1e-12, fpr=0.1, max_group_size=1000, max_epsilon=5)
    assert list(ans.df.columns) == ["g"] and list(ans.df["g"]) == ans.groups
    text = repr(ans)
    assert text.splitlines()[0] == ans.summary() and "g:" in text
    assert all(f"  {g}" in text.splitlines() for g in ans.groups)
