"""The main job end to end, read by a disclosure-review board.

`surveysynth demo --quick --seed S` writes an FBS release of the SDR-like simulation. The public
part is scanned for every confidential statistic issue 15 lists (values, tuned c, tuning path,
per-chain bounds, identification-risk summaries, input hash, the confidential weight sum, the
seed), and every integer published is replayed as a seed to show it reconstructs nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from surveysynth.privacy.randomness import child_seed, secret_rng
from tests.test_pipeline import _numbers_in_outputs, scan_public

SEED = 48_611_977


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    out = subprocess.run([sys.executable, "-m", "surveysynth.cli", "demo", "--quick",
                          "--seed", str(SEED), "--out", str(tmp)],
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (tmp / "console.txt").write_text(out.stdout + out.stderr)
    return tmp, out.stdout


def test_demo_console_is_short_and_shows_progress(demo):
    tmp, _ = demo
    lines = (tmp / "console.txt").read_text().splitlines()
    assert len(lines) < 60, "\n".join(lines)
    text = "\n".join(lines)
    for k, step in enumerate(("design", "compile", "fit", "synthesis", "tables", "writing")):
        assert f"[{k + 1}/6] {step}:" in text
    assert "Stan run 1 done" in text and "done in" in text
    assert "Informational Message" not in text and "priors" not in text


def test_demo_release_files_and_record(demo):
    tmp, stdout = demo
    assert "largest relative difference, surveysynth native vs R survey" in stdout
    rel = tmp / "release"
    pub = rel / "public"
    manifest = json.loads((pub / "manifest.json").read_text())
    for f in manifest["files"]:
        assert (pub / f).is_file(), f
    assert {"synthetic/manifest.json", "synthetic/synthetic_1.parquet",
            "synthetic/synthetic_3.parquet", "tables/count_by_field_gender.csv",
            "tables/count_by_field_gender.xlsx", "tables/mean_salary_by_field_gender.csv",
            "tables/mean_salary_by_field_gender.xlsx"} <= set(manifest["files"])
    rec = manifest["privacy"]
    assert rec["family"] == "pseudo_posterior" and not rec["differentially_private"]
    assert rec["guarantee_class"] == "asymptotic database-local (epsilon, delta)-pDP"
    # the public target is published (the achieved bound, at most it, stays confidential);
    # epsilon is the account: 2 * target per released draw
    assert manifest["delta_alpha"] == 3.4 and rec["facts"]["bound"] == "target"
    assert np.isclose(manifest["epsilon"], 2 * 3.4 * 3, rtol=1e-12)
    assert rec["seeded"] and "whoever holds the seed" in rec["reproducibility"]
    assert "empirical maximum" in rec["guarantee_text"] and "not privatized" in rec["guarantee_text"]
    # published without budget (N was given publicly): the weighting decision, the predictors
    # released as collected, and the tables' n_unweighted over them
    items = " ".join(e["item"] for e in rec["published_without_budget"])
    assert "whether risk weighting was applied" in items and "released as collected" in items
    assert "population size" not in items
    # released weights sum to the public N
    syn = pd.read_parquet(pub / "synthetic" / "synthetic_1.parquet")
    assert syn["weight"].sum() == pytest.approx(100_000, rel=1e-12)
    # the confidential part exists and says what it is
    conf = rel / "confidential"
    assert (conf / "README.txt").read_text().startswith("CONFIDENTIAL")
    assert (conf / "report.html").read_text().count("NOT FOR PUBLICATION") >= 1
    cj = json.loads((conf / "confidential.json").read_text())
    assert cj["seed"] == SEED and cj["notice"].startswith("CONFIDENTIAL")
    html = (conf / "report.html").read_text()
    assert 'id="summary-card"' in html and "<script" not in html


def test_public_part_holds_no_confidential_statistic(demo):
    tmp, _ = demo
    rel = tmp / "release"
    sample = pd.read_csv(tmp / "input" / "sdr_sample.csv")
    conf = rel / "confidential"
    cj = json.loads((conf / "confidential.json").read_text())
    tuning = pd.read_csv(conf / "tuning_path.csv", comment="#")
    summary = pd.read_csv(conf / "fit_summary.csv", comment="#", index_col=0)["value"]
    secrets = {
        "salary and weight values": sample[["salary", "weight"]].to_numpy(float).ravel(),
        "tuned c": [float(summary["c"])],
        "tuning path": tuning["delta_alpha"].to_numpy()[:-1],
        "per-chain bounds": [v for v in cj["delta_alpha_per_chain"]
                             if not np.isclose(v, float(summary["delta_alpha"]))],
        "confidential weight sum N": [float(sample["weight"].sum())],
        "mean alpha": [float(summary["mean_alpha"])],
    }
    words = ["sha256", cj["input"]["sha256"], "share_above_0.5", "identification risk",
             "accept", "tuning_path", "refit", "delta_alpha_i", "\"alpha\":", str(SEED), "random_state"]
    scan_public(rel / "public", secrets, words)
    # the released records are not in the confidential order
    syn = pd.read_parquet(rel / "public" / "synthetic" / "synthetic_1.parquet")
    same = (syn["field"].to_numpy() == sample["field"].to_numpy()) & (
        syn["gender"].astype(str).to_numpy() == sample["gender"].astype(str).to_numpy())
    assert same.mean() < 0.6


def test_seed_replay_reconstructs_nothing(demo):
    """Replaying every integer of the public part as the seed does not give the run's random
    stream, while the real seed does (so this test would fail if the seed were published)."""
    tmp, _ = demo
    rel = tmp / "release"
    cj = json.loads((rel / "confidential" / "confidential.json").read_text())
    actual = cj["stan_seed_unweighted_fit"]
    assert child_seed(secret_rng(SEED)) == actual  # the replay works with the secret key
    ints = set()
    for p in (rel / "public").rglob("*"):
        if p.is_file() and p.suffix in (".json", ".csv"):
            ints.update(int(t) for t in re.findall(r"(?<![\d.])\d{1,12}(?![\d.])", p.read_text()))
    assert ints, "no integers found: the scan read nothing"
    hits = [i for i in ints if child_seed(secret_rng(i)) == actual]
    assert not hits, f"public integers replay the random stream: {hits}"
    assert SEED not in ints
    assert not (_numbers_in_outputs(rel / "public") & {float(SEED)})
