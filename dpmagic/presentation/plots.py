"""Plots of a session's accounting (matplotlib): the query graph, the budget over time, the budget map.

Each function returns a :class:`matplotlib.figure.Figure` and reads only the accountant's public views (ledger entries, bounds, query graph),
never the data.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np
from matplotlib.figure import Figure

from dpmagic.errors import ConfigurationError
from dpmagic.session.rendering import fmt, plural, query_numbers
from dpmagic.session.session import Session

__all__ = ["plot_graph", "plot_budget", "plot_map"]


def _layout(g: nx.Graph) -> dict[int, np.ndarray]:
    """Lay out each connected component on its own and pack them in a grid, largest first.

    One spring layout of the whole graph pushes isolated queries to the edge and squeezes every connected
    query into a small ball; laying out components separately keeps each one readable.  O(n²) per component.
    """
    comps = sorted(nx.connected_components(g), key=lambda c: (-len(c), min(c)))
    big = [c for c in comps if len(c) > 1]
    singles = sorted(v for c in comps if len(c) == 1 for v in c)
    pos: dict[int, np.ndarray] = {}
    x0 = 0.0
    for comp in big:  # connected components side by side, each in a box proportional to √size
        size = math.sqrt(len(comp))
        sub = g.subgraph(comp)
        p = nx.spring_layout(sub, seed=1, k=1.5 / math.sqrt(len(comp)))
        arr = np.array(list(p.values()))
        lo, hi = arr.min(axis=0), arr.max(axis=0)
        span = np.where(hi - lo > 0, hi - lo, 1.0)
        for v, xy in p.items():
            pos[v] = np.array([x0, 0.0]) + (xy - lo) / span * size
        x0 += size + 0.6
    width = max(x0 - 0.6, 1.0)
    if singles:  # isolated queries in a row (or rows) below
        per_row = max(1, int(math.ceil(width / 0.5)))
        for j, v in enumerate(singles):
            r, c = divmod(j, per_row)
            pos[v] = np.array([c * 0.5 if len(singles) > 1 else width / 2, -0.8 - 0.5 * r])
    return pos


def plot_graph(session: Session, *, max_nodes: int = 400) -> Figure:
    """The query graph (an edge when two queries can touch the same row), vertices coloured by the colouring
    bound, the maximum-overlap set drawn with thick red borders (Smith et al. 2022 §5, Fig. 8).

    Vertices are numbered 1..n like everywhere else; each connected component is laid out on its own, isolated
    queries in a row below; a legend explains colours, sizes and borders in plain words.
    """
    from matplotlib.lines import Line2D

    n = len(session.accountant)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.set_axis_off()
    if n == 0:
        ax.set_title("no queries yet")
        return _done(fig)
    if n > max_nodes:
        raise ConfigurationError(f"the query graph has {n} queries; plotting is limited to {max_nodes}")
    graph = session.accountant.graph()
    g = nx.from_scipy_sparse_array(graph.adjacency)
    g.remove_edges_from(nx.selfloop_edges(g))
    colors = graph.colors
    members = set(graph.members)
    pos = _layout(g)
    cmap = plt.get_cmap("tab20")
    node_colors = [cmap(int(c) % 20) if c >= 0 else (0.85, 0.85, 0.85, 1.0) for c in colors]
    wmax = max(float(graph.weights.max()), 1e-12)
    nx.draw_networkx_edges(g, pos, ax=ax, alpha=0.3)
    nx.draw_networkx_nodes(
        g,
        pos,
        ax=ax,
        node_color=node_colors,
        edgecolors=["#c62828" if i in members else "#333333" for i in range(n)],
        linewidths=[3.0 if i in members else 0.5 for i in range(n)],
        node_size=[120 + 600 * float(wt) / wmax for wt in graph.weights],
    )
    if n <= 60:
        numbers = query_numbers(session)
        acc = session.accountant
        labels = {i: str(numbers.get(acc.entry_id(i), i + 1)) for i in range(n)}
        nx.draw_networkx_labels(g, pos, labels=labels, ax=ax, font_size=8)
    b = session.bounds()
    cur = session.currency
    n_colours = int(colors.max()) + 1 if colors.max() >= 0 else 0
    total = session.budget.total
    ax.set_title(
        f"query graph: {plural(n, 'query', 'queries')} in {plural(n_colours, 'group')} of disjoint queries\n"
        f"all added up {fmt(b.sequential, total, '.3g')}, by groups {fmt(b.chromatic, total, '.3g')}, "
        f"one person's worst case {fmt(b.overlap_upper if b.person is None else b.charged, total, '.3g')} "
        f"{cur.symbol}",
        fontsize=9,
    )
    wmin = float(graph.weights.min())
    handles = [
        Line2D([], [], color="#999999", alpha=0.6, label="line: the two queries can touch the same person"),
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            markerfacecolor=cmap(0),
            markeredgecolor="#333",
            markersize=8,
            label=f"colour: group of disjoint queries ({n_colours} groups; 'colouring')",
        ),
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            markerfacecolor="white",
            markeredgecolor="#c62828",
            markeredgewidth=2.5,
            markersize=9,
            label="red border: the queries covering the worst-case row",
        ),
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            markerfacecolor="#ccc",
            markeredgecolor="#333",
            markersize=4,
            label=f"size: cost (smallest {cur.cost(wmin):.3g} {cur.symbol})",
        ),
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            markerfacecolor="#ccc",
            markeredgecolor="#333",
            markersize=11,
            label=f"size: cost (largest {cur.cost(wmax):.3g} {cur.symbol})",
        ),
    ]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.01), fontsize=7.5, ncol=2, frameon=False)
    ax.margins(0.08)
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
    """Heat map of the current load per (first, second) cell (maximised over the other columns).

    Each cell is labelled with its load (when the grid has at most 400 cells); the colour bar is as tall as the
    axes, with a short label.
    """
    from mpl_toolkits.axes_grid1 import make_axes_locatable

    frame = session.budget_map(first, second)
    total = session.budget.total
    fig, ax = plt.subplots(figsize=(max(5.5, 0.6 * frame.shape[1] + 3), max(3.2, 0.4 * frame.shape[0] + 2)))
    values = frame.to_numpy(dtype=float)
    im = ax.imshow(values, cmap="viridis", vmin=0.0, vmax=total, aspect="auto")
    ax.set_xticks(range(frame.shape[1]), [str(c) for c in frame.columns], rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(frame.shape[0]), [str(r) for r in frame.index], fontsize=8)
    ax.set_xlabel(second)
    ax.set_ylabel(first)
    if values.size <= 400:
        for (r, c), v in np.ndenumerate(values):
            dark = v < 0.6 * total
            ax.text(
                c, r, fmt(v, total, ".2g"), ha="center", va="center", fontsize=7, color="white" if dark else "black"
            )
    cax = make_axes_locatable(ax).append_axes("right", size="4%", pad=0.1)
    bar = fig.colorbar(im, cax=cax)
    bar.set_label(f"charged {session.currency.symbol}", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    ax.set_title(f"where the budget has gone (max over the other columns; budget {fmt(total, total)})", fontsize=9)
    fig.tight_layout()
    return _done(fig)


def _done(fig: Figure) -> Figure:
    """Detach the figure from pyplot so a notebook shows it once (as the returned value), not twice."""
    plt.close(fig)
    return fig
