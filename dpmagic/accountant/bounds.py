"""The four bounds of a set of charges as one value, with its one serialisation.

The overlap engine computes ``γ_w ≤ ω_w ≤ χ_w ≤ Σw`` in additive weights (:class:`dpmagic.overlap.Bounds`,
which also carries the engine's search state); everything that *reports* them — the session
(:meth:`dpmagic.Session.bounds_summary`), the ledger's charge events, ``%dpbudget``, the live panel, the plots
and ``dpmagic overlap`` — goes through :class:`BoundsSummary`: converted once (:meth:`BoundsSummary.of`),
serialised once (:meth:`BoundsSummary.to_dict` / :meth:`BoundsSummary.from_dict`; the CLI's JSON contract is
:meth:`BoundsSummary.to_cli`), rendered once (:func:`dpmagic.session.rendering.bounds_text`,
:func:`dpmagic.session.rendering.bounds_html`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpmagic.overlap import Bounds

__all__ = ["BoundsSummary"]


def _plain(obj: Any) -> Any:
    """A JSON-able copy of a witness row (numpy scalars → Python numbers, keys → str)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if hasattr(obj, "item"):
        return obj.item()
    return obj


@dataclass(frozen=True)
class BoundsSummary:
    """The four bounds in one unit (additive weights, or a session's parameter ε / ρ / μ), with the charged
    value, the saving versus sequential composition and the worst-case row.

    ``saving`` = 1 − charged / sequential, computed on the additive weights (so it is the same whatever the
    display unit).  ``clique`` is a proven upper bound of ω when not ``clique_exact``; ``overlap_upper`` is
    what an accountant charging the exact bound charges on a row-level table.

    Person level (docs/people.md §3, §4): ``unit`` is the privacy unit in words
    (:attr:`~dpmagic.domain.schema.Schema.unit_label`) and ``person`` the three bounds of one person's worst case
    in the display unit (``projected``, ``rows``, ``sequential``, and ``exact`` when the exact person-level bound is
    kept, with ``charged_by``: ``projection``, ``rows``, ``sequential`` or ``exact``, ``kept_rows`` K′ and the
    ``separating`` columns); the four bounds then describe rows, and
    ``witness`` is one person's worst case (their separating values) when the projection is charged.
    """

    sequential: float = 0.0
    chromatic: float = 0.0
    clique: float = 0.0
    clique_exact: bool = True
    overlap_lower: float = 0.0
    overlap_upper: float = 0.0
    overlap_exact: bool = True
    witness: dict[str, Any] | None = None
    charged: float = 0.0
    saving: float = 0.0
    unit: str = "one row"
    person: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "witness", _plain(self.witness))  # JSON-able whatever built it
        if self.person is not None:
            object.__setattr__(self, "person", _plain(dict(self.person)))

    @property
    def worst_label(self) -> str:
        """What the witness is: "one person's worst case" at person level, else "worst-case row"."""
        return "one person's worst case" if self.person is not None else "worst-case row"

    def with_person(
        self, person: Mapping[str, Any], unit_label: str, unit: Callable[[float], float] = float
    ) -> BoundsSummary:
        """This summary at person level: ``person`` is :meth:`~dpmagic.accountant.accountant.PersonBounds.to_dict`
        (additive weights, converted here by ``unit``); the witness becomes the person's separating values when
        the projection is charged (``person_witness``)."""
        p = {k: v for k, v in person.items() if k != "witness"}
        for key in ("projected", "rows", "sequential", "exact"):
            if key in p:
                p[key] = unit(float(p[key]))
        witness = person.get("witness") if p.get("charged_by") == "projection" else self.witness
        return replace(self, unit=unit_label, person=p, witness=witness)

    @classmethod
    def of(
        cls,
        bounds: Bounds | None,
        *,
        charged: float | None = None,
        unit: Callable[[float], float] = float,
    ) -> BoundsSummary:
        """From the engine's bounds (``None``: no charges yet, every bound 0).  ``charged`` is the charged
        additive weight (default: the overlap's upper bound); ``unit`` converts a weight to the display unit
        (a :class:`~dpmagic.accountant.currency.Currency`'s ``cost``; default: weights as they are)."""
        if bounds is None:
            return cls()
        o = bounds.overlap
        w = o.upper if charged is None else charged
        return cls(
            sequential=unit(bounds.sequential),
            chromatic=unit(bounds.chromatic),
            clique=unit(bounds.clique),
            clique_exact=bool(bounds.clique_exact),
            overlap_lower=unit(o.lower),
            overlap_upper=unit(o.upper),
            overlap_exact=bool(o.exact),
            witness=o.witness,
            charged=unit(w),
            saving=0.0 if bounds.sequential <= 0 else 1.0 - w / bounds.sequential,
        )

    def rounded(self, clean: Callable[[float], float]) -> BoundsSummary:
        """Every amount passed through ``clean`` (display rounding; :func:`dpmagic.session.rendering.clean`)."""
        amounts: dict[str, Any] = {
            f.name: clean(v) for f in fields(self) if isinstance(v := getattr(self, f.name), float)
        }
        if self.person is not None:
            amounts["person"] = {
                k: clean(v) if k in ("projected", "rows", "sequential", "exact") else v for k, v in self.person.items()
            }
        return replace(self, **amounts)

    # -- the one serialisation ----------------------------------------------------------------------------
    def to_dict(self, *, session: bool = True) -> dict[str, Any]:
        """The JSON-able dict (keys as the fields).  ``session=False`` leaves out ``charged`` and ``saving``
        (a ledger charge event records the engine's bounds only)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if not session:
            del d["charged"], d["saving"]
        if d["person"] is None:  # a row-level summary keeps its established keys
            del d["person"], d["unit"]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BoundsSummary:
        """The inverse of :meth:`to_dict` (missing keys take their defaults)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_cli(self) -> dict[str, Any]:
        """The bound keys of ``dpmagic overlap --json`` (docs/design.md, the CLI contract): the same values
        under the contract's names; ``max_overlap.value`` is the charged upper bound."""
        return {
            "sequential": self.sequential,
            "max_overlap": {
                "value": self.overlap_upper,
                "lower": self.overlap_lower,
                "upper": self.overlap_upper,
                "exact": self.overlap_exact,
                "witness": self.witness,
            },
            "clique": {"value": self.clique, "exact": self.clique_exact},
            "chromatic": {"value": self.chromatic},
            "utility_gain": self.saving,
            **({"unit": self.unit, "person": self.person, "charged": self.charged} if self.person is not None else {}),
        }

    @classmethod
    def from_cli(cls, d: Mapping[str, Any]) -> BoundsSummary:
        """The inverse of :meth:`to_cli`."""
        o = d["max_overlap"]
        return cls(
            sequential=d["sequential"],
            chromatic=d["chromatic"]["value"],
            clique=d["clique"]["value"],
            clique_exact=d["clique"]["exact"],
            overlap_lower=o["lower"],
            overlap_upper=o["upper"],
            overlap_exact=o["exact"],
            witness=o["witness"],
            charged=d.get("charged", o["value"]),
            saving=d["utility_gain"],
            unit=d.get("unit", "one row"),
            person=d.get("person"),
        )
