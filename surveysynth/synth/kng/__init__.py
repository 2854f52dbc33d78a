"""The K-norm gradient mechanism for regression quantiles (seed 004; METHODS.md section 12).

* :mod:`.mechanism` — the KNG density, gradient, sensitivity, clipping, non-private baseline;
* :mod:`.mcmc` — adaptive Metropolis draws (any moving coefficients);
* :mod:`.exact` — exact draws when only the intercept moves;
* :mod:`.truncated_gauss` — the Gaussian-mass numerics behind the exact sampler.

The synthesizer built on it is :class:`surveysynth.synth.quantile_synthesizer.QuantileSynthesizer`.
"""

from __future__ import annotations

from .exact import (
    InterceptPieces,
    kng_intercept_draws,
    kng_intercept_pieces,
    kng_sample_intercept_exact,
)
from .mcmc import kng_sample
from .mechanism import (
    PENALTY_C,
    KNGResult,
    check_loss,
    clip_predictors,
    exact_quantile_regression,
    kng_log_density,
    kng_sensitivity,
    quantile_gradient,
)

__all__ = [
    "PENALTY_C",
    "check_loss",
    "clip_predictors",
    "kng_sensitivity",
    "quantile_gradient",
    "kng_log_density",
    "kng_sample",
    "KNGResult",
    "exact_quantile_regression",
    "kng_sample_intercept_exact",
    "kng_intercept_pieces",
    "kng_intercept_draws",
    "InterceptPieces",
]
