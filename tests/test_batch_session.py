"""Whole workloads through the session (issue 15): Session.batch, BatchMechanism, BoxBatchMechanism, %%dpbatch."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell
from tests_support import audit_gap_batch
from tests_support import run_cell as run

import dpmagic
from dpmagic.accountant.currency import currency_for
from dpmagic.batch.release import (
    BatchMechanism,
    BoxBatchMechanism,
    candidate_strategies,
    noise_model,
    plan_strategy,
    replace_factor,
)
from dpmagic.batch.spec import MAX_BATCH_CELLS, parse_workload
from dpmagic.domain.schema import Schema
from dpmagic.errors import BudgetExceededError, ConfigurationError
from dpmagic.presentation.magics import current_session, split_batch_cell
from dpmagic.releases.backend import Backend
from dpmagic.session.batch import BatchPreview, BatchResult

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "a": {"type": "int", "lower": 0, "upper": 5},
            "b": {"type": "categorical", "values": ["x", "y", "z"]},
            "c": {"type": "int", "lower": 1, "upper": 4},
            "f": {"type": "float", "lower": 0.0, "upper": 1.0},
            "d": {"type": "int", "lower": 0, "upper": 39},
        },
    }
)


def _frame(seed: int = 0, rows: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "a": rng.integers(0, 6, rows),
            "b": rng.choice(["x", "y", "z"], rows),
            "c": rng.integers(1, 5, rows),
            "f": rng.random(rows),
            "d": rng.integers(0, 40, rows),
        }
    )


class FailingBackend(Backend):
    """A backend stand-in that fails the test if any row is read."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.calls = 0

    def evaluate(self, *args, **kwargs):  # pragma: no cover - must never run
        self.calls += 1
        raise AssertionError("the backend was read")


def _session(budget: str = "epsilon=1.0", neighbors: str = "add-remove", df: pd.DataFrame | None = None):
    return dpmagic.Session(_frame() if df is None else df, SCHEMA, budget, neighbors=neighbors)  # type: ignore[arg-type]


def _explicit(strategy) -> np.ndarray:
    """A's explicit matrix, column j = A e_j."""
    n = strategy.n
    return np.column_stack([strategy.measure(np.eye(n)[:, j]) for j in range(n)])


# -- the spec language -------------------------------------------------------------------------------


def test_spec_domain_from_declared_schema() -> None:
    w = parse_workload("prefix(a) * identity(b) + total(c)", SCHEMA)
    assert w.columns == ("a", "b", "c") and w.sizes == (6, 3, 4)
    assert w.num_queries == 6 * 3 + 1 == len(w.labels())
    assert w.labels()[0] == "a <= 0 AND b = 'x'" and w.labels()[-1] == "all rows"
    m = parse_workload("marginals([a, b], 1)", SCHEMA)
    assert m.num_queries == 1 + 6 + 3 and m.is_marginal


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("prefix(b)", "categorical"),
        ("identity(f)", "float"),
        ("identity(nope)", "unknown column"),
        ("identity(a) * prefix(a)", "twice"),
        ("width_range(a, 9)", "width"),
        ("frobnicate(a)", "unknown family"),
        ("identity(a) +", "expected"),
        ("", "empty"),
    ],
)
def test_spec_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        parse_workload(text, SCHEMA)


def test_spec_refuses_beyond_the_cell_limit() -> None:
    big = Schema.from_dict({"table": "t", "columns": {"v": {"type": "int", "lower": 0, "upper": MAX_BATCH_CELLS}}})
    with pytest.raises(ConfigurationError, match="batch limit") as e:
        parse_workload("identity(v)", big)
    assert e.value.hint


# -- sensitivity against brute force ------------------------------------------------------------------


def _neighbour_diffs(n: int, relation: str):
    """x(D') − x(D) over every data set D of at most 2 rows on n cells and every neighbour D' of it."""
    out = set()
    for size in range(3):
        for rows in itertools.combinations_with_replacement(range(n), size):
            x = np.bincount(np.array(rows, dtype=int), minlength=n)
            if relation == "add-remove":
                for j in range(n):
                    out.add(tuple(np.eye(n, dtype=int)[j]))  # add
                for i in range(size):  # remove row i
                    out.add(tuple(-np.bincount([rows[i]], minlength=n)))
            else:
                for i in range(size):
                    for j in range(n):
                        y = x - np.bincount([rows[i]], minlength=n) + np.bincount([j], minlength=n)
                        out.add(tuple(y - x))
    return [np.array(d, dtype=float) for d in out]


@pytest.mark.parametrize("text", ["prefix(a) * identity(b)", "all_range(c)", "marginals([b, c], 1)", "identity(b, c)"])
@pytest.mark.parametrize("definition", ["epsilon", "rho", "mu"])
def test_strategy_sensitivity_brute_force(text: str, definition: str) -> None:
    spec = parse_workload(text, SCHEMA)
    cur = currency_for(definition)
    for relation in ("add-remove", "replace"):
        replace = relation == "replace"
        plan = plan_strategy(spec, cur, replace_one=replace)
        diffs = _neighbour_diffs(spec.n, relation)
        for name in plan.strategies:
            q = spec.workload  # noqa: F841 - the plan is per workload
            from dpmagic.query.sql import parse_query

            group = parse_query(f"SELECT COUNT(*) FROM t GROUP BY {', '.join(spec.columns)}", SCHEMA)
            plan.chosen = name
            mech = BatchMechanism(spec, group, cur, 0.5, replace_one=replace, plan=plan)
            a = _explicit(mech.strategy)
            if name != "opt_gaussian":  # the premise of the √2 replace-one bound: A ≥ 0 (opt_gaussian: its own)
                assert a.min() >= -1e-12
            p = mech.noise_model.p
            brute = max(np.linalg.norm(a @ d, ord=p) for d in diffs)
            assert brute <= mech.sensitivity * (1 + 1e-9), (name, relation)
            if not replace:  # add/remove: exact (the largest column norm)
                assert brute == pytest.approx(mech.sensitivity, rel=1e-9)
            if name == "identity":  # exact for both relations
                assert brute == pytest.approx(mech.sensitivity, rel=1e-9)


def test_replace_factor() -> None:
    assert replace_factor(1) == 2.0 and replace_factor(2) == pytest.approx(math.sqrt(2))


def test_box_batch_sensitivity_brute_force() -> None:
    """BoxBatchMechanism's noise is calibrated to the exact batch sensitivity of its boxes (Inan et al. 2017)."""
    s = _session()
    sql = [
        "SELECT COUNT(*) FROM t WHERE a <= 2",
        "SELECT COUNT(*) FROM t WHERE a >= 2 AND b = 'x'",
        "SELECT COUNT(*) FROM t WHERE c = 1",
    ]
    qs = [s.parse(x) for x in sql]
    rows = list(itertools.product(range(6), ["x", "y", "z"], range(1, 5)))

    def pop(r):
        a, b, c = r
        return np.array([a <= 2, a >= 2 and b == "x", c == 1], dtype=float)

    for definition, p in (("epsilon", 1), ("rho", 2), ("mu", 2)):
        cur = currency_for(definition)
        add = max(np.linalg.norm(pop(r), ord=p) for r in rows)
        rep = max(np.linalg.norm(pop(r) - pop(r2), ord=p) for r in rows for r2 in rows)
        m_add = BoxBatchMechanism(qs, SCHEMA, cur, 0.3, replace_one=False)
        m_rep = BoxBatchMechanism(qs, SCHEMA, cur, 0.3, replace_one=True)
        assert m_add.sensitivity == pytest.approx(add) and m_rep.sensitivity == pytest.approx(rep)
    # coverage: the bounding box of the boxes (here: every row, as c = 1 leaves a and b free)
    assert m_add.coverage.constraints == {}


@pytest.mark.parametrize("neighbors, sensitivity", [("add-remove", 5.0), ("replace", 10.0)])
def test_box_batch_beyond_2_53_is_calibrated_to_the_exact_sensitivity(neighbors: str, sensitivity: float) -> None:
    """Issue 24: the audit's 15 COUNTs around a gap above 2^60 (tests_support.audit_gap_batch) — replace-one
    moves a row from the box into a point of the gap, 10 answers change: the noise is calibrated to 10, not 5."""
    schema, sql = audit_gap_batch()
    off = 2**60
    df = pd.DataFrame({"x": np.array([0, off + 10, off + 15, off + 21, -5], dtype=np.int64)})
    s = dpmagic.Session(df, Schema.from_dict(schema), "epsilon=10", neighbors=neighbors)
    pre = s.batch("; ".join(sql), epsilon=1.0, dry_run=True)
    assert pre.details["noise"]["sensitivity"] == sensitivity and s.spent == 0.0
    r = s.batch("; ".join(sql), epsilon=1.0)
    # Laplace noise at scale Δ₁/ε (OpenDP may nudge it up by a few ulps): RMSE √2·Δ₁/ε
    assert r.expected_rmse == pytest.approx(math.sqrt(2) * sensitivity, rel=1e-9) and s.spent == pytest.approx(1.0)


# -- reads nothing before the charge; dry runs -----------------------------------------------------


@pytest.mark.parametrize(
    "workload", ["prefix(a) * identity(b)", "SELECT COUNT(*) FROM t WHERE a < 2; SELECT COUNT(*) FROM t WHERE b = 'y'"]
)
def test_reads_nothing_before_charge(workload: str) -> None:
    s = _session("epsilon=1.0")
    s.backend = FailingBackend(SCHEMA)  # type: ignore[assignment]
    with pytest.raises(BudgetExceededError):
        s.batch(workload, epsilon=1.5)
    pre = s.batch(workload, epsilon=0.5, dry_run=True)
    assert isinstance(pre, BatchPreview) and pre.charge.after == pytest.approx(0.5)
    assert s.backend.calls == 0 and s.spent == 0.0 and len(s.accountant) == 0


def test_dry_run_reports_every_strategy_and_spends_nothing() -> None:
    s = _session()
    pre = s.batch("all_range(d)", epsilon=0.2, dry_run=True)
    assert set(pre.rmse) >= {"identity", "workload", "hierarchical", "opt"}
    assert pre.strategy == min(pre.rmse, key=pre.rmse.get)
    assert "nothing charged" in pre.summary()
    assert s.spent == 0.0 and len(s.accountant) == 0


def test_rmse_target_picks_the_smallest_cost() -> None:
    s = _session("epsilon=10")
    pre = s.batch("prefix(a)", rmse=4.0, dry_run=True)
    assert pre.rmse[pre.strategy] == pytest.approx(4.0, rel=1e-9)
    assert pre.rmse[pre.strategy] <= 4.0
    z = _session("rho=10")
    pz = z.batch("prefix(a)", rmse=4.0, dry_run=True)
    assert pz.rmse[pz.strategy] <= 4.0 and pz.rmse[pz.strategy] == pytest.approx(4.0, rel=1e-9)
    with pytest.raises(ConfigurationError, match="not both"):
        s.batch("prefix(a)", rmse=4.0, epsilon=0.1)


# -- parallel composition -----------------------------------------------------------------------------


def test_disjoint_batch_composes_in_parallel() -> None:
    s = _session("epsilon=1.0")
    s.query("SELECT COUNT(*) FROM t WHERE a <= 2", epsilon=0.5)
    r = s.batch("prefix(c) * identity(b)", where="a >= 3", epsilon=0.5)
    assert isinstance(r, BatchResult) and s.spent == pytest.approx(0.5)
    r2 = s.batch("identity(b)", where="a >= 2", epsilon=0.25)  # overlaps each (a = 2; a >= 3), never both
    assert s.spent == pytest.approx(0.75) and len(r2.df) == 3
    assert "charged" in r._repr_html_()


# -- least squares against numpy at huge ε ------------------------------------------------------------


@pytest.mark.parametrize("budget", ["epsilon=1e12", "rho=1e12", "mu=1e12"])
@pytest.mark.parametrize("strategy", ["identity", "workload", "hierarchical"])
def test_answers_match_numpy_at_huge_budget(budget: str, strategy: str) -> None:
    df = _frame(3, 80)
    s = _session(budget, df=df)
    param = budget.split("=")[0]
    r = s.batch("prefix(a) * identity(b) + total(a) * identity(b)", where="c <= 3", strategy=strategy, **{param: 1e11})
    sub = df[df.c <= 3]
    x = np.zeros((6, 3))
    for a, b in zip(sub.a, sub.b, strict=True):
        x[a, "xyz".index(b)] += 1
    w1 = np.kron(np.tril(np.ones((6, 6))), np.eye(3))
    w2 = np.kron(np.ones((1, 6)), np.eye(3))
    exact = np.concatenate([w1 @ x.reshape(-1), w2 @ x.reshape(-1)])
    assert np.allclose(r.df["count"].to_numpy(), exact, atol=1e-3)
    assert (r.df["count_ci_low"] <= r.df["count"]).all() and r.strategy == strategy


@pytest.mark.parametrize("budget", ["epsilon=1e12", "rho=1e12"])
def test_optimised_strategies_match_numpy_at_huge_budget(budget: str) -> None:
    df = _frame(4, 90)
    s = _session(budget, df=df)
    param = budget.split("=")[0]
    r = s.batch("prefix(d)", strategy="opt", **{param: 1e11})  # OPT⊗ (p-Identity)
    x = np.bincount(df.d, minlength=40)
    assert np.allclose(r.df["count"].to_numpy(), np.cumsum(x), atol=1e-3)
    r = s.batch("marginals([b, c], 1)", strategy="opt", **{param: 1e11})  # OPT_M
    exact = [len(df)] + [(df.b == v).sum() for v in "xyz"] + [(df.c == v).sum() for v in range(1, 5)]
    assert np.allclose(r.df["count"].to_numpy(), exact, atol=1e-3)


def test_degenerate_optimum_is_not_offered() -> None:
    """OPT₀ on a tiny prefix reaches B ≈ 1e10, where the Woodbury trace cancels to 0: not offered."""
    pre = _session().batch("prefix(a)", epsilon=0.1, dry_run=True)
    assert all(v > 0 for v in pre.rmse.values())


def test_box_batch_answers_at_huge_budget() -> None:
    df = _frame(5, 70)
    s = _session("epsilon=1e12", df=df)
    r = s.batch("SELECT COUNT(*) FROM t WHERE a <= 2; SELECT COUNT(*) FROM t WHERE a >= 2 AND b = 'x'", epsilon=1e11)
    assert r.df["count"].to_numpy() == pytest.approx([(df.a <= 2).sum(), ((df.a >= 2) & (df.b == "x")).sum()], abs=1e-3)
    assert list(r.df["query"]) == ["a <= 2", "a >= 2 AND b = 'x'"]


def test_box_batch_refuses_non_boxes() -> None:
    s = _session()
    with pytest.raises(ConfigurationError, match="COUNT"):
        s.batch("SELECT COUNT(*) FROM t WHERE a <= 2 OR b = 'x'", epsilon=0.1)
    with pytest.raises(ConfigurationError, match="COUNT"):
        s.batch("SELECT SUM(a) FROM t", epsilon=0.1)
    assert s.spent == 0.0


def test_strategy_choice_is_public_and_applicable() -> None:
    spec = parse_workload("identity(b)", SCHEMA)
    cands = candidate_strategies(spec, noise_model(currency_for("epsilon"), 1.0, replace_one=False))
    assert "hierarchical" not in cands
    s = _session()
    with pytest.raises(ConfigurationError, match="does not apply"):
        s.batch("identity(b)", strategy="hierarchical", epsilon=0.1)
    with pytest.raises(ConfigurationError, match="unknown strategy"):
        s.batch("identity(b)", strategy="magic", epsilon=0.1)
    assert s.spent == 0.0


def test_failure_after_charge_is_generic() -> None:
    s = _session()

    class Broken(FailingBackend):
        def evaluate(self, *args, **kwargs):
            raise RuntimeError("exact count 17 leaked")

    s.backend = Broken(SCHEMA)  # type: ignore[assignment]
    with pytest.raises(dpmagic.errors.DPMagicError) as e:
        s.batch("identity(b)", epsilon=0.1)
    assert "17" not in str(e.value) and s.spent == pytest.approx(0.1)


# -- the magic ------------------------------------------------------------------------------------------


def test_split_batch_cell() -> None:
    assert split_batch_cell("prefix(a)\n  * identity(b)\nWHERE c <= 3\n  AND a > 1\n") == (
        "prefix(a)   * identity(b)",
        "c <= 3 AND a > 1",
    )
    body = "SELECT COUNT(*) FROM t WHERE a < 2;\nSELECT COUNT(*) FROM t WHERE a > 3"
    assert split_batch_cell(body) == (body, None)


def test_magic_dpbatch(ip: InteractiveShell) -> None:
    df, schema = dpmagic.load_adult()
    ip.user_ns.update(adult=df, schema=schema)
    result, cap = run(ip, "%dpsession adult --schema schema --budget epsilon=1.0")
    assert result.success, cap.stderr
    result, cap = run(ip, "%%dpbatch --epsilon 0.1 --dry-run\nprefix(age) * identity(sex)\nWHERE race = 'White'\n")
    assert result.success, cap.stderr
    assert isinstance(result.result, BatchPreview) and current_session().spent == 0.0
    result, cap = run(ip, "%%dpbatch res << --epsilon 0.1 --strategy hierarchical\nprefix(age)\nWHERE sex = 'Female'\n")
    assert result.success, cap.stderr
    assert len(ip.user_ns["res"]) == 74 and current_session().spent == pytest.approx(0.1)
    # disjoint WHERE: parallel composition
    result, cap = run(ip, "%%dpbatch --epsilon 0.1\nidentity(race)\nWHERE sex = 'Male'\n")
    assert result.success and current_session().spent == pytest.approx(0.1)
    assert "charged" in result.result._repr_html_()
    body = "SELECT COUNT(*) FROM adult WHERE age < 30;\nSELECT COUNT(*) FROM adult WHERE age < 40 AND sex = 'Male'\n"
    result, cap = run(ip, f"%%dpbatch --epsilon 0.05\n{body}")
    assert result.success and len(result.result.df) == 2
    result, cap = run(ip, "%%dpbatch --epsilon 0.1\nprefix(sex)\n")
    assert not result.success and "categorical" in str(result.error_in_exec)


# -- Gaussian OPT₀ in the release path -------------------------------------------------------------------


def test_opt_gaussian_offered_under_zcdp_and_its_rmse_is_exact() -> None:
    """zCDP all_range over a 40-value ordered column: opt_gaussian is listed (and wins), and the reported RMSE is
    the exact least-squares error: checked against numpy's pseudo-inverse and a seeded simulation."""
    from dpmagic.batch.gaussian_opt import opt_gaussian

    s = _session("rho=10")
    pre = s.batch("all_range(d)", rho=0.5, dry_run=True)
    assert "opt_gaussian" in pre.rmse
    assert pre.strategy == "opt_gaussian" == min(pre.rmse, key=pre.rmse.get)
    spec = parse_workload("all_range(d)", SCHEMA)
    w = spec.workload.matrix()
    a = opt_gaussian(spec.workload.gram()).matrix
    sigma = pre.details["noise"]["scale"]
    # exact: RMSE² = σ² ‖W A⁺‖²_F / m, from numpy
    exact = sigma * np.linalg.norm(w @ np.linalg.pinv(a)) / math.sqrt(w.shape[0])
    assert pre.rmse["opt_gaussian"] == pytest.approx(exact, rel=1e-6)
    # simulated: 20000 seeded trials; the squared error per trial has relative spread < 1, so the mean of
    # 20000 lies within 5% of its expectation far beyond any plausible deviation (and the seed is fixed)
    rng = np.random.default_rng(7)
    z = rng.normal(0.0, sigma, size=(20000, a.shape[0]))
    err = z @ (w @ np.linalg.pinv(a)).T
    sim = math.sqrt(float((err * err).sum(axis=1).mean()) / w.shape[0])
    assert sim == pytest.approx(pre.rmse["opt_gaussian"], rel=0.05)
    # a release with it spends once and answers every query
    out = s.batch("all_range(d)", rho=0.5, strategy="opt_gaussian")
    assert out.strategy == "opt_gaussian" and len(out.df) == w.shape[0]
    assert s.spent == pytest.approx(0.5)


def test_opt_gaussian_not_offered_for_laplace_and_skipped_above_the_limit(monkeypatch) -> None:
    import dpmagic.batch.release as rb

    pre = _session().batch("all_range(d)", epsilon=0.5, dry_run=True)
    assert "opt_gaussian" not in pre.rmse
    monkeypatch.setattr(rb, "_OPT_GAUSSIAN_MAX_N", 16)
    pz = _session("rho=10").batch("all_range(d)", rho=0.5, dry_run=True)
    assert "opt_gaussian" not in pz.rmse and "opt_gaussian" in pz.skipped
    assert "40 cells > 16" in pz.summary()
    with pytest.raises(ConfigurationError, match="40 cells > 16"):
        _session("rho=10").batch("all_range(d)", rho=0.5, strategy="opt_gaussian", dry_run=True)


@pytest.mark.parametrize("seed", range(6))
def test_replace_sensitivity_of_signed_strategies_brute_force(seed: int) -> None:
    """Signed A: the bound is ≥ every ‖a_j − a_k‖ and ‖a_j‖, and ≤ the triangle bound 2Δ."""
    from dpmagic.batch.release import replace_sensitivity
    from dpmagic.batch.strategies import ExplicitStrategy

    rng = np.random.default_rng(seed)
    a = ExplicitStrategy(rng.normal(size=(7, 5)) * rng.random(5))
    for p in (1, 2):
        m = a.matrix
        brute = max(np.linalg.norm(m[:, j] - m[:, k], ord=p) for j in range(5) for k in range(5))
        brute = max(brute, float(np.abs(m).sum(axis=0).max()) if p == 1 else float(np.linalg.norm(m, axis=0).max()))
        got = replace_sensitivity(a, p)
        assert brute <= got <= 2 * a.sensitivity(p) * (1 + 1e-12)
        if p == 2:
            assert got == pytest.approx(brute, rel=1e-12) or got == pytest.approx(2 * a.sensitivity(2))
