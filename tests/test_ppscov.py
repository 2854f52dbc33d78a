"""``ppscov`` and ``poisson_sampling`` (R survey's pps specifications from the covariance of
the sampling indicators) against R: the weighted form and Poisson sampling live (R 4.1.1,
whose code for them is 4.5's), the unweighted form against R survey 4.5's stored output
(tests/reference/r_survey45/ppscov.R: 4.1.1 fails on it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.variance.pps import poisson_sampling, ppscov, ppsmat
from tests.conftest import assert_rel

TOL = 1e-9
REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "ppscov.json").read_text())


def _r(code: str) -> np.ndarray:
    with r_session("survey") as (ro, _):
        return np.array(ro.r(code), dtype=float)


@pytest.fixture(scope="module")
def election():
    with r_session("survey") as (ro, _):
        ro.r("suppressMessages(library(survey)); data(election); data(api)")
        frame = r_to_pandas(ro.r("election_pps"))
    n = int(_r("nrow(election_jointprob)")[0])
    P = _r("as.vector(election_jointprob)").reshape(n, n, order="F")
    pi = np.diag(P)
    return frame, P, P - np.outer(pi, pi)


def _stat(r):
    return np.r_[r["estimate"].to_numpy(float), r["se"].to_numpy(float)]


def test_ppscov_unweighted_equals_r45(election):
    frame, _, delta = election
    d = ss.SurveyDesign(frame, fpc="p", pps=ppscov(delta))
    t = d.total(["Bush", "Kerry"], covmat=True)
    assert REF["survey_version"] == "4.5"
    assert_rel(_stat(t), REF["ht_total"]["estimate"] + REF["ht_total"]["se"], TOL, "HT total")
    assert_rel(t.vcov().to_numpy().ravel(order="F"), REF["ht_total"]["vcov"], TOL, "vcov")
    m = d.mean(["Bush", "Kerry"])
    assert_rel(_stat(m), REF["ht_mean"]["estimate"] + REF["ht_mean"]["se"], TOL, "HT mean")
    r = d.ratio("Bush", "Kerry")
    assert_rel(_stat(r), [REF["ht_ratio"]["estimate"], REF["ht_ratio"]["se"]], TOL, "ratio")
    yg = ss.SurveyDesign(frame, fpc="p", pps=ppscov(delta), variance="YG").total(
        ["Bush", "Kerry"])
    assert_rel(_stat(yg), REF["yg_total"]["estimate"] + REF["yg_total"]["se"], TOL, "YG")


def test_ppscov_weighted_is_ppsmat_and_r(election):
    """weighted=True takes Dcheck as it is: the same as ppsmat of the joint probabilities
    (tolerance 0) and R live; the unweighted form differs off the diagonal (a mutant
    weighting Delta by 1/pi_ij, or not at all, fails one of the two checks)."""
    frame, P, delta = election
    w = ss.SurveyDesign(frame, fpc="p", pps=ppscov(delta / P, weighted=True))
    j = ss.SurveyDesign(frame, fpc="p", pps=ppsmat(P, tolerance=0))
    r = _r("pij <- election_jointprob; pi <- diag(pij); "
           "dw <- svydesign(id=~1, fpc=~p, data=election_pps, "
           "pps=ppscov((pij - outer(pi, pi))/pij, weighted=TRUE)); "
           "t <- svytotal(~Bush+Kerry, dw); c(coef(t), SE(t))")
    assert_rel(_stat(w.total(["Bush", "Kerry"])), r, TOL, "weighted vs R")
    assert_rel(_stat(j.total(["Bush", "Kerry"])), r, TOL, "ppsmat")
    u = ss.SurveyDesign(frame, fpc="p", pps=ppscov(delta)).total(["Bush", "Kerry"])
    assert abs(u["se"].iloc[0] / r[2] - 1) > 0.1


def test_poisson_sampling_against_r_and_its_formula(api):
    with r_session("survey") as (ro, _):
        # every 8th school of apipop (775), so R's svyby over the n x n PPS matrices stays
        # fast (the whole apipop gives ~4,000 sampled units and R runs for many minutes)
        ro.r("set.seed(2021-7-15); pp <- apipop[seq(1, nrow(apipop), by = 8), ]; "
             "pp$prob <- pp$api00/1000; "
             "pp <- pp[rbinom(nrow(pp), 1, pp$prob) == 1, ]; apipois_k <- pp; "
             "des_pois <- svydesign(id=~1, prob=~prob, pps=poisson_sampling(pp$prob), "
             "data=pp)")
        frame = r_to_pandas(ro.r("apipois_k[, c('api00', 'api99', 'enroll', 'stype', 'prob')]"))
    d = ss.SurveyDesign(frame, probs="prob", pps=poisson_sampling(frame["prob"]))
    ours = np.r_[_stat(d.total(["api00", "api99"])), _stat(d.mean(["api00"]))]
    r = _r("t <- svytotal(~api00+api99, des_pois); m <- svymean(~api00, des_pois); "
           "c(coef(t), SE(t), coef(m), SE(m))")
    assert_rel(ours, r, TOL, "poisson")
    se = np.sqrt(np.sum((frame["api00"] / frame["prob"]) ** 2 * (1 - frame["prob"])))
    assert d.total("api00")["se"].iloc[0] == pytest.approx(se, rel=1e-12)  # ?poisson_sampling
    dom = d.total("api00", by="stype")
    r_dom = _r("b <- svyby(~api00, ~stype, des_pois, svytotal); c(coef(b), SE(b))")
    assert_rel(_stat(dom), r_dom, TOL, "poisson domains")


def test_ppscov_errors(election):
    frame, _, delta = election
    with pytest.raises(ValueError, match="40 PSUs"):
        ss.SurveyDesign(frame, fpc="p", pps=ppscov(delta[:5, :5]))
    asym = delta.copy()
    asym[0, 1] += 1e-3
    with pytest.raises(ValueError, match="not symmetric"):
        ss.SurveyDesign(frame, fpc="p", pps=ppscov(asym))
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        poisson_sampling([0.5, 0.0])
