"""Plots of a session's accounting (matplotlib): the query graph, the budget over time, the budget map.

Each function returns a :class:`matplotlib.figure.Figure` and reads only the ledger and the overlap engine,
never the data.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
from matplotlib.figure import Figure

from dpmagic.errors import ConfigurationError
from dpmagic.overlap import overlap_adjacency
from dpmagic.session import Session

__all__ = ["plot_graph", "plot_budget", "plot_map"]


def plot_graph(session: Session, *, max_nodes: int = 400) -> Figure:
    """The query graph (an edge when two queries can touch the same row), vertices coloured by the colouring
    bound, the maximum-overlap set drawn with thick red borders (seed 000 §5, Fig. 8)."""
    engine = session.accountant.engine
    n = len(engine)
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.set_axis_off()
    if n == 0:
        ax.set_title("no queries yet")
        return _done(fig)
    if n > max_nodes:
        raise ConfigurationError(f"the query graph has {n} queries; plotting is limited to {max_nodes}")
    adj = overlap_adjacency(engine.store)
    g = nx.from_scipy_sparse_array(adj)
    g.remove_edges_from(nx.selfloop_edges(g))
    colors = engine.coloring()
    members = set(engine.overlap_members())
    ids = [session.accountant.entry_id(i) for i in range(n)]
    pos = nx.spring_layout(g, seed=1, k=1.5 / math.sqrt(n))
    cmap = plt.get_cmap("tab20")
    node_colors = [cmap(int(c) % 20) if c >= 0 else (0.85, 0.85, 0.85, 1.0) for c in colors]
    nx.draw_networkx_edges(g, pos, ax=ax, alpha=0.3)
    nx.draw_networkx_nodes(
        g,
        pos,
        ax=ax,
        node_color=node_colors,
        edgecolors=["#c62828" if i in members else "#333333" for i in range(n)],
        linewidths=[3.0 if i in members else 0.5 for i in range(n)],
        node_size=[120 + 600 * float(wt) / max(engine.weights.max(), 1e-12) for wt in engine.weights],
    )
    if n <= 60:
        nx.draw_networkx_labels(g, pos, labels={i: str(ids[i]) for i in range(n)}, ax=ax, font_size=8)
    b = session.bounds_summary()
    cur = session.currency
    ax.set_title(
        f"query graph: {n} queries, {int(colors.max()) + 1 if colors.max() >= 0 else 0} colours; "
        f"χ={b['chromatic']:.3g}, ω={b['clique']:.3g}, γ={b['overlap_upper']:.3g} {cur.symbol}\n"
        "red border: the queries covering the worst-case row",
        fontsize=9,
    )
    fig.tight_layout()
    return _done(fig)


def plot_budget(session: Session) -> Figure:
    """Charged loss after each query: sequential composition versus the session's overlap charge."""
    entries = session.accountant.entries()
    cur = session.currency
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = np.arange(1, len(entries) + 1)
    seq = np.cumsum([e.weight for e in entries]) if entries else np.zeros(0)
    charged = [e.charged_after for e in entries]
    ax.step(xs, [cur.cost(v) for v in seq], where="post", label="sequential composition")
    ax.step(xs, [cur.cost(v) for v in charged], where="post", label=f"dpmagic ({session.bound} bound)")
    ax.axhline(session.budget.total, color="#c62828", linestyle="--", label="budget")
    ax.set_xlabel("query")
    ax.set_ylabel(f"charged {cur.parameter}")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("budget charged over the session", fontsize=10)
    fig.tight_layout()
    return _done(fig)


def plot_map(session: Session, first: str, second: str) -> Figure:
    """Heat map of the current load per (first, second) cell (maximised over the other columns)."""
    frame = session.budget_map(first, second)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.5 * frame.shape[1] + 3), max(3.0, 0.35 * frame.shape[0] + 2)))
    im = ax.imshow(frame.to_numpy(), cmap="viridis", vmin=0.0, vmax=session.budget.total, aspect="auto")
    ax.set_xticks(range(frame.shape[1]), [str(c) for c in frame.columns], rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(frame.shape[0]), [str(r) for r in frame.index], fontsize=8)
    ax.set_xlabel(second)
    ax.set_ylabel(first)
    fig.colorbar(im, ax=ax, label=f"charged {session.currency.parameter} (max over other columns)")
    ax.set_title("where the budget has gone", fontsize=10)
    fig.tight_layout()
    return _done(fig)


def _done(fig: Figure) -> Figure:
    """Detach the figure from pyplot so a notebook shows it once (as the returned value), not twice."""
    plt.close(fig)
    return fig
