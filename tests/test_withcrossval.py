"""``withCrossval`` (new in R survey 4.5) against stored R 4.5 output
(tests/reference/r_survey45/withcrossval.R): ?withCrossval's example, ridge regression over a
tuning grid with the MSE and absolute-error losses, the entropy loss, a JKn and a calibrated
replicate design. The fits are the same algebra in both languages (weighted least squares,
ridge, a weighted mean), so any difference is in the folds, weights or scaling."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import surveysynth as ss
from surveysynth.analysis import withCrossval
from tests.conftest import assert_rel

REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "withcrossval.json")
                 .read_text())
TOL = 1e-9
POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}


def lmtrain(X, y, w, tuning):
    sw = np.sqrt(w)
    return np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)[0]


def lmtest(X, trainfit, tuning):
    return X @ trainfit


def ridgetrain(X, y, w, tuning):
    P = np.eye(X.shape[1]) * tuning
    P[0, 0] = 0
    return np.linalg.solve(X.T @ (w[:, None] * X) + P, X.T @ (w * y))


def meantrain(X, y, w, tuning):
    return np.sum(w * y) / np.sum(w)


def meantest(X, trainfit, tuning):
    return np.full(X.shape[0], trainfit)


@pytest.fixture(scope="module")
def designs(api):
    clus = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc").jackknife()
    st = api["apistrat"].assign(yes=(api["apistrat"]["sch.wide"] == "Yes").astype(float))
    jk = ss.SurveyDesign(st, strata="stype", weights="pw", fpc="fpc").jackknife()
    return {"rclus1": clus, "jkstrat": jk, "rcal": jk.calibrate("~stype+api99", POP)}


def test_man_example_and_tuning_grid(designs):
    assert REF["survey_version"] == "4.5"
    d = designs["rclus1"]
    man = withCrossval(d, "api00 ~ api99 + ell + stype", lmtrain, lmtest, loss="MSE",
                       tuning=[1])
    assert_rel(man, [REF["man_example"]], TOL, "man example")
    tun = [0, 1e3, 1e5]
    for loss, key in (("MSE", "ridge_mse"), ("AbsError", "ridge_abs")):
        got = withCrossval(d, "api00 ~ api99 + ell + meals", ridgetrain, lmtest, loss=loss,
                           tuning=tun)
        assert_rel(got, REF[key], TOL, key)


def test_jkn_calibrated_and_entropy(designs):
    for name, key in (("jkstrat", "jkn_mse"), ("rcal", "cal_mse")):
        got = withCrossval(designs[name], "api00 ~ api99 + ell + stype", lmtrain, lmtest,
                           tuning=[1])
        assert_rel(got, [REF[key]], TOL, key)
    ent = withCrossval(designs["jkstrat"], "yes ~ 1", meantrain, meantest, loss="entropy")
    assert_rel(ent, [REF["jkn_entropy"]], TOL, "entropy")
    # a user loss equal to MSE gives MSE's number (the loss is weighted by sampling weights)
    user = withCrossval(designs["jkstrat"], "api00 ~ api99 + ell + stype", lmtrain, lmtest,
                        loss=lambda y, hat, w: float(np.sum(w * (y - hat) ** 2)))
    assert_rel(user, [REF["jkn_mse"]], TOL, "user loss")


def test_refusals(designs, api):
    taylor = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw")
    with pytest.raises(ValueError, match="ReplicateDesign"):
        withCrossval(taylor, "api00 ~ ell", lmtrain, lmtest)
    a = api["apistrat"]
    fay = np.where(np.arange(a.shape[0])[:, None] % 2 == np.arange(4)[None, :] % 2, 0.5, 1.5)
    rd = ss.ReplicateDesign(a, repweights=fay * a["pw"].to_numpy()[:, None], weights="pw",
                            type="other", scale=1.0, rscales=np.full(4, 0.25),
                            combined_weights=True)  # Fay-like: every replicate keeps every row
    with pytest.raises(ValueError, match="no test-set"):
        withCrossval(rd, "api00 ~ ell", lmtrain, lmtest)
    with pytest.raises(ValueError, match="loss="):
        withCrossval(designs["jkstrat"], "api00 ~ ell", lmtrain, lmtest, loss="hinge")
