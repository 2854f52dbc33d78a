"""Separate and combined ratio estimators of totals: R ``svyratio(separate=TRUE)`` and
``predict(ratio, total=)``.

* :func:`svyratio_separate` - the ratio within each stage-1 stratum (R: ``svyratio`` on
  ``subset(design, strata == s)`` for the sorted strata);
* :func:`predict_ratio` - the ratio estimate of a total from known auxiliary totals:
  combined, ``R * X`` with SE ``SE(R) * X``; separate, ``sum_h R_h X_h`` with SE
  ``sqrt(sum_h SE(R_h)^2 X_h^2)`` (R's ``predict.svyratio_separate``: strata independent).

Both work on any design with ``ratio`` and ``subset`` (SurveyDesign, ReplicateDesign,
calibrated designs); ``separate=True`` needs stage-1 strata, which only a SurveyDesign has
(as in R, whose replicate designs have no ``separate``). Both return an
:class:`~surveysynth.results.Estimate` (``.se``, ``.conf_int(level=)``, ``.vcov()`` of the
variances) with normal (Wald) intervals at ``level``. Docs: docs/weighting.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .results import Estimate, confidence_interval


def _strata(design: Any) -> tuple[str, list]:
    col = (getattr(design, "strata_vars", None) or [None])[0]
    if col is None:
        raise ValueError("separate=True needs a stratified SurveyDesign (stage-1 strata, R "
                         "design$strata); a replicate design has none. Fix: use the combined "
                         "ratio (separate=False).")
    vals = design.full_data[col]
    uniq = vals.dropna().unique()
    if pd.api.types.is_numeric_dtype(vals):
        levels = sorted(uniq)
    else:
        levels = sorted(uniq, key=str)
    return col, list(levels)


def svyratio_separate(design: Any, numerator: str | Sequence[str],
                      denominator: str | Sequence[str], na_rm: bool = False,
                      level: float = 0.95) -> Estimate:
    """Ratios within each stage-1 stratum (R ``svyratio(..., separate=TRUE)``): the columns
    of :meth:`ratio` plus the stratum column, one block of rows per stratum (sorted), as an
    :class:`~surveysynth.results.Estimate` whose rows are named ``"<stratum>:<num>/<den>"``
    (its ``vcov()`` has the variances only)."""
    col, levels = _strata(design)
    if not getattr(design, "has_strata", True):
        warnings.warn("Separate and combined ratio estimators are the same for unstratified "
                      "designs", UserWarning, stacklevel=2)
    data = design.data[col].to_numpy()
    parts = []
    for s in levels:
        sub = design.subset(data == s)
        out = pd.DataFrame(sub.ratio(numerator, denominator, na_rm=na_rm, level=level))
        out.insert(0, col, s)
        parts.append(out)
    return Estimate.wrap(pd.concat(parts, ignore_index=True), level, "normal")


def predict_ratio(design: Any, numerator: str | Sequence[str], denominator: str | Sequence[str],
                  total: Any, separate: bool = False, na_rm: bool = False,
                  level: float = 0.95) -> Estimate:
    """Ratio estimate of the numerators' totals from the denominators' known total(s)
    (R ``predict(svyratio(...), total=)``).

    ``separate=False`` (combined): ``total`` is one number (the population total of the
    denominator, R recycles it). ``separate=True``: ``total`` gives each stage-1 stratum's
    total, a dict/Series keyed by stratum (matched by name, R's reordering) or a sequence in
    the sorted strata order. Returns an :class:`~surveysynth.results.Estimate` with
    ``variable, estimate, se`` (R's ``total``, ``se``) and normal intervals ``ci_low, ci_high``
    at ``level`` per numerator/denominator pair (other levels: ``.conf_int(level=)``).
    """
    if not separate:
        t = np.asarray(total, dtype=float).reshape(-1)
        if t.shape[0] != 1:
            raise ValueError("total: give one number, the denominator's population total "
                             "(separate=False). Per-stratum totals need separate=True.")
        r = design.ratio(numerator, denominator, na_rm=na_rm)
        return _predicted(r["variable"].to_numpy(), r["estimate"].to_numpy(float) * t[0],
                          r["se"].to_numpy(float) * abs(t[0]), level)
    sep = svyratio_separate(design, numerator, denominator, na_rm=na_rm)
    col, levels = _strata(design)
    if isinstance(total, (Mapping, pd.Series)):
        tot = dict(total)
        keys = {str(k): v for k, v in tot.items()}
        if len(tot) != len(levels):
            raise ValueError(f"total: {len(tot)} stratum totals for {len(levels)} strata "
                             "(R: 'Number of strata differ in ratio object and totals').")
        if set(keys) != {str(s) for s in levels}:
            raise ValueError(f"total: names {sorted(keys)} differ from the strata "
                             f"{[str(s) for s in levels]} of {col!r}. Fix: key the totals by "
                             "stratum.")
        tvec = np.array([float(keys[str(s)]) for s in levels])
    else:
        tvec = np.asarray(total, dtype=float).reshape(-1)
        if tvec.shape[0] != len(levels):
            raise ValueError(f"total: {tvec.shape[0]} stratum totals for {len(levels)} strata "
                             "(R: 'Number of strata differ in ratio object and totals').")
    k = sep.shape[0] // len(levels)
    tt = np.repeat(tvec, k)
    est = (sep["estimate"].to_numpy() * tt).reshape(len(levels), k).sum(axis=0)
    var = ((sep["se"].to_numpy() * tt) ** 2).reshape(len(levels), k).sum(axis=0)
    return _predicted(sep["variable"].to_numpy()[:k], est, np.sqrt(var), level)


def _predicted(variables: np.ndarray, est: np.ndarray, se: np.ndarray, level: float) -> Estimate:
    """The predicted totals as an Estimate with normal (R ``confint``) intervals."""
    lo, hi = confidence_interval(est, se, np.inf, level, "normal")
    frame = pd.DataFrame({"variable": variables, "estimate": est, "se": se, "ci_low": lo,
                          "ci_high": hi})
    return Estimate.wrap(frame, level, "normal")
