"""ProBE decision queries, executing half: Phase One traversal and Phase Two rounds against callbacks.

``run(plan, charge, measure, max_epsilon=...)`` executes the two phases of Lahjouji et al. (ProBE,
arXiv:2406.15655, doi:10.48550/arXiv.2406.15655, Alg. 1–4) on a plan of :mod:`dpmagic.decision.planning`,
with two callbacks supplied by the session:

* ``charge(cost, coverage) -> None`` — records ``cost`` (the session currency's parameter: ε, ρ or μ) for
  the rows described by ``coverage`` (condition, its filter, the groups about to be read, phase). It is called,
  and must return, **before** the corresponding ``measure``; if it raises, nothing is read.
* ``measure(condition_index, request) -> dict[group, noisy_value]`` — the exact per-group statistic of
  ``request.statistic`` for exactly the groups ``request.groups`` plus noise ``request.kind`` of scale
  ``request.scale`` (OpenDP's samplers).

Accuracy guarantees (per group, for every data set)
---------------------------------------------------
*False negatives.* The tree is a monotone formula f of its atoms. A group's atom is reported true iff its
*latest* reading x satisfies σx > σc − u (u of that reading). Evaluation reads an atom for a group only when
needed (AND stops at the first side reported false, OR at the first side reported true); which groups and
atoms are read depends on noisy outputs only (post-processing). By induction on the tree, if every true atom
is reported true, a true formula is reported true; so P(FN) ≤ Σ P(some reading of a true atom says false) ≤
Σ over the parameter sets used of their β by a union bound (each parameter set reads a group at most once).
Phase One's sets use β·share (split optimally); Phase Two round r (r = 1, 2, …) uses 2^−r·β·(1 − share), so
the total is < β. The bound actually used is returned as ``fnr_bound``.

*False positives: a tree-level version of ProBE's estimate.* After each phase every reported group is
classified with Kleene's three-valued logic over its latest readings: an atom is F if σx ≤ σc − u (ProBE's
O_n), T ("definitely positive") if σx > σc + u (σx ≥ σc + u for integer statistics) and U ("uncertain")
otherwise or when it was never read. A reported group whose tree value is U may be a false positive and counts
1; one whose value is T counts Σ over its readings of sup_{σg ≤ σc} P(reading is T) = P(η ≥ u) — the same
Laplace tail as the FNR bound (≤ 2β_i) — which *is* a bound, unlike ProBE's Eq. 22: its O_pp = {σx > σc}
contains a negative group with probability up to ½ (with Phase One noise from a public range, FPR 0.2–0.5). The negatives of
the query are at least N̂ = (|not reported| − β̂·|G|)/(1 − β̂), β̂ the FNR bound used so far (Eq. 23 for the
tree). The answer is returned when FP̂ ≤ α·N̂. Otherwise the round re-reads, with fresh noise at a tighter
u' (ProBE's u_opt — the noisy distance to c of the ⌈FP̂ − α·N̂⌉-th farthest uncertain group — halved for
the noise and kept within [u/8, u/2] (``shrink`` = 4), so rounds shrink u geometrically and their ε sum to at
most twice the last round's; a single round never jumps to an arbitrarily small u), **only** the atoms that are U in the reported groups whose tree value is U, and only for those
groups; decided atoms and decided groups are never re-read, and short-circuiting applies to the re-evaluation.

Why not ProBE's rule as printed. Alg. 3 compares a per-atom estimate with (α/n)·N̂_i, where N̂_i counts the
atom's own reported negatives. Under AND short-circuiting a later atom is read only on groups that passed the
earlier ones, so N̂_i ≈ 0 and the target (α/n)·0 is unattainable: the query was denied in 18–100% of runs
with ≥ 3 conditions (``benchmarks/results/bench_probe.md`` before this change). Its u_opt, the noisy gap of
the nearest Phase One value, can also be arbitrarily small (Phase One noise with u = 30% of a *public*
range is large), which made single rounds cost ε ≫ 1. Both fixes keep ProBE's estimate (Eq. 22–23), at the
level of the query's answer, which is what Definition 3.2 bounds. Like ProBE's, the FPR control is an
estimate checked empirically (``benchmarks/bench_probe.py``), not a worst-case theorem.

Privacy. Every reading is a (discrete) Laplace measurement of a statistic with sensitivity Δ, charged ε = Δ/b
(converted to ρ or μ) on exactly the groups it reads, before it is read. Groups are disjoint, so the loss of
a row is the sum of the ε's of its group's readings. Before each phase the worst group's possible total
(what it has spent plus every reading the phase may make on it) is checked against ``max_epsilon`` and
``afford``; a phase that does not fit is not started.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from dpmagic.decision.mechanism import cost_of_epsilon, optimal_beta_split, tslm_epsilon, uniform_beta_split
from dpmagic.decision.planning import (
    ConditionPlan,
    DecisionPlan,
    DecisionResult,
    MeasureRequest,
    _compose,
    _round_u,
    plan,
)
from dpmagic.decision.tree import And, Leaf, Node, Or, children_of
from dpmagic.errors import BudgetError, BudgetExceededError, QueryError

__all__ = ["ConditionPlan", "DecisionPlan", "DecisionResult", "MeasureRequest", "plan", "run"]

Group = Hashable
Charge = Callable[[float, dict[str, Any]], None]
#: charge-then-measure in one call (the session's ``Session.run`` of one mechanism)
Step = Callable[[int, MeasureRequest, dict[str, Any]], Mapping[Group, float]]
#: checks, before a phase spends anything, that the ε of each of its possible reads is affordable
Afford = Callable[[list[float]], bool]

T, U, F = 1, 0, -1  # Kleene's three truth values, ordered F < U < T (AND = min, OR = max)


@dataclass(frozen=True, eq=False)
class _Params:
    """One parameter set of one atom; its readings share (u, β, ε) and read each group at most once."""

    u: float
    beta: float
    epsilon: float
    cost: float
    scale: float
    phase: int


class _Executor:
    def __init__(self, p: DecisionPlan, charge: Charge | None, measure: Any, step: Step | None) -> None:
        self.plan, self.charge, self.measure, self.step = p, charge, measure, step
        self.cur = {c.index: _Params(c.u, c.beta, c.epsilon, c.cost, c.scale, 1) for c in p.conditions}
        self.last: dict[int, dict[Group, tuple[float, _Params]]] = {c.index: {} for c in p.conditions}
        self.stat = {c.index: c.statistic for c in p.conditions}
        self.per_group: dict[Group, float] = {g: 0.0 for g in p.groups}
        self.per_group_cost: dict[Group, list[float]] = {g: [] for g in p.groups}
        self.used: list[_Params] = []  # parameter sets that read at least once (their β enter the FNR bound)

    @property
    def fnr_bound(self) -> float:
        return math.fsum(prm.beta for prm in self.used)

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
        if not any(prm is q for q in self.used):
            self.used.append(prm)
        for g in need:
            self.last[i][g] = (float(out[g]), prm)
            self.per_group[g] += prm.epsilon
            self.per_group_cost[g].append(prm.cost)

    def reported(self, i: int, g: Group) -> bool:
        x, prm = self.last[i][g]
        st = self.stat[i]
        return st.sign * x > st.sign * st.threshold - prm.u

    def state(self, i: int, g: Group) -> int:
        if g not in self.last[i]:
            return U
        x, prm = self.last[i][g]
        st = self.stat[i]
        d = st.sign * x - st.sign * st.threshold
        if d <= -prm.u:
            return F
        return T if (d >= prm.u if st.integer else d > prm.u) else U

    def false_certain(self, i: int, prm: _Params) -> float:
        """Sup over negatives (σg ≤ σc) of P(reading is T): P(η ≥ u) = q^u/(1+q) (discrete), ½e^{−u/b}."""
        if self.stat[i].integer:
            return math.exp(-prm.u / prm.scale) / (1.0 + math.exp(-1.0 / prm.scale))
        return 0.5 * math.exp(-prm.u / prm.scale)

    def evaluate(self, node: Node, alive: list[Group]) -> list[Group]:
        """Groups (in public order) for which ``node`` is reported true, reading only what is needed."""
        if not alive:
            return []
        if isinstance(node, Leaf):
            i = node.index
            need = [g for g in alive if g not in self.last[i]]
            if need:
                self.read(i, self.cur[i], need)
            return [g for g in alive if self.reported(i, g)]
        if isinstance(node, And):
            cur = alive
            for child in node.children:
                cur = self.evaluate(child, cur)
                if not cur:
                    break
            return cur
        if isinstance(node, Or):
            found: set[Group] = set()
            rest = alive
            for child in node.children:
                found.update(self.evaluate(child, rest))
                rest = [g for g in rest if g not in found]
                if not rest:
                    break
            return [g for g in alive if g in found]
        raise TypeError(f"not an indexed tree node: {node!r}")

    def kleene(self, node: Node, g: Group) -> int:
        if isinstance(node, Leaf):
            return self.state(node.index, g)
        vals = [self.kleene(c, g) for c in children_of(node)]
        return min(vals) if isinstance(node, And) else max(vals)

    def uncertain(self, node: Node, g: Group, out: set[int]) -> None:
        """The read atoms that keep ``node`` at U for ``g`` (re-reading them can decide it)."""
        if isinstance(node, Leaf):
            if g in self.last[node.index] and self.state(node.index, g) == U:
                out.add(node.index)
            return
        for c in children_of(node):
            if self.kleene(c, g) == U:
                self.uncertain(c, g, out)

    def estimate(self, answer: list[Group]) -> tuple[float, float, dict[int, list[Group]]]:
        """FP̂, N̂ (module docstring) and, per atom, the uncertain reported groups to re-read."""
        tree = self.plan.minimised.tree
        fp = 0.0
        todo: dict[int, list[Group]] = {}
        for g in answer:
            if self.kleene(tree, g) == T:
                fp += math.fsum(self.false_certain(i, self.last[i][g][1]) for i in self.last if g in self.last[i])
                continue
            fp += 1.0
            atoms: set[int] = set()
            self.uncertain(tree, g, atoms)
            for i in atoms:
                todo.setdefault(i, []).append(g)
        b = min(self.fnr_bound, 0.5)
        n_groups = len(self.plan.groups)
        negatives = (n_groups - len(answer) - b * n_groups) / (1.0 - b)
        return fp, max(negatives, 0.0), todo


def run(
    p: DecisionPlan,
    charge: Charge | None = None,
    measure: Callable[[int, MeasureRequest], Mapping[Group, float]] | None = None,
    *,
    max_epsilon: float,
    max_rounds: int = 10,
    shrink: float = 4.0,
    step: Step | None = None,
    afford: Afford | None = None,
) -> DecisionResult:
    """Execute Phase One, and Phase Two when α is set (module docstring). ``charge`` precedes every read.

    Refuses (BudgetExceededError, nothing charged) if Phase One alone could exceed ``max_epsilon`` (the
    pure-ε loss of any row). A Phase Two round that would exceed it is not run: the result is then ``denied``
    with what the completed phases spent. Cost: O(rounds·n·|groups|) plus the callbacks.

    Instead of ``charge`` and ``measure`` a session passes ``step(i, request, coverage)``, which charges and
    then reads in one call (one :meth:`dpmagic.Session.run` per read), and ``afford(epsilons)``, asked before
    each phase with the ε of every read the phase may make on its worst group: False refuses Phase One
    (BudgetExceededError, nothing charged) or denies a Phase Two round before it spends anything.
    """
    if step is None and (charge is None or measure is None):
        raise QueryError("run() needs charge and measure, or step")
    if not (isinstance(max_epsilon, (int, float)) and max_epsilon > 0):
        raise BudgetError(f"max_epsilon must be positive, got {max_epsilon!r}")
    if not (isinstance(shrink, (int, float)) and shrink > 1.0):
        raise BudgetError(f"shrink must be above 1, got {shrink!r}")
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
    answer = ex.evaluate(tree, list(p.groups))
    phases: list[dict[str, Any]] = [
        {
            "phase": 1,
            "reported": len(answer),
            "conditions": {
                c.index: {"u": c.u, "beta": c.beta, "epsilon": c.epsilon, "measured": len(ex.last[c.index])}
                for c in p.conditions
            },
        }
    ]

    def finish(groups: list[Group] | None, reason: str | None, fpr: float | None) -> DecisionResult:
        return DecisionResult(
            groups=None if groups is None else frozenset(groups),
            denied=groups is None,
            reason=reason,
            epsilon_spent=max(ex.per_group.values()),
            cost_spent=max(_compose(v, p.definition) for v in ex.per_group_cost.values()),
            per_group_epsilon=dict(ex.per_group),
            phases=phases,
            fnr_bound=ex.fnr_bound,
            fpr_target=p.alpha,
            fpr_estimate=fpr,
        )

    if p.alpha is None:
        return finish(answer, None, None)
    for rnd in range(1, max_rounds + 2):
        fp, negatives, todo = ex.estimate(answer)
        phases[-1].update({"fp_estimate": fp, "negatives_estimate": negatives})
        if fp <= p.alpha * negatives:
            return finish(answer, None, fp / negatives if negatives > 0 else 0.0)
        if not todo:  # every reported group is certain: no re-read can lower the estimate, the answer is final
            return finish(answer, None, fp / negatives if negatives > 0 else None)
        if rnd > max_rounds:
            break
        # Phase Two round: tighter u for the uncertain atoms, fresh noise, only uncertain groups.
        idx, us = [], []
        excess = fp - p.alpha * negatives
        for i in sorted(todo):
            st = ex.stat[i]
            u_now = min(ex.last[i][g][1].u for g in todo[i])
            # ProBE's u_opt, made robust: the noisy distance |σx − σc| of the ⌈excess⌉-th farthest uncertain
            # group, halved (noise), kept within [u/shrink^1.5, u/shrink^½] = [u/8, u/2]; at u = 1 (integers) only fresh noise
            dist = sorted((abs(st.sign * (ex.last[i][g][0] - st.threshold)) for g in todo[i]), reverse=True)
            k = min(len(dist), max(1, math.ceil(excess)))
            target = min(max(dist[k - 1] / 2.0, u_now / shrink**1.5), u_now / math.sqrt(shrink))
            idx.append(i)
            us.append(_round_u(target, st))
        b_round = p.beta * (1.0 - p.phase_one_share) * 0.5**rnd
        weights = [p.by_index(i).weight for i in idx]
        if p.split == "optimal":
            betas = optimal_beta_split([ex.stat[i].sensitivity / u for i, u in zip(idx, us)], weights, b_round)
        else:
            betas = uniform_beta_split(weights, b_round)
        new = dict(ex.cur)
        for i, u, b in zip(idx, us, betas):
            eps = tslm_epsilon(ex.stat[i].sensitivity, b, u)
            new[i] = _Params(u, b, eps, cost_of_epsilon(eps, p.definition), ex.stat[i].sensitivity / eps, 1 + rnd)
        # worst group: what it spent + this round's re-reads on it + any atom it was never read on
        worst, worst_reads = -1.0, []
        for g in p.groups:
            reads = [new[i].epsilon for i in idx if g in todo[i]]
            reads += [new[j].epsilon for j in new if g not in ex.last[j]]
            total = ex.per_group[g] + math.fsum(reads)
            if total > worst:
                worst, worst_reads = total, reads
        phases.append(
            {
                "phase": 1 + rnd,
                "flagged": {
                    i: {"u": new[i].u, "beta": new[i].beta, "epsilon": new[i].epsilon, "groups": len(todo[i])}
                    for i in idx
                },
                "projected_epsilon": worst,
            }
        )
        if worst > max_epsilon:
            return finish(
                None, f"Phase Two would need ε={worst:.4g} per row, above max_epsilon={max_epsilon:.4g}", None
            )
        if afford is not None and not afford(worst_reads):
            return finish(None, f"Phase Two would need ε={worst:.4g} per row, beyond the budget left", None)
        ex.cur = new
        for i in idx:
            ex.read(i, new[i], todo[i])
        answer = ex.evaluate(tree, list(p.groups))
        phases[-1]["reported"] = len(answer)
    return finish(None, f"the false-positive estimate still exceeds α after {max_rounds} rounds", None)
