"""Write the tutorial notebooks (source of truth for their cells; outputs are never committed).

Run: python scripts/make_notebooks.py
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1] / "notebooks"


def cell(src: str, *, raises: bool = False) -> nbformat.NotebookNode:
    c = new_code_cell(src.strip("\n"))
    if raises:
        c.metadata["tags"] = ["raises-exception"]
    return c


def md(src: str) -> nbformat.NotebookNode:
    return new_markdown_cell(src.strip("\n"))


def quickstart() -> nbformat.NotebookNode:
    cells = [
        md("""
# dpmagic quickstart

Differentially private questions about the UCI Adult census extract (32,561 people), asked in SQL from
notebook cells. Every answer carries calibrated noise; a session accountant keeps the whole notebook inside
a privacy budget, and charges only for queries that can touch the same person (their *maximum overlap*).
"""),
        cell("%load_ext dpmagic"),
        md("""
The data custodian provides the sensitive table and its **public schema**: the declared categories and
numeric bounds of every column. dpmagic never reads the domain from the rows.
"""),
        cell("""
import dpmagic

adult, schema = dpmagic.load_adult()  # the sensitive rows (we never look at them) and the public schema
{name: spec for name, spec in schema.to_dict()["columns"].items() if name in ("age", "sex", "race")}
"""),
        md("""
Bind the data, the schema and a total budget of ε = 1 (pure differential privacy). The ledger — every charge,
written *before* any row is read — is a durable sqlite file: re-binding the same data resumes its budget, even
after a kernel restart. This demo uses a fresh ledger file so that it can be run again from the top.
"""),
        cell("""
import os, tempfile
ledger_path = os.path.join(tempfile.mkdtemp(), "quickstart-ledger.sqlite")
%dpsession adult --schema schema --budget epsilon=1.0 --ledger {ledger_path}
"""),
        md("How many people are in the table? (ε = 0.05; the answer comes with its 95% interval.)"),
        cell("""
%%dpquery --epsilon 0.05
SELECT COUNT(*) AS people FROM adult
"""),
        md("`name <<` stores the answer's DataFrame in a variable. GROUP BY keys are the *declared* values."),
        cell("""
%%dpquery by_sex << --epsilon 0.1
SELECT sex, COUNT(*) AS n, AVG(age) AS mean_age FROM adult GROUP BY sex
"""),
        cell("by_sex[['sex', 'n', 'mean_age']]"),
        cell("""
%%dpquery --epsilon 0.1
SELECT race, COUNT(*) AS n FROM adult WHERE "hours-per-week" >= 40 GROUP BY race
"""),
        cell("""
%%dpquery --epsilon 0.1
SELECT education, AVG("capital-gain") AS mean_gain FROM adult WHERE age BETWEEN 30 AND 50 GROUP BY education
"""),
        md("""
## Parallel composition, found automatically

Queries on disjoint parts of the domain cannot touch the same person, so they compose in parallel. Three age
bands at ε = 0.3 each are charged 0.3 once, not 0.9: the accountant computes the maximum overlap of the
queries' WHERE boxes.
"""),
        cell("""
%%dpquery --epsilon 0.3
SELECT COUNT(*) AS n, SUM("hours-per-week") AS hours FROM adult WHERE age < 30
"""),
        cell("""
%%dpquery --epsilon 0.3
SELECT COUNT(*) AS n, SUM("hours-per-week") AS hours FROM adult WHERE age >= 30 AND age < 50
"""),
        cell("""
%%dpquery --epsilon 0.3
SELECT COUNT(*) AS n, SUM("hours-per-week") AS hours FROM adult WHERE age >= 50
"""),
        cell("""
%%dpquery --epsilon 0.2
SELECT "marital-status", COUNT(*) AS n FROM adult WHERE sex = 'Female' AND age >= 50 GROUP BY "marital-status"
"""),
        md("""
`%dpbudget` shows what is charged, what is left, and all four bounds on the maximum overlap. The panel above
(displayed once by `%dpsession`) has been updating itself after every query.
"""),
        cell("%dpbudget"),
        md("""
## Before spending: preview, afford, accuracy first

`--dry-run` says what a query would add to the charged bound, which registered queries it overlaps and which
row would become the worst case — without reading data or spending anything.
"""),
        cell("""
%%dpquery --dry-run --epsilon 0.5
SELECT COUNT(*) FROM adult WHERE "capital-gain" > 0
"""),
        md("Asked for real, it is refused — and costs nothing:"),
        cell(
            """
%%dpquery --epsilon 0.5
SELECT COUNT(*) FROM adult WHERE "capital-gain" > 0
""",
            raises=True,
        ),
        md("""
How much could a question about young men still get? Only the queries covering that region count, so it can
still get more than the session-wide remainder. `--epsilon max` spends exactly that.
"""),
        cell("%dpbudget --afford \"SELECT COUNT(*) FROM adult WHERE age < 30 AND sex = 'Male'\""),
        cell("""
%%dpquery --epsilon max
SELECT COUNT(*) AS n FROM adult WHERE age < 30 AND sex = 'Male' AND "native-country" = 'Canada'
"""),
        md("Accuracy first: ask for a 95% interval of ±25 people, and dpmagic finds the smallest ε that achieves it."),
        cell("""
%%dpquery --ci 25
SELECT COUNT(*) AS n FROM adult WHERE age >= 50 AND sex = 'Male'
"""),
        md("Re-running a cell returns the stored answer and charges nothing (`--fresh` draws anew):"),
        cell("""
%%dpquery --ci 25
SELECT COUNT(*) AS n FROM adult WHERE age >= 50 AND sex = 'Male'
"""),
        md("## Where did the budget go?"),
        cell("%dpplot budget"),
        cell("%dpplot graph"),
        cell("%dpplot map sex race"),
        cell(
            "summary = %dpbudget --json\nprint(f\"spent ε = {summary['spent']:.3f}, remaining ε = {summary['remaining']:.3f}, queries = {summary['queries']}\")"
        ),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def main() -> None:
    ROOT.mkdir(exist_ok=True)
    nbformat.write(quickstart(), ROOT / "quickstart.ipynb")


if __name__ == "__main__":
    main()
