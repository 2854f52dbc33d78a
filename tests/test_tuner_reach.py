"""The tuner and targets above what weighting needs (pseudo_posterior ``_tune`` / ``_weighted_fit``).

A bound below the target is a stronger guarantee than asked, never a refusal: a tuning fit at
c_max (every record but the riskiest at alpha = 1) below the band sends the FINAL fit (fresh
draws) to c_max; an unweighted bound below the target gives an alpha = 1 final fit in FBS /
FBP / PBP as in Sequential's steps. The invariant under test everywhere: the returned (released)
bound is <= the target and comes from a final fit.

The synthetic ``evaluate`` callbacks mimic the real one (``_fit``'s closure and Sequential's
``fitting.WeightedFits.evaluate``): alpha from :func:`lipschitz_weights`, per-record bounds R_i that grow
as the weights fall (the posterior widens) times multiplicative noise of the max over draws, and
the tuple ``(delta_alpha, alpha, per_record, res, R)``; ``res`` records the call (c, final,
call number) and the per-chain maxima that ``chain_maxima`` reads.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from surveysynth.design import SurveyDesign
from surveysynth.privacy.lipschitz import lipschitz_weights
from surveysynth.synth import FBS
from surveysynth.synth.pseudo_posterior import TargetUnreachableError
from surveysynth.synth.sequential import Sequential
from surveysynth.synth.tuning import TuningPath


class FakeFits:
    """A noisy stand-in for the Stan refits: R_i(c) = delta_i * scale * (1 + grow * (1 -
    mean alpha)) * exp(common + idio_i), the common log-noise N(0, noise) per fit (the fit-to-fit
    spread of a max over draws) and small per-record noise."""

    def __init__(self, delta, g=0.0, noise=0.08, scale=1.0, grow=0.3, seed=0, chains=4):
        self.delta = np.asarray(delta, dtype=float)
        self.g, self.noise, self.scale, self.grow = g, noise, scale, grow
        self.rng = np.random.default_rng(seed)
        self.chains = chains
        self.calls: list[dict] = []

    def evaluate(self, c, final):
        n = self.delta.size
        alpha = np.ones(n) if c is None else lipschitz_weights(None, c=c, g=self.g,
                                                                bounds=self.delta)
        widen = 1.0 + self.grow * (1.0 - float(np.mean(alpha)))
        common = self.rng.normal(0.0, self.noise)
        R = self.delta * self.scale * widen * np.exp(common + self.rng.normal(0, 0.01, n))
        per = np.where(alpha > 0, alpha * R, 0.0)
        da = float(per.max())
        chain = da * np.exp(self.rng.normal(0.0, self.noise / 2, self.chains)) / 1.05
        res = {"call": len(self.calls), "c": c, "final": final, "chains": chain}
        self.calls.append(res)
        return da, alpha, per, res, R

    @staticmethod
    def chain_maxima(res, alpha):
        return res["chains"]


def _tuner(tol=0.10, g=0.0, max_refits=20):
    """A pseudo posterior synthesizer as the tuner (``_tune`` hands name, tol, g, max_refits
    to :func:`surveysynth.synth.tuning.tune`, the one tuner Sequential's steps call too)."""
    return FBS("y", tol=tol, g=g, max_refits=max_refits, progress=False)


def _vignette_delta(rng, n=400):
    """Unweighted per-record bounds as in public_use_simulation.md ('urban' at budget 80):
    max 1.74 (one riskiest record) below the target 2, the rest at most ~1.3."""
    d = rng.uniform(0.2, 1.3, n)
    d[17] = 1.74
    return d


def _returned_call(fits, out):
    res = out[3]
    assert res is fits.calls[res["call"]]
    return res


# ------------------------------------------------------------------ the reported case
def test_ceiling_below_band_goes_to_a_final_fit_at_c_max_not_a_refusal():
    """Sequential's path: the alpha = 1 final fit came out above 2 by noise, so ``_tune`` is
    called with unweighted bounds whose max (1.74) is below the target. The old code raised
    'above what weighting can reach' at the first tuning fit at c_max (bound ~1.3 < 0.9 x 2)."""
    rng = np.random.default_rng(80)
    delta, target = _vignette_delta(rng), 2.0
    c_max = TuningPath(delta, 0.0, target).c_max
    fits = FakeFits(delta, noise=0.05, seed=1)
    tuner = _tuner()
    c, out = tuner._tune(fits.evaluate, target, delta, fits.chain_maxima)  # noqa: SLF001
    res = _returned_call(fits, out)
    assert out[0] <= target
    # a fresh FINAL fit is reported, not the tuning fit that found the ceiling (a fix that
    # returns the tuning fit's tuple fails here); and it is the last fit run
    assert res["final"] is True and res["call"] == len(fits.calls) - 1
    assert any(not k["final"] for k in fits.calls[:-1])
    # the final fit is at c_max (the largest weights short of alpha = 1 everywhere): a fix that
    # stops at the ceiling but aims the final fit lower along the regression fails here
    assert c == pytest.approx(c_max, rel=1e-9) and res["c"] == c
    np.testing.assert_allclose(out[1], lipschitz_weights(None, c=c, g=0.0, bounds=delta))
    assert out[1][17] == 0.0 and np.all(out[1][np.arange(400) != 17] == 1.0)
    assert out[0] < 0.9 * target     # below the band: the bound is what it is
    assert tuner.bound_spread_["ceiling"] is True
    # two fits in all: one tuning fit found the ceiling, one final fit
    assert [k["final"] for k in fits.calls] == [False, True]


def test_ceiling_final_fit_above_target_is_rejected_and_c_lowered():
    """A final fit at c_max that noise puts above the target is not released: c falls and a
    new final fit is run (a fix that returns the first final fit whatever its bound fails)."""
    rng = np.random.default_rng(3)
    delta, target = _vignette_delta(rng), 2.0
    fits = FakeFits(delta, noise=0.0, seed=2)
    base = fits.evaluate
    forced = {"done": False}

    def evaluate(c, final):
        out = base(c, final)
        if final and not forced["done"]:     # the first final fit: an unlucky draw set
            forced["done"] = True
            per = out[2] * (2.3 / out[0])
            return float(per.max()), out[1], per, out[3], out[4] * (2.3 / out[0])
        return out

    c_max = TuningPath(delta, 0.0, target).c_max
    c, out = _tuner()._tune(evaluate, target, delta, fits.chain_maxima)  # noqa: SLF001
    finals = [k for k in fits.calls if k["final"]]
    assert len(finals) == 2 and finals[0]["c"] == pytest.approx(c_max)
    assert out[0] <= target and out[3] is finals[1] and c < c_max


def test_below_band_at_small_c_keeps_tuning_up():
    """Only a fit AT c_max stops the tuning: a first plug-in step that undershoots (the
    weighted fits' bounds are 0.6 x the unweighted ones) must climb into the band. A mutant
    that treats any below-band fit as the ceiling releases a bound far below the band."""
    rng = np.random.default_rng(5)
    delta = rng.lognormal(0.0, 0.5, 500)
    target = 0.5 * float(delta.max())
    c_max = TuningPath(delta, 0.0, target).c_max
    fits = FakeFits(delta, noise=0.02, scale=0.6, grow=0.0, seed=3)
    c, out = _tuner()._tune(fits.evaluate, target, delta, fits.chain_maxima)  # noqa: SLF001
    assert fits.calls[0]["c"] < c_max and fits.calls[0]["chains"].max() < 0.9 * target
    assert 0.85 * target <= out[0] <= target
    assert c < c_max and out[3]["final"] is True


def test_target_below_the_floor_with_g_still_raises():
    """g > 0: at c = 0 every alpha is g and the bound is g x max R; a target below it is
    genuinely unreachable and still refused (a fix that dropped every refusal fails here)."""
    rng = np.random.default_rng(7)
    delta = rng.lognormal(0.0, 0.4, 300)
    g = 0.5
    target = 0.3 * float(delta.max())             # floor ~ 0.5 x max > target
    fits = FakeFits(delta, g=g, noise=0.03, seed=4)
    with pytest.raises(TargetUnreachableError, match=r"below the bound .* reached at c -> 0"):
        _tuner(g=g)._tune(fits.evaluate, target, delta, fits.chain_maxima)  # noqa: SLF001
    assert not any(k["final"] for k in fits.calls)      # refused before any final fit


# ------------------------------------------------------------------ FBS/FBP/PBP fit path
def test_fit_path_unweighted_below_target_releases_alpha_one_final_fit():
    rng = np.random.default_rng(11)
    delta, target = _vignette_delta(rng), 2.0
    fits = FakeFits(delta, noise=0.0, seed=5)
    c, out = _tuner()._weighted_fit(fits.evaluate, target, delta,  # noqa: SLF001
                                    fits.chain_maxima)
    assert c is None and np.all(out[1] == 1.0) and out[3]["final"] is True
    assert len(fits.calls) == 1 and out[0] <= target
    # not taken when the unweighted bound is within tol of the target: then weighting is tuned
    fits2 = FakeFits(delta, noise=0.0, seed=5)
    c2, out2 = _tuner()._weighted_fit(fits2.evaluate, 1.9, delta,  # noqa: SLF001
                                      fits2.chain_maxima)
    assert c2 is not None and out2[0] <= 1.9 and not fits2.calls[0]["final"]


def test_fit_path_alpha_one_above_target_is_tuned_not_released():
    rng = np.random.default_rng(12)
    delta, target = _vignette_delta(rng), 2.0
    fits = FakeFits(delta, noise=0.0, seed=6)
    base = fits.evaluate

    def evaluate(c, final):      # the alpha = 1 final fit's fresh draws come out at 2.2
        out = base(c, final)
        if c is None:
            return 2.2, out[1], out[2] * (2.2 / out[0]), out[3], out[4] * (2.2 / out[0])
        return out

    c, out = _tuner()._weighted_fit(evaluate, target, delta, fits.chain_maxima)  # noqa: SLF001
    assert fits.calls[0]["c"] is None and fits.calls[0]["final"]
    assert c is not None and out[0] <= target and out[3] is fits.calls[-1]
    assert out[3]["final"] and out[3]["c"] == pytest.approx(TuningPath(delta, 0, 2).c_max)


def test_fit_path_guard_refuses_a_bound_above_the_target(monkeypatch):
    """The last line of defence: whatever ``tune`` returns, a bound above the target never
    reaches release (a mutant without the guard releases 2.5 here)."""
    from surveysynth.synth import tuning

    delta = np.linspace(0.5, 3.0, 50)
    fits = FakeFits(delta, noise=0.0)
    tuner = _tuner()
    monkeypatch.setattr(tuning, "tune", lambda *a, **k: (1.0, (2.5, *fits.evaluate(1.0, True)[1:])))
    with pytest.raises(TargetUnreachableError, match="above the target"):
        tuner._weighted_fit(fits.evaluate, 2.0, delta, fits.chain_maxima)  # noqa: SLF001


# ------------------------------------------------------------------ the invariant
def test_property_released_bound_never_above_target():
    """Over many random problems (sizes, bound distributions, targets from far below to above
    the unweighted max, noise 0-15%, g 0 or 0.5, posterior widening): either a refusal
    (only where g > 0 puts the floor above the target, or the bound's noise defeats max_refits)
    or a released bound <= target from the LAST evaluation, a final one, whose alpha is that of
    the returned c."""
    rng = np.random.default_rng(20261201)
    released = refused = ceiling = 0
    for k in range(300):
        n = int(rng.integers(20, 600))
        delta = rng.lognormal(0.0, rng.uniform(0.1, 0.8), n)
        g = 0.0 if k % 3 else 0.5
        target = float(delta.max()) * float(np.exp(rng.uniform(np.log(0.3), np.log(1.6))))
        fits = FakeFits(delta, g=g, noise=rng.uniform(0.0, 0.15), grow=rng.uniform(0.0, 0.6),
                        seed=k)
        tuner = _tuner(g=g)
        try:
            c, out = tuner._weighted_fit(fits.evaluate, target, delta,  # noqa: SLF001
                                         fits.chain_maxima)
        except TargetUnreachableError as exc:
            refused += 1
            assert g > 0 or "no final fit" in str(exc), (k, str(exc))
            continue
        released += 1
        assert out[0] <= target, k
        assert out[3]["final"] is True and out[3] is fits.calls[-1], k
        assert out[0] == pytest.approx(float(np.max(out[2]))), k
        alpha = (np.ones(n) if c is None
                 else lipschitz_weights(None, c=c, g=g, bounds=delta))
        np.testing.assert_array_equal(out[1], alpha)
        ceiling += bool(getattr(tuner, "bound_spread_", {}).get("ceiling"))
    # the sweep reaches every branch: releases, refusals, and the c_max ceiling
    assert released > 200 and refused > 0 and ceiling > 0, (released, refused, ceiling)


# ------------------------------------------------------------------ real Stan
def test_sequential_binary_step_target_above_unweighted_bound_real_stan():
    """One binary variable (logistic, intercept only), n = 300, target far above its
    unweighted bound: the fit succeeds (no TargetUnreachableError) and the ledger's bound,
    recomputed here from the released draws with scipy's Bernoulli pmf, is <= the target."""
    rng = np.random.default_rng(21)
    n, m, eps = 300, 2, 16.0
    b = (rng.uniform(size=n) < 0.3).astype(int)
    df = pd.DataFrame({"b": b, "w": np.full(n, 20.0)})
    des = SurveyDesign(df, weights="w")
    syn = Sequential(variables=[{"name": "b", "type": "binary"}], target_epsilon=eps, m=m,
                     random_state=5, chains=2, draws=200, warmup=200, allow_unconverged=True,
                     progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        syn.fit(des)
        rel = syn.release()
    target = eps / (2 * m)
    assert [s.name for s in syn.steps_] == ["b"]
    r = syn.step_fits_[0]
    assert r["delta_unweighted"] < target * np.exp(-0.1)
    led = [e for e in rel.privacy.ledger if e.get("step") == "release"]
    # the public ledger charges the step's public target per released draw (issue 35); the
    # account is exactly the budget
    assert len(led) == 1 and led[0]["delta_alpha"] == target
    assert led[0]["epsilon"] == pytest.approx(2 * target * m, rel=1e-12)
    assert rel.privacy.epsilon == pytest.approx(eps, rel=1e-12)
    res, alpha = r["fit"], r["alpha"]
    codes = pd.Index(syn.steps_[0].levels, dtype=object).get_indexer(
        pd.Series(b).astype(object))
    p = special.expit(res["a"][:, None] + np.zeros((1, n)))
    indep = float(np.max(alpha * np.abs(stats.bernoulli.logpmf(codes, p)).max(axis=0)))
    # the achieved bound, recomputed, is the confidential one and at most the public target
    assert r["delta_alpha"] == pytest.approx(indep, rel=1e-8) and indep <= target
    assert syn.summary().loc["b", "delta_alpha"] == pytest.approx(indep, rel=1e-8)
    # alpha = 1 was taken (confidential: c None), and the public record states the rule
    # without saying which branch this data took (that bit is outside the budget)
    assert r["c"] is None and np.all(alpha == 1.0)
    assert "no risk weighting is applied (alpha_i = 1 for every record)" in \
        rel.privacy.guarantee_text
    assert not any(v == "b" for k, v in rel.privacy.facts.items() if k != "variables")
    assert syn.summary().loc["b", "c"] is None or np.isnan(syn.summary().loc["b", "c"])


def _outlier_design():
    """n = 300, log salary by a two-level predictor, varying weights, and ONE outlier record
    (salary x 40): its unweighted bound (~48) is far above every other record's (~5)."""
    rng = np.random.default_rng(4)
    n = 300
    x = rng.choice(["a", "b"], n)
    y = np.exp(10 + 0.3 * (x == "b") + 0.4 * rng.normal(size=n))
    y[5] *= 40.0
    df = pd.DataFrame({"y": y, "x": x, "w": np.exp(3 + 0.2 * rng.normal(size=n))})
    return df, SurveyDesign(df, weights="w")


def test_fbs_real_stan_target_above_reach_is_released_not_refused():
    """Real Stan, FBS, both new paths. (1) A target far above the unweighted bound: an alpha = 1
    final fit (c_ None), bound <= target (was TargetUnreachableError 'above what weighting can
    reach'). (2) Target = the unweighted bound: tuning starts at c_max (the outlier at alpha =
    0), that fit is far below the band, and the final fit with fresh draws at c_max is released
    with the below-band warning (was the same refusal)."""
    df, des = _outlier_design()
    kw = dict(chains=2, draws=200, warmup=200, progress=False, allow_unconverged=True,
              random_state=3, m=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = FBS("y", ["x"], target_lipschitz=1e3, **kw).fit(des)
    assert a.c_ is None and np.all(a.alpha_ == 1.0)
    assert list(a.tuning_["role"]) == ["final"]
    assert a.delta_alpha_ == pytest.approx(float(a.delta_alpha_i_.max())) and a.delta_alpha_ <= 1e3
    rec_a = a.release().privacy
    # every alpha_i = 1: the record says no privacy protection and states no bound and no
    # epsilon (issue 35: it must not claim a guarantee the unweighted posterior does not have)
    assert rec_a.delta_alpha is None and rec_a.epsilon is None
    assert rec_a.guarantee_class == "none" and not rec_a.differentially_private
    assert rec_a.guarantee.startswith("not differentially private")
    assert "no privacy protection" in rec_a.guarantee_text
    assert rec_a.facts["no_weighting"] == "target_above_unweighted_bound"
    assert [e["charge"] for e in rec_a.ledger if e.get("step") == "release"] == ["none"]
    # (its public record is compared with the tuned release's below)
    T = float(a.delta_unweighted_)
    srt = np.sort(a.delta_)
    assert srt[-1] > 3 * srt[-2]                    # the outlier sets the unweighted bound
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b = FBS("y", ["x"], target_lipschitz=T, **kw).fit(des)
    assert b.delta_unweighted_ == pytest.approx(T)  # same seed: the same unweighted fit
    assert b.delta_alpha_ <= T and b.bound_spread_["ceiling"] is True
    assert list(b.tuning_["role"]) == ["tuning", "final"]
    c_max = TuningPath(b.delta_, 0.0, T).c_max
    assert b.c_ == pytest.approx(c_max) and b.tuning_["c"].iloc[-1] == pytest.approx(c_max)
    np.testing.assert_array_equal(b.alpha_, lipschitz_weights(None, c=b.c_, g=0.0,
                                                               bounds=b.delta_))
    assert b.alpha_[np.argmax(b.delta_)] == 0.0
    # the reported bound is the final fit's (the tuning fit's differs: fresh draws)
    assert b.delta_alpha_ == pytest.approx(b.tuning_["delta_alpha"].iloc[-1], rel=1e-12)
    assert b.delta_alpha_ != b.tuning_["delta_alpha"].iloc[0]
    assert any("below the band" in str(w.message) for w in caught)
    rec = b.release().privacy
    # the public target, never the achieved bound (confidential, at most the target); the
    # account is 2 * target per released draw (m = 2 new draws)
    assert rec.delta_alpha == T and b.delta_alpha_ <= rec.delta_alpha
    assert rec.epsilon == pytest.approx(2 * T * 2, rel=1e-12)
    assert rec.guarantee_class == "asymptotic database-local (epsilon, delta)-pDP"
    assert "no risk weighting is applied (alpha_i = 1 for every record)" in rec.guarantee_text
    assert "tuned on the confidential" in rec.guarantee_text
    # which branch was taken is a bit of the confidential data: both records declare it as
    # published without budget, in the same words
    decided = [[e for e in r_.published_without_budget
                if e["item"].startswith("whether risk weighting was applied")]
               for r_ in (rec_a, rec)]
    assert len(decided[0]) == 1 and decided[0] == decided[1]
