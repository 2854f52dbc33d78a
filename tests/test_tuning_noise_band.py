"""The noise-aware tuning band (issue 39 item 4, sixth session; ``TunerSettings.noise_band``,
:func:`surveysynth.synth.tuning.in_tuning_band`): tuning also ends when a tuning fit lies within
1.645 x its per-chain spread of the aim, so that on small files (bound noise 20-30%) the tuner
stops chasing noise. Exercised with the noisy stand-in for Stan refits of
tests/test_tuner_reach.py; the Sequential wiring is checked on its settings."""

from __future__ import annotations

import numpy as np
import pytest

from surveysynth.synth import Sequential
from surveysynth.synth.tuning import TunerSettings, fit_to_target, in_tuning_band
from surveysynth.synth.tuning_shortcut import shortcut_predict
from tests.test_tuner_reach import FakeFits
from tests.test_tuning_wire import stand_in_draws

TARGET = 3.0


@pytest.fixture(scope="module")
def draws():
    return stand_in_draws()


def _runs(delta, L, noise, noise_band, seeds):
    out = []
    for seed in seeds:
        fits = FakeFits(delta, seed=seed, noise=noise)
        c, res = fit_to_target(fits.evaluate, TARGET, delta, fits.chain_maxima,
                               TunerSettings(name="T", noise_band=noise_band),
                               predict=shortcut_predict, loglik=lambda s: L[s],
                               loglik_draws=400)
        out.append((fits.calls, res))
    return out


def test_noisy_bounds_need_fewer_fits_and_release_alike(draws):
    """25% fit-to-fit noise, 12 seeds: fewer fits in all with the noise band (the stand-in's
    40-seed means: 3.75 vs 5.15), every release a final fit <= target, the released bounds'
    mean within 0.15 of the plain band's (2.104 vs 2.105 over 40 seeds)."""
    L, delta = draws
    a = _runs(delta, L, 0.25, False, range(12))
    b = _runs(delta, L, 0.25, True, range(12))
    fa = sum(len(calls) for calls, _ in a)
    fb = sum(len(calls) for calls, _ in b)
    assert fb < 0.85 * fa, (fa, fb)
    for calls, res in a + b:
        assert res[0] <= TARGET and res[3]["final"] and res[3]["call"] == len(calls) - 1
    ma = np.mean([res[0] for _, res in a])
    mb = np.mean([res[0] for _, res in b])
    assert abs(ma - mb) < 0.15, (ma, mb)


def test_quiet_bounds_are_untouched(draws):
    """8% noise (chain spread 4%: 1.645 s below tol mostly): the shortcut's fits are the same
    c's, call for call, with and without the noise band."""
    L, delta = draws
    a = _runs(delta, L, 0.08, False, range(6))
    b = _runs(delta, L, 0.08, True, range(6))
    for (ca, ra), (cb, rb) in zip(a, b, strict=True):
        assert [k["c"] for k in ca] == [k["c"] for k in cb] and ra[0] == rb[0]


def test_in_tuning_band_arithmetic():
    """The band: |f - aim| <= tol aim always; with noise_band also |log(f / aim)| <= 1.645 s,
    s the SD of the logs of the per-chain maxima (ddof 1). Values a wrong rule would pass:
    the noise test on the linear scale, without 1.645, or on by default."""
    aim = 1.0
    chains = np.exp(np.array([-0.2, 0.0, 0.2, 0.0]))
    s = float(np.std(np.log(chains), ddof=1))          # 0.1633
    on, off = TunerSettings(name="T", noise_band=True), TunerSettings(name="T")

    def band(st, f):
        return in_tuning_band(st, (f, None, None, {"chains": chains}, None), aim,
                              lambda res, alpha: res["chains"])

    assert band(off, 1.09) and band(on, 1.09) and not band(off, 1.11)
    f_in = float(np.exp(1.645 * s * 0.999))             # 1.308: inside in logs
    f_out = float(np.exp(1.645 * s * 1.001))
    assert band(on, f_in) and not band(on, f_out) and not band(off, f_in)
    assert band(on, 1.0 / f_in) and not band(on, 1.0 / f_out)
    assert not band(on, 1.0 - 1.6 * s)     # within 1.645 s on the linear scale, not in logs
    assert band(on, float(np.exp(1.2 * s)))             # within 1.645 s in logs
    assert not band(on, float("inf")) and not band(on, 0.0)
    assert TunerSettings(name="T").noise_band is False


def test_sequential_uses_the_noise_band_with_the_shortcut_only():
    for kw, nb in [({}, True), ({"tuning": "refits"}, False), ({"tuning": "default"}, False)]:
        seq = Sequential(**kw)
        seq._cfg_ = {"gates": {}}                          # what _fit_settings reads of a fit
        assert seq._fit_settings()["noise_band"] is nb, kw  # noqa: SLF001
