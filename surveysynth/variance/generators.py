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


# ------------------------------------------------------------------ quadratic forms
QUAD_FORMS = ("Ultimate Cluster", "Stratified Multistage SRS", "SD1", "SD2")


def _srswor_block(same: np.ndarray, n: int, one_minus_f: float) -> np.ndarray:
    """svrep ``make_srswor_matrix`` spread over units: (1-f) for units of the same cluster,
    -(1-f)/(n-1) for units of different clusters (0 when n = 1)."""
    if n < 2:
        return np.zeros(same.shape)
    return one_minus_f * np.where(same, 1.0, -1.0 / (n - 1.0))


def _sd_matrix(n: int, one_minus_f: float, kind: str) -> np.ndarray:
    """svrep ``make_sd_matrix``: successive-difference quadratic form of n clusters in order
    (SD1: non-circular, times n/(n-1); SD2: circular)."""
    if n < 2:
        return np.zeros((n, n))
    C = 2.0 * np.eye(n)
    idx = np.arange(n - 1)
    C[idx, idx + 1] = C[idx + 1, idx] = -1.0
    if kind == "SD1":
        C[0, 0] = C[n - 1, n - 1] = 1.0
        C *= n / (n - 1.0)
    elif n > 2:
        C[0, n - 1] = C[n - 1, 0] = -1.0
    else:
        C[0, 1] = C[1, 0] = -2.0
    return one_minus_f / 2.0 * C


def quad_form(stages: list, unit_rows: np.ndarray, variance_estimator: str,
              has_fpc: bool) -> np.ndarray:
    """The (K, K) quadratic form Sigma of a design's variance estimator over its K units
    (svrep ``get_design_quad_form``): V(total) = z' Sigma z for the units' weighted totals z.

    ``unit_rows``: one data row of each unit (its first), in unit order. Estimators:
    ``"Ultimate Cluster"`` (stage-1 PSUs, stage-1 fpc), ``"Stratified Multistage SRS"`` (every
    stage, SRSWOR within each stage's strata, later stages times the earlier sampling
    fractions; R survey's multistage formula), ``"SD1"``/``"SD2"`` (successive differences of
    stage-1 PSUs in data order within stage-1 strata, Wolter's and Ash's).
    """
    if variance_estimator not in QUAD_FORMS:
        raise ValueError(f"variance_estimator={variance_estimator!r}: choose one of "
                         f"{QUAD_FORMS} (svrep names).")
    if variance_estimator == "Stratified Multistage SRS" and not has_fpc:
        raise ValueError("variance_estimator='Stratified Multistage SRS' needs the design's "
                         "fpc (population sizes at every stage; svrep: 'must supply "
                         "strata_pop_sizes'). Fix: give fpc= or use 'Ultimate Cluster'.")
    K = unit_rows.shape[0]
    Q = np.zeros((K, K))
    use = stages if variance_estimator == "Stratified Multistage SRS" else stages[:1]
    for st in use:
        clu = np.asarray(st.cluster)[unit_rows]
        soc = np.asarray(st.stratum_of_cluster)
        stratum = soc[clu]
        omf = np.asarray(st.fpc_factor, dtype=float) if has_fpc else np.ones(st.n_strata)
        mult = (np.asarray(st.multiplier, dtype=float) if has_fpc
                else np.ones(st.n_strata))
        # strata in order of first appearance among the units (svrep's unique())
        _, first_pos = np.unique(stratum, return_index=True)
        for h in stratum[np.sort(first_pos)]:
            members = np.flatnonzero(stratum == h)
            c = clu[members]
            _, cidx = np.unique(c, return_inverse=True)
            n = int(cidx.max()) + 1
            if variance_estimator in ("SD1", "SD2"):
                # clusters in order of first appearance among the (data-ordered) units
                order_codes = pd_factorize(c)
                block = _sd_matrix(n, float(omf[h]), variance_estimator)[
                    np.ix_(order_codes, order_codes)]
            else:
                block = _srswor_block(c[:, None] == c[None, :], n, float(omf[h]))
                if mult[h] != 1.0:
                    block = block * mult[h]
            Q[np.ix_(members, members)] += block
    return Q


def pd_factorize(x: np.ndarray) -> np.ndarray:
    """Codes 0..k-1 in order of first appearance (R ``factor(x, levels = unique(x))``)."""
    _, first, inv = np.unique(x, return_index=True, return_inverse=True)
    rank = np.empty(first.shape[0], dtype=np.int64)
    rank[np.argsort(first)] = np.arange(first.shape[0])
    return rank[inv.reshape(-1)]


def nearest_psd(Q: np.ndarray, psd_option: str = "warn") -> np.ndarray:
    """svrep's ``is_psd_matrix`` check (eigenvalues >= -sqrt(eps) |largest|) and, with
    ``psd_option="warn"``, its ``get_nearest_psd_matrix`` (negative eigenvalues set to 0)."""
    lam, V = np.linalg.eigh(Q)
    if (lam >= -np.sqrt(np.finfo(float).eps) * np.abs(lam).max()).all():
        return Q
    msg = ("The sample quadratic form matrix for this design and variance estimator is not "
           "positive semidefinite.")
    if psd_option != "warn":
        raise ValueError(msg + " This can be handled with psd_option='warn'.")
    warnings.warn(msg + " It will be approximated by the nearest positive semidefinite "
                  "matrix.", UserWarning, stacklevel=3)
    return (V * np.maximum(lam, 0.0)) @ V.T


def gen_boot_factors(Q: np.ndarray, replicates: int, seed: Seed = None, tau: float | str = 1.0,
                     exact_vcov: bool = False) -> tuple[np.ndarray, float, float]:
    """The generalized bootstrap (Beaumont and Patak 2012; svrep ``make_gen_boot_factors``):
    factors ~ N(1, Q), scale 1/B; ``exact_vcov`` whitens the draws so that
    (1/B) sum_b (f_b - 1)(f_b - 1)' = Q exactly and the factors average 1. ``tau`` rescales
    to ``1 + (f - 1)/tau`` with scale tau^2/B; ``"auto"``: the smallest tau (tau^2 rounded up
    to 2 decimals) making every factor >= 0.01. Returns (factors (K, B), scale, tau)."""
    rng = as_generator(seed)
    K = Q.shape[0]
    lam, V = np.linalg.eigh(Q)
    # Q = root root', columns by decreasing eigenvalue: with exact_vcov the whitened draws'
    # degenerate columns (beyond B - 1) must meet the null space, as svrep's svd order does
    root = (V * np.sqrt(np.maximum(lam, 0.0)))[:, ::-1]
    if not exact_vcov:
        F = 1.0 + root @ rng.standard_normal((K, replicates))
    else:
        rank = np.linalg.matrix_rank(Q)
        if replicates <= rank:
            raise ValueError(f"exact_vcov=True needs more replicates than the rank of the "
                             f"quadratic form ({rank}); got replicates={replicates}.")
        Z = rng.standard_normal((replicates, K))
        Z = Z - Z.mean(axis=0)
        _, _, vt = np.linalg.svd(Z, full_matrices=True)
        Z = Z @ vt.T
        sd = Z.std(axis=0, ddof=1)
        Z = Z / np.where(sd > 0, sd, 1.0)
        Z[:, sd <= 1e-12 * max(sd.max(), 1.0)] = 0.0
        F = 1.0 + np.sqrt(replicates / (replicates - 1.0)) * (root @ Z.T)
    scale = 1.0 / replicates
    if tau == "auto":
        low = F < 0.01
        if low.any():
            c = abs(float(np.min((1.0 - F) / (0.01 - 1.0))))
            tau2 = math.ceil(c * c * 100.0) / 100.0
        else:
            tau2 = 1.0
    else:
        tau = float(tau)
        if not tau > 0:
            raise ValueError(f"tau={tau}: must be positive (or 'auto').")
        tau2 = tau * tau
    if tau2 != 1.0:
        F = 1.0 + (F - 1.0) / math.sqrt(tau2)
    return F, scale * tau2, math.sqrt(tau2)


def fays_gen_rep_factors(Q: np.ndarray, seed: Seed = None, max_replicates: float = math.inf,
                         balanced: bool = True, hadamard: np.ndarray | None = None
                         ) -> tuple[np.ndarray, float]:
    """Fay's generalized replication (svrep ``make_fays_gen_rep_factors``): with the
    eigen-decomposition Q = sum_k lambda_k v_k v_k' over its rank k', factors
    ``1 + [sqrt(lambda_k) v_k]_k H[1:k', ] / sqrt(order)`` for a Hadamard matrix H with rows and
    columns shuffled (``balanced``; its order the smallest power of 2 above k' unless
    ``hadamard`` is given: R's ``survey::hadamard`` also has other orders), or the columns
    ``1 + sqrt(lambda_k) v_k`` in shuffled order (``balanced=False``). Since H's rows are
    orthogonal, sum_r (f_r - 1)(f_r - 1)' = Q exactly (scale 1, mse). ``max_replicates`` below
    the order keeps a random subset with scale order / kept. Returns (factors, scale)."""
    rng = as_generator(seed)
    lam, V = np.linalg.eigh(Q)
    lam, V = lam[::-1], V[:, ::-1]  # descending, as R's eigen
    rank = int(np.linalg.matrix_rank(Q))
    if rank == 0:
        raise ValueError("The quadratic form is zero (no variance): nothing to replicate.")
    v = V[:, :rank] * np.sqrt(np.maximum(lam[:rank], 0.0))
    if not balanced:
        F = 1.0 + v[:, rng.permutation(rank)]
        k = rank
    else:
        if hadamard is None:
            order = 1 << int(rank).bit_length()  # a power of 2 > rank
            from scipy.linalg import hadamard as sylvester

            H = sylvester(order).astype(float)
        else:
            H = np.asarray(hadamard, dtype=float)
            if H.shape[0] != H.shape[1] or H.shape[0] < rank or not np.allclose(
                    H @ H.T, H.shape[0] * np.eye(H.shape[0])):
                raise ValueError(f"hadamard: need a +-1 Hadamard matrix of order >= the rank "
                                 f"of the quadratic form ({rank}).")
        k = H.shape[0]
        perm = rng.permutation(k)
        H = H[np.ix_(perm, perm)]
        F = 1.0 + v @ H[:rank] / math.sqrt(k)
    scale = 1.0
    if max_replicates < k:
        m = int(max_replicates)
        scale = k / m
        F = F[:, rng.permutation(m)]
    return F, scale
