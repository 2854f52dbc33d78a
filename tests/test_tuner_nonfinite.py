"""The tuner and weighted fits whose bound is not finite (the apistrat Sequential crash).

On apistrat (Sequential, seed 1; docs/benchmarks.md "Tuning shortcut") a step stopped with
``ValueError: c must be a finite number >= 0, got nan``. Cause: a weighted fit's Delta_alpha
was +inf (a record with alpha_i > 0 had an infinite |log p| at some draw); the tuner put
log(inf) into its log-linear regression, and every later root was exp(mean log c + (log aim -
inf) / b) with b = clip((inf - inf) ...) = NaN, so the next c was NaN. Fixed at the cause: an
infinite bound never joins the regression and the next c is the largest allowed step down
(c / 2); a NaN bound is refused naming the step and the records; a NaN proposal never reaches
a fit. Every error names the step (``TunerSettings.name``).
"""

from __future__ import annotations

import numpy as np
import pytest

from surveysynth.privacy.lipschitz import lipschitz_weights
from surveysynth.synth.tuning import (
    Proposal,
    TargetUnreachableError,
    TunerSettings,
    TuningPath,
    default_predict,
    loglinear_root,
    tune,
)

NAME = "Sequential ell"


def _delta(n=200, seed=3):
    return np.random.default_rng(seed).uniform(0.5, 4.0, n)


class Fits:
    """A deterministic stand-in for the weighted refits: R_i = delta_i x 1.1; the calls listed
    in ``bad`` (0-based) get R = ``value`` for record ``rec`` (alpha_rec > 0)."""

    def __init__(self, delta, bad=(), value=np.inf, rec=0):
        self.delta, self.bad, self.value, self.rec = delta, set(bad), value, rec
        self.calls: list[tuple[float, bool, float]] = []

    def evaluate(self, c, final):
        if not (np.isfinite(c) and c >= 0):
            raise AssertionError(f"the tuner asked for a fit at c = {c!r}")
        alpha = lipschitz_weights(None, c=c, g=0.0, bounds=self.delta)
        R = self.delta * 1.1
        if len(self.calls) in self.bad:
            R = R.copy()
            R[self.rec] = self.value
        with np.errstate(invalid="ignore"):
            per = np.where(alpha > 0, alpha * R, 0.0)
        da = float(per.max())
        self.calls.append((c, final, da))
        return da, alpha, per, {"da": da}, R

    @staticmethod
    def chain_maxima(res, alpha):
        return np.full(4, res["da"]) * np.array([0.97, 0.99, 1.01, 1.03])


def test_root_is_finite_after_an_infinite_bound():
    """The smallest level: the regression path after a fit with an infinite bound (unfixed:
    log(inf) joined it and the next c was NaN)."""
    d = _delta()
    path = TuningPath(d, 0.0, 1.0)
    path.add(0.4, np.inf)            # a tuning fit with an infinite bound
    path.add(0.2, 1.3)
    c = path.next_c(0.2, 1.3, 0.95, d)
    assert np.isfinite(c) and 0.1 <= c <= 0.4
    assert all(np.isfinite(path.logf))
    # the root refuses such points itself (unfixed: it returned NaN)
    with pytest.raises(ValueError, match="finite points"):
        loglinear_root(np.log([0.4, 0.2]), np.log([np.inf, 1.3]), 0.95)


@pytest.mark.parametrize("stage", ["tuning", "final", "refinal"])
def test_after_an_infinite_bound_the_next_c_is_half(stage):
    """An infinite bound is above any target: c goes down by the largest damped step, never
    up or sideways by a regression that ignores it."""
    d = _delta()
    path = TuningPath(d, 0.0, 1.0)
    path.add(0.1, 0.8)
    path.add(0.2, 1.3)
    R = d * 1.1
    R[0] = np.inf
    c = default_predict(Proposal(stage, path, 0.3, np.inf, 0.95, R))
    assert c == pytest.approx(0.15)


def test_tune_survives_an_infinite_tuning_bound():
    """The whole tuner on the crash's sequence: first tuning fit +inf, then finite ones
    (unfixed: the third fit was requested at c = NaN and lipschitz_weights raised)."""
    d = _delta()
    fits = Fits(d, bad=(0,), rec=int(np.argmin(d)))
    c, out = tune(fits.evaluate, 1.0, d, fits.chain_maxima, TunerSettings(name=NAME))
    assert out[0] <= 1.0 and np.isfinite(c)
    assert np.isinf(fits.calls[0][2])
    assert fits.calls[1][0] == pytest.approx(0.5 * fits.calls[0][0])


def test_tune_rejects_an_infinite_final_bound_and_lowers_c():
    d = _delta()
    probe = Fits(d)
    tune(probe.evaluate, 1.0, d, probe.chain_maxima, TunerSettings(name=NAME))
    first_final = next(i for i, (_, final, _) in enumerate(probe.calls) if final)
    fits = Fits(d, bad=(first_final,), rec=int(np.argmin(d)))
    c, out = tune(fits.evaluate, 1.0, d, fits.chain_maxima, TunerSettings(name=NAME))
    assert out[0] <= 1.0
    assert np.isinf(fits.calls[first_final][2]) and fits.calls[first_final][1]
    assert fits.calls[first_final + 1][0] == pytest.approx(0.5 * fits.calls[first_final][0])


def test_always_infinite_bound_is_refused_naming_step_and_records():
    d = _delta()
    rec = int(np.argmin(d))
    fits = Fits(d, bad=range(100), rec=rec)
    with pytest.raises(TargetUnreachableError, match=rf"{NAME}: .*infinite.*\[{rec}\]"):
        tune(fits.evaluate, 1.0, d, fits.chain_maxima, TunerSettings(name=NAME, max_refits=6))


def test_nan_bound_is_refused_naming_step_and_records():
    """NaN is not a bound: refused at once (unfixed: a NaN final bound went on to a NaN c
    or a silent 'last nan' after all refits)."""
    d = _delta()
    rec = int(np.argmin(d))
    fits = Fits(d, bad=(0,), value=np.nan, rec=rec)
    with pytest.raises(TargetUnreachableError, match=rf"{NAME}: .*NaN.*\[{rec}\]"):
        tune(fits.evaluate, 1.0, d, fits.chain_maxima, TunerSettings(name=NAME))
    assert len(fits.calls) == 1


def test_a_nan_proposal_never_reaches_a_fit():
    """Any predictor (the shortcut one included): a NaN c is an error naming the step and
    the stage, raised before a fit is run at it."""
    d = _delta()
    fits = Fits(d)

    def predict(p):
        return float("nan") if p.stage == "tuning" else default_predict(p)

    with pytest.raises(ValueError, match=rf"{NAME}: internal error: the tuning proposal "
                                         r"gave c = nan"):
        tune(fits.evaluate, 1.0, d, fits.chain_maxima, TunerSettings(name=NAME),
             predict=predict)


def test_no_finite_unweighted_bound_names_the_step():
    d = np.full(5, np.inf)
    with pytest.raises(TargetUnreachableError, match=rf"{NAME}: no record"):
        tune(Fits(d).evaluate, 1.0, d, Fits.chain_maxima, TunerSettings(name=NAME))


def test_truncated_normal_log_density_is_finite_far_below_the_lower_bound():
    """A source of the infinite bound on apistrat's api00 (bounded 200-1000, a truncated
    normal): at a draw with mu far below lo both log Phi of the normaliser underflowed to 0
    and log p came out +inf (unfixed: inf at (lo - mu) / sigma >= ~38). Reference: the
    upper-tail form, log Phi(-a) + log1p(-Phi(-b) / Phi(-a)), checked against scipy's
    truncnorm where that is finite."""
    from scipy import special, stats

    from surveysynth.synth._seq_models import normal_loglik  # noqa: PLC2701 - under test

    lo, hi = 200.0, 1000.0
    y = np.array([200.0, 500.0, 1000.0])
    sig = np.array([[50.0], [50.0], [10.0], [50.0], [100.0]])
    mu = np.array([[-2000.0], [100.0], [-1e5], [1500.0], [600.0]]) * np.ones((1, 3))
    sig = sig * np.ones((1, 3))
    got = normal_loglik(y, mu, sig, lo, hi)
    a, b = (lo - mu) / sig, (hi - mu) / sig
    assert np.isfinite(got).all()
    far = a > 30          # Phi(-b) / Phi(-a) < 1e-100 here: log Z = log Phi(-a)
    assert far.sum() == 6
    np.testing.assert_allclose(got[far], (stats.norm.logpdf(y, mu, sig)
                                          - special.log_ndtr(-a))[far], rtol=1e-12)
    np.testing.assert_allclose(got[~far], stats.truncnorm.logpdf(
        np.broadcast_to(y, mu.shape)[~far], a[~far], b[~far], loc=mu[~far],
        scale=sig[~far]), rtol=1e-8)
