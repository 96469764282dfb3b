"""Exact batch sensitivity of a set of counting queries over boxes, under both neighbouring relations.

A batch Q = (q_1, …, q_k) of COUNT queries, q_j counting the rows inside box B_j, has
popSet(r) = {j : r ∈ B_j} for a row r (Inan, Gursoy, Saygin, "Sensitivity analysis for non-interactive
differential privacy: bounds and efficient algorithms", IEEE TDSC, doi:10.1109/TDSC.2017.2734664, Def. 6).

* add/remove one row: the answer vector changes by the indicator of popSet(r), so Δ₁ = max_r |popSet(r)| = ω,
  the maximum overlap (computed exactly by :func:`dpmagic.overlap.max_overlap`), and Δ₂ = √ω.
* replace one row r by r': the change is +1 on popSet(r') \\ popSet(r) and −1 on popSet(r) \\ popSet(r'), so
  Δ₁ = max_{r,r'} |popSet(r) △ popSet(r')| (Inan et al. 2017 Th. 2 with unit weights) and Δ₂ = √Δ₁.

The replace-one value is computed exactly on the compressed domain: per column, the values are grouped into
atoms with the same membership in every box — the overlap engine's exact encoding
(:func:`dpmagic.overlap.encoding.build_problem`: the declared categories; the elementary pieces between
consecutive interval ends, as exact integers on int columns at any magnitude and with exact open/closed ends
on float columns up to the double limits) — every combination of atoms gives one popSet, and the maximum
symmetric difference over all pairs of distinct popSets is taken.  Cost
O(Π_c atoms_c · k/64 + K² · k/64) for K distinct popSets; refused beyond ``max_cells`` atom combinations.

Inan et al. 2017's graph bounds are reported next to it, computed on the query graph (edge = the boxes intersect):
B1 = min(k, 2·MCS(G)) (Alg. 3, maximum clique) and B2 = max over pairs of maximal cliques, *including a clique
paired with itself*, of |C_1 ∪ C_2| (Alg. 4; skipping i = j as Alg. 5 does can return 0 for a single clique).
Both are upper bounds of the exact replace-one value because every popSet is a clique of G; the clique is
found exactly (never a heuristic clique, which would not be an upper bound).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpmagic.domain.schema import Schema
from dpmagic.domain.sets import Box
from dpmagic.errors import ConfigurationError

__all__ = ["BatchSensitivity", "batch_sensitivity", "popsets", "sensitivity_report", "format_sensitivity"]


def _column_signatures(schema: Schema, boxes: Sequence[Box], live: Sequence[int]) -> list[list[int]]:
    """Per constrained column, the distinct memberships (bit masks, bit j ↔ box j) of its atoms.

    The atoms are the overlap engine's exact compressed domain (:func:`dpmagic.overlap.encoding.build_problem`
    over the live boxes): per numeric column the elementary pieces between consecutive cut keys from the
    declared lower bound to the declared upper bound — exact Python/int64 integers on int columns, ``v ± 0``
    keys on float columns, so open and closed ends are exact and nothing is rounded, averaged or overflowed —
    and per categorical column the declared values.  The pieces partition the declared domain, so every
    value lies in exactly one atom: the enumeration is complete by construction.  Float columns are taken as
    the reals, like every overlap test of :mod:`dpmagic.domain.sets` (a gap between two adjacent doubles is an atom):
    an upper bound of the value over doubles alone, and exact for sources with finer values (DECIMAL).
    Columns that no live box constrains are left out (every box contains all of their values).
    """
    from dpmagic.overlap.encoding import BoxStore, build_problem

    k = len(boxes)
    store = BoxStore(schema)
    store.extend(list(boxes), np.ones(k))
    ids = np.asarray(live, dtype=np.int64)
    out: list[list[int]] = []
    for col in build_problem(store, ids, dedupe=True).columns:
        member = np.zeros((col.a, k), dtype=bool)  # member[atom, j]: box j's set on this column holds the atom
        member[:, ids] = col.dense().T
        packed = np.packbits(member, axis=1, bitorder="little")
        out.append(sorted({int.from_bytes(row.tobytes(), "little") for row in packed}))
    return out


def popsets(schema: Schema, boxes: Sequence[Box], max_cells: int = 2_000_000) -> set[int]:
    """All distinct popSets (as bit masks, bit j ↔ box j) of rows of the declared domain.

    Exact: one popSet per combination of per-column atoms (:func:`_column_signatures`), empty boxes in none.
    Raises :class:`ConfigurationError` beyond ``max_cells`` combinations of distinct column memberships.
    """
    live = [j for j, b in enumerate(boxes) if not b.is_empty()]
    nonempty = sum(1 << j for j in live)
    if not live:
        return {0}
    per_col = _column_signatures(schema, boxes, live)
    total = 1
    for sigs in per_col:
        total *= len(sigs)
        if total > max_cells:
            raise ConfigurationError(
                f"batch sensitivity: {total:,}+ atom combinations exceed the limit {max_cells:,}",
                hint="use the add/remove value (maximum overlap) or Inan et al. 2017's bounds for large batches",
            )
    out: set[int] = set()
    for combo in itertools.product(*per_col):
        m = nonempty
        for c in combo:
            m &= c
        out.add(m)
    return out


def _bits(masks: list[int], k: int) -> np.ndarray:
    arr = np.zeros((len(masks), k), dtype=bool)
    for i, m in enumerate(masks):
        for j in range(k):
            arr[i, j] = (m >> j) & 1
    return arr


@dataclass(frozen=True)
class BatchSensitivity:
    """Sensitivities of a batch of unit-weight counting queries (L1 and L2, both neighbouring relations)."""

    add_remove_l1: float
    add_remove_l2: float
    replace_l1: float
    replace_l2: float
    inan_clique_bound: float
    inan_clique_pair_bound: float
    num_popsets: int


def _inan_bounds(schema: Schema, boxes: Sequence[Box]) -> tuple[float, float]:
    import networkx as nx

    k = len(boxes)
    g = nx.Graph()
    live = [j for j, b in enumerate(boxes) if not b.is_empty()]
    g.add_nodes_from(live)
    for i, j in itertools.combinations(live, 2):
        if boxes[i].overlaps(boxes[j]):
            g.add_edge(i, j)
    cliques = [frozenset(c) for c in nx.find_cliques(g)] if live else []
    mcs = max((len(c) for c in cliques), default=0)
    b1 = float(min(k, 2 * mcs))
    b2 = float(max((len(a | b) for a in cliques for b in cliques), default=0))
    return b1, b2


def batch_sensitivity(
    schema: Schema, boxes: Sequence[Box], *, time_limit: float = 10.0, max_cells: int = 2_000_000
) -> BatchSensitivity:
    """Exact L1/L2 sensitivities of the counting queries over ``boxes`` (add/remove and replace-one).

    Both come from the complete atom enumeration (:func:`popsets`); the overlap engine's proven interval for
    ω is a cross-check.  Raises :class:`ConfigurationError` beyond ``max_cells`` atom combinations.
    """
    from dpmagic.overlap import max_overlap

    boxes = list(boxes)
    k = len(boxes)
    if k == 0:
        return BatchSensitivity(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1)
    masks = sorted(popsets(schema, boxes, max_cells))
    arr = _bits(masks, k).astype(np.int64)
    # |a △ b| = |a| + |b| − 2|a ∩ b|
    sizes = arr.sum(axis=1)
    inter = arr @ arr.T
    sym = sizes[:, None] + sizes[None, :] - 2 * inter
    replace = float(sym.max())
    omega = float(sizes.max())  # exact: the atom enumeration is complete (the largest popSet is ω)
    # cross-check against the overlap engine's proven interval [lower, upper] ∋ ω (its own search; a timeout
    # or a witness that cannot be a double — an atom between two adjacent doubles — only widens the interval)
    res = max_overlap(boxes, None, schema, time_limit=time_limit)
    if not res.lower <= omega <= res.upper:
        raise ConfigurationError("batch sensitivity: overlap engine and atom enumeration disagree")  # pragma: no cover
    b1, b2 = _inan_bounds(schema, boxes)
    return BatchSensitivity(omega, math.sqrt(omega), replace, math.sqrt(replace), b1, b2, len(masks))


def _count_box(sql: str, schema: Schema, where: str) -> Box:
    """The box of ``SELECT COUNT(*) … WHERE <box>``; anything else is refused (its sensitivity differs)."""
    from dpmagic.query.sql import parse_query

    try:
        q = parse_query(sql, schema)
    except ConfigurationError as exc:  # pragma: no cover - parse errors are QueryError
        raise type(exc)(f"{where}: {exc}") from None
    agg = q.aggregates
    if q.group_by or len(agg) != 1 or agg[0].func != "count" or agg[0].column is not None or q.filter is not None:
        raise ConfigurationError(
            f"{where}: --sensitivity needs SELECT COUNT(*) … WHERE <box> statements (no GROUP BY, SUM or OR "
            "across columns)",
            hint="write one COUNT(*) per box; a GROUP BY is one COUNT(*) per cell",
        )
    return q.coverage


def sensitivity_report(schema: Schema, statements: Sequence[str], *, time_limit: float = 60.0) -> dict:
    """L1/L2 sensitivity of the statements taken as one batch of unit-weight COUNT(*) queries.

    add/remove one row: Inan et al.'s B4 (the maximum overlap ω; ``exact`` False if the search timed out and
    ω is the engine's proven upper bound) — Δ₁ = ω, Δ₂ = √ω.  replace one row:
    the exact pair bound max |popSet(r) △ popSet(r')| (:func:`batch_sensitivity`) next to Inan et al.'s B1, B2
    and 2ω; the value ``used`` is the smallest proven upper bound (the exact value when the atom enumeration
    fits, else min(B1, B2, 2ω)).  Raises :class:`ConfigurationError` naming the first statement that is not a
    COUNT(*) over a box.
    """
    from dpmagic.overlap import max_overlap

    boxes = [_count_box(s, schema, f"statement {i}") for i, s in enumerate(statements, 1)]
    if not boxes:
        z = {"l1": 0.0, "l2": 0.0}
        return {
            "queries": 0,
            "add_remove": {"used": "B4", "B4": z, "exact": True},
            "replace": {"used": "exact", "exact": z},
        }
    b1, b2 = _inan_bounds(schema, boxes)
    try:
        bs = batch_sensitivity(schema, boxes, time_limit=time_limit)
        omega, exact, omega_exact = bs.add_remove_l1, bs.replace_l1, True
    except ConfigurationError:  # atom enumeration too large: proven upper bounds only
        res = max_overlap(boxes, None, schema, time_limit=time_limit)
        omega, exact, omega_exact = float(res.upper), None, bool(res.exact)

    def pair(v: float) -> dict:
        return {"l1": v, "l2": math.sqrt(v)}

    replace = {"B1": pair(b1), "B2": pair(b2), "2·B4": pair(min(2 * omega, len(boxes)))}
    if exact is not None:
        replace["exact"] = pair(exact)
    used = min(replace, key=lambda k: (replace[k]["l1"], k != "exact"))
    return {
        "queries": len(boxes),
        "add_remove": {"used": "B4", "B4": pair(omega), "exact": omega_exact},
        "replace": {"used": used, **replace},
    }


def format_sensitivity(report: dict) -> str:
    """The lines printed by ``dpmagic overlap --sensitivity`` (without ``--json``)."""
    lines = [f"batch sensitivity of {report['queries']} COUNT(*) queries (unit weight)"]
    for rel, label in (("add_remove", "add/remove"), ("replace", "replace-one")):
        r = report[rel]
        for k, v in r.items():
            if k in ("used", "exact") and not isinstance(v, dict):
                continue
            mark = "  ← used (tightest proven)" if k == r["used"] else ""
            lines.append(f"  {label:<11} {k:<6} L1 = {v['l1']:.6g}  L2 = {v['l2']:.6g}{mark}")
    return "\n".join(lines)
