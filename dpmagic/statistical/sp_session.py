"""A statistical-privacy (SP) session: counting queries over a secret random partition — NOT differential privacy.

>>> from dpmagic.statistical import StatisticalSession
>>> s = StatisticalSession(df, schema, prior="bernoulli(0.5)", parts=32, epsilon=0.05, delta=0.13)  # doctest: +SKIP
>>> s.query("SELECT COUNT(*) FROM t WHERE smoker = 1")                                              # doctest: +SKIP

The mechanism is Breutigam & Reischuk, *Parallel Composition for Statistical Privacy* (AnoMed project preprint),
Sec. 5-6: the rows are split into m parts by a secret, uniformly random partition
(:class:`~dpmagic.statistical.StatisticalPrivacyAccountant`); the k-th query is answered **exactly** on part k
and rescaled by n / n_k; it is charged (n_k / n) · δ_{n_k, p_k}(ε) (Theorem 5.3) before the part is read.

**Statistical privacy, not differential privacy.**  The guarantee holds only if the rows are i.i.d. draws from the
declared prior and the adversary knows nothing else about them; every output of this module says so.

Scope (what :mod:`dpmagic.statistical` computes curves for): ``SELECT COUNT(*) FROM t [WHERE …]`` whose WHERE
constrains only the *prior column* (the one column whose values the prior describes); the prior is
``bernoulli(p)`` on a column with domain {0, 1} or ``categorical(p_1, …, p_k)`` over a column's declared values
(int columns: every integer between the bounds).  SUM, AVG, GROUP BY, predicates on other columns, float columns
and other priors are refused with one clear error, before anything is charged.

Ledger.  An SP session writes to its own key namespace, ``"sp|" + <the data set's DP ledger key>``, with its own
event kinds (``sp-open``, ``sp-charge``): a DP session on the same data and schema never reads SP events and vice
versa, and an SP session refuses a key holding any other kind of event.  Recorded: the public parameters (column,
prior, n, part sizes, ε, δ target, a random session token) and each charge (SQL, part index, part size, p, δ_k,
δ after).  Never recorded: the partition, the answers, or anything else computed from the rows.  **n is
disclosed** (the part sizes are derived from it); a DP session does not disclose n.

Restarts.  The partition lives only in the kernel's memory.  When it is lost, the unused parts cannot be redrawn
(rows already used would be reused), so they count as spent: the first session that charges a data set's SP key
owns it, and every other session on that key — a re-bound one after a restart, or a second kernel — refuses every
query.  A fresh partition needs fresh data, i.e. a new ``dataset`` id declared by the custodian.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dpmagic.accountant.ledger import Ledger
from dpmagic.backends.pandas import PandasBackend
from dpmagic.domain.schema import OutOfRangePolicy, Schema
from dpmagic.errors import BudgetExceededError, ConfigurationError, DPMagicError, QueryError, UnsupportedQueryError
from dpmagic.query.model import Query
from dpmagic.query.sql import parse_query
from dpmagic.query.where import check_categories
from dpmagic.statistical.accountant import StatisticalPrivacyAccountant
from dpmagic.statistical.curves import BernoulliPrior
from dpmagic.statistical.priors import column_domain, parse_prior, prior_text  # parse_prior re-exported
from dpmagic.statistical.results import SP_LABEL, SPPreview, SPResult  # re-exported

__all__ = [
    "SP_LABEL",
    "SP_KINDS",
    "SPResult",
    "SPPreview",
    "StatisticalSession",
    "parse_prior",
    "sp_ledger_key",
]

#: the ledger event kinds of an SP key (and the only ones it may hold)
SP_KINDS = ("sp-open", "sp-charge")


def sp_ledger_key(schema: Schema) -> str:
    """The SP ledger key of a data set: ``"sp|"`` + its DP key (never equal to a DP key, which is hex only)."""
    from dpmagic.accountant.binding import ledger_key

    return "sp|" + ledger_key(schema)


class StatisticalSession:
    """An SP analysis of one table: secret partition, exact part counts, its own ledger key.  NOT DP.

    Parameters
    ----------
    data, schema:
        the sensitive table and its public schema (as for :class:`dpmagic.Session`); the data is validated on
        binding.  n = the number of rows is **disclosed** (it sets the part sizes).
    prior:
        ``"bernoulli(p)"``, ``"categorical(p_1, …, p_k)"`` or a prior object: the public i.i.d. distribution of the
        prior column.
    parts / sizes:
        m equal parts, or explicit part sizes (Σ ≤ n); one query per part.
    epsilon, delta:
        the ε at which δ is accounted, and the δ target (refused above it).
    column:
        the prior column (default: the schema's only column).
    ledger:
        a :class:`~dpmagic.accountant.ledger.Ledger` or a path (``None``: in memory).
    rng:
        the partition's generator (default: :class:`secrets.SystemRandom`; tests only).
    """

    def __init__(
        self,
        data: pd.DataFrame,
        schema: Schema | str | Path | Mapping[str, Any],
        prior: object,
        *,
        epsilon: float,
        delta: float,
        parts: int | None = None,
        sizes: list[int] | tuple[int, ...] | None = None,
        column: str | None = None,
        ledger: Ledger | str | Path | None = None,
        out_of_range: OutOfRangePolicy = "error",
        rng: Any = None,
    ) -> None:
        self.schema = Schema.of(schema)
        if self.schema.person_unit is not None:  # before anything reads the data or the ledger
            raise ConfigurationError(
                f"the statistical-privacy mode protects one row; this schema's privacy unit is {self.schema.unit_label}",
                hint="use a DP session (dpmagic.Session, %dpbind) for a person-level table",
            )
        if column is None:
            if len(self.schema.names) != 1:
                raise ConfigurationError(
                    f"the schema has {len(self.schema.names)} columns: name the one the prior describes",
                    hint="column='...' (Python) or --column ... (%dpsession)",
                )
            column = self.schema.names[0]
        if column not in self.schema:
            raise ConfigurationError(f"column {column!r} is not declared in the schema")
        self.column = column
        self.prior = parse_prior(prior, self.schema[column])
        self.assumption = prior_text(self.prior, column)
        self._domain = column_domain(self.schema[column])
        self.data = self.schema.validate(data, out_of_range=out_of_range)
        self.backend = PandasBackend(self.data, self.schema)
        self.n = len(self.data)
        self.accountant = StatisticalPrivacyAccountant(
            self.prior, self.n, epsilon=epsilon, delta=delta, parts=parts, sizes=sizes, rng=rng
        )
        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self.ledger_key = sp_ledger_key(self.schema)
        self.token = secrets.token_hex(8)  # public, random: which session owns the key's charges
        self.locked: str | None = None
        self.results: list[SPResult] = []
        self._open()

    # -- ledger ----------------------------------------------------------------------------------------
    def _foreign(self, events: list[Any]) -> str | None:
        """Why this session may not charge, judged from the key's events (None if it may)."""
        other = [e for e in events if e.kind == "sp-charge" and e.body.get("session") != self.token]
        if other:
            return (
                f"this data set already has {len(other)} statistical-privacy charge(s) from an earlier session whose "
                "secret partition is gone (a restart or another kernel): its unused parts count as spent, so no "
                "further SP query can be answered on these rows"
            )
        return None

    def _check_kinds(self, events: list[Any]) -> None:
        wrong = sorted({e.kind for e in events if e.kind not in SP_KINDS})
        if wrong:
            raise ConfigurationError(
                f"the ledger key {self.ledger_key!r} holds {wrong[0]!r} events: it is not a statistical-privacy key, "
                "and SP never shares a budget with differential privacy",
                hint="bind the data set under its own SP key (declare a new 'dataset' id), or use a fresh ledger file",
            )

    def _open(self) -> None:
        if not self.ledger.can_append:
            raise ConfigurationError(
                f"the ledger at {self.ledger.path} is keyed by its custodian: an SP session needs the custodian key",
                hint="the custodian provides it to the kernel: $DPMAGIC_LEDGER_KEY_FILE",
            )
        acc = self.accountant
        with self.ledger.transaction():
            events = self.ledger.events(self.ledger_key)
            self._check_kinds(events)
            self.locked = self._foreign(events)
            self._recorded = max((float(e.body["delta_total"]) for e in events if e.kind == "sp-charge"), default=0.0)
            self.ledger.append(
                self.ledger_key,
                "sp-open",
                {
                    "notion": SP_LABEL,
                    "dataset": self.schema.dataset,
                    "table": self.schema.table,
                    "domain": self.schema.domain_fingerprint(),
                    "column": self.column,
                    "prior": self.assumption,
                    "prior_spec": (
                        {"bernoulli": self.prior.p}
                        if isinstance(self.prior, BernoulliPrior)
                        else {"categorical": [[v, q] for v, q in self.prior.probabilities.items()]}
                    ),
                    "n": self.n,
                    "parts": len(acc.sizes),
                    "sizes": list(acc.sizes),
                    "epsilon": acc.epsilon,
                    "delta_target": acc.delta_target,
                    "session": self.token,
                },
            )

    # -- public state ------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return f"{SP_LABEL}: holds only if the rows are i.i.d. {self.assumption}"

    @property
    def epsilon(self) -> float:
        return self.accountant.epsilon

    @property
    def delta_target(self) -> float:
        return self.accountant.delta_target

    @property
    def delta_spent(self) -> float:
        """δ(ε) charged on this data set's SP key: this session's, or an earlier session's whose parts are lost."""
        return max(self.accountant.delta_spent, self._recorded)

    @property
    def parts(self) -> int:
        return len(self.accountant.sizes)

    @property
    def parts_left(self) -> int:
        return 0 if self.locked else self.accountant.parts_left

    def budget_line(self) -> str:
        return (
            f"δ(ε={self.epsilon:g}) spent {self.delta_spent:.4g} of {self.delta_target:g}; "
            f"{self.parts - self.parts_left} of {self.parts} secret parts used — {self.label}"
        )

    def ledger_frame(self) -> pd.DataFrame:
        """This data set's SP charges as recorded in the ledger (all sessions on the key)."""
        rows = [
            {
                "#": i + 1,
                "query": e.body["sql"],
                "part": e.body["part"] + 1,
                "part size": e.body["part_size"],
                "p": e.body["p"],
                "δ_k": e.body["delta_part"],
                "δ after": e.body["delta_total"],
                "this session": e.body.get("session") == self.token,
            }
            for i, e in enumerate(e for e in self.ledger.events(self.ledger_key) if e.kind == "sp-charge")
        ]
        cols = ["#", "query", "part", "part size", "p", "δ_k", "δ after", "this session"]
        return pd.DataFrame(rows, columns=cols)

    def __repr__(self) -> str:
        return (
            f"StatisticalSession(table {self.schema.table!r}, prior {self.assumption}, n={self.n} (disclosed), "
            f"{self.parts} secret parts, {self.budget_line()}, partition=<secret>)"
            + (f"\nno further queries: {self.locked}" if self.locked else "")
        )

    def _repr_html_(self) -> str:
        return f"<div><b style='color:#b00020'>{html.escape(SP_LABEL)}</b> {html.escape(repr(self))}</div>"

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError("a StatisticalSession holds a secret partition and cannot be pickled or copied")

    def __copy__(self) -> Any:
        raise TypeError("a StatisticalSession holds a secret partition and cannot be copied")

    def __deepcopy__(self, memo: object) -> Any:
        raise TypeError("a StatisticalSession holds a secret partition and cannot be copied")

    # -- queries -----------------------------------------------------------------------------------------
    def parse(self, sql: str) -> tuple[Query, frozenset[object]]:
        """Parse ``sql`` and return it with the set of prior-column values it counts (schema only, no data)."""
        if not isinstance(sql, str):
            raise QueryError(f"the query must be SQL text, got {type(sql).__name__}")
        q = parse_query(sql, self.schema)
        check_categories(q, self.schema)  # a category that is not declared is a typo: refused before any charge
        if q.group_by:
            raise UnsupportedQueryError(
                "GROUP BY is not supported by statistical privacy here: each query uses one secret part",
                hint="ask one COUNT(*) per group, each with its own WHERE",
            )
        if len(q.aggregates) != 1 or q.aggregates[0].func != "count":
            funcs = ", ".join(str(a) for a in q.aggregates)
            raise UnsupportedQueryError(
                f"statistical privacy answers only one COUNT(*) per query, not {funcs}",
                hint="SUM/AVG have no computable SP curve (Breutigam & Reischuk give none): use differential privacy",
            )
        # the whole WHERE: its covering box and, when that is only a cover (an OR or NOT across columns), its exact
        # filter — a column named only inside `smoker = 1 AND (age > 50 OR smoker = 0)` counts too
        used = set(q.where.constraints) | (q.filter.columns if q.filter is not None else set())
        other = sorted(c for c in used if c != self.column)
        if other:
            raise UnsupportedQueryError(
                f"the WHERE clause constrains column {other[0]!r}; the prior describes only column {self.column!r}",
                hint=f"statistical privacy here counts rows by their {self.column!r} value only",
            )
        # the prior-column values the query counts: its row predicate (the DP path's, PandasBackend.row_mask)
        # applied to the public domain, one row per declared value
        domain = PandasBackend(pd.DataFrame({self.column: list(self._domain)}), self.schema)
        values = frozenset(v for v, hit in zip(self._domain, domain.row_mask(q).tolist(), strict=True) if hit)
        if not values or len(values) == len(self._domain):
            raise UnsupportedQueryError(
                f"the WHERE clause selects {'no' if not values else 'every'} value of column {self.column!r}: the "
                f"answer is {'0' if not values else 'n'} whatever the rows are (n = {self.n} is public here)",
                hint="nothing was charged; count a proper subset of the values",
            )
        return q, values

    def _refusal(self) -> None:
        if self.locked:
            raise BudgetExceededError(
                self.locked, hint="nothing was charged; a fresh partition needs fresh data (a new 'dataset' id)"
            )

    def preview(self, sql: str) -> SPPreview:
        """What :meth:`query` would charge, without charging or reading data."""
        _, values = self.parse(sql)
        charge, refused = None, None
        try:
            self._refusal()
            charge = self.accountant.preview(values)
        except BudgetExceededError as exc:
            refused = str(exc)
        return SPPreview(sql, charge, refused, self.n, self.epsilon, self.delta_spent, self.delta_target, self.label)

    def query(self, sql: str) -> SPResult:
        """Charge the next counting query on the ledger, then answer it exactly on its secret part, rescaled.

        Order: parse and check (schema only) → inside one ledger transaction, check that no other session has
        charged this key and that the part and δ target allow it, and append the ``sp-charge`` event (durable
        on return) → record it in the accountant → only then count the part's rows.  Any refusal raises before
        the append and spends nothing.
        """
        q, values = self.parse(sql)
        self._refusal()
        with self.ledger.transaction():
            events = self.ledger.events(self.ledger_key)
            self._check_kinds(events)
            self.locked = self._foreign(events)
            if self.locked:
                self._recorded = max(
                    (float(e.body["delta_total"]) for e in events if e.kind == "sp-charge"), default=0.0
                )
            self._refusal()
            planned = self.accountant.preview(values)
            self.ledger.append(
                self.ledger_key,
                "sp-charge",
                {
                    "notion": SP_LABEL,
                    "sql": q.canonical,
                    "part": planned.part,
                    "part_size": planned.part_size,
                    "p": planned.p,
                    "epsilon": self.epsilon,
                    "delta_part": planned.delta_part,
                    "delta_total": planned.delta_total,
                    "session": self.token,
                },
            )
        charge = self.accountant.charge(values)
        assert charge == planned  # same state, same computation
        backend = self.backend

        def count(idx: Any) -> int:
            return int(backend.row_mask(q)[idx].sum())  # the whole WHERE, exactly as the DP path applies it

        try:
            estimate = self.accountant.answer_part(charge, count)
        except Exception:
            # after the part was read no exception text may leave: one fixed message, the charge stays
            raise DPMagicError(
                "internal error while answering: the query stays charged and nothing was released"
            ) from None
        result = SPResult(
            query=q,
            sql=sql,
            number=len(self.results) + 1,
            estimate=float(estimate),
            part=charge.part,
            part_size=charge.part_size,
            parts=self.parts,
            n=self.n,
            delta_part=charge.delta_part,
            delta_total=charge.delta_total,
            delta_target=self.delta_target,
            epsilon=self.epsilon,
            assumption=self.assumption,
        )
        self.results.append(result)
        return result
