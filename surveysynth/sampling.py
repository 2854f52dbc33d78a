"""Inclusion probabilities, PPS selection (systematic, Brewer, Sampford, Poisson), sample size
and stratum allocation (METHODS section 3; issue 42).

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
    "pps_brewer",
    "pps_poisson",
    "pps_sampford",
    "pps_systematic",
    "proportional_allocation",
    "sample_size_mean",
    "sample_size_proportion",
    "sampford_joint_probabilities",
    "strata_allocation",
    "stratsample",
    "stratum_codes",
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


# --- unequal-probability designs beyond systematic (R sampling's UPbrewer, UPsampford,
# UPpoisson, UPsampfordpi2) and sample size / allocation (PracTools' nCont, nProp, strAlloc) ---


def _by_stratum(p: np.ndarray, strata: Any, what: str):
    """Index arrays of the units of each stratum (all units when ``strata`` is None)."""
    if strata is None:
        return [np.arange(p.size)]
    codes, _ = stratum_codes(strata, p.size, what)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, bounds)


def _integer_n(p: np.ndarray, what: str) -> int:
    tot = float(p.sum())
    n = int(round(tot))
    if abs(tot - n) > 1e-6:
        raise ValueError(
            f"{what}: the inclusion probabilities add up to {tot:.6g}, not a whole number; a "
            "fixed-size design needs sum(pik) = n in every stratum (use inclusion_probabilities)."
        )
    return n


def _fixed_size_selection(pik: Any, strata: Any, seed: Any, what: str, draw) -> np.ndarray:
    """A fixed-size PPS selection per stratum (a boolean mask): units with pik >= 1 - 1e-6 are
    taken, those with pik <= 1e-6 never, and ``draw(pik, n, rng)`` selects n = sum(pik) of the
    rest (R ``sampling``'s UP* functions fix the same units)."""
    p = check_pik(pik)
    rng = as_generator(seed)
    out = np.zeros(p.size, dtype=bool)
    for idx in _by_stratum(p, strata, what):
        ph = p[idx]
        fixed_in = ph >= 1 - _EPS
        drawn = (ph > _EPS) & ~fixed_in
        out[idx[fixed_in]] = True
        pb = ph[drawn]
        if pb.size:
            out[idx[drawn]] = draw(pb, _integer_n(pb, what), rng)
    return out


def pps_brewer(pik: Any, strata: Any = None,
               seed: int | np.random.Generator | None = None) -> np.ndarray:
    """Brewer's PPS selection without replacement (R ``sampling::UPbrewer``); a boolean mask.

    Draw-by-draw: at draw i (of n), unit k not yet chosen is drawn with probability
    proportional to pi_k (n - a - pi_k) / (n - a - pi_k (n - i + 1)), a = sum of pi over chosen
    units. Fixed size n = sum(pik) per stratum; inclusion probabilities exactly ``pik``; units
    with pik <= 1e-6 or >= 1 - 1e-6 are fixed at 0 / 1 as in R.
    """
    def draw(pb: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        sb = np.zeros(pb.size)
        for i in range(1, n + 1):
            a = np.sum(pb * sb)
            w = (1 - sb) * pb * ((n - a) - pb) / ((n - a) - pb * (n - i + 1))
            j = int(np.searchsorted(np.cumsum(w / w.sum()), rng.uniform(), side="right"))
            sb[min(j, pb.size - 1)] = 1
        return sb.astype(bool)

    return _fixed_size_selection(pik, strata, seed, "pps_brewer", draw)


def pps_sampford(pik: Any, strata: Any = None, seed: int | np.random.Generator | None = None,
                 max_iter: int = 500) -> np.ndarray:
    """Sampford's rejective PPS selection (R ``sampling::UPsampford``); a boolean mask.

    One unit drawn with probability pi_k / n and n - 1 with replacement with probability
    proportional to pi_k / (1 - pi_k); the draw is kept when all n units differ, else repeated
    (at most ``max_iter`` times, then an error as R). Inclusion probabilities exactly ``pik``,
    joint ones :func:`sampford_joint_probabilities`.
    """
    def draw(pb: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        y = pb / (1 - pb)
        y = y / y.sum()
        for _ in range(max_iter + 1):
            counts = rng.multinomial(1, pb / pb.sum()) + rng.multinomial(n - 1, y)
            if (counts <= 1).all():
                return counts.astype(bool)
        raise ValueError(
            f"pps_sampford: no sample without repeated units in {max_iter + 1} tries (large "
            "pik near 1 make Sampford's rejection slow); raise max_iter or use pps_brewer."
        )

    return _fixed_size_selection(pik, strata, seed, "pps_sampford", draw)


def pps_poisson(pik: Any, seed: int | np.random.Generator | None = None) -> np.ndarray:
    """Poisson sampling (R ``sampling::UPpoisson``): unit k selected independently with
    probability pi_k; a boolean mask (random sample size, expected sum(pik))."""
    p = check_pik(pik)
    rng = as_generator(seed)
    return rng.uniform(size=p.size) < p


def sampford_joint_probabilities(pik: Any) -> np.ndarray:
    """Joint inclusion probabilities of Sampford's design (R ``sampling::UPsampfordpi2``), an
    N x N matrix with ``pik`` on the diagonal (Asok-Sukhatme's recursion, as R)."""
    pk = check_pik(pik)
    n = _integer_n(pk, "sampford_joint_probabilities")
    if n < 2:
        raise ValueError("sampford_joint_probabilities: the sample size must be at least 2.")
    N = pk.size
    p = pk / n
    lam = p / (1 - n * p)
    Lm = np.zeros(n)
    Lm[0] = 1.0
    powsum = np.array([np.sum(lam ** r) for r in range(n + 1)])
    for i in range(2, n + 1):
        acc = 0.0
        for r in range(1, i):
            acc += (-1) ** (r - 1) * powsum[r] * Lm[i - r - 1]
        Lm[i - 1] = acc / (i - 1)
    if (Lm < 0).any():
        raise ValueError("sampford_joint_probabilities: not computable for these pik (as R).")
    t1 = (n + 1) - np.arange(1, n + 1)
    Kn = 1.0 / np.sum(t1 * Lm / float(n) ** t1)
    t2 = np.arange(1, n)
    t3 = n - t2
    out = np.zeros((N, N))
    iu, ju = np.triu_indices(N, 1)
    li, lj = lam[iu], lam[ju]
    L2 = np.zeros((iu.size, n - 1))
    L2[:, 0] = 1.0
    if n >= 3:
        L2[:, 1] = Lm[1] - (li + lj)
    for m in range(3, n):
        L2[:, m - 1] = Lm[m - 1] - (li + lj) * L2[:, m - 2] - li * lj * L2[:, m - 3]
    vals = Kn * li * lj * np.sum(
        ((t2[None, :] + 1) - n * (p[iu] + p[ju])[:, None]) * L2[:, t3 - 1]
        / float(n) ** (t2[None, :] - 1), axis=1)
    out[iu, ju] = vals
    out[ju, iu] = vals
    out[np.diag_indices(N)] = pk
    return out


def sample_size_mean(cv: float | None = None, variance: float | None = None,
                     S2: float | None = None, ybar: float | None = None, N: float = np.inf,
                     cv_pop: float | None = None) -> float:
    """Simple random sample size for a mean (PracTools ``nCont``): n = S2 / (V0 + S2/N) for a
    target variance ``variance`` (V0), or CV^2 / (CV0^2 + CV^2/N) for a target coefficient of
    variation ``cv`` (CV0), CV = sqrt(S2)/ybar or ``cv_pop``. Not rounded (round up to use)."""
    if (cv is None) == (variance is None):
        raise ValueError("sample_size_mean: give exactly one of cv= or variance=.")
    for name, v in (("N", N), ("S2", S2), ("cv", cv), ("variance", variance), ("cv_pop", cv_pop)):
        if v is not None and not v > 0:
            raise ValueError(f"sample_size_mean: {name} must be positive, got {v!r}.")
    if cv is not None:
        if S2 is not None and ybar is not None:
            cv_pop = float(np.sqrt(S2) / ybar)
        if cv_pop is None:
            raise ValueError("sample_size_mean: with cv=, give cv_pop= or both S2= and ybar=.")
        return float(cv_pop**2 / (cv**2 + cv_pop**2 / N))
    if S2 is None:
        raise ValueError("sample_size_mean: with variance=, give the unit variance S2=.")
    return float(S2 / (variance + S2 / N))


def sample_size_proportion(p: float, cv: float | None = None, variance: float | None = None,
                           N: float = np.inf) -> float:
    """Simple random sample size for a proportion p (PracTools ``nProp``), for a target CV
    (``cv``) or variance (``variance``) of the estimated proportion; not rounded."""
    if not 0 < p < 1:
        raise ValueError(f"sample_size_proportion: p must be in (0, 1), got {p!r}.")
    if (cv is None) == (variance is None):
        raise ValueError("sample_size_proportion: give exactly one of cv= or variance=.")
    for name, v in (("N", N), ("cv", cv), ("variance", variance)):
        if v is not None and not v > 0:
            raise ValueError(f"sample_size_proportion: {name} must be positive, got {v!r}.")
    a = 1.0 if np.isinf(N) else N / (N - 1)
    q = 1 - p
    if cv is not None:
        return float(a * q / p / (cv**2 + q / p / (N - 1)))
    return float(a * p * q / (variance + p * q / (N - 1)))


def _allocation_inputs(Nh: Any, Sh: Any, n: Any, alloc: str, ch: Any):
    """strata_allocation's inputs as arrays, validated (PracTools strAlloc's checks)."""
    if alloc not in ("prop", "neyman", "totcost", "totvar"):
        raise ValueError(f"strata_allocation: alloc={alloc!r}; use prop, neyman, totcost, totvar.")
    idx = Nh.index if isinstance(Nh, pd.Series) else None
    N_h = np.asarray(Nh, dtype=float)
    if not (N_h > 0).all():
        raise ValueError("strata_allocation: every stratum size Nh must be positive.")
    S_h = None if Sh is None else np.asarray(Sh, dtype=float)
    c_h = None if ch is None else np.asarray(ch, dtype=float)
    if alloc != "prop" and S_h is None:
        raise ValueError(f"strata_allocation: alloc={alloc!r} needs the stratum SDs Sh=.")
    if S_h is not None and not (S_h > 0).all():
        raise ValueError("strata_allocation: every Sh must be positive.")
    if alloc in ("prop", "neyman") and n is None:
        raise ValueError(f"strata_allocation: alloc={alloc!r} needs the total sample size n=.")
    if alloc in ("totcost", "totvar"):
        if n is not None:
            raise ValueError(f"strata_allocation: alloc={alloc!r} sets n itself; drop n=.")
        if c_h is None:
            c_h = np.ones_like(N_h)
        if not (c_h > 0).all():
            raise ValueError("strata_allocation: every unit cost ch must be positive.")
    return N_h, S_h, c_h, idx


def _cost_allocation(W, S_h, c_h, Ntot, alloc, cost, variance, cv, ybar) -> np.ndarray:
    """Optimal allocation under the cost model C = sum c_h n_h: for a budget (totcost) or a
    target variance of the mean (totvar); PracTools strAlloc's formulas."""
    d1 = np.sum(W * S_h / np.sqrt(c_h))
    share = W * S_h / np.sqrt(c_h) / d1
    if alloc == "totcost":
        if cost is None or not cost > 0:
            raise ValueError("strata_allocation: alloc='totcost' needs a positive cost=.")
        if c_h.sum() > cost:
            raise ValueError("strata_allocation: the unit costs add up to more than cost.")
        n_cost = cost * d1 / np.sum(W * S_h * np.sqrt(c_h))
    else:
        if (variance is None) == (cv is None):
            raise ValueError("strata_allocation: alloc='totvar' needs variance= or cv= "
                             "(with ybar=).")
        if cv is not None:
            if ybar is None:
                raise ValueError("strata_allocation: cv= needs the population mean ybar=.")
            variance = (cv * ybar) ** 2
        n_cost = d1 * np.sum(W * S_h * np.sqrt(c_h)) / (variance + np.sum(W * S_h**2) / Ntot)
    return n_cost * share


def strata_allocation(Nh: Any, Sh: Any = None, n: float | None = None, alloc: str = "neyman",
                      ch: Any = None, cost: float | None = None, variance: float | None = None,
                      cv: float | None = None, ybar: float | None = None) -> pd.DataFrame:
    """Stratum sample sizes (PracTools ``strAlloc``), not rounded; one row per stratum.

    ``alloc``: ``"prop"`` (n_h = n N_h / N), ``"neyman"`` (n_h proportional to N_h S_h),
    ``"totcost"`` (optimal for a total budget ``cost`` with unit costs ``ch``: n_h
    proportional to N_h S_h / sqrt(c_h)) or ``"totvar"`` (cheapest allocation reaching the
    variance ``variance`` of the mean, or ``cv`` with ``ybar``). ``Nh``, ``Sh``, ``ch``: arrays
    or Series (the index names the strata). Columns ``Nh``, ``Sh``, ``nh``, ``share``;
    ``attrs["se"]`` is the anticipated SE of the estimated mean (not for ``"prop"``, as R).
    A stratum with n_h > N_h warns, as R (take it whole and reallocate the rest).
    """
    import warnings

    N_h, S_h, c_h, idx = _allocation_inputs(Nh, Sh, n, alloc, ch)
    Ntot = N_h.sum()
    W = N_h / Ntot
    if alloc == "prop":
        nh = n * W
    elif alloc == "neyman":
        nh = n * W * S_h / np.sum(W * S_h)
    else:
        nh = _cost_allocation(W, S_h, c_h, Ntot, alloc, cost, variance, cv, ybar)
    if (nh > N_h).any():
        warnings.warn(f"strata_allocation: n_h > N_h in strata {np.flatnonzero(nh > N_h)[:5]}"
                      " (positions); take those strata whole and reallocate the rest.",
                      stacklevel=2)
    out = pd.DataFrame({"Nh": N_h, "Sh": S_h if S_h is not None else np.nan, "nh": nh,
                        "share": nh / nh.sum()}, index=idx)
    if alloc != "prop":
        with np.errstate(invalid="ignore"):  # NaN where n_h > N_h, as R
            out.attrs["se"] = float(np.sqrt(np.sum(N_h * (N_h / nh - 1) * S_h**2) / Ntot**2))
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
