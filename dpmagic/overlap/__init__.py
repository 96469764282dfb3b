"""Maximum-overlap engine: which queries can touch the same row, and how much they cost together.

docs/design.md §2; Smith et al. 2022 §3–7.  Public API:

* :class:`OverlapEngine` — incremental accountant-side engine (``admit`` / ``commit``, ``add``, ``preview``, ``max_load_over``,
  ``bounds`` …), see :mod:`dpmagic.overlap.engine` for the algorithms and measured timings;
* :func:`max_overlap` — exact weighted maximum overlap γ_w with a witness row;
* :func:`max_weight_clique`, :func:`weighted_coloring_bound`, :func:`overlap_adjacency` — the graph bounds.
"""

from dpmagic.overlap.clique import max_weight_clique
from dpmagic.overlap.encoding import BoxStore, build_problem, is_helly_box
from dpmagic.overlap.engine import Admission, Bounds, OverlapEngine
from dpmagic.overlap.graph import dsatur_coloring, overlap_adjacency, weighted_coloring_bound
from dpmagic.overlap.maxoverlap import max_overlap, milp_overlap, solve_overlap
from dpmagic.overlap.portfolio import Instance, PortfolioConfig, Step, plan
from dpmagic.overlap.result import CliqueResult, OverlapResult

__all__ = [
    "OverlapEngine",
    "Admission",
    "Bounds",
    "OverlapResult",
    "PortfolioConfig",
    "Instance",
    "Step",
    "plan",
    "CliqueResult",
    "BoxStore",
    "build_problem",
    "is_helly_box",
    "max_overlap",
    "solve_overlap",
    "milp_overlap",
    "max_weight_clique",
    "weighted_coloring_bound",
    "dsatur_coloring",
    "overlap_adjacency",
]
