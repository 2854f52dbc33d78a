"""benchmarks/seq_scale.py (issue 39 item 5): the harness's own pieces and its fast mode.

No timing is asserted. Checked: the peak memory it measures is positive and grows with the
data; its utility numbers are synthetic_utility's (CI overlap of design and release
estimates, pMSE) on a known case, computed here through the public functions; configurations
with options the installed Sequential does not take, and the 1m case without Dask support,
are reported and skipped, never crashed on; the per-step fit counts; and the fast mode runs
end to end (a real Sequential fit with short chains)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import seq_scale  # noqa: E402


def _child(spec: dict, tmp_path: Path) -> dict:
    return seq_scale.child(spec, tmp_path)


# ------------------------------------------------------------------------------ memory
def test_peak_memory_is_positive_and_grows_with_n(tmp_path):
    """The child's measured peaks (sampled process tree and ru_maxrss) are > 0, and 1,000,000
    records hold more than 20,000 by at least part of the frame's own size (a peak that was
    the parent's, a constant or never sampled would fail)."""
    small = _child({"n": 20_000, "p": 10, "seed": 1, "generate_only": True}, tmp_path)
    big = _child({"n": 1_000_000, "p": 10, "seed": 1, "generate_only": True}, tmp_path)
    assert "error" not in small and "error" not in big, (small, big)
    frame = 1_000_000 * 8 * 10        # ten numeric-width columns of the big frame, at least
    for key in ("peak_rss", "maxrss"):
        assert small[key] > 0 and big[key] > 0
        assert big[key] - small[key] > 0.5 * frame, (key, small[key], big[key])
    assert big["peak_rss"] >= big["maxrss"] * 0.5    # the sampled tree includes the child
    assert big["cpu_s"] > 0 and big["wall_s"] > 0


def _hold(nbytes: int) -> int:
    """On a worker: allocate and touch ``nbytes``, keep them a moment, return the pid."""
    import os
    import time as _t

    a = np.ones(nbytes // 8)
    _t.sleep(1.0)
    return os.getpid() + int(a[0]) - 1


def test_dask_workers_peaks_are_kept_apart():
    """The 1m case's per-worker memory: the worker that held 300 MB has a peak above that,
    the other not (a sum over the tree, or the client's own RSS, would not tell them
    apart)."""
    cluster, client, pids = seq_scale.start_cluster("1GiB")
    try:
        with seq_scale.PeakRSS(interval=0.05) as peak:
            pid = client.submit(_hold, 300 * 2**20, workers=[
                next(iter(client.scheduler_info()["workers"]))], pure=False).result()
    finally:
        client.close()
        cluster.close()
    assert len(pids) == 2 and pid in pids
    other = next(p for p in pids if p != pid)
    assert peak.by_pid[pid] > 300 * 2**20
    assert peak.by_pid[other] < peak.by_pid[pid] - 200 * 2**20
    assert peak.peak >= peak.by_pid[pid] + peak.by_pid[other] * 0.5


# ------------------------------------------------------------------------------ utility
def _known_case():
    import surveysynth as ss
    from surveysynth.privacy.record import build_record
    from surveysynth.release import SyntheticRelease

    rng = np.random.default_rng(3)
    n = 300
    df = pd.DataFrame({"stratum": rng.choice(["a", "b"], n), "w": rng.uniform(5, 15, n),
                       "x": rng.normal(10, 2, n), "b": rng.integers(0, 2, n),
                       "g": rng.choice(["p", "q", "r"], n, p=[0.5, 0.3, 0.2])})
    d = ss.SurveyDesign(df, strata="stratum", weights="w")
    sets = []
    for k in range(3):
        f = df.copy()
        f["x"] = f["x"] + rng.normal(0.3 * k, 1.0, n)
        flip = rng.random(n) < 0.2
        f.loc[flip, "b"] = 1 - f.loc[flip, "b"]
        f.loc[rng.random(n) < 0.15, "g"] = "r"
        sets.append(ss.SurveyDesign(f, strata="stratum", weights="w"))
    rec = build_record("none", "test copy", m=3, epsilon=None, seeded=True, notes=["test"])
    rel = SyntheticRelease(sets, "partial", rec, n_original=n)
    vs = [{"name": "x", "type": "continuous"}, {"name": "b", "type": "binary"},
          {"name": "g", "type": "categorical"}]
    return d, rel, vs, df, [s.data for s in sets]


def _hand_overlaps(d, rel) -> dict[str, list[float]]:
    """CI overlap of each mean / level proportion through the public functions."""
    from surveysynth.synthetic_utility import ci_overlap

    out = {}
    c, s = d.mean("x"), rel.mean("x")
    out["x"] = list(ci_overlap(c["ci_low"], c["ci_high"], s["ci_low"], s["ci_high"]))
    for v in ("b", "g"):
        c = d.proportion(v).assign(key=lambda f: f["level"].astype(str))
        s = rel.proportion(v).assign(key=lambda f: f["level"].astype(str))
        mg = c.merge(s, on="key", suffixes=("_c", "_s"))
        assert len(mg) == len(c) == len(s)
        out[v] = list(ci_overlap(mg["ci_low_c"], mg["ci_high_c"], mg["ci_low_s"],
                                 mg["ci_high_s"]))
    return out


def _hand_matrix(f: pd.DataFrame) -> np.ndarray:
    """x, b's indicator of level 1 (reference 0), g's indicators of q and r (reference p)."""
    return np.column_stack([f["x"], f["b"] == 1, f["g"] == "q", f["g"] == "r"]).astype(float)


@pytest.mark.parametrize("interactions", [False, True])
def test_utility_equals_synthetic_utility_on_a_known_case(interactions):
    from surveysynth.synthetic_utility import pmse

    d, rel, vs, df, frames = _known_case()
    got = seq_scale.utility(d, rel, vs, interactions=interactions)
    hand = _hand_overlaps(d, rel)
    allov = np.concatenate([hand[v] for v in ("x", "b", "g")])
    assert got["estimates"] == len(allov) == 1 + 2 + 3
    assert got["overlap_mean"] == pytest.approx(float(np.mean(allov)), rel=1e-10)
    assert got["overlap_min"] == pytest.approx(float(np.min(allov)), rel=1e-10)
    for v in ("x", "b", "g"):
        assert got["overlap_by_variable"][v] == pytest.approx(
            [float(np.mean(hand[v])), float(np.min(hand[v]))], rel=1e-10)
    ref = pmse(_hand_matrix(df), [_hand_matrix(f) for f in frames], interactions=interactions)
    assert got["pmse_interactions"] is interactions
    assert got["pmse_each"] == pytest.approx(ref["pMSE_each"], rel=1e-6)
    assert got["pmse"] == pytest.approx(ref["pMSE"], rel=1e-6)
    assert got["pmse"] > 0     # the sets differ from the data: a pMSE of 0 would be wrong


# ------------------------------------------------------------------------------ options
def test_unknown_options_and_missing_dask_support_are_reported_not_run():
    params = {"variables", "m", "chains", "n_jobs"}
    configs = {"defaults": {}, "new": {"n_jobs": 2}, "future": {"n_jobs": 2, "shortcut": True}}
    entries = seq_scale.plan(["10k", "1m"], configs, fast=False, params=params)
    by = {(e["case"], e["config"]): e for e in entries}
    assert "skip" not in by[("10k", "defaults")] and "skip" not in by[("10k", "new")]
    assert by[("10k", "future")]["skip"] == ("not available: option(s) shortcut unknown to the "
                                             "installed Sequential")
    assert [e["config"] for e in entries if e["case"] == "1m"] == [None]
    assert by[("1m", None)]["skip"].startswith("not supported by this Sequential")
    # with a Sequential that takes a client, the 1m case runs every configuration on it
    entries = seq_scale.plan(["1m"], configs, fast=True, params=params | {"client"})
    assert [(e["config"], e.get("dask_param"), e["n"]) for e in entries if "skip" not in e] == [
        ("defaults", "client", 1000), ("new", "client", 1000)]
    assert seq_scale.unknown_options({"chains": 2, "zz": 1, "aa": 0}, params) == ["aa", "zz"]


def test_unknown_option_end_to_end_is_a_row_not_a_crash():
    """The installed Sequential is asked, no Stan fit is run, the exit status is 0."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seq_scale.py"), "--fast",
                           "--cases", "10k,1m", "--config", 'x={"no_such_option": 1}'],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("| 10k (1,000 x 10) | x | | not available: option(s) no_such_option unknown to the "
            "installed Sequential |") in proc.stdout
    assert "running" not in proc.stdout
    from surveysynth.synth.sequential import Sequential  # noqa: F401 - the installed one
    if seq_scale.dask_param() is None:
        assert "| 1m (1,000 x 10) | all | | not supported by this Sequential" in proc.stdout


@pytest.mark.parametrize("item, says", [
    ('a=b={"n_jobs": 2}', "the name may not contain '='"),
    ("a=[1]", "must be a JSON object"),
])
def test_config_that_is_not_a_json_object_is_a_clear_error(item, says):
    """--config NAME=JSON splits at the first '=': a name with '=' or keywords that are not an
    object get a message naming the option and an example, not a bare traceback."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seq_scale.py"), "--fast",
                           "--cases", "10k", "--config", item],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"--config {item!r}" in proc.stderr and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_step_rows_count_fits_and_tuning_path():
    """fits = the unweighted fit + every weighted fit; tuning path = weighted fits before the
    final one(s); a predicted bound is shown when the tuning rows carry one."""
    steps = [SimpleNamespace(name="a", family="normal"), SimpleNamespace(name="b", family="logistic")]
    fits = [{"tuning": [{"role": "tuning"}, {"role": "tuning", "predicted": 0.41},
                        {"role": "final"}], "delta_alpha": 0.4, "c": 0.3, "target": 0.45,
             "program": "p", "patterns": 10},
            {"tuning": [{"role": "final (alpha = 1)"}], "delta_alpha": 0.2, "c": None,
             "target": 0.45, "program": "q", "patterns": 5}]
    syn = SimpleNamespace(steps_=steps, step_fits_=fits, timings_={"a": 3.0, "b": 1.0})
    rows = seq_scale.step_rows(syn)
    assert [(r["fits"], r["tuning_path"], r["predicted"]) for r in rows] == [
        (4, 2, 0.41), (2, 0, None)]
    assert [r["seconds"] for r in rows] == [3.0, 1.0]


def test_survey_has_the_declared_variables_and_extends_the_10_variable_file():
    ten, twenty = seq_scale.survey(2000, 10, seed=4), seq_scale.survey(2000, 20, seed=4)
    names = [v["name"] for v in seq_scale.variables(20)]
    assert list(twenty.columns) == ["stratum", "w", "fpc", *names]
    pd.testing.assert_frame_equal(ten, twenty[list(ten.columns)])
    assert twenty["health"].cat.ordered and twenty["health"].nunique() == 5
    assert twenty["occupation"].nunique() == 5
    assert (twenty["hhsize"] >= 1).all() and (twenty["children"] < twenty["hhsize"]).all()
    assert (twenty[["rent", "debt"]] > 0).all().all()
    # dependence: the insured are older on average, renters' rent rises with household size
    assert twenty.groupby("insured")["age"].mean().diff().iloc[-1] > 0
    assert np.corrcoef(twenty["hhsize"], np.log(twenty["rent"]))[0, 1] > 0
    pd.testing.assert_frame_equal(twenty, seq_scale.survey(2000, 20, seed=4))


# ------------------------------------------------------------------------------ fast mode
def _rows(out: str) -> dict[str, list[str]]:
    return {r.split("|")[2].strip(): [c.strip() for c in r.split("|")[1:-1]]
            for r in out.splitlines() if re.match(r"\| 10k \(", r)}


def _check_row(row: list[str]) -> None:
    fit, release, total = float(row[3]), float(row[4]), float(row[5].strip("*"))
    assert total == pytest.approx(fit + release, abs=0.15)
    assert float(row[6]) > 0                                  # CPU s
    assert float(row[7].split()[0]) > 0                       # peak GiB
    achieved, declared = re.match(r"([0-9.]+) \(([0-9.]+)\)", row[10]).groups()
    assert 0 < float(achieved) <= float(declared) <= 50.0 * (1 + 1e-9)
    mean_ov, min_ov = re.match(r"(-?[0-9.]+) \((-?[0-9.]+)\)", row[11]).groups()
    assert float(min_ov) <= float(mean_ov) <= 1.0
    assert 0 < float(row[12].split()[0]) < 0.25              # pMSE
    assert int(row[13]) >= int(row[14]) >= 0


def test_fast_mode_one_variable_runs_end_to_end(tmp_path):
    """One variable and the weights step with short chains: the row and the per-step table."""
    js = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seq_scale.py"), "--fast",
                           "--cases", "10k", "--vars", "1", "--only", "defaults", "--json",
                           str(js)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(proc.stdout)
    assert set(rows) == {"defaults"}, proc.stdout[-3000:]
    _check_row(rows["defaults"])
    res = json.loads(js.read_text())["results"][0]
    assert [s["step"] for s in res["steps"]] == ["female", "w"]
    assert int(rows["defaults"][13]) == sum(s["fits"] for s in res["steps"])
    assert res["achieved_epsilon"] == pytest.approx(10 * res["delta_alpha"], rel=1e-12)


@pytest.mark.slow
def test_fast_mode_all_cases_run():
    """The whole fast mode: ten variables and twenty, each configuration (reported or run),
    and the 1m case on Dask or reported as not supported."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seq_scale.py"), "--fast"],
                          capture_output=True, text=True, cwd=ROOT, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(proc.stdout)
    assert "defaults" in rows, proc.stdout[-3000:]
    _check_row(rows["defaults"])
    assert re.search(r"\| 100k \(1,000 x 20\) \| defaults \| 1 \| [0-9.]+ \|", proc.stdout), \
        proc.stdout[-3000:]
    if seq_scale.dask_param() is None:
        assert "| 1m (1,000 x 10) | all | | not supported by this Sequential" in proc.stdout
    else:
        assert re.search(r"\| 1m \(1,000 x 10\) \| defaults \| 1 \| .*\(workers ", proc.stdout)


# ------------------------------------------------------------------------------ estimate
def test_patterns_are_the_rows_sequential_gives_stan():
    """At 10,000 x 10 the distinct (strata, earlier variables, variable) rows are the rows in
    Stan of docs/benchmarks.md's sequential section (age 2341, educ 4837, employed 6146,
    visits 10000; female 10 = 5 strata x 2, region 40): the estimate's scaling counts what
    Stan is given (a count without the strata or without the response would differ)."""
    pat = seq_scale.patterns(10_000, 10)
    assert {k: pat[k] for k in ("female", "region", "age", "educ", "employed", "visits")} == {
        "female": 10, "region": 40, "age": 2341, "educ": 4837, "employed": 6146,
        "visits": 10_000}


def test_estimate_scales_row_costs_by_patterns_and_keeps_sufficient_statistics_fixed():
    steps = [{"step": "female", "program": "seq_logistic", "rows_in_stan": 10, "seconds": 2.0},
             {"step": "employed", "program": "seq_logistic", "rows_in_stan": 5000,
              "seconds": 50.0},
             {"step": "hours", "program": "seq_normal_ss", "rows_in_stan": 9966, "seconds": 4.0},
             {"step": "w", "program": "seq_normal_ss", "rows_in_stan": 10000, "seconds": 3.0}]
    res = [{"case": "10k", "config": "c", "seed": 1, "n": 10_000, "p": 10, "fit_s": 59.0,
            "steps": steps}]
    sizes = ((30_000, 10),)
    pat = seq_scale.patterns(30_000, 10)
    # female as here; 5 steps on sums (hours, income, savings, score and the bounded age,
    # seq_normal_tss since 2026-11-27) at the mean cost of the measured ones (4.0 s)
    expect = 3.0 + 2.0 + 0.01 * pat["employed"] + 4.0 * 5
    # every other family costs the costliest measured per row (logistic here: 0.01 s)
    others = ("region", "educ", "visits")
    expect += sum(0.01 * pat[k] if pat[k] >= 1000 else 0.0 for k in others)
    assert seq_scale.estimate_seconds(res[0], 30_000, 10) == pytest.approx(expect, rel=1e-12)
    assert f"30,000 x 10: about {expect / 3600:.1f} h serially" in seq_scale.estimate(res, sizes)
