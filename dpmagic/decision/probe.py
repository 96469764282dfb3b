"""ProBE decision queries: a pure planner and a callback-driven executor.

``plan(...)`` needs no data: from the condition tree, the public groups, the declared bounds, a public bound
on the group size and the targets (β on the false-negative rate, α on the false-positive rate) it computes
the Phase One parameters and their cost — what ``--dry-run`` shows. ``run(plan, charge, measure,
max_epsilon=...)`` executes the two phases of Lahjouji et al. (ProBE, arXiv:2406.15655,
doi:10.48550/arXiv.2406.15655, Alg. 1–4) against two callbacks supplied by the session:

* ``charge(cost, coverage) -> None`` — records ``cost`` (the session currency's parameter: ε, ρ or μ) for
  the rows described by ``coverage`` (condition, its filter, the groups about to be read, phase). It is called,
  and must return, **before** the corresponding ``measure``; if it raises, nothing is read.
* ``measure(condition_index, request) -> dict[group, noisy_value]`` — the exact per-group statistic of
  ``request.statistic`` for exactly the groups ``request.groups`` plus noise ``request.kind`` of scale
  ``request.scale`` (OpenDP's samplers).

Accuracy guarantees (per group, for every data set)
---------------------------------------------------
*False negatives.* The tree is a monotone formula f of its atoms. Evaluation measures an atom for a group
only when needed (AND stops at the first side reported false, OR at the first side reported true); which
groups are measured depends on noisy outputs only (post-processing). By induction on the tree: if every
atom that is true and measured for the group is reported true, a true (sub)formula is reported true (an OR
has a true child, evaluated unless an earlier child was reported true; an AND has both children true, and
the first being reported true the second is evaluated). Hence P(FN) ≤ Σ_i P(atom i true but reported false)
≤ Σ_i β_i by a union bound, with no independence assumption. Each atom is measured at most once per group
and phase (shared across its occurrences), so the o_i of the minimised tree only enter through the weights
of the split when ``occurrence_model="paper"``; with the default ``"shared"`` the weights are 1. Phase Two
re-measures flagged atoms with fresh noise in rounds r = 1, 2, … (at most ``max_rounds``), round r spending
2^−r·β·(1 − share) of the FNR budget; the reported value of an atom comes from its last measurement, so its FN
probability is at most the sum of its β's over the phases, and the total is < β·share + β·(1 − share) = β.

*False positives.* As in ProBE, the FPR is controlled by an *estimate* computed from the noisy outputs
(post-processing, no privacy cost): per atom, FP̂ = |O_p ∖ O_pp| + β_i|O_pp| and N̂ = (|O_n| − β_i|G_i|)/(1 − β_i)
(ProBE Eq. 22–23), restricted by the Phase One answer as in its Alg. 4; an atom is flagged when
FP̂ > (α/n)·N̂ and re-run at the largest u' for which the estimate meets the target (half the smallest gap if
none does); this repeats until every estimate meets its target, or the query is refused when the next round
would exceed ``max_epsilon`` (or after ``max_rounds``). This is ProBE's rule and is checked empirically in
``benchmarks/bench_probe.py``; unlike the FNR bound it is not a worst-case theorem.

Privacy. Every released value is a Laplace / discrete Laplace measurement of a statistic with sensitivity
Δ; each is charged ε = Δ/b (converted to ρ or μ) on exactly the groups it reads, before it is read. Groups
are disjoint, so the loss of a row is the sum over the measurements of its group: at most Σ_i ε_i⁽¹⁾ +
Σ_flagged ε_i⁽²⁾, which is checked against ``max_epsilon`` before each phase spends anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
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
from dpmagic.decision.tree import And, Condition, Leaf, MinimisedTree, Node, Or, minimise
from dpmagic.errors import BudgetError, BudgetExceededError, QueryError

__all__ = [
    "ConditionPlan",
    "DecisionPlan",
    "DecisionResult",
    "MeasureRequest",
    "plan",
    "run",
]

Group = Hashable
Charge = Callable[[float, dict[str, Any]], None]
#: charge-then-measure in one call (the session's ``Session.run`` of one mechanism)
Step = Callable[[int, "MeasureRequest", dict[str, Any]], Mapping[Group, float]]
#: checks, before a phase spends anything, that the ε of each of its possible reads is affordable
Afford = Callable[[list[float]], bool]


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
    definition: Definition = "pure",
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


# --------------------------------------------------------------------------------------------------
# executor


@dataclass
class _Params:
    u: float
    beta: float
    epsilon: float
    cost: float
    scale: float
    phase: int
    values: dict[Group, float] = field(default_factory=dict)


class _Executor:
    def __init__(
        self,
        p: DecisionPlan,
        charge: Charge | None,
        measure: Callable[[int, MeasureRequest], Mapping] | None,
        step: Step | None = None,
    ) -> None:
        self.plan = p
        self.charge = charge
        self.measure = measure
        self.step = step
        self.order = {g: k for k, g in enumerate(p.groups)}
        self.per_group: dict[Group, float] = {g: 0.0 for g in p.groups}
        self.per_group_cost: dict[Group, list[float]] = {g: [] for g in p.groups}
        self.calls: list[dict[str, Any]] = []

    def read(self, i: int, prm: _Params, need: list[Group]) -> None:
        cp = self.plan.by_index(i)
        req = MeasureRequest(
            condition=i,
            statistic=cp.statistic,
            where=cp.condition.where,
            kind=cp.statistic.kind,
            scale=prm.scale,
            sensitivity=cp.statistic.sensitivity,
            epsilon=prm.epsilon,
            cost=prm.cost,
            groups=tuple(need),
            phase=prm.phase,
            u=prm.u,
            beta=prm.beta,
        )
        coverage = {
            "condition": str(cp.condition),
            "statistic": cp.statistic.text,
            "where": cp.condition.where,
            "groups": list(need),
            "phase": prm.phase,
            "epsilon": prm.epsilon,
        }
        if self.step is not None:
            out = self.step(i, req, coverage)  # charges, then reads (one Session.run)
        else:
            assert self.charge is not None and self.measure is not None
            self.charge(prm.cost, coverage)  # must return before anything is read
            out = self.measure(i, req)
        if set(out.keys()) != set(need):
            raise QueryError("measure() must return exactly one noisy value per requested group")
        for g in need:
            prm.values[g] = float(out[g])
            self.per_group[g] += prm.epsilon
            self.per_group_cost[g].append(prm.cost)
        self.calls.append({"condition": i, "phase": prm.phase, "groups": len(need), "epsilon": prm.epsilon})

    def evaluate(self, node: Node, alive: list[Group], params: dict[int, _Params]) -> list[Group]:
        """Groups (in public order) for which ``node`` is reported true, measuring only what is needed."""
        if not alive:
            return []
        if isinstance(node, Leaf):
            i = node.index
            prm = params[i]
            need = [g for g in alive if g not in prm.values]
            if need:
                self.read(i, prm, need)
            st = self.plan.by_index(i).statistic
            cut = st.sign * st.threshold - prm.u
            return [g for g in alive if st.sign * prm.values[g] > cut]
        if isinstance(node, And):
            cur = alive
            for child in node.children:
                cur = self.evaluate(child, cur, params)
                if not cur:
                    break
            return cur
        if isinstance(node, Or):
            found: set[Group] = set()
            rest = alive
            for child in node.children:
                hit = self.evaluate(child, rest, params)
                found.update(hit)
                rest = [g for g in rest if g not in found]
                if not rest:
                    break
            return [g for g in alive if g in found]
        raise TypeError(f"not an indexed tree node: {node!r}")


def _estimate(st: Statistic, prm: _Params, reported: set[Group], u: float) -> tuple[float, float]:
    """ProBE's (Eq. 22–23, Alg. 4) estimate of an atom's false positives and a lower bound of its negatives.

    FP̂ counts only groups in the current answer (Alg. 4's restriction); N̂ uses the atom's own reported
    negatives at this u (Eq. 23). Alg. 4 also removes the current answer from O_n; with a u from the public
    range Phase One reports nearly every group, which would leave no negatives and no attainable target.
    """
    t = st.sign * st.threshold
    pp = p_only = n_neg = 0
    for g, v in prm.values.items():
        x = st.sign * v
        if g in reported:
            if x > t:
                pp += 1
            elif x > t - u:
                p_only += 1
        if x <= t - u:
            n_neg += 1
    f_est = p_only + pp * prm.beta
    r_est = (n_neg - prm.beta * len(prm.values)) / (1.0 - prm.beta)
    return f_est, r_est


def _search_u(st: Statistic, prm: _Params, reported: set[Group], f_cap: Callable[[float], float]) -> float | None:
    """The largest u' ≤ u whose estimate meets the target (candidates: the noisy gaps t − x of reported groups)."""
    t = st.sign * st.threshold
    gaps = sorted(
        {t - st.sign * v for g, v in prm.values.items() if g in reported and 0 < t - st.sign * v < prm.u}, reverse=True
    )
    for d in gaps:
        f, _ = _estimate(st, prm, reported, d)
        if f <= f_cap(d):
            return d
    # No gap works. Shrinking u cannot remove the β_i·|O_pp| term: if it alone exceeds the target at u' → 0,
    # no re-run can help (None: refuse rather than spend); otherwise halve the smallest gap.
    if _estimate(st, prm, reported, 0.0)[0] > f_cap(0.0):
        return None
    return min(gaps[-1] if gaps else prm.u, prm.u) / 2.0


def run(
    p: DecisionPlan,
    charge: Charge | None = None,
    measure: Callable[[int, MeasureRequest], Mapping[Group, float]] | None = None,
    *,
    max_epsilon: float,
    max_rounds: int = 8,
    step: Step | None = None,
    afford: Afford | None = None,
) -> DecisionResult:
    """Execute Phase One, and Phase Two when α is set (module docstring). ``charge`` precedes every read.

    Refuses (BudgetExceededError, nothing charged) if Phase One alone could exceed ``max_epsilon`` (the
    pure-ε loss of any row). A Phase Two that would exceed it is not run: the result is then ``denied``
    with the Phase One spending. Cost: O(n·|groups|) plus the callbacks.

    Instead of ``charge`` and ``measure`` a session passes ``step(i, request, coverage)``, which charges and
    then reads in one call (one :meth:`dpmagic.Session.run` per read), and ``afford(epsilons)``, asked before
    each phase with the ε of every read the phase may make: False refuses Phase One (BudgetExceededError,
    nothing charged) or denies Phase Two before it spends anything.
    """
    if step is None and (charge is None or measure is None):
        raise QueryError("run() needs charge and measure, or step")
    if not (isinstance(max_epsilon, (int, float)) and max_epsilon > 0):
        raise BudgetError(f"max_epsilon must be positive, got {max_epsilon!r}")
    if p.phase_one_epsilon > max_epsilon:
        raise BudgetExceededError(
            f"Phase One needs ε={p.phase_one_epsilon:.4g} per row, above max_epsilon={max_epsilon:.4g}",
            hint="raise max_epsilon, or relax beta",
        )
    if afford is not None and not afford([c.epsilon for c in p.conditions]):
        raise BudgetExceededError(
            f"Phase One needs ε={p.phase_one_epsilon:.4g} per row, more than the budget left on this region",
            hint="relax the false-negative target, or query a region with budget left",
        )
    ex = _Executor(p, charge, measure, step)
    tree = p.minimised.tree
    params1 = {c.index: _Params(c.u, c.beta, c.epsilon, c.cost, c.scale, 1) for c in p.conditions}
    reported = set(ex.evaluate(tree, list(p.groups), params1))
    phases: list[dict[str, Any]] = [
        {
            "phase": 1,
            "reported": len(reported),
            "conditions": {
                c.index: {"u": c.u, "beta": c.beta, "epsilon": c.epsilon, "measured": len(params1[c.index].values)}
                for c in p.conditions
            },
        }
    ]
    fnr = math.fsum(c.beta for c in p.conditions)

    def finish(groups: frozenset | None, denied: bool, reason: str | None, fpr: float | None) -> DecisionResult:
        spent = max(ex.per_group.values())
        cost = max(_compose(v, p.definition) for v in ex.per_group_cost.values())
        return DecisionResult(
            groups=groups,
            denied=denied,
            reason=reason,
            epsilon_spent=spent,
            cost_spent=cost,
            per_group_epsilon=dict(ex.per_group),
            phases=phases,
            fnr_bound=fnr,
            fpr_target=p.alpha,
            fpr_estimate=fpr,
        )

    if p.alpha is None:
        return finish(frozenset(reported), False, None, None)

    n = len(p.conditions)
    a_share = p.alpha / n
    flagged: dict[int, float] = {}
    detail: dict[int, dict[str, float]] = {}
    fpr_sum = 0.0
    for c in p.conditions:
        prm = params1[c.index]
        if not prm.values:
            continue
        f_est, r_est = _estimate(c.statistic, prm, reported, prm.u)
        f_max = a_share * max(r_est, 0.0)
        detail[c.index] = {"f_est": f_est, "r_est": r_est, "f_max": f_max}
        if f_est > f_max:

            def cap(u: float, c: ConditionPlan = c, prm: _Params = prm) -> float:
                return a_share * max(_estimate(c.statistic, prm, reported, u)[1], 0.0)

            u_new = _search_u(c.statistic, prm, reported, cap)
            if u_new is None:
                return finish(None, True, f"no smaller u can meet the false-positive target of {c.condition}", None)
            flagged[c.index] = _round_u(u_new, c.statistic)
        else:
            fpr_sum += f_est / r_est if r_est > 0 else 0.0
    phases[0]["estimates"] = detail
    if not flagged:
        return finish(frozenset(reported), False, None, min(1.0, fpr_sum))

    # Phase Two: re-run flagged conditions with fresh noise at a tighter u' until every estimate meets its
    # target. Round r (r = 1, 2, ...) gets 2^-r of the remaining FNR budget, so all rounds use < β·(1 − share).
    params = dict(params1)
    current = reported
    fnr = math.fsum(c.beta for c in p.conditions)
    spent_bound = p.phase_one_epsilon
    for rnd in range(1, max_rounds + 1):
        b2 = p.beta * (1.0 - p.phase_one_share) * 0.5**rnd
        idx = sorted(flagged)
        cps = [p.by_index(i) for i in idx]
        if p.split == "optimal":
            betas2 = optimal_beta_split(
                [c.statistic.sensitivity / flagged[c.index] for c in cps], [c.weight for c in cps], b2
            )
        else:
            betas2 = uniform_beta_split([c.weight for c in cps], b2)
        new_params = dict(params)
        for c, b in zip(cps, betas2):
            u2 = flagged[c.index]
            eps = tslm_epsilon(c.statistic.sensitivity, b, u2)
            new_params[c.index] = _Params(
                u2, b, eps, cost_of_epsilon(eps, p.definition), c.statistic.sensitivity / eps, 1 + rnd
            )
        projected = spent_bound + math.fsum(new_params[i].epsilon for i in idx)
        phases.append(
            {
                "phase": 1 + rnd,
                "flagged": {
                    i: {"u": new_params[i].u, "beta": new_params[i].beta, "epsilon": new_params[i].epsilon} for i in idx
                },
                "projected_epsilon": projected,
            }
        )
        if projected > max_epsilon:
            return finish(
                None,
                True,
                f"Phase Two would need ε={projected:.4g} per row, above max_epsilon={max_epsilon:.4g}",
                None,
            )
        if afford is not None and not afford([new_params[i].epsilon for i in idx]):
            return finish(None, True, f"Phase Two would need ε={projected:.4g} per row, beyond the budget left", None)
        params, spent_bound = new_params, projected
        current = set(ex.evaluate(tree, list(p.groups), params))
        fnr += math.fsum(params[i].beta for i in idx)
        phases[-1]["reported"] = len(current)
        flagged = {}
        fpr_sum = 0.0
        for c in p.conditions:
            prm = params[c.index]
            if not prm.values:
                continue
            f_est, r_est = _estimate(c.statistic, prm, current, prm.u)
            if f_est > a_share * max(r_est, 0.0):

                def cap2(u: float, c: ConditionPlan = c, prm: _Params = prm, cur: set = current) -> float:
                    return a_share * max(_estimate(c.statistic, prm, cur, u)[1], 0.0)

                u_new = _search_u(c.statistic, prm, current, cap2)
                if u_new is None:
                    return finish(None, True, f"no smaller u can meet the false-positive target of {c.condition}", None)
                flagged[c.index] = _round_u(u_new, c.statistic)
            else:
                fpr_sum += f_est / r_est if r_est > 0 else 0.0
        if not flagged:
            return finish(frozenset(current), False, None, min(1.0, fpr_sum))
    return finish(None, True, f"the false-positive estimates still exceed α/n after {max_rounds} rounds", None)
