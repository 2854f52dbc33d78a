"""The one fitting engine (synth/fitting.py) and the one tuner's pluggable ``predict`` step
(synth/tuning.py), issue 38 item 1.

The engine's arithmetic is checked against brute force on small arrays; the tuner's
``predict`` hook with the noisy stand-in for Stan refits of tests/test_tuner_reach.py; that
FBS and Sequential's steps really go through the one tuner, with real (short) Stan fits.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from surveysynth.design import SurveyDesign
from surveysynth.synth import FBS, Sequential
from surveysynth.synth._stan import StanDraws  # noqa: PLC2701 - the engine under test
from surveysynth.synth.fitting import (
    absmax_over_draws,
    chain_maxima,
    check_weights,
    weighted_bound,
)
from surveysynth.synth.tuning import (
    Proposal,
    TargetUnreachableError,
    TunerSettings,
    TuningPath,
    default_predict,
    fit_to_target,
    tune,
)
from tests.test_tuner_reach import FakeFits

pytestmark = pytest.mark.filterwarnings("ignore::surveysynth.synth._stan.ConvergenceWarning")


# ------------------------------------------------------------------ the engine's arithmetic
def test_weighted_bound_ignores_records_with_alpha_zero_even_when_infinite():
    """alpha_i = 0 contributes 0 even where log p_i is not finite (a record the weights drop);
    elsewhere alpha_i R_i. Kills np.max(alpha * R) (nan / inf) and a where on R's finiteness
    (which would drop an infinite record with alpha > 0: the bound must then be inf)."""
    alpha = np.array([0.0, 0.5, 1.0, 0.25])
    R = np.array([np.inf, 4.0, 1.5, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no 0 x inf RuntimeWarning either
        per, da = weighted_bound(alpha, R)
    np.testing.assert_array_equal(per, [0.0, 2.0, 1.5, 0.5])
    assert da == 2.0
    assert weighted_bound(np.array([0.1, 1.0]), np.array([np.inf, 1.0]))[1] == np.inf


@pytest.mark.parametrize("chunk", [1, 3, 7, 50])
def test_absmax_over_draws_is_the_max_over_every_draw_whatever_the_chunk(chunk):
    """Blocks of draws must cover all S draws (a loop to S - 1, or one that skips the last
    partial block, misses the largest |log p| put in the last draw)."""
    rng = np.random.default_rng(1)
    ll = rng.normal(-2, 1, (23, 9))
    ll[-1, 4] = -40.0          # the largest |log p| in the very last draw
    got = absmax_over_draws(lambda s: ll[s], 23, 9, chunk)
    np.testing.assert_array_equal(got, np.abs(ll).max(axis=0))


def test_chain_maxima_are_each_chains_own_bound():
    """Chain c's draws are rows c x D ... (c + 1) x D - 1 (chain-major); kills a slice that
    mixes chains or reuses chain 0."""
    rng = np.random.default_rng(2)
    D, n = 5, 4
    x = rng.normal(0, 1, (3 * D, n))
    x[D + 2, 1] = 9.0                     # chain 1 only
    res = StanDraws({"x": x}, 3, D, pd.DataFrame(), {}, ("x",), {})
    alpha = np.array([1.0, 0.5, 0.0, 1.0])
    got = chain_maxima(res, alpha, lambda r: np.abs(r["x"]).max(axis=0))
    want = [float(np.max(alpha * np.abs(x[c * D:(c + 1) * D]).max(axis=0))) for c in range(3)]
    np.testing.assert_allclose(got, want, rtol=0, atol=0)
    assert got[1] == 4.5 and got[0] < 4.5 and got[2] < 4.5


def test_weights_check_names_the_rows():
    w = np.array([1.0, 0.0, 2.0, np.nan, -1.0])
    with pytest.raises(ValueError, match=r"rows \['b', 'd', 'e'\] are not\. FBS models"):
        check_weights(w, pd.Index(list("abcde")), why="FBS models log w.")
    with pytest.raises(ValueError, match=r"rows \[1, 3, 4\]"):
        check_weights(w)
    check_weights(np.array([0.5, 3.0]))
    # the MCMC settings are checked by the one validator (synth/params.py; tests/test_params.py)


# ------------------------------------------------------------------ the predict step
def _delta(rng, n=300):
    return rng.uniform(0.5, 6.0, n)


def test_default_predict_is_the_rule_the_tuner_ran_before():
    """predict=default_predict and no predict give the same path, call for call (the default
    is today's rule), and a recording predictor sees the stages in order: first, tuning...,
    final, with the path holding the fit it is asked about."""
    delta = _delta(np.random.default_rng(3))
    a, b = FakeFits(delta, seed=4), FakeFits(delta, seed=4)
    s = TunerSettings(name="T")
    ca, oa = tune(a.evaluate, 3.0, delta, a.chain_maxima, s)
    seen: list[Proposal] = []

    def recording(p: Proposal) -> float:
        seen.append(Proposal(p.stage, p.path, p.c, p.f, p.goal, p.R))
        if p.stage != "first":
            assert np.log(p.c) in p.path.logc      # the fit asked about is on the path
        return default_predict(p)

    cb, ob = tune(b.evaluate, 3.0, delta, b.chain_maxima, s, predict=recording)
    assert ca == cb and oa[0] == ob[0]
    assert [k["c"] for k in a.calls] == [k["c"] for k in b.calls]
    stages = [p.stage for p in seen]
    assert stages[0] == "first" and "final" in stages
    assert stages.index("final") == len([k for k in b.calls if not k["final"]])


def test_a_plugged_predict_chooses_c_but_not_the_guarantee():
    """A predictor that proposes c below the cell floor is clipped to the floor; one that aims
    the final fit too high gets its fit rejected and c lowered: the bound returned is the
    final fit's and never above the target, whatever the predictor says."""
    rng = np.random.default_rng(5)
    delta = _delta(rng)
    codes = (np.arange(delta.size) % 3).astype(int)
    settings = TunerSettings(name="T", min_cell_weight=5.0,
                             groupings=((["a", "b", "c"], codes),))
    floor_c = settings.floor(TuningPath(delta, 0.0, 3.0)).c
    assert floor_c > 0
    fits = FakeFits(delta, noise=0.02, seed=6)

    def greedy(p: Proposal) -> float:
        if p.stage in ("final", "refinal"):
            return 1.5 * (p.c or 1.0)     # aims far above: the guard must reject
        return 1e-9                       # below the floor: clipped
    try:
        c, out = tune(fits.evaluate, 3.0, delta, fits.chain_maxima, settings, predict=greedy)
    except TargetUnreachableError as exc:   # allowed: refusing is safe, releasing above is not
        assert "after" in str(exc) or "min_cell_weight" in str(exc)
    else:
        assert out[0] <= 3.0 and out[3]["final"]
    assert min(k["c"] for k in fits.calls) >= floor_c * (1 - 1e-12)
    assert all(k["c"] >= floor_c for k in fits.calls if not k["final"])


def test_fit_to_target_passes_the_unweighted_log_likelihood_to_predict():
    """The predictor sees the caller's unweighted per-record log-likelihood draws."""
    delta = _delta(np.random.default_rng(7))
    ll = -np.random.default_rng(8).uniform(0, 1, (40, delta.size)) * delta
    fits = FakeFits(delta, seed=9)
    got = {}

    def peek(p: Proposal) -> float:
        got.setdefault("ll", p.loglik(slice(0, 40)) if p.loglik else None)
        got.setdefault("S", p.draws)
        return default_predict(p)

    fit_to_target(fits.evaluate, 3.0, delta, fits.chain_maxima, TunerSettings(name="T"),
                  predict=peek, loglik=lambda s: ll[s], loglik_draws=40)
    np.testing.assert_array_equal(got["ll"], ll)
    assert got["S"] == 40


# ------------------------------------------------------------------ every caller uses it
def _spy_predict(log):
    def predict(p: Proposal) -> float:
        log.append((p.stage, p.loglik is not None, p.draws))
        return default_predict(p)
    return staticmethod(predict)


def test_fbs_and_sequential_steps_call_the_one_tuner_with_their_loglik():
    """A predictor plugged into FBS and into Sequential is asked for c (so both tune through
    tuning.tune), with the unweighted fit's log-likelihood draws available. Real Stan, short
    chains, 80 records. (``tuning_predict`` is the refit rule's predictor: Sequential's
    default since 2026-11-27 is the shortcut, so the spy asks for tuning="refits".)"""
    rng = np.random.default_rng(10)
    n = 80
    df = pd.DataFrame({"g": rng.choice(["a", "b"], n), "y": rng.lognormal(1, 0.4, n),
                       "b": rng.integers(0, 2, n), "w": rng.uniform(1, 3, n)})
    d = SurveyDesign(df, weights="w")
    fbs_log: list = []
    seq_log: list = []

    class SpyFBS(FBS):
        tuning_predict = _spy_predict(fbs_log)

    class SpySeq(Sequential):
        tuning_predict = _spy_predict(seq_log)

    short = dict(chains=2, draws=60, warmup=80, progress=False, allow_unconverged=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = SpyFBS("y", ["g"], target_lipschitz=2.0, min_cell_weight=0, random_state=1,
                   **short).fit(d)
        # equal weights: design weights, released as collected (one step, no weights step)
        s = SpySeq(variables=[{"name": "b", "type": "binary"}], public=["g"],
                   target_epsilon=1.0, m=2, random_state=2, tuning="refits",
                   **short).fit(SurveyDesign(df.assign(w=2.0), weights="w"))
    assert f.delta_alpha_ <= 2.0 and fbs_log and fbs_log[0] == ("first", True, 120)
    assert len(s.step_fits_) == 1 and s.step_fits_[0]["delta_alpha"] <= 0.25
    assert seq_log and seq_log[0] == ("first", True, 120)
