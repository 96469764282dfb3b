"""Whole workloads at once as mechanisms: the matrix mechanism (HDMM) and a batch of boxes (exact batch sensitivity).

:class:`BatchMechanism` answers a workload W (parsed by :mod:`dpmagic.batch.spec` over declared columns) within
a WHERE box: the data vector x is the histogram of the box's rows over the columns' declared values (one
GROUP BY query); a strategy A is measured, y = A x + z, with OpenDP's vector Laplace (pure ε, L1) or Gaussian
(ρ-zCDP / μ-GDP, L2) noise, x̂ = A⁺y by least squares and every workload query is answered as W x̂ with a 95%
interval from its exact variance (McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of
high-dimensional statistical queries under differential privacy", PVLDB 11(10), 2018,
doi:10.14778/3231751.3231769; Li, Miklau, Hay, McGregor, Rastogi, "The matrix mechanism", VLDB J. 24(6),
2015, doi:10.1007/s00778-015-0398-x).

**Sensitivity of A x.**  Add/remove one row of the box changes x by ±e_j, so ‖AΔx‖_p = ‖a_j‖_p and
Δ_p = max_j ‖a_j‖_p (A's largest column norm); a row outside the box changes nothing.  Replace one row: both
rows in the box change x by e_j − e_k (j ≠ k), one inside by ±e_j, none inside by 0.  ‖a_j − a_k‖₁ ≤
‖a_j‖₁ + ‖a_k‖₁ ≤ 2Δ₁ (triangle inequality), and for a non-negative A (every strategy here: identities,
counting workloads, hierarchies, p-Identity with B ≥ 0, their Kronecker products and marginal weights θ ≥ 0)
⟨a_j, a_k⟩ ≥ 0 so ‖a_j − a_k‖₂² = ‖a_j‖² + ‖a_k‖² − 2⟨a_j, a_k⟩ ≤ 2Δ₂²: replace-one Δ₁' = 2Δ₁, Δ₂' = √2·Δ₂
(exact for the identity strategy; checked by brute force in tests/test_batch_session.py).

**Coverage.** The cells of x are disjoint within the WHERE box, so the release depends only on the box's
rows: one node for the accountant, its coverage the WHERE box; the cost is the session's ε (ρ, μ).

:class:`BoxBatchMechanism` answers several ``SELECT COUNT(*) ... WHERE <box>`` at once with the workload itself
as the strategy: i.i.d. noise calibrated to the batch's exact sensitivity (Inan, Gursoy, Saygin,
"Sensitivity analysis for non-interactive differential privacy: bounds and efficient algorithms", IEEE TDSC,
doi:10.1109/TDSC.2017.2734664: add/remove L1 = the maximum overlap ω, L2 = √ω; replace-one exact, from
:func:`dpmagic.batch.sensitivity.batch_sensitivity`); its coverage is the bounding box of the boxes.

Size: one module (≈ 600 lines) because both batch mechanisms share the planning of strategies, their sound
sensitivities and the least-squares answers with their intervals; the strategies themselves live in
:mod:`dpmagic.batch`.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dpmagic.batch.error import rmse as expected_rmse
from dpmagic.batch.gaussian_opt import opt_gaussian
from dpmagic.batch.implicit import PIdentityCovariance, one_column_block, range_sums
from dpmagic.batch.optimize import opt_kron, opt_marginals
from dpmagic.batch.pidentity import opt_p_identity
from dpmagic.batch.reconstruct import answer_variances, reconstruct, workload_answers
from dpmagic.batch.spec import MAX_BATCH_QUERIES, WorkloadSpec
from dpmagic.batch.strategies import KronStrategy, PIdentity, hb_strategy, identity_strategy
from dpmagic.domain.sets import Box
from dpmagic.errors import ConfigurationError
from dpmagic.noise.families import NoiseFamily, gaussian_gdp, gaussian_zcdp, laplace
from dpmagic.noise.samplers import vector_measurement
from dpmagic.releases.base import Backend, Mechanism, QueryBoxMechanism

if TYPE_CHECKING:
    from dpmagic.accountant.currency import Currency
    from dpmagic.domain.schema import Schema
    from dpmagic.query.model import Query

__all__ = [
    "BatchMechanism",
    "BoxBatchMechanism",
    "STRATEGIES",
    "candidate_strategies",
    "noise_model",
    "replace_factor",
    "opendp_scale",
    "person_factor",
    "bounding_box",
]

#: the strategies a batch may use ("auto" picks the smallest expected RMSE among those that apply)
STRATEGIES = ("identity", "workload", "hierarchical", "opt", "opt_gaussian")
#: the workload strategy is used explicitly (an n × n eigendecomposition): only for small domains
_WORKLOAD_MAX_N = 1024
_WORKLOAD_MAX_ENTRIES = 4_000_000
#: p-Identity optimisation costs O(n²p) per step: per-attribute limit
_OPT_MAX_N = 1024
#: Gaussian OPT₀ (dpmagic.batch.gaussian_opt) costs ≤ 12 n × n eigendecompositions: n ≤ 1024 keeps a cell fast
_OPT_GAUSSIAN_MAX_N = 1024
_Z95 = 1.959963984540054
#: one-column range workloads over more values than this are answered implicitly under Laplace noise (is_implicit)
_IMPLICIT_MIN_N = 256
#: implicit OPT₀ (one column, n > _OPT_MAX_N or more than MAX_BATCH_QUERIES queries): CPU seconds of this process
#: (time.process_time: the result does not depend on other jobs' load) for the strategy search, from
#: IMPLICIT_OPT_SECONDS[0] at n ≤ 1024 rising linearly to IMPLICIT_OPT_SECONDS[1] at n ≥ 4096 (all ranges over 4,096
#: cells: RMSE 14.60 at ε = 1 after 40 s on the shared 2-core machine, HDMM's OPT₀ 14.38; over 700 cells 3 s gave
#: 17–20 depending on the load, 10 s 10.6, hence the floor)
IMPLICIT_OPT_SECONDS = (6.0, 45.0)
#: ... and never more than this many wall-clock seconds (on a heavily loaded machine the search stops early with its
#: best strategy so far, never worse than Identity; the expected RMSE shown is that strategy's, exactly)
IMPLICIT_OPT_WALL_SECONDS = 55.0
#: OPT₀ strategies found for implicit batches, by (workload, sizes, norm): public, reused by a dry run's release
_OPT_CACHE: dict[tuple[str, tuple[int, ...], int], PIdentity] = {}
_OPT_CACHE_SIZE = 8


def is_implicit(spec: WorkloadSpec, p: int = 1) -> bool:
    """Answered implicitly (:mod:`dpmagic.batch.implicit`; the workload is never materialised): one column with more
    cells than the explicit optimiser takes or more queries than a batch lists, or — Laplace noise (p = 1) — ranges
    over more than :data:`_IMPLICIT_MIN_N` values (the explicit OPT⊗ costs O(pn²) per step and has no time limit;
    under Gaussian noise the explicit path keeps the Gaussian OPT₀ up to its limit)."""
    if len(spec.columns) != 1:
        return False
    if spec.n > _OPT_MAX_N or spec.num_queries > MAX_BATCH_QUERIES:
        return True
    return p == 1 and spec.has_ranges and spec.n > _IMPLICIT_MIN_N


def implicit_opt_seconds(n: int) -> float:
    """The OPT₀ time limit of an implicit batch over n cells (:data:`IMPLICIT_OPT_SECONDS`)."""
    lo, hi = IMPLICIT_OPT_SECONDS
    return lo + (hi - lo) * min(1.0, max(0.0, (n - 1024) / 3072))


def implicit_opt(spec: WorkloadSpec, norm: int) -> PIdentity:
    """OPT₀ (p-Identity, HDMM Def. 14) for a one-column workload by its O(n) Gram product, within
    :func:`implicit_opt_seconds` CPU-s and :data:`IMPLICIT_OPT_WALL_SECONDS` wall-s; cached per workload.  Never
    worse than Identity."""
    key = (spec.text, spec.sizes, norm)
    hit = _OPT_CACHE.get(key)
    if hit is not None:
        return hit
    block = one_column_block(spec.workload)
    if block is None:  # pragma: no cover - every one-column spec has a fast Gram product
        raise ConfigurationError(f"batch: {spec.text} has no implicit Gram product")
    limit = implicit_opt_seconds(spec.n)
    c0, w0 = time.process_time(), time.monotonic()
    stretch = limit / IMPLICIT_OPT_WALL_SECONDS

    def clock() -> float:  # reaches ``limit`` at the CPU limit or at the wall limit, whichever comes first
        return max(time.process_time() - c0, (time.monotonic() - w0) * stretch)

    a = opt_p_identity(block, norm=norm, time_limit=limit, clock=clock)
    a.name = "OPT0"
    if len(_OPT_CACHE) >= _OPT_CACHE_SIZE:
        _OPT_CACHE.pop(next(iter(_OPT_CACHE)))
    _OPT_CACHE[key] = a
    return a


def _implicit_candidates(spec: WorkloadSpec, noise: NoiseFamily, skip: dict[str, str]) -> dict[str, Any]:
    n, m = spec.n, spec.num_queries
    why = f"skipped: implicit batch ({n:,} cells, {m:,} queries; explicit strategies need n × n matrices)"
    out: dict[str, Any] = {"identity": PIdentity(np.zeros((0, n)), norm=noise.p, name="Identity")}
    skip["workload"] = why
    if spec.has_ranges:
        skip["hierarchical"] = why
        out["opt"] = implicit_opt(spec, noise.p)
        if noise.kind == "gaussian":
            skip["opt_gaussian"] = why + "; opt is the Gaussian p-Identity here"
    return out


def implicit_rows(spec: WorkloadSpec) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The rows a one-column batch lists: every workload query as a range [start, end] of cell positions (in the
    order of :meth:`WorkloadSpec.labels`), or — beyond MAX_BATCH_QUERIES queries — one row per cell of the estimate
    (any workload query is then asked from the kept estimate, :class:`dpmagic.batch.estimate.BatchEstimate`)."""
    n = spec.n
    if spec.num_queries > MAX_BATCH_QUERIES:
        col, vals = spec.columns[0], spec.values[0]
        cells = np.arange(n)
        labels = [f"{col} = {v!r}" if isinstance(v, str) else f"{col} = {v}" for v in vals]
        return labels, cells, cells
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for t in spec.terms:
        b = spec._block(0, t)
        if b.kind == "identity":
            s = e = np.arange(n)
        elif b.kind == "total":
            s, e = np.zeros(1, np.int64), np.full(1, n - 1)
        elif b.kind == "prefix":
            s, e = np.zeros(n, np.int64), np.arange(n)
        elif b.kind == "all_range":
            s, e = np.triu_indices(n)
        else:
            k = int(b.width or 1)
            s = np.arange(n - k + 1)
            e = s + k - 1
        starts.append(np.asarray(s, np.int64))
        ends.append(np.asarray(e, np.int64))
    return spec.labels(), np.concatenate(starts), np.concatenate(ends)


def replace_factor(p: int) -> float:
    """Replace-one sensitivity of a non-negative A over its add/remove Δ_p: 2 (L1) or √2 (L2) (module doc)."""
    return 2.0 if p == 1 else math.sqrt(2.0)


def noise_model(currency: Currency, cost: float, *, replace_one: bool) -> NoiseFamily:
    """The noise family of the session's definition at ``cost``, with replace-one folded into its variance.

    ``noise.scale(A.sensitivity(noise.p))`` is then the Laplace scale / Gaussian σ of the release and
    :func:`dpmagic.batch.error.rmse` its expected error under the session's neighbouring relation.
    """
    d = str(currency.definition)
    base = laplace(cost) if d == "pure" else gaussian_zcdp(cost) if d == "zcdp" else gaussian_gdp(cost)
    if not replace_one:
        return base
    f = replace_factor(base.p)
    return NoiseFamily(base.kind, base.p, base.unit_variance * f * f, base.label + ", replace-one")


def _target(currency: Currency, cost: float) -> float:
    """The privacy loss OpenDP's measurement must map to: ε (Laplace), ρ (zCDP) or μ²/2 (μ-GDP as zCDP)."""
    d = str(currency.definition)
    return cost if d in ("pure", "zcdp") else cost * cost / 2.0


def opendp_scale(currency: Currency, cost: float, kind: str, sensitivity: float, scale: float) -> float:
    """The smallest float ≥ ``scale`` (nudged up) at which OpenDP's own privacy map certifies ``cost``.

    OpenDP rounds its privacy maps outward; the closed-form scale can land a few ulps short, so it is raised
    until ``measurement.map(sensitivity) ≤ target`` (never lowered).  No data involved.
    """
    target = _target(currency, cost)
    s = float(scale)
    for _ in range(64):
        if float(vector_measurement(kind, s).map(float(sensitivity))) <= target:
            return s
        s = s * (1.0 + 1e-12) + 5e-324
    raise ConfigurationError("batch: cannot calibrate OpenDP's noise to the cost")  # pragma: no cover


def _sample(kind: str, scale: float, values: np.ndarray) -> np.ndarray:
    return np.asarray(vector_measurement(kind, scale)([float(v) for v in values]), dtype=float)


def candidate_strategies(
    spec: WorkloadSpec, noise: NoiseFamily, skipped: dict[str, str] | None = None
) -> dict[str, Any]:
    """The strategies that apply to ``spec`` (identity; workload for small domains; hierarchical when some
    column has range queries; opt = OPT_M for marginal workloads over ≥ 2 columns, else OPT⊗; opt_gaussian =
    Gaussian OPT₀ for one ordered column under Gaussian noise, n ≤ 1024).  Strategies left out for a reason the
    analyst should see are recorded in ``skipped`` (name → reason)."""
    sizes = spec.sizes
    w = spec.workload
    skip: dict[str, str] = {} if skipped is None else skipped
    if is_implicit(spec, noise.p):
        return _implicit_candidates(spec, noise, skip)
    out: dict[str, Any] = {"identity": KronStrategy(tuple(identity_strategy(n) for n in sizes), "Identity")}
    if spec.n <= _WORKLOAD_MAX_N and w.num_queries * spec.n <= _WORKLOAD_MAX_ENTRIES:
        from dpmagic.batch.strategies import ExplicitStrategy

        out["workload"] = ExplicitStrategy(w.matrix(), "Workload")
    if spec.has_ranges:
        ranged = {b.column for t in spec.terms for b in t if b.kind in ("prefix", "all_range", "width_range")}
        out["hierarchical"] = KronStrategy(
            tuple(
                hb_strategy(n) if c in ranged else identity_strategy(n)
                for c, n in zip(spec.columns, sizes, strict=True)
            ),
            "Hierarchical",
        )
    if spec.is_marginal and len(sizes) >= 2:
        out["opt"] = opt_marginals(w, noise=noise)
    elif max(sizes) <= _OPT_MAX_N:
        # p-Identity factors keep every column scale ≤ MAX_SCALE (dpmagic.batch.pidentity), so their Woodbury
        # traces, variances and reconstructions are accurate in float64 (no degenerate optima on tiny domains)
        out["opt"] = opt_kron(w, noise=noise)
    if noise.kind == "gaussian" and len(sizes) == 1 and spec.has_ranges:
        if spec.n > _OPT_GAUSSIAN_MAX_N:
            skip["opt_gaussian"] = (
                f"skipped: {spec.n} cells > {_OPT_GAUSSIAN_MAX_N} (≤ 12 n × n eigendecompositions; "
                "run dpmagic.batch.gaussian_opt.opt_gaussian offline)"
            )
        else:
            try:
                out["opt_gaussian"] = opt_gaussian(np.asarray(w.gram(), dtype=float))
            except ConfigurationError as e:
                skip["opt_gaussian"] = f"skipped: {e}"
    return out


def replace_sensitivity(strategy: Any, p: int) -> float:
    """A proven upper bound of A's replace-one sensitivity, max(Δ_p, max_{j≠k} ‖a_j − a_k‖_p), as a float.

    A non-negative A: ``replace_factor(p)`` · Δ_p (module doc).  A signed A (Gaussian OPT₀): L1 by the triangle
    inequality, 2Δ₁; L2 from X = AᵀA: ‖a_j − a_k‖² = X_jj + X_kk − 2X_jk, each X entry computed with absolute
    error ≤ γ_r·Δ₂² (r rows; Σ|a_ij a_ik| ≤ Δ₂² by Cauchy–Schwarz; Higham 2002, §3.1), so the computed
    maximum plus (4γ_r + 4u)·Δ₂² bounds it (never above 2Δ₂).  Add/remove Δ_p itself is not rounded here.
    O(r n²) for an explicit signed A.
    """
    base = float(strategy.sensitivity(p))
    if isinstance(strategy, PIdentity):  # B ≥ 0 (checked when built): non-negative, the matrix is not formed
        return base * replace_factor(p)
    mat = getattr(strategy, "matrix", None)
    if mat is None or not np.any(np.asarray(mat) < 0):
        return base * replace_factor(p)
    if p == 1:
        return 2.0 * base
    a = np.asarray(mat, dtype=float)
    r = a.shape[0]
    x = a.T @ a
    d = np.diag(x)
    dist = d[:, None] + d[None, :] - 2.0 * x
    np.fill_diagonal(dist, 0.0)
    u = 2.0**-53
    gamma = r * u / (1.0 - r * u)
    bound = float(dist.max()) + (4.0 * gamma + 8.0 * u) * base * base
    return min(2.0 * base, max(base, math.sqrt(bound) * (1.0 + 4.0 * u)))


def _replace_ratio(strategy: Any, p: int) -> float:
    """Replace-one sensitivity over the non-negative factor's (1 for non-negative strategies)."""
    base = float(strategy.sensitivity(p))
    return replace_sensitivity(strategy, p) / (base * replace_factor(p)) if base > 0 else 1.0


def _check_cost(cost: float) -> float:
    if not (isinstance(cost, (int, float)) and math.isfinite(cost) and cost > 0):
        raise ConfigurationError(f"batch: the cost must be a positive finite number, got {cost!r}")
    return float(cost)


@dataclass
class BatchPlan:
    """The public plan of a workload batch: candidates, their expected RMSE at the cost, the chosen one."""

    spec: WorkloadSpec
    strategies: dict[str, Any]
    rmse: dict[str, float]
    chosen: str
    skipped: dict[str, str] = field(default_factory=dict)


def person_factor(rows: int, replace_one: bool, replace_ratio: float, p: int) -> float:
    """How much a person of at most ``rows`` rows multiplies a linear release's row-level sensitivity
    (docs/people.md §2, Proposition 2.6): the person's histogram h has ‖h‖₁ ≤ rows, so ‖A·h‖ ≤ rows·Δ (add/remove,
    triangle inequality over the rows); a replacement pairs up to ``rows`` rows (each pair a row-level replacement,
    Δ·replace_factor·ratio) and adds or removes the rest (Δ each): rows·max(replace_factor·ratio, 1)·Δ.  1 for
    a row (rows = 1: a person is a row, the row-level bound applies)."""
    if rows <= 1:
        return 1.0
    if not replace_one:
        return float(rows)
    rf = replace_factor(p) * replace_ratio
    return rows * max(rf, 1.0) / rf


def plan_strategy(
    spec: WorkloadSpec, currency: Currency, *, replace_one: bool, strategy: str = "auto", rows: int = 1
) -> BatchPlan:
    """Choose the strategy at unit cost (the ranking does not depend on the cost: RMSE scales as 1/ε, 1/√ρ, 1/μ)."""
    if strategy != "auto" and strategy not in STRATEGIES:
        raise ConfigurationError(
            f"batch: unknown strategy {strategy!r}", hint=f"choose auto or one of {', '.join(STRATEGIES)}"
        )
    noise = noise_model(currency, 1.0, replace_one=replace_one)
    skipped: dict[str, str] = {}
    cands = candidate_strategies(spec, noise, skipped)
    if strategy != "auto" and strategy not in cands:
        why = f" ({skipped[strategy]})" if strategy in skipped else ""
        raise ConfigurationError(
            f"batch: strategy {strategy!r} does not apply to {spec.text}{why}",
            hint=f"applicable here: {', '.join(cands)}",
        )
    errs: dict[str, float] = {}
    w = spec.workload
    for name, a in cands.items():
        try:
            if not a.supports(w):
                continue
            e = float(expected_rmse(w, a, noise))
            rr = _replace_ratio(a, noise.p) if replace_one else 1.0
            errs[name] = e * rr * person_factor(rows, replace_one, rr, noise.p)
        except ConfigurationError:
            continue
    if not errs:  # pragma: no cover - identity always supports
        raise ConfigurationError(f"batch: no strategy supports {spec.text}")
    chosen = strategy if strategy != "auto" else min(errs, key=lambda k: (errs[k], STRATEGIES.index(k)))
    if chosen not in errs:
        raise ConfigurationError(f"batch: strategy {chosen!r} does not support {spec.text}")
    return BatchPlan(spec, cands, errs, chosen, skipped)


def rmse_at(unit_rmse: float, currency: Currency, cost: float) -> float:
    """Expected RMSE at ``cost`` from the RMSE at cost 1 (∝ 1/ε, 1/√ρ, 1/μ)."""
    return unit_rmse / (math.sqrt(cost) if str(currency.definition) == "zcdp" else cost)


def cost_for_rmse(unit_rmse: float, currency: Currency, target: float) -> float:
    """The smallest cost whose expected RMSE is ≤ ``target`` (closed form; rounded up by one part in 10¹²)."""
    if not (math.isfinite(target) and target > 0):
        raise ConfigurationError(f"batch: the RMSE target must be a positive number, got {target!r}")
    c = unit_rmse / target
    if str(currency.definition) == "zcdp":
        c = c * c
    return c * (1.0 + 1e-12)


class BatchMechanism(QueryBoxMechanism):
    """A workload over declared columns within a WHERE box, answered by the matrix mechanism."""

    kind = "batch"

    def __init__(
        self,
        spec: WorkloadSpec,
        query: Query,
        currency: Currency,
        cost: float,
        *,
        replace_one: bool,
        plan: BatchPlan,
        rows: int = 1,
    ) -> None:
        if tuple(query.group_by) != spec.columns:
            raise ConfigurationError(
                "batch: the GROUP BY query must group by the workload's columns"
            )  # pragma: no cover
        self.spec = spec
        self.query = query
        self.currency = currency
        self._cost = _check_cost(cost)
        self.replace_one = replace_one
        self.plan = plan
        self.strategy_name = plan.chosen
        self.strategy = plan.strategies[plan.chosen]
        self.noise_model = noise_model(currency, self._cost, replace_one=replace_one)
        p = self.noise_model.p
        # the computed column norm may sit below the exact one: a sum of k non-negative terms (then a square root)
        # carries a relative error ≤ (k + 1)·2⁻⁵³ (Higham 2002, §4.2); rounded outward by (k + 2)·2⁻⁵²
        k = int(self.strategy.num_queries)
        out = 1.0 + (k + 2) * 2.0**-52
        base = math.nextafter(float(self.strategy.sensitivity(p)) * out, math.inf)
        # a signed strategy (Gaussian OPT₀) under replace-one: its own bound (replace_sensitivity), rounded alike
        rr = _replace_ratio(self.strategy, p) if replace_one else 1.0
        rr = math.nextafter(rr * (1.0 + 4.0 * 2.0**-52), math.inf) if rr != 1.0 else 1.0
        mult = person_factor(rows, replace_one, rr, p)  # person level: ≤ rows rows per person
        self.sensitivity = base * (replace_factor(p) if replace_one else 1.0) * rr * mult
        nominal = self.noise_model.scale(base) * rr * mult
        self.scale = opendp_scale(currency, self._cost, self.noise_model.kind, self.sensitivity, nominal)
        # per-query variance (public, before any read), at the scale actually used
        ratio = (self.scale / self.noise_model.scale(base)) ** 2
        #: the variance of one noisy strategy answer (for follow-up queries of the kept estimate)
        self.unit_variance = float(self.noise_model.variance(self.strategy.sensitivity(p))) * ratio
        self.implicit = is_implicit(spec, p)
        if self.implicit:
            self.labels, self._starts, self._ends = implicit_rows(spec)
            cov = PIdentityCovariance(self.strategy)
            var = float(self.noise_model.variance(self.strategy.sensitivity(p))) * cov.ranges(self._starts, self._ends)
        else:
            var = answer_variances(spec.workload, self.strategy, self.noise_model)
            self.labels = spec.labels()
        plan_ratio = (
            self.scale / (self.noise_model.scale(base) * (_replace_ratio(self.strategy, p) if replace_one else 1.0))
        ) ** 2
        self.variances = np.asarray(var, dtype=float) * ratio
        self.x_hat: np.ndarray | None = None  # the released estimate, once released
        self.expected_rmse = rmse_at(plan.rmse[plan.chosen], currency, self._cost) * math.sqrt(plan_ratio)

    def describe(self) -> dict[str, Any]:
        return {
            "workload": self.spec.text,
            "columns": list(self.spec.columns),
            "queries": int(self.spec.num_queries),
            "rows": len(self.labels),
            "implicit": self.implicit,
            "strategy": self.strategy_name,
            "strategy_queries": int(self.strategy.num_queries),
            "noise": {"kind": self.noise_model.kind, "scale": self.scale, "sensitivity": self.sensitivity},
            "expected_rmse": self.expected_rmse,
        }

    def release(self, backend: Backend) -> pd.DataFrame:
        cells = backend.evaluate(self.query, {}, extended=None)
        x = np.asarray(cells.counts, dtype=float)
        if x.shape[0] != self.spec.n:  # pragma: no cover - declared cells by construction
            raise RuntimeError("cell count mismatch")
        y = _sample(self.noise_model.kind, self.scale, self.strategy.measure(x))
        x_hat = reconstruct(self.strategy, y)
        if self.implicit:
            answers = range_sums(x_hat, self._starts, self._ends)
        else:
            answers = workload_answers(self.spec.workload, x_hat)
        frame = _frame(self.labels, answers, self.variances)
        self.x_hat = x_hat
        return frame


def _frame(labels: list[str], answers: np.ndarray, variances: np.ndarray) -> pd.DataFrame:
    h = _Z95 * np.sqrt(np.maximum(variances, 0.0))
    return pd.DataFrame({"query": labels, "count": answers, "count_ci_low": answers - h, "count_ci_high": answers + h})


def bounding_box(boxes: list[Box]) -> Box:
    """The smallest box containing every box: per column, the union of their value sets (a column some box
    leaves unconstrained is unconstrained).  O(k · columns)."""
    if not boxes:
        return Box({})
    cols = set(boxes[0].constraints)
    for b in boxes[1:]:
        cols &= set(b.constraints)
    out = {}
    for c in cols:
        s = boxes[0].constraints[c]
        for b in boxes[1:]:
            s = s.union(b.constraints[c])
        out[c] = s
    return Box(out)


class BoxBatchMechanism(Mechanism):
    """Several COUNT(*) queries over boxes, measured directly with noise calibrated to their exact batch sensitivity."""

    kind = "batch-boxes"

    def __init__(
        self,
        queries: list[Query],
        schema: Schema,
        currency: Currency,
        cost: float,
        *,
        replace_one: bool,
        rows: int = 1,
    ) -> None:
        from dpmagic.batch.sensitivity import batch_sensitivity

        for q in queries:
            if (
                q.group_by
                or len(q.aggregates) != 1
                or q.aggregates[0].func != "count"
                or q.aggregates[0].column is not None
                or q.filter is not None
                or q.is_postprocessed
            ):
                raise ConfigurationError(
                    "batch: each statement must be SELECT COUNT(*) FROM <table> WHERE <box> (an AND of per-column "
                    "conditions; no GROUP BY, HAVING or OR across columns)",
                    hint="write one COUNT(*) per box, separated by ';'",
                )
        self.queries = queries
        self.currency = currency
        self._cost = _check_cost(cost)
        self.replace_one = replace_one
        boxes = [q.coverage for q in queries]
        self.batch_sensitivity = batch_sensitivity(schema, boxes)
        bs = self.batch_sensitivity
        d = str(currency.definition)
        p = 1 if d == "pure" else 2
        l1, l2 = (bs.replace_l1, bs.replace_l2) if replace_one else (bs.add_remove_l1, bs.add_remove_l2)
        if rows > 1:  # person level (docs/people.md §2, Prop. 2.6): paired rows replace, the rest add/remove
            if replace_one:
                l1, l2 = max(l1, bs.add_remove_l1), max(l2, bs.add_remove_l2)
            l1, l2 = rows * l1, rows * l2
        # an all-empty batch has sensitivity 0: calibrate to 1 (an upper bound; its answers are pure noise)
        self.sensitivity = max(l1 if p == 1 else l2, 1.0)
        base = laplace(cost) if p == 1 else gaussian_zcdp(cost) if d == "zcdp" else gaussian_gdp(cost)
        self.noise_model = base
        self.scale = opendp_scale(currency, self._cost, base.kind, self.sensitivity, base.scale(self.sensitivity))
        self.variance = 2.0 * self.scale**2 if base.kind == "laplace" else self.scale**2
        self._coverage = bounding_box(boxes)

    @property
    def coverage(self) -> Box:
        return self._coverage

    @property
    def cost(self) -> float:
        return self._cost

    @property
    def labels(self) -> list[str]:
        out = []
        for q in self.queries:
            m = re.search(r"\bwhere\b(.*)$", q.text.strip().rstrip(";"), re.I | re.S)
            out.append(" ".join(m.group(1).split()) if m else "all rows")
        return out

    def describe(self) -> dict[str, Any]:
        bs = self.batch_sensitivity
        return {
            "queries": len(self.queries),
            "strategy": "workload",
            "noise": {"kind": self.noise_model.kind, "scale": self.scale, "sensitivity": self.sensitivity},
            "batch_sensitivity": {
                "add_remove_l1": bs.add_remove_l1,
                "replace_l1": bs.replace_l1,
                "inan_clique_bound": bs.inan_clique_bound,
                "inan_clique_pair_bound": bs.inan_clique_pair_bound,
            },
        }

    def release(self, backend: Backend) -> pd.DataFrame:
        x = np.array(
            [float(backend.evaluate(q, {}, extended=None).counts[0]) for q in self.queries],
            dtype=np.float64,
        )
        y = _sample(self.noise_model.kind, self.scale, x)
        return _frame(self.labels, y, np.full(len(y), self.variance))
