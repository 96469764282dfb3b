"""What a query costs, as the analyst asks for it: a number, ``max``, the default, or an accuracy target.

Reads no data and changes nothing: the session calls :func:`parse_cost` on the options of a cell and
:func:`resolve_cost` to turn them into one number in the session's parameter (ε, ρ or μ) before planning the
noise (:func:`session_cost` with the session's own budget, schema and affordability).  The re-run key of an
answer is :func:`dpmagic.session.cache.cache_key`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from dpmagic.accountant.currency import Budget, Currency, check_cost
from dpmagic.domain.schema import Schema
from dpmagic.errors import BudgetError, BudgetExceededError, ConfigurationError
from dpmagic.query.model import Query
from dpmagic.releases.plan import cost_for_target

if TYPE_CHECKING:
    from dpmagic.session.session import Session

__all__ = ["CostSpec", "parse_cost", "plain_cost", "resolve_cost", "session_cost"]

#: a cost as given: a number, ``"max"`` or None (the session's default)
CostSpec = float | str | None


def parse_cost(currency: Currency, cost: CostSpec, named: Mapping[str, CostSpec]) -> CostSpec:
    """The cost as the user gave it (positionally or as ``epsilon=``/``rho=``/``mu=``), validated.

    Raises :class:`~dpmagic.errors.BudgetError` for a cost in another currency than the session's, or one that
    is neither a positive finite number nor ``"max"``.
    """
    given = {k: v for k, v in named.items() if v is not None}
    if cost is not None:
        given[currency.parameter] = cost
    wrong = [k for k in given if k != currency.parameter]
    if wrong:
        raise BudgetError(
            f"this session's budget is in {currency.parameter} ({currency.definition}); "
            f"a cost in {wrong[0]} does not apply"
        )
    value = given.get(currency.parameter)
    if isinstance(value, str):
        if value.strip().lower() == "max":
            return "max"
        raise BudgetError(f"the query's {currency.parameter} must be a number or 'max', got {value!r}")
    if value is not None:
        return check_cost(value, f"the query's {currency.parameter}")
    return None


def resolve_cost(
    q: Query,
    spec: CostSpec,
    *,
    ci: float | None,
    min_rows: int | None,
    budget: Budget,
    schema: Schema,
    replace_one: bool,
    default_cost: float,
    affordable: Callable[[], float],
) -> float:
    """The numeric cost of ``q``: explicit, default, ``max`` (what is affordable on its region) or the smallest
    cost whose 95% half-width is at most ``ci`` (accuracy first; ``min_rows`` bounds AVG's group size).

    ``affordable`` returns the largest cost the accountant would still admit on the query's region.
    """
    cur = budget.currency
    if ci is not None:
        if spec is not None:
            raise ConfigurationError(f"give either --ci or --{cur.parameter}, not both")
        if min_rows is not None and (isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1):
            raise ConfigurationError(f"--min-rows must be a positive whole number, got {min_rows!r}")
        need = cost_for_target(q, schema, cur, ci, min_rows=min_rows, replace_one=replace_one)
        left = affordable()
        if need > left * (1.0 + 1e-9):
            whose = "" if schema.person_unit is None else f" (one person's worst case; unit: {schema.unit_label})"
            raise BudgetExceededError(
                f"refused: a 95% half-width of ±{ci:g} needs {cur.format(need)}, but at most "
                f"{cur.format(left)} is affordable on this query's region{whose}",
                hint="accept a wider interval, or ask about a region with more budget left",
            )
        return need
    return plain_cost(spec, budget=budget, default_cost=default_cost, affordable=affordable)


def plain_cost(spec: CostSpec, *, budget: Budget, default_cost: float, affordable: Callable[[], float]) -> float:
    """A cost as the analyst gave it: a number, the default (None), or ``max`` — everything ``affordable()`` on
    the release's region, refused (:class:`BudgetExceededError`) when nothing is left there.  Every kind of
    release (query, batch) resolves its cost here."""
    if spec == "max":
        left = affordable()
        if left <= budget.total * 1e-12:
            raise BudgetExceededError(
                f"refused: no budget is left on this query's region ({budget.currency.parameter} affordable: 0)",
                hint="ask about a part of the domain where the budget is not yet spent",
            )
        return left
    if spec is None:
        return default_cost
    return float(spec)


def session_cost(session: Session, q: Query, spec: CostSpec, *, ci: float | None, min_rows: int | None) -> float:
    """:func:`resolve_cost` with a session's budget, schema, neighbouring relation, default and affordability."""
    return resolve_cost(
        q,
        spec,
        ci=ci,
        min_rows=min_rows,
        budget=session.budget,
        schema=session.schema,
        replace_one=session.neighbors == "replace",
        default_cost=session.default_cost,
        affordable=lambda: session.affordable(q),
    )
