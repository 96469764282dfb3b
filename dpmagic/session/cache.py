"""The re-run cache: an identical query (same normalised SQL, same cost option) gets its stored answer, free.

Answers are looked up in this kernel first, then in the ledger (answered before a restart, or by another
kernel sharing the ledger): a released answer is public, so returning it again costs nothing.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pandas as pd

from dpmagic.errors import ConfigurationError
from dpmagic.session.results import QueryResult

if TYPE_CHECKING:
    from dpmagic.accountant.currency import Currency
    from dpmagic.query.model import Query
    from dpmagic.session.costs import CostSpec
    from dpmagic.session.session import Session

__all__ = ["ReleaseCache", "cache_key"]


def cache_key(q: Query, currency: Currency, spec: CostSpec, ci: float | None, min_rows: int | None) -> str:
    """The re-run key of an answer: the normalised query and the cost option as given."""
    cost = "default" if spec is None and ci is None else (f"ci={ci!r},min_rows={min_rows!r}" if ci else repr(spec))
    return f"{q.key}|{currency.parameter}={cost}"


class ReleaseCache:
    """Released answers by :func:`cache_key`, for one session."""

    def __init__(self) -> None:
        self._hits: dict[str, QueryResult] = {}

    def put(self, key: str, result: QueryResult) -> None:
        self._hits[key] = result

    def get(self, key: str, session: Session) -> QueryResult | None:
        """A copy of the stored answer marked ``cached`` (charged nothing, numbered as first shown), or None."""
        from dpmagic.session.rendering import query_numbers

        hit = self._hits.get(key)
        if hit is None:
            e = session.accountant.released_entry(key)  # answered before a restart, or by another kernel
            if e is not None:
                answer = e.answer
                if not isinstance(answer, dict) or "data" not in answer or "columns" not in answer:
                    raise ConfigurationError(
                        f"the ledger records the release of entry {e.id} without its answer (data and columns)",
                        hint="was the ledger file edited? check it with `dpmagic ledger verify PATH`",
                    )
                q = session.parse(e.sql)
                hit = QueryResult(
                    query=q,
                    df=pd.DataFrame(answer["data"], columns=answer["columns"]),
                    cost=e.cost,
                    currency=session.currency,
                    charge=session.accountant.preview(q.coverage, e.cost),
                    noise={},
                    entry_id=e.id,
                    seconds=0.0,
                    spent=session.spent,
                    budget=session.budget.total,
                )
                self._hits[key] = hit
        if hit is None:
            return None
        return dataclasses.replace(
            hit,
            df=hit.df.copy(),
            seconds=0.0,
            spent=session.spent,
            budget=session.budget.total,
            cached=True,
            number=query_numbers(session).get(hit.entry_id, 0),
        )
