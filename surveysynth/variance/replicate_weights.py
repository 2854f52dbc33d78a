"""Replicate-weight engine: generators (Preston, Rao-Wu, jackknife, BRR) and replicate variance.

Every generator returns replicate *factors* held compactly, as R's ``repweights_compressed``:
a matrix ``factors`` with one row per distinct unit of the design that carries its own factor
(a PSU, or for Preston's multistage bootstrap a last-stage cluster) and one column per
replicate, plus ``index``, the row of ``factors`` of each data row. The replicate weight of data
row i in replicate r is ``w_i * factors[index[i], r]``. No generator loops over replicates,
strata or clusters in Python (loops are over stages and over blocks of replicates only).

The variance rule is R ``survey``'s ``svrVar``::

    V = scale * sum_r rscales_r (theta_r - centre)^2

with ``centre`` the mean of the replicates with ``rscales > 0`` (``mse=False``) or the
full-sample estimate (``mse=True``); replicates whose statistic is NaN (R: ``na.omit``) are
dropped with a warning, column by column.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .taylor import Stage

Seed = int | np.random.Generator | None


def as_generator(seed: Seed) -> np.random.Generator:
    """A numpy Generator from an int, a Generator (used as is) or None (fresh entropy)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is not None and not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed={seed!r}: give an int, a numpy Generator or None.")
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------ variance
def replicate_variance(
    thetas: np.ndarray,
    full: np.ndarray,
    scale: float,
    rscales: np.ndarray,
    mse: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """R's ``svrVar`` for many statistics at once, each column separately.

    Parameters
    ----------
    thetas : (R, m) replicate estimates of m statistics.
    full : (m,) full-sample estimates (the centre when ``mse``).
    scale, rscales : R's ``scale`` (scalar) and ``rscales`` (R,).
    mse : centre on ``full`` instead of the replicate mean.

    Returns
    -------
    var : (m,) variances; dropped : (m,) number of NaN replicates discarded per column.
    """
    thetas = np.asarray(thetas, dtype=float)
    if thetas.ndim == 1:
        thetas = thetas[:, None]
    full = np.asarray(full, dtype=float).reshape(-1)
    rscales = np.asarray(rscales, dtype=float).reshape(-1)
    ok = ~np.isnan(thetas)
    dropped = (~ok).sum(axis=0)
    t0 = np.where(ok, thetas, 0.0)
    if mse:
        centre = full
    else:
        use = ok & (rscales[:, None] > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            centre = (t0 * use).sum(axis=0) / use.sum(axis=0)
    dev = np.where(ok, t0 - centre[None, :], 0.0)
    var = scale * (rscales[:, None] * dev**2).sum(axis=0)
    var = np.where(ok.any(axis=0), var, np.nan)
    return var, dropped


def replicate_covariance(
    thetas: np.ndarray,
    full: np.ndarray,
    scale: float,
    rscales: np.ndarray,
    mse: bool,
) -> tuple[np.ndarray, int]:
    """R's ``svrVar`` on a matrix of replicates: the (m, m) covariance of m statistics.

    Replicates with a NaN in any column are dropped first (R: ``na.omit(thetas)``), so the
    diagonal equals :func:`replicate_variance` when no replicate is NaN. Returns the matrix
    and the number of replicates dropped.
    """
    thetas = np.asarray(thetas, dtype=float)
    if thetas.ndim == 1:
        thetas = thetas[:, None]
    full = np.asarray(full, dtype=float).reshape(-1)
    rscales = np.asarray(rscales, dtype=float).reshape(-1)
    ok = ~np.isnan(thetas).any(axis=1)
    if not ok.any():
        raise ValueError("All replicates contained NaN (R: 'All replicates contained NAs').")
    th, rs = thetas[ok], rscales[ok]
    centre = full if mse else th[rs > 0].mean(axis=0)
    dev = (th - centre[None, :]) * np.sqrt(rs)[:, None]
    return scale * (dev.T @ dev), int((~ok).sum())


def rank_like_r(gram: np.ndarray, tol: float = 1e-5) -> int:
    """Rank of a matrix A from its Gram matrix A'A, with R's ``qr(A, tol=1e-5)`` tolerance.

    R's default QR (LINPACK ``dqrdc2``) sets aside a column whose norm, after removing its
    projection on the columns kept, falls below ``tol`` times its original norm (zero
    columns are negligible). Here the Gram matrix is scaled to unit diagonal, so squared
    residual norms are relative to each column's own norm, and LAPACK's pivoted Cholesky
    (``dpstrf``) stops when every remaining relative squared residual is below ``tol**2``.
    The same rank as R's whenever the rank is not numerically ambiguous (R processes the
    columns in order, LAPACK by largest residual).
    """
    from scipy.linalg import lapack

    G = np.asarray(gram, dtype=float)
    d = np.diag(G).copy()
    nz = d > 0
    if not nz.any():
        return 0
    s = 1.0 / np.sqrt(d[nz])
    Gn = G[np.ix_(nz, nz)] * s[:, None] * s[None, :]
    _, _, rank, info = lapack.dpstrf(Gn, tol=tol**2)
    if info < 0:
        raise RuntimeError(f"dpstrf failed (info={info}).")
    return int(rank)


# ------------------------------------------------------------------------------ Preston
def _stage_arrays(stage: Stage, has_fpc: bool):
    soc = np.asarray(stage.stratum_of_cluster, dtype=np.int64)
    H = stage.n_strata
    n = np.bincount(soc, minlength=H).astype(np.int64)
    f_factor = np.asarray(stage.fpc_factor, dtype=float) if has_fpc else np.ones(H)
    cumf = np.asarray(stage.multiplier, dtype=float) if has_fpc else np.ones(H)
    return soc, n, f_factor, cumf


class _HalfSampler:
    """Draws, per replicate, n*_h = floor(n_h/2) clusters by SRSWOR in every stratum h.

    Clusters are laid out in "sampler order": strata grouped by their size m, each group an
    (H_m, m) block; strata with n < 2 (never drawn) come last. For each group a uniform key
    per cluster is drawn and the n* clusters with the smallest keys are taken
    (``np.partition`` along the last axis: linear time, no loop over strata). Each replicate
    draws from its own child generator, so replicate r is the same whatever the block size.
    """

    def __init__(self, soc: np.ndarray, n: np.ndarray, parent_pos: np.ndarray | None):
        K = soc.shape[0]
        order = np.argsort(soc, kind="stable")  # clusters grouped by stratum
        start = np.concatenate([[0], np.cumsum(n)[:-1]])
        # strata of a group ordered by their parent's position, so parents come in runs
        h_key = np.zeros(n.shape[0]) if parent_pos is None else parent_pos
        self.shapes = []
        pieces = []
        for m in np.unique(n[n >= 2]):
            hs = np.flatnonzero(n == m)
            hs = hs[np.argsort(h_key[hs], kind="stable")]
            pieces.append(order[start[hs][:, None] + np.arange(m)[None, :]].ravel())
            self.shapes.append((hs.shape[0], int(m)))
        rest = np.flatnonzero(n[soc] < 2)
        self.n_rest = int(rest.shape[0])
        self.perm = np.concatenate(pieces + [rest]).astype(np.int64)  # position -> cluster
        self.pos = np.empty(K, dtype=np.int64)
        self.pos[self.perm] = np.arange(K)  # cluster -> position
        self.K = K

    def draw(self, gens: Sequence[np.random.Generator]) -> np.ndarray:
        """(B, K) booleans in sampler order: cluster drawn in replicate b."""
        B = len(gens)
        parts = []
        for Hm, m in self.shapes:
            kth = m // 2 - 1
            U = np.empty((B, Hm, m))
            for i, g in enumerate(gens):
                g.random(out=U[i])
            thr = np.partition(U, kth, axis=2)[:, :, kth : kth + 1]
            parts.append((U <= thr).reshape(B, Hm * m))
        if self.n_rest:
            parts.append(np.zeros((B, self.n_rest), dtype=bool))
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


def _expander(parent_pos: np.ndarray):
    """A function mapping (B, K_parent) arrays to (B, K_child) by each child's parent:
    ``np.repeat`` over runs when parents come in order, ``np.take`` otherwise."""
    if parent_pos.shape[0] and bool((np.diff(parent_pos) >= 0).all()):
        vals, counts = np.unique(parent_pos, return_counts=True)
        if vals.shape[0] and vals[0] == 0 and bool((np.diff(vals) == 1).all()):
            return lambda a: np.repeat(a[:, : vals.shape[0]], counts, axis=1)
        return lambda a: np.repeat(a[:, vals], counts, axis=1)
    return lambda a: np.take(a, parent_pos, axis=1)


def preston_factors(
    stages: Sequence[Stage],
    has_fpc: bool,
    replicates: int,
    seed: Seed = None,
    dtype: Any = np.float64,
    block: int | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Preston's (2009) multistage rescaled bootstrap factors, R's ``mrbweights`` rule.

    Stage by stage (s = 1..S) and stratum by stratum (METHODS.md section 2): with n clusters
    in the stratum, n* = floor(n/2) of them are drawn without replacement; the stage term of
    the stratum's rows is ``P_s * lambda * ((n/n*) keep - 1)`` with
    ``lambda = sqrt(cumf n* (1 - f) / (n - n*))``, where ``P_s`` is the product over earlier
    stages of ``sqrt(n/n*) keep`` (zero once a row's cluster was not drawn) and cumf the
    product of the earlier stages' sampling fractions. The factor is ``1 + sum_s term``.
    A stratum with n < 2 (n* = 0) gets a zero term and its rows are not kept for later
    stages, as in R.

    Decision (R's own): R recounts n among the rows still kept; because later-stage strata
    are nested in earlier-stage clusters, a stratum is either wholly kept (n is the design's
    count) or wholly dropped (term 0 through ``P_s = 0``), so the design counts are used.

    Without an fpc only the first stage is used (R: "only first stage used").

    Replicate r draws from the r-th child of ``seed`` (``Generator.spawn``), so the weights
    depend on the seed only, not on ``block`` (replicates generated together; the default
    keeps the temporaries near 200 MB).

    Returns
    -------
    factors : (K, replicates) array of ``dtype``, one row per cluster of the last stage used.
    index : (n_rows,) int64, the row of ``factors`` of each data row.
    """
    if replicates < 2:
        raise ValueError(f"replicates={replicates}: need at least 2 replicates.")
    rng = as_generator(seed)
    used = list(stages) if has_fpc else list(stages[:1])
    S = len(used)
    arrays = [_stage_arrays(st, has_fpc) for st in used]
    if not (arrays[0][1] >= 2).any():
        raise ValueError(
            "Preston bootstrap: no stage-1 stratum has two or more PSUs, so every replicate "
            "equals the full sample and no variance can be estimated. Fix: collapse strata "
            "so each has at least 2 PSUs, or use a design with clustering/strata that allows it."
        )
    samplers: list[_HalfSampler] = []
    per_stage = []
    for s, (soc, n, f_factor, cumf) in enumerate(arrays):
        if s == 0:
            par_pos_of_stratum = None
        else:
            # previous-stage cluster containing each stratum, as a sampler position
            par_pos_of_stratum = samplers[s - 1].pos[
                np.asarray(used[s].group_of_stratum, dtype=np.int64)]
        smp = _HalfSampler(soc, n, par_pos_of_stratum)
        samplers.append(smp)
        nstar = n // 2
        ok = nstar > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            lam = np.where(ok, np.sqrt(cumf * nstar * f_factor / np.where(ok, n - nstar, 1)), 0.0)
            ratio = np.where(ok, n / np.where(ok, nstar, 1), 0.0)
        h = soc[smp.perm]  # stratum of each cluster, in sampler order
        # per cluster: stage term if not drawn (lo) / drawn (hi); later-stage multiplier g
        expand = None if s == 0 else _expander(par_pos_of_stratum[h])
        per_stage.append((-lam[h], (lam * (ratio - 1.0))[h], np.sqrt(ratio)[h], expand))
    K_last = used[-1].n_clusters
    out = np.empty((K_last, replicates), dtype=dtype)
    if block is None:
        total_clusters = sum(st.n_clusters for st in used)
        block = int(max(1, min(replicates, 2e8 // max(total_clusters * 8 * 4, 1))))
    gens = rng.spawn(replicates)
    starts = range(0, replicates, block)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="Preston replicates", unit="block")
    for b0 in starts:
        B = min(block, replicates - b0)
        block_gens = gens[b0 : b0 + B]
        P = cum = None  # product of sqrt(n/n*) keep so far; sum of stage terms so far
        for s in range(S):
            lo_c, hi_c, g_c, expand = per_stage[s]
            keep = samplers[s].draw(block_gens)
            term = np.where(keep, hi_c, lo_c)  # (B, K_s)
            if s == 0:
                cum = term
            else:
                Pp = expand(P)
                term *= Pp
                cum = expand(cum)
                cum += term
            if s + 1 < S:
                g = np.where(keep, g_c, 0.0)
                P = g if s == 0 else Pp * g
        cum += 1.0
        out[:, b0 : b0 + B] = cum.T
    index = samplers[-1].pos[np.asarray(used[-1].cluster, dtype=np.int64)]
    return out, index


# ------------------------------------------------------------------------------ Rao-Wu
def rao_wu_factors(stage: Stage, replicates: int, seed: Seed = None, dtype: Any = np.float64,
                   labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rao-Wu (1988) rescaled bootstrap with n_h - 1 draws: R's ``subbootweights``.

    In each stratum, n_h - 1 of the n_h PSUs are drawn with replacement; a PSU drawn k times
    gets factor ``k n_h / (n_h - 1)``. Stage-1 only; no fpc (as R). A stratum with one PSU
    is an error (R would produce NaN weights).
    """
    if replicates < 2:
        raise ValueError(f"replicates={replicates}: need at least 2 replicates.")
    rng = as_generator(seed)
    soc = np.asarray(stage.stratum_of_cluster, dtype=np.int64)
    H = stage.n_strata
    n = np.bincount(soc, minlength=H)
    if (n < 2).any():
        bad = np.flatnonzero(n < 2)
        names = (labels if labels is not None else stage.labels)[bad[:5]]
        raise ValueError(
            f"Rao-Wu bootstrap: stratum ({', '.join(map(str, names))}) has a single PSU; "
            "n_h - 1 = 0 draws would give undefined weights (R: NaN). Fix: collapse strata "
            "or use method='preston'."
        )
    K = soc.shape[0]
    order = np.argsort(soc, kind="stable")  # clusters grouped by stratum
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    slot_str = np.repeat(np.arange(H), n - 1)  # one slot per draw
    m = slot_str.shape[0]
    draws = start[slot_str][None, :] + np.floor(
        rng.random((replicates, m)) * n[slot_str][None, :]
    ).astype(np.int64)
    clus = order[draws]  # (R, m) cluster codes
    flat = (np.arange(replicates)[:, None] * K + clus).ravel()
    counts = np.bincount(flat, minlength=replicates * K).reshape(replicates, K)
    fac = counts * (n / (n - 1.0))[soc][None, :]
    return fac.T.astype(dtype), np.asarray(stage.cluster, dtype=np.int64)


# ------------------------------------------------------------------------------ jackknife
def jackknife_factors(
    stage: Stage,
    stratified: bool,
    fpc_factor: np.ndarray | None,
    lonely_psu: str = "fail",
    max_cells: float = 5e8,
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """JK1 (unstratified) or JKn (stratified) delete-one-PSU factors, R's ``jk1weights`` /
    ``jknweights``.

    JK1: one replicate per PSU; the deleted PSU gets 0, the others n/(n-1);
    scale = (1 - f)(n-1)/n, rscales = 1. JKn: one replicate per PSU of each stratum h, the
    deleted PSU gets 0, the other PSUs of h get n_h/(n_h - 1), PSUs of other strata 1;
    scale = 1, rscales_h = (1 - f_h)(n_h - 1)/n_h. Strata with N = n (certainty) give no
    replicates (R's ``survey.drop.replicates``). Strata with one PSU follow ``lonely_psu`` as
    R's ``jknweights``: fail, remove/certainty/average (no replicate; ``average`` multiplies
    scale by #PSUs/#replicates), adjust (one replicate: 0 for the stratum, H/(H-1) for
    every other PSU, rscale (H-1)/H).

    Returns factors (K, R), index (rows), scale, rscales.
    """
    soc = np.asarray(stage.stratum_of_cluster, dtype=np.int64)
    K = soc.shape[0]
    H = stage.n_strata
    n = np.bincount(soc, minlength=H)
    f = np.ones(H) if fpc_factor is None else np.asarray(fpc_factor, dtype=float)
    if not stratified:
        # JK1
        if f[0] < 1e-7:
            raise ValueError("jackknife: the single stratum is a census (N = n): zero variance.")
        cells = float(K) * K
        if cells > max_cells:
            raise ValueError(
                f"jackknife: {K} PSUs would need a {K} x {K} replicate matrix. Fix: use "
                "bootstrap() (a few hundred replicates) for designs with many PSUs."
            )
        fac = np.full((K, K), K / (K - 1.0))
        np.fill_diagonal(fac, 0.0)
        return fac, np.asarray(stage.cluster, dtype=np.int64), float(f[0] * (K - 1) / K), np.ones(K)
    certain = f < 1e-7  # jk1weights: fpc 0 -> no replicates (survey.drop.replicates)
    lonely = (n == 1) & ~certain
    if lonely.any() and lonely_psu == "fail":
        names = stage.labels[np.flatnonzero(lonely)[:5]]
        raise ValueError(
            f"jackknife: stratum ({', '.join(map(str, names))}) has only one PSU. Fix: give the "
            "design lonely_psu='remove', 'certainty', 'average' or 'adjust' (R's "
            "options(survey.lonely.psu=)), or collapse strata."
        )
    regular = (n >= 2) & ~certain
    adjust = lonely & (lonely_psu == "adjust")
    # replicate columns in R's order: strata by first appearance; within a regular stratum
    # one column per PSU (PSUs by first appearance), an "adjust" lonely stratum one column
    order = np.lexsort((np.arange(K), soc))
    rep_of_cluster = np.full(K, -1, dtype=np.int64)
    # number of replicates per stratum in stratum order
    nrep = np.where(regular, n, 0) + np.where(adjust, 1, 0)
    first_col = np.concatenate([[0], np.cumsum(nrep)[:-1]])
    R = int(nrep.sum())
    if R == 0:
        raise ValueError("jackknife: all strata were exhaustively sampled or lonely: no replicates.")
    if float(K) * R > max_cells:
        raise ValueError(
            f"jackknife: {K} PSUs x {R} replicates is too large. Fix: use bootstrap()."
        )
    pos_in_str = np.empty(K, dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    pos_in_str[order] = np.arange(K) - start[soc[order]]
    in_regular = regular[soc]
    rep_of_cluster[in_regular] = first_col[soc[in_regular]] + pos_in_str[in_regular]
    cols_str = np.repeat(np.arange(H), nrep)
    fac = np.ones((K, R))
    # regular strata: PSUs of the replicate's stratum get n_h/(n_h-1), the deleted one 0
    same = soc[:, None] == cols_str[None, :]
    fac = np.where(same, (n / np.maximum(n - 1.0, 1.0))[soc][:, None], fac)
    fac[np.flatnonzero(in_regular), rep_of_cluster[in_regular]] = 0.0
    rscales = np.where(regular, f * (n - 1.0) / np.maximum(n, 1), 0.0)[cols_str]
    nstrat = H
    if adjust.any():
        adj_cols = first_col[adjust]
        adj_str = np.flatnonzero(adjust)
        block = np.where(
            soc[:, None] == adj_str[None, :], 0.0, nstrat / (nstrat - 1.0)
        )
        fac[:, adj_cols] = block
        rscales[adj_cols] = (nstrat - 1.0) / nstrat
    scale = 1.0
    if R < K and lonely_psu == "average":
        scale = K / R
    return fac, np.asarray(stage.cluster, dtype=np.int64), scale, rscales


# ------------------------------------------------------------------------------ BRR / Fay
def sylvester_hadamard(order: int) -> np.ndarray:
    """Sylvester Hadamard matrix (entries +-1, float) of size the smallest power of 2 >= order
    (``scipy.linalg.hadamard``, which builds Sylvester's matrix)."""
    from scipy.linalg import hadamard

    size = 1 << max(int(order) - 1, 0).bit_length()
    return hadamard(size).astype(float)


def r_character_order(labels: np.ndarray) -> np.ndarray:
    """Position of each label when sorted as R's ``order(as.character(x))`` sorts them.

    Whole floats print as integers (R's ``as.character(2)`` is ``"2"``); strings are
    compared by code point (R in the C locale; other locales collate letters' case
    differently: give the strata as numbers or one case to be safe).
    """
    def text(x: Any) -> str:
        if isinstance(x, (float, np.floating)) and float(x).is_integer():
            return str(int(x))
        return str(x)

    keys = [text(x) for x in labels]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    pos = np.empty(len(keys), dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(len(keys))
    return pos


def brr_factors(stage: Stage, fay_rho: float = 0.0,
                hadamard: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """BRR / Fay factors for a design with exactly two PSUs in every stratum, R's
    ``brrweights``.

    Strata take the rows 2, 3, ... of the Hadamard matrix in the order of their labels
    sorted as text (R: ``order(as.character(strata))``); within a stratum the "first" PSU is
    the one that appears first in the data. Half-sample r keeps the first PSU of stratum h
    when its Hadamard entry is "+" and the second otherwise; kept PSUs get factor 2 - rho,
    the other rho (rho = 0: classic BRR). scale = 1 / (R (1 - rho)^2), rscales = 1.

    Hadamard matrix: by default Sylvester's, of size the smallest power of two above the
    number of strata, "+" = +1 (R's precooked matrices are Sylvester's for 1-7 and 12-15
    strata, so the replicates are R's there; for other counts R picks a Paley or stored
    matrix of a multiple of 4, giving the same variance for linear statistics and slightly
    different ones for nonlinear statistics). A user matrix (two distinct values, at least
    H + 1 rows) is read as R reads ``hadamard.matrix``: the value of its first entry means
    "-" (keep the second PSU), the other value "+". Passing R's ``paley(11)`` gives R's
    replicates exactly.
    """
    if not 0.0 <= fay_rho < 1.0:
        raise ValueError(f"fay_rho={fay_rho}: must be in [0, 1).")
    soc = np.asarray(stage.stratum_of_cluster, dtype=np.int64)
    H = stage.n_strata
    n = np.bincount(soc, minlength=H)
    if (n != 2).any():
        bad = np.flatnonzero(n != 2)
        names = stage.labels[bad[:5]]
        raise ValueError(
            f"BRR needs exactly 2 PSUs per stratum; stratum ({', '.join(map(str, names))}) has "
            f"{n[bad[0]]}. Fix: pair PSUs into 2-PSU variance strata, or use jackknife() or "
            "bootstrap()."
        )
    if hadamard is None:
        plus_matrix = sylvester_hadamard(max(H + 1, 4)) > 0  # R: at least 4 replicates
    else:
        Hm = np.asarray(hadamard)
        vals = np.unique(Hm)
        if Hm.ndim != 2 or Hm.shape[0] < H + 1 or vals.shape[0] != 2:
            raise ValueError(
                f"hadamard: need a two-valued matrix with at least {H + 1} rows (number of "
                f"strata + 1), got shape {Hm.shape} with values {vals[:5]}."
            )
        plus_matrix = Hm != Hm[0, 0]
        pm = np.where(plus_matrix, 1.0, -1.0)
        gram = pm.T @ pm
        if not np.allclose(gram, np.diag(np.diag(gram))):
            raise ValueError("hadamard: columns are not orthogonal: not a Hadamard matrix.")
    K = soc.shape[0]
    first = np.zeros(K, dtype=bool)
    order = np.lexsort((np.arange(K), soc))
    first[order[0::2]] = True  # each stratum has 2 clusters: first of the pair in order
    row_of_stratum = 1 + r_character_order(stage.labels)
    plus = plus_matrix[row_of_stratum[soc], :]  # (K, R)
    kept = np.where(first[:, None], plus, ~plus)
    fac = np.where(kept, 2.0 - fay_rho, fay_rho)
    Rn = plus_matrix.shape[1]
    return fac, np.asarray(stage.cluster, dtype=np.int64), 1.0 / (Rn * (1.0 - fay_rho) ** 2)


def warn_dropped(dropped: np.ndarray, what: str = "") -> None:
    if dropped.any():
        warnings.warn(
            f"{int(dropped.max())} replicate(s) gave NaN results{what} and were discarded "
            "(R: 'replicates gave NA results and were discarded'), e.g. a domain with no "
            "rows in those replicates.",
            UserWarning,
            stacklevel=4,
        )
