"""The session accountant: a per-row privacy filter charged by the maximum overlap.

For every domain row x, load(x) is the sum of the additive weights (ε, ρ or μ²) of the released mechanisms
whose coverage contains x; the session's privacy loss is max_x load(x) (Smith et al. 2022, Thm. 6).  A query is
admitted only if an *upper bound* of the new maximum load stays within the budget (docs/design.md §2, "The
invariant").  The bound charged is chosen per session:

* ``exact`` (default) — the exact weighted maximum overlap γ_w, or, if the search times out, the best proven
  upper bound (LP / colouring / sequential), and the accountant says so;
* ``clique`` — the exact maximum weight clique ω_w ≥ γ_w;
* ``chromatic`` — the weight of a proper colouring χ_w ≥ ω_w;
* ``sequential`` — Σ w, plain sequential composition.

Person level (``schema.person_unit`` set; docs/people.md §3): a person's loss is the weight of the queries that
touch *any* of their ≤ K′ rows.  A second engine holds the boxes projected on the separating columns (the id and
the invariant columns; :func:`project_box`, applied as a ledger box enters it, so a replay rebuilds the same
state), and the charge is the minimum of three proven bounds (:class:`PersonBounds`): the projected engine's
bound, K′ × the full engine's bound (rounded up), and Σw.  Replace-one person: the pair search on the projected
boxes, K′ × the pair bound on the full boxes, Σw.

Size: one module (≈ 750 lines) because admission, the charge transaction and the ledger fold share one
state — the engines' registered boxes and the budget — that must change together or not at all.

The charged bound is computed first and exactly (``sequential`` runs no overlap search at all; ``chromatic``
only colours); the others are shown as proven bounds computed within a small display budget
(:class:`~dpmagic.overlap.engine.OverlapEngine` ``charged``).  One admission is one computation:
:meth:`Accountant.preview` returns a :class:`Charge` carrying the engine's admission, and
:meth:`Accountant.charge` commits it when no charge was appended since (otherwise it recomputes).  The charge is committed to the :class:`~dpmagic.accountant.ledger.Ledger`
before the caller may read any data.

Threads: one accountant may be used from several threads.  Every method that reads or changes its state (the
engine, the fold of the ledger's events, the charged value) holds :attr:`Accountant.lock`, a re-entrant lock
taken before the ledger's own; a charge — sync with the ledger, admission, the durable append and the
engine's commit — is one critical section under it, so two threads are never admitted on the same remaining
budget and the engine always holds exactly the ledger's charges, in ledger order.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import numpy as np

from dpmagic.accountant.bounds import BoundsSummary
from dpmagic.accountant.currency import Budget, Currency, check_cost
from dpmagic.accountant.ledger import EntryFold, Ledger, LedgerEntry
from dpmagic.domain.schema import NumericColumn, Schema
from dpmagic.domain.sets import Box, box_from_json, box_to_json
from dpmagic.domain.unit import PersonUnit
from dpmagic.errors import BudgetExceededError, ConfigurationError
from dpmagic.overlap import Admission, Bounds, OverlapEngine
from dpmagic.overlap.background import default_solver, start_pump
from dpmagic.overlap.engine import ChargeKind
from dpmagic.overlap.pairs import max_pair_load
from dpmagic.overlap.person import PERSON_MAX_VARS, max_person_load_over
from dpmagic.overlap.rounding import add_up, sum_up

__all__ = [
    "Accountant",
    "BoundsSummary",
    "Charge",
    "QueryGraph",
    "ChargeBound",
    "CHARGE_BOUNDS",
    "Neighbors",
    "NEIGHBORS",
    "PersonBounds",
    "person_bounds",
    "project_box",
]

ChargeBound = ChargeKind  # one definition: dpmagic.overlap.engine
CHARGE_BOUNDS: tuple[ChargeBound, ...] = ("exact", "clique", "chromatic", "sequential")
Neighbors = Literal["add-remove", "replace"]
NEIGHBORS: tuple[Neighbors, ...] = ("add-remove", "replace")

#: Above this many queries the exact replace-one pair search is skipped and min(2·bound, Σw) is charged.
MAX_PAIR_QUERIES = 2000

#: Person level: the time limit (seconds) and size cap (variables) of the exact person-level program per admission
PERSON_EXACT_TIME_LIMIT = 0.5
PERSON_EXACT_MAX_VARS = PERSON_MAX_VARS

#: Relative slack in the budget comparison, so that ten queries of ε = 0.1 fit a budget of ε = 1 despite
#: binary floating point (0.1 * 10 = 1.0000000000000002).  The overshoot it allows is at most 1e-9 · budget.
BUDGET_RTOL = 1e-9


_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """Run ``method`` under its accountant's :attr:`~Accountant.lock`."""

    @functools.wraps(method)
    def wrapper(self: Accountant, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def project_box(box: Box, columns: tuple[str, ...]) -> Box:
    """``box`` projected on ``columns``: only its constraints on them are kept (an empty box stays empty: it
    touches nobody).  A person's rows share one point of the separating columns' projection, so a query whose
    projected box misses that point touches none of the person's rows (docs/people.md §3)."""
    if box.is_empty():
        return box
    return Box({c: s for c, s in box.constraints.items() if c in columns})


@dataclass(frozen=True)
class PersonBounds:
    """Three (four) proven upper bounds of one person's worst-case loss, in additive weights (docs/people.md §3).

    * ``projected`` — the charged bound (γ_w, ω_w, χ_w, or the replace-one pair) of the boxes projected on the
      separating columns (the id and the invariant columns);
    * ``rows`` — K′ × the same bound over the full boxes (a person is at most K′ = ``kept_rows`` points),
      rounded up;
    * ``sequential`` — Σ w;
    * ``exact`` — under the ``exact`` bound and add/remove: max over the admitted queries k of a proven upper
      bound of ``w_k`` + the most a person with a row in query k's box was loaded with before it (the exact
      person-level program, :func:`~dpmagic.overlap.person.max_person_load_over`, or when it was not run the
      minimum of the three after k); None when not computed.  ``term`` is the admitted query's own term.

    The charged value is their minimum (:meth:`charge`); ``note`` says why a query does not compose in
    parallel for people when it would for rows (queries disjoint only on non-separating columns).
    """

    projected: float
    projected_as: str
    rows: float
    rows_as: str
    sequential: float
    kept_rows: int
    separating: tuple[str, ...]
    #: about the query just admitted, not the state (so not compared)
    note: str | None = field(default=None, compare=False)
    exact: float | None = None
    #: about the query just admitted (its term of ``exact``), not the state (so not compared)
    term: float | None = field(default=None, compare=False)

    @property
    def three(self) -> float:
        """The minimum of the projection, K′×γ and Σw bounds."""
        return min(self.projected, self.rows, self.sequential)

    @property
    def which(self) -> Literal["projection", "rows", "sequential", "exact"]:
        """The bound charged: the smallest (ties go to the projection, then K′×γ, then Σw, then the exact)."""
        if self.exact is not None and self.exact < self.three:
            return "exact"
        if self.projected <= self.rows and self.projected <= self.sequential:
            return "projection"
        return "rows" if self.rows <= self.sequential else "sequential"

    def charge(self) -> tuple[float, str]:
        """The charged additive weight (the minimum of the four) and its label."""
        which = self.which
        if which == "exact":
            assert self.exact is not None
            return self.exact, "person: exact"
        if which == "projection":
            return self.projected, f"person: invariant projection ({self.projected_as})"
        if which == "rows":
            return self.rows, f"person: {self.kept_rows}×{self.rows_as}"
        return self.sequential, "person: sequential"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, for the ledger's charge details and the reports."""
        return {
            "projected": self.projected,
            "projected_as": self.projected_as,
            "rows": self.rows,
            "rows_as": self.rows_as,
            "sequential": self.sequential,
            "kept_rows": self.kept_rows,
            "separating": list(self.separating),
            "charged_by": self.which,
            **({"exact": self.exact} if self.exact is not None else {}),
            **({"exact_term": self.term} if self.term is not None else {}),
            **({"note": self.note} if self.note else {}),
        }


def person_bounds(
    unit: PersonUnit,
    row: tuple[float, str],
    projected: tuple[float, str],
    sequential: float,
    note: str | None = None,
    exact: float | None = None,
) -> PersonBounds:
    """The person-level bounds from the charged bound over the full boxes (``row``: value and label, a
    point's or a pair of points' worst case) and over the boxes projected on the separating columns
    (``projected``); K′·row is rounded up (the exact sum of K′ copies); ``exact``: the exact bound, if kept."""
    k = unit.kept_rows
    return PersonBounds(
        projected=projected[0],
        projected_as=projected[1],
        rows=sum_up([row[0]] * k),
        rows_as=row[1],
        sequential=sequential,
        kept_rows=k,
        separating=unit.separating,
        note=note,
        exact=exact,
    )


@dataclass(frozen=True)
class Charge:
    """What admitting one query does (or would do) to the session's charged bound."""

    cost: float
    weight: float
    bound: ChargeBound
    charged_as: str
    before: float
    after: float
    total: float
    overlaps: int
    bounds: Bounds
    admissible: bool
    neighbors: tuple[int, ...] = ()
    worst_row: dict[str, Any] | None = None
    #: the engine's admission behind these numbers: :meth:`Accountant.charge` commits it without solving again
    admission: Admission | None = field(default=None, repr=False, compare=False)
    #: person level: the three bounds of one person's worst case (None for a row-level table)
    person: PersonBounds | None = None
    #: person level: the projected engine's admission (committed with ``admission``)
    person_admission: Admission | None = field(default=None, repr=False, compare=False)

    @property
    def increase(self) -> float:
        """How much the charged additive weight grows."""
        return max(0.0, self.after - self.before)


@dataclass(frozen=True)
class QueryGraph:
    """The charged queries as a graph (:meth:`Accountant.graph`): an edge when two queries can touch the same
    row (``adjacency``, scipy sparse, ``None`` when empty), a proper colouring (``colors``; −1: an empty
    query), the queries covering the worst-case row (``members``) and the additive ``weights``."""

    adjacency: Any
    colors: np.ndarray
    members: tuple[int, ...]
    weights: np.ndarray


class Accountant:
    """Admits queries against a budget by their maximum overlap; records every charge durably."""

    def __init__(
        self,
        budget: Budget,
        schema: Schema,
        *,
        bound: ChargeBound = "exact",
        ledger: Ledger | None = None,
        time_limit: float = 10.0,
        neighbors: Neighbors = "add-remove",
        key: str = "default",
    ) -> None:
        if bound not in CHARGE_BOUNDS:
            raise ConfigurationError(f"unknown bound {bound!r}: choose one of {', '.join(CHARGE_BOUNDS)}")
        if neighbors not in NEIGHBORS:
            raise ConfigurationError(f"unknown neighbouring relation {neighbors!r}: use 'add-remove' or 'replace'")
        #: held by every method that reads or changes the accountant's state (re-entrant; taken before the
        #: ledger's lock, never after it)
        self.lock = threading.RLock()
        self.budget = budget
        self.schema = schema
        self.bound: ChargeBound = bound
        self.neighbors: Neighbors = neighbors
        self.ledger = ledger if ledger is not None else Ledger()
        self.key = key
        self.time_limit = time_limit
        #: the overlap engine over the full boxes (row level: the per-row filter; person level: K′ × its bound)
        self.engine = self._new_engine()
        #: the privacy unit when it is a person (``schema.person_unit``), else None
        self.unit = schema.person_unit
        #: person level: an engine over the boxes projected on the separating columns (docs/people.md §3); the
        #: ledger keeps the full boxes, the projection is applied as they enter it (a replay rebuilds the same)
        self.person_engine: OverlapEngine | None = self._new_engine() if self.unit is not None else None
        #: the background worker's pump (:func:`~dpmagic.overlap.background.start_pump`): between cells it gives the
        #: worker the engines' next pending terms and applies its answers; started by a commit that leaves a problem
        #: in the worker, it ends (``_pump`` None again) when nothing is left; ``pump_error`` is set if a step failed
        self.pump_error: str | None = None
        #: when this accountant last previewed or charged (``time.monotonic``): its pump acts only after
        #: ``PUMP_IDLE`` seconds without either, i.e. between cells
        self.last_active = -math.inf
        self._pump: threading.Thread | None = None
        self._entry_ids: list[int] = []
        #: the recorded time of each charge this accountant made and has not released yet
        self._charge_times: dict[int, float] = {}
        self._fold = EntryFold()
        self._seen = 0
        self._charged = 0.0
        self._charged_as: str = bound
        self._person: PersonBounds | None = None
        #: person level, exact bound, add/remove: the exact person-level bound is kept (docs/people.md §3)
        self.person_exact = self.unit is not None and bound == "exact" and neighbors == "add-remove"
        self.person_exact_time_limit = PERSON_EXACT_TIME_LIMIT
        self.person_exact_max_vars = PERSON_EXACT_MAX_VARS
        #: the exact bound's value: the max of the charges' recorded terms since the last reset (None when a
        #: charge has no term, e.g. one recorded by an older version: then only the three bounds are used)
        self._exact: float | None = 0.0
        self._sync()

    def _fold_term(self, term: float | None) -> float | None:
        """The exact bound after a charge with this recorded term (None: the bound is lost until a reset)."""
        if self._exact is None or term is None or not math.isfinite(term):
            return None
        return max(self._exact, term)

    @_locked
    def background_step(self) -> bool:
        """One step of the background worker's pump for both engines; whether either has a problem in the worker."""
        busy = self.engine.background_step()
        if self.person_engine is not None:
            busy = self.person_engine.background_step() or busy
        return busy

    def _ensure_pump(self) -> None:
        """Start the pump when a commit (a charge, or a replay of the ledger's) left a problem in the worker and none
        runs (it ends when idle; a pump inherited through ``os.fork()`` does not run in the child)."""
        engines = [e for e in (self.engine, self.person_engine) if e is not None]
        running = self._pump is not None and self._pump.is_alive()
        if self.pump_error is None and not running and any(e.background_busy for e in engines):
            self._pump = start_pump(self)

    def _new_engine(self) -> OverlapEngine:
        # under the replace-one relation the pair search needs no γ, but the fallback 2×bound does
        return OverlapEngine(self.schema, time_limit=self.time_limit, charged=self.bound, background=default_solver())

    @_locked
    def _sync(self) -> None:
        """Fold in every event of this key appended since the last look (by this or another process).

        Charges join the overlap engine; a custodian's reset starts it afresh; a budget event changes the
        budget.  Called inside the charging transaction, so a decision always sees every other kernel's
        charges (DESIGN: a per-row filter over *all* released mechanisms).
        """
        events = self.ledger.events(self.key, after=self._seen)
        if not events:
            return
        boxes: list[Box] = []
        weights: list[float] = []
        for ev in events:
            self._fold.apply(ev)
            if ev.kind == "charge":
                boxes.append(box_from_json(ev.body["coverage"], self.schema))
                weights.append(float(ev.body["weight"]))
                self._entry_ids.append(ev.seq)
                term = ev.body.get("details", {}).get("person", {}).get("exact_term")
                self._exact = self._fold_term(None if term is None else float(term))
            elif ev.kind == "reset":
                self._exact = 0.0
                self.engine = self._new_engine()
                if self.unit is not None:
                    self.person_engine = self._new_engine()
                self._entry_ids = []
                boxes, weights = [], []
            elif ev.kind == "budget":
                self.budget = Budget(self.budget.currency, float(ev.body["budget"]), self.budget.delta)
        # Replayed one by one, in ledger order: the engine then holds exactly the state it had before a
        # restart (the colouring bound depends on the order of additions), so every bound is identical.
        for b, w in zip(boxes, weights):
            self.engine.add(b, w)
            if self.person_engine is not None:
                self.person_engine.add(self._project(b), w)
        if boxes:  # a replay (a restart, another kernel's charges) may leave a problem in the worker as a charge does
            self._ensure_pump()
        self._seen = events[-1].seq
        if not any(ev.kind in ("charge", "reset", "budget") for ev in events):
            return  # only releases (of charges already counted): the charged bound is unchanged
        if len(self.engine):
            pb = self.person_engine.bounds() if self.person_engine is not None else None
            self._charged, self._charged_as, self._person = self._charge_value(self.engine.bounds(), pb, None)
        else:
            self._charged, self._charged_as, self._person = 0.0, self.bound, None

    # -- state -----------------------------------------------------------------------------------------
    @property
    def currency(self) -> Currency:
        return self.budget.currency

    @_locked
    def bounds(self) -> Bounds:
        """The four bounds on the current maximum load (additive weights)."""
        return self.engine.bounds()

    @_locked
    def summary(self) -> BoundsSummary:
        """The four bounds, the charged value and the saving, in the session's parameter (for reports)."""
        if len(self.engine) == 0:
            return BoundsSummary(unit=self.schema.unit_label)
        out = BoundsSummary.of(self.engine.bounds(), charged=self._charged, unit=self.budget.currency.cost)
        if self._person is None or self.person_engine is None:
            return out
        person = self._person.to_dict()
        person.pop("note", None)  # about the last query, not the state
        person.pop("exact_term", None)
        w = self.person_engine.bounds().overlap.witness
        person["witness"] = None if w is None else {c: w[c] for c in self._person.separating if c in w}
        return out.with_person(person, self.schema.unit_label, self.budget.currency.cost)

    @_locked
    def graph(self) -> QueryGraph:
        """The charged queries as a graph, for display (read-only; nodes in charging order)."""
        from dpmagic.overlap import overlap_adjacency

        # person level: an edge when two queries can touch the same person (their projected boxes overlap)
        e = self.person_engine if self.person_engine is not None else self.engine
        return QueryGraph(
            adjacency=overlap_adjacency(e.store) if len(e) else None,
            colors=np.asarray(e.coloring()),
            members=tuple(int(i) for i in e.overlap_members()),
            weights=np.asarray(e.weights, dtype=float),
        )

    @property
    def charged_weight(self) -> float:
        """The additive weight currently charged under the session's bound and neighbouring relation."""
        return self._charged

    @property
    def charged_as(self) -> str:
        """Which bound the current charge really is (e.g. ``exact`` or ``overlap-upper`` after a timeout)."""
        return self._charged_as

    def entry_id(self, node: int) -> int:
        """The ledger entry of an engine node."""
        return self._entry_ids[node]

    @property
    def person_bounds(self) -> PersonBounds | None:
        """Person level: the three bounds of the current charge (None for a row-level table or no charge)."""
        return self._person

    def _project(self, box: Box) -> Box:
        assert self.unit is not None
        return project_box(box, self.unit.separating)

    def _charge_value(
        self, bounds: Bounds, pbounds: Bounds | None, extra: tuple[Box, float] | None, note: str | None = None
    ) -> tuple[float, str, PersonBounds | None]:
        """The charged additive weight for the bounds of a query set (plus an optional candidate), its label and,
        at person level, the three bounds it is the minimum of (docs/people.md §3)."""
        value, label = self._unit_value(self.engine, bounds, extra)
        if self.unit is None or self.person_engine is None or pbounds is None:
            return value, label, None
        pextra = (self._project(extra[0]), extra[1]) if extra is not None else None
        projected = self._unit_value(self.person_engine, pbounds, pextra)
        exact = self._exact if self.person_exact and extra is None else None  # a new query's term: see preview
        person = person_bounds(self.unit, (value, label), projected, bounds.sequential, note, exact)
        v, lab = person.charge()
        return v, lab, person

    def _unit_value(self, engine: OverlapEngine, bounds: Bounds, extra: tuple[Box, float] | None) -> tuple[float, str]:
        """The charged bound of one engine's query set: a point's worst case (add/remove) or a pair of points'
        (replace-one)."""
        value, label = bounds.charge(self.bound)
        if self.neighbors == "add-remove":
            return value, label
        if self.bound == "sequential":
            return bounds.sequential, "sequential"
        if len(engine) + (extra is not None) <= MAX_PAIR_QUERIES:
            boxes = engine.boxes + ([extra[0]] if extra else [])
            weights = list(engine.weights) + ([extra[1]] if extra else [])
            pair = max_pair_load(boxes, weights, self.schema)
            if pair is not None:
                return pair.value, "replace-one pair (exact)"
        return min(2.0 * value, bounds.sequential), f"replace-one ≤ 2×{label}"

    @property
    def spent(self) -> float:
        """Charged privacy loss in the session's parameter (ε, ρ or μ)."""
        return self.currency.cost(self.charged_weight)

    @property
    def remaining(self) -> float:
        """Budget left, in the session's parameter, for a query that overlaps the worst-case row."""
        return self.currency.cost(max(0.0, self.budget.total_weight - self.charged_weight))

    def __len__(self) -> int:
        return len(self.engine)

    # -- admission -------------------------------------------------------------------------------------
    def _fits(self, weight: float) -> bool:
        return weight <= self.budget.total_weight * (1.0 + BUDGET_RTOL)

    @_locked
    def preview(self, box: Box, cost: float) -> Charge:
        """What admitting a query with this coverage and cost would charge; changes nothing.

        The returned :class:`Charge` carries the engine's admission: passing it to :meth:`charge` commits it
        without solving the overlap again (unless another process charged in between).
        """
        cost = check_cost(cost, f"the query's {self.currency.parameter}")
        self.last_active = time.monotonic()
        self._sync()
        weight = self.currency.weight(cost)
        before = self.charged_weight
        # the engine searches longer only when its proven interval straddles the budget (replace-one: ≤ 2γ)
        total = self.budget.total_weight if self.neighbors == "add-remove" else self.budget.total_weight / 2.0
        k = self.unit.kept_rows if self.unit is not None else 1
        adm = self.engine.admit(box, weight, budget=total / k)
        after_bounds = adm.bounds
        padm: Admission | None = None
        worst = after_bounds.overlap.witness
        nodes = adm.neighbors
        note = None
        if self.person_engine is not None:
            padm = self.person_engine.admit(self._project(box), weight, budget=total)
            nodes = padm.neighbors  # the queries that may touch one person this query touches
            note = self._fallback_note(box, adm.neighbors, padm.neighbors)
        after, label, person = self._charge_value(
            after_bounds, padm.bounds if padm is not None else None, (box, weight), note
        )
        if person is not None and padm is not None and self.person_exact:
            term = self._exact_term(box, weight, person.three, after_bounds.overlap.lower, padm.neighbors)
            exact = None if self._exact is None else max(self._exact, term)
            person = replace(person, exact=exact, term=term)
            after, label = person.charge()
        if person is not None and padm is not None and person.which == "projection":
            w = padm.bounds.overlap.witness
            worst = None if w is None else {c: w[c] for c in person.separating if c in w}
        neighbors = tuple(map(self._entry_ids.__getitem__, np.asarray(nodes, dtype=np.int64).tolist()))
        return Charge(
            cost=cost,
            weight=weight,
            bound=self.bound,
            charged_as=label,
            before=before,
            after=after,
            total=self.budget.total_weight,
            overlaps=len(neighbors),
            bounds=after_bounds,
            admissible=self._fits(after),
            neighbors=neighbors,
            worst_row=worst,
            admission=adm,
            person=person,
            person_admission=padm,
        )

    def _fallback_note(self, box: Box, row_nodes: np.ndarray, person_nodes: np.ndarray) -> str | None:
        """Why a query does not compose in parallel for people with queries it is disjoint from for rows: they
        are disjoint only on columns that are not constant within a person (names the first such columns)."""
        assert self.unit is not None
        extra = sorted(set(int(i) for i in person_nodes) - set(int(i) for i in row_nodes))
        if not extra:
            return None
        cols: list[str] = []
        for i in extra:
            other = self.engine.boxes[i]
            for c, vs in box.constraints.items():
                t = other.get(c)
                if t is not None and not vs.overlaps(t) and c not in cols:
                    cols.append(c)
        names = ", ".join(repr(c) for c in cols) or "a column that varies within a person"
        n = len(extra)
        return (
            f"disjoint from {n} earlier {'query' if n == 1 else 'queries'} only on non-invariant "
            f"column{'s' if len(cols) > 1 else ''} {names}: a person may have rows on both sides, so they do not "
            "compose in parallel for people"
        )

    @_locked
    def charge(
        self,
        box: Box,
        cost: float,
        *,
        sql: str,
        canonical: str,
        details: dict[str, Any] | None = None,
        preview: Charge | None = None,
        created: float | None = None,
    ) -> tuple[int, Charge]:
        """Admit and durably record a query, or raise :class:`BudgetExceededError` and change nothing.

        The check and the charge are one ``BEGIN IMMEDIATE`` transaction that first reads every charge other
        processes have made on this ledger key, so concurrent kernels can never together overspend.
        ``preview``: a :meth:`preview` of this very (box, cost), computed before the transaction; it is reused
        when the engine did not change since (no charge was appended by anyone), else recomputed inside.
        ``created``: the charge's recorded time (default: now; a release that reads several times passes the time
        it was asked, taken before its first read).  Under :attr:`lock` from the sync to the engine's commit.
        """
        with self.ledger.transaction():
            self._sync()
            ch = self._reuse(preview, box, cost) if preview is not None else None
            if ch is None:
                ch = self.preview(box, cost)
            if not ch.admissible:
                raise self._refusal(ch, box)
            event = self.ledger.append_event(
                self.key,
                "charge",
                {
                    "sql": sql,
                    "canonical": canonical,
                    "coverage": box_to_json(box),
                    "cost": ch.cost,
                    "weight": ch.weight,
                    "bound": ch.charged_as,
                    "charged_after": ch.after,
                    "details": {
                        "bounds": BoundsSummary.of(ch.bounds).to_dict(session=False),
                        **({"person": ch.person.to_dict()} if ch.person is not None else {}),
                        **(details or {}),
                    },
                },
                created=created,
            )
        entry_id = event.seq
        self._charge_times[entry_id] = event.created
        self._fold.apply(event)
        assert ch.admission is not None
        self.engine.commit(ch.admission)  # recomputes only if the engine changed since the admission
        if self.person_engine is not None:
            assert ch.person_admission is not None
            self.person_engine.commit(ch.person_admission)
        self.last_active = time.monotonic()
        self._ensure_pump()
        self._entry_ids.append(entry_id)
        self._seen = max(self._seen, entry_id)
        self._charged, self._charged_as, self._person = ch.after, ch.charged_as, ch.person
        if self.person_exact:
            self._exact = self._fold_term(ch.person.term if ch.person is not None else None)
        # the committed admission is the engine's state now: the returned charge (kept with the session's results)
        # does not hold it — its pending terms keep their paused searches (≈ 10 MB each on 10,000 registered
        # queries), and results holding them made a long session's memory grow with every hard admission
        return entry_id, replace(ch, admission=None, person_admission=None)

    def _exact_term(self, box: Box, weight: float, three: float, lower: float, nodes: np.ndarray) -> float:
        """A proven upper bound of the admitted query's term: ``weight`` + the most a person with a row in
        ``box`` is loaded with now (docs/people.md §3, the exact bound).  ``three``: the minimum of the three
        bounds after the query (an upper bound of every person's load, so of the term); ``lower``: a proven lower
        bound of the maximum person load after it (one row's witness); ``nodes``: the queries whose projection
        meets the box's (the only ones that can touch such a person).  The program is only run when it can lower
        the charge (``three`` above ``lower``), within ``person_exact_time_limit`` and ``person_exact_max_vars``."""
        assert self.unit is not None
        if box.is_empty():
            return 0.0  # it touches nobody
        if len(nodes) == 0:
            return weight  # nobody it touches was touched before
        if three <= lower:
            return three  # already exact: nothing to gain
        r = self._person_region(box, nodes)
        return three if r is None else min(three, add_up(weight, r))

    def _person_region(self, box: Box, nodes: np.ndarray) -> float | None:
        """A proven upper bound of the most a person with a row in ``box`` is loaded with now (the exact
        person-level program over ``nodes``), or None when it is too large or found no bound in time."""
        assert self.unit is not None
        res = max_person_load_over(
            self.engine.store,
            nodes,
            box,
            self.unit.separating,
            self.unit.kept_rows,
            time_limit=self.person_exact_time_limit,
            max_vars=self.person_exact_max_vars,
        )
        return None if res is None else res.upper

    def _reuse(self, preview: Charge, box: Box, cost: float) -> Charge | None:
        """``preview`` refreshed against the current budget, if it is still this engine's admission of (box, cost)."""
        adm = preview.admission
        if adm is None or adm.state != self.engine.state or adm.charged != self.engine.charged:
            return None
        if self.person_engine is not None:
            padm = preview.person_admission
            if padm is None or padm.state != self.person_engine.state:
                return None
        if adm.box != box or check_cost(cost, f"the query's {self.currency.parameter}") != preview.cost:
            return None
        total = self.budget.total_weight  # a budget event changes no engine state: re-check the fit
        return replace(preview, before=self.charged_weight, total=total, admissible=self._fits(preview.after))

    def _refusal(self, ch: Charge, box: Box) -> BudgetExceededError:
        """The refusal of an inadmissible charge: what it costs, what it would raise the loss to, and what is left
        on its region (nothing left: say so, rather than suggest a lower cost)."""
        cur = self.currency
        # capped like an admission (below 1 s): the message's "what is left" is a proven lower estimate either way
        left = self.affordable(box, time_limit=self.engine.near_time_limit)
        if left <= 1e-9 * self.budget.total:  # float crumbs of a spent budget are nothing left
            left = 0.0
            if self.bound != "exact" or self.neighbors == "replace":  # every query is charged against all of it
                hint = (
                    f"the budget is spent ({self.bound} bound): nothing more can be released in this session "
                    "unless the data custodian raises the budget"
                )
            else:
                hint = (
                    f"no {cur.parameter} is left on this part of the domain, so no cost can be admitted there; a "
                    "query on a region with budget left still can (the budget map shows where), or the data "
                    "custodian can raise the budget"
                )
        else:
            hint = (
                f"lower the cost to at most {cur.format(left)}, narrow the WHERE clause to a region with more "
                "budget left, or stop here"
            )
        what = "the charged privacy loss" if self.unit is None else "one person's worst-case privacy loss"
        return BudgetExceededError(
            f"refused: this query costs {cur.format(ch.cost)} and would raise {what} "
            f"({self.bound} bound) from {_fmt(cur.cost(ch.before))} to {_fmt(cur.cost(ch.after))}, "
            f"above the budget {cur.parameter}={_fmt(self.budget.total)}; at most "
            f"{cur.format(left)} is left for a query on this part of the domain",
            hint=hint,
        )

    @_locked
    def affordable(self, box: Box, *, time_limit: float | None = None) -> float:
        """The largest cost a query on ``box`` could be given now (budget minus max current load on it).

        ``time_limit`` caps each load search (default: the engine's ``time_limit``); a capped search's upper end is
        still proven, so the answer stays a safe lower estimate, only less tight.

        Under the ``exact`` bound this is budget − max_{x ∈ box} load(x): queries on fresh regions can get the
        full budget.  Under the other bounds it is the budget minus the charged bound (a safe lower estimate).
        """
        self._sync()
        if self.unit is not None and len(self.engine):
            return self.currency.cost(max(0.0, self._person_left(box, time_limit)))
        if self.bound != "exact" or self.neighbors == "replace" or len(self.engine) == 0:
            left = self.budget.total_weight - self.charged_weight
        elif not self._fits(self.charged_weight):
            left = 0.0
        else:
            # the new maximum is max(γ_old, w + max load on the box): only the box's own load matters
            left = self.budget.total_weight - max(self.engine.max_load_over(box, time_limit=time_limit).upper, 0.0)
        return self.currency.cost(max(0.0, left))

    def _person_left(self, box: Box, time_limit: float | None = None) -> float:
        """Person level: the largest additive weight a query on ``box`` can have so that the minimum of the three
        bounds after it stays within the budget.  The minimum is within the budget iff one of the bounds is, and
        each grows monotonically with the weight, so the answer is the largest of the three allowances:

        * projection: max(γ_old, w + max load over the projected box) ≤ B  ⇔  γ_old ≤ B and w ≤ B − that load;
        * K′ × γ over full boxes: w ≤ B/K′ − max load over the box (when K′·γ_old ≤ B);
        * sequential: w ≤ B − Σw.

        Under a bound other than ``exact``, or replace-one, a bound grows by at most w (K′·w) per query: the
        allowances are B − bound (B/K′ − bound).  Each allowance is a lower estimate (loads are upper bounds)."""
        assert self.unit is not None and self.person_engine is not None
        budget = self.budget.total_weight
        k = self.unit.kept_rows
        # read as they are: no display refinement (it would tighten γ in place, and a refusal must change nothing)
        pb, fb = self.person_engine.bounds(refine=False), self.engine.bounds(refine=False)
        pv, _ = self._unit_value(self.person_engine, pb, None)
        fv, _ = self._unit_value(self.engine, fb, None)
        allow = [budget - fb.sequential]
        if self.bound == "exact" and self.neighbors == "add-remove":
            if self._fits(pv):
                proj = self.person_engine.max_load_over(self._project(box), time_limit=time_limit)
                allow.append(budget - max(proj.upper, 0.0))
            if self._fits(sum_up([fv] * k)):
                allow.append(budget / k - max(self.engine.max_load_over(box, time_limit=time_limit).upper, 0.0))
        else:
            allow += [budget - pv, budget / k - fv]
        if self.person_exact and self._exact is not None and self._fits(self._exact):
            # exact: max(E_old, w + R) ≤ B with R the exact program's bound over the box
            r = self._person_region(box, self.person_engine.neighbors(self._project(box)))
            if r is not None:
                allow.append(budget - r)
        return max(allow)

    def record_release(self, entry_id: int, answer: Any) -> None:
        """Append the released answer of a charged entry, with its charge's time: no clock is read after the data
        was (the release's time minus the charge's would time the read, issue 24).  Not under :attr:`lock`
        (the ledger has its own): a release never holds up another thread's admission."""
        created = self._charge_times.pop(entry_id, None)
        if created is None:
            raise ConfigurationError(f"entry {entry_id} was not charged by this accountant: nothing to release")
        self.ledger.append(self.key, "release", {"entry": entry_id, "answer": answer}, created=created)

    @_locked
    def entries(self) -> list[LedgerEntry]:
        """This key's charges that count toward the budget now, with their releases (kept incrementally)."""
        self._sync()
        return list(self._fold.entries.values())

    @_locked
    def entry(self, entry_id: int) -> LedgerEntry | None:
        return self._fold.entries.get(entry_id)

    @_locked
    def released_entry(self, cache_key: str) -> LedgerEntry | None:
        """The released entry of an identical earlier query (same cache key), if any."""
        self._sync()
        return self._fold.released(cache_key)

    @_locked
    def load_map(self, first: str, second: str) -> tuple[list[Any], list[Any], list[list[float]]]:
        """Current maximum load of every (first, second) cell, maximised over the other columns.

        Categorical columns use their declared values; numeric columns use the elementary intervals between
        the registered queries' endpoints (labelled as intervals).  Returns (row labels, column labels,
        loads as additive weights).
        """
        for c in (first, second):
            if c not in self.schema:
                raise ConfigurationError(f"unknown column {c!r} for the budget map")
        if first == second:
            raise ConfigurationError("the budget map needs two different columns")
        a_labels, a_sets = _cells_of(self.schema, first, self.engine.boxes)
        b_labels, b_sets = _cells_of(self.schema, second, self.engine.boxes)
        grid = [[self._cell_load(Box({first: sa, second: sb})) for sb in b_sets] for sa in a_sets]
        return a_labels, b_labels, grid

    def _cell_load(self, cell: Box) -> float:
        """The maximum load over a cell (row level), or at person level a proven upper bound of the load of any
        person with a row in the cell: min(the projected engine's max load over the projected cell, K′·γ, Σw)."""
        if not len(self.engine):
            return 0.0
        row = self.engine.max_load_over(cell).upper
        if self.unit is None or self.person_engine is None:
            return row
        fb = self.engine.bounds()
        proj = self.person_engine.max_load_over(self._project(cell)).upper
        bounds = [proj, sum_up([fb.overlap.upper] * self.unit.kept_rows), fb.sequential]
        if self.person_exact and self._exact is not None:
            bounds.append(self._exact)  # every person's load is within it
        return min(bounds)


def _cells_of(schema: Schema, name: str, boxes: list[Box]) -> tuple[list[Any], list[Any]]:
    """Labels and value sets of the cells of one column for the budget map."""
    from dpmagic.domain.sets import CategorySet, Interval, IntervalSet

    col = schema[name]
    if not isinstance(col, NumericColumn):
        return list(col.values), [CategorySet(col, 1 << i) for i in range(col.size)]
    keys: set[tuple[float | int, int]] = {(col.lower, 0), (col.upper, 2)}  # exact ints on int columns
    for b in boxes:
        s = b.get(name)
        if isinstance(s, IntervalSet):
            for iv in s.intervals:
                keys.add((iv.lo, 0 if iv.lo_closed else 1))
                keys.add((iv.hi, 2 if iv.hi_closed else 1))
    # elementary pieces: points {v} and open gaps between consecutive endpoint values
    points = sorted({k for k, _ in keys})
    pieces: list[Interval] = []
    for i, v in enumerate(points):
        pieces.append(Interval(v, v))
        if i + 1 < len(points):
            pieces.append(Interval(v, points[i + 1], False, False))
    sets = [t for iv in pieces if not (t := IntervalSet.of(col, [iv])).is_empty()]
    # merge neighbouring pieces that no registered query tells apart
    constraining = [vs for b in boxes if isinstance(vs := b.get(name), IntervalSet)]
    merged: list[IntervalSet] = []
    last_sig: tuple[bool, ...] | None = None
    for piece in sets:
        sig = tuple(c.contains(piece.some_value()) for c in constraining)
        if merged and sig == last_sig:
            merged[-1] = merged[-1].union(piece)
        else:
            merged.append(piece)
        last_sig = sig
    return [str(s) for s in merged], merged


def _fmt(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else str(x)
