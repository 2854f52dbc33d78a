"""The clustered coverage study (vignettes/clustered_coverage.py, issue 36 item 4): its fast mode
runs and writes the table; the population has the ICC it claims; the confidential design's
intervals it scores are R survey's (live, on a regenerated sample); the scoring arithmetic and
the refusal rows. No coverage numbers are tested here (one sample per ICC).

Which wrong versions each test kills is said in its docstring.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.conftest import assert_rel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "vignettes"))

cc = importlib.import_module("clustered_coverage")

STATUS_KINDS = ("ok", "refused", "unreachable", "error", "estimate failed")


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    """One ``--fast`` run (1 sample per ICC, 2 chains x 100 draws, every synthesizer)."""
    tmp = tmp_path_factory.mktemp("cc")
    store, out = tmp / "store", tmp / "clustered_coverage.md"
    res = subprocess.run([sys.executable, str(ROOT / "vignettes" / "clustered_coverage.py"),
                          "--fast", "--quiet", "--store", str(store), "--out", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    reps = pd.concat([pd.read_parquet(f).assign(icc=float(f.parent.name[3:]))
                      for f in sorted(store.glob("icc*/rep_*.parquet"))], ignore_index=True)
    return store, out, reps


def test_fast_run_writes_every_cell_with_a_status(fast_run):
    """Structure: both ICCs, the confidential design and all five synthesizers, three estimands
    each; every row has a status of a known kind; "ok" rows have a finite interval around the
    estimate, other rows none (a refusal is not a miss); the table states date, machine, load,
    the number of samples and fast mode, and has a row per ICC x estimand x method. Kills: a
    harness that drops a refused method's rows, scores a refusal as an interval, or writes the
    table without its run facts."""
    store, out, reps = fast_run
    assert sorted(reps["icc"].unique()) == [0.05, 0.2]
    assert set(reps["method"]) == {cc.CONFIDENTIAL, *cc.METHODS}
    assert (reps.groupby(["icc", "method"]).size() == 3).all()
    assert set(reps["estimand"]) == set(cc.ESTIMANDS)
    kinds = reps["status"].str.split(":").str[0]
    assert kinds.isin(STATUS_KINDS).all(), reps["status"].unique()
    assert (reps.loc[reps["method"] == cc.CONFIDENTIAL, "status"] == "ok").all()
    ok = reps[kinds == "ok"]
    assert np.isfinite(ok[["estimate", "se", "ci_low", "ci_high"]].to_numpy()).all()
    assert ((ok["ci_low"] < ok["estimate"]) & (ok["estimate"] < ok["ci_high"])).all()
    assert reps.loc[kinds != "ok", "estimate"].isna().all()
    # a synthesizer's interval is the release's: estimate -+ t(df) se (normal when df = inf)
    syn = ok[ok["method"] != cc.CONFIDENTIAL]
    crit = np.where(np.isfinite(syn["df"]), stats.t.ppf(0.975, syn["df"].where(
        np.isfinite(syn["df"]), 1.0)), stats.norm.ppf(0.975))
    assert_rel(syn["ci_high"] - syn["estimate"], crit * syn["se"], tol=1e-9,
               what="combined half-width")
    text = out.read_text()
    for piece in ("FAST MODE", "1 samples per ICC", "load average", "CPUs", " UTC",
                  "## ICC 0.05", "## ICC 0.2", "## Status", "## Seconds per synthesizer"):
        assert piece in text, piece
    table = pd.read_csv(store / "summary.csv")
    assert len(table) == 2 * 3 * (1 + len(cc.METHODS))
    conf = table[table["method"] == cc.CONFIDENTIAL]
    assert (conf["length / confidential"] == 1).all()


def test_confidential_intervals_are_r_surveys(fast_run, R):
    """The confidential rows of the ICC 0.2 sample against R survey live on the same sample
    (regenerated from the study's seed: so the sample, too, is the one the store scored):
    svymean + confint (normal), svyby(~y, ~x) + confint at x = 1, svyglm(y ~ x) + confint (t
    on df.residual), with R's svydesign(id=~psu+unit, strata=~stratum, fpc=~Nh+M,
    weights=~w). Kills: the x = 0 domain scored, a normal interval for the slope, a design
    without fpc or with one stage, another sample than the one regenerated."""
    from r_bridge import r_session
    from r_bridge.convert import pandas_to_r

    store, _, reps = fast_run
    cfg = json.loads((store / "config.json").read_text())
    icc = 0.2
    pop = cc.two_stage_population(icc, cc.population_seed(cfg["seed"], icc))
    sample = cc.two_stage_sample(pop, cc.sample_generators(cfg["seed"], icc, 1)[0])
    with r_session("survey") as (ro, _):
        ro.globalenv["ccs"] = pandas_to_r(sample[["psu", "unit", "stratum", "Nh", "M", "w",
                                                  "x", "y"]])
    r = R("local({ d <- svydesign(id=~psu+unit, strata=~stratum, fpc=~Nh+M, weights=~w, "
          "data=ccs); a <- svymean(~y, d); b <- svyby(~y, ~x, d, svymean); "
          "g <- svyglm(y ~ x, d); "
          "c(coef(a), SE(a), confint(a), coef(b)[2], SE(b)[2], confint(b)[2, ], "
          "coef(g)[2], SE(g)[2], confint(g)[2, ]) })")
    ours = (reps[(reps["icc"] == icc) & (reps["rep"] == 0) & (reps["method"] == cc.CONFIDENTIAL)]
            .set_index("estimand").loc[list(cc.ESTIMANDS),
                                       ["estimate", "se", "ci_low", "ci_high"]])
    assert_rel(ours.to_numpy().ravel(), r, tol=1e-9, what="confidential vs R survey")


def test_population_has_the_stated_icc_and_truths():
    """The one-way ANOVA estimate of the ICC of log y (PSUs within strata, 300 PSUs) is near
    the stated ICC (its SE ~0.02 at 0.2), and the truths are the population's mean, domain
    mean and least-squares slope (numpy's polyfit). Kills: sqrt and variance confused in the
    generator (u_j with sd ICC s instead of sqrt(ICC) s: ICC 0.2 comes out 0.05), a truth
    taken from a sample, the slope of log y."""
    for icc in cc.ICCS:
        pop = cc.two_stage_population(icc, cc.population_seed(36, icc))
        ly = np.log(pop["y"]) - pop.groupby("stratum")["y"].transform(
            lambda v: np.log(v).mean())
        g = ly.groupby(pop["psu"])
        n_j, k = g.size().to_numpy(float), g.ngroups
        msb = np.sum(n_j * g.mean().to_numpy() ** 2) / (k - 2)
        msw = float(((ly - g.transform("mean")) ** 2).sum()) / (len(pop) - k)
        n0 = (n_j.sum() - np.sum(n_j**2) / n_j.sum()) / (k - 1)
        s2b = (msb - msw) / n0
        assert abs(s2b / (s2b + msw) - icc) < 0.05, (icc, s2b / (s2b + msw))
        t = cc.truths(pop)
        assert t["mean y"] == pytest.approx(pop["y"].mean(), rel=1e-12)
        assert t["mean y | x=1"] == pytest.approx(pop.loc[pop["x"] == 1, "y"].mean(), rel=1e-12)
        assert t["slope y~x"] == pytest.approx(np.polyfit(pop["x"], pop["y"], 1)[0], rel=1e-9)
        assert pop.groupby("stratum")["psu"].nunique().tolist() == [150, 150]
        assert pop.groupby("psu").size().between(20, 60).all()


def test_sample_is_stratified_two_stage_with_weights_summing_near_n():
    """15 PSUs per stratum, 8 units in each, no unit twice, weights (Nh/15)(M/8); their sum
    estimates N (Horvitz-Thompson; within 25% on one sample). The caller's population is not
    modified. Kills: units drawn across PSUs, weights without the second stage."""
    pop = cc.two_stage_population(0.05, 1)
    before = pop.copy()
    s = cc.two_stage_sample(pop, np.random.default_rng(2))
    pd.testing.assert_frame_equal(pop, before)
    assert s.groupby("stratum")["psu"].nunique().tolist() == [15, 15]
    assert (s.groupby("psu").size() == 8).all()
    assert not s.duplicated(["psu", "unit"]).any()
    assert_rel(s["w"], s["Nh"] / 15 * s["M"] / 8, what="weights")
    assert abs(s["w"].sum() / len(pop) - 1) < 0.25


def _rows(rep, method, est, lo, hi, truth, status="ok", df=10.0):
    return pd.DataFrame({"rep": rep, "method": method, "estimand": "mean y", "estimate": est,
                         "se": 1.0, "ci_low": lo, "ci_high": hi, "truth": truth,
                         "status": status, "df": df, "seconds": 1.0}, index=[0])


def test_summary_scores_refusals_as_absent_and_lengths_on_the_same_samples(tmp_path):
    """A hand-built store of 3 samples: FBS released on samples 0 and 1 (covering on 0 only)
    and was refused on 2; Sequential refused everywhere. Coverage 0.5 over 2 scored samples
    (not 1/3), length ratio against the confidential lengths of samples 0 and 1 only (2.0, not
    2.0 x 4/6), bias in % of the truth; Sequential has no scored samples, its refusal message
    in the status table. Kills: refusals counted as misses, lengths relative to all samples'
    confidential mean, a refused method dropped from the status table."""
    cfg = {"seed": 36, "iccs": [0.05]}
    folder = tmp_path / "icc0.05"
    folder.mkdir()
    pop = cc.two_stage_population(0.05, cc.population_seed(36, 0.05))
    truth = cc.truths(pop)
    t = float(truth["mean y"])
    conf_len = [2.0, 2.0, 8.0]
    fbs = [(t - 1, t + 3), (t + 1, t + 5), None]
    for r in range(3):
        parts = [_rows(r, cc.CONFIDENTIAL, t, t - conf_len[r] / 2, t + conf_len[r] / 2, t)]
        if fbs[r] is None:
            parts.append(_rows(r, "FBS", np.nan, np.nan, np.nan, t, "refused: no clusters"))
        else:
            parts.append(_rows(r, "FBS", t + 1 + 2 * r, *fbs[r], t))
        parts.append(_rows(r, "Sequential", np.nan, np.nan, np.nan, t,
                           "refused: clustered designs are not supported"))
        rows = pd.concat(parts, ignore_index=True)
        # the other estimands: confidential only, so every cell of the truth index is present
        other = pd.concat([rows.iloc[[0]].assign(estimand=e, truth=float(truth[e]),
                                                 estimate=float(truth[e]),
                                                 ci_low=float(truth[e]) - 1,
                                                 ci_high=float(truth[e]) + 1)
                           for e in cc.ESTIMANDS[1:]], ignore_index=True)
        pd.concat([rows, other], ignore_index=True).to_parquet(folder / f"rep_{r:05d}.parquet")
    results = cc.score(cfg, 3, tmp_path)
    s = cc.summarize(results).set_index(["estimand", "method"])
    row = s.loc[("mean y", "FBS")]
    assert row["samples"] == 2 and row["not scored"] == 1
    assert row["coverage"] == 0.5
    assert row["MC SE"] == pytest.approx(np.sqrt(0.25 / 2))
    assert row["length / confidential"] == pytest.approx(2.0)
    assert row["median length ratio"] == pytest.approx(2.0)
    assert row["bias %"] == pytest.approx(100 * 2.0 / t)
    assert row["confidential coverage"] == 1.0
    assert s.loc[("mean y", "Sequential"), "samples"] == 0
    st = cc.status_table(results)
    seq = st[st["method"] == "Sequential"]
    assert seq["status"].tolist() == ["refused"] and seq["samples"].tolist() == [3]
    assert "clustered designs are not supported" in seq["message"].iloc[0]
    fb = st[(st["method"] == "FBS")].set_index("status")["samples"]
    assert fb.to_dict() == {"ok": 2, "refused": 1}


def test_a_refusing_synthesizer_gives_refused_rows():
    """A real ValueError of a synthesizer at fit (here FBS on a design without its predictor
    column, raised before any MCMC) becomes three rows 'refused: <the message>' with no
    estimate, not an exception that stops the study."""
    import surveysynth as ss

    pop = cc.two_stage_population(0.05, 1)
    s = cc.two_stage_sample(pop, np.random.default_rng(3)).drop(columns=["x"])
    d = ss.SurveyDesign(s, ids="~psu+unit", strata="stratum", fpc="~Nh+M", weights="w")
    cfg = {"chains": 1, "draws": 10, "warmup": 10, "tol": 0.1}
    est, status, _ = cc.run_method("FBS", d, cfg, len(pop), 1)
    assert est.isna().all().all()
    assert set(status) == set(cc.ESTIMANDS)
    assert all(v.startswith("refused: ") and "x" in v for v in status.values())


def test_store_resumes_only_with_the_same_settings_and_code(fast_run, tmp_path):
    """Resuming the fast run's store with its own settings and code runs nothing (the stored
    samples are untouched) and renders the same table; other settings or other code are
    refused with the fix. Kills: a store mixing main's synthesizers with a branch's."""
    store, out, _ = fast_run
    files = sorted(store.glob("icc*/rep_*.parquet"))
    stamps = [f.stat().st_mtime_ns for f in files]
    before = pd.read_csv(store / "summary.csv")
    again = cc.main(["--fast", "--quiet", "--store", str(store), "--out",
                     str(tmp_path / "again.md")])
    assert [f.stat().st_mtime_ns for f in files] == stamps
    pd.testing.assert_frame_equal(before, pd.read_csv(store / "summary.csv"))
    assert again.read_text().split("## ICC 0.05")[1] == out.read_text().split("## ICC 0.05")[1]
    cfg = json.loads((store / "config.json").read_text())
    cc.check_store(store, cfg)
    with pytest.raises(SystemExit, match="other settings"):
        cc.check_store(store, {**cfg, "draws": 500})
    with pytest.raises(SystemExit, match="has changed since"):
        cc.check_store(store, {**cfg, "code": {"commit": "x", "sha256": "0" * 64}})


def test_two_workers_split_the_samples_by_identity(tmp_path):
    """--workers 2: the two shards partition the samples, and a sample's shard does not depend
    on which samples are already done (so two processes listing at different moments neither
    run a sample twice nor skip one). Kills: a split by position in the pending list."""
    cfg = {"seed": 36, "iccs": [0.05, 0.2]}
    ids = [{(j[0], j[1]) for j in cc.pending(cfg, 5, tmp_path, (k, 2))} for k in (0, 1)]
    assert not ids[0] & ids[1]
    assert ids[0] | ids[1] == {(i, r) for i in (0.05, 0.2) for r in range(5)}
    (tmp_path / "icc0.05" / "rep_00000.parquet").write_bytes(b"")
    later = [{(j[0], j[1]) for j in cc.pending(cfg, 5, tmp_path, (k, 2))} for k in (0, 1)]
    assert later[0] == ids[0] - {(0.05, 0)} and later[1] == ids[1] - {(0.05, 0)}
    # the generators are monte_carlo's: sample r's generator is the r-th child of the cell seed
    jobs = {(j[0], j[1]): j[2] for j in cc.pending(cfg, 5, tmp_path)}
    ref = np.random.default_rng(cc.cell_seed(36, 0.2)).spawn(5)[3]
    assert jobs[(0.2, 3)].integers(0, 2**62) == ref.integers(0, 2**62)
