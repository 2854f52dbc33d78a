"""exact_categorical: the exact softmax sampler behind the grid samplers (integers only)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from surveysynth.privacy.exact_sampling import exact_categorical, public_grid

LW = np.array([0.0, np.log(3.0), -1.0, -np.inf, -800.0])
P = np.exp(LW - LW.max()) / np.exp(LW - LW.max()).sum()


class _Bits:
    """A stand-in generator returning the same integer draw every time (the ends of [0, 1))."""

    def __init__(self, top: bool) -> None:
        self.top = top

    def integers(self, low, high, dtype=None):
        return high - 1 if self.top else low


@pytest.mark.parametrize("fast", [True, False])
def test_law_is_the_softmax(fast):
    rng = np.random.default_rng(5)
    n = 4000 if fast else 1500
    obs = np.bincount([exact_categorical(LW, rng, _fast=fast) for _ in range(n)], minlength=5)
    assert obs[3] == 0  # weight 0 is never drawn
    assert stats.chisquare(obs[:3], P[:3] / P[:3].sum() * obs[:3].sum()).pvalue > 1e-3


def test_tiny_weights_stay_possible_and_float_inverse_cdf_would_lose_them():
    # U -> 1: the last positive weight, e^-800 relative (0 in float64), is drawn
    assert exact_categorical(LW, _Bits(top=True)) == 4
    assert exact_categorical(LW, _Bits(top=False)) == 0
    # the wrong version: a float64 inverse CDF can never return index 4 (its weight underflows)
    w = np.exp(LW - LW.max())
    cdf = np.cumsum(w)
    assert np.searchsorted(cdf, (1 - 2.0**-53) * cdf[-1], side="right") < 4


def test_agrees_with_opendp_noisy_max_gumbel():
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)
    m = dp.m.make_noisy_max(*space, dp.zero_concentrated_divergence(), scale=1.0)
    lw = [0.0, float(np.log(3.0)), -1.0]
    ours = np.bincount([exact_categorical(lw, np.random.default_rng(k)) for k in range(3000)], minlength=3)
    theirs = np.bincount([m(lw) for _ in range(3000)], minlength=3)
    assert stats.chi2_contingency(np.vstack([ours, theirs])).pvalue > 1e-3


def test_grid_is_fixed_and_errors_are_named():
    g = public_grid(0.0, 10.0, 4)
    assert g.size == 17 and g[0] == 0.0 and g[-1] == 10.0 and not g.flags.writeable
    assert public_grid(0.0, 10.0, 4) is g  # the same public doubles every call
    with pytest.raises(ValueError, match="grid_bits"):
        public_grid(0.0, 1.0, 40)
    with pytest.raises(ValueError, match="finite"):
        public_grid(0.0, np.inf, 4)
    with pytest.raises(ValueError, match="-inf"):
        exact_categorical([-np.inf, -np.inf], np.random.default_rng(0))
    with pytest.raises(ValueError, match="NaN"):
        exact_categorical([0.0, np.nan], np.random.default_rng(0))
