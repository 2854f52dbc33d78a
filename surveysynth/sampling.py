"""Inclusion probabilities and systematic PPS selection (METHODS section 3).

Native, vectorized counterparts of R ``sampling``'s ``inclusionprobabilities`` and
``UPsystematic``, with strata handled in one pass (no Python loop over strata or units).
They are used to draw the SDR-like samples of seed 001 Section 3.1 and in Monte Carlo studies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from .variance.replicate_weights import as_generator

__all__ = [
    "check_pik",
    "inclusion_probabilities",
    "pps_systematic",
    "proportional_allocation",
    "stratum_codes",
    "stratsample",
]

_EPS = 1e-6  # R UPsystematic: units with pik <= eps or >= 1 - eps are fixed, not drawn


def _first_rows(mask: np.ndarray, k: int = 5) -> list[int]:
    return np.flatnonzero(mask)[:k].tolist()


def stratum_codes(strata: Any, n_units: int, what: str) -> tuple[np.ndarray, pd.Index]:
    """Integer codes 0..H-1 per unit and the sorted stratum labels, validated (``what`` names
    the caller in errors); shared with r_bridge's R sampling functions."""
    s = pd.Series(np.asarray(strata) if not isinstance(strata, pd.Series) else strata.to_numpy())
    if len(s) != n_units:
        raise ValueError(
            f"{what}: strata has length {len(s)} but there are {n_units} units; "
            "pass one stratum label per unit."
        )
    if s.isna().any():
        raise ValueError(
            f"{what}: strata has missing labels at rows {_first_rows(s.isna().to_numpy())}; "
            "give every unit a stratum."
        )
    codes, labels = pd.factorize(s, sort=True)
    return codes.astype(np.int64), pd.Index(labels)


def check_pik(pik: Any) -> np.ndarray:
    """Inclusion probabilities as a 1-D float array, or a clear error (shared with r_bridge)."""
    p = np.asarray(pik, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"pik must be one-dimensional, got shape {p.shape}.")
    bad = ~np.isfinite(p) | (p < 0) | (p > 1 + 1e-12)
    if bad.any():
        raise ValueError(
            f"pik must be probabilities in [0, 1]; rows {_first_rows(bad)} are not "
            "(compute them with inclusion_probabilities)."
        )
    return p


def proportional_allocation(strata: Any, n: int) -> pd.Series:
    """Allocate a total sample size ``n`` to strata proportionally to their sizes.

    Decision: rounding by the largest-remainder (Hamilton) method, so the stratum sizes add up
    to ``n`` exactly; ties in the remainders go to the earlier stratum label.
    Returns a Series indexed by stratum label.
    """
    s = pd.Series(np.asarray(strata))
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}.")
    sizes = s.value_counts().sort_index()
    if n > sizes.sum():
        raise ValueError(f"n = {n} exceeds the number of units ({int(sizes.sum())}).")
    quota = n * sizes.to_numpy(dtype=float) / sizes.sum()
    base = np.floor(quota).astype(np.int64)
    left = int(n - base.sum())
    order = np.argsort(-(quota - base), kind="stable")
    base[order[:left]] += 1
    return pd.Series(base, index=sizes.index, name="n")


def inclusion_probabilities(size: Any, n: Any, strata: Any = None) -> np.ndarray:
    """First-order inclusion probabilities proportional to ``size`` (R ``inclusionprobabilities``).

    pi_i = n a_i / sum a, then units with pi >= 1 are set to 1 (certainty units) and the rest
    are rescaled to n minus the number of certainties, repeatedly, until no pi exceeds 1.
    With ``strata`` (one label per unit), ``n`` is a mapping (dict or Series) from stratum label
    to the stratum sample size and the computation runs within every stratum at once.

    Differences from R, on purpose: negative or missing sizes raise ``ValueError`` (R shifts
    negatives to zero with a warning); zero sizes give pi = 0 as in R.

    Example (METHODS section 3): ``inclusion_probabilities(np.arange(1, 21), 12)`` gives i/17
    for i <= 16 and 1 for i = 17..20.
    """
    a = np.asarray(size, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"size must be one-dimensional, got shape {a.shape}.")
    bad = ~np.isfinite(a)
    if bad.any():
        raise ValueError(
            f"size has missing or infinite values at rows {_first_rows(bad)}; "
            "remove those units or give them a size."
        )
    if (a < 0).any():
        raise ValueError(
            f"size has negative values at rows {_first_rows(a < 0)}; sizes must be >= 0."
        )
    N = a.size
    if strata is None:
        if isinstance(n, Mapping) or isinstance(n, pd.Series):
            raise ValueError("n is a per-stratum mapping but strata is None; pass strata=.")
        codes = np.zeros(N, dtype=np.int64)
        n_h = np.array([float(n)])
    else:
        codes, labels = stratum_codes(strata, N, "inclusion_probabilities")
        if not isinstance(n, (Mapping, pd.Series)):
            raise ValueError(
                "with strata, n must be a dict or Series mapping each stratum label to its "
                "sample size (see proportional_allocation)."
            )
        n_map = pd.Series(n)
        missing = [lab for lab in labels if lab not in n_map.index]
        if missing:
            raise ValueError(
                f"n has no sample size for strata {missing[:5]}; give one for every stratum."
            )
        n_h = n_map.reindex(labels).to_numpy(dtype=float)
    H = n_h.size
    units_h = np.bincount(codes, minlength=H)
    positive_h = np.bincount(codes, weights=(a > 0).astype(float), minlength=H)
    if (n_h < 0).any() or (n_h > positive_h).any():
        h = int(np.flatnonzero((n_h < 0) | (n_h > positive_h))[0])
        raise ValueError(
            f"sample size {n_h[h]:g} is not between 0 and the {int(positive_h[h])} units with "
            f"positive size in stratum {h if strata is None else labels[h]!r} "
            f"({int(units_h[h])} units)."
        )
    pik = np.zeros(N)
    cert = np.zeros(N, dtype=bool)
    # at most one certainty-fixing round per unit; typically 1-3 rounds
    for _ in range(N + 1):
        free = (~cert) & (a > 0)
        s_h = np.bincount(codes, weights=np.where(free, a, 0.0), minlength=H)
        k_h = np.bincount(codes, weights=cert.astype(float), minlength=H)
        scale = np.divide(n_h - k_h, s_h, out=np.zeros(H), where=s_h > 0)
        pik = np.where(cert, 1.0, np.where(free, a * scale[codes], 0.0))
        new = free & (pik >= 1.0)
        if not new.any():
            break
        cert |= new
    return pik


def pps_systematic(
    pik: Any,
    strata: Any = None,
    seed: int | np.random.Generator | None = None,
    shuffle: bool = False,
) -> np.ndarray:
    """Systematic PPS selection with inclusion probabilities ``pik``; returns a boolean mask.

    Within each stratum (all units if ``strata`` is None), in the given order, a single uniform
    start u is drawn and unit k is selected when the sequence (cum_{k-1} - u) mod 1 wraps, as in
    R ``sampling::UPsystematic``; units with pik <= 1e-6 or >= 1 - 1e-6 are fixed at 0 / 1.
    When the probabilities of a stratum add up to an integer n_h, exactly n_h units are selected
    and unit i is selected with probability pik_i. ``shuffle=True`` randomises the order within
    strata first (randomised systematic sampling: pairwise inclusion probabilities all positive).
    """
    p = check_pik(pik)
    rng = as_generator(seed)
    N = p.size
    if strata is None:
        codes = np.zeros(N, dtype=np.int64)
    else:
        codes, _ = stratum_codes(strata, N, "pps_systematic")
    H = int(codes.max()) + 1 if N else 0
    u = rng.uniform(size=H)
    key = rng.permutation(N) if shuffle else np.arange(N)
    order = np.lexsort((key, codes))  # by stratum, then by given (or random) order
    cs = codes[order]
    ps = p[order]
    drawn = (ps > _EPS) & (ps < 1 - _EPS)
    q = np.where(drawn, ps, 0.0)
    cum = np.cumsum(q)
    start = np.r_[0, np.flatnonzero(np.diff(cs)) + 1]
    offset = np.repeat(cum[start] - q[start], np.diff(np.r_[start, N]))
    cum_within = cum - offset  # cumulative sum within stratum, ending at n_h
    # snap the stratum total to an integer when it is one up to rounding error
    tot = np.bincount(cs, weights=q, minlength=H)
    rounded = np.round(tot)
    snap = np.where(np.abs(tot - rounded) < 1e-9, rounded, tot)
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = np.where(tot > 0, snap / tot, 1.0)
    cum_within = cum_within * factor[cs]
    prev = cum_within - q * factor[cs]
    # selected when an integer-shifted point u + j falls in (prev, cum]
    hit = np.floor(cum_within - u[cs]) - np.floor(prev - u[cs]) >= 1
    sel_sorted = np.where(drawn, hit, ps >= 1 - _EPS)
    out = np.empty(N, dtype=bool)
    out[order] = sel_sorted
    return out


def stratsample(strata: Any, counts: Mapping[Any, int] | pd.Series,
                seed: int | np.random.Generator | None = None) -> np.ndarray:
    """A stratified simple random sample without replacement (R ``stratsample``): for each
    stratum named in ``counts`` (in its order), ``counts[h]`` distinct units drawn at random
    among the units whose ``strata`` label is ``h``. Returns their positions (0-based; R's
    are 1-based), stratum by stratum as R returns them. Strata not named are not sampled, as
    in R. Randomness from OS entropy unless ``seed`` is given."""
    labels = pd.Series(strata).astype(str).to_numpy() if not isinstance(strata, pd.Series) \
        else strata.astype(str).to_numpy()
    if isinstance(counts, pd.Series):
        counts = counts.to_dict()
    if not isinstance(counts, Mapping) or not counts:
        raise ValueError("stratsample: counts must be a mapping (or Series) stratum -> sample "
                         "size, as R's named vector, e.g. {'E': 20, 'H': 10}.")
    rng = as_generator(seed)
    out = []
    for h, k in counts.items():
        members = np.flatnonzero(labels == str(h))
        k_int = int(k)
        if k_int != k or k_int < 0:
            raise ValueError(f"stratsample: count {k!r} for stratum {h!r} must be a "
                             "non-negative integer.")
        if k_int > members.size:
            raise ValueError(f"stratsample: stratum {h!r} has {members.size} units, fewer than "
                             f"the {k_int} asked (R: 'cannot take a sample larger than the "
                             "population'). Fix: lower its count or check the label.")
        out.append(rng.choice(members, size=k_int, replace=False))
    return np.concatenate(out).astype(np.int64)

