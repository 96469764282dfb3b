"""OPT₀ (HDMM §4.2–4.3): exact structured Gram products, tiny domains, the Gaussian convex optimiser.

McKenna, Miklau, Hay, Machanavajjhala, PVLDB 11(10) 2018, doi:10.14778/3231751.3231769.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmagic.batch import (
    all_range,
    analytic_gaussian,
    explicit,
    identity,
    identity_strategy,
    laplace,
    opt_p_identity,
    permuted_range,
    prefix,
    rmse,
    svd_bound_rmse,
    total,
    width_range,
)
from dpmagic.batch.gaussian_opt import opt_gaussian
from dpmagic.batch.pidentity import pid_value_and_grad, projected_lbfgs
from dpmagic.errors import ConfigurationError

L1 = laplace(1.0)
G6 = analytic_gaussian(1.0, 1e-6)


def _blocks(n: int) -> list:
    out = [prefix(n), all_range(n), identity(n), total(n), permuted_range(n, seed=n)]
    out += [width_range(n, k) for k in sorted({1, max(1, n // 2), n})]
    return out


@given(st.integers(1, 40), st.integers(1, 4), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None, derandomize=True)
def test_gram_rmul_is_exact(n: int, k: int, seed: int) -> None:
    v = np.random.default_rng(seed).integers(-5, 6, size=(k, n)).astype(float)
    for w in _blocks(n):
        np.testing.assert_allclose(w.gram_rmul(v), v @ w.matrix().T @ w.matrix(), rtol=0, atol=1e-9)


def _dense_error(w, a: np.ndarray, p: int) -> float:
    """‖W A⁺‖²_F · Δ_p(A)² from the explicit matrices."""
    wa = w.matrix() @ np.linalg.pinv(a)
    sens = np.abs(a).sum(axis=0).max() if p == 1 else np.sqrt((a * a).sum(axis=0).max())
    return float((wa * wa).sum() * sens**2)


def _brute_sensitivity(a: np.ndarray, p: int) -> float:
    """max over neighbouring histograms x, x ± e_i of ‖A(x − x')‖_p."""
    n = a.shape[1]
    return max(float(np.linalg.norm(a @ np.eye(n)[i], ord=p)) for i in range(n))


@given(st.integers(1, 8), st.sampled_from([1, 2]), st.integers(0, 10**6))
@settings(max_examples=40, deadline=None, derandomize=True)
def test_tiny_domains_never_worse_than_identity(n: int, norm: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ws = _blocks(n) + [explicit(rng.integers(0, 3, size=(rng.integers(1, 6), n)) * 1.0)]
    for w in ws:
        if not np.any(w.gram()):
            continue
        a = opt_p_identity(w, norm=norm, restarts=2, seed=seed)
        assert 1 <= a.B.shape[0] <= max(1, n - 1)
        mat = a.matrix
        for p in (1, 2):
            assert a.sensitivity(p) == pytest.approx(_brute_sensitivity(mat, p), rel=1e-12)
        err = a.trace(w)
        dense = _dense_error(w, mat, norm)
        assert np.isfinite(err) and err == pytest.approx(dense, rel=1e-6, abs=1e-9)
        ident = _dense_error(w, np.eye(n), norm)
        assert dense <= ident * (1 + 1e-9)


def test_prefix6_and_total_no_longer_degenerate() -> None:
    for w in (prefix(6), prefix(4), total(5)):
        a = opt_p_identity(w, restarts=3, seed=0)
        assert float(a.s.max()) <= 1e4
        assert a.trace(w) == pytest.approx(_dense_error(w, a.matrix, 1), rel=1e-6)
    # Total: the single total query is optimal (error 1); the bounded optimum is within 0.1% of it
    assert opt_p_identity(total(5), restarts=1).trace(total(5)) == pytest.approx(1.0, rel=1e-3)


def test_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    for w in (all_range(20), width_range(20, 6)):
        g = w.gram()
        b = rng.random((3, 20))
        for norm in (1, 2):
            for structured, rmul in ((True, w.gram_rmul), (False, lambda v, g=g: v @ g)):
                f, d = pid_value_and_grad(b, rmul, np.diag(g), norm, structured)
                h = 1e-6
                for i, j in [(0, 0), (1, 7), (2, 19)]:
                    e = np.zeros_like(b)
                    e[i, j] = h
                    fp = pid_value_and_grad(b + e, rmul, np.diag(g), norm, structured)[0]
                    fm = pid_value_and_grad(b - e, rmul, np.diag(g), norm, structured)[0]
                    assert d[i, j] == pytest.approx((fp - fm) / (2 * h), rel=1e-5, abs=1e-4)


def test_projected_lbfgs_box_qp() -> None:
    """min ½‖x − c‖² over 0 ≤ x ≤ 1 is clip(c, 0, 1)."""
    c = np.array([-1.0, 0.3, 2.0, 0.9])
    x, f = projected_lbfgs(lambda x: (0.5 * float((x - c) @ (x - c)), x - c), np.full(4, 0.5), upper=1.0)
    np.testing.assert_allclose(x, np.clip(c, 0, 1), atol=1e-8)


def test_opt0_laplace_anchors_n256() -> None:
    """HDMM Table 4 (ε = 1, Laplace) at n = 256: all-range 8.07, prefix 7.35, width-32 6.34 (within 2%)."""
    for w, paper in ((all_range(256), 8.07), (prefix(256), 7.35), (width_range(256, 32), 6.34)):
        r = rmse(w, opt_p_identity(w, restarts=1, seed=0), L1)
        assert r <= paper * 1.02
        assert r >= svd_bound_rmse(w, L1)


@pytest.mark.parametrize(
    "w, paper",
    [(all_range(64), 9.73), (prefix(64), 8.87), (width_range(64, 32), 8.74), (all_range(256), 12.26)],
)
def test_gaussian_opt0_table5(w, paper: float) -> None:
    """HDMM Table 5 (δ = 10⁻⁶): the convex Gaussian OPT₀ is within 1% and above the SVD bound."""
    a = opt_gaussian(w)
    assert a.sensitivity(2) == pytest.approx(1.0)
    r = rmse(w, a, G6)
    assert r == pytest.approx(paper, rel=0.01)
    assert r >= svd_bound_rmse(w, G6) * (1 - 1e-9)
    assert r <= rmse(w, identity_strategy(w.n), G6)


def test_gaussian_opt0_matches_dense_error_and_rejects_unused_cells() -> None:
    w = all_range(9)
    a = opt_gaussian(w).matrix
    assert _dense_error(w, a, 2) == pytest.approx(rmse(w, opt_gaussian(w), G6) ** 2 * w.m / G6.unit_variance)
    with pytest.raises(ConfigurationError, match="every cell"):
        opt_gaussian(explicit([[1.0, 0.0, 1.0]]))


def test_small_exhaustive_prefix_p1() -> None:
    """p = 1 on prefix(3): the optimiser's value is within 0.5% of a fine grid search over b ∈ [0, 4]³."""
    w = prefix(3)
    a = opt_p_identity(w, p=1, restarts=3, seed=0)
    best = min(
        _dense_error(w, np.vstack([np.eye(3), np.array(b)[None, :]]) / (1 + np.array(b))[None, :], 1)
        for b in itertools.product(np.linspace(0, 4, 41), repeat=3)
    )
    assert a.trace(w) <= best * 1.005


def test_opt_union_finite_on_marginals_and_mixed_unions() -> None:
    """OPT₊ (HDMM Def. 19) was degenerate (error ∞) on marginal unions: Total factors drove B → ∞."""
    from dpmagic.batch import KronStrategy, Stack, kron, marginals, opt_union

    for w in (
        marginals((5, 3, 4), 2),
        Stack(((1.0, kron(prefix(6), identity(4))), (1.0, kron(identity(6), total(4))))),
    ):
        a = opt_union(w, noise=L1, restarts=1)
        err = a.trace(w) * a.sensitivity(1) ** 2
        ident = KronStrategy(tuple(identity_strategy(n) for n in w.domain))
        assert np.isfinite(err) and err > 0
        # the local-least-squares value (what large domains report) bounds the exact global error
        local = (
            sum(a.terms[j][1].trace(Stack(((c, t),))) / a.terms[j][0] ** 2 for j, (c, t) in enumerate(w.terms))
            * a.sensitivity(1) ** 2
        )
        assert err <= local * (1 + 1e-9)
        # per-sub-workload strategies split the budget (cube-root rule): on small marginal unions this can cost
        # more than Identity; bounded by the number of sub-workloads times Identity's error
        assert err <= len(w.terms) * ident.trace(w) * ident.sensitivity(1) ** 2


# -- the coarse-to-fine start (n ≥ COARSE_MIN_N) ------------------------------------------------------------


@pytest.mark.parametrize("w", [prefix(64), width_range(64, 8), all_range(64), permuted_range(64, seed=3)])
def test_coarse_start_gram_and_upsampling(w) -> None:
    """The coarse Gram is Pᵀ G P (numpy on the explicit matrix) and the start puts B_c ⊗ 1₄ᵀ on rows 0, 4, …"""
    from dpmagic.batch.pidentity import _coarse_start

    n, p = w.n, 8
    rmul = w.gram_rmul if w.fast_rmul else (lambda v: v @ w.gram())
    captured = {}

    def fake_opt(gram, pc, **kw):  # record the coarse problem, return a known B_c
        captured["gram"], captured["p"] = np.asarray(gram), pc
        return type("S", (), {"B": np.arange(1.0, 1.0 + pc * (n // 4)).reshape(pc, n // 4)})()

    import dpmagic.batch.pidentity as pid

    real = pid.opt_p_identity
    pid.opt_p_identity = fake_opt
    try:
        x0 = _coarse_start(rmul, n, p, 1, np.random.default_rng(0), None, lambda: 0.0)
    finally:
        pid.opt_p_identity = real
    pm = np.kron(np.eye(n // 4), np.ones((4, 1)))  # P, n × n/4
    wm = w.matrix()
    np.testing.assert_allclose(captured["gram"], (wm @ pm).T @ (wm @ pm), rtol=1e-12, atol=1e-9)
    assert captured["p"] == p // 4
    bc = np.arange(1.0, 1.0 + (p // 4) * (n // 4)).reshape(p // 4, n // 4)
    np.testing.assert_array_equal(x0[0:8:4], np.repeat(bc, 4, axis=1))
    rest = np.delete(x0, [0, 4], axis=0)
    assert rest.min() >= 0 and rest.max() <= 1e-3


@pytest.mark.parametrize("w", [prefix(64), width_range(64, 8), all_range(64), permuted_range(64, seed=3)])
def test_coarse_to_fine_result_is_exact_and_beats_identity(w) -> None:
    """With the coarse start forced on n = 64, the returned strategy is valid, its error is the exact
    least-squares error (numpy pseudo-inverse) and no worse than Identity's."""
    a = opt_p_identity(w, 8, coarse_min_n=16, maxiter=300)
    assert a.B.shape == (8, 64) and a.B.min() >= 0
    mat = a.matrix
    wm = w.matrix()
    exact = np.linalg.norm(wm @ np.linalg.pinv(mat)) * np.abs(mat).sum(axis=0).max() * np.sqrt(2 / wm.shape[0])
    assert rmse(w, a, L1) == pytest.approx(exact, rel=1e-8)
    assert rmse(w, a, L1) <= rmse(w, identity_strategy(64), L1) * (1 + 1e-12)


def test_pilot_then_continue_the_best_deterministic_clock() -> None:
    """With a time limit (a deterministic tick clock) the pilot runs the coarse start and the uniform scales,
    continues the best, and returns a strategy whose exact error is the best one seen (never above Identity)."""
    ticks = itertools.count()
    w = prefix(64)
    trace: list[tuple[str, float]] = []
    a = opt_p_identity(
        w, coarse_min_n=16, pilot_min_n=16, time_limit=400, clock=lambda: float(next(ticks)), trace=trace
    )
    labels = [t[0] for t in trace]
    assert labels[:3] == ["pilot coarse", "pilot p=4 ×4", "pilot p=2 ×1"]
    assert labels[-1].startswith("continued")
    best_pilot = min(f for lab, f in trace if lab.startswith("pilot"))
    assert min(f for lab, f in trace if lab.startswith("continued")) <= best_pilot * (1 + 1e-9)
    assert a.B.min() >= 0 and a.B.shape[0] in (2, 4)
    assert rmse(w, a, L1) <= rmse(w, identity_strategy(64), L1) * (1 + 1e-12)
    # with p given, only that p is tried
    trace2: list[tuple[str, float]] = []
    ticks2 = itertools.count()
    scales = ((1.0, 1.0), (1.0, 4.0), (0.5, 1.0))
    opt_p_identity(
        w, 8, pilot_min_n=16, pilot_scales=scales, time_limit=400, clock=lambda: float(next(ticks2)), trace=trace2
    )
    assert [t[0] for t in trace2[:2]] == ["pilot p=8 ×1", "pilot p=8 ×4"]
    assert not any("p=4" in t[0] for t in trace2)
