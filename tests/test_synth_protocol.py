"""One protocol test for every synthesizer (scikit-learn's check_estimator, for synthesizers).

Each synthesizer, on a small data set with short chains, must: set nothing in __init__ but its
settings; clone and set_params like the constructor; refuse release before fit; return itself
from fit, adding only fitted (underscore) attributes and leaving its settings unchanged; release
m synthetic designs whose weights sum to the public population size, with a record built by the
one builder (no seed); keep its budget account across a refit (and warn); reproduce a seeded fit
and release bit for bit through clone; survive a pickle round trip.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pandas as pd
import pytest

import surveysynth as ss
from surveysynth.datasets import kng_simulation, nb_mixture, sdr_population, sdr_sample
from surveysynth.privacy.record import PrivacyRecord
from surveysynth.synth.base import NotFittedError, Synthesizer

N = 50_000
STAN = dict(chains=2, draws=150, warmup=150, progress=False, allow_unconverged=True)


@pytest.fixture(scope="module")
def data():
    pop = sdr_population(seed=5)
    sdr = sdr_sample(pop, n=600, seed=6)
    kng = kng_simulation(n=400, seed=7)
    kng_design = ss.SurveyDesign(kng.assign(w=N / len(kng)), weights="w")
    nb = nb_mixture(400, seed=8).drop(columns="component")
    nb_design = ss.SurveyDesign(nb.assign(w=N / len(nb), g=np.arange(len(nb)) % 2), weights="w")
    return {"sdr": sdr, "kng": kng_design, "nb": nb_design}


CASES = {
    "FBS": ("sdr", lambda: ss.synth.FBS("salary", ["gender"], m=3, random_state=1,
                                        population_size=N, **STAN)),
    "FBP": ("sdr", lambda: ss.synth.FBP("salary", ["gender"], m=3, random_state=1,
                                        population_size=N, **STAN)),
    "PBP": ("sdr", lambda: ss.synth.PBP("salary", ["gender"], m=3, random_state=1,
                                        population_size=N, **STAN)),
    "quantile": ("kng", lambda: ss.synth.QuantileSynthesizer(
        variables=["X1"], quantiles=[0.1, 0.5, 0.9], epsilon=1.0, bounds={"X1": (0, 1000)},
        m=3, random_state=1, population_size=N, progress=False)),
    "mixture": ("nb", lambda: ss.synth.MixtureSynthesizer(
        "y", ["g"], K=2, m=3, random_state=1, population_size=N, **STAN)),
    "nb": ("nb", lambda: ss.synth.NBSynthesizer("y", m=3, random_state=1, population_size=N,
                                                **STAN)),
}
# attributes a release may add or update: the budget account and what it needs
ACCOUNTING = {"ledger_", "draws_released_", "convergence_override_"}


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **k)


@pytest.mark.parametrize("name", list(CASES))
def test_protocol(name, data):
    key, make = CASES[name]
    design = data[key]
    syn = make()
    assert isinstance(syn, Synthesizer)
    # __init__ stores settings only, unchanged
    params = syn.get_params()
    assert set(vars(syn)) == set(params), set(vars(syn)) ^ set(params)
    twin = syn.clone()
    assert twin.get_params().keys() == params.keys() and twin is not syn
    assert syn.set_params(m=3) is syn
    with pytest.raises(ValueError, match="unknown setting"):
        syn.set_params(not_a_setting=1)
    with pytest.raises(NotFittedError):
        syn.release()
    with pytest.raises(NotFittedError):
        syn.privacy_record()
    # fit returns self, adds only fitted attributes, changes no setting
    before = {k: v for k, v in params.items()}
    assert _quiet(syn.fit, design) is syn
    after = syn.get_params()
    for k, v in before.items():
        assert after[k] is v, f"fit changed setting {k!r}"
    added = set(vars(syn)) - set(params)
    assert all(a.endswith("_") or a.startswith("_") for a in added), added
    # release: m designs, public weights, one builder's record, no seed
    state = {k: v for k, v in vars(syn).items() if k not in ACCOUNTING}
    rel = _quiet(syn.release)
    assert set(k for k in vars(syn) if k not in ACCOUNTING) == set(state)
    assert rel.m == 3 and isinstance(rel.privacy, PrivacyRecord)
    rec = rel.privacy.to_dict()
    assert rec["seeded"] and "seed" not in rec["facts"] and rec["m"] == 3
    assert rec["guarantee"] and rec["guarantee_text"].startswith(rec["guarantee"])
    for d in rel.designs:
        np.testing.assert_allclose(np.sum(d.weights), N, rtol=1e-9)
    assert rec["published_without_budget"] == [] or all(
        "population size" not in e["item"] for e in rec["published_without_budget"])
    # refit: warned, the account keeps the first fit's spending
    spent = syn.epsilon_spent_
    n_ledger = len(getattr(syn, "ledger_", []))
    with pytest.warns(UserWarning, match="refitted"):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=RuntimeWarning)
            syn.fit(design)
    assert syn.epsilon_spent_ >= spent and len(getattr(syn, "ledger_", [])) >= n_ledger
    assert syn.fits_ == 2
    # a clone starts a new account; same seed, same release
    a = _quiet(_quiet(syn.clone().fit, design).release)
    b = _quiet(_quiet(syn.clone().fit, design).release)
    pd.testing.assert_frame_equal(a.designs[0].data, b.designs[0].data)
    assert a.privacy == b.privacy
    # pickle round trip of a fitted synthesizer
    back = pickle.loads(pickle.dumps(syn))
    assert back.get_params().keys() == params.keys() and back.n_ == syn.n_
