"""A batch in a session (:meth:`dpmagic.session.session.Session.batch`): parse the workload, choose the strategy and
its cost, then one release through :meth:`~dpmagic.session.session.Session.run` (or, for a dry run, the same
mechanism previewed without the charge).  The mechanisms are :mod:`dpmagic.batch.release`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpmagic.batch.release import (
    BatchMechanism,
    BatchPlan,
    BoxBatchMechanism,
    cost_for_rmse,
    plan_strategy,
    rmse_at,
)
from dpmagic.domain.sets import Box
from dpmagic.errors import ConfigurationError
from dpmagic.noise.sensitivity import person_rows
from dpmagic.session.costs import plain_cost

if TYPE_CHECKING:
    from dpmagic.session.session import Session

__all__ = ["BatchPreview", "BatchResult", "run_batch"]


@dataclass
class BatchPreview:
    """A dry run of a batch: expected RMSE per strategy, the choice, the charge preview — no data read."""

    workload: str
    strategy: str
    cost: float
    parameter: str
    rmse: dict[str, float]
    charge: Any
    spent: float
    budget: float
    details: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [
            f"dry run of batch {self.workload}: nothing charged, nothing read",
            f"strategy {self.strategy} at {self.parameter}={self.cost:.4g}",
        ]
        lines += [f"  expected RMSE {k}: {v:.4g}" for k, v in self.rmse.items()]
        lines += [f"  {k}: {v}" for k, v in self.skipped.items()]
        ch = self.charge
        if ch is not None and ch.admissible:
            lines.append(f"would be charged as {ch.charged_as}: bound {ch.before:.4g} → {ch.after:.4g}")
        elif ch is not None:
            lines.append(
                f"would be REFUSED: the bound would rise from {ch.before:.4g} to {ch.after:.4g}, above the budget; "
                "lower the cost or narrow the WHERE clause"
            )
        lines.append(f"{self.spent:.4g} of {self.budget:.4g} {self.parameter} charged so far")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


@dataclass
class BatchResult:
    """A released batch: one row per workload query (noisy answer and 95% interval), and its charge."""

    df: pd.DataFrame
    workload: str
    strategy: str
    cost: float
    parameter: str
    expected_rmse: float
    charge: Any
    entry_id: int
    seconds: float
    spent: float
    budget: float

    def summary(self) -> str:
        return (
            f"batch {self.workload}: {len(self.df)} queries, strategy {self.strategy}, expected RMSE "
            f"{self.expected_rmse:.4g}; charged {self.parameter}={self.cost:.4g} "
            f"({self.spent:.4g} of {self.budget:.4g} {self.parameter} used)"
        )

    def __repr__(self) -> str:
        return self.summary() + "\n" + self.df.to_string(max_rows=20)

    def _repr_html_(self) -> str:
        import html

        return f"<p>{html.escape(self.summary())}</p>" + self.df.to_html(max_rows=40, index=False)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def run_batch(
    session: Session,
    workload: str,
    *,
    where: str | None,
    strategy: str,
    cost_spec: float | str | None,
    rmse_target: float | None,
    dry_run: bool,
) -> BatchPreview | BatchResult:
    """The body of :meth:`dpmagic.Session.batch`."""
    import time

    from dpmagic.batch.spec import parse_workload
    from dpmagic.query.sql import split_statements

    t0 = time.perf_counter()
    cur = session.currency
    replace = session.neighbors == "replace"
    if rmse_target is not None and cost_spec is not None:
        raise ConfigurationError("batch: give a cost or an RMSE target, not both")

    def resolve(coverage: Box, unit_rmse: float) -> float:
        if rmse_target is not None:
            return cost_for_rmse(unit_rmse, cur, float(rmse_target))
        return plain_cost(
            cost_spec,
            budget=session.budget,
            default_cost=session.default_cost,
            affordable=lambda: session.accountant.affordable(coverage),
        )

    mech: BatchMechanism | BoxBatchMechanism
    plan: BatchPlan | None = None
    if re.search(r"\bselect\b", workload, re.I):
        if where:
            raise ConfigurationError("batch: with SELECT statements, put each WHERE inside its statement")
        if strategy not in ("auto", "workload"):
            raise ConfigurationError(
                f"batch: a batch of SELECT statements is measured directly (strategy workload), not {strategy!r}"
            )
        stmts = split_statements(workload)
        if not stmts:
            raise ConfigurationError("batch: no statement")
        queries = [session.parse(s) for s in stmts]
        person = session.schema.person_unit
        rows = 1 if person is None else person.kept_rows  # a person's rows over every box of the batch
        unit = BoxBatchMechanism(queries, session.schema, cur, 1.0, replace_one=replace, rows=rows)
        unit_rmse = math.sqrt(unit.variance)
        cost = resolve(unit.coverage, unit_rmse)
        mech = BoxBatchMechanism(queries, session.schema, cur, cost, replace_one=replace, rows=rows)
        name, rmses = "workload", {"workload": math.sqrt(mech.variance)}
        expected = rmses["workload"]
        text = ";\n".join(stmts)
        canonical = "batch-boxes|" + "|".join(q.canonical for q in queries)
        label = f"{len(queries)} COUNT(*) boxes"
    else:
        spec = parse_workload(workload, session.schema)
        cols = ", ".join(_quote(c) for c in spec.columns)
        clause = f" WHERE {where}" if where and where.strip() else ""
        sql = f"SELECT COUNT(*) FROM {_quote(session.table_names[0])}{clause} GROUP BY {cols}"
        q = session.parse(sql)
        rows = person_rows(session.schema, q)
        plan = plan_strategy(spec, cur, replace_one=replace, strategy=strategy, rows=rows)
        cost = resolve(q.coverage, plan.rmse[plan.chosen])
        mech = BatchMechanism(spec, q, cur, cost, replace_one=replace, plan=plan, rows=rows)
        name, rmses = plan.chosen, {k: rmse_at(v, cur, cost) for k, v in plan.rmse.items()}
        expected = mech.expected_rmse
        text = f"BATCH {spec.text}" + (f" WHERE {where}" if clause else "") + f" STRATEGY {strategy}"
        canonical = f"batch|{spec.text}|{strategy}|{q.canonical}"
        label = spec.text
    if dry_run:
        return BatchPreview(
            workload=label,
            strategy=name,
            cost=cost,
            parameter=cur.parameter,
            rmse=rmses,
            charge=session.dry_run(mech),
            spent=session.spent,
            budget=session.budget.total,
            details=mech.describe(),
            skipped=dict(plan.skipped) if plan is not None else {},
        )
    released = session.run(mech, sql=text, canonical=canonical, started=t0)
    return BatchResult(
        df=released.df,
        workload=label,
        strategy=name,
        cost=cost,
        parameter=cur.parameter,
        expected_rmse=expected,
        charge=released.charge,
        entry_id=released.entry_id,
        seconds=released.seconds,
        spent=session.spent,
        budget=session.budget.total,
    )
