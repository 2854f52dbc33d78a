"""Multistage Taylor-linearization variance, vectorized over strata, clusters and domains.

This reimplements the recursion of R ``survey``'s ``svyrecvar`` (``multistage`` ->
``onestage`` -> ``onestrat``) without a loop over strata, PSUs or domains:

* at each stage, influence values are summed to (cluster, domain) totals with one bincount;
* within each (stratum, domain), the cluster totals are centred on their mean over ALL the
  stratum's clusters in the full design (clusters without domain rows count as zero totals,
  as R's zero padding does after ``subset``), scaled by ``(1 - f) n/(n - 1)``;
* lonely-PSU rules (fail, remove, certainty, adjust, average, and the domain variant of
  ``survey.adjust.domain.lonely``) are applied per (stratum, domain) as ``onestrat`` does;
* later stages (only when an fpc is given, as R) add each cluster's within-cluster variance
  multiplied by the product of the sampling fractions n/N of all earlier stages.

The code mirrors R's decisions exactly; the comments name the R line each rule comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

LONELY_OPTIONS = ("fail", "remove", "certainty", "adjust", "average")


class LonelyPSUError(ValueError):
    """A stratum has a single PSU and ``lonely_psu="fail"``."""


@dataclass(frozen=True)
class Stage:
    """One sampling stage of a design, in integer codes.

    Attributes
    ----------
    cluster : (n,) int64 codes of the stage's clusters (unique across the whole design).
    stratum_of_cluster : (K,) stratum code of each cluster.
    group_of_stratum : (H,) code of the previous stage's cluster containing the stratum
        (all 0 at stage 1): the unit R's recursion runs ``onestage`` within.
    n_psu : (H,) number of clusters of the stratum in the full design (R's ``sampsize``).
    fpc_factor : (H,) R's ``f`` in ``onestrat``: 1 - n/N, or 1 without an fpc.
    multiplier : (H,) product of n/N of the earlier stages' strata above this stratum
        (1 at stage 1): how much R's recursion scales this stage's variance.
    labels : (H,) readable label of each stratum, for error messages.
    """

    cluster: np.ndarray
    stratum_of_cluster: np.ndarray
    group_of_stratum: np.ndarray
    n_psu: np.ndarray
    fpc_factor: np.ndarray
    multiplier: np.ndarray
    labels: np.ndarray

    @property
    def n_clusters(self) -> int:
        return int(self.stratum_of_cluster.shape[0])

    @property
    def n_strata(self) -> int:
        return int(self.n_psu.shape[0])


def _compact_pairs(a: np.ndarray, b: np.ndarray, nb: int, na: int):
    """Codes of the distinct pairs (a, b) present, and each row's pair index.

    Uses a dense bincount when the pair space is small, a sort otherwise, so memory stays
    O(rows) even for one-row PSUs crossed with many domains.
    """
    key = a.astype(np.int64) * nb + b
    space = na * nb
    if space <= 4 * key.shape[0] + 1_000_000:
        present = np.bincount(key, minlength=space) > 0
        codes = np.flatnonzero(present)
        lookup = np.full(space, -1, dtype=np.int64)
        lookup[codes] = np.arange(codes.shape[0])
        return codes, lookup[key]
    codes, inverse = np.unique(key, return_inverse=True)
    return codes, inverse.reshape(-1)


def _cell_rules(stage: Stage, c_str: np.ndarray, n_h: np.ndarray, f: np.ndarray,
                nsubset: np.ndarray, lonely_psu: str, adjust_domain_lonely: bool,
                stage_number: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """R ``onestrat``'s rules for (stratum, domain) cells: the scale of the centred sum of
    squares (0 for certainty strata), whether the cell is left uncentred (``adjust``) and
    whether it is NA (``average``); raises for a lonely PSU under ``fail``."""
    lonely = n_h == 1
    scale = np.where(lonely, f, f * n_h / np.where(lonely, 1.0, n_h - 1.0))
    # onestrat: sweep (centre) unless lonely.psu == "adjust" and (nsubset == 1) and
    # (nPSU == 1 or survey.adjust.domain.lonely)
    uncentred = (lonely_psu == "adjust") & (nsubset == 1) & (lonely | adjust_domain_lonely)
    is_na = np.zeros(c_str.shape[0], dtype=bool)
    if lonely_psu == "average":
        is_na |= lonely
        if adjust_domain_lonely:
            is_na |= (nsubset == 1) & ~lonely
    # onestrat returns 0 first when every f < 1e-7 (certainty stratum), before any lonely rule
    certain = f < 1e-7
    scale = np.where(certain, 0.0, scale)
    is_na &= ~certain
    if lonely_psu == "fail":
        bad = lonely & ~certain
        if bad.any():
            labels = stage.labels[c_str[bad]]
            shown = ", ".join(map(str, labels[:5]))
            more = "" if labels.shape[0] <= 5 else f" (and {labels.shape[0] - 5} more)"
            raise LonelyPSUError(
                f"Stratum ({shown}){more} has only one PSU at stage {stage_number}. "
                "Fix: choose lonely_psu='remove', 'certainty', 'adjust' or 'average' "
                "(R's options(survey.lonely.psu=...)), or collapse strata."
            )
    scale = np.where(is_na, 0.0, scale)
    return scale, uncentred, is_na


def stage_variance(
    stage: Stage,
    z: np.ndarray,
    dom: np.ndarray,
    n_domains: int,
    lonely_psu: str,
    adjust_domain_lonely: bool,
    stage_number: int,
) -> np.ndarray:
    """Variance contribution of one stage: (n_domains, V) array, already multiplied.

    ``z`` is (m, V) influence values of the rows that belong to a domain, ``dom`` their domain
    codes (0..n_domains-1); rows outside every domain must have been removed by the caller.
    """
    D = n_domains
    V = z.shape[1]
    out = np.zeros((D, V))
    if z.shape[0] == 0:
        return out
    clu = stage.cluster
    # (cluster, domain) totals and row counts
    pair_codes, pair_of_row = _compact_pairs(clu, dom, D, stage.n_clusters)
    P = pair_codes.shape[0]
    T = np.empty((P, V))
    for v in range(V):
        T[:, v] = np.bincount(pair_of_row, weights=z[:, v], minlength=P)
    p_clu = pair_codes // D
    p_dom = pair_codes % D
    p_str = stage.stratum_of_cluster[p_clu]
    # (stratum, domain) cells present in the domain: R's tapply over factor(strata)
    cell_codes, cell_of_pair = _compact_pairs(p_str, p_dom, D, stage.n_strata)
    C = cell_codes.shape[0]
    c_str = cell_codes // D
    c_dom = cell_codes % D
    n_h = stage.n_psu[c_str].astype(float)
    f = stage.fpc_factor[c_str]
    nsubset = np.bincount(cell_of_pair, minlength=C)  # clusters with domain rows
    S = np.empty((C, V))
    U = np.empty((C, V))
    for v in range(V):
        S[:, v] = np.bincount(cell_of_pair, weights=T[:, v], minlength=C)
        U[:, v] = np.bincount(cell_of_pair, weights=T[:, v] ** 2, minlength=C)
    mean = S / n_h[:, None]
    dev = T - mean[cell_of_pair]
    SS = np.empty((C, V))
    for v in range(V):
        SS[:, v] = np.bincount(cell_of_pair, weights=dev[:, v] ** 2, minlength=C)
    # clusters of the stratum without domain rows: zero totals, deviation -mean (R pads zeros)
    SS += (n_h - nsubset)[:, None] * mean**2

    scale, uncentred, is_na = _cell_rules(stage, c_str, n_h, f, nsubset, lonely_psu,
                                          adjust_domain_lonely, stage_number)
    contrib = np.where(uncentred[:, None], U, SS) * scale[:, None]
    contrib[scale == 0.0] = 0.0
    # onestage: per recursion group, sum over its strata * nstrat / nokstrat
    g = stage.group_of_stratum[c_str]
    n_groups = int(stage.group_of_stratum.max()) + 1 if stage.n_strata else 1
    gd_codes, gd_of_cell = _compact_pairs(g, c_dom, D, n_groups)
    G = gd_codes.shape[0]
    nstrat = np.bincount(gd_of_cell, minlength=G).astype(float)
    nok = np.bincount(gd_of_cell, weights=(~is_na).astype(float), minlength=G)
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = nstrat / nok
    weighted = contrib * stage.multiplier[c_str][:, None]
    gd_dom = gd_codes % D
    with np.errstate(invalid="ignore"):  # 0 * inf when every stratum is NA: NaN, as in R
        for v in range(V):
            per_group = np.bincount(gd_of_cell, weights=weighted[:, v], minlength=G) * factor
            out[:, v] = np.bincount(gd_dom, weights=per_group, minlength=D)
    return out


def taylor_variance(
    stages: list[Stage],
    z: np.ndarray,
    dom: np.ndarray,
    n_domains: int,
    lonely_psu: str,
    adjust_domain_lonely: bool,
) -> np.ndarray:
    """Variance of domain totals of ``z`` (rows with dom < 0 are outside every domain).

    Returns a (n_domains, V) array: for each domain d and column v, R's ``svyrecvar`` applied
    to the design subset to domain d with influence values ``z[:, v]``.
    """
    z = np.asarray(z, dtype=float)
    if z.ndim == 1:
        z = z[:, None]
    keep = dom >= 0
    if not keep.all():
        z = z[keep]
        dom = dom[keep]
        stages = [_restrict(s, keep) for s in stages]
    total = np.zeros((n_domains, z.shape[1]))
    for number, stage in enumerate(stages, start=1):
        total += stage_variance(stage, z, dom, n_domains, lonely_psu, adjust_domain_lonely, number)
    return total


def stage_covariance(stage: Stage, z: np.ndarray, lonely_psu: str, adjust_domain_lonely: bool,
                     stage_number: int) -> np.ndarray:
    """Covariance contribution of one stage for the columns of ``z`` (m, K): (K, K).

    The cross-product version of :func:`stage_variance` for one domain (the rows given):
    R's ``onestrat`` returns ``crossprod(dev)`` scaled, so a (K, K) matrix whose diagonal is
    :func:`stage_variance`'s. Each stratum's centred cluster totals, the zero totals of its
    clusters without rows (deviation ``-mean``, as R's padding) and the recursion factors are
    stacked in one matrix ``A`` with the scales folded in as square roots; the result is
    ``A'A``.
    """
    K = z.shape[1]
    if z.shape[0] == 0:
        return np.zeros((K, K))
    dom = np.zeros(z.shape[0], dtype=np.int64)
    pair_codes, pair_of_row = _compact_pairs(stage.cluster, dom, 1, stage.n_clusters)
    P = pair_codes.shape[0]
    agg = sparse.csr_matrix((np.ones(z.shape[0]), (pair_of_row, np.arange(z.shape[0]))),
                            shape=(P, z.shape[0]))
    T = np.asarray(agg @ z)  # cluster totals (P, K)
    p_str = stage.stratum_of_cluster[pair_codes]
    cell_codes, cell_of_pair = _compact_pairs(p_str, np.zeros(P, np.int64), 1, stage.n_strata)
    C = cell_codes.shape[0]
    c_str = cell_codes
    n_h = stage.n_psu[c_str].astype(float)
    f = stage.fpc_factor[c_str]
    nsubset = np.bincount(cell_of_pair, minlength=C)
    scale, uncentred, is_na = _cell_rules(stage, c_str, n_h, f, nsubset, lonely_psu,
                                          adjust_domain_lonely, stage_number)
    g = stage.group_of_stratum[c_str]
    n_groups = int(stage.group_of_stratum.max()) + 1 if stage.n_strata else 1
    nstrat = np.bincount(g, minlength=n_groups).astype(float)
    nok = np.bincount(g, weights=(~is_na).astype(float), minlength=n_groups)
    if ((nok == 0) & (nstrat > 0)).any():  # every stratum of a group NA: R gives NaN
        return np.full((K, K), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = np.where(nok > 0, nstrat / nok, 0.0)
    s = scale * stage.multiplier[c_str] * factor[g]
    S = np.asarray(sparse.csr_matrix((np.ones(P), (cell_of_pair, np.arange(P))),
                                     shape=(C, P)) @ T)
    mean = np.where(uncentred[:, None], 0.0, S / n_h[:, None])
    dev = (T - mean[cell_of_pair]) * np.sqrt(s[cell_of_pair])[:, None]
    pad = mean * np.sqrt(s * np.where(uncentred, 0.0, n_h - nsubset))[:, None]
    A = np.vstack([dev, pad])
    return A.T @ A


def taylor_covariance(stages: list[Stage], z: np.ndarray, inside: np.ndarray, lonely_psu: str,
                      adjust_domain_lonely: bool) -> np.ndarray:
    """Covariance matrix of the totals of the columns of ``z`` (n, K): R's ``svyrecvar`` on
    a matrix of influence values, over the rows ``inside`` (the design's rows; the others
    are outside the subset), as ``svyby(..., covmat=TRUE)`` and ``vcov(svymean)`` compute it.
    """
    z = np.asarray(z, dtype=float)
    if z.ndim == 1:
        z = z[:, None]
    if not inside.all():
        z = z[inside]
        stages = [_restrict(st, inside) for st in stages]
    total = np.zeros((z.shape[1], z.shape[1]))
    for number, stage in enumerate(stages, start=1):
        total += stage_covariance(stage, z, lonely_psu, adjust_domain_lonely, number)
    return total


def _restrict(stage: Stage, keep: np.ndarray) -> Stage:
    return Stage(
        cluster=stage.cluster[keep],
        stratum_of_cluster=stage.stratum_of_cluster,
        group_of_stratum=stage.group_of_stratum,
        n_psu=stage.n_psu,
        fpc_factor=stage.fpc_factor,
        multiplier=stage.multiplier,
        labels=stage.labels,
    )


def _present_pairs(a: np.ndarray, b: np.ndarray, nb: int, na: int) -> np.ndarray:
    """Sorted codes ``a * nb + b`` of the distinct pairs present (no per-row index)."""
    key = a.astype(np.int64) * nb + b
    space = na * nb
    if space <= 4 * key.shape[0] + 1_000_000:
        return np.flatnonzero(np.bincount(key, minlength=space))
    return np.unique(key)


def design_df(stage1: Stage, dom: np.ndarray, n_domains: int, positive: np.ndarray) -> np.ndarray:
    """R's ``degf``: distinct PSUs minus distinct strata among a domain's rows with weight > 0."""
    keep = (dom >= 0) & positive
    if keep.all():  # every row counts: no masked copies
        clu, d = stage1.cluster, dom
    else:
        clu, d = stage1.cluster[keep], dom[keep]
    pairs = _present_pairs(clu, d, n_domains, stage1.n_clusters)
    n_psu = np.bincount(pairs % n_domains, minlength=n_domains)
    strata = stage1.stratum_of_cluster[pairs // n_domains]
    cells, _ = _compact_pairs(strata, pairs % n_domains, n_domains, stage1.n_strata)
    n_str = np.bincount(cells % n_domains, minlength=n_domains)
    return (n_psu - n_str).astype(float)
