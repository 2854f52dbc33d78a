"""Cheaper exact fits of the sequential synthesizer's counts (issue 39 items 2 and 4;
docs/sequential.md "Small files").

* seq_negbin.stan and seq_negbin_re.stan compute every per-row term of the weighted likelihood on
  the DISTINCT predictor rows (the pmf's p^phi cancelled against the truncation normaliser's,
  the normaliser's terms one matrix product): the model block must still be
  sum_i alpha_i log p_i of the numpy density that the per-record bounds use, at any parameter,
  including the plateau (mu far above the bound), huge and tiny phi.
  Mutants (data, same compiled program): a row map that mixes distinct rows up; counts in place
  of summed alphas.
* Truncated counts sample with adapt delta 0.95 unless the user says otherwise; the step's fits
  are given it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from surveysynth.design import SurveyDesign
from surveysynth.synth import _seq_models as sm  # noqa: PLC2701 - the densities under test
from surveysynth.synth import fitting as fitmod
from surveysynth.synth import sequential as seqmod
from surveysynth.synth._stan import load_program  # noqa: PLC2701

#: (at, bt (2 predictors), phi): ordinary, the plateau (mu ~ e^12 x the bound), huge and tiny phi
POINTS = [(0.3, (0.2, -0.4), 2.0), (12.0, (0.5, 0.1), 1.5), (1.0, (-0.3, 0.2), 1e6),
          (-1.0, (0.8, 0.0), 0.05), (2.5, (-1.0, 1.0), 40.0)]


def _build(code, data):
    import stan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return stan.build(code, data=data, random_seed=1)


def _case(re: bool, hi: float | None, seed: int = 3):
    """Records with discrete predictors (few distinct rows, many records per row), collapsed to
    the distinct (x, y[, PSU]) patterns as Sequential does."""
    rng = np.random.default_rng(seed)
    n, J = 200, 7
    X = np.c_[rng.integers(0, 2, n), rng.integers(0, 3, n) - 1.0].astype(float)
    if re:
        X = np.c_[X, rng.integers(0, J, n)]
    y = rng.integers(0, 9 if hi is None else int(hi) + 1, n)
    alpha = rng.uniform(0.05, 1.0, n)
    spec = {"hi": hi, "eta0": 0.7, **({"J": J} if re else {})}
    first, inv = sm.patterns(X, y)
    return X, y, alpha, spec, first, inv


@pytest.mark.parametrize(("re", "hi"), [(False, 12.0), (False, 100.0), (False, None),
                                        (True, 12.0), (True, None)],
                         ids=["truncated", "percent", "untruncated", "psu-truncated",
                              "psu-untruncated"])
def test_negbin_distinct_row_likelihood_is_the_per_record_density(re, hi):
    """sum_i alpha_i log p_i (numpy, betainc normaliser: the density of the bounds) equals the
    model block's weighted likelihood (log_prob at the summed alphas minus at alpha = 0, without
    the Jacobian) at every point of POINTS, to 1e-9 relative."""
    model = (sm.MODELS_RE if re else sm.MODELS)["negbin"]
    X, y, alpha, spec, first, inv = _case(re, hi)
    wsum = np.bincount(inv, weights=alpha)
    data = model.stan_data(y[first], X[first], wsum, spec, save_log_lik=False)
    assert data["nd"] < len(first) <= len(y)       # rows shared by several patterns
    code = load_program(model.program_for(spec))
    pf, p0 = _build(code, data), _build(code, dict(data, alpha=np.zeros(len(first))))
    # mutants: the distinct-row map rotated (each pattern's per-row terms taken from another
    # row), and counts in place of the summed alphas
    pm = _build(code, dict(data, xd=np.roll(data["xd"], 1)))
    pc = _build(code, dict(data, alpha=np.bincount(inv).astype(float)))
    J = spec.get("J", 0)
    rng = np.random.default_rng(5)
    miss_map, miss_count = [], []
    for at, bt, phi in POINTS:
        pars = {"at": at, "bt": list(bt), "phi": phi}
        draws = {"a": np.array([at]), "b": np.array([bt]), "phi": np.array([phi])}
        if re:
            su, z = 0.6, rng.normal(size=J)
            pars.update(sigma_u=su, z_u=z.tolist())
            draws.update(sigma_u=np.array([su]), z_u=z[None, :])
        theta = pf.unconstrain_pars(pars)
        ll = model.loglik(draws, slice(None), y.astype(float), X, spec)[0]
        ref = float(alpha @ ll)
        assert np.isfinite(ref)
        got = pf.log_prob(theta, adjust_transform=False) - p0.log_prob(theta,
                                                                      adjust_transform=False)
        assert got == pytest.approx(ref, rel=1e-9, abs=1e-7), (at, bt, phi)
        miss_map.append(abs(pm.log_prob(theta, adjust_transform=False)
                            - pf.log_prob(theta, adjust_transform=False)))
        miss_count.append(abs(pc.log_prob(theta, adjust_transform=False)
                              - pf.log_prob(theta, adjust_transform=False)))
    # each mutant moves the weighted likelihood far beyond the 1e-9 tolerance above
    assert max(miss_map) > 1e-3 and max(miss_count) > 1e-3


def test_truncated_counts_default_to_adapt_delta_0_95_and_the_user_overrides():
    nb, nbre = sm.MODELS["negbin"], sm.MODELS_RE["negbin"]
    assert sm.sampler_kwargs(nb, {"hi": 100.0, "eta0": 0.0}, None) == {"delta": 0.95}
    assert sm.sampler_kwargs(nbre, {"hi": 5.0, "eta0": 0.0, "J": 3}, {}) == {"delta": 0.95}
    assert sm.sampler_kwargs(nb, {"hi": None, "eta0": 0.0}, None) == {}
    assert sm.sampler_kwargs(nb, {"hi": 9.0, "eta0": 0.0},
                             {"delta": 0.9, "max_depth": 8}) == {"delta": 0.9, "max_depth": 8}
    for fam in ("normal", "logistic", "categorical", "ordinal"):
        assert sm.sampler_kwargs(sm.MODELS[fam], {"hi": 1.0, "lo": 0.0}, None) == {}


class _Stop(Exception):
    pass


def test_a_truncated_count_steps_fits_get_delta_0_95(monkeypatch):
    """What reaches Stan: a truncated count's unweighted fit runs (real Stan, 1 chain x 10
    draws) with delta 0.95; a binary's without; the user's stan_kwargs win. The engine's Stan
    call is wrapped, not replaced: the wrapper records the arguments, runs the real sampler
    with them, then stops the release after that first fit."""
    rng = np.random.default_rng(1)
    n = 60
    df = pd.DataFrame({"k": rng.integers(0, 10, n), "b": rng.integers(0, 2, n).astype(bool),
                       "w": rng.uniform(1, 3, n)})
    seen = []
    real_run_stan = fitmod.run_stan

    def capture(program, data, **kw):
        seen.append(kw)
        res = real_run_stan(program, data, **kw)      # the real sampler, with these arguments
        assert res.draws                              # it sampled
        raise _Stop

    monkeypatch.setattr(fitmod, "run_stan", capture)   # the one engine's Stan call
    for var, user, want in [({"name": "k", "type": "count", "bounds": (0, 9)}, None, 0.95),
                            ({"name": "k", "type": "count", "bounds": (0, 9)}, {"delta": 0.85},
                             0.85),
                            ({"name": "b", "type": "binary"}, None, None)]:
        syn = seqmod.Sequential(variables=[var], m=1, target_epsilon=10.0, chains=1,
                                draws=10, warmup=10, random_state=1, progress=False,
                                stan_kwargs=user)
        with pytest.raises(_Stop):
            syn.fit(SurveyDesign(df, weights="w"))
        assert seen[-1].get("delta") == want


def test_a_wild_untruncated_count_draw_is_a_clear_error_not_numpys():
    """A posterior draw with means beyond any count (short chains, an unbounded count) used to
    surface as numpy's "n too large or p too small"; the message now names the fix."""
    _negbin_draw = sm._negbin_draw  # noqa: SLF001 - under test

    rng = np.random.default_rng(1)
    ok = _negbin_draw(np.array([3.0, 40.0]), 2.0, {"hi": None}, rng)
    assert ok.dtype == np.int64 and (ok >= 0).all()
    with pytest.raises(ValueError, match=r"upper bound.*records \[1\]"):
        _negbin_draw(np.array([3.0, 1e24]), 2.0, {"hi": None}, rng)
