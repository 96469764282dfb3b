"""OpenDP's exact vector samplers: every additive noise dpmagic releases is drawn from a measurement built here.

One factory, cached by (kind, scale), for the four additive families in use:

* ``discrete_laplace`` / ``discrete_gaussian`` — integers (``i64``): COUNT and exact integer or quantised SUM
  cells (:func:`dpmagic.noise.calibration.release_integer`), decision-query reads of integer statistics;
* ``laplace`` / ``gaussian`` — floats (``f64``, no NaN): the matrix mechanism's strategy answers
  (:mod:`dpmagic.batch.release`) and decision-query reads of float statistics.

OpenDP samples the discrete distributions exactly and the float ones by its exact (bit-level) constructions
(Canonne, Kamath, Steinke, "The discrete Gaussian for differential privacy", NeurIPS 2020; OpenDP's
``make_laplace`` / ``make_gaussian``).  The exponential mechanism of the quantiles (``make_noisy_max``) is the
one non-additive sampler; it lives with its scorer in :mod:`dpmagic.aggregates.quantile`.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Literal

import opendp.prelude as dp

dp.enable_features("contrib")

__all__ = ["SamplerKind", "vector_measurement"]

#: an additive noise family and its value type
SamplerKind = Literal["discrete_laplace", "discrete_gaussian", "laplace", "gaussian"]

_KINDS: dict[str, tuple[str, bool]] = {
    "discrete_laplace": ("laplace", True),
    "discrete_gaussian": ("gaussian", True),
    "laplace": ("laplace", False),
    "gaussian": ("gaussian", False),
}


@lru_cache(maxsize=512)
def vector_measurement(kind: str, scale: float) -> dp.Measurement:
    """OpenDP's vector measurement of ``kind`` (:data:`SamplerKind`) at ``scale`` (Laplace scale or Gaussian σ).

    Integer kinds take a list of ``int`` (i64) and return ints; float kinds take and return floats.  Its
    ``map(d_in)`` is OpenDP's own privacy map (ε for Laplace, ρ for Gaussian) at input distance ``d_in``.
    O(1) after the first call for a (kind, scale).
    """
    if kind not in _KINDS:
        raise ValueError(f"unknown noise kind {kind!r}: one of {', '.join(_KINDS)}")
    family, _ = _KINDS[kind]
    domain, metric = _space(kind)
    if family == "laplace":
        return dp.m.make_laplace(domain, metric, scale=scale)
    return dp.m.make_gaussian(domain, metric, scale=scale)


@cache
def _space(kind: str) -> tuple[dp.Domain, dp.Metric]:
    """The input domain and metric of ``kind``'s measurements, built once per kind: they depend on the kind only,
    and building them costs about 5× the measurement itself (issue 28: a new scale on almost every query)."""
    family, integer = _KINDS[kind]
    t = "i64" if integer else "f64"
    domain = dp.vector_domain(dp.atom_domain(T=t) if integer else dp.atom_domain(T=t, nan=False))
    return domain, (dp.l1_distance(T=t) if family == "laplace" else dp.l2_distance(T=t))
