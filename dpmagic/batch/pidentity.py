"""OPT₀: the p-Identity strategy optimiser of HDMM (formulas from the paper only).

McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of high-dimensional statistical queries under
differential privacy", PVLDB 11(10), 2018, doi:10.14778/3231751.3231769, §4.3 (Defs. 13–14).

A(B) = [I; B]·D with B ≥ 0 (p × n) and D = S⁻¹ rescaling every column to unit L1 norm (Laplace) or unit L2
norm (used for the Gaussian variant of OPT⊗ factors), so Δ(A) = 1 and the objective is the least-squares error
f(B) = ‖W A⁺‖²_F = tr(S G S M⁻¹) with G = WᵀW and M = I + BᵀB.  By Woodbury, with C = I_p + BBᵀ and
R = C⁻¹B (= B M⁻¹), Y = B·S G S and V = R·S G S:

    f = Σ_k G_kk s_k² − ⟨R, Y⟩,    ∂f/∂B = −2 (V − (V Bᵀ) R) + 1_p g_sᵀ ∘ ∂s/∂B,
    ∂f/∂s_k = 2 (G_kk s_k − Σ_l Y_lk R_lk / s_k),  ∂s_k/∂B_lk = 1 (L1) or B_lk / s_k (L2).

The workload enters only through products v ↦ v G: for ranges (prefix, all ranges, width-k, permuted ranges)
these are exact O(pn) prefix sums (:meth:`dpmagic.batch.workloads.Dense.gram_rmul`), so an evaluation costs
about 7 p²n flops (four p × n × p products) instead of O(pn²); for any other Gram one dense product B·SGS
(2pn²) replaces the second structured product.

Optimiser: a projected limited-memory BFGS for the bound B ≥ 0 (two-loop recursion on the free variables,
projected Armijo backtracking) written with numpy — scipy's L-BFGS-B spends ~0.3 s per iteration in its own
bookkeeping at p·n = 10⁶ variables, three times the cost of the objective here.  Starts: B uniform in
[0, init_scale]; the best of ``restarts`` runs (and of B = 0, i.e. Identity) is returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from dpmagic.batch.implicit import gram_diag
from dpmagic.batch.strategies import PIdentity, _pid_objective
from dpmagic.batch.workloads import Dense
from dpmagic.errors import ConfigurationError

__all__ = ["opt_p_identity", "default_p", "pid_value_and_grad", "projected_lbfgs"]

Rmul = Callable[[np.ndarray], np.ndarray]


#: B ≤ (MAX_SCALE − 1)/p keeps every column scale s = 1 + 1ᵀB (L1) or √(1 + ‖B_k‖²) (L2) ≤ MAX_SCALE, so the
#: Woodbury value Σ G_kk s_k² − ⟨R, Y⟩ loses at most ~MAX_SCALE²·2⁻⁵³·tr(G) ≈ 10⁻⁸·tr(G) to cancellation.
#: Without it, workloads whose infimum lies at B → ∞ (Total, prefix on n ≤ 6) drove B to 10¹⁰ where the value
#: computed was 0 or negative.  The bound never binds on the range workloads of HDMM Table 4 (max B ≈ 10).
MAX_SCALE = 1e4

#: coarse-to-fine start from this domain size on (see opt_p_identity; off by default: on the n = 4096 range
#: workloads it led to worse optima than uniform starts — prefix 12.64, all-range 15.19, width-32 8.00 in 60 CPU-s)
COARSE_MIN_N = 1 << 62
#: share of a coarse pilot's time spent on the coarse problem
COARSE_SHARE = 0.5
#: with a time limit and n ≥ PILOT_MIN_N: pilot runs from uniform starts at these multiples of the default
#: scale (and the coarse start when enabled), PILOT_SHARE of the limit in all, then the rest on the best
PILOT_MIN_N = 2048
PILOT_SCALES: tuple[tuple[float, float], ...] = ((1.0, 4.0), (0.5, 1.0))
PILOT_SHARE = 0.2


def default_p(n: int) -> int:
    """HDMM's convention p = n/16 (at least 1)."""
    return max(1, n // 16)


def pid_value_and_grad(b: np.ndarray, rmul: Rmul, dg: np.ndarray, norm: int, structured: bool):
    """f(B) and ∂f/∂B (module docstring); ``rmul(v) = v G``; ``structured`` when rmul is O(pn)."""
    s = 1.0 + b.sum(axis=0) if norm == 1 else np.sqrt(1.0 + (b * b).sum(axis=0))
    y = rmul(b * s) * s
    ci = np.linalg.inv(np.eye(b.shape[0]) + b @ b.T)
    ci = 0.5 * (ci + ci.T)
    r = ci @ b
    f = float(dg @ (s * s) - np.sum(r * y))
    v = rmul(r * s) * s if structured else ci @ y
    d_m = -2.0 * (v - (v @ b.T) @ r)
    g_s = 2.0 * (dg * s - (y * r).sum(axis=0) / s)
    d_s = g_s[None, :] if norm == 1 else g_s[None, :] * b / s[None, :]
    return f, d_m + d_s


def projected_lbfgs(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray,
    *,
    memory: int = 10,
    maxiter: int = 10_000,
    ftol: float = 1e-12,
    deadline: float | None = None,
    upper: float = np.inf,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[np.ndarray, float]:
    """Minimise fun over 0 ≤ x ≤ upper: L-BFGS direction on the free set (coordinates not held at a bound by
    the gradient), projected Armijo backtracking.

    Every accepted step decreases f; stops after ``maxiter`` iterations, when the relative decrease is below
    ``ftol``, or when ``clock()`` passes ``deadline``.  O(memory · len(x)) per iteration besides fun.
    """
    x = np.clip(np.asarray(x0, dtype=float), 0.0, upper)
    f, g = fun(x)
    mem: list[tuple[np.ndarray, np.ndarray, float]] = []
    for _ in range(maxiter):
        free = ((x > 0) | (g < 0)) & ((x < upper) | (g > 0))
        q = np.where(free, g, 0.0)
        alphas = []
        for s, y, rho in reversed(mem):
            a = rho * float(s @ q)
            alphas.append(a)
            q -= a * y
        if mem:
            s, y, _ = mem[-1]
            q *= float(s @ y) / float(y @ y)
        else:
            q /= max(float(np.abs(q).max()), 1e-300)
        for (s, y, rho), a in zip(mem, reversed(alphas), strict=True):
            q += (a - rho * float(y @ q)) * s
        d = -np.where(free, q, 0.0)
        if float(g @ d) >= 0:  # not a descent direction: restart from steepest descent
            mem.clear()
            d = -np.where(free, g, 0.0) / max(float(np.abs(g).max()), 1e-300)
        step = 1.0
        while True:
            xn = np.clip(x + step * d, 0.0, upper)
            fn, gn = fun(xn)
            if fn <= f + 1e-4 * float(g @ (xn - x)) or step < 1e-12:
                break
            step *= 0.5
        if fn > f:
            break
        s, y = xn - x, gn - g
        sy = float(s @ y)
        if sy > 1e-12 * float(y @ y):
            mem.append((s, y, 1.0 / sy))
            if len(mem) > memory:
                mem.pop(0)
        done = f - fn <= ftol * max(abs(f), abs(fn), 1.0)
        x, f, g = xn, fn, gn
        if done or (deadline is not None and clock() > deadline):
            break
    return x, f


def opt_p_identity(
    gram: np.ndarray | Dense,
    p: int | None = None,
    *,
    norm: int = 1,
    restarts: int = 3,
    seed: int = 0,
    maxiter: int = 10_000,
    init: np.ndarray | None = None,
    init_scale: float | None = None,
    time_limit: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    coarse_min_n: int = COARSE_MIN_N,
    coarse_share: float = COARSE_SHARE,
    pilot_scales: tuple[tuple[float, float], ...] = PILOT_SCALES,
    pilot_share: float = PILOT_SHARE,
    pilot_min_n: int = PILOT_MIN_N,
    trace: list[tuple[str, float]] | None = None,
) -> PIdentity:
    """OPT₀ (HDMM Def. 14): the best p-Identity strategy for the workload (a :class:`Dense` block or a Gram).

    ``norm`` 1 normalises columns in L1 (Laplace), 2 in L2.  p defaults to n/16 and is capped at n − 1
    (more rows never help a strategy that already contains I); for n = 1, Identity is returned.  Starts:
    ``init`` if given, then B uniform in [0, init_scale] (default 25/p, capped at 1).  B is kept in
    [0, (MAX_SCALE − 1)/p] (see :data:`MAX_SCALE`).  ``time_limit``
    (seconds of ``clock``, wall clock by default; time.process_time on a shared machine; over all
    restarts) stops early with the best iterate.  The result is never worse than Identity
    (B = 0, a stationary point that is sometimes optimal).  Cost: restarts × iterations × O(p²n) for range
    workloads, O(p²n + pn²) otherwise.

    Pilot (``time_limit`` given, n ≥ ``pilot_min_n``, no ``init``): ``pilot_share`` of the limit is split between
    starts with round(f·p) rows, uniform in [0, m·init_scale], for (f, m) in ``pilot_scales`` (f ≠ 1 only when p was
    not given; and the coarse start below when n ≥ ``coarse_min_n``); the one with the smallest f continues for the
    rest of the limit (its pilot iterations are kept; should it converge early, the next one continues), so the
    result may have fewer than p rows. A pilot that converged at Identity's value (collapsed to B = 0) is not
    continued. HDMM §9 recommends several random restarts; on n = 4096 the best initial scale differs between
    workloads (width-32 ranges fall back to Identity from small scales, prefix and all ranges do worse from large
    ones) and prefix, all ranges and permuted ranges get further in 60 CPU-s with p = n/32 (cheaper iterations;
    prefix 12.18 vs 12.56), while width-32 ranges collapse to Identity with p = n/32 and need p = n/16 from a 4×
    scale: the default pilots are (p = n/16, 4× the scale) and (p = n/32, the scale). ``trace`` (a list) receives
    (label, f) of every pilot and of the continued run. ``restarts`` is not used on this path.

    Coarse-to-fine start (n ≥ ``coarse_min_n``, n divisible by 4, no ``init``): the first start is the OPT₀
    solution of the coarsened problem — the Gram Pᵀ G P of the workload on data constant over blocks of 4
    cells (P = I_{n/4} ⊗ 1₄), p/4 rows, solved recursively with ``coarse_share`` of the time limit — with
    each coarse row spread over its 4 cells (B[4l, :] = B_c[l] ⊗ 1₄ᵀ: the same queries over the fine domain)
    and the other rows small and random (1e-3 · U[0, 1], so that they are not stuck at the stationary B = 0).
    Off by default (see :data:`COARSE_MIN_N`).
    """
    if isinstance(gram, Dense):
        n = gram.n
        structured = gram.fast_rmul
        g = None if structured else np.asarray(gram.gram(), dtype=float)
        dg = gram_diag(gram)  # without the n × n Gram for a structured block
        rmul0: Rmul = gram.gram_rmul if structured else (lambda v: v @ g)
    else:
        g = np.asarray(gram, dtype=float)
        if g.ndim != 2 or g.shape[0] != g.shape[1] or not np.all(np.isfinite(g)):
            raise ConfigurationError("opt_p_identity: the Gram matrix must be a finite square array")
        n, structured, dg = g.shape[0], False, np.diag(g).copy()
        rmul0 = lambda v: v @ g  # noqa: E731
    p_given = p is not None
    p = default_p(n) if p is None else int(p)
    if p < 1:
        raise ConfigurationError(f"opt_p_identity: p must be ≥ 1, got {p}")
    p = max(1, min(p, n - 1))
    scale = float(dg.sum()) or 1.0
    dgn = dg / scale
    gn = g / scale if g is not None and n <= 512 else None  # small n: final comparison by Cholesky
    upper = (MAX_SCALE - 1.0) / p

    def rmul(v: np.ndarray) -> np.ndarray:
        return rmul0(v) / scale

    def fun_p(pp: int) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
        def f_and_g(x: np.ndarray) -> tuple[float, np.ndarray]:
            f, d = pid_value_and_grad(x.reshape(pp, n), rmul, dgn, norm, structured)
            return f, d.reshape(-1)

        return f_and_g

    fun = fun_p(p)

    best_f, best_b = float(dgn.sum()), np.zeros((p, n))  # Identity: f = tr(G)
    if n > 1:
        rng = np.random.default_rng(seed)
        sc = min(1.0, 25.0 / p) if init_scale is None else float(init_scale)
        deadline = None if time_limit is None else clock() + float(time_limit)
        coarse = n >= coarse_min_n and n % 4 == 0 and p >= 4
        starts: list[tuple[str, int, float]] = [("coarse", p, 0.0)] if coarse else []
        for pf, m in pilot_scales:
            if p_given and pf != 1.0:
                continue
            pp = max(1, min(n - 1, round(p * pf)))
            label = f"p={pp} ×{m:g}"
            if label not in [t[0] for t in starts]:
                starts.append((label, pp, sc * float(m)))
        pilot = init is None and time_limit is not None and n >= pilot_min_n and len(starts) > 1
        if pilot:  # short runs from several starts, then the rest of the time on the best (docstring)
            assert time_limit is not None and deadline is not None  # a pilot needs a time limit (above)
            each = float(pilot_share) * float(time_limit) / len(starts)
            runs = []
            for label, pp, scl in starts:
                if label == "coarse":
                    x0 = _coarse_start(rmul0, n, p, norm, rng, coarse_share * each, clock)
                else:
                    x0 = rng.random((pp, n)) * scl
                stop = min(clock() + each, deadline)
                up = (MAX_SCALE - 1.0) / pp
                x, f = projected_lbfgs(fun_p(pp), x0.reshape(-1), maxiter=maxiter, deadline=stop, upper=up, clock=clock)
                # a run that stopped before its time at Identity's value has collapsed to B = 0: not continued
                if not (clock() < stop and f >= best_f * (1.0 - 1e-9)):
                    runs.append((f, label, pp, x))
                if trace is not None:
                    trace.append((f"pilot {label}", f))
            for _, label, pp, x0 in sorted(runs, key=lambda t: t[0]):  # the best; the next if it converges early
                fb = fun_p(pp)
                up = (MAX_SCALE - 1.0) / pp
                x, _ = projected_lbfgs(fb, x0, maxiter=maxiter, deadline=deadline, upper=up, clock=clock)
                f = pid_error(gn, x.reshape(pp, n), norm) if gn is not None else fb(x)[0]
                if trace is not None:
                    trace.append((f"continued {label}", f))
                if np.isfinite(f) and f < best_f:
                    best_f, best_b = f, x.reshape(pp, n)
                if clock() > deadline:
                    break
        for r in range(0 if pilot else max(1, int(restarts))):
            if init is not None and r == 0:
                x0 = np.asarray(init, dtype=float).reshape(p, n)
            elif r == 0 and coarse:
                x0 = _coarse_start(
                    rmul0, n, p, norm, rng, None if time_limit is None else coarse_share * float(time_limit), clock
                )
            else:
                x0 = rng.random((p, n)) * sc
            x, _ = projected_lbfgs(fun, x0.reshape(-1), maxiter=maxiter, deadline=deadline, upper=upper, clock=clock)
            f = pid_error(gn, x.reshape(p, n), norm) if gn is not None else fun(x)[0]
            if np.isfinite(f) and f < best_f:
                best_f, best_b = f, x.reshape(p, n)
            if deadline is not None and clock() > deadline:
                break
    return PIdentity(best_b, norm=norm, name=f"OPT0[p={best_b.shape[0]}]")


def _coarse_start(
    rmul0: Rmul, n: int, p: int, norm: int, rng: np.random.Generator, limit: float | None, clock: Callable[[], float]
) -> np.ndarray:
    """The coarse-to-fine first start of :func:`opt_p_identity` (its docstring).  O(n²/4) for the coarse Gram."""
    nc = n // 4
    pt = np.kron(np.eye(nc), np.ones((1, 4)))  # Pᵀ, nc × n
    gc = rmul0(pt).reshape(nc, nc, 4).sum(axis=2)  # Pᵀ G P
    gc = 0.5 * (gc + gc.T)
    bc = opt_p_identity(gc, p // 4, norm=norm, restarts=1, time_limit=limit, clock=clock).B
    x0 = rng.random((p, n)) * 1e-3
    x0[: 4 * bc.shape[0] : 4] = np.repeat(bc, 4, axis=1)
    return x0


def pid_error(gram: np.ndarray, b: np.ndarray, norm: int) -> float:
    """tr(S G S M⁻¹) in float64 by Cholesky (the reference evaluation)."""
    return float(_pid_objective(gram, b, norm, grad=False)[0])
