"""engine="samplics" agrees with the native engine (itself tested against R) where samplics
supports the design, and says why where it does not."""

from __future__ import annotations

import pytest

import surveysynth as ss
from surveysynth.engines.samplics_engine import UnsupportedBySamplics
from tests.conftest import assert_rel

SUPPORTED = {
    "strat": ("apistrat", dict(strata="stype", weights="pw", fpc="fpc")),
    "clus1": ("apiclus1", dict(ids="dnum", weights="pw", fpc="fpc")),
    "clus2_nofpc": ("apiclus2", dict(ids="~dnum+snum", weights="pw")),
    "strat_nest": ("apistrat", dict(ids="dnum", strata="stype", weights="pw", nest=True)),
}


@pytest.mark.parametrize("name", list(SUPPORTED))
def test_samplics_matches(R, api, name):
    data, kwargs = SUPPORTED[name]
    d = ss.SurveyDesign(api[data], **kwargs)
    sub = d.subset(d.data["sch.wide"] == "Yes")
    cases = [
        lambda x, e: x.mean(["api00", "api99"], engine=e),
        lambda x, e: x.total("enroll", na_rm=True, engine=e),
        lambda x, e: x.ratio("api.stu", "enroll", na_rm=True, engine=e),
        lambda x, e: x.proportion("stype", engine=e),
        lambda x, e: x.mean("api00", by="stype", engine=e),
        lambda x, e: x.total("api00", by=["stype", "sch.wide"], engine=e),
    ]
    for design in (d, sub):
        for f in cases:
            a, b = f(design, "native"), f(design, "samplics")
            assert_rel(b.estimate, a.estimate, tol=1e-9)
            # SEs that are zero in theory (stype shares within stype strata) are rounding noise
            assert_rel(b.se, a.se, tol=1e-9, atol=1e-12 * float(a.estimate.abs().max()))
    # and the native numbers are R's: one direct check per design
    r_args = {"strat": "id=~1, strata=~stype, weights=~pw, fpc=~fpc, data=apistrat",
              "clus1": "id=~dnum, weights=~pw, fpc=~fpc, data=apiclus1",
              "clus2_nofpc": "id=~dnum+snum, weights=~pw, data=apiclus2",
              "strat_nest": "id=~dnum, strata=~stype, weights=~pw, nest=TRUE, data=apistrat"}[name]
    r = R(f"local({{d <- svydesign({r_args}); s <- svymean(~api00, d); c(coef(s), SE(s))}})")
    b = d.mean("api00", engine="samplics")
    assert_rel([b.estimate[0], b.se[0]], r)


def test_samplics_lonely_remove_and_fail(api):
    d = ss.SurveyDesign(api["apiclus1"], strata="dnum", weights="pw", lonely_psu="remove")
    assert_rel(d.mean("api00", engine="samplics").se, d.mean("api00").se)
    d = ss.SurveyDesign(api["apiclus1"], strata="dnum", weights="pw", lonely_psu="certainty")
    assert_rel(d.mean("api00", engine="samplics").se, d.mean("api00").se)


def test_samplics_unsupported_says_why(api):
    d2 = ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2")
    with pytest.raises(UnsupportedBySamplics, match="later stages"):
        d2.mean("api00", engine="samplics")
    d = ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw")
    with pytest.raises(UnsupportedBySamplics, match="quantiles"):
        d.quantile("api00", 0.5, engine="samplics")
    d = ss.SurveyDesign(api["apiclus1"], strata="dnum", weights="pw", lonely_psu="adjust")
    with pytest.raises(UnsupportedBySamplics, match="adjust"):
        d.mean("api00", engine="samplics")
