"""Replicate-factor generators of issue 42: successive-difference replication (svrep
``as_sdr_design``), the Canty-Davison bootstrap (R ``bootweights``, ``as.svrepdesign(
type="bootstrap")``), the generalized bootstrap (svrep ``as_gen_boot_design``) and Fay's
generalized replication (svrep ``as_fays_gen_rep_design``).

Each returns compact factors as the other generators of
:mod:`surveysynth.variance.replicate_weights`: a (K, R) matrix, one row per replicate unit,
and the unit of each data row. See docs/weighting.md for the formulas and the decisions.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from .replicate_weights import Seed, as_generator

#: svrep's starting 4 x 4 Hadamard matrix for SDR (``make_sdr_replicate_factors``); larger
#: orders are built from it by Sylvester doubling [[H, H], [H, -H]].
SVREP_H4 = np.array([[1, -1, 1, 1],
                     [-1, -1, -1, 1],
                     [1, -1, -1, -1],
                     [1, 1, -1, 1]], dtype=float)


def sdr_hadamard(target: int) -> np.ndarray:
    """svrep's SDR Hadamard matrix: its H4 doubled until it has at least ``target`` columns."""
    if target < 2:
        raise ValueError(f"replicates={target}: need at least 2.")
    H = SVREP_H4
    while H.shape[1] < target:
        H = np.block([[H, H], [H, -H]])
    return H


def assign_hadamard_rows(n: int, hadamard_order: int, number_of_cycles: int | None = None,
                         use_first_row: bool = True, circular: bool = True) -> np.ndarray:
    """Pairs of Hadamard rows (1-based) for ``n`` units in sort order: svrep's
    ``assign_hadamard_rows`` step for step (cycles of step size 1, 2, ... through the rows,
    repeated over the sample; the last pair closes the circle when n <= order)."""
    if hadamard_order % 4:
        raise ValueError(f"hadamard_order={hadamard_order} must be a multiple of 4.")
    kA = hadamard_order if use_first_row else hadamard_order - 1
    cycles = math.ceil(n / hadamard_order) if number_of_cycles is None else int(number_of_cycles)
    if ((kA - 1) * cycles) % 2:
        max_step = cycles + 1
        if max_step >= kA - 1:
            max_step = cycles - 1
        max_step = min(max_step, kA - 1)
    else:
        max_step = min(cycles, kA - 1)
    # R's 1:max_step counts down when max_step < 1 (1:0 is c(1, 0))
    steps = range(1, max_step + 1) if max_step >= 1 else [1, 0][: 2 - max_step]
    pairs: list[tuple[int, int]] = []
    for step in steps:
        unused = set(range(1, kA + 1))
        i = 1
        while unused:
            j = i + step
            if j > kA:
                j -= kA
            if i in unused:
                pairs.append((i, j))
                unused.discard(i)
                i = j
            else:
                i += 1
    out = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if not use_first_row:
        out = out + 1
    if out.shape[0] < n:
        out = np.tile(out, (math.ceil(n / out.shape[0]), 1))
    out = out[:n].copy()
    if n <= kA and circular:
        out[n - 1, 1] = out[0, 0]
    return out


def sdr_factors_sorted(n: int, replicates: int, hadamard: np.ndarray | None = None) -> np.ndarray:
    """(n, R) SDR factors for ``n`` units in sort order (svrep ``make_sdr_replicate_factors``):
    unit k with Hadamard rows (a, b) gets ``1 + (H[a, r] - H[b, r]) / 2^(3/2)``.

    ``hadamard``: a +-1 Hadamard matrix to use instead of svrep's default (svrep's
    ``use_normal_hadamard=TRUE`` uses ``survey::hadamard``; pass that matrix for its factors).
    """
    if n < 2:
        raise ValueError(f"successive-difference replication needs at least 2 units, got {n}.")
    H = sdr_hadamard(replicates) if hadamard is None else np.asarray(hadamard, dtype=float)
    if H.ndim != 2 or H.shape[0] != H.shape[1] or not np.isin(H, (-1.0, 1.0)).all():
        raise ValueError("hadamard: need a square matrix of +1/-1 entries.")
    if not np.allclose(H.T @ H, H.shape[0] * np.eye(H.shape[0])):
        raise ValueError("hadamard: the columns are not orthogonal (not a Hadamard matrix).")
    rows = assign_hadamard_rows(n, H.shape[1])
    return 1.0 + (H[rows[:, 0] - 1] - H[rows[:, 1] - 1]) * 2.0 ** -1.5


def canty_davison_factors(soc: np.ndarray, replicates: int, seed: Seed = None,
                          popsize: np.ndarray | None = None, labels: np.ndarray | None = None
                          ) -> tuple[np.ndarray, float]:
    """Canty and Davison's (1999) with-replacement bootstrap of PSUs, R ``bootweights``.

    ``soc``: the stratum code of each PSU (K,). In every stratum of n_h PSUs each replicate
    draws n_h PSUs with replacement (no ``popsize``), or, with population sizes N_h, draws n_h
    without replacement from a pseudo-population of N_h units holding every PSU
    floor(N_h/n_h) or ceil(N_h/n_h) times (R: ``rep(sample(upsu), length = N_h)``, so which
    PSUs get the extra copy is drawn once per stratum). The factor is the number of times a
    PSU is drawn. Scale: ``nbar / ((nbar - 1) (R - 1))``, nbar the harmonic mean of the
    PSUs per stratum (R's single scale for all strata). Returns (factors (K, R), scale).
    """
    rng = as_generator(seed)
    soc = np.asarray(soc, dtype=np.int64)
    H = int(soc.max()) + 1
    n = np.bincount(soc, minlength=H)
    K = soc.shape[0]
    fac = np.empty((K, replicates))
    for h in range(H):
        members = np.flatnonzero(soc == h)
        nh = members.shape[0]
        if nh == 0:
            continue
        if popsize is None:
            fac[members] = rng.multinomial(nh, np.full(nh, 1.0 / nh), size=replicates).T
            continue
        N = float(popsize[h])
        name = labels[h] if labels is not None else h
        if N < nh:
            raise ValueError(
                f"Canty-Davison bootstrap: population size {N:g} smaller than the sample size "
                f"{nh} in stratum {name} (R: 'Population size smaller than sample size'). Fix: "
                "check the fpc column (population sizes at stage 1).")
        if N > 100 * nh:
            warnings.warn(f"Sampling fraction <1% in stratum {name} treated as zero (R's "
                          "warning; the pseudo-population is used all the same).",
                          UserWarning, stacklevel=3)
        Nint = int(math.floor(N))
        order = rng.permutation(nh)  # R: upsu <- sample(unique(psu))
        copies = np.full(nh, Nint // nh, dtype=np.int64)
        copies[order[: Nint % nh]] += 1
        fac[members] = rng.multivariate_hypergeometric(copies, nh, size=replicates).T
    nbar = 1.0 / float(np.mean(1.0 / n[n > 0]))
    if nbar <= 1:
        raise ValueError("Canty-Davison bootstrap: every stratum has a single PSU, so the "
                         "variance scale nbar/(nbar-1) is undefined. Fix: collapse strata.")
    return fac, nbar / ((nbar - 1.0) * (replicates - 1.0))
