"""Joint utility in the confidential report (issue 22, Deliver 5): surveysynth.report.joint_utility.

Every number is recomputed here another way: the pMSE with interactions by statsmodels Logit on a
design matrix built by hand (pandas dummies, explicit products), its null expectation by the
formula; k-marginal scores by pandas crosstabs and by synthetic_utility.k_marginal_score; CI
overlap from the confidential design's CIs and the partial-synthesis rule written out here;
regression coefficients by statsmodels WLS. Releases are built by hand from perturbed or
resampled copies of R's apistrat (no Stan), plus one end-to-end run of the sequential example
config through the pipeline.
"""

from __future__ import annotations

import warnings
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from surveysynth import SurveyDesign
from surveysynth.privacy.record import build_record
from surveysynth.release import SyntheticRelease
from surveysynth.report import joint_utility, joint_utility_section, render

NUM = ["api00", "ell"]
CAT = ["awards", "sch.wide", "grade"]
VARS = NUM + CAT
TYPES = {"api00": "continuous", "ell": "bounded", "awards": "binary", "sch.wide": "binary",
         "grade": "categorical"}


@pytest.fixture(scope="module")
def api() -> pd.DataFrame:
    from surveysynth.datasets import load_api

    d = load_api("apistrat").reset_index(drop=True)
    # a 3-level categorical (string levels) of the confidential data
    d["grade"] = np.select([d["meals"] < 30, d["meals"] < 70], ["low", "mid"], "high")
    return d


def _design(frame: pd.DataFrame) -> SurveyDesign:
    return SurveyDesign(frame, strata="stype", weights="pw", fpc="fpc")


def _release(frames: list[pd.DataFrame]) -> SyntheticRelease:
    rec = build_record("none", "test copy", m=len(frames), epsilon=None, seeded=True,
                       notes=["test"])
    return SyntheticRelease([_design(f) for f in frames], "partial", rec)


def _perturbed(api: pd.DataFrame, m: int = 3, n: int | None = None, seed: int = 5):
    """m synthetic stand-ins: rows resampled within strata (n per set if given), numbers
    jittered, 15% of each categorical redrawn from its marginal."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(m):
        if n is None:
            f = api.copy()
        else:
            strata = api["stype"].astype(str).to_numpy()
            rows = np.concatenate([
                rng.choice(np.flatnonzero(strata == h),
                           int(round(n * (strata == h).sum() / len(api))))
                for h in np.unique(strata)])
            f = api.iloc[rows].reset_index(drop=True)
        f["api00"] = np.round(f["api00"] + rng.normal(0, 30, len(f)))
        f["ell"] = np.clip(f["ell"] + rng.integers(-5, 6, len(f)), 0, 100)
        for c in CAT:
            flip = rng.random(len(f)) < 0.15
            vals = np.array(f[c].astype(object), dtype=object)
            vals[flip] = rng.choice(api[c].astype(object).to_numpy(), flip.sum())
            f[c] = pd.Categorical(vals, categories=api[c].cat.categories) if isinstance(
                api[c].dtype, pd.CategoricalDtype) else vals
        out.append(f)
    return out


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **k)


# ------------------------------------------------------------------ pMSE with interactions
def _hand_matrix(frame: pd.DataFrame, levels: dict[str, list[str]]) -> np.ndarray:
    """Main effects (numeric as they are, categoricals as dummies of every level but the
    first confidential one) and the products of every pair of columns of different
    variables, built without the module's coder."""
    blocks = {v: frame[[v]].to_numpy(float) for v in NUM}
    for v in CAT:
        lab = frame[v].astype(str)
        blocks[v] = np.column_stack([(lab == lv).to_numpy(float) for lv in levels[v][1:]])
    names = list(blocks)
    cols = [blocks[v] for v in names]
    for a, b in combinations(range(len(names)), 2):
        A, B = blocks[names[a]], blocks[names[b]]
        cols.append((A[:, :, None] * B[:, None, :]).reshape(len(frame), -1))
    return np.column_stack(cols)


def test_pmse_with_interactions_is_statsmodels_logit_and_null_by_formula(api):
    import statsmodels.api as sm

    frames = _perturbed(api, m=3, n=150)  # sets smaller than the data: c != 1/2
    rel = _release(frames)
    res = _quiet(joint_utility, _design(api), rel, VARS, types=TYPES)
    levels = {"awards": ["No", "Yes"], "sch.wide": ["No", "Yes"],
              "grade": ["high", "low", "mid"]}  # string levels: sorted confidential ones
    Xo = _hand_matrix(api, levels)
    for i, f in enumerate(frames):
        Xs = _hand_matrix(f, levels)
        X = np.vstack([Xo, Xs])
        X = (X - X.mean(0)) / X.std(0)
        t = np.r_[np.zeros(len(Xo)), np.ones(len(Xs))]
        fit = _quiet(sm.Logit(t, sm.add_constant(X)).fit, disp=0, method="bfgs",
                     maxiter=5000, gtol=1e-12)
        N = len(t)
        c = len(Xs) / N
        want = np.mean((fit.predict() - c) ** 2)
        k = X.shape[1] + 1
        null = (k - 1) * (1 - c) ** 2 * c / N
        row = res["pmse"].iloc[i]
        assert row["k"] == k == 1 + 5 + (1 + 1 + 1 + 2 + 1 + 2 + 1 + 2 + 2 + 2)
        assert row["pMSE"] == pytest.approx(want, rel=1e-5)
        assert row["null"] == pytest.approx(null, rel=1e-12)
        assert row["ratio"] == pytest.approx(want / null, rel=1e-5)
        assert row["n_synthetic"] == len(Xs) != len(Xo)
    # main effects alone differ (the interactions are in the joint fit)
    main = np.vstack([Xo[:, :6]])
    assert main.shape[1] == 6
    # per variable: pMSE of the variable's own columns (grade: its 2 dummies)
    Xg = np.column_stack([(api["grade"] == lv).to_numpy(float) for lv in ("low", "mid")])
    vals = []
    for f in frames:
        Xs = np.column_stack([(f["grade"] == lv).to_numpy(float) for lv in ("low", "mid")])
        X = np.vstack([Xg, Xs])
        t = np.r_[np.zeros(len(Xg)), np.ones(len(Xs))]
        p = _quiet(sm.Logit(t, sm.add_constant(X)).fit, disp=0).predict()
        vals.append(np.mean((p - len(Xs) / len(t)) ** 2))
    got = res["variables"].set_index("variable").loc["grade", "pMSE_main"]
    assert got == pytest.approx(np.mean(vals), rel=1e-6)


def test_identical_release_gives_zero_pmse_full_scores_and_overlap_one(api):
    rel = _release([api.copy() for _ in range(3)])
    res = _quiet(joint_utility, _design(api), rel, VARS, types=TYPES,
                 regressions=[{"name": "r", "formula": "api00 ~ ell + awards"}])
    assert np.allclose(res["pmse"]["pMSE"], 0.0, atol=1e-12)
    assert (res["pmse"]["ratio"] < 1e-6).all()
    assert (res["kmarginal"]["score"] == 1000.0).all()
    assert list(res["kmarginal"]["k"]) == [2, 3]
    est = res["estimates"]
    np.testing.assert_allclose(est["release"], est["confidential"], rtol=1e-12)
    # b = 0: the release's interval is t on the design-capped df nu_obs = 197 * 198 / 200
    # (issue 36, D8), the confidential one normal (R confint): overlap 0.5 (1 + z / t)
    z, t_rel = stats.norm.ppf(0.975), stats.t.ppf(0.975, 197 * 198 / 200)
    np.testing.assert_allclose(est["overlap"], 0.5 * (1 + z / t_rel), rtol=1e-9)
    reg = res["regressions"]["r"]
    np.testing.assert_allclose(reg["release"], reg["confidential"], rtol=1e-10)
    assert np.allclose(reg["std_diff"], 0.0, atol=1e-8)
    # the confidential svyglm interval uses t on its residual df, the release's b = 0 rule t
    # on that df capped (nu_obs = df (df + 1)/(df + 3), issue 36, D8): overlap
    # 0.5 (1 + t_df / t_nu_obs), not 1
    fit_df = (200 - 3) - 3 + 1  # R: degf(design) - coefficients + 1
    from surveysynth.analysis import svyglm

    df_resid = svyglm("api00 ~ ell + awards", _design(api)).df_resid
    assert df_resid == fit_df
    tq = stats.t.ppf(0.975, df_resid)
    t_rel = stats.t.ppf(0.975, df_resid * (df_resid + 1) / (df_resid + 3))
    np.testing.assert_allclose(reg["overlap"], 0.5 * (1 + tq / t_rel), rtol=1e-9)


# ------------------------------------------------------------------ k-marginal
def test_k_marginal_equals_crosstabs_and_k_marginal_score(api):
    from surveysynth.synthetic_utility import k_marginal_score

    frames = _perturbed(api, m=2, seed=9)
    rel = _release(frames)
    # categoricals only: the k = 2 score from pandas crosstabs of the levels
    res = _quiet(joint_utility, _design(api), rel, ["awards", "grade"], types=TYPES)
    scores = []
    for f in frames:
        co = pd.crosstab(api["awards"].astype(str), api["grade"], normalize="all")
        cs = pd.crosstab(f["awards"].astype(str), f["grade"], normalize="all")
        td = co.sub(cs, fill_value=0).abs().to_numpy().sum()
        scores.append(1000 * (2 - td) / 2)
    km = res["kmarginal"].set_index("k")
    assert list(km.index) == [2]  # two variables: no k = 3
    assert km.loc[2, "score"] == pytest.approx(np.mean(scores), rel=1e-12)
    # numerics only: the cut at the confidential quartiles is k_marginal_score's
    num3 = ["api00", "ell", "meals"]
    res = _quiet(joint_utility, _design(api), rel, num3)
    for k in (2, 3):
        want = k_marginal_score(api[num3], [f[num3] for f in frames], k=k)["score"]
        assert res["kmarginal"].set_index("k").loc[k, "score"] == pytest.approx(want, rel=1e-12)


def test_shuffled_column_lowers_k_marginal_not_its_one_marginal(api):
    rng = np.random.default_rng(3)
    shuffled = []
    for _ in range(2):
        f = api.copy()
        f["api00"] = rng.permutation(f["api00"].to_numpy())
        shuffled.append(f)
    res = _quiet(joint_utility, _design(api), _release(shuffled), VARS, types=TYPES)
    per = res["variables"].set_index("variable")
    assert (per["one_marginal"] == 1000.0).all()  # every marginal is untouched
    km = res["kmarginal"].set_index("k")["score"]
    assert km.loc[2] < 990 and km.loc[3] < km.loc[2]
    # the joint pMSE sees it (api00 x others), the per-variable main-effect pMSE does not
    assert res["pmse"]["ratio"].mean() > 3
    assert per.loc["api00", "pMSE_main"] == pytest.approx(0.0, abs=1e-12)


# ------------------------------------------------------------------ CI overlap and regressions
def _hand_partial(q: np.ndarray, u: np.ndarray, nu_com: float = 197.0) -> tuple[float, float, float]:
    """Reiter's (2003) partial-synthesis rule, written out: (qbar, lower, upper); the df capped
    by the design df nu_com (apistrat: 200 - 3; issue 36, D8)."""
    m = len(q)
    qbar, ubar, b = q.mean(), u.mean(), q.var(ddof=1)
    T = ubar + b / m
    df = (m - 1) * (1 + ubar / (b / m)) ** 2
    nu_obs = nu_com * (nu_com + 1) / (nu_com + 3) * (1 - (b / m) / T)
    df = 1 / (1 / df + 1 / nu_obs)
    h = stats.t.ppf(0.975, df) * np.sqrt(T)
    return qbar, qbar - h, qbar + h


def _karr(lo, hi, ls, hs):
    inter = min(hi, hs) - max(lo, ls)
    return 0.5 * (inter / (hi - lo) + inter / (hs - ls))


def test_ci_overlap_by_hand_for_means_and_level_shares(api):
    frames = _perturbed(api, m=4, seed=21)
    rel = _release(frames)
    res = _quiet(joint_utility, _design(api), rel, ["api00", "grade"], types=TYPES)
    est = res["estimates"].set_index(["variable", "level"])
    conf = _design(api).mean("api00")
    per = [_design(f).mean("api00") for f in frames]
    qbar, lo, hi = _hand_partial(np.array([p["estimate"][0] for p in per]),
                                 np.array([p["se"][0] ** 2 for p in per]))
    row = est.loc[("api00", "")]
    assert row["release"] == pytest.approx(qbar, rel=1e-12)
    assert (row["rel_ci_low"], row["rel_ci_high"]) == pytest.approx((lo, hi), rel=1e-10)
    assert row["confidential"] == pytest.approx(conf["estimate"][0], rel=1e-12)
    want = _karr(conf["ci_low"][0], conf["ci_high"][0], lo, hi)
    assert row["overlap"] == pytest.approx(want, rel=1e-10)
    # level shares of the 3-level categorical, every level
    w = api["pw"].to_numpy()
    for lv in ("high", "low", "mid"):
        share = w[(api["grade"] == lv).to_numpy()].sum() / w.sum()
        r = est.loc[("grade", lv)]
        assert r["confidential"] == pytest.approx(share, rel=1e-12)
        q = np.array([np.average(f["grade"] == lv, weights=f["pw"]) for f in frames])
        u = np.array([_design(f).proportion("grade").set_index("level").loc[lv, "se"] ** 2
                      for f in frames])
        qbar, lo, hi = _hand_partial(q, u)
        assert r["release"] == pytest.approx(qbar, rel=1e-12)
        assert r["overlap"] == pytest.approx(_karr(r["conf_ci_low"], r["conf_ci_high"], lo, hi),
                                             rel=1e-10)
    assert set(est.index.get_level_values("level")) == {"", "high", "low", "mid"}


def test_disjoint_intervals_give_the_negative_gap_not_zero(api):
    frames = [f.assign(api00=f["api00"] + 150) for f in _perturbed(api, m=3, seed=8)]
    res = _quiet(joint_utility, _design(api), _release(frames), ["api00"])
    row = res["estimates"].iloc[0]
    want = _karr(row["conf_ci_low"], row["conf_ci_high"], row["rel_ci_low"], row["rel_ci_high"])
    assert row["rel_ci_low"] > row["conf_ci_high"]  # disjoint
    assert row["overlap"] == pytest.approx(want, rel=1e-12) and want < -1


def test_regression_coefficients_vs_statsmodels_wls(api):
    import statsmodels.api as sm

    frames = _perturbed(api, m=3, seed=33)
    rel = _release(frames)
    formula = "api00 ~ ell + meals + awards"
    res = _quiet(joint_utility, _design(api), rel, ["api00", "ell"], types=TYPES,
                 regressions=[{"name": "api", "formula": formula}])
    reg = res["regressions"]["api"].set_index("term")

    def wls(f):
        X = sm.add_constant(np.column_stack([f["ell"], f["meals"],
                                             (f["awards"].astype(str) == "Yes")]).astype(float))
        return sm.WLS(f["api00"].to_numpy(float), X, weights=f["pw"].to_numpy(float)).fit().params

    np.testing.assert_allclose(reg["confidential"].to_numpy(), wls(api), rtol=1e-9)
    np.testing.assert_allclose(reg["release"].to_numpy(),
                               np.mean([wls(f) for f in frames], axis=0), rtol=1e-9)
    want = [_karr(*reg.loc[t, ["conf_ci_low", "conf_ci_high", "rel_ci_low", "rel_ci_high"]])
            for t in reg.index]
    np.testing.assert_allclose(reg["overlap"], want, rtol=1e-12)
    np.testing.assert_allclose(reg["std_diff"],
                               (reg["release"] - reg["confidential"]) / reg["conf_se"])
    # a formula that cannot be fitted is reported in the section, not a failed report
    res = _quiet(joint_utility, _design(api), rel, ["api00"],
                 regressions=[{"formula": "api00 ~ nosuch"}])
    assert "nosuch" in res["regressions"]["regression_1"]


def test_section_shows_the_computed_numbers(api):
    from html import escape as html_escape

    from surveysynth.report import format_table

    frames = _perturbed(api, m=2, seed=2)
    rel = _release(frames)
    res = _quiet(joint_utility, _design(api), rel, VARS, types=TYPES,
                 regressions=[{"name": "api", "formula": "api00 ~ ell"}])
    sec = joint_utility_section(_design(api), rel, VARS, result=res)
    html = render(method="test", release=rel, sections=[sec], convergence=None, warnings=[])
    for key in ("pmse", "kmarginal", "estimates", "variables"):
        shown = format_table(res[key])
        for col in shown.columns:
            for v in shown[col].astype(str):
                assert html_escape(v, quote=False) in html, (key, col, v)  # pandas' escaping
    assert "one-hot, 2 indicator(s), reference level 'high'" in html
    assert "CONFIDENTIAL" in html and "Regression api" in html


def test_unknown_variable_is_refused():
    with pytest.raises(ValueError, match="nosuch"):
        joint_utility(_design(pd.DataFrame({"stype": ["E", "E", "H", "H"], "pw": [1.0] * 4,
                                            "fpc": [10.0] * 4, "x": [1.0, 2, 3, 4]})),
                      _release([pd.DataFrame({"stype": ["E", "E", "H", "H"], "pw": [1.0] * 4,
                                              "fpc": [10.0] * 4, "x": [1.0, 2, 3, 5]})]),
                      ["x", "nosuch"])


# ------------------------------------------------------------------ config
def _config(tmp_path, method: str, regression: str) -> str:
    from surveysynth.release_config import example_config, example_data

    example_data().to_csv(tmp_path / "example.csv", index=False)
    text = example_config(method)
    start = text.index("[[report.regressions]]")
    end = text.index("[output]")
    return text[:start] + regression + "\n" + text[end:]


@pytest.mark.parametrize("method, block, key, match", [
    ("FBS", '[[report.regressions]]\nformula = "salary ~ nosuch"\n',
     "report.regressions[0].formula", "nosuch"),
    ("FBS", '[[report.regressions]]\nformula = "salary ~ gender"\nfamly = "poisson"\n',
     "report.regressions[0]", "famly"),
    ("FBS", '[[report.regressions]]\nformula = "salary ~ gender"\nfamily = "logit"\n',
     "report.regressions[0].family", "gaussian"),
    ("FBS", '[report.regressions]\nformula = "salary ~ gender"\n',
     "report.regressions", "array of tables"),
    ("PBP", '[[report.regressions]]\nformula = "salary ~ visits"\n',
     "report.regressions[0].formula", "not released"),
    ("sequential", '[[report.regressions]]\nname = "ok"\nformula = "salary ~ gender"\n'
                   '[[report.regressions]]\nformula = "salary ~ field + visits"\n'
                   '[[report.regressions]]\nformula = "salary ~ gender"\nfamily = "binomial"\n',
     "report.regressions[2].formula", "[0, 1]"),
])
def test_bad_regression_config_names_the_key(tmp_path, method, block, key, match):
    from surveysynth.pipeline import ConfigError, load_config

    cfg = tmp_path / "release.toml"
    cfg.write_text(_config(tmp_path, method, block))
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    msg = str(err.value)
    assert key in msg and match in msg, msg


def test_good_regression_config_is_kept(tmp_path):
    from surveysynth.pipeline import load_config

    cfg = tmp_path / "release.toml"
    cfg.write_text(_config(tmp_path, "sequential",
                           '[[report.regressions]]\nname = "pay"\nformula = "salary ~ gender + '
                           'visits"\n[[report.regressions]]\nformula = "visits ~ salary"\n'
                           'family = "poisson"\n'))
    got = load_config(cfg).regressions
    assert got == [{"name": "pay", "formula": "salary ~ gender + visits", "family": "gaussian"},
                   {"name": "regression_2", "formula": "visits ~ salary", "family": "poisson"}]

# the end-to-end check (a sequential release through the pipeline carries this section, the
# public folder none of it) is in tests/test_sequential.py::test_release_config_sequential_end_to_end
