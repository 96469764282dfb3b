"""Today's release as a mechanism: one SQL query, OpenDP noise on each of its aggregates in every declared cell.

The noise of every release is planned when the mechanism is built (:func:`dpmagic.releases.plan.plan_noise`, from the
neighbouring relation and the query's coverage via :mod:`dpmagic.noise.sensitivity`), before any data is read; after
the charge, :meth:`QueryMechanism.release` asks the backend for the exact per-cell aggregates, adds the noise
(:func:`dpmagic.releases.plan.release`) and applies the query's free post-processing of noisy values (SELECT
expressions, HAVING, ORDER BY, LIMIT: :func:`dpmagic.query.outputs.finish`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpmagic.releases.base import Backend, QueryBoxMechanism
from dpmagic.releases.plan import ReleasePlan, plan_noise, release, units_of

if TYPE_CHECKING:
    import pandas as pd

    from dpmagic.accountant.currency import Currency
    from dpmagic.domain.schema import Schema
    from dpmagic.noise.calibration import Noise
    from dpmagic.query.model import Query

__all__ = ["QueryMechanism"]


class QueryMechanism(QueryBoxMechanism):
    """One parsed query at one cost: its coverage is the WHERE box (GROUP BY cells are disjoint within it)."""

    kind = "query"

    def __init__(self, query: Query, schema: Schema, currency: Currency, cost: float, *, replace_one: bool) -> None:
        from dpmagic.query.derived import with_derived

        self.query = query
        self.schema = with_derived(schema, query)  # a row expression's derived column, bounded by its enclosure
        self._cost = cost
        self.plan: ReleasePlan = plan_noise(query, schema, currency, cost, replace_one=replace_one)

    @property
    def noise(self) -> dict[str, Noise]:
        plan = self.plan
        noise = {"count": plan.count} if plan.count is not None else {}
        noise.update({f"sum({k})": v for k, v in plan.sums.items()})
        for k, m in plan.moments.items():  # the centred quantities (dpmagic.aggregates.moments)
            noise[f"centred sum({k})"] = m.plan.total.noise
            if m.plan.squares is not None:
                noise[f"centred sum of squares({k})"] = m.plan.squares.noise
        return noise

    def describe(self) -> dict[str, Any]:
        plan = self.plan
        d: dict[str, Any] = {"share_cost": plan.share_cost, "releases_per_cell": plan.releases_per_cell}
        if plan.count is not None:
            d["count_noise"] = {"kind": plan.count.kind, "scale": plan.count.scale}
        d["sum_noise"] = {
            k: {"kind": v.kind, "scale": v.scale, "sensitivity": v.sensitivity} for k, v in plan.sums.items()
        }
        if plan.moments:
            d["centred_noise"] = {
                k: {"kind": v.kind, "scale": v.scale, "sensitivity": v.sensitivity}
                for k, v in self.noise.items()
                if k.startswith("centred ")
            }
        d["shares"] = dict(plan.shares)
        return d

    def _extended(self) -> Mapping[str, Any] | None:
        return self.plan.extra

    def release(self, backend: Backend) -> pd.DataFrame:
        from dpmagic.query.outputs import finish, in_region

        cells = backend.evaluate(self.query, units_of(self.plan), extended=self.plan.extra)
        released = release(self.query, cells, self.plan, self.schema)
        #: the noisy shared releases (noised output only), for the session's consistent estimates
        self.drawn = released.attrs.pop("dp_drawn", None)
        df = in_region(self.query, released)  # keys the WHERE excludes: out
        df.attrs["dp_notes"] = list(released.attrs.get("dp_notes", []))  # notes on clamped AVGs (noisy values only)
        return finish(self.query, df)  # SELECT expressions, HAVING, ORDER BY, LIMIT: post-processing of noisy values
