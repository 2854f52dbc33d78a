"""svyglm(std_errors="Bell-McCaffrey"/"Bell-McCaffrey-2", degf=True), new in R survey 4.5,
against stored R 4.5 output (tests/reference/r_survey45/bell_mccaffrey.R): ?svyglm's
examples (dstrat, dclus2), the cluster design dclus1 (gaussian and quasibinomial), a
calibrated design; SEs and Bell-McCaffrey degrees of freedom to 1e-9."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import surveysynth as ss
from surveysynth.analysis import glm as glm_module
from tests.conftest import assert_rel

REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "bell_mccaffrey.json")
                 .read_text())
POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
F = "api00 ~ ell + meals + mobility"


@pytest.fixture(scope="module")
def designs(api):
    dclus1 = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    return {
        "dstrat": ss.SurveyDesign(api["apistrat"], strata="stype", weights="pw", fpc="fpc"),
        "dclus2": ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", weights="pw"),
        "dclus1": dclus1,
        "cal": dclus1.calibrate("~stype+api99", POP),
    }


CASES = [  # fixture key, design, std_errors, degf, family, formula
    ("dstrat", "dstrat", "Bell-McCaffrey", False, "gaussian", F),
    ("dstrat_degf", "dstrat", "Bell-McCaffrey", True, "gaussian", F),
    ("dclus1", "dclus1", "Bell-McCaffrey", True, "gaussian", F),
    ("dclus1_bm2", "dclus1", "Bell-McCaffrey-2", True, "gaussian", F),
    ("cal", "cal", "Bell-McCaffrey", True, "gaussian", F),
    ("dclus1_logit", "dclus1", "Bell-McCaffrey", True, "quasibinomial", "sch.wide ~ ell + meals"),
]


@pytest.mark.parametrize("key,name,se,degf,family,formula", CASES)
def test_equal_to_r45(designs, key, name, se, degf, family, formula):
    ref = REF[key]
    m = ss.svyglm(formula, designs[name], family=family, std_errors=se, degf=degf)
    assert_rel(m.params, ref["coef"], 1e-9, f"{key} coef")
    assert_rel(m.vcov().to_numpy().ravel(), ref["vcov"], 1e-9, f"{key} vcov")
    assert m.df_resid == pytest.approx(ref["df_residual"], rel=1e-12)
    if degf:
        assert_rel(m.df_coef, ref["df_coef"], 1e-9, f"{key} df")
        assert m.pvalues.iloc[1] == pytest.approx(
            2 * stats.t.sf(abs(m.tvalues.iloc[1]), min(ref["df_coef"])))


def test_bell_mccaffrey_inflates_the_linearized_ses(designs):
    lin = ss.svyglm(F, designs["dclus1"])
    bm = ss.svyglm(F, designs["dclus1"], std_errors="Bell-McCaffrey")
    assert_rel(lin.vcov().to_numpy().ravel(), REF["dclus1_linearized"]["vcov"], 1e-9)
    assert (bm.bse > lin.bse).all()
    assert lin.df_resid == 11 and bm.df_resid == 11  # design df + 1 - p; BM df with degf


def test_multistage_r_loop(designs, api, monkeypatch):
    """dclus2 (two stages): R's loop runs over the first K rows of unique(design$cluster),
    K the number of PSUs, i.e. 15 of apiclus2's 40 districts, some several times. Ours treats
    each district once; given R's sequence of groups, it gives R's numbers."""
    x = api["apiclus2"]
    uniq = x[["dnum", "snum"]].drop_duplicates()
    K = x.dnum.nunique()
    r_groups = [np.flatnonzero(x.dnum.to_numpy() == v) for v in uniq.dnum.iloc[:K]]
    assert len({int(v) for v in uniq.dnum.iloc[:K]}) == 15 and K == 40
    ours = ss.svyglm(F, designs["dclus2"], std_errors="Bell-McCaffrey")
    assert not np.allclose(ours.vcov().to_numpy().ravel(), REF["dclus2"]["vcov"], rtol=1e-3)
    monkeypatch.setattr(glm_module, "_psu_groups", lambda design, rows: r_groups)
    as_r = ss.svyglm(F, designs["dclus2"], std_errors="Bell-McCaffrey")
    assert_rel(as_r.vcov().to_numpy().ravel(), REF["dclus2"]["vcov"], 1e-9, "R's loop")


def test_refusals(designs):
    with pytest.raises(ValueError, match="std_errors='BM'"):
        ss.svyglm(F, designs["dclus1"], std_errors="BM")
    with pytest.raises(ValueError, match="linearization designs"):
        ss.svyglm(F, designs["dclus1"].jackknife(), std_errors="Bell-McCaffrey")
