"""Decision (HAVING) queries with false-negative / false-positive targets (ProBE; Lahjouji et al. (ProBE)).

Not imported by :mod:`dpmagic`; import it explicitly::

    from dpmagic.decision import And, Or, count, avg, plan, run

See ``docs/decision-queries.md`` for the mathematics and the API.
"""

from __future__ import annotations

from dpmagic.decision.mechanism import (
    Statistic,
    cost_of_epsilon,
    false_negative_bound,
    gdp_mu_of_pure_epsilon,
    optimal_beta_split,
    statistic_for,
    tslm_epsilon,
    uniform_beta_split,
)
from dpmagic.decision.probe import ConditionPlan, DecisionPlan, DecisionResult, MeasureRequest, plan, run
from dpmagic.decision.tree import And, Condition, Leaf, MinimisedTree, Or, avg, count, evaluate, minimise, sum_

__all__ = [
    "And",
    "Condition",
    "ConditionPlan",
    "DecisionPlan",
    "DecisionResult",
    "Leaf",
    "MeasureRequest",
    "MinimisedTree",
    "Or",
    "Statistic",
    "avg",
    "cost_of_epsilon",
    "count",
    "evaluate",
    "false_negative_bound",
    "gdp_mu_of_pure_epsilon",
    "minimise",
    "optimal_beta_split",
    "plan",
    "run",
    "statistic_for",
    "sum_",
    "tslm_epsilon",
    "uniform_beta_split",
]
