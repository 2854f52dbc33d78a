"""Multistage Taylor-linearization variance, vectorized over strata, clusters and domains.

This reimplements the recursion of R ``survey``'s ``svyrecvar`` (``multistage`` ->
``onestage`` -> ``onestrat``) without a loop over strata, PSUs or domains:

* at each stage, influence values are summed to (cluster, domain) totals with one bincount;
* within each (stratum, domain), the cluster totals are centred on their mean over ALL the
  stratum's clusters in the full design (clusters without domain rows count as zero totals,
  as R's zero padding does after ``subset``), scaled by ``(1 - f) n/(n - 1)``;
* lonely-PSU rules (fail, remove, certainty, adjust, average, and the domain variant of
  ``survey.adjust.domain.lonely``) are applied per (stratum, domain) as ``onestrat`` does;
  ``adjust`` centres a lonely stratum's cluster total on the mean cluster total over all the
  strata of its recursion group (R survey 4.5's ``onestage``: the group's sum over the sum
  of the strata's PSU counts), or on 0 with ``survey_version="4.1"`` (R 4.1.1);
* later stages (only when an fpc is given, as R) add each cluster's within-cluster variance
  multiplied by the product of the sampling fractions n/N of all earlier stages.

The code mirrors R's decisions exactly; the comments name the R line each rule comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

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

    @cached_property
    def stratum_layout(self) -> tuple | None:
        """``(order, starts, sizes, stratum)``: the clusters in stratum order (None when their
        codes already are), where each stratum's run starts, its size, and the stratum of each
        cluster in that order. None when the strata's
        cluster counts differ from ``n_psu`` (a hand-built stage): the dense path is not used.
        """
        soc = np.asarray(self.stratum_of_cluster, dtype=np.int64)
        sizes = np.bincount(soc, minlength=self.n_strata)
        if sizes.shape[0] != self.n_strata or not np.array_equal(sizes, self.n_psu) or (
                sizes == 0).any():
            return None
        order = None if bool((np.diff(soc) >= 0).all()) else np.argsort(soc, kind="stable")
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        return order, starts, sizes, np.repeat(np.arange(self.n_strata), sizes)


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


def _lonely_centres(stage: Stage, c_str: np.ndarray, c_dom: np.ndarray, S: np.ndarray,
                    n_h: np.ndarray, D: int, survey_version: str) -> np.ndarray:
    """Where ``adjust`` centres a lonely (stratum, domain) cell: R survey 4.5's ``onestage``
    recentring, ``colSums(x) / sum(nPSU of the strata present)``, i.e. the cells' totals
    ``S`` summed over the recursion group (and domain) over their strata's PSU counts
    ``n_h``; 0 for ``survey_version="4.1"`` (R 4.1.1 left the lonely total uncentred)."""
    if survey_version == "4.1":
        return np.zeros_like(S)
    if survey_version != "4.5":
        raise ValueError(f"survey_version={survey_version!r}: choose '4.5' or '4.1'.")
    g = stage.group_of_stratum[c_str]
    n_groups = int(stage.group_of_stratum.max()) + 1 if stage.n_strata else 1
    _, gd = _compact_pairs(g, c_dom, D, n_groups)
    G = int(gd.max()) + 1 if gd.shape[0] else 0
    num = np.stack([np.bincount(gd, weights=S[:, v], minlength=G) for v in range(S.shape[1])],
                   axis=1) if S.ndim == 2 else np.bincount(gd, weights=S, minlength=G)
    den = np.bincount(gd, weights=n_h, minlength=G)
    return (num / (den[:, None] if S.ndim == 2 else den))[gd]


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
            # one (stratum, domain) cell per domain: name each stratum once, in order
            labels = stage.labels[np.unique(c_str[bad])]
            shown = ", ".join(map(str, labels[:5]))
            more = "" if labels.shape[0] <= 5 else f" (and {labels.shape[0] - 5} more)"
            raise LonelyPSUError(
                f"Stratum ({shown}){more} has only one PSU at stage {stage_number}. "
                "Fix: choose lonely_psu='remove', 'certainty', 'adjust' or 'average' "
                "(R's options(survey.lonely.psu=...)), or collapse strata."
            )
    scale = np.where(is_na, 0.0, scale)
    return scale, uncentred, is_na


#: the dense (cluster x domain) layout is used while the pair space is at most this many
#: pairs per row (plus a million); beyond, present pairs are found by a sort. The dense path
#: holds about six (cluster x domain) float arrays per column, so 1 keeps its transient
#: memory near that of a few data columns
DENSE_PAIRS_PER_ROW = 1


class DomainPairs:
    """One stage's (cluster, domain) totals of row values, and the variance, df and row
    counts of the domains from such totals.

    Built once per stage and call from the clusters and domain codes of the rows in some
    domain. When the pair space (clusters x domains) is small compared with the rows, totals
    are dense (K, D) arrays with the clusters in stratum order (one bincount per column, no
    per-row lookup, per-stratum sums by ``reduceat``; clusters without domain rows are the
    zero totals R's padding gives); otherwise the present pairs are found by a sort and
    totals are (P,) vectors, so memory stays O(rows) for one-row PSUs crossed with many
    domains. Both give R ``onestrat``'s numbers for every (stratum, domain) cell.
    """

    def __init__(self, stage: Stage, cluster: np.ndarray, dom: np.ndarray,
                 n_domains: int, dense: bool | None = None) -> None:
        self.stage, self.D = stage, n_domains
        K = stage.n_clusters
        key = np.multiply(cluster, n_domains, dtype=np.int64)
        key += dom
        space = K * n_domains
        self.layout = stage.stratum_layout
        if dense is None:  # automatic: dense when the pair space is small
            dense = space <= DENSE_PAIRS_PER_ROW * key.shape[0] + 1_000_000
        self.dense = bool(dense) and self.layout is not None
        if self.dense:
            self._key, self._space = key, space
            self.count = np.bincount(key, minlength=space).reshape(K, n_domains)
        else:
            codes, inverse, self.count = np.unique(key, return_inverse=True,
                                                   return_counts=True)
            self._inverse = inverse.reshape(-1)
            self.cells = PairCells.of(stage, codes, n_domains)
        self._dense_cells = None

    def totals(self, values: np.ndarray) -> np.ndarray:
        """Pair totals of the row-aligned ``values``: (K, D) dense or (P,) sparse."""
        if self.dense:
            t = np.bincount(self._key, weights=values, minlength=self._space)
            return t.reshape(self.count.shape)
        return np.bincount(self._inverse, weights=values, minlength=self.count.shape[0])

    def level_totals(self, codes: np.ndarray, n_levels: int,
                     values: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """Pair totals of ``values`` at each level of ``codes`` (0..L-1, every row has one),
        by one bincount over (pair, level), and their sum over levels (the pair totals of
        ``values``)."""
        L = n_levels
        if self.dense:
            t = np.bincount(self._key * L + codes, weights=values,
                            minlength=self._space * L).reshape(*self.count.shape, L)
            return [np.ascontiguousarray(t[..., j]) for j in range(L)], t.sum(axis=-1)
        P = self.count.shape[0]
        t = np.bincount(self._inverse * L + codes, weights=values, minlength=P * L)
        t = t.reshape(P, L)
        return [np.ascontiguousarray(t[:, j]) for j in range(L)], t.sum(axis=1)

    def domain_totals(self, t: np.ndarray) -> np.ndarray:
        """(D,) domain sums of pair totals ``t``."""
        if self.dense:
            return t.sum(axis=0)
        return np.bincount(self.cells.pair_dom, weights=t, minlength=self.D)

    def spread(self, per_domain: np.ndarray) -> np.ndarray:
        """A (D,) vector aligned with pair totals (broadcast dense, gathered sparse)."""
        return per_domain if self.dense else per_domain[self.cells.pair_dom]

    def row_counts(self) -> np.ndarray:
        """(D,) number of rows of each domain."""
        return np.asarray(self.domain_totals(self.count.astype(float) if not self.dense
                                             else self.count), dtype=np.int64)

    def _cells_dense(self):
        if self._dense_cells is None:
            order = self.layout[0]
            present = self.count > 0
            # (H, D) clusters of the stratum with domain rows
            nsub = self._by_stratum((present if order is None else present[order]).view(
                np.int8), dtype=np.int64)
            cell = np.flatnonzero(nsub.ravel())
            c_str = cell // self.D
            self._dense_cells = (present, nsub, cell, c_str, cell - c_str * self.D)
        return self._dense_cells

    def _by_stratum(self, a: np.ndarray, dtype=None) -> np.ndarray:
        """(H, D) sums over each stratum's clusters of a (K, D) array in stratum order
        (a reshape when every stratum has as many clusters, else ``reduceat``)."""
        starts, sizes = self.layout[1], self.layout[2]
        if self.stage.n_strata and sizes[0] * sizes.shape[0] == a.shape[0] and (
                sizes == sizes[0]).all():
            return a.reshape(sizes.shape[0], int(sizes[0]), a.shape[1]).sum(axis=1, dtype=dtype)
        return np.add.reduceat(a, starts, axis=0, dtype=dtype)

    def df(self) -> np.ndarray:
        """R's ``degf`` of each domain (stage 1): clusters reached minus strata reached."""
        if not self.dense:
            return self.cells.df(self.D)
        nsub = self._cells_dense()[1]
        return (nsub.sum(axis=0) - (nsub > 0).sum(axis=0)).astype(float)

    def variance(self, T: list[np.ndarray], lonely_psu: str, adjust_domain_lonely: bool,
                 stage_number: int, survey_version: str = "4.5") -> np.ndarray:
        """(D, V) variance contribution of the stage from the pair totals ``T`` of the V
        influence columns (see :func:`stage_variance`)."""
        D, V = self.D, len(T)
        if not self.dense:
            return pair_variance(self.stage, self.cells, np.column_stack(T) if V else
                                 np.empty((self.count.shape[0], 0)), D, lonely_psu,
                                 adjust_domain_lonely, stage_number, survey_version)
        order, _, sizes, stratum = self.layout
        _, nsub, cell, c_str, c_dom = self._cells_dense()
        n_h = self.stage.n_psu[c_str].astype(float)
        f = self.stage.fpc_factor[c_str]
        nsubset = nsub.ravel()[cell]
        rules = _cell_rules(self.stage, c_str, n_h, f, nsubset, lonely_psu,
                            adjust_domain_lonely, stage_number)
        SS = np.empty((cell.shape[0], V))
        unc = rules[1]
        for v, t in enumerate(T):
            ts = t if order is None else t[order]
            sums = self._by_stratum(ts)
            mean = sums / sizes[:, None]
            if unc.any():  # "adjust": R's centre for a lonely cell instead of its mean
                flat = mean.ravel()
                flat[cell[unc]] = _lonely_centres(self.stage, c_str, c_dom, sums.ravel()[cell],
                                                  n_h, D, survey_version)[unc]
            # centred on the mean over ALL the stratum's clusters (zero totals included)
            dev = np.take(mean, stratum, axis=0)
            np.subtract(ts, dev, out=dev)
            dev *= dev
            SS[:, v] = self._by_stratum(dev).ravel()[cell]
        return _cells_to_domains(self.stage, c_str, c_dom, SS, rules, D)


def _cells_to_domains(stage: Stage, c_str: np.ndarray, c_dom: np.ndarray, SS: np.ndarray,
                      rules: tuple[np.ndarray, np.ndarray, np.ndarray], D: int) -> np.ndarray:
    """R ``onestage``: scaled cell sums of squares summed per recursion group times
    nstrat/nokstrat, then per domain: (D, V)."""
    scale, _, is_na = rules
    V = SS.shape[1]
    out = np.zeros((D, V))
    contrib = SS * scale[:, None]
    contrib[scale == 0.0] = 0.0
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


@dataclass(frozen=True)
class PairCells:
    """The (stratum, domain) cells of a stage reached by a set of present (cluster, domain)
    pairs: R's ``tapply`` over ``factor(strata)`` inside each domain."""

    pair_dom: np.ndarray      # (P,) domain of each pair
    cell_of_pair: np.ndarray  # (P,) cell of each pair
    cell_str: np.ndarray      # (C,) stratum of each cell
    cell_dom: np.ndarray      # (C,) domain of each cell
    nsubset: np.ndarray       # (C,) clusters of the cell with domain rows

    @classmethod
    def of(cls, stage: Stage, pair_codes: np.ndarray, n_domains: int) -> PairCells:
        D = n_domains
        p_clu = pair_codes // D
        p_dom = pair_codes - p_clu * D
        p_str = stage.stratum_of_cluster[p_clu]
        cell_codes, cell_of_pair = _compact_pairs(p_str, p_dom, D, stage.n_strata)
        c_str = cell_codes // D
        nsubset = np.bincount(cell_of_pair, minlength=cell_codes.shape[0])
        return cls(p_dom, cell_of_pair, c_str, cell_codes - c_str * D, nsubset)

    def df(self, n_domains: int) -> np.ndarray:
        """R's ``degf`` per domain: clusters reached minus strata reached (float)."""
        return (np.bincount(self.pair_dom, minlength=n_domains)
                - np.bincount(self.cell_dom, minlength=n_domains)).astype(float)


def pair_variance(
    stage: Stage,
    cells: PairCells,
    T: np.ndarray,
    n_domains: int,
    lonely_psu: str,
    adjust_domain_lonely: bool,
    stage_number: int,
    survey_version: str = "4.5",
) -> np.ndarray:
    """Variance contribution of one stage from the totals ``T`` (P, V) of the influence
    values over present (cluster, domain) pairs: (n_domains, V), already multiplied."""
    D = n_domains
    V = T.shape[1]
    if T.shape[0] == 0:
        return np.zeros((D, V))
    cell_of_pair, c_str, nsubset = cells.cell_of_pair, cells.cell_str, cells.nsubset
    C = c_str.shape[0]
    n_h = stage.n_psu[c_str].astype(float)
    f = stage.fpc_factor[c_str]
    rules = _cell_rules(stage, c_str, n_h, f, nsubset, lonely_psu, adjust_domain_lonely,
                        stage_number)
    pad = n_h - nsubset
    SS = np.empty((C, V))
    unc = rules[1]
    for v in range(V):
        t = T[:, v]
        sums = np.bincount(cell_of_pair, weights=t, minlength=C)
        mean = sums / n_h
        if unc.any():  # "adjust": R's centre for a lonely cell instead of its mean
            mean = np.where(unc, _lonely_centres(stage, c_str, cells.cell_dom, sums, n_h, D,
                                                 survey_version), mean)
        # centred on the mean over ALL the stratum's clusters; clusters of the stratum
        # without domain rows have zero totals, deviation -mean (R pads zeros)
        dev = t - mean[cell_of_pair]
        SS[:, v] = np.bincount(cell_of_pair, weights=dev * dev, minlength=C) + pad * mean**2
    return _cells_to_domains(stage, c_str, cells.cell_dom, SS, rules, D)


def stage_variance(
    stage: Stage,
    z: np.ndarray,
    dom: np.ndarray,
    n_domains: int,
    lonely_psu: str,
    adjust_domain_lonely: bool,
    stage_number: int,
    survey_version: str = "4.5",
) -> np.ndarray:
    """Variance contribution of one stage: (n_domains, V) array, already multiplied.

    ``z`` is (m, V) influence values of the rows that belong to a domain, ``dom`` their domain
    codes (0..n_domains-1); rows outside every domain must have been removed by the caller.
    """
    if z.shape[0] == 0:
        return np.zeros((n_domains, z.shape[1]))
    pairs = DomainPairs(stage, stage.cluster, dom, n_domains)
    T = [pairs.totals(z[:, v]) for v in range(z.shape[1])]
    return pairs.variance(T, lonely_psu, adjust_domain_lonely, stage_number, survey_version)


def taylor_variance(
    stages: list[Stage],
    z: np.ndarray,
    dom: np.ndarray,
    n_domains: int,
    lonely_psu: str,
    adjust_domain_lonely: bool,
    survey_version: str = "4.5",
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
        total += stage_variance(stage, z, dom, n_domains, lonely_psu, adjust_domain_lonely, number,
                                survey_version)
    return total


def stage_covariance(stage: Stage, z: np.ndarray, lonely_psu: str, adjust_domain_lonely: bool,
                     stage_number: int, survey_version: str = "4.5") -> np.ndarray:
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
    mean = S / n_h[:, None]
    if uncentred.any():  # "adjust": R's centre for a lonely cell instead of its mean
        centre = _lonely_centres(stage, c_str, np.zeros(C, np.int64), S, n_h, 1, survey_version)
        mean = np.where(uncentred[:, None], centre, mean)
    dev = (T - mean[cell_of_pair]) * np.sqrt(s[cell_of_pair])[:, None]
    pad = mean * np.sqrt(s * (n_h - nsubset))[:, None]
    A = np.vstack([dev, pad])
    return A.T @ A


def taylor_covariance(stages: list[Stage], z: np.ndarray, inside: np.ndarray, lonely_psu: str,
                      adjust_domain_lonely: bool, survey_version: str = "4.5") -> np.ndarray:
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
        total += stage_covariance(stage, z, lonely_psu, adjust_domain_lonely, number,
                                  survey_version)
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
