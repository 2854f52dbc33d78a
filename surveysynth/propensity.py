"""Propensity-score nonresponse adjustment and covariate balance (issue 42).

:func:`propensity_adjust` fits a survey-weighted logistic response-propensity model
(``svyglm``, quasibinomial, on the full sample with the base weights), then either

* ``classes=K`` (default 5, the classic approach; Little 1986): weighting classes cut at the
  quantiles of the estimated propensities over the full sample (R ``quantile`` type 7,
  unweighted, then ``cut(include.lowest=TRUE)``), and the weighting-class adjustment of
  :func:`surveysynth.nonresponse.redistribute_weights` within them: replicates are adjusted
  replicate by replicate and the linearization includes the adjustment, exactly as there (the
  classes are treated as fixed, as in every weighting-class variance); or
* ``classes=None``: inverse-propensity adjustment, respondents' weights divided by their
  propensity, nonrespondents' set to 0. On a :class:`~surveysynth.ReplicateDesign` each
  replicate's weights are divided by the propensities of the model refitted with that
  replicate's weights (svyglm's replicate coefficients), so the replicate variance reflects
  the estimated model. On a :class:`~surveysynth.SurveyDesign` the linearization includes the
  estimation of the model (Decision; R has no such function): the adjusted total
  ``T = sum w r y / p(beta)`` has influence values
  ``z - w (r - p) x' H^{-1} sum_j z_j (1 - p_j) x_j``, ``H = sum w p (1 - p) x x'`` (the
  chain rule through the logistic score equations), checked against numerical derivatives
  of the whole chain in tests/test_propensity_nonresponse.py.

:func:`balance_table` reports covariate balance as Meta's ``balance`` package does
(``asmd`` with ``std_type="target"``): weighted means among respondents before (base
weights) and after (adjusted weights) against the full sample (base weights), and
``|mean_r - mean_s| / sd_s`` with ``sd_s`` the full sample's reliability-weighted standard
deviation (balance's ``weighted_var``: ``sum w (x - m)^2 / (V1 - V2 / V1)``); a categorical
covariate gives one row per level (its indicator).

Docs: docs/weighting.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ._validate import first_rows
from .nonresponse import _flags, redistribute_weights

_RESP, _PROP, _CLASS = "ps_respond", "ps_propensity", "ps_class"


class PropensityAdjustment:
    """Linearization of the inverse-propensity adjustment of :func:`propensity_adjust` on a
    SurveyDesign: influence values with respect to the adjusted weights -> with respect to
    the base weights, through the logistic model's score equations (chain rule; applied after
    adjustments made later, like :class:`~surveysynth.nonresponse.NonresponseAdjustment`)."""

    chain_rule = True

    def __init__(self, X: np.ndarray, r: np.ndarray, p: np.ndarray, base_w: np.ndarray) -> None:
        self.X = np.asarray(X, float)
        self.r = np.asarray(r, float)
        self.p = np.asarray(p, float)
        self.base_w = np.asarray(base_w, float)
        H = self.X.T @ ((self.base_w * self.p * (1 - self.p))[:, None] * self.X)
        self.Hinv = np.linalg.inv(H)

    def residualize(self, Z: np.ndarray) -> np.ndarray:
        if not Z.shape[1]:
            return Z
        g = self.X.T @ ((1 - self.p)[:, None] * Z)            # -dT/dbeta, one column per Z
        score = (self.base_w * (self.r - self.p))[:, None] * self.X
        return Z - score @ (self.Hinv @ g)


def _quantile_classes(p: np.ndarray, classes: int) -> np.ndarray:
    """Class codes 0..K-1: ``cut(p, quantile(p, 0:K/K), include.lowest=TRUE)``."""
    breaks = np.quantile(p, np.linspace(0.0, 1.0, classes + 1))
    if np.any(np.diff(breaks) <= 0):
        raise ValueError(f"propensity_adjust(classes={classes}): the propensity quantiles are "
                         f"not distinct ({breaks.tolist()}); R's cut() fails the same way. Fix: "
                         "fewer classes, or a model with more distinct propensities.")
    return np.searchsorted(breaks[1:-1], p, side="left").astype(np.int64)


def propensity_adjust(design: Any, respond: Any, formula: str, classes: int | None = 5,
                      method: str = "logit"):
    """Propensity-score nonresponse adjustment (see the module docstring).

    ``respond``: which cases responded, as a boolean column name, a ``DataFrame.eval``
    expression (``"resp == 1"``) or a boolean array over the full sample; ``formula``: the
    model's right-hand side (``"~ stype + meals"``; a left-hand side is ignored, the
    response indicator is the outcome). ``classes``: the number of propensity classes
    (quantile cut), or None for inverse-propensity weights. ``method``: only ``"logit"``.

    Returns a design of the same kind whose data hold the columns ``ps_respond``,
    ``ps_propensity`` (the estimated response propensity of every case) and, with classes,
    ``ps_class`` (1..K), and whose attribute ``propensity_model_`` is the fitted svyglm.
    Estimate among respondents with ``subset(design.full_data["ps_respond"] == 1)``.
    """
    from .analysis.glm import svyglm
    from .calibration import _kind, _new_replicate

    if method != "logit":
        raise ValueError(f"propensity_adjust(method={method!r}): only 'logit' (a "
                         "survey-weighted logistic model) is implemented.")
    if classes is not None and (not isinstance(classes, (int, np.integer)) or classes < 1):
        raise ValueError(f"propensity_adjust(classes={classes!r}): give a positive integer "
                         "number of propensity classes, or None for inverse-propensity weights.")
    kind = _kind(design)
    frame = design.full_data
    clash = [c for c in (_RESP, _PROP, _CLASS) if c in frame.columns]
    if clash:
        raise ValueError(f"propensity_adjust: the data already hold columns {clash}, which it "
                         "adds. Fix: rename them.")
    r = _flags(frame, respond, "respond")
    if r.all() or not r.any():
        raise ValueError("propensity_adjust: respond is " + ("all True" if r.all() else
                         "all False") + "; a response model needs respondents and "
                         "nonrespondents.")
    rhs = formula.split("~", 1)[1] if "~" in formula else formula
    d1 = design.update(**{_RESP: r.astype(float)})
    fit = svyglm(f"{_RESP} ~ {rhs}", d1, family="quasibinomial")
    rows = fit.fit_rows
    if not rows.all():
        raise ValueError(f"propensity_adjust: model variables are missing in "
                         f"{first_rows(frame.index, ~rows)}; every case needs a propensity.")
    p = np.asarray(fit.fitted_values, float)
    w = np.asarray(design.full_weights, float)
    if classes is not None:
        codes = _quantile_classes(p, int(classes))
        d2 = d1.update(**{_PROP: p, _CLASS: codes + 1})
        out = redistribute_weights(d2, ~r, r, by=_CLASS)
    else:
        d2 = d1.update(**{_PROP: p})
        new_w = np.where(r, w / p, 0.0)
        if kind == "taylor":
            adj = PropensityAdjustment(fit.model_matrix, r, p, w)
            out = d2.with_calibration(new_w, adj)
        else:
            X = fit.model_matrix
            B = fit.replicates.to_numpy()                       # (R, k) replicate coefficients
            P = 1.0 / (1.0 + np.exp(-(X @ B.T + fit.offset[:, None])))
            rep = d2.replicate_weights("analysis")
            new_rep = np.where(r[:, None], rep / P, 0.0)
            out = _new_replicate(d2, new_w, new_rep, "propensity-adjusted")
    out.propensity_model_ = fit
    return out


def _indicators(frame: pd.DataFrame, covariates: Sequence[str]) -> pd.DataFrame:
    cols = {}
    for c in covariates:
        if c not in frame.columns:
            raise ValueError(f"balance_table: covariate {c!r} is not in the data.")
        x = frame[c]
        if x.isna().any():
            raise ValueError(f"balance_table: covariate {c!r} is missing in "
                             f"{first_rows(frame.index, x.isna().to_numpy())}.")
        if pd.api.types.is_bool_dtype(x) or not pd.api.types.is_numeric_dtype(x):
            levels = x.astype("category").cat.categories if not pd.api.types.is_bool_dtype(x) \
                else [False, True]
            for lev in levels:
                cols[(c, str(lev))] = (x == lev).to_numpy(dtype=float)
        else:
            cols[(c, "")] = x.to_numpy(dtype=float)
    return pd.DataFrame(cols)


def balance_table(design_before: Any, design_after: Any, covariates: str | Sequence[str],
                  respond: Any = None) -> pd.DataFrame:
    """Covariate balance of respondents against the full sample, before and after a
    nonresponse adjustment (Meta ``balance``'s ASMD, ``std_type="target"``).

    ``design_before``: the full sample with its base weights (the target);
    ``design_after``: the adjusted design on the same rows; ``respond``: the respondents
    (flag as in :func:`propensity_adjust`; default the rows with positive adjusted weight).
    One row per numeric covariate and per level of a categorical one: ``mean_sample``
    (full sample, base weights), ``mean_before`` / ``mean_after`` (respondents, base /
    adjusted weights), ``sd_sample`` (balance's reliability-weighted SD of the full sample),
    ``asmd_before`` / ``asmd_after`` (``|mean_r - mean_s| / sd_s``).
    """
    covs = [covariates] if isinstance(covariates, str) else list(covariates)
    f0, f1 = design_before.full_data, design_after.full_data
    if f0.shape[0] != f1.shape[0]:
        raise ValueError(f"balance_table: design_before has {f0.shape[0]} rows and "
                         f"design_after {f1.shape[0]}; give the same sample before and after.")
    w0 = np.asarray(design_before.full_weights, float)
    w1 = np.asarray(design_after.full_weights, float)
    r = w1 > 0 if respond is None else _flags(f0, respond, "respond")
    X = _indicators(f0, covs)
    M = X.to_numpy()
    m_s = w0 @ M / w0.sum()
    v1, v2 = w0.sum(), (w0 ** 2).sum()
    sd_s = np.sqrt(w0 @ (M - m_s) ** 2 / (v1 - v2 / v1))
    wb = np.where(r, w0, 0.0)
    wa = np.where(r, w1, 0.0)
    m_b = wb @ M / wb.sum()
    m_a = wa @ M / wa.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        out = pd.DataFrame({
            "covariate": [k[0] for k in X.columns], "level": [k[1] for k in X.columns],
            "mean_sample": m_s, "mean_before": m_b, "mean_after": m_a, "sd_sample": sd_s,
            "asmd_before": np.abs(m_b - m_s) / sd_s, "asmd_after": np.abs(m_a - m_s) / sd_s})
    return out
