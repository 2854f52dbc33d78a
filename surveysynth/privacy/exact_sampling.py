"""Exact sampling for the package's pure-DP samplers: integers from the generator, never a double
drawn "somewhere in a data-defined interval".

Why (Mironov 2012, "On significance of the least significant bits for differential privacy"):
a sampler that returns ``lo + (hi - lo) * u`` for a confidential ``lo``/``hi`` (or an inverse CDF
on a data-defined interval) can only produce the doubles that this arithmetic reaches, and that
set depends on the data; an output that one database can produce and its neighbour cannot
reveals which database was used, whatever the density says. The exact JointExp and KNG samplers
therefore draw onto a public grid (:func:`public_grid`: a fixed, data-independent set of doubles)
and choose among grid points with :func:`exact_categorical`, which returns index ``i`` with
probability exactly ``exp(logw[i]) / sum_k exp(logw[k])`` for the given doubles ``logw`` (read as
exact binary rationals), including outcomes whose probability is far below 2^-53, which a
floating-point inverse CDF or a Gumbel-max over doubles would never produce. Every grid point
with a finite log weight therefore has positive probability under every database.

How: inverse CDF at a uniform U whose bits are drawn lazily from the numpy generator (integers
only). The fast path decides with 53 bits of U and the float64 cumulative weights when U * total
lies farther than a rigorous error bound from every cumulative weight (a chance of about
n 2^-40 of not deciding); otherwise it recomputes the cumulative weights in decimal arithmetic
(:mod:`decimal`: exp and sums correctly rounded at a chosen precision, so every error is bounded)
and draws more bits of U until the index is certain. Both paths return the index the exact
inverse CDF gives at the same U, so the law is exact. OpenDP's ``make_noisy_max`` with a
zero-concentrated-divergence measure is also an exact sampler of this law (Gumbel noise sampled
to arbitrary precision) and the tests check the two agree, but OpenDP's generator cannot be
seeded, and the package's convention is that a seed reproduces a run (docs/privacy.md, "Exact
sampling on a public grid").
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["exact_categorical", "public_grid", "FAST_SLACK"]

#: Relative error allowed for one float64 weight exp(logw - max) in the fast path: 2^-40, about
#: 4000 ulp (libm and numpy's exp are within a few ulp; the subtraction's rounding is added
#: separately, proportional to |logw - max|).
FAST_SLACK = 2.0 ** -40


@lru_cache(maxsize=16)
def _grid(lo: float, hi: float, bits: int) -> np.ndarray:
    k = np.arange(2 ** bits + 1, dtype=np.float64) / float(2 ** bits)
    g = lo + (hi - lo) * k
    g.setflags(write=False)
    return g


def public_grid(lower: float, upper: float, bits: int) -> np.ndarray:
    """The public grid ``lower + (upper - lower) * (k / 2**bits)``, k = 0..2**bits, as doubles.

    A fixed function of public numbers only: the same doubles for every database. ``k / 2**bits``
    is exact, so the map from the integer k to the double is one multiplication and one addition
    in IEEE arithmetic (non-decreasing in k).
    """
    lo, hi = float(lower), float(upper)
    bits = int(bits)
    if not (1 <= bits <= 26):
        raise ValueError(f"grid_bits={bits}: give an integer in 1..26 (2^bits grid steps).")
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"grid bounds ({lo}, {hi}) must be finite public numbers with lower < upper.")
    return _grid(lo, hi, bits)  # read-only, cached: the same public doubles every call


def _decide(cum_lo: Any, cum_hi: Any, t_lo: Any, t_hi: Any, last: int) -> int | None:
    """The index i with C_{i-1} <= T < C_i for every T in [t_lo, t_hi] and all cumulative sums C
    within [cum_lo, cum_hi] (elementwise), or None if the bounds do not decide it. ``last`` is
    the last index of positive weight: T = U C_last < C_last always (U < 1), so for it only the
    lower condition is needed."""
    i = int(np.searchsorted(cum_hi, t_lo, side="right"))  # first i whose C_i may exceed t_lo
    if i >= last:
        return last if (last == 0 or cum_hi[last - 1] <= t_lo) else None
    return i if cum_lo[i] > t_hi else None


def _slow(logw: np.ndarray, a: int, bits: int, rng: Any) -> int:
    """Exact inverse CDF in decimal arithmetic, drawing more bits of U until decided."""
    live = np.flatnonzero(np.isfinite(logw))
    top = max(logw[live])
    with localcontext() as ctx:
        ctx.prec = 2000  # a difference of two doubles has < 1100 significant digits: exact
        xs = [Decimal(float(v)) - Decimal(float(top)) for v in logw[live]]
    mag = max(1, max(int(abs(x)) for x in xs))
    prec = 60
    while True:
        with localcontext() as ctx:
            ctx.prec = prec + len(str(mag)) + 20
            w = [x.exp() for x in xs]  # correctly rounded: rel. error <= 10^(1 - prec')
            cum = []
            s = Decimal(0)
            for v in w:
                s += v
                cum.append(s)
            ulp = Decimal(10) ** (-prec)  # generous bound on each cumulative sum's rel. error
            err = (len(w) + 2) * ulp * (mag + 2) * cum[-1]
            scale = Decimal(2) ** (-bits)
            total_lo, total_hi = cum[-1] - err, cum[-1] + err
            # (the products round at ctx.prec digits; widen by one ulp of the bound's precision)
            t_lo = a * scale * total_lo * (1 - ulp)
            t_hi = (a + 1) * scale * total_hi * (1 + ulp)
            k = _decide(np.array([c - err for c in cum], dtype=object),
                        np.array([c + err for c in cum], dtype=object), t_lo, t_hi, len(cum) - 1)
            if k is not None:
                return int(live[k])
        a = (a << 32) | int(rng.integers(0, 2 ** 32, dtype=np.uint64))
        bits += 32
        prec += 12


def exact_categorical(logw: Any, rng: Any, *, _fast: bool = True) -> int:
    """Index i drawn with probability exactly exp(logw[i]) / sum_k exp(logw[k]).

    ``logw``: finite doubles or -inf (weight 0); at least one finite. ``rng``: a numpy Generator
    (only ``integers`` is called). The doubles are taken as exact numbers: the law is the
    softmax of the given values with no rounding, however small a probability is.
    ``_fast=False`` forces the decimal path (tests).
    """
    lw = np.asarray(logw, dtype=np.float64).ravel()
    if np.isnan(lw).any() or np.isposinf(lw).any():
        raise ValueError("exact_categorical: log weights must be finite or -inf (no NaN, no +inf).")
    finite = np.isfinite(lw)
    if not finite.any():
        raise ValueError("exact_categorical: every weight is zero (all log weights are -inf).")
    if finite.sum() == 1:
        return int(np.flatnonzero(finite)[0])
    a = int(rng.integers(0, 2 ** 53, dtype=np.uint64))  # U in [a, a + 1) / 2^53
    if _fast:
        top = float(lw[finite].max())
        d = lw - top
        w = np.exp(d)  # relative error <= FAST_SLACK + 2^-53 |d| (the subtraction's rounding)
        rel = FAST_SLACK + 2.0 ** -52 * np.abs(np.where(finite, d, 0.0))
        n = lw.size
        cum = np.cumsum(w)
        # |cum_i - C_i| <= sum_k<=i rel_k w_k + n 2^-53 cum_i (summation), plus underflow slack
        err = (float(rel.max()) + (n + 2) * 2.0 ** -52) * float(cum[-1]) * 1.01 + n * 2.0 ** -1070
        total = float(cum[-1])
        t_lo = (a * 2.0 ** -53) * (total - err) * (1 - 2.0 ** -50)
        t_hi = ((a + 1) * 2.0 ** -53) * (total + err) * (1 + 2.0 ** -50)
        last = int(np.flatnonzero(finite)[-1])
        k = _decide(cum - err, cum + err, t_lo, t_hi, last)
        if k is not None:
            if not finite[k]:  # impossible: a zero weight adds an empty cell (guard)
                raise AssertionError("exact_categorical chose a zero-weight index")
            return k
    return _slow(lw, a, 53, rng)
