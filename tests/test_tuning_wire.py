"""The tuning shortcut wired into the one tuner (issue 39 item 1): ``tuning="shortcut"`` on
FBS/FBP/PBP and Sequential selects :func:`surveysynth.synth.tuning_shortcut.shortcut_predict`.

The tuner's logic is exercised with the noisy stand-in for Stan refits of
tests/test_tuner_reach.py and a synthetic matrix of unweighted log-likelihood draws (fast);
FBS and a Sequential step are run for real with short chains. Mutants kept here: a shortcut
that ignores the real / predicted ratio (always trusts), a predictor that proposes c far too
large for the final fit.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from surveysynth.design import SurveyDesign
from surveysynth.privacy.lipschitz import record_bounds
from surveysynth.synth import FBP, FBS, PBP, Sequential
from surveysynth.synth.params import ParameterError, validate_params
from surveysynth.synth.tuning import (
    Proposal,
    TargetUnreachableError,
    TunerSettings,
    TuningPath,
    default_predict,
    fit_to_target,
)
from surveysynth.synth.tuning_shortcut import (
    PRIOR_CORRECTION,
    RATIO_MAX,
    lipschitz_map,
    predict_delta_alpha,
    propose_c,
    shortcut_predict,
)
from tests.test_tuner_reach import FakeFits

pytestmark = pytest.mark.filterwarnings("ignore::surveysynth.synth._stan.ConvergenceWarning")

TARGET = 3.0


@pytest.fixture(scope="module")
def draws():
    """(S, n) unweighted per-record log-likelihood draws and their bounds."""
    rng = np.random.default_rng(3)
    S, n = 400, 300
    L = -rng.uniform(0.5, 6.0, n)[None, :] * rng.uniform(0.3, 1.0, (S, n))
    return L, record_bounds(L)


def _run(delta, loglik, predict=shortcut_predict, seed=4, settings=None):
    fits = FakeFits(delta, seed=seed)
    notes: list[dict] = []
    c, out = fit_to_target(fits.evaluate, TARGET, delta, fits.chain_maxima,
                           settings or TunerSettings(name="T"), predict=predict,
                           loglik=loglik, loglik_draws=None if loglik is None else 400,
                           annotate=notes.append)
    return fits, notes, c, out


def test_shortcut_proposals_drive_the_tuner_and_are_on_the_path(draws):
    """The first c is propose_c's (independently recomputed), every fit's row says the shortcut
    chose it, with k-hat and the real / predicted ratio of the check fits (the first has none);
    the release is the final fit's bound, <= target."""
    L, delta = draws
    fits, notes, c, out = _run(delta, lambda s: L[s])
    first = propose_c(L, lipschitz_map(delta), TARGET, 0.10, c_hi=TuningPath(delta, 0.0,
                      TARGET).c_max, n_final=400, prior_correction=PRIOR_CORRECTION)
    # (the tuner's prediction runs in float32 and 30 bisection steps: equal to ~1e-5)
    assert fits.calls[0]["c"] == pytest.approx(first.c, rel=1e-5)
    assert len(notes) == len(fits.calls)             # one note per fit, in order
    assert [n["proposed_by"] for n in notes] == ["shortcut"] * len(notes)
    assert [n["c_used"] for n in notes] == [k["c"] for k in fits.calls]
    assert np.isnan(notes[0]["ratio"]) and all(np.isfinite(n["k_hat"]) for n in notes)
    # the ratio recorded is the first real fit's real / predicted (the trust rule's input)
    pred0 = predict_delta_alpha(L, lipschitz_map(delta)(fits.calls[0]["c"]), n_final=400).median
    assert notes[1]["ratio"] == pytest.approx(_real(fits, 0) / pred0, rel=1e-6)   # float32
    assert 1 / RATIO_MAX <= notes[1]["ratio"] <= RATIO_MAX
    assert out[0] <= TARGET and out[3]["final"] and c == fits.calls[-1]["c"]


def _real(fits, i):
    """The bound Delta_alpha of the i-th fit of a FakeFits run."""
    return fits.real[i][0]


@pytest.fixture(autouse=True)
def _record_real(monkeypatch):
    """FakeFits keeps each fit's (Delta_alpha, R) (for the ratio and replay checks)."""
    orig = FakeFits.evaluate

    def evaluate(self, c, final):
        out = orig(self, c, final)
        self.__dict__.setdefault("real", []).append((out[0], out[4]))
        return out
    monkeypatch.setattr(FakeFits, "evaluate", evaluate)


def _always_trust(p: Proposal) -> float:
    """MUTANT: the shortcut without the trust rule (ignores real / predicted)."""
    L = p.loglik(slice(0, p.draws))
    checks = list(zip(np.exp(p.path.logc), np.exp(p.path.logf), strict=True))
    p.note["proposed_by"] = "shortcut"
    return propose_c(L, lipschitz_map(p.path.delta), p.path.target, aim=p.goal,
                     c_hi=p.path.c_max, n_final=p.draws, checks=checks).c


def test_a_mispredicting_shortcut_falls_back_to_todays_rule(draws):
    """Contributions three times too large (the prediction ~4x the real bound): after the
    first fit the ratio leaves [1/1.5, 1.5] and every later c is default_predict's, with the
    reason on the path. The always-trusting mutant keeps proposing with the shortcut."""
    L, delta = draws
    fits, notes, c, out = _run(delta, lambda s: 3.0 * L[s])
    assert notes[0]["proposed_by"] == "shortcut" and len(notes) >= 2
    assert all(n["proposed_by"] == "default" for n in notes[1:])
    assert all(n["ratio"] < 1 / RATIO_MAX and "outside" in n["reason"] for n in notes[1:])
    assert out[0] <= TARGET
    # the fallback's c is today's rule on the same path: replay the second proposal
    assert not fits.calls[1]["final"]
    path = TuningPath(delta, 0.0, TARGET)
    c0, (f0, R0) = fits.calls[0]["c"], fits.real[0]
    path.add(c0, f0)
    assert default_predict(Proposal("tuning", path, c0, f0, 0.95 * TARGET, R0)) == \
        fits.calls[1]["c"]
    _, mnotes, _, _ = _run(delta, lambda s: 3.0 * L[s], predict=_always_trust)
    assert all(n.get("proposed_by") == "shortcut" for n in mnotes)   # the mutant is seen


def test_without_loglik_the_shortcut_is_todays_rule(draws):
    """No unweighted draws (or non-finite ones): the same c, call for call, as default_predict."""
    _, delta = draws
    fa, na, ca, oa = _run(delta, None)
    fb, _, cb, ob = _run(delta, None, predict=default_predict)
    assert [k["c"] for k in fa.calls] == [k["c"] for k in fb.calls] and oa[0] == ob[0]
    assert {n["proposed_by"] for n in na} == {"default"}
    L = np.full((400, delta.size), -1.0)
    L[:, 5] = -np.inf
    fc, nc, _, _ = _run(delta, lambda s: L[s])
    assert [k["c"] for k in fc.calls] == [k["c"] for k in fb.calls]
    assert "unusable" in nc[0]["reason"]


def test_a_predictor_proposing_c_far_too_large_is_still_guarded(draws):
    """MUTANT predictor: the shortcut, but the first final fit at 50 x its c (far above the
    target). The tuner rejects that fit (its bound is above the target), lowers c and
    releases a later final fit: the release never reports above the target."""
    L, delta = draws

    def too_large(p: Proposal) -> float:
        c = shortcut_predict(p)
        return 50.0 * c if p.stage == "final" else c

    fits, notes, c, out = _run(delta, lambda s: L[s], predict=too_large)
    finals = [i for i, k in enumerate(fits.calls) if k["final"]]
    assert _real(fits, finals[0]) > TARGET              # the guard was exercised
    assert len(finals) >= 2 and out[0] <= TARGET and out[3]["call"] == finals[-1]
    # everywhere too large: refused, never released above the target
    with pytest.raises(TargetUnreachableError, match="no final fit"):
        _run(delta, lambda s: L[s], predict=lambda p: 1e3 * max(shortcut_predict(p), 1e-3),
             settings=TunerSettings(name="T", max_refits=6))


def test_tuning_setting_is_declared_and_refused_when_bad():
    for cls in (FBS, FBP, PBP, Sequential):
        obj = cls() if cls is Sequential else cls("y")
        # Sequential's default is the shortcut (2026-11-27); FBS/FBP/PBP keep the refit rule
        assert obj.tuning == ("shortcut" if cls is Sequential else "default")
        with pytest.raises(ParameterError, match="tuning must be one of '(default|shortcut)'"):
            validate_params(cls, {"tuning": "fast"})
        validate_params(cls, {"tuning": "refits"})        # the refit rule's name
    assert FBS("y", tuning="shortcut")._predictor() is shortcut_predict  # noqa: SLF001
    assert FBS("y")._predictor() is default_predict  # noqa: SLF001
    assert FBS("y", tuning="refits")._predictor() is default_predict  # noqa: SLF001
    # Sequential: the shortcut with direct final fits by default; "refits"/"default": neither
    for kw, pred, direct in [({}, shortcut_predict, True), ({"tuning": "refits"},
                                                             default_predict, False),
                             ({"tuning": "default"}, default_predict, False)]:
        seq = Sequential(**kw)
        seq._cfg_ = {"gates": {}}                          # what _fit_settings reads of a fit
        got = seq._fit_settings()  # noqa: SLF001
        assert got["predict"] is pred and got["direct_final"] is direct, kw


# ------------------------------------------------------------------ real Stan, short chains
def _data():
    rng = np.random.default_rng(10)
    n = 80
    return pd.DataFrame({"g": rng.choice(["a", "b"], n), "y": rng.lognormal(1, 0.4, n),
                         "b": rng.integers(0, 2, n), "w": rng.uniform(1, 3, n)})


SHORT = dict(chains=2, draws=60, warmup=80, progress=False, allow_unconverged=True)


def test_fbs_and_a_sequential_step_reach_the_target_with_the_shortcut():
    """tuning="shortcut": FBS and a Sequential step tune through the shortcut (their tuning
    paths say so, with k-hat and the ratio) and release a final bound <= target."""
    df = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = FBS("y", ["g"], target_lipschitz=2.0, min_cell_weight=0, random_state=1,
                tuning="shortcut", **SHORT).fit(SurveyDesign(df, weights="w"))
        s = Sequential(variables=[{"name": "b", "type": "binary"}], public=["g"],
                       target_epsilon=1.0, m=2, random_state=2, tuning="shortcut",
                       **SHORT).fit(SurveyDesign(df.assign(w=2.0), weights="w"))
    assert f.delta_alpha_ <= 2.0
    t = f.tuning_
    assert "proposed_by" in t and (t["proposed_by"] == "shortcut").any()
    assert {"k_hat", "ratio"} <= set(t.columns)
    step = s.step_fits_[0]
    assert step["delta_alpha"] <= 0.25
    assert any(r.get("proposed_by") == "shortcut" for r in step["tuning"])


def test_fbs_with_a_far_too_large_predictor_never_releases_above_the_target():
    """MUTANT predictor in a real FBS fit: the first final c 50 x the default's. That fit is
    above the target and rejected; the release is a later final fit's bound, <= target."""

    class Mutant(FBS):
        @staticmethod
        def tuning_predict(p: Proposal) -> float:
            c = default_predict(p)
            return 50.0 * c if p.stage == "final" else c

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = Mutant("y", ["g"], target_lipschitz=2.0, min_cell_weight=0, random_state=1,
                   **SHORT).fit(SurveyDesign(_data(), weights="w"))
    finals = f.tuning_[f.tuning_["role"] == "final"]
    assert finals["delta_alpha"].iloc[0] > 2.0        # the mutant's fit was rejected
    assert f.delta_alpha_ <= 2.0 and f.delta_alpha_ == finals["delta_alpha"].iloc[-1]
