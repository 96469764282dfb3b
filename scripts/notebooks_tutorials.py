"""Write the two tutorial notebooks on overlap accounting (source of truth for their cells; no outputs).

* ``notebooks/parallel-composition.ipynb`` — why maximum-overlap accounting matters: the census workload of
  seed 000 §7.2 (a small-scale reproduction of its Fig. 4) and the average L1 error of sequential versus
  overlap charging on real Adult answers (seed 000 Table 1's method).
* ``notebooks/custodian.ipynb`` — analysing a query log as a data custodian (``dpmagic overlap`` and its
  Python API), then the durable ledger side (``dpmagic ledger show / verify / export``).

Run: python scripts/notebooks_tutorials.py   (then e.g. python scripts/run_notebook.py notebooks/custodian.ipynb)
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_notebook

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_notebooks import ROOT, cell, md  # noqa: E402  (the quickstart builder's cell helpers)


def _notebook(cells: list[nbformat.NotebookNode]) -> nbformat.NotebookNode:
    for i, c in enumerate(cells):
        c.id = f"cell-{i:02d}"  # stable ids: regenerating the notebooks gives no diff
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


# --------------------------------------------------------------------------------------------------


def parallel_composition() -> nbformat.NotebookNode:
    cells = [
        md("""
# Why overlap accounting matters

Sequential composition charges every query in full: *t* queries at cost *w* each cost *t·w*. But a person is
only exposed to the queries whose WHERE clause can contain their row. dpmagic charges the **maximum overlap**
γ — the largest total weight of queries that one possible row of the declared domain can fall into — and
never less (seed 000, Smith et al., *Making the Most of Parallel Composition in Differential Privacy*).

The gain is measured by the **utility gain** `1 − γ/t` (seed 000 §3.2): the fraction of the sequential budget
that overlap accounting gives back. This notebook reproduces, at a small scale, two results of that paper:

1. the census workload of §7.2 (Fig. 4): utility gain versus number of queries *t*;
2. the average L1 error of answers under sequential versus overlap charging (the method of Table 1), here on
   a realistic analyst log over the UCI Adult table.

Nothing here reads the sensitive rows to *decide a charge*: the accountant needs only the public schema and
the queries.
"""),
        cell("""
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import dpmagic
from dpmagic.overlap import OverlapEngine
from dpmagic.workloads import adult_query_log, box_to_sql, census_schema, census_workload
"""),
        md("""
## 1. The census workload (seed 000 §7.2)

Five columns: income (5,000 equal-width ranges over (0, 750,000), stored as the range index 1..5000), age
(5 bands), marital status (4), race (7) and gender (2) — a domain of 1.4 million possible rows. Every query is
an income prefix `income <= i` AND, for each of the four other columns, either one value or no condition.
"""),
        cell("""
schema = census_schema()
print({name: (col.kind, getattr(col, "values", None) or (col.lower, col.upper)) for name, col in schema.columns.items()})
for box in census_workload(5, seed=1, schema=schema):
    print(box_to_sql(box, "census"))
"""),
        md("""
`OverlapEngine` holds the queries as boxes with weights (here 1 each: the same cost per query) and reports
four bounds, `γ ≤ ω ≤ χ ≤ Σw`:

* **sequential** Σw — what OpenDP / SmartNoise-style accounting would charge;
* **chromatic** χ — the weight of a proper colouring of the query graph (DSatur; fast, always safe);
* **clique** ω — the exact maximum weight clique of the query graph;
* **overlap** γ — the exact maximum overlap, with a concrete *witness* row whose load proves the lower end.
"""),
        cell("""
boxes = census_workload(500, seed=0, schema=schema)
engine = OverlapEngine(schema, time_limit=20)
engine.extend(boxes, np.ones(len(boxes)))
b = engine.bounds()
print(f"t = {len(boxes)} queries")
print(f"sequential Σw = {b.sequential:g}, chromatic χ = {b.chromatic:g}, "
      f"clique ω = {b.clique:g} (exact: {b.clique_exact}), overlap γ ∈ [{b.overlap.lower:g}, {b.overlap.upper:g}]")
print("worst-case row (witness):", b.overlap.witness)
print(f"sequential accounting would have charged {b.sequential:g}; overlap accounting charged {b.overlap.upper:g} "
      f"→ utility gain {1 - b.overlap.upper / b.sequential:.1%}")
"""),
        md("""
### Utility gain versus number of queries (cf. seed 000 Fig. 4)

For each *t* we draw several independent query sets (the paper uses 30; we use 10 to stay fast) and average
the three bounds. The utility gain of a bound β is `1 − β/t`.
"""),
        cell("""
T = [25, 50, 100, 250, 500, 1000, 2000]
SETS = 10
rows = []
t0 = time.perf_counter()
for t in T:
    for s in range(SETS):
        eng = OverlapEngine(schema, time_limit=20)
        eng.extend(census_workload(t, seed=1000 * t + s, schema=schema), np.ones(t))
        bb = eng.bounds()
        rows.append({"t": t, "set": s, "chromatic": bb.chromatic, "clique": bb.clique,
                     "exact γ": bb.overlap.upper, "exact": bb.overlap.exact and bb.clique_exact})
runs = pd.DataFrame(rows)
print(f"{len(runs)} query sets analysed in {time.perf_counter() - t0:.1f} s; all exact: {runs['exact'].all()}")
mean = runs.groupby("t")[["chromatic", "clique", "exact γ"]].mean()
gain = 1 - mean.div(mean.index.to_series(), axis=0)
summary = mean.join(gain.add_prefix("gain "))
summary.style.format({c: "{:.1%}" for c in gain.add_prefix("gain ").columns} | {c: "{:.1f}" for c in mean.columns})
"""),
        cell("""
fig, ax = plt.subplots(figsize=(7, 4))
for col, style in (("chromatic", "s--"), ("clique", "o-"), ("exact γ", "x:")):
    ax.plot(gain.index, 100 * gain[col], style, label=col)
ax.set_xscale("log")
ax.set_xlabel("number of queries t")
ax.set_ylabel("utility gain 1 − bound/t (%)")
ax.set_ylim(0, 100)
ax.set_title("Census workload (seed 000 §7.2): utility gain of overlap accounting")
ax.grid(True, alpha=0.3)
ax.legend()
plt.show()
"""),
        md("""
As in the paper, the three lines almost coincide (the workload is intervals plus single categories, whose
boxes have Helly number 2, so ω = γ exactly) and the gain climbs above 90%: a row can fall into only a small
fraction of the queries, however many are asked.

## 2. What it means for accuracy: average L1 error (seed 000 Table 1 method)

Take a budget of μ = 1 in Gaussian differential privacy. Sequential composition must give each of the *t*
queries μ′ = 1/√t; overlap accounting may give each μ′ = 1/√γ (μ-GDP composes as √Σμ², and a person is in at
most γ of the queries). Each count has sensitivity 1, so its Gaussian noise has σ = 1/μ′.

The workload is a realistic analyst log on the UCI Adult table (`dpmagic.workloads.adult_query_log`, COUNT
queries only, some of them GROUP BY).
"""),
        cell("""
adult, adult_schema = dpmagic.load_adult()
log = adult_query_log(300, seed=0, counts_only=True)
queries = [dpmagic.parse_query(sql, adult_schema) for sql in log]
print(len(log), "statements, for example:")
for sql in log[:6]:
    print("  ", sql)

eng = OverlapEngine(adult_schema, time_limit=20)
eng.extend([q.coverage for q in queries], np.ones(len(queries)))
ab = eng.bounds()
t, gamma = len(queries), ab.overlap.upper
print(f"t = {t}, γ = {gamma:g} (exact: {ab.overlap.exact}), clique ω = {ab.clique:g}, chromatic χ = {ab.chromatic:g}")
print(f"utility gain 1 − γ/t = {1 - gamma / t:.1%}")
"""),
        md("""
**A note on the truth.** To *measure* the error we need the true answers, so this evaluation computes them
with pandas directly from the rows. That is the experimenter's view, not the analyst's: a real analyst never
sees these numbers, and in a dpmagic session every answer goes through the accountant first. Here we do not
spend any session budget at all; we only compare the noise that the two accounting rules would force.
"""),
        cell("""
import itertools


def row_mask(df, box):
    \"\"\"Rows of df inside the box (pandas, for the evaluation only).\"\"\"
    m = pd.Series(True, index=df.index)
    for col, s in box.constraints.items():
        if hasattr(s, "intervals"):  # numeric column: a union of intervals
            inside = pd.Series(False, index=df.index)
            for iv in s.intervals:
                lo = df[col] >= iv.lo if iv.lo_closed else df[col] > iv.lo
                hi = df[col] <= iv.hi if iv.hi_closed else df[col] < iv.hi
                inside |= lo & hi
            m &= inside
        else:  # categorical column: a set of declared values
            m &= df[col].isin(s.values)
    return m


def true_counts(df, schema, q):
    \"\"\"Exact cell counts of a COUNT query: one cell, or one per declared GROUP BY key (zero-filled).\"\"\"
    rows = df[row_mask(df, q.coverage)]
    if not q.group_by:
        return np.array([len(rows)])
    counts = rows.groupby(list(q.group_by), observed=True).size()
    found = {k if isinstance(k, tuple) else (k,): n for k, n in counts.items()}
    keys = itertools.product(*(schema[c].values for c in q.group_by))
    return np.array([found.get(k, 0) for k in keys])


truth = [true_counts(adult, adult_schema, q) for q in queries]
print(sum(len(c) for c in truth), "released cells in", len(truth), "queries")
"""),
        cell("""
from dpmagic.mechanisms import noise_for, release_integer

MU = 1.0
rng_repeats = 5  # repeat the noise draws to average out their randomness
errors = {}
for rule, mu_each in (("sequential", MU / np.sqrt(t)), ("overlap", MU / np.sqrt(gamma))):
    noise = noise_for("gdp", mu_each, 1.0, integer=True)  # discrete Gaussian, σ = 1/μ′
    errs = []
    for _ in range(rng_repeats):
        for exact in truth:
            errs.extend(np.abs(release_integer(exact, noise) - exact))
    errors[rule] = {"μ′ per query": mu_each, "σ": noise.scale, "average L1 error": float(np.mean(errs))}
table = pd.DataFrame(errors).T
print(f"total budget μ = {MU}: sequential accounting charges each of the {t} queries μ′² = 1/{t}; overlap accounting "
      f"charges each μ′² = 1/{gamma:g}, since no row is in more than γ = {gamma:g} of them")
table
"""),
        cell("""
seq, opt = table.loc["sequential", "average L1 error"], table.loc["overlap", "average L1 error"]
print(f"average L1 error: sequential {seq:.2f}, overlap {opt:.2f} → {1 - opt / seq:.0%} less noise "
      f"(expected √(γ/t) = {np.sqrt(gamma / t):.2f} of the sequential error)")
"""),
        md("""
The same total privacy guarantee (μ = 1 for every person), with answers that are noticeably more accurate —
the kind of improvement seed 000 reports on the Australian Bureau of Statistics logs (36% utility gain
combined). In a notebook, dpmagic applies this automatically: every `%%dpquery` is charged by the increase of
the maximum overlap, and `%dpbudget` shows all four bounds.
"""),
    ]
    return _notebook(cells)


# --------------------------------------------------------------------------------------------------


def custodian() -> nbformat.NotebookNode:
    cells = [
        md("""
# dpmagic for the data custodian

The custodian owns the sensitive table, declares its public schema and sets the budgets. Two tools help:

* **`dpmagic overlap`** analyses a query log — a `.sql` file, or `.jsonl` with weights — using only the
  public schema and the queries, *never the data*: how much would these queries cost under sequential
  composition, and how much under maximum-overlap accounting? Which row of the domain is the worst case?
* **`dpmagic ledger`** inspects the durable, hash-chained ledger that sessions write every charge to
  *before* reading any row: show it, verify its chain, export a report.
"""),
        cell("""
import json
import pathlib
import tempfile

import dpmagic
from dpmagic.cli import analyse, load_workload
from dpmagic.workloads import adult_query_log

schema_path = pathlib.Path(dpmagic.__file__).parent / "data" / "adult.schema.json"
workdir = pathlib.Path(tempfile.mkdtemp(prefix="dpmagic-custodian-"))
print("public schema:", schema_path.name)
print("working directory:", workdir)
"""),
        md("""
## 1. A query log

We generate a realistic log of 200 analyst queries on the Adult table (overview GROUP BYs, filtered counts
and averages, drill-downs, sweeps over age or hours bands, comparisons of two groups) and write it as a
`.sql` file, one statement per `;`.
"""),
        cell("""
log = adult_query_log(200, seed=7)
log_path = workdir / "log.sql"
log_path.write_text("".join(sql + ";\\n" for sql in log), encoding="utf-8")
print(log_path.read_text().splitlines()[:8])
"""),
        md("The command-line tool with `--json` prints one JSON object (DESIGN.md §3.2):"),
        cell("""
!dpmagic overlap --schema {schema_path} {log_path} --json
"""),
        md("Without `--json` it prints a table for people:"),
        cell("""
!dpmagic overlap --schema {schema_path} {log_path}
"""),
        md("""
The same analysis from Python: `load_workload` parses the log against the schema, `analyse` returns the
same dictionary.
"""),
        cell("""
schema = dpmagic.Schema.from_json(schema_path)
items = load_workload(log_path, schema)
result = analyse(items, schema, timeout=30)
mo = result["max_overlap"]
print(f"{result['queries']} queries; sequential accounting: {result['sequential']:g}")
print(f"maximum overlap γ = {mo['upper']:g} (exact: {mo['exact']}), clique {result['clique']['value']:g}, "
      f"colouring {result['chromatic']['value']:g}")
print(f"an accountant would have charged {mo['upper']:g} instead of {result['sequential']:g}: "
      f"utility gain {result['utility_gain']:.1%}")
"""),
        md("""
The **witness** is one concrete row of the declared domain (one value per constrained column) that falls into
γ of the queries — the person who would lose the most privacy. It proves that γ cannot be lower.
"""),
        cell("""
import pandas as pd

witness = pd.DataFrame([mo["witness"]])
witness
"""),
        cell("""
from dpmagic.overlap import OverlapEngine

engine = OverlapEngine(schema, time_limit=30)
engine.extend([it.box for it in items], [it.weight for it in items])
members = engine.overlap_members()
print(f"the witness row is covered by {len(members)} queries (its load: {engine.load_at(mo['witness']):g}); the first five:")
for i in members[:5]:
    print("  ", items[i].sql)
"""),
        md("""
A weighted log (`.jsonl`, one `{"sql": ..., "weight": ...}` per line) is analysed the same way; weights are in
the additive currency (ε, ρ, or μ²).
"""),
        cell("""
jsonl_path = workdir / "log.jsonl"
with jsonl_path.open("w") as f:
    for i, sql in enumerate(log[:40]):
        f.write(json.dumps({"sql": sql, "weight": 0.05 if i % 2 else 0.1}) + "\\n")
!dpmagic overlap --schema {schema_path} {jsonl_path}
"""),
        md("""
## 2. The ledger

An analyst's session writes every charge to a sqlite ledger file before any row is read. Here we play the
analyst for a moment: a session on Adult with a budget of ε = 1 and a durable ledger in the working
directory.
"""),
        cell("""
adult, _ = dpmagic.load_adult()
ledger_path = workdir / "adult-ledger.sqlite"
session = dpmagic.Session(adult, schema, "epsilon=1.0", ledger=ledger_path)
for sql, eps in [
    ("SELECT COUNT(*) FROM adult WHERE age < 30", 0.2),
    ("SELECT COUNT(*) FROM adult WHERE age >= 30 AND age < 50", 0.2),
    ("SELECT COUNT(*) FROM adult WHERE age >= 50", 0.2),
    ("SELECT sex, AVG(\\"hours-per-week\\") FROM adult GROUP BY sex", 0.3),
]:
    r = session.query(sql, epsilon=eps)
    print(r.summary())
print(f"spent ε = {session.spent:.2f}, remaining ε = {session.remaining:.2f}")
"""),
        md("""
The three age bands are disjoint, so they were charged 0.2 once, not 0.6. Now the custodian's view of the
same file — from a shell, without the data:
"""),
        cell("""
!dpmagic ledger show {ledger_path}
"""),
        md("`verify` recomputes the hash chain: any edit, deletion or reordering of a charge is detected."),
        cell("""
!dpmagic ledger verify {ledger_path}
"""),
        md("`export` writes every charge as CSV, JSON or a self-contained HTML report:"),
        cell("""
report = workdir / "report.html"
!dpmagic ledger export {ledger_path} --format html -o {report}
print(f"{report.name}: a self-contained page of {report.stat().st_size:,} bytes to open in a browser or archive")
"""),
        cell("""
!dpmagic ledger export {ledger_path} --format csv
"""),
    ]
    return _notebook(cells)


def main() -> None:
    ROOT.mkdir(exist_ok=True)
    nbformat.write(parallel_composition(), ROOT / "parallel-composition.ipynb")
    nbformat.write(custodian(), ROOT / "custodian.ipynb")


if __name__ == "__main__":
    main()
