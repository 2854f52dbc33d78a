"""Steps close to their prior (issue 39, sixth session): a risk-weighted step whose released fit
keeps fewer records' worth of likelihood (sum of alpha) than its model has coefficients is
flagged (a fit warning, carried into the release's report), and the summary shows the sum.

Measured cause: apistrat at target epsilon 40 over 8 variables releases ell's count model with
sum alpha 0.25-0.34 for 6 coefficients; its synthetic values then follow the prior within the
public bounds (docs/sequential.md, "Steps close to their prior")."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from surveysynth.design import SurveyDesign
from surveysynth.synth import sequential as seqmod
from surveysynth.synth.sequential import Sequential, model_coefficients

FAST = dict(chains=2, draws=150, warmup=150, allow_unconverged=True, progress=False,
            random_state=1, m=2)
FLAG = "records' worth of likelihood"


def _step(family: str, levels: int = 0) -> seqmod._Step:  # noqa: SLF001
    return seqmod._Step(name="v", column="v", role="value", type="x", family=family, spec={},  # noqa: SLF001
                 levels=list(range(levels)))


def test_model_coefficients_by_family():
    """P + 1 (logistic, normal, count), P + K - 1 (ordinal), (P + 1)(K - 1) (categorical)."""
    X = np.zeros((10, 4))
    assert model_coefficients(_step("negbin"), X) == 5
    assert model_coefficients(_step("normal"), X) == 5
    assert model_coefficients(_step("logistic", 2), X) == 5
    assert model_coefficients(_step("ordinal", 5), X) == 8
    assert model_coefficients(_step("categorical", 4), X) == 15
    assert model_coefficients(_step("negbin"), np.zeros((10, 0))) == 1


def _flags(res: dict, X: np.ndarray, family: str = "negbin", levels: int = 0) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seqmod._flag_near_prior(_step(family, levels), res, X)  # noqa: SLF001
    return [str(w.message) for w in caught if FLAG in str(w.message)]


def test_the_flag_is_the_sum_of_alpha_against_the_coefficients():
    """Sum of alpha, not the mean (a mean of 0.02 over 200 records is 4 records' worth) and
    not n; the boundary is strict (worth == coefficients is not flagged); no flag without a
    target or without weighting (c None), nor where the log-scale flag already fired."""
    X = np.zeros((200, 4))                       # 5 coefficients
    res = {"alpha": np.full(200, 0.02), "target": 0.5, "c": 0.03}   # worth 4.0 < 5
    got = _flags(res, X)
    assert len(got) == 1 and "4.00 records' worth" in got[0] and "5 regression" in got[0]
    assert not _flags({"alpha": np.full(200, 0.025), "target": 0.5, "c": 0.03}, X)  # 5.0
    assert not _flags({"alpha": np.full(200, 0.02), "target": None, "c": 0.03}, X)
    assert not _flags({"alpha": np.full(200, 0.02), "target": 0.5, "c": None}, X)
    assert not _flags({"alpha": np.full(200, 0.02), "target": 0.5, "c": 0.03,
                       "log_spread": seqmod.LOG_SPREAD_FLAG + 1}, X)
    # a categorical model of 4 levels on the same X has 15 coefficients: 10 records' worth flags
    assert _flags({"alpha": np.full(200, 0.05), "target": 0.5, "c": 0.1}, X, "categorical", 4)
    assert not _flags({"alpha": np.full(200, 0.05), "target": 0.5, "c": 0.1}, X, "negbin")


def test_a_real_step_near_its_prior_is_flagged_and_a_loose_one_is_not(api):
    """apistrat, meals (a count on 0..100) given stype: at target epsilon 0.8 (Delta_alpha 0.2
    per set) the released fit keeps under 3 records' worth for its 3 coefficients and the
    release says so, in the summary and the report; at target epsilon 200 it keeps most of
    its 200 records and says nothing."""
    d = api["apistrat"]
    des = SurveyDesign(d, strata="stype", weights="pw", fpc="fpc")

    def run(eps):
        syn = Sequential(variables=[{"name": "meals", "type": "count", "bounds": (0, 100)}],
                         public=["stype"], target_epsilon=eps, **FAST)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            syn.fit(des)
            rel = syn.release()
        return syn, rel, [str(w.message) for w in caught if FLAG in str(w.message)]

    syn, rel, flags = run(0.8)
    worth = float(syn.summary().loc["meals", "records_worth"])
    assert worth == pytest.approx(float(np.sum(syn.step_fits_[0]["alpha"])))
    assert worth < 3 and len(flags) == 1 and "'meals'" in flags[0]
    assert any(FLAG in n for n in rel.confidential["_report"]["warnings"])
    syn2, _, flags2 = run(200.0)
    assert float(syn2.summary().loc["meals", "records_worth"]) > 100 and not flags2
