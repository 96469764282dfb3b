"""ProBE decision queries, planning half: the data-independent Phase One plan (what ``--dry-run`` shows).

``plan(...)`` needs no data: from the condition tree, the public groups, the declared bounds, a public bound
on the group size and the targets (β on the false-negative rate, α on the false-positive rate) it computes
the minimised tree (Lahjouji et al., ProBE, arXiv:2406.15655, doi:10.48550/arXiv.2406.15655, §4–5.1), each
condition's statistic, sensitivity and public range, u_i = ``u_fraction`` × range, the optimal β split and
the resulting ε_i. The executor (Phase One traversal and Phase Two) is :mod:`dpmagic.decision.probe`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dpmagic.decision.mechanism import (
    Definition,
    NoiseKind,
    Statistic,
    cost_of_epsilon,
    optimal_beta_split,
    statistic_for,
    tslm_epsilon,
    uniform_beta_split,
)
from dpmagic.decision.tree import Condition, MinimisedTree, Node, minimise
from dpmagic.errors import BudgetError, QueryError

__all__ = ["ConditionPlan", "DecisionPlan", "DecisionResult", "MeasureRequest", "plan"]

Group = Hashable


@dataclass(frozen=True)
class ConditionPlan:
    """Phase One parameters of one (used) condition of the minimised tree."""

    index: int
    condition: Condition
    statistic: Statistic
    occurrences: int
    weight: int
    u: float
    beta: float
    epsilon: float
    cost: float
    scale: float


@dataclass(frozen=True)
class MeasureRequest:
    """What ``measure`` must release: the statistic over ``groups`` plus ``kind`` noise of ``scale``."""

    condition: int
    statistic: Statistic
    where: Any
    kind: NoiseKind
    scale: float
    sensitivity: float
    epsilon: float
    cost: float
    groups: tuple[Group, ...]
    phase: int
    u: float
    beta: float


@dataclass(frozen=True)
class DecisionPlan:
    """A data-independent plan: minimised tree, per-condition Phase One parameters and their cost."""

    minimised: MinimisedTree
    conditions: tuple[ConditionPlan, ...]
    groups: tuple[Group, ...]
    beta: float
    alpha: float | None
    definition: Definition
    max_group_size: int
    bounds: Mapping[str, tuple[float, float]]
    integer_columns: frozenset[str]
    u_fraction: float
    phase_one_share: float
    split: Literal["optimal", "uniform"]
    occurrence_model: Literal["shared", "paper"]

    @property
    def phase_one_epsilon(self) -> float:
        """Upper bound of the Phase One ε of any row (every condition measured on its group)."""
        return math.fsum(c.epsilon for c in self.conditions)

    @property
    def phase_one_cost(self) -> float:
        """The same bound in the session currency (ε; ρ adds up; μ adds up in squares)."""
        return _compose([c.cost for c in self.conditions], self.definition)

    def by_index(self, index: int) -> ConditionPlan:
        for c in self.conditions:
            if c.index == index:
                return c
        raise KeyError(index)

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly description (for ``--dry-run``)."""
        return {
            "original": self.minimised.original and _text(self.minimised.original, self.minimised),
            "minimised": self.minimised.text,
            "groups": len(self.groups),
            "beta": self.beta,
            "alpha": self.alpha,
            "definition": self.definition,
            "phase_one_epsilon": self.phase_one_epsilon,
            "phase_one_cost": self.phase_one_cost,
            "conditions": [
                {
                    "condition": str(c.condition),
                    "statistic": c.statistic.text,
                    "occurrences": c.occurrences,
                    "sensitivity": c.statistic.sensitivity,
                    "public_range": [c.statistic.range_lo, c.statistic.range_hi],
                    "u": c.u,
                    "beta": c.beta,
                    "epsilon": c.epsilon,
                    "cost": c.cost,
                    "noise": f"{c.statistic.kind} (b={c.scale:.6g})",
                }
                for c in self.conditions
            ],
        }


@dataclass
class DecisionResult:
    """What :func:`run` returns. ``groups`` is None when the query was refused after Phase One."""

    groups: frozenset[Group] | None
    denied: bool
    reason: str | None
    epsilon_spent: float
    cost_spent: float
    per_group_epsilon: dict[Group, float]
    phases: list[dict[str, Any]] = field(default_factory=list)
    fnr_bound: float = 0.0
    fpr_target: float | None = None
    fpr_estimate: float | None = None


def _text(tree: Node, m: MinimisedTree) -> str:
    from dpmagic.decision.tree import to_text

    return to_text(tree, m.conditions)


def _compose(costs: Sequence[float], definition: Definition) -> float:
    if definition == "gdp":
        return math.sqrt(math.fsum(c * c for c in costs))
    return math.fsum(costs)


def _round_u(u: float, stat: Statistic) -> float:
    """Integer statistics use an integer region (needed by the discrete FNR proof), at least 1."""
    return float(max(1, math.floor(u))) if stat.integer else u


# --------------------------------------------------------------------------------------------------
# planner


def plan(
    tree: Node,
    *,
    groups: Sequence[Group],
    max_group_size: int,
    beta: float,
    alpha: float | None,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    integer_columns: Collection[str] = (),
    definition: Definition = Definition.PURE,
    u_fraction: float = 0.3,
    phase_one_share: float = 0.5,
    split: Literal["optimal", "uniform"] = "optimal",
    occurrence_model: Literal["shared", "paper"] = "shared",
    use_implications: bool = True,
) -> DecisionPlan:
    """The Phase One plan of a decision query (pure: reads no data).

    ``groups`` are the public GROUP BY keys (declared categories), ``max_group_size`` a public bound on the
    rows of one group (declared by the custodian, or the table size), ``bounds`` the declared [lower, upper]
    of the SUM/AVG columns (``integer_columns`` those of type int). u_i = ``u_fraction`` × the public range of
    the statistic; Phase One spends ``phase_one_share``·β of the FNR budget (ProBE: ½), Phase Two the rest.
    ``alpha=None`` disables Phase Two (then Phase One gets ``phase_one_share``·β; pass 1.0 to give it all).
    Cost: O(2^n) for the minimisation of n ≤ 12 conditions, O(n) otherwise.
    """
    if not (isinstance(beta, (int, float)) and 0.0 < beta < 1.0):
        raise BudgetError(f"the false-negative target beta must lie in (0, 1), got {beta!r}")
    if alpha is not None and not (isinstance(alpha, (int, float)) and 0.0 < alpha < 1.0):
        raise BudgetError(f"the false-positive target alpha must lie in (0, 1), got {alpha!r}")
    if not (0.0 < phase_one_share <= 1.0) or (alpha is not None and phase_one_share >= 1.0):
        raise BudgetError("phase_one_share must lie in (0, 1) (in (0, 1] without Phase Two)")
    if not (0.0 < u_fraction <= 1.0):
        raise BudgetError(f"u_fraction must lie in (0, 1], got {u_fraction!r}")
    if split not in ("optimal", "uniform") or occurrence_model not in ("shared", "paper"):
        raise QueryError("split must be 'optimal' or 'uniform'; occurrence_model 'shared' or 'paper'")
    if definition not in ("pure", "zcdp", "gdp"):
        raise BudgetError(f"unknown privacy definition {definition!r}: use pure, zcdp or gdp")
    groups = tuple(groups)
    if not groups:
        raise QueryError("a decision query needs at least one (public) group")
    if len(set(groups)) != len(groups):
        raise QueryError("the public group keys must be distinct")
    bounds = dict(bounds or {})
    ints = frozenset(integer_columns)
    m = minimise(tree, use_implications=use_implications)
    used = m.used
    stats = {
        i: statistic_for(m.conditions[i], bounds, max_group_size=max_group_size, integer_columns=ints) for i in used
    }
    us = {i: _round_u(u_fraction * stats[i].range, stats[i]) for i in used}
    weights = [m.occurrences[i] if occurrence_model == "paper" else 1 for i in used]
    b1 = beta * phase_one_share
    if split == "optimal":
        betas = optimal_beta_split([stats[i].sensitivity / us[i] for i in used], weights, b1)
    else:
        betas = uniform_beta_split(weights, b1)
    plans = []
    for i, w, bi in zip(used, weights, betas):
        eps = tslm_epsilon(stats[i].sensitivity, bi, us[i])
        plans.append(
            ConditionPlan(
                index=i,
                condition=m.conditions[i],
                statistic=stats[i],
                occurrences=m.occurrences[i],
                weight=w,
                u=us[i],
                beta=bi,
                epsilon=eps,
                cost=cost_of_epsilon(eps, definition),
                scale=stats[i].sensitivity / eps,
            )
        )
    return DecisionPlan(
        minimised=m,
        conditions=tuple(plans),
        groups=groups,
        beta=float(beta),
        alpha=None if alpha is None else float(alpha),
        definition=definition,
        max_group_size=max_group_size,
        bounds=bounds,
        integer_columns=ints,
        u_fraction=u_fraction,
        phase_one_share=phase_one_share,
        split=split,
        occurrence_model=occurrence_model,
    )
