"""Statistical privacy with secret partitions (Breutigam & Reischuk) compared honestly with differential privacy.

Usage::

    python benchmarks/bench_statistical_privacy.py        # ~1 minute

Sections:

* ``tables``  — the paper's Tables I and II (n = 2^15 and 2^10, p = ½) recomputed: σ, δ, the paper's "#DP", and
  beside it the number of counting queries exact DP accounting allows at the same (ε, δ) and the same per-query
  accuracy: Gaussian noise under μ-GDP (exact conversion), under ρ-zCDP (Canonne-Kamath-Steinke conversion and
  the classic ε = ρ + 2 sqrt(ρ ln 1/δ)), sequential composition on the full data; and the Gaussian mechanism on a
  public partition, where disjoint parts compose in parallel (one release);
* ``small-m`` — m = 1, 2, 3, 4 parts, where SP's claim can hold;
* ``dp-delta`` — a DP-sized δ = 1e-6: the largest number of equal parts SP can use, and the DP counts;
* ``skewed``  — p = 0.05 instead of ½.

Results go to ``benchmarks/results/statistical_privacy.json`` / ``.md`` and a figure ``statistical_privacy.png``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import RESULTS, machine_info  # noqa: E402

from dpmagic.statistical import (  # noqa: E402
    equal_partition_delta,
    gdp_parallel_partition_queries,
    gdp_sequential_queries,
    paper_dp_queries,
    property_delta,
    sp_sigma,
    zcdp_sequential_queries,
)

PAPER_DP = {  # the paper's printed "#DP" (Tables I, II)
    (2**15, 0.005): [0, 1, 3, 6, 12],
    (2**15, 0.01): [3, 6, 12, 25, 50],
    (2**15, 0.02): [9, 20, 44, 93, 194],
    (2**10, 0.05): [2, 4, 9],
    (2**10, 0.1): [7, 16, 35],
    (2**10, 0.2): [23, 55, 126],
}


def row(n: int, m: int, p: float, eps: float, delta: float | None = None) -> dict[str, Any]:
    """SP with m equal secret parts at ε; DP counts at the same (ε, δ) and the same σ."""
    s = n // m
    d = equal_partition_delta(n, m, p, eps) if delta is None else delta
    sigma = sp_sigma(n, s, p)
    out: dict[str, Any] = {"n": n, "m_sp": m, "part_size": s, "p": p, "eps": eps, "delta": d, "sigma": sigma}
    if sigma == 0.0:  # m = 1: SP releases the exact full-data count; no DP mechanism has zero error
        out.update(dp_paper=0, dp_gdp_seq=0, dp_zcdp_cks_seq=0, dp_zcdp_bs_seq=0, dp_gdp_parallel=0)
        return out
    out["dp_paper"] = paper_dp_queries(n, sigma, eps, d)
    out["dp_gdp_seq"] = gdp_sequential_queries(n, sigma, eps, d)
    out["dp_zcdp_cks_seq"] = zcdp_sequential_queries(n, sigma, eps, d, conversion="cks")
    out["dp_zcdp_bs_seq"] = zcdp_sequential_queries(n, sigma, eps, d, conversion="bs")
    out["dp_gdp_parallel"] = gdp_parallel_partition_queries(n, sigma, p, eps, d)
    return out


def sp_max_parts(n: int, p: float, eps: float, delta: float) -> int:
    """Largest m (equal parts) with SP δ(ε) ≤ delta; 0 if even one part (the exact count) exceeds it."""
    ok = lambda m: equal_partition_delta(n, m, p, eps) <= delta  # noqa: E731
    if not ok(1):
        return 0
    lo, hi = 1, 2
    while hi <= n and ok(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, n + 1)
    while hi - lo > 1:  # δ grows as the parts shrink (up to the rounding of unequal sizes): bisection
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def main() -> None:
    t0 = time.perf_counter()
    results: dict[str, Any] = {"machine": machine_info()}

    tables = []
    for (n, eps), printed in PAPER_DP.items():
        ms = [32, 64, 128, 256, 512] if n == 2**15 else [32, 64, 128]
        for m, dp_printed in zip(ms, printed):
            r = row(n, m, 0.5, eps)
            r["dp_paper_printed"] = dp_printed
            tables.append(r)
    results["tables"] = tables

    results["small_m"] = [row(n, m, 0.5, eps) for n, eps in ((2**15, 0.01), (2**10, 0.1)) for m in (1, 2, 3, 4)]

    dp_delta = []
    for n in (2**10, 2**15, 2**20):
        for eps in (0.1, 0.5, 1.0):
            m = sp_max_parts(n, 0.5, eps, 1e-6)
            r = row(n, m, 0.5, eps, 1e-6) if m else {"n": n, "m_sp": 0, "p": 0.5, "eps": eps, "delta": 1e-6}
            r["delta_sp_exact"] = equal_partition_delta(n, m, 0.5, eps) if m else None
            dp_delta.append(r)
    results["dp_delta"] = dp_delta

    results["skewed"] = [row(2**15, m, 0.05, eps) for eps in (0.01, 0.1) for m in (32, 128)]

    t = time.perf_counter()
    property_delta(2**20, 0.5, 0.001)
    results["timing_s_2_20_seconds"] = time.perf_counter() - t
    results["total_seconds"] = time.perf_counter() - t0

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "statistical_privacy.json").write_text(json.dumps(results, indent=1) + "\n")
    (RESULTS / "statistical_privacy.md").write_text(render(results))
    plot(results)
    print((RESULTS / "statistical_privacy.md").read_text())


def _table(rows: list[dict[str, Any]], printed: bool = False) -> list[str]:
    head = "| n | ε | m (#SP) | σ | δ (SP) | #DP paper"
    head += " (printed)" if printed else ""
    head += " | #DP GDP seq. | #DP zCDP seq. (CKS) | #DP zCDP seq. (ε=ρ+2√(ρ ln 1/δ)) | #DP GDP parallel |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if not r.get("m_sp"):
            lines.append(f"| 2^{int(math.log2(r['n']))} | {r['eps']} | 0 | — | {r['delta']:.4g} | — | — | — | — | — |")
            continue
        paper = f"{r['dp_paper']}" + (f" ({r['dp_paper_printed']})" if printed else "")
        lines.append(
            f"| 2^{int(math.log2(r['n']))} | {r['eps']} | {r['m_sp']} | {r['sigma']:.4f} | {r['delta']:.4g} | {paper} | "
            f"{r['dp_gdp_seq']} | {r['dp_zcdp_cks_seq']} | {r['dp_zcdp_bs_seq']} | {r['dp_gdp_parallel']} |"
        )
    return lines


def render(res: dict[str, Any]) -> str:
    m = res["machine"]
    out = [
        "# Statistical privacy (Breutigam & Reischuk) versus differential privacy",
        "",
        f"Generated by `python benchmarks/bench_statistical_privacy.py` on {m['date']} ({m['cpu']}, {m['nproc']} cores, "
        f"Python {m['python']}, numpy {m['numpy']}, scipy {m['scipy']}); total {res['total_seconds']:.1f} s. "
        f"One exact curve point at s = 2^20 took {res['timing_s_2_20_seconds']:.2f} s.",
        "",
        "**Statistical privacy is not differential privacy**: its (ε, δ) holds only against an adversary who knows "
        "nothing but the i.i.d. prior. Every row below compares SP's m exact answers on a secret partition into m "
        "equal parts with the number of Gaussian-noised counting queries DP allows at the same (ε, δ) and the same "
        "per-query accuracy σ (standard deviation of the answer, as a proportion, against the exact full-data "
        "proportion; DP noise std on the count = n·σ, sensitivity 1). "
        "*GDP seq.*: full-data answers, sequential composition, exact μ-GDP accounting; *zCDP seq.*: the same under "
        "ρ-zCDP with the Canonne-Kamath-Steinke or the classic conversion; *GDP parallel*: the Gaussian mechanism on "
        "a public partition into m′ parts, which cost one release together (parallel composition / dpmagic's "
        "overlap accounting) — the largest m′ whose error (subsampling + noise) is at most σ.",
        "",
        "## The paper's Tables I and II (p = ½), with exact DP accounting beside them",
        "",
        "`#DP paper` is ⌊n²σ²ε²/(8 ln(e + ε/δ))⌋ recomputed (the printed value in parentheses; Table I's ε = 0.01 "
        "column is printed rounded to nearest instead of cut).",
        "",
        *_table(res["tables"], printed=True),
        "",
        "## Few parts: where SP's claim can hold",
        "",
        "m = 1 is the exact full-data count (σ = 0), which no DP mechanism can match.",
        "",
        *_table(res["small_m"]),
        "",
        "## A DP-sized δ = 1e-6 (p = ½)",
        "",
        "m is the largest number of equal secret parts whose SP δ(ε) is at most 1e-6.",
        "",
        *_table(res["dp_delta"]),
        "",
        "## A skewed prior (p = 0.05)",
        "",
        *_table(res["skewed"]),
        "",
        "![SP versus DP query counts](statistical_privacy.png)",
        "",
    ]
    return "\n".join(out)


def plot(res: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = [r for r in res["tables"] if r["n"] == 2**15 and r["eps"] == 0.01]
    ms = [r["m_sp"] for r in rows]
    ax.plot(ms, ms, "o-", label="SP (secret partition, exact answers)")
    ax.plot(ms, [max(r["dp_paper"], 0.5) for r in rows], "s--", label="DP, paper's formula")
    ax.plot(ms, [r["dp_gdp_seq"] for r in rows], "^-", label="DP, Gaussian, exact GDP (sequential)")
    ax.plot(ms, [r["dp_zcdp_cks_seq"] for r in rows], "v-", label="DP, Gaussian, zCDP (CKS)")
    ax.plot(ms, [max(r["dp_gdp_parallel"], 0.5) for r in rows], "d-", label="DP, Gaussian, public partition (parallel)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("number of SP queries m (n = 2^15, p = ½, ε = 0.01, δ = SP's δ)")
    ax.set_ylabel("queries allowed at the same (ε, δ) and σ")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS / "statistical_privacy.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
