"""The tuning shortcut wired into the one tuner (issue 39 item 1): ``tuning="shortcut"`` on
FBS/FBP/PBP and Sequential selects :func:`surveysynth.synth.tuning_shortcut.shortcut_predict`.

The tuner's logic is exercised with the noisy stand-in for Stan refits of
tests/test_tuner_reach.py and a synthetic matrix of unweighted log-likelihood draws (fast);
FBS and a Sequential step are run for real with short chains. Mutants kept here: a shortcut
that ignores the real / predicted ratio (always trusts), one without the step damping
(STEP_MAX = inf), a predictor that proposes c far too large for the final fit.
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
    CORRECTION_BANDWIDTH,
    PRIOR_CORRECTION,
    RATIO_MAX,
    STEP_MAX,
    lipschitz_map,
    local_correction,
    predict_delta_alpha,
    propose_c,
    ratio_check,
    shortcut_predict,
)
from tests.test_tuner_reach import FakeFits

pytestmark = pytest.mark.filterwarnings("ignore::surveysynth.synth._stan.ConvergenceWarning")

TARGET = 3.0


def stand_in_draws() -> tuple[np.ndarray, np.ndarray]:
    """(S, n) unweighted per-record log-likelihood draws and their bounds (the stand-in's
    predictor input; also tests/test_tuning_noise_band.py's)."""
    rng = np.random.default_rng(3)
    S, n = 400, 300
    L = -rng.uniform(0.5, 6.0, n)[None, :] * rng.uniform(0.3, 1.0, (S, n))
    return L, record_bounds(L)


@pytest.fixture(scope="module")
def draws():
    return stand_in_draws()


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


def _perm_loglik(L):
    """A prediction with the wrong SHAPE in c: the columns of the unweighted draws permuted,
    so small-c predictions pair a record's small alpha with another record's large |log p|
    (real / predicted ~0.2 at small c, ~1 near saturation)."""
    perm = np.random.default_rng(0).permutation(L.shape[1])
    return lambda s: L[s][:, perm]


def test_a_consistently_biased_shortcut_is_recalibrated_by_its_first_fit(draws):
    """Contributions three times too large (the prediction ~4x the real bound at every c): the
    first fit's real / predicted recalibrates the prediction (ratio_check), the shortcut keeps
    proposing, and the second c is propose_c's with that fit as its check (independently
    recomputed). The release is a final fit's bound, <= target."""
    L, delta = draws
    fits, notes, c, out = _run(delta, lambda s: 3.0 * L[s])
    assert [n["proposed_by"] for n in notes] == ["shortcut"] * len(notes)
    r1 = notes[1]["ratio"]
    assert r1 < 1 / RATIO_MAX                          # the old absolute rule would drop it
    c0, (f0, _) = fits.calls[0]["c"], fits.real[0]
    path = TuningPath(delta, 0.0, TARGET)
    again = propose_c(3.0 * L, lipschitz_map(delta), TARGET, 0.10, c_hi=path.c_max,
                      n_final=400, checks=[(c0, f0)], prior_correction=PRIOR_CORRECTION)
    assert again.correction == pytest.approx(r1, rel=1e-4)
    assert fits.calls[1]["c"] == pytest.approx(
        np.clip(again.c, c0 / STEP_MAX, c0 * STEP_MAX), rel=1e-4)
    assert out[0] <= TARGET and out[3]["final"] and c == fits.calls[-1]["c"]


def test_a_shortcut_with_the_wrong_shape_falls_back_to_todays_rule(draws):
    """The permuted prediction: recalibrated at the first fit, it then misses the second by
    more than RATIO_MAX x its correction, and every later c is default_predict's (replayed
    on the same path), with the reason on the path. The always-trusting mutant keeps
    proposing with the shortcut."""
    L, delta = draws
    fits, notes, c, out = _run(delta, _perm_loglik(L))
    k = next(i for i, n in enumerate(notes) if n["proposed_by"] == "default")
    assert k >= 2 and all(n["proposed_by"] == "shortcut" for n in notes[:k])
    assert all(n["proposed_by"] == "default" and "correction it was proposed with"
               in n["reason"] for n in notes[k:])
    assert out[0] <= TARGET
    path = TuningPath(delta, 0.0, TARGET)
    for i in range(k - 1):
        path.add(fits.calls[i]["c"], _real(fits, i))
    ck, fk = fits.calls[k - 1]["c"], _real(fits, k - 1)
    if not fits.calls[k]["final"]:
        assert default_predict(Proposal("tuning", path, ck, fk, 0.95 * TARGET,
                                        fits.real[k - 1][1])) == fits.calls[k]["c"]
    _, mnotes, _, _ = _run(delta, _perm_loglik(L), predict=_always_trust)
    assert all(n.get("proposed_by") == "shortcut" for n in mnotes)   # the mutant is seen


def test_shortcut_steps_are_damped_after_a_real_fit(draws):
    """After a real fit at c the shortcut's next c lies in [c / STEP_MAX, STEP_MAX c]: the
    permuted prediction's recalibrated proposal (~270x the first c on this case) is cut to
    STEP_MAX x. Without the damping (mutant: STEP_MAX = inf) the jump lands deep in the
    saturated region and today's rule then needs far more fits (measured: 18-19 vs 5)."""
    L, delta = draws
    fits, notes, c, out = _run(delta, _perm_loglik(L))
    cs = [k["c"] for k in fits.calls]
    assert cs[1] == pytest.approx(STEP_MAX * cs[0], rel=1e-9)        # the cap binds
    assert notes[1]["shortcut_c"] > 50 * cs[0]
    for i, n in enumerate(notes[1:], start=1):
        if n["proposed_by"] == "shortcut":
            assert cs[i - 1] / STEP_MAX * (1 - 1e-9) <= cs[i] <= cs[i - 1] * STEP_MAX * (1 + 1e-9)
    import surveysynth.synth.tuning_shortcut as ts
    try:
        ts.STEP_MAX = float("inf")
        mfits, _, _, _ = _run(delta, _perm_loglik(L))
    finally:
        ts.STEP_MAX = STEP_MAX
    assert mfits.calls[1]["c"] > 50 * cs[0] and len(mfits.calls) > len(fits.calls) + 5


@pytest.mark.parametrize("scale", [0.3, "sqrt"])
def test_an_under_predicting_shortcut_is_not_refused(draws, scale):
    """Predictions far below the real bound (contributions x 0.3, or |l|^0.5): the first c
    lands where the map is saturated. Before the recalibration rule, today's rule then crept
    down 2x per fit through the flat part and check_floor refused a reachable target in 30 of
    30 runs; now every run releases a final fit <= target within the default max_refits."""
    L, delta = draws
    tr = (lambda s: 0.3 * L[s]) if scale == 0.3 else (lambda s: -np.sqrt(np.abs(L[s])))
    for seed in range(8):
        fits, notes, c, out = _run(delta, tr, seed=seed)
        assert out[0] <= TARGET and out[3]["final"]
        assert len(fits.calls) <= 10


def test_ratio_check_and_local_correction():
    """The trust rule's arithmetic, each branch with a value that a wrong rule would pass."""
    # the first ratio recalibrates within [1/10, 10]; beyond, it fails
    assert ratio_check([4.8]) == "" and ratio_check([0.11]) == ""
    assert "first fit" in ratio_check([10.5]) and "first fit" in ratio_check([0.09])
    # later ratios against the correction they were proposed with (not against 1)
    assert ratio_check([4.8, 5.5, 4.0]) == ""
    assert "fit 2" in ratio_check([4.8, 1.0])               # 1.0 is "near 1" but 4.8x off
    assert "fit 3" in ratio_check([2.0, 2.0, 3.1])          # 3.1 / 2.0 > 1.5
    assert "fit 3" not in ratio_check([2.0, 2.0, 2.9])
    assert "positive" in ratio_check([1.0, np.inf]) and "positive" in ratio_check([0.0])
    # local reference: a drifting ratio passes when the reference is the nearby check's
    at, r = [1.0, 0.1, 0.09], [0.12, 0.17, 0.24]   # fit 3: 0.24 / ~0.17 nearby, / 0.143 overall
    assert ratio_check(r, at) == "" and "fit 3" in ratio_check(r)
    # local_correction: prior without checks, the ratio itself with one, nearness weights
    assert local_correction([], [], 0.3, prior=1.066) == 1.066
    assert local_correction([0.5], [3.0], 1e-6) == pytest.approx(3.0)
    w = np.exp(-0.5 * (np.log(2.0) / CORRECTION_BANDWIDTH) ** 2)       # = exp(-1/2)
    want = np.exp((np.log(2.0) + w * np.log(4.0)) / (1.0 + w))
    assert local_correction([1.0, 2.0], [2.0, 4.0], 1.0) == pytest.approx(want, rel=1e-12)
    # far from every check the nearest dominates, no underflow; c = 0 is the smallest check
    assert local_correction([1e-6, 1.0], [5.0, 1.0], 1e-12) == pytest.approx(5.0, rel=1e-9)
    assert local_correction([1e-6, 1.0], [5.0, 1.0], 0.0) == pytest.approx(5.0, rel=1e-9)
    # the plain mean (no locality) is a different number: the mutant is distinguishable
    assert local_correction([1.0, 100.0], [2.0, 8.0], 1.0) < 2.01 < np.sqrt(2.0 * 8.0)


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
    # everywhere too large: refused (by the final fits' count, or, once the 1000x c's sit in
    # the saturated part of the map, by the flat-map rule), never released above the target
    with pytest.raises(TargetUnreachableError, match="no final fit|below the floor"):
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
