"""Simulated populations from the source papers and loaders for R's example data."""

from __future__ import annotations

from .._lazy import lazy_getattr

_EXPORTS = {
    "load_api": ".api",
    "sdr_population": ".sdr",
    "sdr_sample": ".sdr",
    "nb_mixture": ".risk",
    "ce_like": ".risk",
    "kng_simulation": ".kng",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
