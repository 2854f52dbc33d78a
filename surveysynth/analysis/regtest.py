"""Tests of terms in survey-weighted GLMs and model choice: R ``regTermTest``,
``anova.svyglm``, ``AIC.svyglm`` and ``BIC.svyglm`` (survey 4.5; 4.1 where it differs).

* :func:`regTermTest` -- ``method="Wald"``: ``beta' V^{-1} beta`` over the tested
  coefficients (``V`` the design-based covariance), F on (k, ``df``) with ``df`` the model's
  residual df (``df=inf``: chi-square on k). ``"WorkingWald"``: ``beta' V0^{-1} beta`` with
  ``V0`` the model-based (``naive``) covariance; ``"LRT"``: the Rao-Scott working likelihood
  ratio, the difference of the deviances of the model without the terms (refitted on the same
  rows and weights) and the model. Both are referred to ``sum lambda_i chi^2_1`` (divided by
  ``chi^2_df / df`` unless ``df=inf``), the ``lambda_i`` the eigenvalues of ``V0^{-1} V``, the
  tail by R's saddlepoint approximation (:mod:`surveysynth.analysis.chisqsum`; Lumley & Scott
  2013, 2014).
* :func:`anova` -- two symbolically nested models: ``regTermTest`` of the bigger model's
  extra terms (``method="LRT"`` by default, ``test="F"`` or ``"Chisq"``); one model: the
  sequential table, each term tested in the model with the terms before it (R's
  ``oneanova.svyglm``: refits from the last term backwards).
* :func:`AIC` -- Lumley & Scott (2015) design-based AIC: ``deviance + k * sum(lambda)`` with
  the ``lambda`` of the working LRT of all terms (``eff.p`` = sum, ``deltabar`` = mean);
  Gaussian identity models (R's ``svylm``) use the Gaussian working likelihood with
  ``sigma^2`` estimated. R survey 4.5 corrected the Gaussian formula; ``survey_version="4.1"``
  gives R 4.1's numbers.
* :func:`BIC` -- Lumley & Scott (2015) dBIC against a maximal model.

Statistics are R's numbers to rounding (tested live against R survey 4.1.1, and against stored
output of R survey 4.5 where the two differ). R's ``lrt.approximation="integration"``
(CompQuadForm) and ``anova(..., force=TRUE)`` for models that are not symbolically nested are
not provided (clear errors).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from formulaic import Formula
from scipy import linalg, stats

from .chisqsum import pFsum
from .formulas import quote_dotted, split_offset
from .htest import TestResult
from .irls import irls

if TYPE_CHECKING:  # glm.py imports this module (GLMResults.regTermTest, anova, aic, bic)
    from .glm import GLMResults

_METHODS = ("Wald", "WorkingWald", "LRT")


def _key(term: Any) -> frozenset[str]:
    return frozenset(str(f) for f in term.factors)



def _is_glm_result(model: Any) -> bool:
    """A :class:`~surveysynth.analysis.GLMResults`, told by what the tests read and call
    (this module does not import glm.py at run time: glm.py imports it)."""
    return all(hasattr(model, a) for a in ("params", "vcov", "naive_cov", "df_resid",
                                           "deviance", "refit_arguments", "update"))

def _terms(res: GLMResults) -> tuple[list[tuple[frozenset[str], str, list[int]]], bool]:
    """The model's terms other than the intercept: (factor set, label, columns), and whether
    it has an intercept."""
    factors = res.term_factors
    out, intercept = [], False
    for label, cols in res.term_columns.items():
        if label == "1":
            intercept = True
            continue
        out.append((factors[label], label, cols))
    return out, intercept


def _dotted_names(res: GLMResults) -> pd.Index:
    names = set()
    for _, label, _ in _terms(res)[0]:
        names.update(re.findall(r"`([^`]+)`", label))
    return pd.Index(sorted(names))


def _split_top(text: str) -> list[str]:
    """Split at top-level ``+`` (not inside parentheses)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "+" and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _test_keys(res: GLMResults, test_terms: Any) -> tuple[list[frozenset[str]], bool, list[str]]:
    """Parse ``test_terms`` (a term, ``"~a+b"``, a list) into factor sets; ``1`` is the
    intercept (R: ``~1+a``, an explicit intercept in the formula)."""
    if isinstance(test_terms, str):
        text = test_terms.strip()
        text = text[1:] if text.startswith("~") else text
    elif isinstance(test_terms, Sequence) and all(isinstance(t, str) for t in test_terms):
        text = " + ".join(test_terms)
    else:
        raise ValueError(
            f"test_terms={test_terms!r}: give a term ('stype'), a formula ('~ell+stype') or a "
            "list of terms."
        )
    pieces = _split_top(text)
    intercept = "1" in pieces
    rest = [p for p in pieces if p not in ("1", "0")]
    if not rest and not intercept:
        raise ValueError(f"test_terms={test_terms!r}: no terms to test.")
    keys: list[frozenset[str]] = []
    if rest:
        quoted = quote_dotted(" + ".join(rest), _dotted_names(res))
        try:
            parsed = [t for t in Formula(quoted) if str(t) != "1"]
        except Exception as exc:
            raise ValueError(f"test_terms={test_terms!r}: cannot parse: {exc}") from exc
        keys = [_key(t) for t in parsed]
    return keys, intercept, rest


def _index(res: GLMResults, test_terms: Any) -> tuple[np.ndarray, list[str], bool]:
    terms, has_int = _terms(res)
    keys, test_int, labels = _test_keys(res, test_terms)
    known = {k: cols for k, _, cols in terms}
    bad = [":".join(sorted(k)) for k in keys if k not in known]
    if bad:
        raise ValueError(
            f"regTermTest: terms {bad} are not in the model; its terms are "
            f"{[t[1] for t in terms]}."
        )
    cols = sorted({c for k in keys for c in known[k]})
    if test_int:
        if not has_int:
            raise ValueError("regTermTest: the model does not have an intercept to test.")
        cols = [0, *[c for c in cols if c != 0]]
    return np.asarray(cols, dtype=int), labels + (["1"] if test_int else []), test_int


def _deviance_without(res: GLMResults, index: np.ndarray) -> float:
    """Deviance of the model refitted without the columns ``index`` on the same rows with the
    same prior weights (R 4.5: ``update(model, .~.-terms, design=model$survey.design)``, the
    deviance rescaled to the model's weights)."""
    keep = np.setdiff1d(np.arange(res.params.shape[0]), index)
    fam, prior, offset = res.family_object, res.prior_weights, res.offset
    if prior is None or res.refit_arguments is None:
        raise ValueError("regTermTest(method='LRT'): the model was not made by svyglm(); "
                         "cannot refit it.")
    if keep.shape[0] == 0:
        mu = fam.link.linkinv(offset)
        return float(np.sum(fam.dev_resids(res.y, mu, prior)))
    r = res.refit_arguments
    return irls(res.model_matrix[:, keep], res.y, prior, offset, fam, maxit=r["maxit"],
                epsilon=r["epsilon"]).deviance


def regTermTest(model: GLMResults, test_terms: Any, null: Any = None,  # noqa: N802
                df: float | None = None, method: str = "Wald",
                lrt_approximation: str = "saddlepoint") -> TestResult:
    """Test that the coefficients of some terms of a survey-weighted GLM are zero (R
    ``regTermTest``).

    Parameters
    ----------
    model : a fitted :func:`svyglm`.
    test_terms : a term (``"stype"``), several (``"~ell+meals"`` or a list); ``1`` in a
        formula also tests the intercept (R: ``~1+ell``).
    null : values under the null hypothesis (default 0), one per tested coefficient.
    df : denominator df (default: the model's residual df, R's ``df=NULL``); ``math.inf`` for
        the chi-square forms.
    method : ``"Wald"`` (R's default), ``"WorkingWald"`` or ``"LRT"`` (Rao-Scott working
        likelihood ratio).
    lrt_approximation : ``"saddlepoint"`` (R's default) or ``"satterthwaite"``, the tail of
        the chi-square combination for ``"WorkingWald"`` / ``"LRT"``.

    Returns
    -------
    :class:`TestResult`. Wald: ``statistic`` is R's ``Ftest`` (``statistic_name`` ``"F"``,
    ``parameter`` ``{"ndf", "ddf"}``) or, with ``df=inf``, R's ``chisq`` (``"Chisq"``,
    ``{"df"}``). WorkingWald/LRT: ``statistic`` is R's ``chisq`` (the unscaled working
    statistic), ``details["lambda"]`` the design-effect eigenvalues and
    ``details["working_statistic"]`` ``chisq / mean(lambda)``, the value R prints.
    """
    if not _is_glm_result(model):
        raise TypeError(f"regTermTest: model must be a svyglm result, got {type(model).__name__}.")
    if method not in _METHODS:
        raise ValueError(f"method={method!r}: choose one of {_METHODS}.")
    index, labels, _ = _index(model, test_terms)
    k = index.shape[0]
    beta = model.params.to_numpy()[index]
    if null is not None:
        beta = beta - np.broadcast_to(np.asarray(null, dtype=float), beta.shape)
    V = model.vcov().to_numpy()[np.ix_(index, index)]
    ddf = float(model.df_resid) if df is None else float(df)
    if method in ("LRT", "WorkingWald"):
        V0 = model.naive_cov.to_numpy()[np.ix_(index, index)]
        if method == "LRT":
            chisq = _deviance_without(model, index) - model.deviance
        else:
            chisq = float(beta @ linalg.solve(V0, beta))
        lam = np.sort(np.real(linalg.eigvals(linalg.solve(V0, V))))[::-1]
        p = pFsum(chisq, np.ones(k), lam, ddf=ddf, lower_tail=False, method=lrt_approximation)
        name = "Working 2logLR" if method == "LRT" else "Working Wald statistic"
        kind = "LRT" if method == "LRT" else "Wald test"
        form = "Rao-Scott" if math.isinf(ddf) else "Rao-Scott+F"
        return TestResult(
            f"Working ({form}) {kind} for {' '.join(labels)}", float(chisq), name,
            {"df": float(k), "ddf": ddf}, float(p),
            details={"lambda": lam, "working_statistic": float(chisq / lam.mean()),
                     "chisq": float(chisq), "terms": labels})
    chisq = float(beta @ linalg.solve(V, beta))
    if math.isinf(ddf):
        return TestResult(f"Wald test for {' '.join(labels)}", chisq, "Chisq", {"df": float(k)},
                          float(stats.chi2.sf(chisq, k)), details={"terms": labels})
    F = chisq / k
    return TestResult(f"Wald test for {' '.join(labels)}", F, "F",
                      {"ndf": float(k), "ddf": ddf}, float(stats.f.sf(F, k, ddf)),
                      details={"terms": labels, "chisq": chisq})


reg_term_test = regTermTest


def _refit_without(res: GLMResults, label: str) -> GLMResults:
    """The model refitted on its design without the term ``label`` (R ``update(m, .~.-t)``)."""
    if res.refit_arguments is None:
        raise ValueError("anova: this model was not made by svyglm(); cannot refit it.")
    terms, intercept = _terms(res)
    lhs = res.formula.split("~", 1)[0]
    _, exprs = split_offset(res.formula)
    rhs = [lab for _, lab, _ in terms if lab != label]
    rhs += [] if intercept else ["0"]
    rhs += [f"offset({e})" for e in exprs]
    formula = f"{lhs}~ {' + '.join(rhs) if rhs else '1'}"
    return res.update(formula)


def anova(object: GLMResults, object2: GLMResults | None = None,  # noqa: A002
          test: str = "F", method: str = "LRT", force: bool = False) -> TestResult | pd.DataFrame:
    """Compare survey-weighted GLMs (R ``anova.svyglm``).

    Two symbolically nested models (the terms of one are all in the other): the test of the
    bigger model's extra terms, :func:`regTermTest` with ``method`` (``"LRT"``, R's default,
    or ``"Wald"``) and ``df`` the residual df (``test="F"``) or infinite (``"Chisq"``). One
    model: the sequential table (one row per term: the term tested in the model with the
    terms before it), a DataFrame with the statistic (R's ``Ftest`` for Wald F, ``chisq``
    otherwise), ``DEff`` (mean lambda, LRT), ``df``, ``ddf`` (F), ``p``; its ``attrs["tests"]``
    hold the :class:`TestResult` of each row.
    """
    if test not in ("F", "Chisq"):
        raise ValueError(f"test={test!r}: choose 'F' or 'Chisq'.")
    if method not in ("LRT", "Wald"):
        raise ValueError(f"method={method!r}: choose 'LRT' or 'Wald'.")
    ddf = None if test == "F" else math.inf
    if object2 is None:
        terms = [lab for _, lab, _ in _terms(object)[0]]
        if len(terms) < 2:
            raise ValueError("anova: the model has fewer than 2 terms; nothing sequential to do.")
        tests: list[TestResult] = [None] * len(terms)  # type: ignore[list-item]
        current = object
        for i in range(len(terms) - 1, -1, -1):
            tests[i] = regTermTest(current, terms[i], df=ddf, method=method)
            if i:
                current = _refit_without(current, terms[i])
        rows = {"statistic": [t.statistic for t in tests]}
        if method == "LRT":
            rows["DEff"] = [float(np.mean(t.details["lambda"])) for t in tests]
        rows["df"] = [float(len(_index(object, lab)[0])) for lab in terms]
        if test == "F":
            rows["ddf"] = [t.parameter["ddf"] for t in tests]
        rows["p"] = [t.p_value for t in tests]
        out = pd.DataFrame(rows, index=terms)
        out.attrs["tests"] = tests
        return out
    t1 = {k: lab for k, lab, _ in _terms(object)[0]}
    t2 = {k: lab for k, lab, _ in _terms(object2)[0]}
    nested = set(t1) <= set(t2) or set(t2) <= set(t1)
    if not nested or force:
        raise ValueError(
            "anova: the models are not symbolically nested (or force=True); R then projects "
            "one model matrix on the other, which is not provided. Fix: write the smaller "
            "model's terms as a subset of the bigger one's."
        )
    bigger, small, big = (object2, t1, t2) if set(t1) <= set(t2) else (object, t2, t1)
    diff = [lab for k, lab in big.items() if k not in small]
    if not diff:
        raise ValueError("anova: the two models have the same terms.")
    return regTermTest(bigger, diff, df=ddf, method=method)


def _is_svylm(res: GLMResults) -> bool:
    return res.family == "gaussian" and res.link == "identity"


def _aic_gaussian(fit: GLMResults, k: float, null_has_intercept: bool,
                  survey_version: str) -> np.ndarray:
    w = fit.prior_weights
    y = fit.y
    mu = fit.linear_predictors  # R: fit$linear.predictors
    Nhat = float(w.sum())
    V0 = fit.naive_cov.to_numpy()
    V = fit.vcov().to_numpy()
    if null_has_intercept:
        V0, V = V0[1:, 1:], V[1:, 1:]
    if survey_version == "4.5":
        s2 = float(np.sum((y - mu) ** 2 * w) / Nhat)
        delta_mu = linalg.solve(V0 * s2, V)
    else:
        s2 = _dispersion_41(fit)
        delta_mu = linalg.solve(V0, V)
    m2ll = Nhat * math.log(s2) + Nhat + Nhat * math.log(2 * math.pi)
    I_s2 = Nhat / (2 * s2**2)
    U_s2 = -1 / (2 * s2) + (y - mu) ** 2 / (2 * s2**2)
    H_s2 = float(np.sum(w * U_s2**2))
    d_s2 = I_s2 / H_s2 if survey_version == "4.5" else H_s2 / I_s2
    diag = np.diag(delta_mu)
    deltabar = float(np.mean(np.append(diag, d_s2)))
    eff_p = float(diag.sum() + d_s2)
    out = np.array([eff_p, m2ll + k * eff_p, deltabar])
    return out if survey_version == "4.5" else out / s2


def _dispersion_41(fit: GLMResults) -> float:
    """R 4.1's ``summary.svyglm`` dispersion: ``svyvar`` of the Pearson residuals over the
    model's design (``residuals.svyglm`` divides the prior weights by the sampling weights,
    so for a Gaussian model they are ``y - mu``)."""
    from .variance_matrix import _svyvar_values

    design = fit.refit_arguments["design"]
    if getattr(design, "design_kind", "taylor") == "replicate":
        raise ValueError(
            "AIC(survey_version='4.1'): R survey 4.1 fails on Gaussian svyglm fits of replicate "
            "designs (its Pearson residuals need design$prob), so there is no 4.1 number to "
            "reproduce. Fix: survey_version='4.5' (the default)."
        )
    rows = fit.fit_rows
    vals = np.full(rows.shape[0], np.nan)
    vals[rows] = fit.y - fit.fitted_values
    est, _ = _svyvar_values(vals[:, None], design, na_rm=True, survey_version="4.5")
    return float(est[0])


def _aic_one(fit: GLMResults, k: float, null_has_intercept: bool,
             survey_version: str) -> np.ndarray:
    if not _is_glm_result(fit):
        raise TypeError(f"AIC: expected svyglm results, got {type(fit).__name__}.")
    if survey_version not in ("4.5", "4.1"):
        raise ValueError(f"survey_version={survey_version!r}: choose '4.5' or '4.1'.")
    if _is_svylm(fit):
        return _aic_gaussian(fit, k, null_has_intercept, survey_version)
    terms, intercept = _terms(fit)
    if terms:
        if survey_version == "4.5" and null_has_intercept and not intercept:
            raise ValueError("AIC: the model has no intercept, so the null model cannot have "
                             "one. Fix: null_has_intercept=False.")
        labels = [lab for _, lab, _ in terms] + ([] if null_has_intercept else ["1"])
        lam = regTermTest(fit, labels, method="LRT").details["lambda"]
        deltabar, eff = float(np.mean(lam)), float(np.sum(lam))
    else:
        deltabar, eff = float("nan"), 0.0
    return np.array([eff, fit.deviance + k * eff, deltabar])


def AIC(*models: GLMResults, k: float = 2.0, null_has_intercept: bool = True,  # noqa: N802
        survey_version: str = "4.5") -> pd.Series | pd.DataFrame:
    """Design-based AIC of survey-weighted GLMs (Lumley & Scott 2015; R ``AIC.svyglm``).

    ``eff.p`` (effective number of parameters, ``sum lambda``), ``AIC`` (``deviance + k
    eff.p``; Gaussian identity models: ``-2 log L`` of the Gaussian working model with
    ``sigma^2`` estimated, plus ``k eff.p``) and ``deltabar`` (mean design effect). One model:
    a Series; several: a DataFrame, one row each (R ``rbind``). ``null_has_intercept=False``
    also counts the intercept. ``survey_version="4.1"`` reproduces R survey 4.1's Gaussian
    formula (its dispersion from ``summary.svyglm``, inverted sigma^2 design effect and the
    whole result divided by sigma^2), which 4.5 corrected; other families are the same in both.
    """
    if not models:
        raise ValueError("AIC: give at least one svyglm result.")
    rows = [_aic_one(m, k, null_has_intercept, survey_version) for m in models]
    cols = ["eff.p", "AIC", "deltabar"]
    if len(rows) == 1:
        return pd.Series(rows[0], index=cols)
    return pd.DataFrame(rows, columns=cols)


def _dbic(a: GLMResults, M: GLMResults) -> np.ndarray:
    pa, pM = a.params.shape[0], M.params.shape[0]
    extra = [n for n in a.params.index if n not in M.params.index]
    if extra:
        raise ValueError(f"BIC: coefficients {extra} are in the model but not in the maximal "
                         "model.")
    idx = np.flatnonzero(~M.params.index.isin(a.params.index))
    _, intercept = _terms(a)
    n = 1 + int(np.sum(a.prior_weights > 0)) - int(intercept)  # R: 1 + df.null
    if idx.shape[0]:
        b = M.params.to_numpy()[idx]
        V = M.vcov().to_numpy()[np.ix_(idx, idx)]
        V0 = M.naive_cov.to_numpy()[np.ix_(idx, idx)]
        wald = float(b @ linalg.solve(V, b))
        det = float(np.linalg.det(linalg.solve(V0, V)))
        nstar = n / det ** (1 / (pM - pa))
    else:
        wald, det, nstar = 0.0, 1.0, float("nan")
    return np.array([pa, wald + pa * math.log(n) + math.log(det) + M.deviance, nstar])


def BIC(*models: GLMResults, maximal: GLMResults) -> pd.Series | pd.DataFrame:  # noqa: N802
    """Design-based BIC (Lumley & Scott 2015; R ``BIC.svyglm``) of each model against
    ``maximal`` (a model containing all their coefficients): ``p``, ``BIC`` and ``neff``
    (the effective sample size). One model: a Series; several: a DataFrame."""
    if not models:
        raise ValueError("BIC: give at least one svyglm result.")
    rows = [_dbic(m, maximal) for m in models]
    cols = ["p", "BIC", "neff"]
    if len(rows) == 1:
        return pd.Series(rows[0], index=cols)
    return pd.DataFrame(rows, columns=cols)
