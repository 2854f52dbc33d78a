"""`surveysynth release`: end to end on a small config, bad configs fail before any MCMC, a
killed run leaves no release folder, and no confidential value reaches any output file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.pipeline import ConfigError, load_config

CLI = [sys.executable, "-m", "surveysynth.cli"]


def kng_config(tmp: Path, n_iter: int = 60, folder: str = "release") -> Path:
    df = ss.datasets.kng_simulation(n=300, seed=5)
    df.to_csv(tmp / "confidential.csv", index=False)
    cfg = tmp / "release.toml"
    cfg.write_text(f"""
[input]
path = "confidential.csv"
[design]
[synthesizer]
method = "quantile"
variables = ["X1", "X2", "X3"]
epsilon = 1.0
m = 2
seed = 11
init = {{ method = "stepwise", n_iter = {n_iter}, quantiles = [0.1, 0.3, 0.5, 0.7, 0.9], C_X = {{ X1 = 1, X2 = 46, X3 = 106 }}, bounds = {{ X1 = [0, 1000], X2 = [0, 1000], X3 = [0, 2000] }} }}
[output]
folder = "{folder}"
""")
    return cfg


def _numbers_in_outputs(folder: Path) -> set[float]:
    """Every number written anywhere in the release folder (text files and Parquet data)."""
    found: set[float] = set()
    for p in folder.rglob("*"):
        if not p.is_file():
            continue
        if p.suffix == ".parquet":
            frame = pd.read_parquet(p)
            for c in frame.select_dtypes("number"):
                found.update(frame[c].astype(float).round(6).tolist())
        elif p.suffix in (".csv", ".json", ".html", ".md", ".tex"):
            import re

            for tok in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", p.read_text(errors="ignore")):
                found.add(round(float(tok), 6))
    return found


def scan_public(public: Path, secrets: dict[str, Any], words: list[str]) -> None:
    """Fail if any file of ``public`` holds a listed confidential number (6 decimals, in text
    or Parquet) or word; the scanner is itself checked by planting each item once."""
    found = _numbers_in_outputs(public)
    texts = " ".join(p.read_text(errors="ignore").lower() for p in public.rglob("*")
                     if p.is_file() and p.suffix in (".json", ".csv", ".html", ".txt", ".md"))
    for what, values in secrets.items():
        vals = set(np.round(np.asarray(values, dtype=float).ravel(), 6).tolist()) - {0.0, 1.0}
        leaked = vals & found
        assert not leaked, f"public part holds {what}: {sorted(leaked)[:5]}"
    for w in words:
        assert str(w).lower() not in texts, f"public part mentions {w!r}"


def test_scanner_finds_planted_items(tmp_path):
    (tmp_path / "a.json").write_text('{"x": 3.141593, "note": "tuning path"}')
    with pytest.raises(AssertionError, match="tuned c"):
        scan_public(tmp_path, {"tuned c": [3.1415926]}, [])
    with pytest.raises(AssertionError, match="tuning"):
        scan_public(tmp_path, {}, ["tuning"])
    scan_public(tmp_path, {"other": [2.5]}, ["sha256"])


def test_release_end_to_end_kng(tmp_path):
    cfg = kng_config(tmp_path)
    out = subprocess.run([*CLI, "release", str(cfg), "--quiet"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rel = tmp_path / "release"
    pub = rel / "public"
    manifest = json.loads((pub / "manifest.json").read_text())
    for f in manifest["files"]:
        assert (pub / f).is_file(), f
    assert {"manifest.json", "synthetic/manifest.json"} <= set(manifest["files"])
    assert sum(f.startswith("synthetic/synthetic_") for f in manifest["files"]) == 2
    assert manifest["privacy"]["family"] == "kng" and manifest["privacy"]["seeded"]
    assert manifest["versions"]["numpy"] == np.__version__
    conf = rel / "confidential"
    assert (conf / "report.html").exists()
    cj = json.loads((conf / "confidential.json").read_text())
    assert len(cj["input"]["sha256"]) == 64 and cj["seed"] == 11
    # the public part: no confidential value, no hash, no acceptance rates, no seed
    data = pd.read_csv(tmp_path / "confidential.csv")
    scan_public(pub, {"confidential values": data.to_numpy(dtype=float)},
                ["sha256", cj["input"]["sha256"], "accept", "random_state", '"seed"'])
    # the saved synthetic data reload as a release
    loaded = ss.load_release(pub / "synthetic")
    assert loaded.m == 2 and loaded.kind == "full"


@pytest.mark.parametrize("edit, key", [
    (("X3", "income"), "synthesizer.variables"),
    (('method = "quantile"', 'method = "magic"'), "synthesizer.method"),
    (("epsilon = 1.0", "epsilon = -2.0"), "synthesizer.epsilon"),
    (("n_iter = 60", "n_iters = 60"), "[synthesizer]"),
    (('folder = "release"', 'folder = "release"\n[[tables]]\nrows = "region"'), "tables[0].rows"),
])
def test_bad_configs_fail_before_mcmc(tmp_path, edit, key):
    cfg = kng_config(tmp_path)
    cfg.write_text(cfg.read_text().replace(*edit))
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load_config(cfg)
    # and through the command: exit code 2, message names the key, nothing written
    out = subprocess.run([*CLI, "release", str(cfg), "--quiet"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and key.split("[")[0] in out.stderr
    assert not (tmp_path / "release").exists()
    del t0


def test_table_over_missing_variable_and_stat(tmp_path):
    cfg = kng_config(tmp_path)
    text = cfg.read_text() + '\n[[tables]]\nrows = "X1"\nvalue = "salary"\nstat = "mean"\n'
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=r"tables\[0\]\.value: 'salary' is not a variable"):
        load_config(cfg)


def test_killed_run_leaves_no_release(tmp_path):
    cfg = kng_config(tmp_path, n_iter=20000)
    proc = subprocess.Popen([*CLI, "release", str(cfg), "--quiet"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob(".partial-release-*")):
        time.sleep(0.2)
    assert list(tmp_path.glob(".partial-release-*")), "the run never started writing"
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (tmp_path / "release").exists()
    # the next run to the same target clears the partial folder and succeeds
    cfg.write_text(cfg.read_text().replace("n_iter = 20000", "n_iter = 30"))
    out = subprocess.run([*CLI, "release", str(cfg), "--quiet"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "release" / "public" / "manifest.json").exists()
    assert not list(tmp_path.glob(".partial-release-*"))


def test_apistrat_fbs_release_stops_on_convergence_and_override_is_public(tmp_path):
    """Issue 15: an FBS release of R's apistrat whose fit does not converge (R-hat 1.56, bulk
    ESS 9 measured with the default chains) stops with the gate's error naming parameters and
    the fix; with allow_unconverged it releases and the public manifest says so."""
    from surveysynth.datasets import load_api

    load_api("apistrat").to_csv(tmp_path / "apistrat.csv", index=False)
    cfg = tmp_path / "release.toml"
    base = """
[input]
path = "apistrat.csv"
[design]
strata = "stype"
weights = "pw"
fpc = "fpc"
[synthesizer]
method = "FBS"
outcome = "api00"
predictors = ["stype"]
target_epsilon = 20.0
m = 3
seed = 1
population_size = 6194
init = {{ chains = 2, draws = 200, warmup = 200{extra} }}
[output]
folder = "release"
"""
    cfg.write_text(base.format(extra=""))
    out = subprocess.run([*CLI, "release", str(cfg), "--quiet"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=900)
    assert out.returncode == 3 and "Traceback" not in out.stderr
    assert "not released" in out.stderr and "release gates" in out.stderr and "R-hat" in out.stderr
    assert "allow_unconverged" in out.stderr
    assert not (tmp_path / "release").exists()
    cfg.write_text(base.format(extra=", allow_unconverged = true"))
    out = subprocess.run([*CLI, "release", str(cfg), "--quiet"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    manifest = json.loads((tmp_path / "release" / "public" / "manifest.json").read_text())
    assert manifest["privacy"]["convergence_override"] is True
    assert "convergence checks failed" in manifest["privacy"]["guarantee"]
