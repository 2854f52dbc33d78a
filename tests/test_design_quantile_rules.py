"""Quantile rules (qrule=) and Woodruff interval types (interval_type=) equal R 4.1's
svyquantile, live through rpy2, to 1e-9: a stratified two-stage design with fpc, a cluster
design and a JKn replicate design, overall and in domains."""

from __future__ import annotations

import numpy as np
import pytest

import surveysynth as ss
from surveysynth.estimate import INTERVAL_TYPES, QRULES
from tests.conftest import assert_rel
from tests.test_contrast import R_DESIGNS, strat2

PS = [0.1, 0.37, 0.5, 0.9]
NAMES = ["strat2", "clus1", "strat_jkn"]


@pytest.fixture(scope="module")
def designs(api):
    return {
        "strat2": strat2(api),
        "clus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc"),
        "strat_jkn": ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw").jackknife(),
    }


def r_quantiles(R, name: str, qrule: str, itype: str, by: bool) -> np.ndarray:
    """(estimate, ci_low, ci_high, se) per quantile (per domain when by), R's order."""
    ps = ",".join(map(str, PS))
    one = (f"function(s) {{ q <- svyquantile(~api00, s, c({ps}), qrule='{qrule}', "
           f"interval.type='{itype}')$api00; as.vector(t(q)) }}")
    if name == "strat_jkn" and itype not in ("mean", "quantile"):
        # R 4.1's svyquantile.svyrep.design does not pass interval.type on to woodruffCI
        # (it always uses "mean"); the reference is woodruffCI called as the Taylor method
        # calls it, with the replicate design
        one = (f"function(s) {{ w <- weights(s, 'sampling'); x <- s$variables$api00; "
               f"qf <- get('qrule_{qrule}', asNamespace('survey')); df <- degf(s); "
               f"as.vector(sapply(c({ps}), function(p) {{ q <- qf(x, w, p); "
               f"ci <- survey:::woodruffCI(x, q, p, s, qf, 0.05, df, method='{itype}'); "
               "c(q, ci, diff(ci) / (2 * qt(0.975, df))) })) }")
    if by:
        code = (f"f <- {one}; lv <- sort(unique(as.character(d$variables$stype))); "
                "as.vector(sapply(lv, function(v) f(d[as.character(d$variables$stype) == v, ])))")
    else:
        code = f"f <- {one}; f(d)"
    return R(f"local({{ d <- {R_DESIGNS[name]}; suppressWarnings({{ {code} }}) }})")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("by", [False, True])
def test_qrules_equal_R(R, designs, name, by):
    d = designs[name]
    for rule in QRULES:
        # live R 4.1.1's boundary test (wlow == 0; 4.5's is tested in test_r_compat45.py)
        out = d.quantile("api00", PS, by="stype" if by else None, qrule=rule,
                         survey_version="4.1")
        ref = r_quantiles(R, name, rule, "mean", by).reshape(-1, 4)
        ours = out[["estimate", "ci_low", "ci_high", "se"]].to_numpy()
        assert_rel(ours, ref, 1e-9, f"{name} qrule={rule} by={by}")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("by", [False, True])
def test_interval_types_equal_R(R, designs, name, by):
    d = designs[name]
    for itype in [t for t in INTERVAL_TYPES if t != "quantile"]:
        for rule in ("math", "hf7"):
            out = d.quantile("api00", PS, by="stype" if by else None, qrule=rule,
                             interval_type=itype, survey_version="4.1")
            ref = r_quantiles(R, name, rule, itype, by).reshape(-1, 4)
            ours = out[["estimate", "ci_low", "ci_high", "se"]].to_numpy()
            assert_rel(ours, ref, 1e-9, f"{name} interval_type={itype} qrule={rule} by={by}")


def test_R_ignores_interval_type_on_replicate_designs(R):
    """The decision above rests on this: R 4.1 gives the 'mean' interval whatever
    interval.type is on a replicate design."""
    d = R_DESIGNS["strat_jkn"]
    a = R(f"local({{ d <- {d}; as.vector(svyquantile(~api00, d, 0.1, "
          "interval.type='beta')$api00) })")
    b = R(f"local({{ d <- {d}; as.vector(svyquantile(~api00, d, 0.1)$api00) }})")
    assert np.array_equal(a, b)


def test_rules_differ_and_bad_names(designs):
    d = designs["clus1"]
    est = {r: tuple(d.quantile("api00", PS, qrule=r).estimate) for r in QRULES}
    # hf1 is math and hf2 is school in R; the interpolating rules each give their own answer
    assert est["hf1"] == est["math"] and est["hf2"] == est["school"]
    assert len(set(est.values())) >= 8  # math=hf1=school=hf2=hf3 here: no exact boundary
    with pytest.raises(ValueError, match="qrule='hf10'"):
        d.quantile("api00", 0.5, qrule="hf10")
    with pytest.raises(ValueError, match="interval_type='score'"):
        d.quantile("api00", 0.5, interval_type="score")


@pytest.mark.parametrize("by", [False, True])
def test_replicate_quantile_interval_equals_R(R, designs, by):
    """interval_type='quantile' (R repCI): replicate quantiles, their svrVar, symmetric CI."""
    d = designs["strat_jkn"]
    for rule in ("math", "hf6", "shahvaish"):
        with pytest.warns(UserWarning, match="Jackknife replicate weights"):
            out = d.quantile("api00", PS, by="stype" if by else None, qrule=rule,
                             interval_type="quantile")
        ref = r_quantiles(R, "strat_jkn", rule, "quantile", by).reshape(-1, 4)
        ours = out[["estimate", "ci_low", "ci_high", "se"]].to_numpy()
        assert_rel(ours, ref, 1e-9, f"repCI qrule={rule} by={by}")
    with pytest.raises(ValueError, match="needs replicate weights"):
        designs["clus1"].quantile("api00", 0.5, interval_type="quantile")
