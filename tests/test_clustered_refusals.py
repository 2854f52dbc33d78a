"""Issue 36, D6: synthesizers that cannot carry the design effect of clustered data refuse
clustered designs (PBP, the quantile synthesizers, NBSynthesizer, MixtureSynthesizer) with a
ValueError naming the clusters, the reason, the measured consequence and the alternatives,
before any MCMC and before any budget is spent; `surveysynth release --check` reports the
refusal naming the config key (design.ids). Designs without real clusters (no ids, or one
record per PSU) are not refused."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.synth.design_checks import DesignRefused, clusters_of

CLI = [sys.executable, "-m", "surveysynth.cli", "release"]


@pytest.fixture(scope="module")
def api():
    from surveysynth.datasets import load_api

    return {k: load_api(k) for k in ("apiclus1", "apiclus2", "apistrat")}


@pytest.fixture(scope="module")
def clustered(api):
    return {"apiclus1": ss.SurveyDesign(api["apiclus1"], ids="dnum", weights="pw", fpc="fpc"),
            "apiclus2": ss.SurveyDesign(api["apiclus2"], ids="~dnum+snum", fpc="~fpc1+fpc2")}


def _synthesizers():
    return {
        "PBP": lambda: ss.synth.PBP("api00", ["stype"], target_lipschitz=5.0, m=2,
                                    progress=False),
        "quantile": lambda: ss.synth.QuantileSynthesizer(
            variables="api00", bounds={"api00": (200, 1000)}, epsilon=5, m=2, progress=False),
        "NB": lambda: ss.synth.NBSynthesizer(outcome="enroll", predictors=["stype"], m=2,
                                             progress=False),
        "mixture": lambda: ss.synth.MixtureSynthesizer(outcome="api00", predictors=["stype"],
                                                       m=2, progress=False),
    }


def _check_message(msg: str, n_psu: int) -> None:
    assert "refuses clustered designs" in msg
    assert f"{n_psu} first-stage clusters" in msg  # the clusters, named
    assert "Reason:" in msg
    assert "0.37-0.44x" in msg  # the measured consequence
    assert "FBS or FBP" in msg and "Sequential" in msg and "ids=None" in msg  # alternatives


@pytest.mark.parametrize("name", ["PBP", "quantile", "NB", "mixture"])
@pytest.mark.parametrize("data", ["apiclus1", "apiclus2"])
def test_refuses_clustered_designs_before_any_use(clustered, name, data):
    syn = _synthesizers()[name]()
    d = clustered[data]
    with pytest.raises(DesignRefused) as err:
        syn.fit(d)
    _check_message(str(err.value), clusters_of(d).n_psu)
    assert err.value.keys == ("ids",)
    assert isinstance(err.value, ValueError)
    # nothing spent, no Stan run: the fit never reached the data
    assert not getattr(syn, "ledger_", []) and syn.epsilon_spent_ == 0
    assert getattr(syn, "draws_", None) is None and getattr(syn, "n_", None) is None


def test_cluster_counts(clustered, api):
    c1 = clusters_of(clustered["apiclus1"])
    assert (c1.n_psu, c1.n, c1.ids) == (15, 183, ["dnum"])
    assert c1.largest == int(api["apiclus1"].groupby("dnum").size().max())
    assert clusters_of(clustered["apiclus2"]).n_psu == 40


@pytest.mark.parametrize("name", ["PBP", "quantile", "NB", "mixture"])
def test_unclustered_designs_pass(api, name):
    """No ids, and ids with one record per PSU (apistrat's school number): not refused."""
    st = api["apistrat"]
    for d in (ss.SurveyDesign(st, strata="stype", weights="pw", fpc="fpc"),
              ss.SurveyDesign(st, ids="snum", strata="stype", weights="pw", fpc="fpc")):
        assert clusters_of(d) is None
        _synthesizers()[name]().check_design(d)  # no error
    # a domain of a clustered design keeps the sample's clustering: refused
    frame = pd.DataFrame({"psu": np.repeat(np.arange(10), 3), "y": np.arange(30.0)})
    sub = ss.SurveyDesign(frame, ids="psu", weights=np.ones(30))
    assert clusters_of(sub.subset(frame["psu"] < 3)).n_psu == 10


CONFIG = """
[input]
path = "apiclus1.csv"
[design]
ids = "dnum"
weights = "pw"
fpc = "fpc"
[synthesizer]
{synth}
[output]
folder = "out"
"""

SYNTH = {
    "PBP": 'method = "PBP"\noutcome = "api00"\npredictors = ["stype"]\ntarget_lipschitz = 5.0',
    "quantile": ('method = "quantile"\nvariables = ["api00"]\nepsilon = 5.0\n'
                 'init = { bounds = { api00 = [200, 1000] } }'),
    "nb": 'method = "nb"\noutcome = "enroll"\npredictors = ["stype"]\nknown = ["stype"]',
}


@pytest.mark.parametrize("method", list(SYNTH))
def test_release_check_names_the_key(tmp_path, api, method):
    from surveysynth.pipeline import ConfigError, load_config

    api["apiclus1"].to_csv(tmp_path / "apiclus1.csv", index=False)
    (tmp_path / "release.toml").write_text(CONFIG.format(synth=SYNTH[method]))
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "release.toml")
    msg = str(err.value)
    assert msg.startswith("[design] design.ids:"), msg
    _check_message(msg, 15)


def test_release_check_command_refuses(tmp_path, api):
    """The command line: `surveysynth release --check` exits 2 with the refusal, no MCMC."""
    api["apiclus1"].to_csv(tmp_path / "apiclus1.csv", index=False)
    (tmp_path / "release.toml").write_text(CONFIG.format(synth=SYNTH["PBP"]))
    out = subprocess.run([*CLI, str(tmp_path / "release.toml"), "--check"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "design.ids" in out.stderr and "refuses clustered designs" in out.stderr
    assert "configuration OK" not in out.stdout
