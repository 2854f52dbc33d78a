"""Variance of PPS samples drawn without replacement, as R ``survey``'s ``svydesign(pps=...)``.

Two families, read from R ``survey`` 4.1 (``svydesign.default``, ``as.fpc``, ``onestrat``,
``multistage``, ``pps_design``, ``ppsvar``, ``htvar.matrix``, ``ygvar.matrix``,
``overton2Dcheck``, ``HRDcheck``, ``pi2Dcheck``, ``degf.pps``):

* **Brewer** (``pps="brewer"``): the stratified with-replacement (ultimate cluster) formula
  with each PSU's own finite-population factor ``1 - pi_i``:
  ``sum_h n_h/(n_h-1) sum_i (1 - pi_i) (t_i - tbar_h)^2``, where ``t_i`` is the weighted
  total of PSU i and ``tbar_h`` the plain mean of the PSU totals in stratum h. The
  inclusion probabilities come from ``fpc`` given as probabilities (R: ``fpc`` = the
  sampling fraction of each PSU). Later stages add their own variance (with their own
  ``fpc`` probabilities) multiplied by the inclusion probability of the parent PSU, as R's
  ``multistage`` recursion does. Lonely-PSU rules are R's.
* **Joint-probability (Horvitz-Thompson) forms** for one-stage designs: a matrix
  ``Dcheck[i, j] = 1 - pi_i pi_j / pi_ij`` over the PSUs, and the variance of the total of
  ``x`` is ``t' Dcheck t`` (HT) or ``t' Dcheck t - sum_i t_i^2 (1' Dcheck)_i`` (Yates-Grundy,
  ``variance="YG"``), ``t`` the PSU totals of the weighted values. ``Dcheck`` is

  - ``ppsmat(joint)``: computed from given joint inclusion probabilities (R ``pi2Dcheck``,
    entries below ``tolerance`` in absolute value set to 0 as R does);
  - ``"overton"``: Overton's approximation ``pi_ij ~ ...``, i.e. off-diagonal
    ``1 - (n - (pi_i + pi_j)/2)/(n - 1)`` within a stratum, 0 across strata, diagonal
    ``1 - pi_i``;
  - ``HR(psum)``: Hartley-Rao, off-diagonal ``1 - (n - pi_i - pi_j + p2bar)/(n - 1)`` with
    ``p2bar = sum_U pi_k^2 / n`` given per stratum, or estimated by the stratum's mean
    sampled ``pi`` when ``psum`` is None (R ``HR()``).

Domains keep every row (R sets the probability of rows outside to ``Inf``): the influence
values are zero outside and every PSU stays in its stratum.

Differences from R, on purpose (see ``docs/pps_without_replacement.md``): R's Brewer pairs
``1 - pi_i`` with the PSU totals in sorted-id order but the factors in row order, so its
variance changes when the rows of a stratum are not sorted by PSU id; here each PSU gets
its own factor. R's ``HRDcheck`` zeroes pairs whose ``pi_i + pi_j`` is exactly 1 (a test
copied from Overton's, where it means two certainty units); here the Hartley-Rao formula is
used for every pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse

from .._validate import numeric_column
from .taylor import LonelyPSUError, Stage

PPS_METHODS = ("brewer", "overton", "hr")
PPS_VARIANCES = ("HT", "YG")


@dataclass(frozen=True)
class PPSMat:
    """Joint inclusion probabilities for the Horvitz-Thompson / Yates-Grundy variance.

    ``joint`` is one of: a (K, K) array over all PSUs in order of first appearance in the
    data; a DataFrame whose index and columns are the PSU ids (the ``ids`` column's values,
    or the data's index labels without ``ids``); or a mapping ``{stratum: matrix}`` with one
    such array/DataFrame per stratum (PSUs of different strata are sampled independently).
    """

    joint: Any
    tolerance: float = 1e-4


@dataclass(frozen=True)
class HartleyRao:
    """Hartley-Rao's approximation; ``psum`` is ``sum_U pi_k^2 / n`` (one number for every
    stratum, or a mapping stratum -> number); None estimates it by the mean sampled pi."""

    psum: Any = None


def ppsmat(joint: Any, tolerance: float = 1e-4) -> PPSMat:
    """R's ``ppsmat(jointprob, tolerance)``: HT/YG variance from joint inclusion probabilities.

    ``Dcheck`` entries ``(pi_ij - pi_i pi_j)/pi_ij`` smaller than ``tolerance`` in absolute
    value are set to 0, as R does (R's default 1e-4); pass ``tolerance=0`` to keep them all.
    """
    return PPSMat(joint, tolerance)


@dataclass(frozen=True)
class PPSCov:
    """The sampling covariance of the inclusion indicators given directly (R ``ppscov``):
    ``probcov`` is Delta (``pi_ij - pi_i pi_j``) or, with ``weighted=True``, the weighted
    covariance Dcheck (``Delta_ij / pi_ij``, what ``ppsmat`` computes from joint
    probabilities). A (K, K) array over the sampled PSUs in order of first appearance, a
    PSU-labelled DataFrame, or a scipy sparse matrix."""

    probcov: Any
    weighted: bool = False


def ppscov(probcov: Any, weighted: bool = False) -> PPSCov:
    """R's ``ppscov(probcov, weighted)``: a PPS design from the covariance of the sampling
    indicators. ``weighted=True``: ``probcov`` is Dcheck and enters the HT/YG formulas as it
    is. ``weighted=False`` (R 4.5; R 4.1.1 fails on it): Delta is weighted as R weights it,
    ``Delta_ij w_i w_j`` off the diagonal and ``Delta_ii w_i`` on it (``w = 1 / pi``), i.e.
    ``pi_ij`` approximated by ``pi_i pi_j`` off the diagonal; so it equals ``ppsmat`` of the
    joint probabilities only on the diagonal."""
    return PPSCov(probcov, bool(weighted))


def poisson_sampling(p: Any) -> PPSCov:
    """R's ``poisson_sampling(p)``: units sampled independently with probabilities ``p`` (one
    per sampled unit, in data order): ``ppscov(diag(1 - p), weighted=True)``, stored sparse,
    so the HT variance is ``sum (1 - p_i) (w_i y_i)^2``."""
    p = np.asarray(p, dtype=float).reshape(-1)
    if not (np.isfinite(p).all() and (p > 0).all() and (p <= 1).all()):
        bad = np.flatnonzero(~(np.isfinite(p) & (p > 0) & (p <= 1)))[:5].tolist()
        raise ValueError(f"poisson_sampling: probabilities must be in (0, 1]; positions {bad} "
                         "are not. Fix: pass the sampled units' inclusion probabilities.")
    return PPSCov(sparse.diags(1 - p).tocsr(), True)


def HR(psum: Any = None) -> HartleyRao:  # noqa: N802 - R's name
    """R's ``HR(psum)``: Hartley-Rao variance. ``psum = sum over the population of pi_k^2,
    divided by the sample size n``: a number, or a mapping stratum -> number; None estimates
    it from the sample (R ``HR()``)."""
    return HartleyRao(psum)


@dataclass(frozen=True)
class PPSSpec:
    """A validated ``pps=`` argument: the method name and its payload."""

    method: str
    variance: str
    joint: Any = None
    tolerance: float = 1e-4
    psum: Any = None
    weighted: bool = False

    @property
    def label(self) -> str:
        return {"brewer": "Brewer", "overton": "Overton", "hr": "Hartley-Rao",
                "ppsmat": "joint probabilities",
                "ppscov": "sampling covariance"}[self.method] + f" ({self.variance})"


def parse_pps(pps: Any, variance: str) -> PPSSpec | None:
    """Validate ``pps=`` and ``variance=`` of SurveyDesign (None without ``pps``); raises
    ValueError naming the fix."""
    if pps is None:
        if variance != "HT":
            raise ValueError(f"variance={variance!r} needs pps= (R: 'Only variance=\"HT\" "
                             "supported for this design'). Fix: drop variance= or give pps=.")
        return None
    if variance not in PPS_VARIANCES:
        raise ValueError(f"variance={variance!r}: choose 'HT' (Horvitz-Thompson) or 'YG' "
                         "(Yates-Grundy), as R's svydesign(variance=).")
    if isinstance(pps, str):
        method = pps.lower()
        if method not in PPS_METHODS:
            raise ValueError(f"pps={pps!r}: choose 'brewer', 'overton', 'hr' (or HR(psum)), "
                             "or ppsmat(joint) with joint inclusion probabilities.")
        spec = PPSSpec(method, variance)
    elif isinstance(pps, HartleyRao):
        spec = PPSSpec("hr", variance, psum=pps.psum)
    elif isinstance(pps, PPSMat):
        tol = float(pps.tolerance)
        if not tol >= 0:
            raise ValueError(f"ppsmat(tolerance={pps.tolerance!r}): must be >= 0.")
        spec = PPSSpec("ppsmat", variance, joint=pps.joint, tolerance=tol)
    elif isinstance(pps, PPSCov):
        spec = PPSSpec("ppscov", variance, joint=pps.probcov, weighted=pps.weighted)
    else:
        raise ValueError(f"pps={pps!r}: give 'brewer', 'overton', 'hr', HR(psum), "
                         "ppsmat(joint), ppscov(probcov) or poisson_sampling(p) (from "
                         "surveysynth.variance.pps).")
    if spec.method == "brewer" and variance != "HT":
        raise ValueError("variance='YG' with pps='brewer': Brewer's approximation has no "
                         "Yates-Grundy form (R: 'Only variance=\"HT\" supported'). Fix: "
                         "variance='HT', or pps='overton' / HR() / ppsmat(joint) for YG.")
    return spec


def _rows(index: pd.Index, mask: np.ndarray, k: int = 5) -> str:
    where = np.flatnonzero(mask)
    labels = [repr(v) if isinstance(v, str) else str(v) for v in index[where[:k]]]
    more = f" and {where.shape[0] - k} more" if where.shape[0] > k else ""
    return f"rows {', '.join(labels)}{more}"


def _constant_within(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Rows whose value differs from the first value of their code (cluster)."""
    K = int(codes.max()) + 1
    first = np.full(K, -1, dtype=np.int64)
    order = np.arange(codes.shape[0] - 1, -1, -1)
    first[codes[order]] = order
    return values != values[first[codes]]


def pps_popsize(frame: pd.DataFrame, fpc_vars: list[str], ids_codes: list[np.ndarray],
                strata_codes: list[np.ndarray], sampsize: list[np.ndarray]) -> np.ndarray:
    """Population sizes per row and stage from ``fpc`` given as inclusion probabilities.

    R (``as.fpc`` with ``pps``) requires the fpc of a PPS design as sampling fractions and
    turns them into ``popsize = n/fpc``, so ``1 - n/popsize`` is each PSU's ``1 - pi_i``.
    Here the probabilities must be in (0, 1] and constant within each cluster of their
    stage (R only warns). ``sampsize[s]`` is the number of sampled clusters of each
    stage-s stratum (codes ``strata_codes[s]``).
    """
    S = len(ids_codes)
    if len(fpc_vars) != S:
        raise ValueError(f"fpc: {len(fpc_vars)} column(s) {fpc_vars} for a {S}-stage design. "
                         "Fix: one fpc column (inclusion probabilities) per stage of ids.")
    index = frame.index
    fpc = np.column_stack([numeric_column(frame, c, "fpc") for c in fpc_vars])
    sampsize_rows = np.column_stack([sampsize[s][strata_codes[s]] for s in range(S)])
    for s, col in enumerate(fpc_vars):
        v = fpc[:, s]
        bad = ~np.isfinite(v) | (v <= 0) | (v > 1)
        if bad.any():
            raise ValueError(
                f"fpc column {col!r}: a PPS design needs fpc as inclusion probabilities in "
                f"(0, 1], got {v[bad][:3].tolist()} in {_rows(index, bad)}. Fix: give each "
                "PSU's probability of selection (R: 'fpc must be specified as sampling "
                "fraction for PPS sampling')."
            )
        varies = _constant_within(ids_codes[s], v)
        if varies.any():
            raise ValueError(
                f"fpc column {col!r} varies within a stage-{s + 1} cluster "
                f"({_rows(index, varies)}). Fix: the inclusion probability is a property of "
                "the cluster: give the same value on all its rows."
            )
    return sampsize_rows / fpc


# ---------------------------------------------------------------------------------- helpers
def _cluster_totals(cluster: np.ndarray, K: int, Z: np.ndarray) -> np.ndarray:
    """(K, C) column totals of ``Z`` (n, C) within clusters 0..K-1."""
    n = Z.shape[0]
    agg = sparse.csr_matrix((np.ones(n), (cluster, np.arange(n))), shape=(K, n))
    return np.asarray(agg @ Z)


def _first_of(codes: np.ndarray, values: np.ndarray, K: int) -> np.ndarray:
    first = np.full(K, -1, dtype=np.int64)
    order = np.arange(codes.shape[0] - 1, -1, -1)
    first[codes[order]] = order
    return values[first]


def _block_pairs(stratum: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (i, j) pairs of units in the same stratum, vectorized (sum_h n_h^2 pairs)."""
    order = np.argsort(stratum, kind="stable")
    counts = np.bincount(stratum)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    size = counts[stratum[order]]  # block size of each unit (sorted order)
    start = starts[stratum[order]]
    rows = np.repeat(np.arange(order.shape[0]), size)
    offsets = np.arange(rows.shape[0]) - np.repeat(np.cumsum(size) - size, size)
    cols = np.repeat(start, size) + offsets
    return order[rows], order[cols]


# ---------------------------------------------------------------------------------- the engine
@dataclass(frozen=True)
class BrewerStage:
    """One stage of a Brewer design: per-cluster factors instead of per-stratum ones."""

    stage: Stage
    f: np.ndarray  # (K,) 1 - pi of each cluster (R: (popsize - n)/popsize)
    multiplier: np.ndarray  # (K,) product of the parent clusters' pi (1 at stage 1)


class PPSVariance:
    """Variance engine of a PPS-without-replacement design (built by SurveyDesign)."""

    def __init__(self, spec: PPSSpec, stages: list[BrewerStage] | None = None,
                 cluster: np.ndarray | None = None, dcheck: sparse.csr_matrix | None = None,
                 lonely_psu: str = "fail") -> None:
        self.spec = spec
        self._brewer = stages
        self._cluster = cluster
        self._dcheck = dcheck
        self.lonely_psu = lonely_psu
        if dcheck is not None:
            # Yates-Grundy subtracts sum_i t_i^2 (1' Dcheck)_i (R ygvar.matrix)
            self._colsum = np.asarray(dcheck.sum(axis=0)).ravel()

    @property
    def dcheck(self) -> np.ndarray | None:
        """The (K, K) ``Dcheck`` matrix of a joint-probability design (None for Brewer)."""
        return None if self._dcheck is None else self._dcheck.toarray()

    # -- public hooks -----------------------------------------------------------------
    def variance(self, z: np.ndarray, dom: np.ndarray, D: int) -> np.ndarray:
        """(D, V) variances of the domain totals of the influence values ``z`` (n, V)."""
        Z = _domain_columns(z, dom, D)
        if self._dcheck is not None:
            X = _cluster_totals(self._cluster, self._dcheck.shape[0], Z)
            var = np.einsum("kc,kc->c", X, np.asarray(self._dcheck @ X))
            if self.spec.variance == "YG":
                var = var - self._colsum @ (X * X)
        else:
            var = self._brewer_var(Z, diagonal=True)
        return np.asarray(var).reshape(D, z.shape[1])

    def covariance(self, Z: np.ndarray) -> np.ndarray:
        """(C, C) covariance of the totals of the columns of ``Z`` (n, C)."""
        if self._dcheck is not None:
            X = _cluster_totals(self._cluster, self._dcheck.shape[0], Z)
            cov = X.T @ np.asarray(self._dcheck @ X)
            if self.spec.variance == "YG":
                cov = cov - (X * self._colsum[:, None]).T @ X
            return cov
        return self._brewer_var(Z, diagonal=False)

    # -- Brewer -------------------------------------------------------------------------
    def _brewer_var(self, Z: np.ndarray, diagonal: bool) -> np.ndarray:
        C = Z.shape[1]
        out = np.zeros(C) if diagonal else np.zeros((C, C))
        for number, bs in enumerate(self._brewer or [], start=1):
            out = out + self._brewer_stage(bs, Z, diagonal, number)
        return out

    def _brewer_stage(self, bs: BrewerStage, Z: np.ndarray, diagonal: bool,
                      number: int) -> np.ndarray:
        st = bs.stage
        K, H = st.n_clusters, st.n_strata
        T = _cluster_totals(st.cluster, K, Z)
        s_of_c = st.stratum_of_cluster
        n_h = st.n_psu.astype(float)
        n_c = n_h[s_of_c]
        lonely_h = n_h == 1
        # onestrat: scale = f n/(n-1) (f alone for a lonely PSU); a stratum whose every f is
        # below 1e-7 (all certainty) contributes 0 before any lonely rule
        scale = np.where(n_c > 1, bs.f * n_c / np.where(n_c > 1, n_c - 1.0, 1.0), bs.f)
        not_certain = np.bincount(s_of_c, weights=(bs.f >= 1e-7).astype(float), minlength=H) > 0
        lonely_bad = lonely_h & not_certain
        if self.lonely_psu == "fail" and lonely_bad.any():
            labels = st.labels[lonely_bad]
            shown = ", ".join(map(str, labels[:5]))
            raise LonelyPSUError(
                f"Stratum ({shown}) has only one PSU at stage {number}. Fix: choose "
                "lonely_psu='remove', 'certainty', 'adjust' or 'average' (R's "
                "options(survey.lonely.psu=...)), or collapse strata.")
        is_na = lonely_bad if self.lonely_psu == "average" else np.zeros(H, dtype=bool)
        uncentred = lonely_h if self.lonely_psu == "adjust" else np.zeros(H, dtype=bool)
        scale = np.where(not_certain[s_of_c] & ~is_na[s_of_c], scale, 0.0)
        mean = np.asarray(
            sparse.csr_matrix((np.ones(K), (s_of_c, np.arange(K))), shape=(H, K)) @ T
        ) / n_h[:, None]
        # onestage: the strata of one recursion group (parent cluster) sum, times
        # nstrat/nokstrat ('average': NA strata replaced by the mean of the others)
        g = st.group_of_stratum
        G = int(g.max()) + 1 if H else 1
        if uncentred.any():
            # 'adjust' (R survey 4.5's onestage): a lonely stratum's total is centred on the
            # group's total over its strata's PSU counts; 4.1.1 left it uncentred
            if getattr(self, "survey_version", "4.5") == "4.5":
                sums = mean * n_h[:, None]
                num = np.stack([np.bincount(g, weights=sums[:, c], minlength=G)
                                for c in range(sums.shape[1])], axis=1)
                centre = (num / np.bincount(g, weights=n_h, minlength=G)[:, None])[g]
            else:
                centre = np.zeros_like(mean)
            mean = np.where(uncentred[:, None], centre, mean)
        dev = T - mean[s_of_c]
        nstrat = np.bincount(g, minlength=G).astype(float)
        nok = np.bincount(g, weights=(~is_na).astype(float), minlength=G)
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = nstrat / nok
        if ((nok == 0) & (nstrat > 0)).any():  # every stratum of a group NA: NaN, as R
            C = Z.shape[1]
            return np.full(C, np.nan) if diagonal else np.full((C, C), np.nan)
        w = scale * bs.multiplier * factor[g][s_of_c]
        if diagonal:
            return w @ (dev * dev)
        return (dev * w[:, None]).T @ dev


def _domain_columns(z: np.ndarray, dom: np.ndarray, D: int) -> np.ndarray:
    """(n, D*V): column (d, v) holds ``z[:, v]`` on the rows of domain d, 0 elsewhere."""
    z = np.asarray(z, dtype=float)
    if z.ndim == 1:
        z = z[:, None]
    V = z.shape[1]
    if D == 1:
        return np.where((dom >= 0)[:, None], z, 0.0)
    rows = np.flatnonzero(dom >= 0)
    Z = np.zeros((z.shape[0], D * V))
    Z[rows[:, None], dom[rows][:, None] * V + np.arange(V)[None, :]] = z[rows]
    return Z


# ---------------------------------------------------------------------------------- builders
def build_pps(spec: PPSSpec, stages: list[Stage], pi_rows: np.ndarray,
              popsize: np.ndarray | None, frame: pd.DataFrame, ids_vars: list[str],
              strata_var: str | None, lonely_psu: str) -> PPSVariance:
    """The variance engine of a PPS design, validated.

    ``pi_rows`` are the rows' first-stage inclusion probabilities for the joint-probability
    forms (R's ``allprob``); ``popsize`` the (n, S) population sizes from ``fpc`` (Brewer).
    """
    index = frame.index
    if spec.method == "brewer":
        if popsize is None:
            raise ValueError(
                "pps='brewer' needs fpc= as the PSUs' inclusion probabilities (one column per "
                "stage): Brewer's variance uses 1 - pi of each PSU. Without fpc R's brewer "
                "design is the with-replacement variance: use pps=None for that.")
        out = []
        mult_prev = ratio_prev = None
        for s, st in enumerate(stages):
            K = st.n_clusters
            N = _first_of(st.cluster, popsize[:, s], K)
            n = st.n_psu[st.stratum_of_cluster].astype(float)
            with np.errstate(invalid="ignore"):
                f = np.where(np.isinf(N), 1.0, (N - n) / N)
            if s == 0:
                mult = np.ones(K)
            else:
                parent = st.group_of_stratum[st.stratum_of_cluster]  # cluster code at s-1
                mult = mult_prev[parent] * ratio_prev[parent]
            out.append(BrewerStage(st, f, mult))
            mult_prev, ratio_prev = mult, n / N
        return PPSVariance(spec, stages=out, lonely_psu=lonely_psu)

    if len(stages) > 1:
        raise ValueError(
            f"pps={spec.method!r} with {len(stages)} stages of ids={ids_vars}: the "
            "joint-probability variances are for one-stage designs (R: 'Multistage PPS "
            "sampling not supported with this method'). Fix: ids= the PSU column only, or "
            "pps='brewer' (with fpc per stage) for a multistage design.")
    st = stages[0]
    K = st.n_clusters
    varies = _constant_within(st.cluster, pi_rows)
    if varies.any():
        raise ValueError(
            f"pps={spec.method!r}: the inclusion probability varies within a PSU of "
            f"{ids_vars[0] if ids_vars else 'the rows'!r} ({_rows(index, varies)}). Fix: "
            "probs= (or fpc=) must be the PSU's probability, the same on all its rows.")
    pi = _first_of(st.cluster, pi_rows, K)
    s_of_c = st.stratum_of_cluster
    n_h = np.bincount(s_of_c, minlength=st.n_strata).astype(float)
    if spec.method == "ppsmat":
        D = _dcheck_joint(spec, st, pi, frame, ids_vars, strata_var)
    elif spec.method == "ppscov":
        D = _dcheck_cov(spec, pi, _psu_labels(frame, ids_vars, st))
    else:
        i, j = _block_pairs(s_of_c)
        off = i != j
        i, j = i[off], j[off]
        n = n_h[s_of_c[i]]
        if spec.method == "overton":
            fbar = (pi[i] + pi[j]) / 2
            vals = 1 - (n - fbar) / (n - 1)
            vals = np.where(fbar == 1, 0.0, vals)  # two certainty units (R)
        else:
            p2bar = _hr_p2bar(spec.psum, pi, st)
            vals = 1 - (n - pi[i] - pi[j] + p2bar[i]) / (n - 1)
        D = sparse.csr_matrix(
            (np.r_[vals, 1 - pi], (np.r_[i, np.arange(K)], np.r_[j, np.arange(K)])),
            shape=(K, K))
    return PPSVariance(spec, cluster=st.cluster, dcheck=sparse.csr_matrix(D),
                       lonely_psu=lonely_psu)


def _hr_p2bar(psum: Any, pi: np.ndarray, st: Stage) -> np.ndarray:
    """Hartley-Rao's ``sum_U pi_k^2 / n`` for each PSU's stratum."""
    s_of_c = st.stratum_of_cluster
    H = st.n_strata
    if psum is None:  # R HR(): the stratum's mean sampled pi estimates it
        per = np.bincount(s_of_c, weights=pi, minlength=H) / np.bincount(s_of_c, minlength=H)
        return per[s_of_c]
    if isinstance(psum, Mapping) or isinstance(psum, pd.Series):
        table = dict(psum.items())
        labels = list(st.labels)
        missing = [lab for lab in labels if lab not in table]
        if missing:
            raise ValueError(f"HR(psum): no value for strata {missing[:5]}. Fix: give "
                             "sum_U pi^2 / n for every stratum (keys are the strata labels).")
        per = np.array([float(table[lab]) for lab in labels])
    else:
        try:
            per = np.full(H, float(psum))
        except (TypeError, ValueError):
            raise ValueError(f"HR(psum={psum!r}): give a number or a mapping stratum -> "
                             "number (sum over the population of pi^2, divided by n).") from None
    bad = ~np.isfinite(per) | (per <= 0) | (per > 1)
    if bad.any():
        raise ValueError(f"HR(psum): values must be in (0, 1] (sum_U pi^2 / n <= max pi), "
                         f"got {per[bad][:3].tolist()} for strata {list(st.labels[bad][:3])}.")
    return per[s_of_c]


def _psu_labels(frame: pd.DataFrame, ids_vars: list[str], st: Stage) -> np.ndarray:
    first = _first_of(st.cluster, np.arange(st.cluster.shape[0]), st.n_clusters)
    values = frame[ids_vars[0]].to_numpy() if ids_vars else frame.index.to_numpy()
    out = np.empty(first.shape[0], dtype=object)
    out[:] = values[first].tolist()  # Python scalars: readable in messages
    return out


def _as_matrix(m: Any, labels: np.ndarray, where: str) -> np.ndarray:
    """A joint matrix as an array in the order of ``labels`` (PSU ids)."""
    if isinstance(m, pd.DataFrame):
        idx, cols = list(m.index), list(m.columns)
        missing = [lab for lab in labels if lab not in set(idx) or lab not in set(cols)]
        if missing:
            raise ValueError(f"ppsmat: {where} has no row/column for PSU(s) {missing[:5]}. "
                             "Fix: index and columns must be the PSU ids of the sample.")
        return m.loc[list(labels), list(labels)].to_numpy(dtype=float)
    a = np.asarray(m, dtype=float)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"ppsmat: {where} must be a square matrix, got shape {a.shape}.")
    if a.shape[0] != labels.shape[0]:
        raise ValueError(f"ppsmat: {where} is {a.shape[0]} x {a.shape[1]} for "
                         f"{labels.shape[0]} PSUs. Fix: one row and column per sampled PSU, in "
                         "order of first appearance in the data (or a DataFrame labelled by "
                         "PSU id).")
    return a


def _dcheck_joint(spec: PPSSpec, st: Stage, pi: np.ndarray, frame: pd.DataFrame,
                  ids_vars: list[str], strata_var: str | None) -> sparse.csr_matrix:
    """R ``pi2Dcheck``: ``(pi_ij - pi_i pi_j)/pi_ij``, |values| < tolerance set to 0."""
    labels = _psu_labels(frame, ids_vars, st)
    K = st.n_clusters
    s_of_c = st.stratum_of_cluster
    joint = spec.joint
    if isinstance(joint, Mapping):
        strata_labels = list(st.labels)
        missing = [lab for lab in strata_labels if lab not in joint]
        extra = [k for k in joint if k not in set(strata_labels)]
        if missing or extra:
            raise ValueError(f"ppsmat: the mapping of joint matrices must have one entry per "
                             f"stratum of {strata_var!r}; missing {missing[:5]}, unknown "
                             f"{extra[:5]}.")
        blocks_i, blocks_j, blocks_v = [], [], []
        for h, lab in enumerate(strata_labels):  # a loop over strata, not rows
            members = np.flatnonzero(s_of_c == h)
            P = _as_matrix(joint[lab], labels[members], f"the matrix of stratum {lab!r}")
            _check_joint(P, pi[members], labels[members], f"stratum {lab!r}")
            Dh = _pi2dcheck(P, spec.tolerance)
            ii, jj = np.meshgrid(members, members, indexing="ij")
            blocks_i.append(ii.ravel())
            blocks_j.append(jj.ravel())
            blocks_v.append(Dh.ravel())
        return sparse.csr_matrix((np.concatenate(blocks_v), (np.concatenate(blocks_i),
                                                              np.concatenate(blocks_j))),
                                 shape=(K, K))
    P = _as_matrix(joint, labels, "the joint matrix")
    _check_joint(P, pi, labels, "the joint matrix")
    return sparse.csr_matrix(_pi2dcheck(P, spec.tolerance))


def _dcheck_cov(spec: PPSSpec, pi: np.ndarray, labels: np.ndarray) -> sparse.csr_matrix:
    """R ``pps_design.ppsdcheck`` (the matrix as given) / ``ppsdelta`` (Delta weighted)."""
    m = spec.joint
    K = labels.shape[0]
    if sparse.issparse(m):
        M = sparse.csr_matrix(m, dtype=float)
        if M.shape != (K, K):
            raise ValueError(f"ppscov: the matrix is {M.shape[0]} x {M.shape[1]} for {K} "
                             "sampled PSUs. Fix: one row and column per sampled PSU, in order "
                             "of first appearance in the data.")
    else:
        M = sparse.csr_matrix(_as_matrix(m, labels, "the covariance matrix"))
    if not np.isfinite(M.data).all():
        raise ValueError("ppscov: the covariance matrix has non-finite entries. Fix: give "
                         "finite covariances of the sampling indicators.")
    if abs(M - M.T).max() > 1e-12 * max(abs(M).max(), 1.0):
        raise ValueError("ppscov: the covariance matrix is not symmetric. Fix: pass the "
                         "covariance of the sampling indicators (symmetric).")
    if spec.weighted:
        return M
    w = 1.0 / pi
    D = sparse.lil_matrix(sparse.diags(w) @ M @ sparse.diags(w))
    D.setdiag(M.diagonal() * w)
    return sparse.csr_matrix(D)


def _pi2dcheck(P: np.ndarray, tolerance: float) -> np.ndarray:
    d = np.diag(P)
    D = (P - np.outer(d, d)) / P
    D[np.abs(D) < tolerance] = 0.0
    return D


def _check_joint(P: np.ndarray, pi: np.ndarray, labels: np.ndarray, where: str) -> None:
    """Joint probabilities: finite, in (0, 1], symmetric, diagonal = pi, pi_ij <= min pi."""
    def lab(x: Any) -> str:
        x = x.item() if isinstance(x, np.generic) else x
        return repr(x)

    def pairs(mask: np.ndarray) -> str:
        ij = np.argwhere(mask)[:3]
        return ", ".join(f"({lab(labels[a])}, {lab(labels[b])})" for a, b in ij)

    bad = ~np.isfinite(P) | (P <= 0) | (P > 1)
    if bad.any():
        raise ValueError(f"ppsmat: {where} has entries outside (0, 1] at PSU pairs {pairs(bad)}. "
                         "Fix: joint inclusion probabilities must be positive (a zero pi_ij "
                         "makes the HT variance undefined) and at most 1; a certainty unit "
                         "(pi_i = 1) has pi_ij = pi_j (some samplers leave those rows 0).")
    asym = np.abs(P - P.T) > 1e-12 * np.maximum(np.abs(P), np.abs(P.T)) + 1e-15
    if asym.any():
        raise ValueError(f"ppsmat: {where} is not symmetric at PSU pairs {pairs(asym)}. Fix: "
                         "pi_ij = pi_ji; check the matrix is not transposed or misaligned.")
    d = np.diag(P)
    # 1e-6: R's own ?multiframe data (phoneframes: PiklA stored to 9 digits) differ from
    # their probabilities by 1.4e-8; a misaligned matrix differs by far more
    off = np.abs(d - pi) > 1e-6 * pi
    if off.any():
        k = np.flatnonzero(off)[:3]
        shown = ", ".join(f"{lab(labels[a])}: {d[a]:.10g} vs {pi[a]:.10g}" for a in k)
        raise ValueError(f"ppsmat: the diagonal of {where} must be the PSUs' inclusion "
                         f"probabilities (probs=/fpc=), differs at {shown}. Fix: check the "
                         "PSU order (first appearance in the data) or the probabilities.")
    too_big = P > np.minimum.outer(d, d) * (1 + 1e-10)
    if too_big.any():
        raise ValueError(f"ppsmat: {where} has pi_ij > min(pi_i, pi_j) at PSU pairs "
                         f"{pairs(too_big)}: not a valid joint probability.")
