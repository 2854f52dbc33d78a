"""The public-use studies of issue 22: their metrics, the CART baseline, the simulation's
population, and fast runs of the two vignettes with their numbers checked independently.

Which wrong versions each test kills is said in its docstring.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "vignettes"))

common = importlib.import_module("public_use_common")
sim = importlib.import_module("public_use_simulation")


# ------------------------------------------------------------------------------ CART
def test_cart_keeps_relations_through_synthetic_predictors():
    """y = 100 x + noise and z = 'a' iff y > 50: in every synthetic row y matches the row's own
    synthetic x and z its synthetic y; every y is a confidential value. Kills: donors drawn from
    the whole column (no relation), trees applied to the confidential predictors (the relation
    holds for the confidential x of row i, not the synthetic one), leaf means instead of
    donors (values not in the data)."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 2, 400)
    y = 100 * x + rng.random(400)
    data = pd.DataFrame({"x": x, "y": y, "z": np.where(y > 50, "a", "b")})
    sets = common.cart_synthesize(data, ["x", "y", "z"], ["z"], np.random.default_rng(1), m=3)
    for s in sets:
        assert len(s) == 400
        assert np.all(np.abs(s["y"] - 100 * s["x"]) < 1)
        assert np.all((s["y"] > 50) == (s["z"].astype(str) == "a"))
        assert np.isin(s["y"], y).all()
    # the first column is a bootstrap of the observed one: share of x = 1 near the data's
    share = np.mean([s["x"].mean() for s in sets])
    assert abs(share - x.mean()) < 4 * np.sqrt(0.25 / 1200)


def test_cart_draws_donors_uniformly_within_a_leaf():
    """One leaf (min_leaf too large to split): the 20 donors are drawn with equal
    probability. Kills: always the first donor of a leaf, a donor index off by one (never the
    last donor, or outside the leaf)."""
    data = pd.DataFrame({"x": np.arange(20.0), "y": np.arange(20.0) * 3})
    s = common.cart_synthesize(data, ["x", "y"], [], np.random.default_rng(2), m=1,
                               min_leaf=15, n=40_000)[0]
    freq = s["y"].value_counts().reindex(data["y"]).fillna(0).to_numpy() / len(s)
    se = np.sqrt(0.05 * 0.95 / len(s))
    assert np.all(np.abs(freq - 0.05) < 5 * se)


def test_cart_refuses_missing_values_naming_rows():
    data = pd.DataFrame({"x": [1.0, np.nan, 3.0], "y": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        common.cart_synthesize(data, ["x", "y"], [], np.random.default_rng(0), m=1)


# ------------------------------------------------------------------------------ metrics
def _kmarg_reference(o: pd.DataFrame, s: pd.DataFrame, k: int) -> float:
    """k-marginal by pandas value_counts on tuples (an independent route)."""
    scores = []
    for sub in combinations(o.columns, k):
        p = o.groupby(list(sub)).size() / len(o)
        q = s.groupby(list(sub)).size() / len(s)
        p, q = p.align(q, fill_value=0)
        scores.append(1000 * (1 - 0.5 * np.abs(p - q).sum()))
    return float(np.mean(scores))


def test_k_marginal_matches_an_independent_computation():
    """Against value_counts on random codes (k = 2, 3), identical data 1000, disjoint 0.
    Kills: TVD without the 1/2 (disjoint gives -1000), counts instead of shares with unequal
    sizes, a radix that collides cells (columns with different numbers of codes)."""
    rng = np.random.default_rng(3)
    o = pd.DataFrame({"a": rng.integers(0, 3, 500), "b": rng.integers(0, 5, 500),
                      "c": rng.integers(0, 2, 500)})
    s = pd.DataFrame({"a": rng.integers(0, 3, 350), "b": rng.choice(5, 350, p=[.4, .3, .1, .1, .1]),
                      "c": rng.integers(0, 2, 350)})
    for k in (2, 3):
        assert common.k_marginal(o, s, k)["score"] == pytest.approx(_kmarg_reference(o, s, k), abs=1e-9)
    assert common.k_marginal(o, o, 2)["score"] == pytest.approx(1000)
    assert common.k_marginal(o, o + 5, 2)["score"] == pytest.approx(0)


def test_pmse_ratio_uses_the_null_expectation_with_the_model_rank():
    """pMSE from statsmodels with explicit interactions, and the ratio's k counted by hand:
    3 continuous columns -> k = 1 + 3 + 3 = 7; a 3-level categorical (2 dummies) and one
    continuous column -> k = 1 + 3 + 2 = 6 (the product of the two dummies is 0). Kills: k
    from the number of columns before interactions, not dropping the zero product, c or N of
    the wrong sizes."""
    rng = np.random.default_rng(4)
    o = rng.normal(size=(300, 3))
    s = rng.normal(size=(200, 3)) + [0.2, 0, 0]
    Y = np.vstack([o, s])
    t = np.r_[np.zeros(300), np.ones(200)]
    X = np.column_stack([np.ones(500), Y, Y[:, 0] * Y[:, 1], Y[:, 0] * Y[:, 2], Y[:, 1] * Y[:, 2]])
    p = sm.Logit(t, X).fit(disp=0).predict(X)
    c = 200 / 500
    pm = np.mean((p - c) ** 2)
    res = common.pmse_with_ratio(o, [s])
    assert res["pMSE"] == pytest.approx(pm, rel=1e-6)
    assert res["ratio"] == pytest.approx(pm / (6 * (1 - c) ** 2 * c / 500), rel=1e-6)

    cat = {"g": ["x", "y", "z"]}
    fo = pd.DataFrame({"g": rng.choice(["x", "y", "z"], 300), "v": rng.normal(size=300)})
    fs = pd.DataFrame({"g": rng.choice(["x", "y", "z"], 200), "v": rng.normal(size=200)})
    mo, ms = (common.numeric_matrix(f, ["g", "v"], cat) for f in (fo, fs))
    assert mo.shape[1] == 3
    r2 = common.pmse_with_ratio(mo, [ms])
    assert r2["ratio"] == pytest.approx(r2["pMSE"] / (5 * (1 - c) ** 2 * c / 500), rel=1e-9)


def test_bins_round_trip_and_integers_stay_integers():
    """unbin draws inside the record's bin (its codes are the same again), integers stay whole
    and the closed last bin reaches its upper edge. Kills: half-open last bin for integers
    (the bound never drawn), bins shifted by one, floats for integer columns."""
    rng = np.random.default_rng(6)
    edges = {"v": np.array([0.0, 10, 20, 100]), "i": np.array([0.0, 3, 5])}
    f = pd.DataFrame({"g": rng.choice(["a", "b"], 3000), "v": rng.uniform(0, 100, 3000),
                      "i": rng.integers(0, 6, 3000)})
    codes = common.bin_codes(f, edges, {"g": ["a", "b"]})
    assert codes["i"].max() == 1 and (codes.loc[f["i"] == 5, "i"] == 1).all()
    back = common.unbin(codes, edges, ["i"], rng)
    again = common.bin_codes(back.assign(g=np.where(codes["g"] == 0, "a", "b")), edges,
                             {"g": ["a", "b"]})
    pd.testing.assert_frame_equal(again, codes)
    assert back["i"].dtype.kind == "i" and back["i"].max() == 5 and back["i"].min() == 0
    with pytest.raises(ValueError, match="'g'.*rows"):
        common.bin_codes(f.assign(g="c"), edges, {"g": ["a", "b"]})


def test_unbin_from_public_reference_values_draws_within_the_bin():
    """With reference values, a bin decodes to a reference value of that bin, in proportion
    to its frequency there (50 twice as often as 60); an empty bin falls back to uniform.
    Kills: a draw from the wrong bin (index off by one), ignoring the reference."""
    edges = {"v": np.array([0.0, 10, 20, 100, 200])}
    ref = {"v": np.array([60.0, 1, 2, 3, 15, 50, 50])}
    codes = pd.DataFrame({"v": np.r_[np.full(30_000, 2), np.full(100, 1), np.full(100, 3)]})
    out = common.unbin(codes, edges, [], np.random.default_rng(8), reference=ref)["v"].to_numpy()
    top = out[:30_000]
    assert set(np.unique(top)) == {50.0, 60.0}
    assert np.mean(top == 50) == pytest.approx(2 / 3, abs=5 * np.sqrt(2 / 9 / 30_000))
    assert (out[30_000:30_100] == 15).all()
    assert ((out[30_100:] >= 100) & (out[30_100:] < 200)).all()


def test_combined_means_apply_the_partial_and_full_rules():
    """Two stratified designs: combined SE by hand, T_p = ubar + b/m and T_f = (1 + 1/m) b -
    ubar (or its floor T_s). Kills: the full rule used for a partial release, SE per set
    reported as the combined SE."""
    import surveysynth as ss

    rng = np.random.default_rng(7)
    designs = [ss.SurveyDesign(pd.DataFrame({"h": np.repeat(["a", "b"], 50),
                                             "y": rng.normal(i, 1, 100), "w": 2.0}),
                               strata="h", weights="w") for i in range(2)]
    res = common.combined_means(designs, ["y"], "partial", n_original=100)
    est = [d.mean("y") for d in designs]
    q = np.array([e["estimate"].iloc[0] for e in est])
    u = np.array([e["se"].iloc[0] ** 2 for e in est])
    b = q.var(ddof=1)
    assert res["se"].iloc[0] == pytest.approx(np.sqrt(u.mean() + b / 2))
    assert res["se_per_set"].iloc[0] == pytest.approx(np.sqrt(u).mean())
    full = common.combined_means(designs, ["y"], "full", n_original=100)
    tf, ts = 1.5 * b - u.mean(), u.mean() * (1 + 2 / 2)  # n_syn = n: T_s = ubar (1 + 2/m)
    assert full["se"].iloc[0] == pytest.approx(np.sqrt(max(tf, ts)))


# ------------------------------------------------------------------------------ simulation
def test_population_has_the_stated_joint_distribution():
    """Census fits on the population recover the generating parameters within their sampling
    error (N = 100,000): logit of urban by region, the log-income regression, the Poisson
    slope of kids on log income. Kills a generator that differs from what the vignette states
    (a sign, a parameter, the kids link)."""
    pop = sim.population()
    assert len(pop) == 100_000
    X = pd.get_dummies(pop["region"], drop_first=True).astype(float)
    X.insert(0, "const", 1.0)
    urban = pop["urban"].to_numpy(float)
    fit = sm.GLM(urban, X, family=sm.families.Binomial()).fit()
    a = np.array([sim.A_URBAN[r] for r in sim.REGIONS])
    assert np.allclose(fit.params.to_numpy(), np.r_[a[0], a[1:] - a[0]], atol=4 * fit.bse.max())
    li = np.log(pop["income"].to_numpy())
    ols = sm.OLS(li, X.assign(urban=urban)).fit()
    b = np.array([sim.B_INCOME[r] for r in sim.REGIONS])
    want = np.r_[sim.LOG_INCOME_MEAN + b[0], b[1:] - b[0], sim.URBAN_EFFECT]
    assert np.allclose(ols.params.to_numpy(), want, atol=4 * ols.bse.max() + 1e-3)
    pois = sm.GLM(pop["kids"].to_numpy(float), sm.add_constant(li - sim.LOG_INCOME_MEAN),
                  family=sm.families.Poisson()).fit()
    assert np.allclose(pois.params, [sim.KIDS_A, sim.KIDS_B], atol=4 * pois.bse.max())
    beta, shares = sim.truth(pop)
    assert np.allclose(beta.to_numpy(), ols.params.to_numpy()[[0, 1, 2, 3, 4]])
    assert np.allclose(shares.groupby(lambda s: s.split(" / ")[0]).sum(), 1.0)


def test_stratified_sample_is_an_srs_per_region_with_weights_and_fpc():
    """n_per distinct records per region, weights summing to N_h in each region and varying
    within it (the adjustment), fpc N_h. Kills: sampling with replacement, weights that do not
    add up to the stratum sizes, weights constant within strata, a wrong fpc."""
    pop = sim.population()
    s = sim.stratified_sample(pop, 40, np.random.default_rng(1))
    Nh = pop["region"].value_counts()
    assert (s["region"].value_counts() == 40).all()
    assert np.allclose(s.groupby("region", observed=True)["w"].sum(), Nh.reindex(sim.REGIONS))
    assert np.allclose(s["fpc"], Nh.reindex(s["region"]).to_numpy())
    assert (s.groupby("region", observed=True)["w"].std() > 0.05 * Nh.reindex(sim.REGIONS) / 40).all()
    assert not s.duplicated(["region", "urban", "income", "kids"]).any()


# ------------------------------------------------------------------------------ fast runs
def _md_table(text: str, header_start: str) -> pd.DataFrame:
    """The pipe table whose header row starts with ``header_start``."""
    lines = text.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("| " + header_start))
    head = [c.strip() for c in lines[i].strip().strip("|").split("|")]
    rows = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
    return pd.DataFrame(rows, columns=head)


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    res = subprocess.run([sys.executable, str(ROOT / "vignettes" / "public_use_simulation.py"),
                          "--fast", "--out", str(out)], capture_output=True, text=True,
                         timeout=1800)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out, (out / "public_use_simulation.md").read_text()


@pytest.mark.slow
def test_simulation_truth_and_monte_carlo_errors_are_recomputed(sim_run):
    """The recovery table against an independent recomputation: the truth by statsmodels OLS
    and a crosstab on the population; the synthetic mean, its MC SE (SD / sqrt(R)), bias /
    MC SE, the paired difference and coverage from the replicate CSV. Kills: MC SE as the SD
    (no sqrt(R)), bias against the confidential estimate instead of the truth, coverage of the
    confidential intervals reported as the release's, a truth from the sample."""
    out, text = sim_run
    tab = _md_table(text, "estimand")
    pop = sim.population()
    d = sim.derived(pop)
    X = pd.get_dummies(d["region"], drop_first=True).astype(float)
    X.insert(0, "const", 1.0)
    X["urban"] = (d["urban"] == "urban").to_numpy(float)
    beta = sm.OLS(d["log_income"].to_numpy(), X).fit().params.to_numpy()
    shares = pd.crosstab(d["urban"], d["kids_band"], normalize="index")
    truth = dict(zip(["Intercept", "region[T.east]", "region[T.south]", "region[T.west]",
                      "urban[T.urban]"], beta, strict=True))
    truth |= {f"{u} / {k}": shares.at[u, k] for u in shares.index for k in shares.columns}
    reps = pd.read_csv(out / "public_use_simulation_replicates.csv")
    part1 = reps[reps["budget"].isna()]
    assert set(tab["estimand"]) == set(truth)
    for _, row in tab.iterrows():
        e = row["estimand"]
        t = truth[e]
        assert float(row["truth"]) == pytest.approx(t, rel=1e-3, abs=1e-4)
        g = part1[part1["estimand"] == e]
        R = len(g)
        assert R == 2
        syn = g["syn"].to_numpy()
        mcse = syn.std(ddof=1) / np.sqrt(R)
        assert float(row["syn mean"]) == pytest.approx(syn.mean(), rel=1e-3, abs=1e-4)
        assert float(row["syn MC SE"]) == pytest.approx(mcse, rel=1e-3, abs=1e-6)
        assert float(row["syn bias / MC SE"]) == pytest.approx((syn.mean() - t) / mcse, rel=1e-3, abs=1e-3)
        diff = syn - g["conf"].to_numpy()
        assert float(row["syn - conf"]) == pytest.approx(diff.mean(), rel=1e-3, abs=1e-5)
        cover = ((g["syn_lo"] <= t) & (t <= g["syn_hi"])).mean()
        assert float(row["syn coverage"]) == pytest.approx(cover)


@pytest.mark.slow
def test_simulation_confidential_estimates_are_the_design_estimates(sim_run):
    """Replicate-level confidential estimates equal svyglm / proportion on a stratified design
    with fpc of a sample drawn the vignette's way (rerun here for replicate 0 from the same
    seed). Kills: the confidential design without strata/fpc, unweighted estimates."""
    out, _ = sim_run
    reps = pd.read_csv(out / "public_use_simulation_replicates.csv")
    g = reps[(reps["rep"] == 0) & reps["budget"].isna()].set_index("estimand")
    rng = np.random.default_rng(1)
    s = sim.stratified_sample(sim.population(), 75, rng)
    d = sim.derived(s)
    X = pd.get_dummies(d["region"], drop_first=True).astype(float)
    X.insert(0, "const", 1.0)
    X["urban"] = (d["urban"] == "urban").to_numpy(float)
    wls = sm.WLS(d["log_income"].to_numpy(), X, weights=d["w"].to_numpy()).fit().params.to_numpy()
    assert np.allclose(g.loc[["Intercept", "region[T.east]", "region[T.south]", "region[T.west]",
                              "urban[T.urban]"], "conf"].to_numpy(), wls, rtol=1e-8)
    w = d["w"].to_numpy()
    urban = d["urban"].to_numpy() == "urban"
    share0 = w[urban & (d["kids_band"] == "0").to_numpy()].sum() / w[urban].sum()
    assert g.at["urban / 0", "conf"] == pytest.approx(share0, rel=1e-10)


@pytest.mark.slow
def test_simulation_curve_and_guarantees(sim_run):
    """Every budget's released epsilon is at most its target (the tuned bound is never above
    it), every replicate of a budget is counted as released or refused (kills a loop that drops
    refused replicates silently or counts them as released), the figure exists, and each
    budget states its guarantee from the release."""
    out, text = sim_run
    curve = _md_table(text, "target epsilon")
    assert list(curve["target epsilon"]) == [sim.NO_WEIGHTING, "20", "12"]
    reps = pd.read_csv(out / "public_use_simulation_replicates.csv")
    for _, row in curve.iterrows():
        if row["target epsilon"] != sim.NO_WEIGHTING:
            # every replicate of a budget is either released or refused (none silently lost)
            assert int(row["reps"]) + int(row["refused"]) == 1
            released = reps[np.isclose(reps["budget"], float(row["target epsilon"]))]
            assert released["rep"].nunique() == int(row["reps"])
            assert text.count(f"budget {row['target epsilon']}, replicate") == int(row["refused"])
        if int(row["reps"]) == 0:
            assert row["table CI overlap"] == "" and row["released epsilon (mean)"] == ""
            continue
        assert 0 < float(row["table CI overlap"]) <= 1
        if row["target epsilon"] == sim.NO_WEIGHTING:
            # the unweighted releases state no epsilon (every alpha_i = 1: no protection; kills
            # a measured bound published as the release's epsilon); their measured epsilon,
            # averaged over part 1's replicates, is a separate, confidential-side column
            part1 = reps.loc[reps["budget"].isna()].groupby("rep")
            assert part1["epsilon"].first().isna().all()
            assert row["released epsilon (mean)"] == "none"
            eps = part1["measured_epsilon"].first().mean()
            assert float(row["measured epsilon (mean)"]) == pytest.approx(eps, rel=1e-3)
            assert eps > 0
        else:
            # the release states its account: 2 m sum_j target_j = the budget; the achieved
            # bounds (measured) are at most it (a release never understates its epsilon)
            got = reps[np.isclose(reps["budget"], float(row["target epsilon"]))]
            assert float(row["released epsilon (mean)"]) == pytest.approx(
                float(row["target epsilon"]), rel=1e-9)
            assert (got["measured_epsilon"] <= got["epsilon"] * (1 + 1e-9)).all()
    assert (out / "public_use_simulation.png").stat().st_size > 10_000
    assert text.count("differential privacy") >= 3


def _delta_of_rho(rho: float, eps: float) -> float:
    """delta of rho-zCDP at eps by Canonne, Kamath & Steinke (2020), minimised over alpha."""
    from scipy.optimize import minimize_scalar

    f = lambda a: (a - 1) * (a * rho - eps) + a * np.log1p(-1 / a) - np.log(a - 1)  # noqa: E731
    r = minimize_scalar(f, bounds=(1 + 1e-6, (eps + 1) / (2 * rho) + 2), method="bounded",
                        options={"xatol": 1e-12})
    return float(np.exp(r.fun))


@pytest.fixture(scope="module")
def agency_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("agency")
    res = subprocess.run([sys.executable, str(ROOT / "vignettes" / "public_use_agency.py"),
                          "--fast", "--out", str(out)], capture_output=True, text=True,
                         timeout=2400)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return (json.loads((out / "public_use_agency.json").read_text()),
            (out / "public_use_agency.md").read_text(), res.stdout)


@pytest.mark.slow
def test_agency_confidential_means_match_r_survey(agency_run):
    """The confidential means and SEs are R survey's svymean on the stratified design with
    fpc (kills a design without fpc or strata, unweighted means)."""
    from r_bridge import r_session

    numbers, _, _ = agency_run
    with r_session("survey") as (ro, _):
        ro.r("data(api, package='survey')")
        ro.r("d <- svydesign(id=~1, strata=~stype, fpc=~fpc, weights=~pw, data=apistrat)")
        m = ro.r("svymean(~api00+meals+enroll, d)")
        est = np.asarray(ro.r["coef"](m))
        se = np.asarray(ro.r["SE"](m))
    conf = numbers["confidential"]
    for k, v in enumerate(["api00", "meals", "enroll"]):
        assert conf[v]["estimate"] == pytest.approx(est[k], rel=1e-10)
        assert conf[v]["se"] == pytest.approx(se[k], rel=1e-8)


@pytest.mark.slow
def test_agency_overlaps_and_se_ratios_are_recomputed(agency_run):
    """CI overlap (Karr et al., written out here) and SE ratios from the per-mean numbers;
    method means of them in the summary table. Kills: overlap over one interval's length only,
    SE ratios inverted, the per-set SE reported as combined."""
    numbers, _, _ = agency_run
    conf = numbers["confidential"]
    for row in numbers["methods"]:
        pm = numbers["per_mean"][row["method"]]
        ovs, r_set, r_comb = [], [], []
        for v in numbers["means"]:
            lo, hi = conf[v]["ci_low"], conf[v]["ci_high"]
            ls, hs = pm[v]["ci_low"], pm[v]["ci_high"]
            inter = min(hi, hs) - max(lo, ls)
            ovs.append(0.5 * (inter / (hi - lo) + inter / (hs - ls)))
            r_set.append(pm[v]["se_per_set"] / conf[v]["se"])
            r_comb.append(pm[v]["se"] / conf[v]["se"])
        assert row["CI overlap (mean)"] == pytest.approx(np.mean(ovs), rel=1e-9)
        assert row["CI overlap (min)"] == pytest.approx(np.min(ovs), rel=1e-9)
        assert row["SE ratio per set (mean)"] == pytest.approx(np.mean(r_set), rel=1e-9)
        assert row["SE ratio combined (mean)"] == pytest.approx(np.mean(r_comb), rel=1e-9)
        assert 0 < row["k-marginal k=2"] <= 1000 and 0 < row["k-marginal k=3"] <= 1000


@pytest.mark.slow
def test_agency_budgets_and_guarantees(agency_run):
    """AIM and MST run from the package (surveysynth.synth.marginal_dp, no second venv) under
    pure epsilon-DP at the epsilon the Sequential release reports, OpenDP's measured loss at
    most it; CART states no guarantee; Sequential keeps strata and fpc and stays in bounds.
    Kills: AIM/MST at another epsilon, AIM/MST rows missing, a guarantee claimed for CART."""
    numbers, text, stdout = agency_run
    methods = {r["method"]: r for r in numbers["methods"]}
    assert {"Sequential", "CART"} <= set(methods)
    assert numbers["in_bounds"] and numbers["design_kept"]
    assert methods["CART"]["guarantee"] == "none"
    assert numbers["guarantees"]["Sequential"] in text
    eps = numbers["epsilon"]
    # the record states its budget account, and the account is the ledger's sum: one charge
    # per synthesized step (pw takes none), 2 m Delta_alpha_j at the public targets
    assert f"epsilon = {eps:.4g} is the total of the budget account" in \
        numbers["guarantees"]["Sequential"]
    steps = [r for r in numbers["ledger"] if r["variable"] != "**total**"]
    assert steps and "pw" not in {r["variable"] for r in steps}
    assert sum(r["epsilon"] for r in steps) == pytest.approx(eps, rel=1e-12)
    assert eps == pytest.approx(numbers["target_epsilon"], rel=1e-12)
    assert {"AIM", "MST"} <= set(methods)
    for meth in ("AIM", "MST"):
        assert eps * 0.999 <= numbers["epsilon_map"][meth] <= eps
        assert f"pure epsilon-differential privacy, epsilon = {eps:.4g}" in \
            numbers["guarantees"][meth]


# ------------------------------------------------------------------------------ benchmark
@pytest.mark.slow
def test_benchmark_fast_mode_runs():
    """benchmarks/sequential.py --fast: one fit + release of the ten variables (n = 1,000),
    the table printed with a total and a released epsilon at most the target."""
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sequential.py"), "--fast"],
                         capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # the configuration's row: fit s | release s | **total s** | under 5 min | epsilon | gates
    m = re.search(r"\| chains 2 x 150 draws \(fast mode\) \| ([0-9.]+) \| ([0-9.]+) \| "
                  r"\*\*([0-9.]+)\*\* \| (True|False) \| ([0-9.e+]+) \| (passed|FAILED) \|",
                  res.stdout)
    assert m, res.stdout[-3000:]
    fit, release, total, eps = (float(m.group(i)) for i in (1, 2, 3, 5))
    assert total == pytest.approx(fit + release, abs=0.15)
    assert 0 < eps <= 50.0 * (1 + 1e-9)
    assert "| **total s** |" in res.stdout and "rows in Stan" in res.stdout
