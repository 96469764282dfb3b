"""A batch in a session (:meth:`dpmagic.session.session.Session.batch`): parse the workload, choose the strategy and
its cost, then one release through :meth:`~dpmagic.session.session.Session.run` (or, for a dry run, the same
mechanism previewed without the charge).  The mechanisms are :mod:`dpmagic.batch.release`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Container, Mapping
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
from dpmagic.session.admission import current_admission
from dpmagic.session.costs import plain_cost

if TYPE_CHECKING:
    from dpmagic.batch.estimate import BatchEstimate
    from dpmagic.session.session import Session

__all__ = ["BatchPreview", "BatchResult", "run_batch", "kept_estimate", "check_keep_name"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    #: the refusal of a further admission (a server's per-analyst quota) that the budget itself would not make
    refusal: str | None = None

    @property
    def admissible(self) -> bool:
        return self.charge is None or bool(self.charge.admissible)

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
        elif self.refusal is not None:  # "refused by your quota: …", as the run would say
            lines.append("would be " + re.sub(r"^refused", "REFUSED", self.refusal))
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
    estimate: BatchEstimate | None = None
    queries: int | None = None

    def summary(self) -> str:
        m = len(self.df) if self.queries is None else self.queries
        text = (
            f"batch {self.workload}: {m:,} queries, strategy {self.strategy}, expected RMSE "
            f"{self.expected_rmse:.4g}; charged {self.parameter}={self.cost:.4g} "
            f"({self.spent:.4g} of {self.budget:.4g} {self.parameter} used)"
        )
        if m != len(self.df):
            text += f"; listed: the estimate's {len(self.df):,} cells (every query is a sum of them)"
        est = self.estimate
        if est is not None and est.name == f"#{self.entry_id}":
            text += "; ask any other query for free from .estimate (.range(lo, hi), .prefix(v), .query(vector))"
        elif est is not None:
            text += f"; kept as {est.name!r}: ask any other query for free with %dpbatch --from {est.name} range LO HI"
        return text

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
    keep: str | None = None,
    kept: dict[str, Any] | None = None,
) -> BatchPreview | BatchResult:
    """The body of :meth:`dpmagic.Session.batch`.  ``kept``: where an estimate kept as ``keep`` goes (default
    ``session.estimates``; a custodian server passes the asking analyst's own)."""
    import time

    from dpmagic.batch.spec import parse_workload
    from dpmagic.query.sql import split_statements

    t0 = time.perf_counter()
    cur = session.currency
    replace = session.neighbors == "replace"
    if rmse_target is not None and cost_spec is not None:
        raise ConfigurationError("batch: give a cost or an RMSE target, not both")
    estimates = session.estimates if kept is None else kept
    if keep is not None:
        check_keep_name(estimates, keep)

    def resolve(coverage: Box, unit_rmse: float) -> float:
        if rmse_target is not None:
            return cost_for_rmse(unit_rmse, cur, float(rmse_target))

        def affordable() -> float:  # 'max': what the budget and a server's per-analyst quota both admit
            left = session.accountant.affordable(coverage)
            extra = current_admission()
            return left if extra is None else min(left, extra.affordable(coverage))

        return plain_cost(cost_spec, budget=session.budget, default_cost=session.default_cost, affordable=affordable)

    mech: BatchMechanism | BoxBatchMechanism
    plan: BatchPlan | None = None
    if re.search(r"\bselect\b", workload, re.I):
        if where:
            raise ConfigurationError("batch: with SELECT statements, put each WHERE inside its statement")
        if keep is not None:
            raise ConfigurationError(
                "batch: a batch of SELECT statements keeps no estimate (each box is measured directly)",
                hint="keep= needs a workload such as all_range(age)",
            )
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
        charge, refusal = session.dry_run_refusal(mech)
        return BatchPreview(
            workload=label,
            strategy=name,
            cost=cost,
            parameter=cur.parameter,
            rmse=rmses,
            charge=charge,
            spent=session.spent,
            budget=session.budget.total,
            details=mech.describe(),
            skipped=dict(plan.skipped) if plan is not None else {},
            refusal=refusal,
        )
    released = session.run(mech, sql=text, canonical=canonical, started=t0)
    estimate = None
    if isinstance(mech, BatchMechanism) and mech.x_hat is not None:
        from dpmagic.batch.estimate import BatchEstimate
        from dpmagic.domain.schema import CategoricalColumn

        sp = mech.spec
        estimate = BatchEstimate(
            name=keep if keep is not None else f"#{released.entry_id}",
            columns=sp.columns,
            values=sp.values,
            ordered=tuple(not isinstance(session.schema.columns[c], CategoricalColumn) for c in sp.columns),
            strategy=mech.strategy,
            x_hat=mech.x_hat,
            unit_variance=mech.unit_variance,
            entry_id=released.entry_id,
            workload=label + (f" WHERE {where}" if where and where.strip() else ""),
        )
        if keep is not None:
            estimates[keep] = estimate
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
        estimate=estimate,
        queries=int(mech.spec.num_queries) if isinstance(mech, BatchMechanism) else None,
    )


def check_keep_name(estimates: Container[str], name: str) -> None:
    """A name for a kept estimate: an identifier not already among ``estimates`` (the names kept in the session,
    or on a server the asking analyst's own); checked before any charge."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(f"batch: the estimate's name must be an identifier, got {name!r}", hint="e.g. ages")
    if name in estimates:
        raise ConfigurationError(
            f"batch: an estimate named {name!r} is already kept in this session",
            hint="choose another name (kept estimates are never replaced)",
        )


def kept_estimate(estimates: Mapping[str, Any], name: str) -> BatchEstimate:
    """The estimate kept as ``name`` among ``estimates``, or one clear error listing the kept names."""
    est = estimates.get(name) if isinstance(name, str) else None
    if est is None:
        kept = ", ".join(sorted(estimates)) or "none yet (use keep=NAME, or --keep NAME in %%dpbatch)"
        raise ConfigurationError(f"no batch estimate named {name!r} in this session", hint=f"kept: {kept}")
    return est
