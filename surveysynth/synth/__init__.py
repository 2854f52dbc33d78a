"""Synthesizers: each consumes a SurveyDesign (or DataFrame) and emits a SyntheticRelease."""

from __future__ import annotations

from .._lazy import lazy_getattr

_EXPORTS = {
    "FBS": ".pseudo_posterior",
    "FBP": ".pseudo_posterior",
    "PBP": ".pseudo_posterior",
    "MixtureSynthesizer": ".mixture",
    "NBSynthesizer": ".negbin",
    "QuantileSynthesizer": ".quantile_synthesizer",
    "TargetUnreachableError": ".pseudo_posterior",
    "Sequential": ".sequential",
    "ConvergenceWarning": "._stan",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
