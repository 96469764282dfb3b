"""Statistical privacy (SP) with secret random partitions — labelled as such, and compared honestly with DP.

**Not differential privacy.**  SP (Breutigam & Reischuk, *Parallel Composition for Statistical Privacy*) assumes
the adversary knows only the distribution the rows are drawn from; its guarantee is void when that assumption
fails.  This subpackage is self-contained and is not imported by :mod:`dpmagic`; see ``docs/statistical-privacy.md``.

* :mod:`.curves` — exact δ(ε) of un-noised counting queries on i.i.d. rows (Bernoulli / categorical priors);
* :mod:`.composition` — the partition composition δ = Σ_k (n_k/n) δ_k (Theorems 5.1 and 5.3);
* :mod:`.accountant` — :class:`StatisticalPrivacyAccountant`, a ledger-like state with the secret partition;
* :mod:`.comparison` — the number of DP queries at the same (ε, δ) and accuracy (paper's formula, GDP, zCDP);
* :mod:`.session` — :class:`StatisticalSession`: SQL counting queries on a table over a secret partition, with
  its own ledger key namespace (``sp|…``); ``%dpsession … --privacy statistical`` binds one.
"""

from __future__ import annotations

from dpmagic.statistical.accountant import SPCharge, StatisticalPrivacyAccountant, draw_partition
from dpmagic.statistical.comparison import (
    dp_partition_sigma,
    gdp_mu_for,
    gdp_parallel_partition_queries,
    gdp_sequential_queries,
    paper_dp_queries,
    paper_dp_value,
    sp_sigma,
    zcdp_delta,
    zcdp_rho_for,
    zcdp_sequential_queries,
)
from dpmagic.statistical.composition import check_part_sizes, equal_part_sizes, equal_partition_delta, partition_delta
from dpmagic.statistical.curves import (
    BernoulliPrior,
    CategoricalPrior,
    check_prior,
    property_delta,
    property_delta_curve,
    property_delta_known_rows,
    property_epsilon,
    property_probability,
)

_LAZY = {
    "StatisticalSession": "sp_session",
    "SPResult": "sp_session",
    "SP_LABEL": "sp_session",
    "parse_prior": "sp_session",
}


def __getattr__(name: str) -> object:
    # the session pulls in the SQL parser and the pandas backend: import it on first use
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SP_LABEL",
    "SPResult",
    "StatisticalSession",
    "parse_prior",
    "BernoulliPrior",
    "CategoricalPrior",
    "SPCharge",
    "StatisticalPrivacyAccountant",
    "check_part_sizes",
    "check_prior",
    "dp_partition_sigma",
    "draw_partition",
    "equal_part_sizes",
    "equal_partition_delta",
    "gdp_mu_for",
    "gdp_parallel_partition_queries",
    "gdp_sequential_queries",
    "paper_dp_queries",
    "paper_dp_value",
    "partition_delta",
    "property_delta",
    "property_delta_curve",
    "property_delta_known_rows",
    "property_epsilon",
    "property_probability",
    "sp_sigma",
    "zcdp_delta",
    "zcdp_rho_for",
    "zcdp_sequential_queries",
]
