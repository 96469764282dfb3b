"""Noise mechanisms: OpenDP's exact integer samplers, calibrated to a cost in the session's currency
(the distributions' mathematics — exact GDP calibration, variances, tails — is in :mod:`dpmagic.noise.distributions`).

Every release is an exact **integer** vector (one entry per GROUP BY cell) perturbed by OpenDP's discrete
Laplace (pure ε-DP, scale b = Δ₁/ε) or discrete Gaussian (ρ-zCDP, σ = Δ₂/√(2ρ); μ-GDP, σ exactly calibrated
per cell by :func:`discrete_gaussian_gdp_sigma`).  The sensitivities Δ come from :mod:`dpmagic.noise.sensitivity`.

* COUNT and SUM over ``int`` columns are integers already.
* SUM over a ``float`` column is computed on a public grid: each clamped value x is quantised to
  q(x) = rint(x / u) for a power of two u (:func:`float_unit`), and the integers q are summed exactly.  A power
  of two makes x / u exact in binary floating point and q monotone, so the values q of the rows in the box lie
  in [q(lo), q(hi)] and the float SUM becomes an integer SUM with the same sensitivity analysis (brute-force
  tested).  u is chosen from the declared bounds and the noise scale so that the quantisation error of up to
  :data:`MAX_ROWS` rows, MAX_ROWS·u/2 ≤ 2⁻²¹σ, is negligible; it is added to the reported interval.  Unlike
  OpenDP's unsized float ``make_sum`` (which keeps at most 2²⁰ rows) every row counts, and unlike a float
  accumulation the sum is exact, so the sensitivity needs no floating-point slack.
* Large sensitivities (≥ 2²¹ units under pure/zCDP; σ_continuous > 300 units under GDP, where the exact
  calibration's lattice would be huge) are released on a coarser grid of k units: the exact sum s is rounded
  to ⌊s/k + 1/2⌋ (a data-independent post-processing, sensitivity ⌈Δ/k⌉ per cell), noised in grid units and
  scaled back; the rounding error k·u/2 is added to the interval.
* The rounded exact sum is clamped to ±2⁶² grid units before noise: clamping to a public range is 1-Lipschitz
  (no more sensitivity), keeps OpenDP's i64 arithmetic total whatever the data, and an interval side whose
  true value may have been clamped is reported as infinite.

Every release carries its noise scale and a 95% confidence interval computed from the noise distribution
itself (exact tail sums for the discrete distributions).  No numpy random generator is ever used for noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import opendp.prelude as dp

from dpmagic.accountant.currency import Definition
from dpmagic.noise.distributions import (  # re-exported: the distributions' facts live in dpmagic.noise.distributions
    GDP_MAX_MU,
    GDP_MIN_MU,
    GRID_UNITS,
    NoiseKind,
    discrete_gaussian_gdp_excess,
    discrete_gaussian_gdp_sigma,
    noise_halfwidth,
    noise_tail,
    noise_variance,
)
from dpmagic.noise.samplers import vector_measurement
from dpmagic.noise.sensitivity import Sensitivity

dp.enable_features("contrib")

__all__ = [
    "MAX_ROWS",
    "SUM_CLAMP",
    "Noise",
    "NoiseKind",
    "calibrate",
    "discrete_gaussian_gdp_excess",
    "discrete_gaussian_gdp_sigma",
    "float_unit",
    "gdp_noise",
    "noise_for",
    "quantise",
    "release_integer",
]


#: Most rows a backend may hold: exact summation uses 21-bit limbs summed in float64 (exact below 2⁵³), and the
#: float quantisation error bound MAX_ROWS·u/2 relies on it.
MAX_ROWS = 2**32
#: The exact (rounded) sum is clamped to ±SUM_CLAMP grid units before noise (see the module docstring).
SUM_CLAMP = 2**62


@dataclass(frozen=True)
class Noise:
    """A calibrated noise distribution: its family, scale (b or σ, in grid units) and the sensitivity it covers.

    ``sensitivity`` is in the answer's units (L1 for Laplace, L2 for zCDP's Gaussian, per cell for GDP).  The
    exact sum is computed in units of ``unit`` (1, or a float column's quantum), rounded to a grid of
    ``factor`` units (``granularity`` = factor·unit in the answer's units), and noised in grid units;
    ``rounding`` bounds the deterministic error of quantisation and rounding (in the answer's units).
    """

    kind: NoiseKind
    scale: float
    sensitivity: float
    granularity: float = 1.0
    unit: float = 1.0
    factor: int = 1
    rounding: float = 0.0
    #: how many cells one neighbouring step can change, when GDP's μ is split over them (1 otherwise)
    cells: int = 1
    #: the sensitivity in grid units the scale is calibrated to (L1 / L2 / per cell; 0: ``sensitivity``)
    calibrated: float = 0.0

    @property
    def variance(self) -> float:
        """Variance of the noise (in the answer's units; the grid rounding is a bounded bias, not included)."""
        return self.granularity**2 * noise_variance(self.kind, self.scale)

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    def ci_halfwidth(self, level: float = 0.95) -> float:
        """Smallest h with P(|error| ≤ h) ≥ level (exact for the discrete distributions; rounding added)."""
        return self.granularity * noise_halfwidth(self.kind, self.scale, level) + self.rounding

    def tail(self, h: float) -> float:
        """P(|error| > h) (an upper bound when a rounding is involved)."""
        return noise_tail(self.kind, self.scale, (h - self.rounding) / self.granularity)

    @property
    def clamp(self) -> float:
        """The public bound (answer units) the exact value is clamped to before noise."""
        return SUM_CLAMP * self.granularity

    def __str__(self) -> str:
        name = {"discrete_laplace": "discrete Laplace", "laplace": "Laplace"}.get(
            self.kind, self.kind.replace("_", " ")
        )
        param = "b" if "laplace" in self.kind else "σ"
        grid = "" if self.granularity == 1.0 else f" on a grid of {self.granularity:.4g}"
        return f"{name} ({param}={self.scale * self.granularity:.4g}{grid})"


#: Largest noise scale (in the answer's units) dpmagic releases: beyond it the noise exceeds double precision
#: and the answer carries no information; such tiny costs are refused before anything is charged.
MAX_SCALE = 1e15


def _check_scale(noise: Noise, cost: float) -> Noise:
    if not noise.scale * noise.granularity <= MAX_SCALE:
        from dpmagic.errors import BudgetError

        raise BudgetError(
            f"a cost of {cost:.3g} is too small to be useful: the noise scale would be "
            f"{noise.scale * noise.granularity:.3g}, beyond {MAX_SCALE:.0e}"
        )
    return noise


def _check_mu(mu: float) -> None:
    from dpmagic.errors import BudgetError

    if not mu >= GDP_MIN_MU:
        raise BudgetError(
            f"a μ of {mu:.3g} per release is too small to be useful (below {GDP_MIN_MU:g}: noise of more than "
            f"{1 / GDP_MIN_MU:.0e} times the sensitivity)"
        )
    if not mu <= GDP_MAX_MU:
        raise BudgetError(
            f"a μ of {mu:.3g} per release is too large: the exact calibration of the discrete Gaussian covers "
            f"μ ≤ {GDP_MAX_MU:g} (μ = {GDP_MAX_MU:g} is already ε > 100 at δ = 1e-6: no meaningful privacy)",
            hint=f"ask with a smaller μ (at most {GDP_MAX_MU:g} per release; AVG and GROUP BY under replace-one "
            "split a query's μ over several releases)",
        )


def _sigma_estimate(definition: Definition, cost: float, sens: Sensitivity) -> float:
    """The continuous noise scale for ``sens`` (in its units): a guide for choosing grids, not a calibration."""
    d = float(sens.or_one().delta(definition))
    if definition == "pure":
        return d / cost
    if definition == "zcdp":
        return d / math.sqrt(2.0 * cost)
    return d * math.sqrt(sens.or_one().max_cells) / cost


def float_unit(definition: Definition, cost: float, sens: Sensitivity, max_abs: float) -> float:
    """The quantum u (a power of two) of a float SUM whose sensitivity in the column's units is ``sens``.

    u ≈ σ·2⁻⁵², so that the quantisation error of up to MAX_ROWS = 2³² rows, 2³¹·u, is at most 2⁻²¹σ; and
    u ≥ max|value|·2⁻⁶², so that every quantised value fits an int64 (then the bound is reported as it is).
    """
    sigma = _sigma_estimate(definition, cost, sens)
    e = math.floor(math.log2(sigma)) - 52 if sigma > 0 and math.isfinite(sigma) else 0
    if max_abs > 0:
        e = max(e, math.ceil(math.log2(max_abs)) - 62)
    return math.ldexp(1.0, min(max(e, -1000), 1000))


def quantise(values: np.ndarray, unit: float, lower: float, upper: float) -> np.ndarray:
    """rint(clamp(x) / unit) as int64: exact (``unit`` is a power of two) and non-decreasing in x."""
    x = np.clip(np.asarray(values, dtype=np.float64), lower, upper)
    return np.rint(x / unit).astype(np.int64)


def _grid_factor(definition: Definition, delta: float, cost: float, cells: int) -> int:
    """The coarse grid k (in units) a release of sensitivity ``delta`` (in units) is rounded to."""
    if definition == "gdp":
        cont = delta * math.sqrt(cells) / cost
        if cont <= 300.0 and float(delta).is_integer():
            return 1
        return max(1, math.ceil(cont / GRID_UNITS))
    if delta < 2.0**21:
        return 1
    return 2 ** (math.floor(math.log2(delta)) - 20)


def calibrate(definition: Definition, cost: float, sens: Sensitivity, *, unit: float = 1.0, bias: float = 0.0) -> Noise:
    """The integer noise that makes a release of sensitivity ``sens`` (in units of ``unit``) cost ``cost``.

    ``cost`` is the release's ε, ρ or μ.  Pure: discrete Laplace, b = Δ₁/ε; zCDP: discrete Gaussian,
    σ = Δ₂/√(2ρ) (Canonne, Kamath & Steinke 2020, Thm. 14); GDP: each of the at most k cells one step changes
    gets an exactly calibrated discrete Gaussian for μ/√k at the largest single change Δ∞.  Large
    sensitivities are rounded to a grid first (:meth:`Sensitivity.coarsen`).  ``bias`` is a deterministic error
    bound of the exact value (float quantisation) added to the interval.
    """
    sens = sens.or_one()
    cells = sens.max_cells if definition == "gdp" else 1
    if definition == "gdp":
        _check_mu(cost / math.sqrt(cells))
    delta = sens.delta(definition)
    k = _grid_factor(definition, float(delta), cost, cells)
    dk = sens.coarsen(k).delta(definition)
    kind: NoiseKind
    if definition == "pure":
        kind, scale = "discrete_laplace", dk / cost
    elif definition == "zcdp":
        kind, scale = "discrete_gaussian", dk / math.sqrt(2.0 * cost)
    else:
        kind, scale = "discrete_gaussian", discrete_gaussian_gdp_sigma(cost / math.sqrt(cells), int(dk))
    rounding = (k * unit / 2.0 if k > 1 else 0.0) + bias
    noise = Noise(kind, scale, float(delta) * unit, k * unit, unit, k, rounding, cells, float(dk))
    return _check_scale(noise, cost)


def noise_for(definition: Definition, cost: float, sensitivity: float, *, integer: bool) -> Noise:
    """The noise that makes a one-cell query of ``sensitivity`` cost ``cost`` (ε, ρ or μ) under ``definition``.

    ``integer=False`` gives the continuous Laplace / Gaussian (for planning illustrations; releases are integer).
    """
    if sensitivity <= 0:
        raise ValueError("sensitivity must be positive")
    if integer:
        return calibrate(definition, cost, Sensitivity(((sensitivity,),)))
    if definition == "pure":
        noise = Noise("laplace", sensitivity / cost, sensitivity)
    elif definition == "zcdp":
        noise = Noise("gaussian", sensitivity / math.sqrt(2.0 * cost), sensitivity)
    else:
        _check_mu(cost)
        noise = Noise("gaussian", sensitivity / cost, sensitivity)
    return _check_scale(noise, cost)


# --------------------------------------------------------------------------------------------------
# releases


def _on_grid(values: Sequence[int] | np.ndarray, noise: Noise) -> list[int]:
    """Round exact integer values (in units) to the noise's grid, ⌊v/k + 1/2⌋, and clamp to ±SUM_CLAMP."""
    k = noise.factor
    out = []
    for v in values:
        r = int(v) if k == 1 else (2 * int(v) + k) // (2 * k)
        out.append(min(max(r, -SUM_CLAMP), SUM_CLAMP))
    return out


def release_integer(values: Sequence[int] | np.ndarray, noise: Noise) -> np.ndarray:
    """Add OpenDP discrete Laplace / Gaussian noise to each exact integer in ``values`` (in the noise's units).

    Each value is rounded to the grid of ``noise.factor`` units and clamped to ±SUM_CLAMP grid units, integer
    noise is added in grid units, and the result is scaled back to the answer's units (× granularity).  Total:
    no input makes it raise.
    """
    if len(values) == 0:
        return np.zeros(0, dtype=np.float64)
    if noise.kind not in ("discrete_laplace", "discrete_gaussian"):
        raise ValueError(f"{noise.kind} is not an integer mechanism")
    meas = vector_measurement(noise.kind, noise.scale)
    return np.asarray(meas(_on_grid(values, noise)), dtype=np.float64) * noise.granularity


def gdp_noise(mu: float, sensitivity: float, *, integer_values: bool = True) -> Noise:
    """μ-GDP noise for a one-cell integer release of ``sensitivity``: OpenDP's discrete Gaussian, exactly
    calibrated (:func:`calibrate`; σ_continuous = Δ/μ > 300 is released on a grid g ≈ σ_continuous / 200)."""
    if not integer_values:
        raise ValueError("dpmagic releases integers: float sums are quantised first (dpmagic.releases.plan.plan_noise)")
    return calibrate(Definition.GDP, mu, Sensitivity(((sensitivity,),)))
