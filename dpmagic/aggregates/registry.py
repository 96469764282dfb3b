"""The registry of aggregate units: one typed class per aggregate kind, looked up by the kind's name.

Every kind a :class:`~dpmagic.query.model.Aggregate` can name (its ``func``) has exactly one
:class:`AggregateUnit` here, which declares everything the layers above need of it, so that no caller branches
on the kind's name (the strategy tables of networkx, Tumult Analytics' one class per aggregate):

* :attr:`~AggregateUnit.releases` — noisy releases per GROUP BY cell it needs alone, and
  :attr:`~AggregateUnit.quantities` — the shared quantities (cell count, raw or centred sum, centred sum of
  squares) it is computed from: the query's cost is split over its *distinct* releases
  (:func:`releases_per_cell`; :mod:`dpmagic.aggregates.moments` chooses the split);
* :meth:`~AggregateUnit.plan` — its calibration at a per-release cost, from the schema and the query alone
  (no data);
* :meth:`~AggregateUnit.exact` — its exact inputs on the pandas backend (from column arrays and cell codes over
  every row), and :meth:`~AggregateUnit.sql` / :meth:`~AggregateUnit.read` — the per-row values and SQL
  aggregates it needs from an engine's compiler and how it reads them back (the same numbers, bit for bit);
* :meth:`~AggregateUnit.release` — noise and its 95% interval (NaN where none is stated);
* :meth:`~AggregateUnit.sensitivities` — the sensitivity of each of its integer releases, brute-force checked
  by the conformance suite (``tests/conformance.py``).

COUNT, SUM and AVG share one release of the cell counts and one per summed column (an AVG is a SUM over a
COUNT): they are the *basic* family (:mod:`dpmagic.aggregates.basic`), planned and released together by
:mod:`dpmagic.releases.plan`; their units declare their releases, sensitivities and answers, the shared path
does the rest.  Every other kind is self-contained.

:func:`unit_for` raises :class:`UnknownAggregateError` for a kind nobody registered — never a fall-through to
another kind.  Adding an aggregate is one module: a subclass of :class:`AggregateUnit` and a call to
:func:`register` (which also declares the kind to the query layer, :func:`dpmagic.query.kinds.declare`), plus
its brute-force test.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from dpmagic.errors import UnsupportedQueryError
from dpmagic.query.kinds import AggregateKind, declare, distinct_releases

if TYPE_CHECKING:
    from sqlglot import exp

    from dpmagic.accountant.currency import Definition
    from dpmagic.aggregates.common import CellCalibration
    from dpmagic.domain.schema import Schema
    from dpmagic.noise.sensitivity import Coverage
    from dpmagic.query.model import Aggregate, Query

__all__ = [
    "AggregateUnit",
    "PlanContext",
    "SqlInputs",
    "SqlResults",
    "UnitPlan",
    "UnknownAggregateError",
    "register",
    "registered",
    "releases_per_cell",
    "unit_for",
]

Interval = tuple[np.ndarray, np.ndarray, np.ndarray]


class UnknownAggregateError(UnsupportedQueryError):
    """An aggregate kind no unit is registered for (raised before any charge)."""


@dataclass(frozen=True)
class PlanContext:
    """Everything public a unit's plan may read: the query, the schema, the definition, the per-release cost
    ``share``, the relation, the per-cell calibration and the query's coverage — never a row."""

    query: Query
    schema: Schema
    definition: Definition
    share: float
    replace_one: bool
    calibration: CellCalibration
    coverage: Coverage


@dataclass(frozen=True)
class UnitPlan:
    """The fixed-before-data plan of one aggregate: its unit's calibration (``plan``) and the public value range
    [lo, hi] it works in (when it has one)."""

    agg: Aggregate
    plan: Any
    lo: float = 0.0
    hi: float = 0.0

    @property
    def unit(self) -> AggregateUnit:
        return unit_for(self.agg.func)

    def describe(self) -> dict[str, str]:
        """Noise descriptions by release name (shown with the answer)."""
        return self.unit.describe(self)


class SqlInputs(Protocol):
    """What an engine's compiler offers a unit while it builds the one aggregate statement of a query."""

    dialect: str

    def value(self, v: Any) -> str:
        """Add a per-row value (an expression over the normalised view's columns, a
        :class:`~dpmagic.aggregates.sqlexpr.Quantised` or a :class:`~dpmagic.aggregates.quantile_unit.Binned`);
        returns the name of its column in the rows the aggregates read."""
        ...

    def aggregate(self, name: str, expr: exp.Expr) -> None:
        """Add one aggregate (over the rows' columns) computed per cell, read back with :meth:`SqlResults.per_cell`."""
        ...

    def exact_sum(self, name: str, column: str, bound: int) -> None:
        """Add the exact per-cell Σ of the BIGINT column ``column`` whose values satisfy |v| ≤ ``bound``."""
        ...


class SqlResults(Protocol):
    """What an engine returns to a unit after the statement ran."""

    counts: np.ndarray

    def per_cell(self, name: str) -> list[int]:
        """An aggregate (or exact sum) added under ``name``, per declared cell (0 in a cell no row reached)."""
        ...

    def histogram(self, column: str, width: int) -> np.ndarray:
        """Each cell's counts of the integer per-row value ``column`` in 0..width−1 (``n_cells × width``), from
        one more aggregate over every row."""
        ...


class AggregateUnit(ABC):
    """One aggregate kind: its plan, exact inputs on every backend, release and sensitivity."""

    #: the :attr:`Aggregate.func <dpmagic.query.model.Aggregate.func>` it answers
    kind: ClassVar[str]
    #: noisy releases per GROUP BY cell
    releases: ClassVar[int]
    #: a member of the shared counts-and-sums family (:mod:`dpmagic.aggregates.basic`)
    basic: ClassVar[bool] = False
    #: the shared quantities it is computed from (:class:`~dpmagic.query.kinds.AggregateKind`); empty: its
    #: releases are its own and it is planned alone (:meth:`plan`)
    quantities: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def plan(self, agg: Aggregate, ctx: PlanContext) -> UnitPlan:
        """The calibration of the aggregate's releases (no data read)."""

    def describe(self, u: UnitPlan) -> dict[str, str]:
        """Noise descriptions by release name."""
        return {str(u.agg): str(u.plan)}

    @abstractmethod
    def exact(self, u: UnitPlan, values: np.ndarray, cell: np.ndarray, n_cells: int) -> Any:
        """The exact inputs on the pandas backend: ``values`` the column on *every* row, ``cell`` each row's cell
        (``n_cells`` for rows outside the filter: the discarded bin) — the work never depends on the box."""

    @abstractmethod
    def sql(self, u: UnitPlan, alias: str, b: SqlInputs) -> Any:
        """Declare the per-row values and aggregates needed from an engine; returns what :meth:`read` needs."""

    @abstractmethod
    def read(self, u: UnitPlan, alias: str, handle: Any, r: SqlResults) -> Any:
        """The exact inputs from the engine's results (equal to :meth:`exact`'s)."""

    @abstractmethod
    def release(self, u: UnitPlan, inputs: Any, level: float = 0.95) -> Interval:
        """(value, ci_low, ci_high) per cell: noise from OpenDP's exact samplers."""

    def halfwidth(self, u: UnitPlan, level: float = 0.95) -> float:
        """The largest half-width of its ``level`` interval, known before any data (for ``--ci`` targets)."""
        from dpmagic.errors import ConfigurationError

        raise ConfigurationError(
            f"an accuracy target (--ci) is not available for {self.kind.upper()}: give a cost instead",
            hint="use --epsilon / --rho / --mu",
        )

    def engine_groups(self, u: UnitPlan, n_cells: int) -> int:
        """A bound on the groups of any extra statement it makes an engine run (0: none)."""
        return 0

    def sensitivities(self, u: UnitPlan) -> dict[str, Any]:
        """The calibrated noise (a :class:`~dpmagic.noise.calibration.Noise`, whose ``calibrated`` change and
        ``cells`` the noise covers) of each of its integer releases by name: what the conformance suite checks
        against brute force.  Empty for a release whose cost is an OpenDP privacy map, not a sensitivity (a
        quantile)."""
        return {}

    def integer_releases(self, u: UnitPlan, inputs: Any) -> dict[str, list[int]]:
        """The exact per-cell integer vectors noised by each release of :meth:`sensitivities` (same names), from
        :meth:`exact`'s inputs."""
        return {}


_UNITS: dict[str, AggregateUnit] = {}


def register(unit: AggregateUnit, *, replace: bool = False) -> AggregateUnit:
    """Register ``unit`` for its kind (declaring the kind to the query layer); a kind is registered once
    (``replace`` for tests that swap a unit)."""
    if unit.kind in _UNITS and not replace and type(_UNITS[unit.kind]) is not type(unit):
        raise ValueError(f"aggregate kind {unit.kind!r} is already registered ({type(_UNITS[unit.kind]).__name__})")
    if not isinstance(unit.releases, int) or unit.releases < 1:
        raise ValueError(f"an aggregate unit needs at least one release, not {unit.releases!r}")
    declare(AggregateKind(unit.kind, unit.releases, unit.basic, unit.quantities))
    _UNITS[unit.kind] = unit
    return unit


def unregister(kind: str) -> None:
    """Remove a kind (tests registering a toy unit clean up with it)."""
    from dpmagic.query.kinds import undeclare

    _UNITS.pop(kind, None)
    undeclare(kind)


def unit_for(kind: str) -> AggregateUnit:
    """The unit of ``kind``; :class:`UnknownAggregateError` if none is registered."""
    unit = _UNITS.get(kind)
    if unit is None:
        raise UnknownAggregateError(
            f"no aggregate unit is registered for {kind!r}",
            hint="known aggregates: " + ", ".join(sorted(_UNITS)),
        )
    return unit


def registered() -> Mapping[str, AggregateUnit]:
    """Every registered unit by kind (read-only view)."""
    return dict(_UNITS)


def releases_per_cell(query: Query) -> int:
    """Distinct noisy releases per cell of ``query``: a quantity shared by several aggregates (the cell count of
    COUNT and AVG; n, S and Q of VAR and STDDEV of one column) counts once, a unit without shared quantities
    its own :attr:`~AggregateUnit.releases` (:func:`dpmagic.query.kinds.distinct_releases`)."""
    for a in query.aggregates:
        unit_for(a.func)  # an unknown kind is refused here
    return distinct_releases(query.aggregates)
