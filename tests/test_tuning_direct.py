"""Direct final fits (issue 39 item 1): with ``TunerSettings(direct_final=True)`` a predictor
that sets ``Proposal.direct`` (the tuning shortcut) places the FINAL fit's c with no tuning fit
before it. What must hold (docs/pseudo_posterior.md, "Direct final fits"): a fit is released
only when its bound lies in [(1 - tol) target, target] (or <= target at c_max), it is the last
fit run, its c did not come from its own draws; a fit outside the band becomes a path point;
after ``direct_tries`` the tuner goes on as before. The stand-in for Stan refits is
tests/test_tuner_reach.py's FakeFits (noisy bounds). Mutants kept here: a tuner that releases
the first direct fit whatever its bound, one that releases a direct fit below the band.
"""

from __future__ import annotations

import numpy as np
import pytest

from surveysynth.privacy.lipschitz import lipschitz_weights
from surveysynth.synth import tuning as T
from surveysynth.synth.tuning import (
    Proposal,
    TargetUnreachableError,
    TunerSettings,
    default_predict,
    fit_to_target,
)
from tests.test_tuner_reach import FakeFits

TARGET = 3.0


def _oracle(scale: float = 1.0):
    """A stand-in for the tuning shortcut: predicts FakeFits' map from the unweighted bounds,
    off by ``scale``; after a real fit it corrects by real / predicted there, and hands over
    to today's rule when that ratio leaves [1/1.5, 1.5] (the shortcut's trust rule). Proposes
    direct fits (sets ``p.direct``) at stage "direct" only."""
    def predict(p: Proposal) -> float:
        if p.stage != "direct":
            return default_predict(p)
        corr = 1.0
        if p.c is not None:
            corr = p.f / p.path.predict(p.c, p.path.R0 * scale)
            if not 1 / 1.5 <= corr <= 1.5:
                return default_predict(p)
        p.direct = True
        p.note["proposed_by"] = "oracle"
        return p.path.plug_in(p.path.R0 * scale * corr, p.goal)
    return predict


def _run(delta, predict, seed=1, noise=0.02, direct=True, tries=2, grow=0.0):
    fits = FakeFits(delta, noise=noise, grow=grow, seed=seed)
    rows: list[dict] = []
    settings = TunerSettings(name="T", direct_final=direct, direct_tries=tries)
    c, out = fit_to_target(fits.evaluate, TARGET, delta, fits.chain_maxima, settings,
                           predict=predict, annotate=rows.append)
    return fits, rows, c, out


def _roles(rows: list[dict]) -> list[str]:
    """The roles the tuner wrote for unreleased direct fits (annotate's notes, in order)."""
    return [r["role"] for r in rows if "role" in r]


@pytest.fixture(scope="module")
def delta():
    return np.random.default_rng(5).uniform(0.5, 6.0, 300)


def test_an_accurate_prediction_needs_one_final_fit(delta):
    """The oracle lands in the band: ONE fit in all, a final one, released, <= target; the
    same problem without direct fits takes a tuning fit first."""
    fits, rows, c, out = _run(delta, _oracle())
    assert len(fits.calls) == 1 and fits.calls[0]["final"] is True
    assert (1 - 0.10) * TARGET <= out[0] <= TARGET and out[3] is fits.calls[-1]
    np.testing.assert_array_equal(out[1], lipschitz_weights(None, c=c, g=0.0, bounds=delta))
    f2, _, _, _ = _run(delta, _oracle(), direct=False)
    assert len(f2.calls) >= 2 and f2.calls[0]["final"] is False


def test_a_direct_fit_above_the_target_is_not_released(delta):
    """A prediction 30% low puts the first direct fit above the target: it is not released
    (its row says so), a later final fit is, <= target. Mutant: release the first."""
    fits, rows, c, out = _run(delta, _oracle(scale=0.7))
    assert fits.calls[0]["final"] is True and len(fits.calls) >= 2
    first = fits.real_bounds[0]
    assert first > TARGET and "above the target" in _roles(rows)[0]
    assert out[0] <= TARGET and out[3] is fits.calls[-1]


def test_a_direct_fit_below_the_band_is_not_released(delta):
    """A prediction 40% high lands far below the band: not released (a fit is spent, not the
    utility of a weaker-than-asked release); the release is within the band."""
    fits, rows, c, out = _run(delta, _oracle(scale=1.4))
    assert fits.real_bounds[0] < 0.9 * TARGET and "below the band" in _roles(rows)[0]
    assert 0.9 * TARGET <= out[0] <= TARGET and len(fits.calls) >= 2


def test_without_the_direct_flag_the_tuner_is_unchanged(delta):
    """A predictor that does not set ``direct``: the same fits, call for call, as
    direct_final=False (the setting only acts through a willing predictor)."""
    fa, _, ca, oa = _run(delta, default_predict, direct=True)
    fb, _, cb, ob = _run(delta, default_predict, direct=False)
    assert [k["c"] for k in fa.calls] == [k["c"] for k in fb.calls] and oa[0] == ob[0]


def test_property_direct_releases_never_above_target():
    """Over random problems and predictors off by 0.5x-2x with noise up to 15%: a refusal
    (only 'no final fit' after max_refits) or a released bound <= target from the last fit,
    a final one; every fit before it was not released."""
    rng = np.random.default_rng(20261127)
    for k in range(200):
        n = int(rng.integers(20, 500))
        d = rng.lognormal(0.0, rng.uniform(0.1, 0.8), n)
        target = float(d.max()) * float(np.exp(rng.uniform(np.log(0.3), np.log(0.95))))
        fits = FakeFits(d, noise=rng.uniform(0.0, 0.15), grow=rng.uniform(0.0, 0.6), seed=k)
        settings = TunerSettings(name="T", direct_final=True)
        try:
            c, out = fit_to_target(fits.evaluate, target, d, fits.chain_maxima, settings,
                                   predict=_oracle(float(np.exp(rng.uniform(-0.7, 0.7)))))
        except TargetUnreachableError as exc:
            assert "no final fit" in str(exc), (k, str(exc))
            continue
        assert out[0] <= target and out[3] is fits.calls[-1] and out[3]["final"], k


@pytest.fixture(autouse=True)
def _record(monkeypatch):
    orig = FakeFits.evaluate

    def evaluate(self, c, final):
        out = orig(self, c, final)
        self.__dict__.setdefault("real_bounds", []).append(out[0])
        return out
    monkeypatch.setattr(FakeFits, "evaluate", evaluate)


def _release_first(*args, **kwargs):
    """MUTANT of tuning._start: releases the first direct fit whatever its bound."""
    settings, target, aim, path, floor, propose, fit, last_direct = args[:8]
    c = propose("direct", None, None, target * np.exp(-settings.tol / 2), path.R0)
    out = fit(c, True)
    return (c, out), c, None, 1, False, False


def _release_below(*args, **kwargs):
    """MUTANT: a direct fit <= target is released even below the band."""
    settings, target, aim, path, floor, propose, fit, last_direct = args[:8]
    c = propose("direct", None, None, target * np.exp(-settings.tol / 2), path.R0)
    out = fit(c, True)
    if out[0] <= target:
        return (c, out), c, None, 1, False, False
    return ORIG_START(*args, **kwargs)


ORIG_START = T._start  # noqa: SLF001 - the mutants replace it


@pytest.mark.parametrize("mutant, scale", [(_release_first, 0.7), (_release_below, 1.4)])
def test_mutants_are_caught(monkeypatch, delta, mutant, scale):
    """Each mutant fails the test above it that it should fail."""
    monkeypatch.setattr(T, "_start", mutant)
    if mutant is _release_first:     # the one tuner's invariant refuses it (the test above fails)
        with pytest.raises(TargetUnreachableError, match="internal error"):
            _run(delta, _oracle(scale=scale))
        return
    fits, rows, c, out = _run(delta, _oracle(scale=scale))
    assert out[0] < 0.9 * TARGET      # released below the band: the test above fails


def test_sequential_tries_direct_fits_only_when_the_bound_is_quiet():
    """direct_final_pays: 1.645 x the relative SD of the unweighted fit's per-chain maxima at
    most tol / 2 (here 0.05). Per-chain maxima 1% apart: yes; 12% apart (a small file's
    noise): no; one chain or no finite positive maximum: no. The statistic is per chain: the
    maxima over records of each chain (a version that took the SD over records, or over
    chains of a single record, gives the wrong answer on the cases below)."""
    from surveysynth.synth.sequential import direct_final_pays

    rng = np.random.default_rng(3)
    base = rng.uniform(0.1, 1.0, 500)
    quiet = np.array([base * f for f in (1.0, 1.01, 0.99, 1.005)])
    noisy = np.array([base * f for f in (1.0, 1.15, 0.88, 1.05)])
    assert direct_final_pays(quiet, 0.10) and not direct_final_pays(noisy, 0.10)
    assert direct_final_pays(noisy, 0.60)             # a wider band has room for that noise
    assert not direct_final_pays(quiet[:1], 0.10)
    assert not direct_final_pays(np.full((4, 3), np.inf), 0.10)
    # per-record spreads large but the chains' maxima equal: the bound is quiet
    spread = np.array([rng.permutation(base) for _ in range(4)])
    assert direct_final_pays(spread, 0.10)
    # an infinite bound of one record in one chain: ignored within that chain
    inf1 = quiet.copy()
    inf1[2, 7] = np.inf
    assert direct_final_pays(inf1, 0.10)
