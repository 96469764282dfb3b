"""Whole workloads at once: HDMM strategy optimisation and exact batch sensitivity (issue 15).

Not imported by :mod:`dpmagic`; pure functions and classes with no session dependency.

* workloads (:mod:`.workloads`): :func:`prefix`, :func:`all_range`, :func:`width_range`, :func:`identity`,
  :func:`total`, :func:`permuted_range`, :func:`marginals`, :func:`kron`, :func:`union`;
* strategies (:mod:`.strategies`) and optimisers (:mod:`.optimize`): Identity, the workload, hierarchical/HB,
  OPT₀ (:func:`opt_p_identity`; Gaussian: :func:`opt_gaussian`), OPT⊗ (:func:`opt_kron`), OPT₊ (:func:`opt_union`), OPT_M
  (:func:`opt_marginals`);
* error (:mod:`.error`): :func:`expected_error`, :func:`rmse`, :func:`svd_bound`; noise models (:mod:`.noise`);
* release helpers (:mod:`.reconstruct`): :func:`measure_and_reconstruct`, :func:`answer_variances`;
* batch sensitivity of boxes (:mod:`.sensitivity`).

McKenna, Miklau, Hay, Machanavajjhala, PVLDB 11(10) 2018, doi:10.14778/3231751.3231769 (HDMM); Inan, Gursoy,
Saygin, "Sensitivity analysis for non-interactive differential privacy: bounds and efficient algorithms",
IEEE TDSC, doi:10.1109/TDSC.2017.2734664 (batch sensitivity).
"""

from dpmagic.batch.error import expected_error, rmse, svd_bound, svd_bound_rmse
from dpmagic.batch.gaussian_opt import opt_gaussian
from dpmagic.batch.optimize import default_p, opt_kron, opt_marginals, opt_p_identity, opt_union
from dpmagic.batch.reconstruct import (
    BatchRelease,
    answer_variances,
    measure_and_reconstruct,
    numpy_sampler,
    reconstruct,
    workload_answers,
)
from dpmagic.batch.strategies import (
    ExplicitStrategy,
    KronStrategy,
    MarginalStrategy,
    PIdentity,
    UnionStrategy,
    hb_strategy,
    hierarchical,
    identity_strategy,
    workload_strategy,
)
from dpmagic.batch.workloads import (
    Dense,
    Kron,
    Stack,
    all_range,
    explicit,
    identity,
    kron,
    marginals,
    permuted_range,
    prefix,
    total,
    union,
    width_range,
)
from dpmagic.noise.families import (
    NoiseFamily,
    analytic_gaussian,
    analytic_gaussian_sigma,
    gaussian,
    gaussian_gdp,
    gaussian_zcdp,
    laplace,
)

__all__ = [
    "Dense",
    "Kron",
    "Stack",
    "all_range",
    "explicit",
    "identity",
    "kron",
    "marginals",
    "permuted_range",
    "prefix",
    "total",
    "union",
    "width_range",
    "ExplicitStrategy",
    "KronStrategy",
    "MarginalStrategy",
    "PIdentity",
    "UnionStrategy",
    "hb_strategy",
    "hierarchical",
    "identity_strategy",
    "workload_strategy",
    "default_p",
    "opt_kron",
    "opt_marginals",
    "opt_p_identity",
    "opt_gaussian",
    "opt_union",
    "expected_error",
    "rmse",
    "svd_bound",
    "svd_bound_rmse",
    "NoiseFamily",
    "analytic_gaussian",
    "analytic_gaussian_sigma",
    "gaussian",
    "gaussian_gdp",
    "gaussian_zcdp",
    "laplace",
    "BatchRelease",
    "answer_variances",
    "measure_and_reconstruct",
    "numpy_sampler",
    "reconstruct",
    "workload_answers",
]
