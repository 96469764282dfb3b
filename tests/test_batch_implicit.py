"""Implicit one-column batches and kept estimates (issue 32): dpmagic.batch.implicit, dpmagic.batch.estimate, the
implicit path of BatchMechanism, Session.batch(keep=...) / Session.estimate and ``%dpbatch --from``.

Every formula is checked against the explicit computation (dense A, (AᵀA)⁻¹ by numpy) on small domains; the interval
coverage test states its false-failure probability."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom
from tests_support import run_cell as run

import dpmagic
import dpmagic.batch.release as rb
from dpmagic.accountant.currency import currency_for
from dpmagic.batch import PIdentity, all_range, identity, laplace, prefix, rmse, total, union, width_range
from dpmagic.batch.estimate import BatchEstimate, DerivedAnswer
from dpmagic.batch.implicit import (
    PIdentityCovariance,
    gram_diag,
    one_column_block,
    pid_trace,
    quadratic_form,
    range_sums,
)
from dpmagic.batch.pidentity import pid_value_and_grad
from dpmagic.batch.reconstruct import answer_variances, workload_answers
from dpmagic.batch.spec import MAX_BATCH_QUERIES, parse_workload
from dpmagic.batch.strategies import ExplicitStrategy, KronStrategy, identity_strategy
from dpmagic.domain.schema import Schema
from dpmagic.errors import ConfigurationError
from dpmagic.presentation.magics import current_session

SCHEMA = Schema.from_dict(
    {
        "table": "t",
        "columns": {
            "d": {"type": "int", "lower": 0, "upper": 39},
            "e": {"type": "int", "lower": -5, "upper": 14},
            "b": {"type": "categorical", "values": ["x", "y", "z"]},
            "big": {"type": "int", "lower": 1, "upper": 700},
        },
    }
)


def _frame(rows: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "d": rng.integers(0, 40, rows),
            "e": rng.integers(-5, 15, rows),
            "b": rng.choice(["x", "y", "z"], rows),
            "big": rng.integers(1, 701, rows),
        }
    )


def _session(budget: str = "epsilon=2.0") -> dpmagic.Session:
    return dpmagic.Session(_frame(), SCHEMA, budget)  # type: ignore[arg-type]


@pytest.fixture
def implicit_small(monkeypatch):
    """Columns of more than 16 values take the implicit path; OPT₀ gets 0.5 CPU-s (tests only: fast; the result may
    be Identity, still a valid strategy)."""
    monkeypatch.setattr(rb, "_OPT_MAX_N", 16)
    monkeypatch.setattr(rb, "IMPLICIT_OPT_SECONDS", (0.5, 0.5))
    monkeypatch.setattr(rb, "_OPT_CACHE", {})


def _workloads(n: int):
    out = [all_range(n), prefix(n), width_range(n, max(1, n // 3))]
    out.append(union([prefix(n), (2.0, all_range(n)), identity(n), total(n), width_range(n, 1)]))
    return out


def _ranges(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s, e = np.triu_indices(n)
    w = ((np.arange(n)[None, :] >= s[:, None]) & (np.arange(n)[None, :] <= e[:, None])).astype(float)
    return s, e, w


# -- formulas against brute force ------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 64), p=st.integers(0, 6), norm=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_trace_and_variances_match_the_explicit_computation(n: int, p: int, norm: int, seed: int) -> None:
    """tr(G (AᵀA)⁻¹), qᵀ(AᵀA)⁻¹q of every range and of random vectors, diag G: Woodbury/prefix sums = dense numpy."""
    rng = np.random.default_rng(seed)
    a = PIdentity(rng.random((p, n)) * rng.choice([0.01, 1.0, 10.0]), norm=norm)
    dense = a.matrix  # (n + p) × n, built explicitly
    xi = np.linalg.inv(dense.T @ dense)
    for w in _workloads(n):
        g = w.gram()
        block = one_column_block(w)
        assert block is not None
        assert np.allclose(gram_diag(block), np.diag(g), rtol=0, atol=1e-9)
        exact = float(np.sum(g * xi))
        assert pid_trace(block, a) == pytest.approx(exact, rel=1e-9, abs=1e-9)
        assert a.trace(w) == pytest.approx(exact, rel=1e-9, abs=1e-9)
    s, e, wr = _ranges(n)
    cov = PIdentityCovariance(a)
    brute = np.einsum("ij,jk,ik->i", wr, xi, wr)
    assert np.allclose(cov.ranges(s, e), brute, rtol=1e-9, atol=1e-9)
    q = rng.normal(size=(3, n))
    assert np.allclose(cov.vectors(q), np.einsum("ij,jk,ik->i", q, xi, q), rtol=1e-9, atol=1e-9)
    assert quadratic_form(a, q[0]) == pytest.approx(float(q[0] @ xi @ q[0]), rel=1e-9, abs=1e-9)
    x = rng.integers(0, 50, n).astype(float)
    assert np.allclose(a.measure(x), dense @ x, rtol=1e-12, atol=1e-12)
    y = rng.normal(size=n + p)
    assert np.allclose(a.reconstruct(y), np.linalg.lstsq(dense, y, rcond=None)[0], rtol=1e-8, atol=1e-8)
    assert np.allclose(range_sums(x, s, e), wr @ x)


def test_gradient_of_a_union_block_matches_finite_differences() -> None:
    """The OPT₀ gradient on the combined O(n) product of a union (one_column_block) = central differences."""
    rng = np.random.default_rng(5)
    w = union([prefix(24), (2.0, all_range(24)), width_range(24, 5)])
    block = one_column_block(w)
    assert block is not None and block.fast_rmul
    dg = gram_diag(block)
    b = rng.random((3, 24))
    for norm in (1, 2):
        f, d = pid_value_and_grad(b, block.gram_rmul, dg, norm, True)
        assert f == pytest.approx(PIdentity(b, norm=norm).trace(w), rel=1e-12)
        h = 1e-6
        for i, j in [(0, 0), (1, 11), (2, 23)]:
            e = np.zeros_like(b)
            e[i, j] = h
            fp = pid_value_and_grad(b + e, block.gram_rmul, dg, norm, True)[0]
            fm = pid_value_and_grad(b - e, block.gram_rmul, dg, norm, True)[0]
            assert d[i, j] == pytest.approx((fp - fm) / (2 * h), rel=1e-5, abs=1e-4)


def test_zero_row_p_identity_is_the_identity_strategy() -> None:
    a = PIdentity(np.zeros((0, 30)), name="Identity")
    w = all_range(30)
    assert a.trace(w) == pytest.approx(identity_strategy(30).trace(w))
    assert rmse(w, a, laplace(1.0)) == pytest.approx(rmse(w, KronStrategy((identity_strategy(30),)), laplace(1.0)))
    y = np.arange(30.0)
    assert np.array_equal(a.reconstruct(y), y) and np.array_equal(a.measure(y), y)


# -- implicit path = explicit path at small n ------------------------------------------------------------


def test_implicit_and_explicit_mechanisms_agree(monkeypatch) -> None:
    """Same strategy → same expected RMSE, same per-query variances, and the same answers from the same noisy y."""
    s = _session()
    cur = currency_for("pure")
    spec = parse_workload("all_range(d)", SCHEMA)
    a = PIdentity(np.random.default_rng(2).random((3, 40)), name="p3")
    noise = rb.noise_model(cur, 1.0, replace_one=False)
    assert rmse(spec.workload, a, noise) == pytest.approx(rmse(spec.workload, ExplicitStrategy(a.matrix), noise))
    q = s.parse('SELECT COUNT(*) FROM "t" GROUP BY "d"')
    z = np.random.default_rng(3).laplace(size=43)
    monkeypatch.setattr(rb, "_sample", lambda kind, scale, values: values + scale * z)
    frames = {}
    for implicit in (False, True):
        monkeypatch.setattr(rb, "_OPT_MAX_N", 16 if implicit else 1024)
        plan = rb.BatchPlan(spec, {"opt": a}, {"opt": rmse(spec.workload, a, noise)}, "opt")
        mech = rb.BatchMechanism(spec, q, cur, 0.5, replace_one=False, plan=plan)
        assert mech.implicit is implicit
        frames[implicit] = mech.release(s.backend)
        assert mech.x_hat is not None
    pd.testing.assert_frame_equal(frames[False], frames[True], rtol=1e-9)
    # and the explicit formulas of dpmagic.batch.reconstruct agree with the implicit ones directly
    starts, ends = rb.implicit_rows(spec)[1:]
    var = answer_variances(spec.workload, a, noise)
    assert np.allclose(var, PIdentityCovariance(a).ranges(starts, ends) * noise.variance(1.0), rtol=1e-9)
    x = np.arange(40.0)
    assert np.allclose(workload_answers(spec.workload, x), range_sums(x, starts, ends))


def test_implicit_rows_follow_the_labels() -> None:
    spec = parse_workload("prefix(e) + width_range(e, 3) + identity(e) + total(e) + all_range(e)", SCHEMA)
    labels, s, e = rb.implicit_rows(spec)
    assert labels == spec.labels() and len(s) == spec.num_queries
    assert np.allclose(range_sums(np.arange(20.0), s, e), workload_answers(spec.workload, np.arange(20.0)))


# -- the session: one charge, then free follow-ups -------------------------------------------------------


def test_one_column_has_no_query_limit_but_several_columns_do() -> None:
    spec = parse_workload("all_range(big)", SCHEMA)
    assert spec.num_queries == 700 * 701 // 2 > MAX_BATCH_QUERIES
    with pytest.raises(ConfigurationError, match="more than the batch limit"):
        parse_workload("all_range(big) * identity(b)", SCHEMA)


def test_large_batch_releases_the_estimate_and_follow_ups_are_free(implicit_small) -> None:
    s = _session()
    res = s.batch("all_range(big)", epsilon=1.0, keep="ages")
    assert res.strategy in ("opt", "identity") and res.queries == 245_350
    assert len(res.df) == 700 and list(res.df["query"][:2]) == ["big = 1", "big = 2"]
    assert "kept as 'ages'" in res.summary() and "245,350 queries" in res.summary()
    est = s.estimate("ages")
    assert est is res.estimate and est.name == "ages" and est.entry_id == res.entry_id
    ledger_before, spent_before, n_before = s.ledger_frame(), s.spent, len(s.accountant)
    a = est.range(10, 200)
    assert isinstance(a, DerivedAnswer) and a.query == "big BETWEEN 10 AND 200"
    assert a.ci_low < a.count < a.ci_high and "ages" in a.source and "no further charge" in a.summary()
    # consistent: a range is the difference of two prefixes; the listed cells are the points
    assert a.count == pytest.approx(est.prefix(200).count - est.prefix(9).count, rel=1e-12, abs=1e-9)
    assert est.point(37).count == pytest.approx(float(res.df["count"][36]), rel=1e-12)
    assert est.range(1, 700).count == pytest.approx(float(res.df["count"].sum()), rel=1e-12)
    many = est.ranges([(1, 1), (10, 200), (5, 700)])
    assert many["count"][1] == pytest.approx(a.count) and many["count_ci_low"][1] == pytest.approx(a.ci_low)
    vec = np.zeros(700)
    vec[9:200] = 1.0
    assert est.query(vec).count == pytest.approx(a.count, rel=1e-12)
    assert est.query(vec).ci_high == pytest.approx(a.ci_high, rel=1e-9)
    # free: nothing charged, nothing recorded
    assert s.spent == spent_before and len(s.accountant) == n_before
    pd.testing.assert_frame_equal(s.ledger_frame(), ledger_before)
    # the listed cells carry the same intervals as the follow-ups
    row = res.df.iloc[36]
    p = est.point(37)
    assert row["count_ci_low"] == pytest.approx(p.ci_low) and row["count_ci_high"] == pytest.approx(p.ci_high)


def test_bad_follow_ups_are_refused_with_one_clear_error(implicit_small) -> None:
    s = _session()
    s.batch("all_range(d)", epsilon=0.5, keep="dd")
    est = s.estimate("dd")
    spent = s.spent
    cases = [
        (lambda: est.range(-1, 5), "outside the declared domain of 'd', 0..39"),
        (lambda: est.range(3, 40), "outside the declared domain"),
        (lambda: est.range(9, 3), "lower end 9 is above the upper end 3"),
        (lambda: est.prefix(2.5), "not an integer"),
        (lambda: est.range(1, 2, column="b"), "no column 'b'"),
        (lambda: est.query([1.0, 2.0]), "40 finite numbers"),
        (lambda: s.estimate("nope"), "no batch estimate named 'nope'"),
        (lambda: s.batch("prefix(d)", epsilon=0.1, keep="dd"), "already kept"),
        (lambda: s.batch("prefix(d)", epsilon=0.1, keep="not a name"), "must be an identifier"),
        (lambda: s.batch("SELECT COUNT(*) FROM t WHERE d < 3", epsilon=0.1, keep="boxes"), "keeps no estimate"),
    ]
    for call, msg in cases:
        with pytest.raises(ConfigurationError, match=msg):
            call()
    assert s.spent == spent and set(s.estimates) == {"dd"}


def test_small_batches_keep_an_estimate_too_and_categorical_columns_answer_points() -> None:
    """The explicit path (a multi-column Kronecker strategy) keeps its estimate; follow-ups use the general
    quadratic form and agree with the batch's own answers and intervals."""
    s = _session()
    res = s.batch("identity(e) * identity(b)", epsilon=1.0, strategy="identity", keep="eb")
    est = s.estimate("eb")
    assert est.columns == ("e", "b")
    row = res.df[res.df["query"] == "e = -5 AND b = 'y'"].iloc[0]
    vec = np.zeros(60)
    vec[1] = 1.0
    ans = est.query(vec, label="e = -5 AND b = 'y'")
    assert ans.count == pytest.approx(row["count"]) and ans.ci_high == pytest.approx(row["count_ci_high"])
    pt = est.point("y", column="b")
    assert pt.count == pytest.approx(float(res.df[res.df["query"].str.endswith("b = 'y'")]["count"].sum()))
    assert est.range(-5, 14, column="e").count == pytest.approx(float(res.df["count"].sum()))
    with pytest.raises(ConfigurationError, match="name the column"):
        est.range(0, 3)
    with pytest.raises(ConfigurationError, match="categorical"):
        est.range("x", "y", column="b")
    with pytest.raises(ConfigurationError, match="not a declared value"):
        est.point("w", column="b")
    assert res.estimate is est and "kept as 'eb'" in res.summary()


def test_an_unkept_release_still_carries_its_estimate(implicit_small) -> None:
    s = _session()
    res = s.batch("prefix(d)", epsilon=0.5)
    assert res.estimate is not None and res.estimate.name == f"#{res.entry_id}" and not s.estimates
    assert res.estimate.prefix(20).count == pytest.approx(float(res.df["count"][20]), rel=1e-12)


# -- interval coverage ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_follow_up_intervals_cover(kind: str) -> None:
    """T = 4000 independent releases (seeded numpy noise of the release's scale) of one p-Identity strategy; in
    release t the follow-up range number t mod 820 is checked against the truth, so the misses are independent.
    Gaussian noise: the interval is exact, misses ~ Binomial(T, 0.05); the test fails only outside the central
    1 − 10⁻⁹ of that law (false-failure probability ≤ 10⁻⁹; the seed is fixed, so it never flakes).  Laplace: the
    estimate of a range is a sum of ≥ 40 scaled Laplace variables, near normal; same bounds."""
    rng = np.random.default_rng(11)
    n = 40
    a = PIdentity(rng.random((4, n)), norm=1 if kind == "laplace" else 2)
    x = rng.integers(0, 30, n).astype(float)
    scale = 3.0
    unit_var = 2 * scale**2 if kind == "laplace" else scale**2
    est_kw = dict(name="sim", columns=("d",), values=(tuple(range(n)),), ordered=(True,), strategy=a)
    s, e, _ = _ranges(n)
    t_total = 4000
    z = rng.laplace(0, scale, (n + 4, t_total)) if kind == "laplace" else rng.normal(0, scale, (n + 4, t_total))
    x_hats = a.reconstruct(a.measure(x)[:, None] + z)  # column t: the estimate of release t
    est0 = BatchEstimate(**est_kw, x_hat=x_hats[:, 0], unit_variance=unit_var, entry_id=0, workload="sim")
    half = est0.ranges(list(zip(s.tolist(), e.tolist(), strict=True)))
    half = (half["count_ci_high"] - half["count"]).to_numpy()  # the same for every release (public)
    i = np.arange(t_total) % len(s)
    cum = np.vstack([np.zeros(t_total), np.cumsum(x_hats, axis=0)])
    counts = cum[e[i] + 1, np.arange(t_total)] - cum[s[i], np.arange(t_total)]
    for t in (0, 1, 2, 821):  # the vectorised answers are BatchEstimate.range's
        est = BatchEstimate(**est_kw, x_hat=x_hats[:, t], unit_variance=unit_var, entry_id=t, workload="sim")
        ans = est.range(int(s[i[t]]), int(e[i[t]]))
        assert ans.count == pytest.approx(counts[t], rel=1e-12, abs=1e-9)
        assert ans.ci_high - ans.count == pytest.approx(half[i[t]], rel=1e-12)
    truth = np.cumsum(np.concatenate([[0.0], x]))
    truth = truth[e[i] + 1] - truth[s[i]]
    misses = int(np.sum(np.abs(counts - truth) > half[i]))
    lo, hi = binom.ppf(0.5e-9, t_total, 0.05), binom.isf(0.5e-9, t_total, 0.05)
    assert lo <= misses <= hi, (misses, lo, hi)


# -- the magic --------------------------------------------------------------------------------------------


def test_magic_keep_and_from(ip, implicit_small) -> None:
    ip.user_ns.update(tdf=_frame(), tschema=SCHEMA)
    result, cap = run(ip, "%dpsession tdf --schema tschema --budget epsilon=2.0")
    assert result.success, cap.stderr
    result, cap = run(ip, "%%dpbatch --epsilon 1 --keep bigs\nall_range(big)\n")
    assert result.success, cap.stderr
    sess = current_session()
    spent = sess.spent
    result, cap = run(ip, "%dpbatch --from bigs range 10 200")
    assert result.success, cap.stderr
    assert isinstance(result.result, DerivedAnswer) and result.result.query == "big BETWEEN 10 AND 200"
    result, cap = run(ip, "%dpbatch r2 << --from bigs prefix 50")
    assert result.success, cap.stderr
    assert list(ip.user_ns["r2"]["query"]) == ["big <= 50"]
    assert sess.spent == spent
    for line, msg in [
        ("%dpbatch --from nope range 1 2", "no batch estimate named 'nope'"),
        ("%dpbatch --from bigs range 0 5", "outside the declared domain"),
        ("%dpbatch --from bigs range 5", "expected range LO HI"),
        ("%dpbatch range 1 2", "give --from NAME"),
        ("%dpbatch --from bigs --epsilon 1 range 1 2", "does not apply"),
    ]:
        result, cap = run(ip, line)
        assert not result.success and msg in str(result.error_in_exec), (line, result.error_in_exec)
    result, cap = run(ip, "%%dpbatch --epsilon 1 --from bigs\nprefix(d)\n")
    assert not result.success and "line form" in str(result.error_in_exec)
    assert sess.spent == spent


def test_expected_rmse_is_exact_for_the_implicit_strategy(implicit_small, monkeypatch) -> None:
    """The preview's RMSE of an implicit batch = √(v·tr(WᵀW (AᵀA)⁻¹)/m) from the dense strategy matrix (numpy), and
    OPT₀ beats Identity (all ranges over 40 cells: the optimiser converges well within its 5 CPU-s)."""
    monkeypatch.setattr(rb, "IMPLICIT_OPT_SECONDS", (5.0, 5.0))
    s = _session()
    pre = s.batch("all_range(d)", epsilon=1.0, dry_run=True)
    assert pre.details["implicit"] and pre.details["queries"] == 820
    a = rb._OPT_CACHE[("all_range(d)", (40,), 1)]
    dense = a.matrix
    g = all_range(40).gram()
    exact = math.sqrt(2.0 * float(np.sum(g * np.linalg.inv(dense.T @ dense))) / 820)
    assert pre.rmse["opt"] == pytest.approx(exact, rel=1e-9)
    assert pre.rmse["opt"] < 0.95 * pre.rmse["identity"] and "hierarchical" in pre.skipped
    assert pre.rmse["identity"] == pytest.approx(math.sqrt(2.0 * np.trace(g) / 820), rel=1e-12)


# -- marginals on the compressed domain --------------------------------------------------------------------


@pytest.mark.parametrize("sizes,k", [((3, 4, 2), 2), ((5, 2), 1), ((2, 3, 2, 2), 3)])
def test_marginal_variances_closed_form_match_the_dense_pseudo_inverse(sizes, k) -> None:
    from dpmagic.batch import marginals, opt_marginals
    from dpmagic.batch.reconstruct import _marginal_pinv, _marginal_row_quadratics
    from dpmagic.batch.workloads import Kron, as_union

    w = marginals(sizes, k)
    a = opt_marginals(w)
    closed = np.concatenate(_marginal_row_quadratics(a, as_union(w)))
    xp = _marginal_pinv(a)
    dense = np.concatenate(
        [c * c * np.einsum("ij,jk,ik->i", Kron(t.factors).matrix(), xp, Kron(t.factors).matrix()) for c, t in w.terms]
    )
    assert np.allclose(closed, dense, rtol=1e-9, atol=1e-12)
    assert np.allclose(answer_variances(w, a, laplace(1.0)), 2.0 * dense, rtol=1e-9)


def test_marginals_over_more_than_4096_cells_are_answered_and_kept() -> None:
    """20 × 15 × 20 = 6,000 cells: the per-query variances come from the compressed domain (before: refused,
    'answer_variances: domain too large'); a point of one column from the kept estimate equals the batch's own
    1-way marginal answer, with the same interval."""
    schema = Schema.from_dict(
        {
            "table": "m",
            "columns": {
                "u": {"type": "int", "lower": 0, "upper": 19},
                "v": {"type": "int", "lower": 0, "upper": 14},
                "w": {"type": "int", "lower": 0, "upper": 19},
            },
        }
    )
    rng = np.random.default_rng(4)
    df = pd.DataFrame({c: rng.integers(0, m, 500) for c, m in (("u", 20), ("v", 15), ("w", 20))})
    s = dpmagic.Session(df, schema, "epsilon=1")
    res = s.batch("marginals([u, v, w], 2)", epsilon=0.5, keep="m2")
    assert res.strategy == "opt" and len(res.df) == 1 + 20 + 15 + 20 + 20 * 15 + 20 * 20 + 15 * 20
    est = s.estimate("m2")
    row = res.df[res.df["query"] == "v = 7"].iloc[0]
    ans = est.point(7, column="v")
    assert ans.count == pytest.approx(row["count"], rel=1e-9)
    assert ans.ci_high == pytest.approx(row["count_ci_high"], rel=1e-9)
    assert s.spent == pytest.approx(0.5)


def test_a_query_the_strategy_does_not_support_is_refused() -> None:
    """After 1-way marginals only (OPT_M measures no joint table), a joint cell is not determined: refused."""
    from dpmagic.batch import marginals, opt_marginals

    a = opt_marginals(marginals((3, 4), 1))
    assert not np.all(a.kappa > 0)
    est = BatchEstimate(
        name="m1",
        columns=("e", "b"),
        values=(tuple(range(3)), tuple("wxyz")),
        ordered=(True, False),
        strategy=a,
        x_hat=np.ones(12),
        unit_variance=2.0,
        entry_id=1,
        workload="marginals([e, b], 1)",
    )
    assert est.point("x", column="b").count == pytest.approx(3.0)
    assert est.range(0, 1, column="e").count == pytest.approx(8.0)
    cell = np.zeros(12)
    cell[5] = 1.0
    with pytest.raises(ConfigurationError, match="not determined by what 'm1' measured"):
        est.query(cell)


@pytest.mark.parametrize(
    "definition,neighbors", [("pure", "add-remove"), ("pure", "replace"), ("zcdp", "add-remove"), ("gdp", "replace")]
)
def test_implicit_mechanism_noise_and_variances_under_every_definition(implicit_small, definition, neighbors) -> None:
    """The implicit release's sensitivity is the strategy's (×2 L1 / ×√2 L2 under replace-one, PIdentity being
    non-negative), and every listed variance is exactly (noise variance at the scale used) · qᵀ(AᵀA)⁻¹q."""
    s = dpmagic.Session(
        _frame(), SCHEMA, {"pure": "epsilon=1", "zcdp": "rho=1", "gdp": "mu=1"}[definition], neighbors=neighbors
    )  # type: ignore[arg-type]
    cur = s.currency
    spec = parse_workload("all_range(d)", SCHEMA)
    replace = neighbors == "replace"
    plan = rb.plan_strategy(spec, cur, replace_one=replace)
    q = s.parse('SELECT COUNT(*) FROM "t" GROUP BY "d"')
    mech = rb.BatchMechanism(spec, q, cur, 0.5, replace_one=replace, plan=plan)
    a = mech.strategy
    assert mech.implicit and isinstance(a, PIdentity) and a.norm == mech.noise_model.p
    factor = rb.replace_factor(a.norm) if replace else 1.0
    assert mech.sensitivity == pytest.approx(factor, rel=1e-12) and mech.sensitivity >= factor
    noise_var = 2 * mech.scale**2 if mech.noise_model.kind == "laplace" else mech.scale**2
    starts, ends = rb.implicit_rows(spec)[1:]
    assert np.allclose(mech.variances, noise_var * PIdentityCovariance(a).ranges(starts, ends), rtol=1e-9)
    assert mech.unit_variance == pytest.approx(noise_var, rel=1e-9)
