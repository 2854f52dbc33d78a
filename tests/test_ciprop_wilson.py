"""``proportion(ci_method="wilson")`` (R survey 4.5's ``svyciprop(method="wilson")``, absent
from R survey 4.1.1 on this machine) against stored output of R survey 4.5:
tests/reference/r_survey45/svyciprop_wilson.R (?svyciprop's dclus1 and rclus1 examples, a
calibrated design, df= and level=, a domain by svyby). The point estimate and SE it is built on
are checked live against R 4.1.1 here too (they did not change in 4.5)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import surveysynth as ss
from tests.conftest import assert_rel

TOL = 1e-10
REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "svyciprop_wilson.json")
                 .read_text())
POP_API = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}


@pytest.fixture(scope="module")
def designs(api):
    c1 = api["apiclus1"].assign(ell0=lambda f: f["ell"] == 0, emer0=lambda f: f["emer"] == 0)
    st = api["apistrat"].assign(yes=lambda f: f["sch.wide"] == "Yes")
    dclus1 = ss.SurveyDesign(c1, ids="dnum", fpc="fpc")
    strat = ss.SurveyDesign(st, strata="stype", weights="pw", fpc="fpc")
    return {"dclus1": dclus1, "rclus1": dclus1.jackknife("JK1"),
            "cal": strat.calibrate("~stype+api99", POP_API)}


def _true_row(out):
    return out[out["level"] == True].iloc[0]  # noqa: E712  (level labels are booleans)


@pytest.mark.parametrize("case,design,col,kw", [
    ("dclus1_ell0", "dclus1", "ell0", {}),
    ("dclus1_ell0_df_inf_level90", "dclus1", "ell0", {"df": math.inf, "level": 0.9}),
    ("dclus1_ell0_df5", "dclus1", "ell0", {"df": 5}),
    ("rclus1_emer0", "rclus1", "emer0", {}),
    ("cal_schwide", "cal", "yes", {}),
])
def test_wilson_equals_R45(designs, case, design, col, kw):
    est, lo, hi, df = REF[case]
    row = _true_row(designs[design].proportion(col, ci_method="wilson", **kw))
    assert_rel([row.estimate, row.ci_low, row.ci_high], [est, lo, hi], TOL, case)
    assert row.df == (math.inf if df == "Inf" else df)


def test_wilson_domains_equal_R45(designs):
    """svyby(~I(ell==0), ~stype, dclus1, svyciprop, method="wilson", vartype="ci")."""
    ref = REF["dclus1_ell0_by_stype"]
    out = designs["dclus1"].proportion("ell0", by="stype", ci_method="wilson")
    out = out[out["level"] == True]  # noqa: E712
    assert_rel(out["estimate"], ref["estimate"], TOL, "estimate")
    assert_rel(out["ci_low"], ref["ci_low"], TOL, "ci_low")
    assert_rel(out["ci_high"], ref["ci_high"], TOL, "ci_high")


def test_wilson_inputs_equal_R41_live(R, designs):
    """The share and SE Wilson is built on, live against R 4.1.1's svymean, and Wilson's
    interval differs from each other method's (a dispatch slip would make two equal) and
    stays inside [0, 1] where the Wald one does not."""
    d = designs["dclus1"]
    row = _true_row(d.proportion("ell0", ci_method="wilson"))
    ref = R("local({d <- svydesign(id=~dnum, fpc=~fpc, data=apiclus1); "
            "m <- svymean(~as.numeric(I(ell==0)), d); c(coef(m), SE(m))})")
    assert_rel([row.estimate, row.se], ref, 1e-12, "svymean")
    others = {m: tuple(_true_row(d.proportion("ell0", ci_method=m))[["ci_low", "ci_high"]])
              for m in ("logit", "asin", "beta", "mean", "xlogit")}
    assert all(not np.allclose(v, (row.ci_low, row.ci_high), rtol=1e-6) for v in others.values())
    assert others["mean"][0] < 0 < row.ci_low
