"""One measurement of a ProBE decision query as a mechanism (Lahjouji et al., arXiv:2406.15655).

A decision query (:mod:`dpmagic.decision`) measures, phase by phase, one condition's statistic
(COUNT(*), SUM(col) or SUM(col − c) for AVG(col) > c) on a public set of groups with the threshold-shift
Laplace mechanism (Ghayyur et al., MIDE, PVLDB 15(11), 2022).  Each such read is one
:class:`DecisionPhaseMechanism`, charged by :meth:`dpmagic.Session.run` before it reads anything:

* **coverage** — the query's WHERE box: the groups are disjoint cells inside it, so one read is one node, and
  reads of decision queries on disjoint WHERE boxes compose in parallel;
* **cost** — the read's pure ε (Δ/b of its discrete Laplace) in the session's currency: ε; ρ = ε²/2 (Bun &
  Steinke, TCC 2016, Prop. 1.4); μ = 2Φ⁻¹(e^ε/(1+e^ε)), the smallest μ with ε-DP ⇒ μ-GDP (Dong, Roth & Su,
  JRSS-B 2022; :func:`dpmagic.decision.mechanism.gdp_mu_of_pure_epsilon`).  Under replace-one neighbours a
  row moved between two groups changes two statistics by Δ each (and within a group a SUM by ≤ 2Δ), so the
  read is charged for 2ε;
* **describe()** — the phase, the condition, its statistic, u, β, ε, the noise and the number of groups read
  (all public: from the thresholds, the declared bounds and the public maximum group size);
* **release(backend)** — the exact per-cell COUNT and integer SUM of the query's WHERE and GROUP BY from the
  backend, the statistic of the requested groups, OpenDP's discrete Laplace of the planned scale, and the
  noisy value with its decision ``σ·ṽ > σ·c − u`` per group.

Cost of ``release``: one backend pass (O(rows)) plus O(groups) noise draws.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpmagic.decision.mechanism import cost_of_epsilon
from dpmagic.query.model import Aggregate
from dpmagic.releases.base import Backend, QueryBoxMechanism

if TYPE_CHECKING:
    from dpmagic.decision.mechanism import Definition
    from dpmagic.decision.probe import MeasureRequest
    from dpmagic.query.model import Query

__all__ = ["DecisionPhaseMechanism"]


class DecisionPhaseMechanism(QueryBoxMechanism):
    """One threshold-shift Laplace read of one condition on a public set of groups of ``query``."""

    kind = "decision"

    def __init__(
        self,
        query: Query,
        request: MeasureRequest,
        condition: str,
        *,
        definition: Definition,
        replace_one: bool,
        rows: int = 1,
    ) -> None:
        if request.kind != "discrete_laplace":
            raise ValueError("decision reads support integer statistics only")  # refused earlier by decision.sql
        self.query = query
        self.request = request
        self.condition = condition
        self.replace_one = replace_one
        # the ε OpenDP certifies for this scale (never below the plan's: the planner divides, which can round down)
        from dpmagic.noise.samplers import vector_measurement

        certified = float(vector_measurement(request.kind, request.scale).map(int(math.ceil(request.sensitivity))))
        self.epsilon = max(request.epsilon, certified)
        # person level (``rows`` = T > 1, docs/people.md §2): one person moves the read groups' statistics by at
        # most T·Δ in L1 (≤ c·Δ per group), the distance OpenDP's vector map is taken at
        per_unit = self.epsilon
        if rows > 1:
            person = vector_measurement(request.kind, request.scale).map(int(math.ceil(rows * request.sensitivity)))
            per_unit = max(rows * self.epsilon, float(person))
        self.rows = rows
        self.loss_epsilon = (2.0 if replace_one else 1.0) * per_unit
        self._cost = cost_of_epsilon(self.loss_epsilon, definition)

    def describe(self) -> dict[str, Any]:
        r = self.request
        return {
            "phase": r.phase,
            "condition": self.condition,
            "statistic": r.statistic.text,
            "u": r.u,
            "beta": r.beta,
            "epsilon": r.epsilon,
            "loss_epsilon": self.loss_epsilon,
            "noise": {"kind": r.kind, "scale": r.scale, "sensitivity": r.sensitivity},
            "groups_read": len(r.groups),
        }

    def measurement_query(self) -> Query:
        """The exact aggregates read: COUNT(*) (and SUM(col)) per declared cell of the same WHERE/GROUP BY."""
        col = self.request.statistic.column
        aggs = [Aggregate("count", None, "count")]
        if col is not None:
            aggs.append(Aggregate("sum", col, "sum"))
        return dataclasses.replace(
            self.query, aggregates=tuple(aggs), outputs=None, having=None, order_by=(), limit=None, hidden=()
        )

    def release(self, backend: Backend) -> pd.DataFrame:
        from dpmagic.noise.samplers import vector_measurement

        r, st = self.request, self.request.statistic
        q = self.measurement_query()
        # int columns sum in units of 1; float columns in the statistic's power-of-two quantum (exact integers)
        units = {st.column: (st.unit or 1.0)} if st.column is not None else None
        cells = backend.evaluate(q, units, extended=None)
        single = len(q.groups) == 1
        index = {(k[0] if single else k): j for j, k in enumerate(cells.keys)}
        exact: list[int] = []
        for g in r.groups:
            j = index[g]
            n = int(cells.counts[j])
            if st.column is None:
                exact.append(n)
            else:  # SUM(clamp or quantise(col)) − shift·COUNT: exact integers (shift is whole here)
                exact.append(int(cells.sums[st.column][j]) - int(st.shift) * n)
        noisy = [float(v) for v in vector_measurement(r.kind, r.scale)(exact)] if exact else []
        cut = st.sign * st.threshold - r.u
        df = pd.DataFrame({"group": list(r.groups), "noisy": noisy})
        df["reported"] = [st.sign * v > cut for v in noisy]
        return df
