"""A decision query in a session: SQL → condition tree → ProBE plan → one charged mechanism per read.

:func:`decide` is :meth:`dpmagic.Session.decide`.  Order of operations (invariant 2): parse and validate the
SQL, build the condition tree (:mod:`dpmagic.decision.having`) and the data-independent plan
(:func:`dpmagic.decision.probe.plan`, from the thresholds, the declared bounds and the public maximum group
size only); check Phase One against ``max_epsilon`` and against the budget left on the query's WHERE box;
then every read is one :class:`~dpmagic.decision.release.DecisionPhaseMechanism` passed to
:meth:`dpmagic.Session.run`, which records its charge before the backend is touched.  Before each Phase Two
round the round's worst case is checked against ``max_epsilon`` and the budget again; a round that does not
fit is not started (the answer is then *denied*, with what the completed phases spent).

Guarantees of the answer (Lahjouji et al., ProBE, arXiv:2406.15655): the false-negative rate of every group is
at most the reported ``fnr_bound`` ≤ β, **proven** for every data set (union bound over the measured atoms,
:mod:`dpmagic.decision.probe`); the false-positive rate is controlled by ProBE's **estimate** from the noisy
outputs — a target, not a worst-case theorem.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpmagic.accountant.currency import Definition
from dpmagic.decision.having import decision_tree, group_keys, public_bounds
from dpmagic.decision.mechanism import cost_of_epsilon
from dpmagic.decision.probe import DecisionPlan, MeasureRequest, _compose, plan, run
from dpmagic.decision.release import DecisionPhaseMechanism
from dpmagic.errors import BudgetError, QueryError
from dpmagic.noise.sensitivity import person_rows

if TYPE_CHECKING:
    from dpmagic.query.model import Query
    from dpmagic.session.session import Session

__all__ = ["DecisionAnswer", "decide"]


@dataclass
class DecisionAnswer:
    """The answer of a decision query: the groups reported to satisfy HAVING, what it cost, its guarantees.

    ``groups`` is None when the query was denied (``reason`` says why) or for a dry run.  ``cost`` is what the
    query charged in the session's currency (composed over its reads, all on the same WHERE box);
    ``epsilon`` the pure-ε loss of the worst row (add/remove; ×2 under replace-one).  ``phases`` has each
    phase's u, β, ε per condition; ``reads`` each charged read (ledger entry id, condition, groups read).
    """

    sql: str
    groups: list[Any] | None
    denied: bool
    reason: str | None
    dry_run: bool
    cost: float
    epsilon: float
    fnr_target: float
    fnr_bound: float
    fpr_target: float | None
    fpr_estimate: float | None
    plan: dict[str, Any]
    phases: list[dict[str, Any]] = field(default_factory=list)
    reads: list[dict[str, Any]] = field(default_factory=list)
    parameter: str = "epsilon"
    #: the name of the group column (the GROUP BY key's output name)
    key: str = "group"
    #: what one ε is the loss of: "row", or "person" for a person-level table
    unit: str = "row"

    @property
    def df(self) -> pd.DataFrame:
        """The reported groups as a one-column frame named after the GROUP BY key (empty when denied or a dry
        run)."""
        return pd.DataFrame({self.key: list(self.groups or [])})

    @property
    def guarantees(self) -> str:
        fpr = (
            "no false-positive target (Phase Two off)"
            if self.fpr_target is None
            else f"FPR target {self.fpr_target:g}: ProBE's estimate from the noisy outputs"
            + ("" if self.fpr_estimate is None else f" ({self.fpr_estimate:.3g})")
            + ", not a proven bound"
        )
        return f"FNR ≤ {self.fnr_bound:.3g} (≤ β = {self.fnr_target:g}) proven for every group; {fpr}"

    def summary(self) -> str:
        if self.dry_run:
            p = self.plan
            verdict = "would charge" if p.get("phase_one_admissible", True) else "would be REFUSED: it needs"
            text = (
                f"dry run: Phase One {verdict} {self.parameter}={p['phase_one_cost']:.6g} "
                f"(ε={p['phase_one_epsilon']:.6g} per {self.unit}) over {p['groups']} groups; nothing was read"
            )
            if p.get("phase_two_max_cost"):
                text += (
                    f"; Phase Two (the FPR target) reads again as the noisy answers require: its charge depends on "
                    f"the data, at most {self.parameter}={p['phase_two_max_cost']:.6g} more"
                )
            return text
        head = (
            f"denied ({self.reason})"
            if self.denied
            else f"{len(self.groups or [])} group(s) reported to satisfy HAVING"
        )
        return (
            f"{head}; charged {self.parameter}={self.cost:.6g} (ε={self.epsilon:.6g} per {self.unit}) in "
            f"{len(self.reads)} read(s); {self.guarantees}"
        )

    def __repr__(self) -> str:
        """The summary and, in a terminal, the groups themselves (one per line, the first 50)."""
        lines = [self.summary()]
        if self.groups:
            lines.append(f"{self.key}:")
            lines += [f"  {g}" for g in self.groups[:50]]
            if len(self.groups) > 50:
                lines.append(f"  … and {len(self.groups) - 50} more (the .df attribute holds them all)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        rows = "".join(f"<li>{html.escape(str(g))}</li>" for g in (self.groups or []))
        return f"<div><p>{html.escape(self.summary())}</p><ul>{rows}</ul></div>"


def _definition(session: Session) -> Definition:
    return session.currency.definition


def make_plan(session: Session, q: Query, *, fnr: float, fpr: float | None, max_group_size: int | None) -> DecisionPlan:
    """The data-independent ProBE plan of ``q`` (reads nothing).

    ``max_group_size`` (the option) overrides the schema's declared ``max_group_size``; one of them is needed.
    """
    if max_group_size is None:
        max_group_size = getattr(session.schema, "max_group_size", None)
    if max_group_size is None:
        raise QueryError(
            "a decision query needs a public bound on the size of a group (max_group_size)",
            hint='declare "max_group_size": N in the schema JSON, or pass max_group_size=N '
            "(%%dpquery --max-group-size N): a bound declared by the data custodian",
        )
    tree = decision_tree(q, session.schema)
    bounds, ints = public_bounds(session.schema, tree)
    return plan(
        tree,
        groups=group_keys(q),
        max_group_size=max_group_size,
        beta=fnr,
        alpha=fpr,
        bounds=bounds,
        integer_columns=ints,
        definition=_definition(session),
    )


def decide(
    session: Session,
    sql: str,
    *,
    fnr: float,
    fpr: float | None,
    max_epsilon: float | None = None,
    dry_run: bool = False,
    max_group_size: int | None = None,
) -> DecisionAnswer:
    """Answer the decision query ``sql`` (module docstring).  Raises before anything is charged on bad input,
    an unaffordable Phase One, or one above ``max_epsilon``."""
    if max_epsilon is not None and not (
        isinstance(max_epsilon, (int, float)) and not isinstance(max_epsilon, bool) and max_epsilon > 0
    ):
        raise BudgetError(f"max_epsilon must be a positive number, got {max_epsilon!r}")
    q = session.parse(sql)
    p = make_plan(session, q, fnr=fnr, fpr=fpr, max_group_size=max_group_size)
    definition = _definition(session)
    replace = session.neighbors == "replace"
    rows = person_rows(session.schema, q)
    k = (2.0 if replace else 1.0) * rows
    key = ", ".join(q.group_by) or "group"
    unit = "row" if session.schema.person_unit is None else "person"
    parameter = session.currency.parameter
    parameter = getattr(parameter, "value", parameter)
    summary = p.summary()
    summary["phase_one_cost"] = _compose([cost_of_epsilon(k * c.epsilon, definition) for c in p.conditions], definition)
    summary["neighbors"] = session.neighbors
    if dry_run:
        # the pipeline without the charge: Phase One's reads all cover the WHERE box, so together they add their
        # composed cost there (exactly what the exact bound charges for them one after another)
        phase_one = summary["phase_one_cost"]
        summary["phase_one_admissible"] = session.accountant.preview(q.coverage, phase_one).admissible
        if p.alpha is None:
            summary["phase_two_max_cost"] = 0.0
        else:  # data-dependent rounds, each checked against max_epsilon and the budget left before it is charged
            cur = session.currency
            cap = cur.weight(session.affordable(q))  # a round beyond the budget left is denied, never charged
            if max_epsilon is not None and definition != "gdp":  # Σρ(ε_i) ≤ ρ(Σε_i): an upper bound under zCDP too
                cap = min(cap, cur.weight(cost_of_epsilon(float(max_epsilon), definition)))
            summary["phase_two_max_cost"] = cur.cost(max(0.0, cap - cur.weight(phase_one)))
        return DecisionAnswer(
            sql=sql,
            groups=None,
            denied=False,
            reason=None,
            dry_run=True,
            cost=phase_one,
            epsilon=0.0,
            fnr_target=p.beta,
            fnr_bound=math.fsum(c.beta for c in p.conditions),
            fpr_target=p.alpha,
            fpr_estimate=None,
            plan=summary,
            parameter=str(parameter),
            key=key,
            unit=unit,
        )

    reads: list[dict[str, Any]] = []
    weight = session.currency.weight
    # every phase's charge records the time the query was asked: a later phase is charged after an earlier one
    # read the data, and its own clock time would time that read (issue 24)
    asked_at = time.time()

    def afford(epsilons: list[float]) -> bool:
        cost = _compose([cost_of_epsilon(k * e, definition) for e in epsilons], definition)
        return weight(cost) <= weight(session.affordable(q))

    def step(i: int, req: MeasureRequest, coverage: dict[str, Any]) -> dict[Any, float]:
        mech = DecisionPhaseMechanism(
            q,
            req,
            str(p.by_index(i).condition),
            definition=definition,
            replace_one=replace,
            rows=rows,
        )
        released = session.run(
            mech,
            sql=sql,
            canonical=f"{q.canonical} /* decision phase {req.phase}: {mech.condition} */",
            details={"decision": {"fnr": p.beta, "fpr": p.alpha}},
            asked_at=asked_at,
        )
        reads.append(
            {
                "entry": released.entry_id,
                "phase": req.phase,
                "condition": mech.condition,
                "groups": len(req.groups),
                "cost": mech.cost,
                "epsilon": mech.loss_epsilon,
            }
        )
        return dict(zip(released.df["group"].tolist(), released.df["noisy"].tolist()))

    cap = math.inf if max_epsilon is None else float(max_epsilon) / k
    res = run(p, max_epsilon=cap, step=step, afford=afford)
    return DecisionAnswer(
        sql=sql,
        groups=None if res.groups is None else [g for g in p.groups if g in res.groups],
        denied=res.denied,
        reason=res.reason,
        dry_run=False,
        cost=_compose([r["cost"] for r in reads], definition),
        epsilon=math.fsum(r["epsilon"] for r in reads),
        fnr_target=p.beta,
        fnr_bound=res.fnr_bound,
        fpr_target=p.alpha,
        fpr_estimate=res.fpr_estimate,
        plan=summary,
        phases=res.phases,
        reads=reads,
        parameter=str(parameter),
        key=key,
        unit=unit,
    )
