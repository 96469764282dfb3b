"""The accountant's tables for people: its charges, its load map over two columns, a set of its queries.

Pandas is imported on use (the CLI's ledger commands do not need it).  They read the
:class:`~dpmagic.accountant.accountant.Accountant` through its public methods and never write to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from dpmagic.accountant.accountant import Accountant

__all__ = ["budget_map", "ledger_frame", "overlapping_frame"]


def ledger_frame(accountant: Accountant) -> pd.DataFrame:
    """One row per charged query: SQL, cost, the bound charged after it (in the session's parameter), status."""
    import pandas as pd

    cur = accountant.currency
    columns = ["id", "sql", "cost", "charged after", "bound", "status", "time"]
    rows = [
        {
            "id": e.id,
            "sql": e.sql.strip(),
            "cost": e.cost,
            "charged after": cur.cost(e.charged_after),
            "bound": e.bound,
            "status": e.status,
            "time": pd.Timestamp(e.created, unit="s"),
        }
        for e in accountant.entries()
    ]
    return pd.DataFrame(rows, columns=columns)


def budget_map(accountant: Accountant, first: str, second: str) -> pd.DataFrame:
    """Current load (in the session's parameter) of every (first, second) cell, maximised over the other
    columns.  Rows are ``first``'s values, columns ``second``'s."""
    import pandas as pd

    rows, cols, grid = accountant.load_map(first, second)
    data = [[accountant.currency.cost(max(0.0, v)) for v in line] for line in grid]
    return pd.DataFrame(data, index=pd.Index(rows, name=first), columns=pd.Index(cols, name=second))


def overlapping_frame(accountant: Accountant, ids: Iterable[int]) -> pd.DataFrame:
    """The registered queries ``ids`` (ledger entry ids) with their SQL and cost."""
    import pandas as pd

    rows = [{"id": i, "sql": e.sql.strip(), "cost": e.cost} for i in ids if (e := accountant.entry(i)) is not None]
    return pd.DataFrame(rows, columns=["id", "sql", "cost"])
