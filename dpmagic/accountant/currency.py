"""Privacy definitions and their additive currencies (docs/design.md §2, "Additive currencies").

The accountant works in a currency in which composition is a sum, so that a row's load is a weighted
count:

=============  ====================  =================  ===========================================
definition     cost parameter        additive weight    reported (ε, δ)
=============  ====================  =================  ===========================================
``pure``       ε (epsilon)           ε                  ε, δ = 0
``zcdp``       ρ (rho)               ρ                  ε = ρ + 2√(ρ ln(1/δ))  (Bun & Steinke 2016, Prop. 1.3)
``gdp``        μ (mu)                μ²                 exact GDP curve (Dong, Roth & Su 2019, Cor. 2.13)
=============  ====================  =================  ===========================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from dpmagic.errors import BudgetError

__all__ = ["Definition", "Parameter", "Currency", "Budget", "CURRENCIES", "currency_for", "parse_budget"]


class Definition(StrEnum):
    """A privacy definition.  A ``StrEnum``: ``Definition.PURE == "pure"``, so it serialises as its name."""

    PURE = "pure"  #: pure ε-differential privacy
    ZCDP = "zcdp"  #: ρ-zero-concentrated DP (Bun & Steinke 2016)
    GDP = "gdp"  #: μ-Gaussian DP (Dong, Roth & Su 2022)


class Parameter(StrEnum):
    """The cost parameter of a definition, as analysts write it (``--epsilon``, ``--rho``, ``--mu``)."""

    EPSILON = "epsilon"
    RHO = "rho"
    MU = "mu"


@dataclass(frozen=True)
class Currency:
    """How one privacy definition measures, composes and reports cost."""

    definition: Definition
    parameter: Parameter
    symbol: str

    def weight(self, cost: float) -> float:
        """The additive weight of a mechanism with this cost parameter (ε, ρ, or μ²)."""
        return cost * cost if self.definition is Definition.GDP else cost

    def cost(self, weight: float) -> float:
        """Inverse of :meth:`weight`."""
        return math.sqrt(weight) if self.definition is Definition.GDP else weight

    def approx_dp(self, weight: float, delta: float) -> float:
        """ε of the (ε, δ)-DP guarantee implied by a total additive weight."""
        if weight <= 0:
            return 0.0
        if self.definition is Definition.PURE:
            return weight
        if self.definition is Definition.ZCDP:
            return weight + 2.0 * math.sqrt(weight * math.log(1.0 / delta))
        return gdp_epsilon(math.sqrt(weight), delta)

    def format(self, cost: float) -> str:
        return f"{self.symbol}={cost:.4g}"


CURRENCIES: dict[Definition, Currency] = {
    Definition.PURE: Currency(Definition.PURE, Parameter.EPSILON, "ε"),
    Definition.ZCDP: Currency(Definition.ZCDP, Parameter.RHO, "ρ"),
    Definition.GDP: Currency(Definition.GDP, Parameter.MU, "μ"),
}
# keyed by the plain strings (a StrEnum member hashes and compares as its value)
_BY_PARAMETER: dict[str, Currency] = {str(c.parameter): c for c in CURRENCIES.values()}
_BY_DEFINITION: dict[str, Currency] = {str(d): c for d, c in CURRENCIES.items()}


def currency_for(parameter_or_definition: str) -> Currency:
    key = parameter_or_definition.strip().lower()
    aliases = {"eps": "epsilon", "ε": "epsilon", "ρ": "rho", "μ": "mu", "dp": "pure", "zcdp": "zcdp"}
    key = aliases.get(key, key)
    if key in _BY_PARAMETER:
        return _BY_PARAMETER[key]
    if key in _BY_DEFINITION:
        return _BY_DEFINITION[key]
    raise BudgetError(
        f"unknown privacy parameter {parameter_or_definition!r}: use epsilon (pure DP), rho (zCDP) or mu (GDP)"
    )


def gdp_delta(mu: float, eps: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su 2019, Cor. 2.13)."""
    from scipy.stats import norm  # imported where used (scipy.stats alone takes ~0.5 s)

    # the second term as exp(ε + log Φ(·)): e^ε alone overflows beyond ε ≈ 709 (large μ), the product does not
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2)))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ delta for μ-GDP (solved with Brent's method)."""
    if mu <= 0:
        return 0.0
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2.0
    from scipy.optimize import brentq

    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-12))


def check_cost(value: object, what: str) -> float:
    """Validate a privacy parameter: a finite, strictly positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BudgetError(f"{what} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise BudgetError(f"{what} must be a finite number above 0, got {value!r}")
    return v


@dataclass(frozen=True)
class Budget:
    """A session's total privacy budget in one currency; ``delta`` is used only to report (ε, δ)."""

    currency: Currency
    total: float
    delta: float = 1e-6

    def __post_init__(self) -> None:
        check_cost(self.total, f"the {self.currency.parameter} budget")
        if not (0 < self.delta < 1):
            raise BudgetError(f"delta must be in (0, 1), got {self.delta!r}")

    @property
    def total_weight(self) -> float:
        return self.currency.weight(self.total)

    def __str__(self) -> str:
        return f"{self.currency.parameter}={self.total:g}"


def parse_budget(spec: str | Budget | dict[str, float], *, delta: float = 1e-6) -> Budget:
    """``"epsilon=1.0"``, ``"rho=0.5"``, ``"mu=1"``, ``{"epsilon": 1.0}`` or a :class:`Budget`."""
    if isinstance(spec, Budget):
        return spec
    if isinstance(spec, dict):
        items = list(spec.items())
    elif isinstance(spec, str):
        items = []
        for part in spec.replace(",", " ").split():
            if "=" not in part:
                raise BudgetError(f"budget {spec!r}: write it as epsilon=1.0, rho=0.5 or mu=1.0")
            k, v = part.split("=", 1)
            try:
                items.append((k, float(v)))
            except ValueError:
                raise BudgetError(f"budget {spec!r}: {v!r} is not a number") from None
    else:
        raise BudgetError(f"a budget must be like 'epsilon=1.0', got {spec!r}")
    named = dict(items)
    if "delta" in named:
        delta = float(named.pop("delta"))
    if len(named) != 1:
        raise BudgetError(f"budget {spec!r}: give exactly one of epsilon, rho or mu")
    ((parameter, total),) = named.items()
    currency = currency_for(parameter)
    return Budget(currency, check_cost(total, f"the {currency.parameter} budget"), delta)
