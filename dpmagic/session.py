"""A dpmagic session: sensitive data + public schema + budget + accountant, usable without IPython.

>>> import dpmagic
>>> s = dpmagic.Session(df, "adult.schema.json", "epsilon=1.0")          # doctest: +SKIP
>>> r = s.query("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.1)  # doctest: +SKIP
>>> r.df                                                                  # doctest: +SKIP

Order of operations for every query (invariant 2): parse and validate the SQL against the schema → plan the
noise → check the cost against the budget and commit the charge to the ledger → only then read the rows →
draw the noise → record the release.  Any error before the commit spends nothing and changes nothing.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dpmagic.accountant.accountant import CHARGE_BOUNDS, Accountant, Charge, ChargeBound
from dpmagic.accountant.currency import Budget, Currency, check_cost, parse_budget
from dpmagic.accountant.ledger import Ledger
from dpmagic.backends.pandas import PandasBackend
from dpmagic.errors import BudgetError, ConfigurationError, DPMagicError
from dpmagic.mechanisms import Noise
from dpmagic.query.model import Query
from dpmagic.query.sql import parse_query
from dpmagic.release import ReleasePlan, plan_noise, release
from dpmagic.schema import OutOfRangePolicy, Schema

__all__ = ["Session", "QueryResult"]


@dataclass
class QueryResult:
    """A released answer: the noisy values with 95% intervals, and what it cost."""

    query: Query
    df: pd.DataFrame
    cost: float
    currency: Currency
    charge: Charge
    noise: dict[str, Noise]
    entry_id: int
    seconds: float
    spent: float
    budget: float
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """The one-line cost summary shown under a cell's result."""
        cur = self.currency
        n = self.charge.overlaps
        overlaps = f"overlaps {n} quer{'y' if n == 1 else 'ies'}"
        charged = cur.cost(self.charge.after) - cur.cost(self.charge.before)
        return (
            f"+{self.cost:.2f} {cur.symbol} asked, +{charged:.2f} charged ({self.charge.charged_as}); {overlaps}; "
            f"{self.spent:.2f} of {self.budget:.2f} {cur.symbol} used"
        )

    def noise_description(self) -> str:
        return "; ".join(f"{k}: {v}" for k, v in self.noise.items())

    def _repr_html_(self) -> str:
        table = self.df.to_html(index=False, float_format=lambda x: f"{x:,.2f}")
        return (
            f"{table}<div style='color:#555;font-size:0.9em;margin-top:4px'>{html.escape(self.summary())}"
            f"<br>noise: {html.escape(self.noise_description())}; 95% intervals in *_ci_low / *_ci_high</div>"
        )

    def __repr__(self) -> str:
        return f"{self.df.to_string(index=False)}\n{self.summary()}"


class Session:
    """Holds the sensitive DataFrame, its public schema, the privacy definition, the budget and the accountant.

    Parameters
    ----------
    data:
        the sensitive table; validated against ``schema`` on binding.
    schema:
        a :class:`Schema`, a path to its JSON file, or its parsed JSON object.
    budget:
        ``"epsilon=1.0"`` (pure DP), ``"rho=0.5"`` (zCDP), ``"mu=1.0"`` (GDP), a dict, or a :class:`Budget`.
    bound:
        which upper bound on the maximum overlap is charged: ``exact`` (default), ``clique``, ``chromatic``
        or ``sequential``.
    default_cost:
        the cost of a query that does not name one (default: a tenth of the budget).
    out_of_range:
        ``"error"`` (default) or ``"clamp"``: what to do with numbers outside the declared bounds.
    ledger:
        a :class:`Ledger` or a path for a durable sqlite ledger (default: in memory).
    """

    def __init__(
        self,
        data: pd.DataFrame,
        schema: Schema | str | Path | Mapping[str, Any],
        budget: str | Budget | dict[str, float],
        *,
        bound: ChargeBound = "exact",
        default_cost: float | None = None,
        out_of_range: OutOfRangePolicy = "error",
        ledger: Ledger | str | Path | None = None,
        time_limit: float = 10.0,
        delta: float = 1e-6,
    ) -> None:
        if isinstance(schema, Schema):
            self.schema = schema
        elif isinstance(schema, Mapping):
            self.schema = Schema.from_dict(schema)
        else:
            self.schema = Schema.from_json(schema)
        self.budget = parse_budget(budget, delta=delta)
        if bound not in CHARGE_BOUNDS:
            raise ConfigurationError(f"unknown bound {bound!r}: choose one of {', '.join(CHARGE_BOUNDS)}")
        self.default_cost = (
            self.budget.total / 10.0
            if default_cost is None
            else check_cost(default_cost, f"the default {self.budget.currency.parameter}")
        )
        self.data = self.schema.validate(data, out_of_range=out_of_range)
        self.backend = PandasBackend(self.data, self.schema)
        if ledger is not None and not isinstance(ledger, Ledger):
            ledger = Ledger(ledger)
        self.accountant = Accountant(self.budget, self.schema, bound=bound, ledger=ledger, time_limit=time_limit)
        self.results: list[QueryResult] = []

    # -- properties ------------------------------------------------------------------------------------
    @property
    def currency(self) -> Currency:
        return self.budget.currency

    @property
    def spent(self) -> float:
        """Privacy loss charged so far, in the session's parameter (ε, ρ or μ)."""
        return self.accountant.spent

    @property
    def remaining(self) -> float:
        return self.accountant.remaining

    @property
    def bound(self) -> ChargeBound:
        return self.accountant.bound

    # -- queries -----------------------------------------------------------------------------------------
    def parse(self, sql: str) -> Query:
        """Parse and validate ``sql`` against the schema (no data, no budget)."""
        return parse_query(sql, self.schema)

    def _cost(self, cost: float | None, named: Mapping[str, float | None]) -> float:
        given = {k: v for k, v in named.items() if v is not None}
        if cost is not None:
            given[self.currency.parameter] = cost
        wrong = [k for k in given if k != self.currency.parameter]
        if wrong:
            raise BudgetError(
                f"this session's budget is in {self.currency.parameter} ({self.currency.definition}); "
                f"a cost in {wrong[0]} does not apply"
            )
        value = given.get(self.currency.parameter, self.default_cost)
        return check_cost(value, f"the query's {self.currency.parameter}")

    def query(
        self,
        sql: str,
        cost: float | None = None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
    ) -> QueryResult:
        """Answer one SQL query with noise, charging its cost first.

        Raises a :class:`~dpmagic.errors.DPMagicError` subclass, spending nothing, on bad SQL, a bad cost or
        an exhausted budget.
        """
        t0 = time.perf_counter()
        q = self.parse(sql)
        c = self._cost(cost, {"epsilon": epsilon, "rho": rho, "mu": mu})
        plan = plan_noise(q, self.schema, self.currency, c)
        entry_id, charge = self.accountant.charge(
            q.coverage, c, sql=sql, canonical=q.canonical, details=_plan_details(plan)
        )
        # ---- charged and recorded: only now is the data read ----
        try:
            cells = self.backend.evaluate(q)
            df = release(q, cells, plan, self.schema)
        except DPMagicError:
            raise
        except Exception as exc:  # the budget stays charged: never under-charge after data was read
            raise DPMagicError(
                f"internal error while answering (the query stays charged, nothing was released): {exc}"
            ) from exc
        self.accountant.record_release(entry_id, df.to_dict(orient="list"))
        noise = {"count": plan.count} if plan.count is not None else {}
        noise.update({f"sum({k})": v for k, v in plan.sums.items()})
        result = QueryResult(
            query=q,
            df=df,
            cost=c,
            currency=self.currency,
            charge=charge,
            noise=noise,
            entry_id=entry_id,
            seconds=time.perf_counter() - t0,
            spent=self.spent,
            budget=self.budget.total,
        )
        self.results.append(result)
        return result

    # -- reporting ---------------------------------------------------------------------------------------
    def ledger_frame(self) -> pd.DataFrame:
        """One row per charged query: SQL, cost, the bound charged after it, status."""
        rows = [
            {
                "id": e.id,
                "sql": e.sql.strip(),
                "cost": e.cost,
                "charged after": self.currency.cost(e.charged_after),
                "bound": e.bound,
                "status": e.status,
                "time": pd.Timestamp(e.created, unit="s"),
            }
            for e in self.accountant.ledger.entries()
        ]
        return pd.DataFrame(rows, columns=["id", "sql", "cost", "charged after", "bound", "status", "time"])

    def bounds_summary(self) -> dict[str, Any]:
        """All four bounds (in the session's parameter), the charged one, and the savings."""
        cur = self.currency
        if len(self.accountant) == 0:
            return {
                "sequential": 0.0,
                "chromatic": 0.0,
                "clique": 0.0,
                "overlap_lower": 0.0,
                "overlap_upper": 0.0,
                "overlap_exact": True,
                "clique_exact": True,
                "witness": None,
                "charged": 0.0,
                "saving": 0.0,
            }
        b = self.accountant.bounds()
        charged = self.accountant.charged_weight
        return {
            "sequential": cur.cost(b.sequential),
            "chromatic": cur.cost(b.chromatic),
            "clique": cur.cost(b.clique),
            "clique_exact": b.clique_exact,
            "overlap_lower": cur.cost(b.overlap.lower),
            "overlap_upper": cur.cost(b.overlap.upper),
            "overlap_exact": b.overlap.exact,
            "witness": b.overlap.witness,
            "charged": cur.cost(charged),
            "saving": 0.0 if b.sequential <= 0 else 1.0 - charged / b.sequential,
        }

    def approx_dp(self) -> tuple[float, float]:
        """The (ε, δ) equivalent of the charged loss (δ = the session's delta; δ = 0 for pure DP)."""
        cur = self.currency
        eps = cur.approx_dp(self.accountant.charged_weight, self.budget.delta)
        return eps, (0.0 if cur.definition == "pure" else self.budget.delta)

    def __repr__(self) -> str:
        cur = self.currency
        return (
            f"<dpmagic.Session table={self.schema.table!r} rows={len(self.data)} "
            f"{cur.parameter}: {self.spent:.4g} of {self.budget.total:.4g} charged ({self.bound}), "
            f"{len(self.accountant)} queries>"
        )


def _plan_details(plan: ReleasePlan) -> dict[str, Any]:
    d: dict[str, Any] = {"share_cost": plan.share_cost, "releases_per_cell": plan.releases_per_cell}
    if plan.count is not None:
        d["count_noise"] = {"kind": plan.count.kind, "scale": plan.count.scale}
    d["sum_noise"] = {k: {"kind": v.kind, "scale": v.scale, "sensitivity": v.sensitivity} for k, v in plan.sums.items()}
    return d
