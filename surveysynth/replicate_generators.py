"""Replicate designs an agency makes beside the jackknife, BRR and Preston's bootstrap (issue 42):

* :func:`sdr` - successive-difference replication, svrep ``as_sdr_design`` (the ACS's SDR);
* :func:`canty_davison` - Canty and Davison's bootstrap, R ``as.svrepdesign(type="bootstrap")``;
* :func:`gen_boot` - the generalized bootstrap, svrep ``as_gen_boot_design``;
* :func:`fays_gen_rep` - Fay's generalized replication, svrep ``as_fays_gen_rep_design``;
* :func:`quad_form` - the quadratic form of a design's variance estimator (svrep
  ``get_design_quad_form``) both of the last two start from;

each returning a :class:`~surveysynth.ReplicateDesign` whose estimators are R's on the same
replicate weights. Formulas and decisions: docs/weighting.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .replicate_design import ReplicateDesign, _check_design, canty_davison  # noqa: F401 (re-exported)
from .variance.generators import (
    fays_gen_rep_factors,
    gen_boot_factors,
    nearest_psd,
    sdr_factors_sorted,
)
from .variance.generators import quad_form as _quad_form
from .variance.replicate_weights import as_generator


def _units(design: Any) -> tuple[np.ndarray, np.ndarray]:
    """svrep's ``compress_design``: the distinct (strata, clusters of every stage) units in
    order of first appearance; returns (unit of each row, first row of each unit)."""
    last = np.asarray(design.stages[-1].cluster, dtype=np.int64)
    codes = pd.factorize(last, sort=False)[0]
    K = int(codes.max()) + 1
    first = np.full(K, -1, dtype=np.int64)
    rows = np.arange(codes.shape[0])
    first[codes[::-1]] = rows[::-1]  # smallest row of each unit
    return codes.astype(np.int64), first


def _sort_key(values: pd.Series) -> np.ndarray:
    """Ranks that order values as R's ``order`` does: numbers numerically, anything else as
    text (R's factor levels and strings are compared as text; Python's code-point order is
    R's in the C locale)."""
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        v = values.to_numpy(dtype=float)
    else:
        v = values.astype(str).to_numpy()
    return pd.Series(v).rank(method="dense").to_numpy()


def sdr(design: Any, replicates: int, sort_variable: str, mse: bool = True,
        hadamard: np.ndarray | None = None) -> ReplicateDesign:
    """Successive-difference replication (svrep ``as_sdr_design``; Fay and Train 1995, the
    Census Bureau's ACS).

    Units are the design's distinct last-stage clusters (svrep's ``compress_design``: each
    row for an element sample). They are put in order of stage-1 stratum then
    ``sort_variable`` (the order of selection of a systematic sample; ties keep data order),
    and unit k of that order takes rows (a_k, b_k) of a Hadamard matrix H of order R
    (svrep's 4 x 4 matrix doubled until R >= ``replicates``; ``hadamard=`` to give another),
    rows assigned in svrep's successive cycles so that neighbours share a row. Replicate r's
    factor is ``1 + (H[a_k, r] - H[b_k, r]) / 2^(3/2)``; with a stage-1 fpc it is
    ``1 + sqrt(1 - n_h/N_h) (factor - 1)``. Variance: ``4/R sum_r (theta_r - theta)^2``
    (``mse=True``, svrep's default). The factors are deterministic: equal to svrep's to
    1e-15 (tests/test_replicate_generators.py).
    """
    _check_design(design)
    if not isinstance(replicates, (int, np.integer)) or replicates < 2:
        raise ValueError(f"replicates={replicates!r}: need an integer >= 2.")
    frame = design.full_data
    if not isinstance(sort_variable, str) or sort_variable not in frame.columns:
        raise ValueError(
            f"sort_variable={sort_variable!r}: give the name of one column of the data, the "
            "order in which the units were selected (svrep: 'Must specify a variable name for "
            "`sort_variable`').")
    if frame[sort_variable].isna().any():
        bad = np.flatnonzero(frame[sort_variable].isna().to_numpy())[:5]
        raise ValueError(f"sort_variable {sort_variable!r} is missing in rows "
                         f"{frame.index[bad].tolist()}: it cannot have missing values (svrep).")
    unit, first = _units(design)
    K = first.shape[0]
    if design.strata_vars:
        stratum = _sort_key(frame[design.strata_vars[0]].iloc[first].reset_index(drop=True))
    else:
        stratum = np.zeros(K)
    key = _sort_key(frame[sort_variable].iloc[first].reset_index(drop=True))
    order = np.lexsort((np.arange(K), key, stratum))  # stable: ties keep data order
    pos = np.empty(K, dtype=np.int64)
    pos[order] = np.arange(K)
    fac = sdr_factors_sorted(K, int(replicates), hadamard)[pos]
    if design.has_fpc:
        st = design.stages[0]
        f1 = np.asarray(st.fpc_factor, dtype=float)[st.stratum_of_cluster[st.cluster[first]]]
        fac = 1.0 + np.sqrt(f1)[:, None] * (fac - 1.0)
    R = fac.shape[1]
    return ReplicateDesign.from_factors(
        design.full_data, design.full_weights, fac, unit, "successive-difference", 4.0 / R,
        np.ones(R), None, mse, design.in_subset,
        f"successive-difference replication sorted by {sort_variable}, {R} replicates")


def quad_form(design: Any, variance_estimator: str) -> tuple[np.ndarray, np.ndarray]:
    """The quadratic form of ``design``'s variance estimator over its units (svrep
    ``get_design_quad_form`` on the compressed design): returns (Sigma (K, K), unit of each row
    of ``full_data``); the variance of a total is ``z' Sigma z``, z the units' weighted totals.
    ``variance_estimator``: ``"Ultimate Cluster"``, ``"Stratified Multistage SRS"``, ``"SD1"``
    or ``"SD2"`` (see :func:`surveysynth.variance.generators.quad_form`)."""
    _check_design(design)
    unit, first = _units(design)
    return _quad_form(list(design.stages), first, variance_estimator, design.has_fpc), unit


def gen_boot(design: Any, variance_estimator: str, replicates: int = 500, tau: float | str = 1.0,
             exact_vcov: bool = False, seed: Any = None, mse: bool = False,
             psd_option: str = "warn") -> ReplicateDesign:
    """The generalized survey bootstrap (Beaumont and Patak 2012), svrep
    ``as_gen_boot_design``: replicate factors drawn from N(1, Sigma), Sigma the quadratic form
    of ``variance_estimator`` (:func:`quad_form`), so the bootstrap variance of a total
    estimates that estimator; scale ``tau^2/B``, rscales 1, type ``"other"`` (as svrep).
    ``exact_vcov=True`` whitens the draws: every total's replicate variance then equals the
    estimator exactly (e.g. R's multistage linearization variance for
    ``"Stratified Multistage SRS"``). ``tau``: 1, a number, or ``"auto"`` (smallest tau making
    every factor >= 0.01).
    """
    _check_design(design)
    if not isinstance(replicates, (int, np.integer)) or replicates < 2:
        raise ValueError(f"replicates={replicates!r}: need an integer >= 2.")
    Q, unit = quad_form(design, variance_estimator)
    Q = nearest_psd(Q, psd_option)
    fac, scale, tau_used = gen_boot_factors(Q, int(replicates), as_generator(seed), tau,
                                            exact_vcov)
    out = ReplicateDesign.from_factors(
        design.full_data, design.full_weights, fac, unit, "other", scale, np.ones(replicates),
        None, mse, design.in_subset,
        f"generalized bootstrap ({variance_estimator}), {replicates} replicates, tau "
        f"{tau_used:g}")
    out.tau = tau_used
    return out


def fays_gen_rep(design: Any, variance_estimator: str, max_replicates: float = np.inf,
                 balanced: bool = True, seed: Any = None, mse: bool = True,
                 psd_option: str = "warn", hadamard: np.ndarray | None = None
                 ) -> ReplicateDesign:
    """Fay's generalized replication, svrep ``as_fays_gen_rep_design``: replicate factors from
    the eigen-decomposition of the quadratic form of ``variance_estimator`` balanced by a
    Hadamard matrix, so that the replicate variance of every total equals that estimator
    exactly (scale 1, rscales 1, ``mse=True`` as svrep). The Hadamard order is the smallest
    power of 2 above the rank (svrep uses ``survey::hadamard``, which also has multiples of 4:
    pass its matrix as ``hadamard=`` to get the same number of replicates).
    """
    import warnings

    _check_design(design)
    if not mse:  # svrep warns whenever mse = FALSE
        warnings.warn("When `balanced = FALSE`, setting `mse = FALSE` may produce large "
                      "underestimates of variance.", UserWarning, stacklevel=2)
    Q, unit = quad_form(design, variance_estimator)
    Q = nearest_psd(Q, psd_option)
    fac, scale = fays_gen_rep_factors(Q, as_generator(seed), max_replicates, balanced, hadamard)
    R = fac.shape[1]
    return ReplicateDesign.from_factors(
        design.full_data, design.full_weights, fac, unit, "other", scale, np.ones(R), None,
        mse, design.in_subset,
        f"Fay's generalized replication ({variance_estimator}), {R} replicates")
