"""svyloglin against R survey: ?svyloglin's example (apiclus1, ~stype+comp.imp, its
saturated model and the linear-by-linear association) on the cluster design, its JK1
replicate design and a calibrated design. Coefficients and vcov (the same in R 4.1.1 and
4.5) live through rpy2 to 1e-9; anova's statistics and p-values live (R 4.1.1, under
``survey_version="4.1"``) and against stored R 4.5 output
(tests/reference/r_survey45/svyloglin.R)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import surveysynth as ss
from surveysynth.analysis import loglin_anova, svyloglin
from tests.conftest import assert_rel

REF = json.loads((Path(__file__).parent / "reference" / "r_survey45" / "svyloglin.json")
                 .read_text())
POP = {"(Intercept)": 6194, "stypeH": 755, "stypeM": 1018, "api99": 3914069}
R_DESIGNS = {
    "dclus1": "dclus1",
    "jk1": "as.svrepdesign(dclus1, type='JK1')",
    "cal": "calibrate(dclus1, ~stype+api99, c(`(Intercept)`=6194, stypeH=755, stypeM=1018, "
           "api99=3914069))",
}
A, B, D = "~ stype + comp.imp", "~ stype * comp.imp", "~ stype + comp.imp + I(stype * comp.imp)"


@pytest.fixture(scope="module")
def designs(api):
    d = ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc")
    return {"dclus1": d, "jk1": d.jackknife("JK1"), "cal": d.calibrate("~stype+api99", POP)}


def _r(R, name: str, code: str) -> np.ndarray:
    return R("local({ dclus1 <- svydesign(id=~dnum, weights=~pw, data=apiclus1, fpc=~fpc); "
             f"d <- {R_DESIGNS[name]}; a <- svyloglin(~stype+comp.imp, d); "
             "b <- update(a, ~.^2); "
             f"dd <- update(a, ~.+as.numeric(stype):as.numeric(comp.imp)); {code} }})")


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_coefficients_and_vcov(R, designs, name):
    a = svyloglin(A, designs[name])
    b, d = a.update(B), a.update(D)
    assert list(b.params.index) == ["stype1", "stype2", "comp.imp1", "stype1:comp.imp1",
                                    "stype2:comp.imp1"]
    for m, r in ((a, "a"), (b, "b"), (d, "dd")):
        ref = _r(R, name, f"c(coef({r}), as.vector(vcov({r})), deviance({r}))")
        k = m.params.shape[0]
        assert_rel(m.params, ref[:k], 1e-9, f"{name} {r} coef")
        vc = ref[k:k + k * k]  # calibrated on stype: its variances are 0 up to rounding
        assert_rel(m.vcov().to_numpy().ravel(), vc, 1e-9, f"{name} {r} vcov",
                   atol=1e-9 * np.abs(vc).max())
        assert m.deviance == pytest.approx(ref[-1], rel=1e-9, abs=1e-12)
    assert b.deviance == pytest.approx(0, abs=1e-8)  # saturated


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_anova_41_live(R, designs, name):
    a = svyloglin(A, designs[name])
    for other, r in ((B, "b"), (D, "dd")):
        an = loglin_anova(a, a.update(other), survey_version="4.1")
        ref = _r(R, name, f"an <- anova(a, {r}); c(an$dev$dev, an$dev$p[2:4], "
                          "an$score$chisq, an$score$p[2:4], an$a)")
        ours = np.r_[an["deviance"], an["deviance_p"]["chisq"], an["deviance_p"]["F"],
                     an["deviance_p"]["saddlepoint"], an["score"], an["score_p"]["chisq"],
                     an["score_p"]["F"], an["score_p"]["saddlepoint"], an["a"]]
        assert_rel(ours, ref, 1e-8, f"{name} {r}")


@pytest.mark.parametrize("name", list(R_DESIGNS))
def test_anova_45(designs, name):
    """R 4.5: the score F test's df times k; its F p-values use sum(D) for tr2 (xdesign.R's
    redefinition), reproduced here from D to show that is the only difference from ours."""
    a = svyloglin(A, designs[name])
    for other, key in ((B, "ab"), (D, "ad")):
        an = loglin_anova(a, a.update(other))
        ref = REF[name][key]
        assert an["deviance"] == pytest.approx(ref["dev"], rel=1e-9)
        assert an["score"] == pytest.approx(ref["score"], rel=1e-9)
        assert_rel(an["a"], ref["a"], 1e-8)
        for stat, p in (("deviance", "dev_p"), ("score", "score_p")):
            assert_rel([an[f"{stat}_p"]["chisq"], an[f"{stat}_p"]["saddlepoint"]],
                       [ref[p][0], ref[p][2]], 1e-8, f"{name} {key} {stat}")
        Dm, k, dfn = an["D"], an["df"], an["df_null"]
        tr, bad_tr2, tr2 = np.trace(Dm), Dm.sum(), np.sum(Dm * Dm)
        nu_r = tr**2 / bad_tr2
        r45 = [stats.f.sf(an["deviance"] / tr, nu_r, dfn * nu_r),
               stats.f.sf(an["score"] / tr, k * nu_r, k * dfn * nu_r)]
        assert_rel(r45, [ref["dev_p"][1], ref["score_p"][1]], 1e-8, f"{name} {key} R 4.5 F")
        nu = tr**2 / tr2
        assert an["score_p"]["F"] == pytest.approx(stats.f.sf(an["score"] / tr, k * nu,
                                                              k * dfn * nu), rel=1e-12)


def test_bad_input(designs):
    d = designs["dclus1"]
    with pytest.raises(ValueError, match="one-sided"):
        svyloglin("api00 ~ stype", d)
    with pytest.raises(ValueError, match="without its main effect"):
        svyloglin("~ stype + stype:comp.imp", d)
    a = svyloglin(A, d)
    with pytest.raises(ValueError, match="same table"):
        loglin_anova(a, svyloglin(B, d))
