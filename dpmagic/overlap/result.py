"""The one result type of :mod:`dpmagic.overlap`: a proven interval ``[lower, upper]`` of a maximum (γ, ω, a
region's load), with the members realising ``lower`` and, for γ, a witness row (issue 12: one type instead of
four)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["OverlapResult", "CliqueResult"]


@dataclass(frozen=True)
class OverlapResult:
    """Result of a maximum-overlap (or maximum-clique) computation.

    ``lower`` is the exact weight of ``members`` (rounded down; for γ the load of ``witness``, a concrete row, one
    value per constrained column); ``upper`` is a proven upper bound (charge this); ``exact`` when they meet
    (:func:`~.rounding.is_exact`).  ``method`` names the steps that produced it, ``seconds`` their wall time.
    """

    lower: float
    upper: float
    exact: bool
    witness: dict[str, Any] | None = None
    members: tuple[int, ...] = ()
    method: str = ""
    seconds: float = 0.0

    @property
    def value(self) -> float:
        """The value an accountant charges: ``upper``."""
        return self.upper


#: the maximum-weight clique's result is the same type (``witness`` is None)
CliqueResult = OverlapResult
