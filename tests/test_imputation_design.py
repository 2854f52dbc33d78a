"""ImputationDesign, MIcombine and withPV against R survey 4.1.1 + mitools 2.4 (live, rpy2):
R's own examples (?with.svyimputationList: the mitools smoking data, svymean of drkfre;
?withPV.survey.design: pisamaths, svyglm over five plausible values), a replicate design
(R's bootstrap replicate weights per imputation) and a calibrated design; estimates, SEs,
Rubin's df, missing information and intervals to 1e-8 relative."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from r_bridge import r_session
from r_bridge.convert import r_to_pandas
from surveysynth.analysis import svyglm
from surveysynth.analysis.imputation import ImputationDesign, MIcombine, withPV
from surveysynth.replicate_design import ReplicateDesign
from tests.conftest import assert_rel

TOL = 1e-8

R_SETUP = r"""
suppressMessages({library(survey); library(mitools)})
data.dir <- system.file("dta", package="mitools")
files.men <- list.files(data.dir, pattern="m.\\.dta$", full=TRUE)
men <- imputationList(lapply(files.men, foreign::read.dta, warn.missing.labels=FALSE))
files.women <- list.files(data.dir, pattern="f.\\.dta$", full=TRUE)
women <- imputationList(lapply(files.women, foreign::read.dta, warn.missing.labels=FALSE))
men <- update(men, sex=1); women <- update(women, sex=0)
mi_all <- rbind(men, women)
mi_des <- svydesign(id=~id, strata=~sex, data=mi_all)
set.seed(42); mi_rep <- as.svrepdesign(mi_des, type="boot", replicates=50)
mi_cal <- mi_des
mi_cal$designs <- lapply(mi_des$designs, calibrate, ~sex,
                         population=c(`(Intercept)`=2000, sex=900))
"""


def _summary(expr: str) -> dict[str, np.ndarray]:
    """R's MIcombine of ``expr`` (a list of results) and summary()'s interval."""
    with r_session("survey") as (ro, _):
        ro.r(f"mi_r <- MIcombine({expr}); mi_crit <- qt(0.025, mi_r$df, lower.tail=FALSE)")
        get = {"estimate": "coef(mi_r)", "se": "sqrt(diag(vcov(mi_r)))", "df": "mi_r$df",
               "missinfo": "mi_r$missinfo",
               "ci_low": "coef(mi_r) - mi_crit*sqrt(diag(vcov(mi_r)))",
               "ci_high": "coef(mi_r) + mi_crit*sqrt(diag(vcov(mi_r)))"}
        return {k: np.array(ro.r(v), dtype=float) for k, v in get.items()}


def _check(ours: pd.DataFrame, ref: dict[str, np.ndarray], what: str) -> None:
    for col, val in ref.items():
        assert_rel(ours[col].to_numpy(dtype=float), val, TOL, f"{what} {col}")


@pytest.fixture(scope="module")
def mi():
    with r_session("survey") as (ro, _):
        ro.r(R_SETUP)
        frames = [r_to_pandas(ro.r(f"mi_all$imputations[[{i}]]")) for i in range(1, 6)]
        reps = []
        for i in range(1, 6):
            M = np.array(ro.r(f"as.matrix(weights(mi_rep$designs[[{i}]], 'analysis'))"),
                         dtype=float)
            pw = np.array(ro.r(f"as.numeric(mi_rep$designs[[{i}]]$pweights)"), dtype=float)
            scale = float(np.array(ro.r(f"mi_rep$designs[[{i}]]$scale"))[0])
            reps.append(ReplicateDesign(frames[i - 1], repweights=M, weights=pw, type="other",
                                        scale=scale, rscales=np.ones(M.shape[1]), mse=False,
                                        combined_weights=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # R's "assuming equal probability"
        des = ImputationDesign.from_frames(frames, ids="id", strata="sex")
    return {"frames": frames, "des": des, "rep": ImputationDesign(reps)}


def test_r_example_svymean(mi):
    """?with.svyimputationList: MIcombine(with(designs, svymean(~drkfre)))."""
    ref = _summary("with(mi_des, svymean(~drkfre))")
    out = mi["des"].mean("drkfre")
    _check(out, ref, "svymean drkfre")
    # the same through with_ + MIcombine, R's spelling
    _check(MIcombine(mi["des"].with_(lambda d: d.mean("drkfre"))), ref, "with_")
    assert out["m"].iloc[0] == 5
    # Rubin's T, not the partial-synthesis ubar + b/m: the between part is (1 + 1/m) b
    t = out["within"] + (1 + 1 / 5) * out["between"]
    assert_rel(out["variance"], t, 1e-12, "T")


def test_total_ratio_domain(mi):
    ref = _summary("with(mi_des, svytotal(~drkfre))")
    _check(mi["des"].total("drkfre"), ref, "svytotal")
    ref = _summary("with(mi_des, svyby(~drkfre, ~sex, svymean))")
    ours = mi["des"].mean("drkfre", by="sex")
    # R's svyby orders sex-major within each level column; ours: one row per (sex, level)
    order = ours.sort_values(["level", "sex"], key=lambda s: s.map(
        {v: i for i, v in enumerate(ours["level"].unique())}) if s.name == "level" else s).index
    _check(ours.loc[order], ref, "svyby mean")


def test_replicate_design(mi):
    """?with.svyimputationList's second part: bootstrap replicates per imputation."""
    ref = _summary("with(mi_rep, svymean(~drkfre))")
    _check(mi["rep"].mean("drkfre"), ref, "replicate svymean")
    # map() is R's as.svrepdesign on the list: our own jackknife per imputation vs R's JK1
    with r_session("survey") as (ro, _):
        ro.r("mi_jk <- as.svrepdesign(mi_des, type='JKn')")
    ref = _summary("with(mi_jk, svymean(~drkfre))")
    _check(mi["des"].map(lambda d: d.jackknife()).mean("drkfre"), ref, "JKn svymean")


def test_calibrated_design(mi):
    ref = _summary("with(mi_cal, svytotal(~drkfre))")
    cal = mi["des"].map(lambda d: d.calibrate("~sex", {"(Intercept)": 2000, "sex": 900}))
    _check(cal.total("drkfre"), ref, "calibrated svytotal")


def test_glm(mi):
    ref = _summary("with(mi_des, svyglm(I(drkfre=='Non drinker')~sex, family=quasibinomial))")
    fr = mi["des"].update(nondrinker=lambda f: (f["drkfre"] == "Non drinker").astype(float))
    out = fr.glm("nondrinker ~ sex", family="quasibinomial")
    _check(out, ref, "svyglm")
    assert list(out["term"]) == ["Intercept", "sex"]


def test_withpv_r_example():
    """?withPV.survey.design: pisamaths, svyglm over five plausible values, lonely PSUs
    removed."""
    with r_session("survey") as (ro, _):
        ro.r("""suppressMessages(library(mitools)); data(pisamaths, package="mitools")
pv_des <- svydesign(id=~SCHOOLID+STIDSTD, strata=~STRATUM, nest=TRUE,
                    weights=~W_FSCHWT+condwt, data=pisamaths)
oo <- options(survey.lonely.psu="remove")
pv_res <- withPV(list(maths~PV1MATH+PV2MATH+PV3MATH+PV4MATH+PV5MATH), data=pv_des,
   action=quote(svyglm(maths~ST04Q01*(PCGIRLS+SMRATIO)+MATHEFF+OPENPS, design=pv_des)),
   rewrite=TRUE)
options(oo)""")
        pisa = r_to_pandas(ro.r("pisamaths"))
    ref = _summary("pv_res")
    d = ss.SurveyDesign(pisa, ids=["SCHOOLID", "STIDSTD"], strata="STRATUM", nest=True,
                        weights=["W_FSCHWT", "condwt"], lonely_psu="remove")
    pvs = [f"PV{i}MATH" for i in range(1, 6)]
    res = withPV({"maths": pvs}, d, lambda des: svyglm(
        "maths ~ ST04Q01*(PCGIRLS+SMRATIO) + MATHEFF + OPENPS", des, na_rm=True))
    assert len(res) == 5
    out = MIcombine(res)
    _check(out, ref, "withPV svyglm")
    assert "maths" not in d.data.columns  # the caller's design is untouched
    # each result used its own plausible value: the i-th fit equals a fit on PVi directly
    direct = svyglm("PV3MATH ~ ST04Q01*(PCGIRLS+SMRATIO) + MATHEFF + OPENPS", d, na_rm=True)
    assert_rel(res[2].params.to_numpy(), direct.params.to_numpy(), 1e-12, "PV3 fit")
    # a replicate design works the same (R's withPV.svyrep.design): means of the PVs
    out_mean = MIcombine(withPV({"maths": pvs}, d, lambda des: des.mean("maths")))
    with r_session("survey") as (ro, _):
        ro.r("oo <- options(survey.lonely.psu='remove')")
        ref = _summary("withPV(list(maths~PV1MATH+PV2MATH+PV3MATH+PV4MATH+PV5MATH), "
                       "data=pv_des, action=quote(svymean(~maths, design=pv_des)))")
        ro.r("options(oo)")
    _check(out_mean, ref, "withPV svymean")


def test_errors(mi):
    d = mi["des"].designs[0]
    with pytest.raises(ValueError, match="already a column"):
        withPV({"drkfre": ["drkfre"]}, d, lambda x: x.mean("drkfre"))
    with pytest.raises(ValueError, match="not in the data"):
        withPV({"w": ["nope"]}, d, lambda x: x.mean("w"))
    with pytest.raises(ValueError, match="same number"):
        withPV({"a": ["sex", "id"], "b": ["sex"]}, d, lambda x: x.mean("a"))
    with pytest.raises(ValueError, match="imputation 1 gives rows"):
        MIcombine([d.mean("drkfre"), d.mean("sex")])
    with pytest.raises(ValueError, match="same sample"):
        ImputationDesign.from_frames([mi["frames"][0], mi["frames"][1].iloc[:10]], ids="id")
    with pytest.raises(ValueError, match="no designs"):
        ImputationDesign([])
    with pytest.raises(ValueError, match="rows of the full sample"):
        d.update(x=[1.0, 2.0])


def test_update_keeps_subset_and_data(mi):
    d = mi["des"].designs[0]
    sub = d.subset(d.data["sex"] == 1)
    up = sub.update(sex2="sex")
    assert up.n == sub.n and "sex2" in up.data and "sex2" not in sub.data
    assert_rel(up.mean("sex2")["estimate"], [1.0], 1e-12, "subset kept")


def test_ratio_proportion_quantile(mi):
    """Every estimator goes through Rubin's rules: ratio of totals (svyratio), proportions,
    and quantiles with their Woodruff SEs (MIcombine of svyquantile uses coef and SE)."""
    ref = _summary("with(mi_des, svyratio(~alcdhi, ~cistot))")
    _check(mi["des"].ratio("alcdhi", "cistot"), ref, "svyratio")
    ref = _summary("with(mi_des, svymean(~smk))")
    _check(mi["des"].proportion("smk"), ref, "proportion")
    with r_session("survey") as (ro, _):
        ro.r("mi_q <- with(mi_des, svyquantile(~cistot, 0.5, ci=TRUE, se=TRUE))")
        q = np.array(ro.r("sapply(mi_q, coef)"), dtype=float)
        se = np.array(ro.r("sapply(mi_q, SE)"), dtype=float)
    ours = mi["des"].quantile("cistot", 0.5)
    per = [d.quantile("cistot", 0.5) for d in mi["des"].designs]
    assert_rel([p["estimate"].iloc[0] for p in per], q, TOL, "per-imputation quantiles")
    assert_rel([p["se"].iloc[0] for p in per], se, TOL, "per-imputation quantile SEs")
    # cistot is not imputed: the medians agree (b = 0, Rubin df infinite, missinfo 0)
    ref = _summary("lapply(mi_q, coef), lapply(mi_q, function(x) as.matrix(SE(x)^2))")
    _check(ours, ref, "quantile")
