"""Additive noise from a vetted sampler (OpenDP), never from numpy's floating-point Laplace.

numpy's ``Generator.laplace`` draws a double by inverse transform and the release adds it to the
true value in floating point: the set of reachable outputs depends on the true value, so the
low-order bits of a noisy statistic can reveal it (Mironov 2012, "On significance of the least
significant bits for differential privacy"). OpenDP's ``make_laplace`` over floats samples the
discrete Laplace distribution exactly on a grid of spacing 2^k (k chosen from the scale) and
rounds the true value to that grid first, so the output carries no trace of the input's
low-order bits (OpenDP proof document for ``make_laplace``; Canonne, Kamath & Steinke 2020).

OpenDP draws from its own cryptographically secure generator, seeded from the operating
system: its noise cannot be seeded or replayed, by anyone. :func:`add_laplace` is the one
place in the package that draws Laplace noise; :data:`SAMPLER` names it, and the guarantee
text of every release that uses it quotes that string.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import version
from typing import Any

import numpy as np

SAMPLER = (f"OpenDP {version('opendp')} make_laplace (floating-point-safe sampler: exact "
           "discrete Laplace on a 2^k grid, OpenDP's CSPRNG)")


@lru_cache(maxsize=64)
def _measurement(scale: float) -> Any:
    """OpenDP's vector Laplace measurement at ``scale`` (built once per scale)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float)
    return dp.m.make_laplace(*space, scale=scale)


def _check_scale(scale: float) -> float:
    if isinstance(scale, (bool, np.bool_)) or not np.isfinite(scale) or scale < 0:
        raise ValueError(f"scale={scale!r}: the Laplace scale must be a finite number >= 0.")
    return float(scale)


def add_laplace(values: np.ndarray, scale: float) -> np.ndarray:
    """``values`` + Laplace(0, ``scale``) noise, elementwise, drawn by OpenDP (see :data:`SAMPLER`).

    Vectorized: one OpenDP call per array. ``values`` go through the measurement itself (not
    noise added afterwards in numpy), so the output is rounded to OpenDP's grid and does not
    leak the low-order bits of the true values. NaN cells (a mean with no records) stay NaN and
    get no draw; infinite values are refused. ``scale = 0`` returns the values unchanged
    (a sensitivity of 0). The caller's array is not modified.
    """
    scale = _check_scale(scale)
    x = np.asarray(values, dtype=float)
    if np.isinf(x).any():
        bad = np.flatnonzero(np.isinf(x.ravel()))[:5].tolist()
        raise ValueError(
            f"add_laplace(values=...): infinite value(s) at flat position(s) {bad}; a released "
            "statistic must be finite (NaN marks an empty cell and is kept as NaN)."
        )
    out = x.copy()
    ok = ~np.isnan(x)
    if ok.any():
        out[ok] = np.asarray(_measurement(scale)(x[ok].ravel()), dtype=float)
    return out


def laplace_epsilon(sensitivity: float, scale: float) -> float:
    """Epsilon of one release at ``scale`` for a change of ``sensitivity``, from OpenDP's own map.

    Lets the budget arithmetic be checked against OpenDP's privacy map (``sensitivity / scale``
    for the Laplace mechanism).
    """
    scale = _check_scale(scale)
    if scale == 0:
        return 0.0 if sensitivity == 0 else float("inf")
    return float(_measurement(scale).map(float(sensitivity)))
