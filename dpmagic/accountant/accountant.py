"""The session accountant: a per-row privacy filter charged by the maximum overlap.

For every domain row x, load(x) is the sum of the additive weights (ε, ρ or μ²) of the released mechanisms
whose coverage contains x; the session's privacy loss is max_x load(x) (seed 000, Thm. 6).  A query is
admitted only if an *upper bound* of the new maximum load stays within the budget (DESIGN.md §2, "The
invariant").  The bound charged is chosen per session:

* ``exact`` (default) — the exact weighted maximum overlap γ_w, or, if the search times out, the best proven
  upper bound (LP / colouring / sequential), and the accountant says so;
* ``clique`` — the exact maximum weight clique ω_w ≥ γ_w;
* ``chromatic`` — the weight of a proper colouring χ_w ≥ ω_w;
* ``sequential`` — Σ w, plain sequential composition.

All four are always computed and shown.  The charge is committed to the :class:`~dpmagic.accountant.ledger.Ledger`
before the caller may read any data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from dpmagic.accountant.currency import Budget, check_cost
from dpmagic.accountant.ledger import Ledger
from dpmagic.errors import BudgetExceededError, ConfigurationError
from dpmagic.overlap import Bounds, OverlapEngine
from dpmagic.schema import Schema
from dpmagic.sets import Box, box_from_json, box_to_json

__all__ = ["Accountant", "Charge", "ChargeBound", "CHARGE_BOUNDS"]

ChargeBound = Literal["exact", "clique", "chromatic", "sequential"]
CHARGE_BOUNDS: tuple[ChargeBound, ...] = ("exact", "clique", "chromatic", "sequential")

#: Relative slack in the budget comparison, so that ten queries of ε = 0.1 fit a budget of ε = 1 despite
#: binary floating point (0.1 * 10 = 1.0000000000000002).  The overshoot it allows is at most 1e-9 · budget.
BUDGET_RTOL = 1e-9


@dataclass(frozen=True)
class Charge:
    """What admitting one query does (or would do) to the session's charged bound."""

    cost: float
    weight: float
    bound: ChargeBound
    charged_as: str
    before: float
    after: float
    total: float
    overlaps: int
    bounds: Bounds
    admissible: bool
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def increase(self) -> float:
        """How much the charged additive weight grows."""
        return max(0.0, self.after - self.before)

    @property
    def remaining_after(self) -> float:
        return max(0.0, self.total - self.after)


class Accountant:
    """Admits queries against a budget by their maximum overlap; records every charge durably."""

    def __init__(
        self,
        budget: Budget,
        schema: Schema,
        *,
        bound: ChargeBound = "exact",
        ledger: Ledger | None = None,
        time_limit: float = 10.0,
    ) -> None:
        if bound not in CHARGE_BOUNDS:
            raise ConfigurationError(f"unknown bound {bound!r}: choose one of {', '.join(CHARGE_BOUNDS)}")
        self.budget = budget
        self.schema = schema
        self.bound: ChargeBound = bound
        self.ledger = ledger if ledger is not None else Ledger()
        self.engine = OverlapEngine(schema, time_limit=time_limit)
        self._entry_ids: list[int] = []
        for entry in self.ledger.entries():  # resume: rebuild the overlap state from the ledger
            self.engine.add(box_from_json(entry.coverage, schema), entry.weight)
            self._entry_ids.append(entry.id)

    # -- state -----------------------------------------------------------------------------------------
    @property
    def currency(self):  # type: ignore[no-untyped-def]
        return self.budget.currency

    def bounds(self) -> Bounds:
        """The four bounds on the current maximum load (additive weights)."""
        return self.engine.bounds()

    @property
    def charged_weight(self) -> float:
        """The additive weight currently charged under the session's bound."""
        if len(self.engine) == 0:
            return 0.0
        return self.engine.bounds().charge(self.bound)[0]

    @property
    def spent(self) -> float:
        """Charged privacy loss in the session's parameter (ε, ρ or μ)."""
        return self.currency.cost(self.charged_weight)

    @property
    def remaining(self) -> float:
        """Budget left, in the session's parameter, for a query that overlaps the worst-case row."""
        return self.currency.cost(max(0.0, self.budget.total_weight - self.charged_weight))

    def __len__(self) -> int:
        return len(self.engine)

    # -- admission -------------------------------------------------------------------------------------
    def _fits(self, weight: float) -> bool:
        return weight <= self.budget.total_weight * (1.0 + BUDGET_RTOL)

    def preview(self, box: Box, cost: float) -> Charge:
        """What admitting a query with this coverage and cost would charge; changes nothing."""
        cost = check_cost(cost, f"the query's {self.currency.parameter}")
        weight = self.currency.weight(cost)
        before = self.charged_weight
        after_bounds = self.engine.preview(box, weight)
        after, label = after_bounds.charge(self.bound)
        # the charged bound never decreases by admitting a query
        after = max(after, before) if self.bound == "sequential" else after
        return Charge(
            cost=cost,
            weight=weight,
            bound=self.bound,
            charged_as=label,
            before=before,
            after=after,
            total=self.budget.total_weight,
            overlaps=int(len(self.engine.neighbors(box))),
            bounds=after_bounds,
            admissible=self._fits(after),
        )

    def charge(
        self, box: Box, cost: float, *, sql: str, canonical: str, details: dict[str, Any] | None = None
    ) -> tuple[int, Charge]:
        """Admit and durably record a query, or raise :class:`BudgetExceededError` and change nothing."""
        ch = self.preview(box, cost)
        if not ch.admissible:
            cur = self.currency
            raise BudgetExceededError(
                f"refused: this query costs {cur.format(ch.cost)} and would raise the charged privacy loss "
                f"({self.bound} bound) from {_fmt(cur.cost(ch.before))} to {_fmt(cur.cost(ch.after))}, "
                f"above the budget {cur.parameter}={_fmt(self.budget.total)}; at most "
                f"{cur.format(self.affordable(box))} is left for a query on this part of the domain",
                hint="lower the cost, narrow the WHERE clause to a region with budget left, or stop here",
            )
        entry_id = self.ledger.charge(
            sql=sql,
            canonical=canonical,
            coverage=box_to_json(box),
            cost=ch.cost,
            weight=ch.weight,
            bound=ch.charged_as,
            charged_after=ch.after,
            details={"bounds": bounds_to_json(ch.bounds), **(details or {})},
        )
        self.engine.add(box, ch.weight)
        self._entry_ids.append(entry_id)
        return entry_id, ch

    def affordable(self, box: Box) -> float:
        """The largest cost a query on ``box`` could be given now (budget minus max current load on it).

        Under the ``exact`` bound this is budget − max_{x ∈ box} load(x): queries on fresh regions can get the
        full budget.  Under the other bounds it is the budget minus the charged bound (a safe lower estimate).
        """
        if self.bound != "exact" or len(self.engine) == 0:
            left = self.budget.total_weight - self.charged_weight
        elif not self._fits(self.charged_weight):
            left = 0.0
        else:
            # the new maximum is max(γ_old, w + max load on the box): only the box's own load matters
            left = self.budget.total_weight - max(self.engine.max_load_over(box).upper, 0.0)
        return self.currency.cost(max(0.0, left))

    def record_release(self, entry_id: int, answer: Any) -> None:
        self.ledger.record_release(entry_id, answer)


def bounds_to_json(b: Bounds) -> dict[str, Any]:
    o = b.overlap
    return {
        "sequential": b.sequential,
        "chromatic": b.chromatic,
        "clique": b.clique,
        "clique_exact": b.clique_exact,
        "overlap_lower": o.lower,
        "overlap_upper": o.upper,
        "overlap_exact": o.exact,
        "witness": o.witness,
    }


def _fmt(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else str(x)
