"""The small workload language of ``%%dpbatch`` / :meth:`dpmagic.Session.batch`, over declared columns.

Grammar (whitespace free; column names as declared, hyphens allowed, or quoted with ``"``/`````)::

    workload := term ('+' term)*                  union (a stack of the terms' queries)
    term     := factor ('*' factor)*              Kronecker product (columns must differ)
    factor   := name '(' args ')' | '(' workload ')'
    name     := identity | total | prefix | all_range | width_range | marginals

* ``identity(a, b, ...)`` — one count per combination of declared values of the columns;
* ``total(a, ...)`` — the total over the columns (``total()``: the grand total);
* ``prefix(a)``, ``all_range(a)``, ``width_range(a, k)`` — ranges over an int column's declared values
  (``a ≤ v``; every ``lo ≤ a ≤ hi``; every window of k consecutive values);
* ``marginals([a, b, c], k)`` — every marginal on at most k of the columns (the 0-way one is the total).

A product of unions distributes.  The data vector is the histogram over the columns in order of first
appearance, each over every declared value (int columns: every integer from the declared lower to the
upper bound; categorical: the declared categories, in declared order) — the public domain only, never the
rows.  In every term a column it does not name contributes a Total factor (its queries count all its
values).  Limits (documented refusals with a hint): the data vector has at most :data:`MAX_BATCH_CELLS`
cells (the GROUP BY limit of a query, :data:`dpmagic.query.sql.MAX_CELLS`) and a workload over two or more
columns at most :data:`MAX_BATCH_QUERIES` queries (one column has no query limit: it is answered implicitly,
:mod:`dpmagic.batch.implicit`).  Parsing is O(length of the text + number of terms · columns).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from functools import cached_property

from dpmagic.batch.workloads import Dense, Kron, Stack, all_range, identity, prefix, total, width_range
from dpmagic.domain.schema import CategoricalColumn, Schema
from dpmagic.errors import ConfigurationError
from dpmagic.query.sql import MAX_CELLS

__all__ = ["Block", "WorkloadSpec", "parse_workload", "MAX_BATCH_CELLS", "MAX_BATCH_QUERIES"]

#: the largest data vector (product of the columns' declared value counts) a batch may be asked over
MAX_BATCH_CELLS = MAX_CELLS
#: the largest number of workload queries (rows of the answer)
MAX_BATCH_QUERIES = 200_000

_RANGE_KINDS = ("prefix", "all_range", "width_range")
_FUNCS = ("identity", "total", "prefix", "all_range", "width_range", "marginals")
_TOKEN = re.compile(
    r'\s*(?:(?P<num>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_\-.]*)|"(?P<dq>[^"]+)"|`(?P<bq>[^`]+)`|(?P<op>[()\[\],*+]))'
)
_HINT = "e.g. prefix(age) * identity(sex) + marginals([sex, race, education], 2)"


@dataclass(frozen=True)
class Block:
    """One one-dimensional factor: a query family on one column."""

    column: str
    kind: str  # identity, total, prefix, all_range, width_range
    width: int | None = None


Term = tuple[Block, ...]


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ConfigurationError(f"workload: cannot read {text[pos : pos + 20]!r}", hint=_HINT)
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None  # every alternative of _TOKEN is a named group
        out.append(("name" if kind in ("dq", "bq") else kind, m.group(kind)))
    return out


class _Parser:
    def __init__(self, text: str, schema: Schema) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.schema = schema

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, kind: str, value: str | None = None) -> str:
        t = self.peek()
        if t is None or t[0] != kind or (value is not None and t[1] != value):
            got = "the end" if t is None else repr(t[1])
            raise ConfigurationError(f"workload: expected {value or kind}, found {got}", hint=_HINT)
        self.i += 1
        return t[1]

    def workload(self) -> list[Term]:
        terms = self.term()
        while self.peek() == ("op", "+"):
            self.i += 1
            terms = terms + self.term()
        return terms

    def term(self) -> list[Term]:
        terms = self.factor()
        while self.peek() == ("op", "*"):
            self.i += 1
            right = self.factor()
            terms = [_product(a, b) for a in terms for b in right]
        return terms

    def column(self) -> str:
        name = self.take("name")
        col = self.schema.columns.get(name)
        if col is None:
            raise ConfigurationError(
                f"workload: unknown column {name!r}", hint=f"declared columns: {', '.join(self.schema.columns)}"
            )
        if not isinstance(col, CategoricalColumn) and not col.is_int:
            raise ConfigurationError(
                f"workload: column {name!r} is a float column; a batch needs a finite set of declared values",
                hint="use an int or categorical column (bin a float column in a %%dpquery instead)",
            )
        return name

    def factor(self) -> list[Term]:
        if self.peek() == ("op", "("):
            self.i += 1
            inner = self.workload()
            self.take("op", ")")
            return inner
        fn = self.take("name").lower()
        if fn not in _FUNCS:
            raise ConfigurationError(f"workload: unknown family {fn!r}: use one of {', '.join(_FUNCS)}", hint=_HINT)
        self.take("op", "(")
        if fn == "marginals":
            self.take("op", "[")
            cols: list[str] = [self.column()]
            while self.peek() == ("op", ","):
                self.i += 1
                cols.append(self.column())
            self.take("op", "]")
            self.take("op", ",")
            k = int(self.take("num"))
            self.take("op", ")")
            if len(set(cols)) != len(cols):
                raise ConfigurationError("workload: marginals() names a column twice")
            return [
                tuple(Block(c, "identity") for c in sub)
                for r in range(min(k, len(cols)) + 1)
                for sub in itertools.combinations(cols, r)
            ]
        cols = []
        width = None
        while self.peek() != ("op", ")"):
            if cols:
                self.take("op", ",")
            if fn == "width_range" and len(cols) == 1:
                width = int(self.take("num"))
                continue
            cols.append(self.column())
        self.take("op", ")")
        if fn in _RANGE_KINDS:
            if len(cols) != 1:
                raise ConfigurationError(f"workload: {fn}() takes one int column", hint=_HINT)
            if isinstance(self.schema.columns[cols[0]], CategoricalColumn):
                raise ConfigurationError(
                    f"workload: {fn}({cols[0]}) needs an int column; {cols[0]!r} is categorical",
                    hint=f"use identity({cols[0]}) for its categories",
                )
            if fn == "width_range" and width is None:
                raise ConfigurationError("workload: width_range(column, k) needs the width k")
        elif not cols and fn != "total":
            raise ConfigurationError(f"workload: {fn}() needs at least one column", hint=_HINT)
        term = tuple(Block(c, fn, width) for c in cols)
        _product(term, ())  # duplicate check
        return [term]


def _product(a: Term, b: Term) -> Term:
    cols = [x.column for x in a + b]
    dup = sorted({c for c in cols if cols.count(c) > 1})
    if dup:
        raise ConfigurationError(
            f"workload: a product names column {dup[0]!r} twice", hint="each column appears once in a product term"
        )
    return a + b


@dataclass(frozen=True, eq=False)
class WorkloadSpec:
    """A parsed workload: its terms, the data vector's columns and their declared values."""

    text: str
    terms: tuple[Term, ...]
    columns: tuple[str, ...]
    values: tuple[tuple[object, ...], ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.values)

    @property
    def n(self) -> int:
        return math.prod(self.sizes)

    def _block(self, i: int, term: Term) -> Block:
        for b in term:
            if b.column == self.columns[i]:
                return b
        return Block(self.columns[i], "total")

    def _dense(self, b: Block, n: int) -> Dense:
        if b.kind == "identity":
            return identity(n)
        if b.kind == "total":
            return total(n)
        if b.kind == "prefix":
            return prefix(n)
        if b.kind == "all_range":
            return all_range(n)
        return width_range(n, int(b.width or 0))

    @cached_property
    def workload(self) -> Stack:
        """The workload as a union of Kronecker products over :attr:`columns` (one term per spec term)."""
        terms = []
        for t in self.terms:
            blocks = [self._block(i, t) for i in range(len(self.columns))]
            terms.append((1.0, Kron(tuple(self._dense(b, n) for b, n in zip(blocks, self.sizes, strict=True)))))
        return Stack(tuple(terms))

    @property
    def num_queries(self) -> int:
        return self.workload.num_queries

    @property
    def is_marginal(self) -> bool:
        """Every factor is Identity or Total (a union of marginals: OPT_M applies)."""
        return all(b.kind in ("identity", "total") for t in self.terms for b in t)

    @property
    def has_ranges(self) -> bool:
        return any(b.kind in _RANGE_KINDS for t in self.terms for b in t)

    def _labels_1d(self, b: Block, vals: tuple[object, ...]) -> list[str]:
        c, n = b.column, len(vals)
        if b.kind == "identity":
            return [f"{c} = {v!r}" if isinstance(v, str) else f"{c} = {v}" for v in vals]
        if b.kind == "total":
            return [""]
        if b.kind == "prefix":
            return [f"{c} <= {v}" for v in vals]
        if b.kind == "all_range":
            import numpy as np

            s, e = np.triu_indices(n)
            return [f"{c} = {vals[i]}" if i == j else f"{c} BETWEEN {vals[i]} AND {vals[j]}" for i, j in zip(s, e)]
        k = int(b.width or 1)
        return [
            f"{c} = {vals[s]}" if k == 1 else f"{c} BETWEEN {vals[s]} AND {vals[s + k - 1]}" for s in range(n - k + 1)
        ]

    def labels(self) -> list[str]:
        """One SQL-like predicate per workload query, in the order of the answers ("all rows" for a total)."""
        out: list[str] = []
        for t in self.terms:
            parts = [self._labels_1d(self._block(i, t), self.values[i]) for i in range(len(self.columns))]
            for combo in itertools.product(*parts):
                s = " AND ".join(p for p in combo if p)
                out.append(s or "all rows")
        return out


def parse_workload(text: str, schema: Schema) -> WorkloadSpec:
    """Parse a workload spec against the declared schema (no data read); refuse what exceeds the limits."""
    if not text or not text.strip():
        raise ConfigurationError("workload: empty workload", hint=_HINT)
    p = _Parser(text, schema)
    terms = p.workload()
    if (extra := p.peek()) is not None:
        raise ConfigurationError(f"workload: unexpected {extra[1]!r}", hint=_HINT)
    columns = tuple(dict.fromkeys(b.column for t in terms for b in t))
    if not columns:
        raise ConfigurationError("workload: name at least one column", hint=_HINT)
    values: list[tuple[object, ...]] = []
    for c in columns:
        col = schema.columns[c]
        if isinstance(col, CategoricalColumn):
            values.append(tuple(col.values))
        else:
            size = int(col.upper) - int(col.lower) + 1
            if size > MAX_BATCH_CELLS:
                raise ConfigurationError(
                    f"workload: int column {c!r} has {size:,} declared values, more than the batch limit of "
                    f"{MAX_BATCH_CELLS:,}",
                    hint="declare narrower bounds for it in the schema, or ask about a binned copy with %%dpquery",
                )
            values.append(tuple(range(int(col.lower), int(col.upper) + 1)))
    n = math.prod(len(v) for v in values)
    if n > MAX_BATCH_CELLS:
        raise ConfigurationError(
            f"workload: the data vector over {', '.join(columns)} has {n:,} cells, more than the batch limit of "
            f"{MAX_BATCH_CELLS:,}",
            hint="use fewer or smaller columns in one batch (split it into batches over disjoint WHERE boxes)",
        )
    for t in terms:
        for b in t:
            if b.kind == "width_range":
                size = len(values[columns.index(b.column)])
                if not b.width or b.width > size:
                    raise ConfigurationError(
                        f"workload: width_range({b.column}, {b.width}): the width must be 1..{size}"
                    )
    canonical = " + ".join(
        " * ".join(f"{b.kind}({b.column}{'' if b.width is None else f', {b.width}'})" for b in t) or "total()"
        for t in terms
    )
    spec = WorkloadSpec(canonical, tuple(terms), columns, tuple(values))
    if spec.num_queries > MAX_BATCH_QUERIES and len(columns) > 1:
        raise ConfigurationError(
            f"workload: {spec.num_queries:,} queries, more than the batch limit of {MAX_BATCH_QUERIES:,}",
            hint="one column at a time has no query limit (its estimate is kept and any query asked from it); or "
            "use width_range or prefix instead of all_range",
        )
    return spec
