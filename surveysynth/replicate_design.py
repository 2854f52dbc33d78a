"""Replicate-weight designs: user-supplied weights (R ``svrepdesign``), Preston's multistage
rescaled bootstrap, Rao-Wu bootstrap, jackknife (JK1/JKn), BRR and Fay (R ``as.svrepdesign``).

A :class:`ReplicateDesign` has every estimator of :class:`~surveysynth.SurveyDesign` (``total``,
``mean``, ``ratio``, ``proportion``, ``quantile``, ``by=``, ``subset``, ``deff``) plus
:meth:`ReplicateDesign.with_replicates` for any statistic (R ``withReplicates``). Estimates and
SEs are R ``survey`` 4.1's on the same replicate weights:

* point estimates use the full-sample weights; each replicate re-estimates the statistic with
  its replicate weights, all replicates and domains at once by one sparse-dense matrix product;
* ``V = scale * sum_r rscales_r (theta_r - centre)^2`` (R ``svrVar``), centre the mean of the
  replicates (``mse=False``) or the full-sample estimate (``mse=True``);
* domains (``by=``, ``subset``, ``na_rm``) drop the other rows, as R's ``[.svyrep.design``;
* degrees of freedom are the rank of the domain's analysis-weight matrix minus 1 (R ``degf``),
  used by quantile intervals and ``ci="t"``;
* quantiles: R's ``svyquantile.svyrep.design`` default (``interval.type="mean"``: Woodruff's
  interval from the replicate variance of the share below the estimate, t with ``degf``).

Replicate weights are held compactly, as R's ``repweights_compressed``: one row of factors per
distinct replicate unit (PSU, or last-stage cluster for Preston) and an index from data rows to
those rows, optionally in float32 (computations are always in float64).

Decisions where R has no answer: ``svyratio(..., deff=TRUE)`` errors in R 4.1 on replicate
designs; here the ratio deff is the replicate variance over the SRS variance of the linearized
total (the Taylor definition). ``deff`` counts rows with positive weight as the sample size (R
counts every row, which differs only when some sampling weights are zero).
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse

from ._validate import first_rows, numeric_column, parse_vars, require_columns
from .estimate import Estimators, weighted_quantile
from .variance.generators import canty_davison_factors
from .variance.replicate_weights import (
    as_generator,
    brr_factors,
    jackknife_factors,
    preston_factors,
    rank_like_r,
    rao_wu_factors,
    replicate_covariance,
    replicate_variance,
    warn_dropped,
)

SVREP_TYPES = ("BRR", "Fay", "JK1", "JKn", "bootstrap", "ACS", "successive-difference", "JK2",
               "other")
_GENERATED_TYPES = ("mrbbootstrap", "subbootstrap")
_BLOCK_BYTES = 256 * 2**20


class ReplicateDesign(Estimators):
    """A survey sample with replicate weights (R ``svrepdesign``).

    Parameters
    ----------
    data : pandas.DataFrame
        The sample, one row per unit (never mutated).
    repweights : replicate weights, one column per replicate: a list of column names, an
        R-style formula ``"~w1+w2"``, a regular expression matched against the column names
        (R: ``repweights="repwt[0-9]+"``), or an (n, R) array / DataFrame.
    weights : full-sample sampling weights (column name or array); ``None`` means 1 for every
        row, with R's warning.
    type : ``"BRR"``, ``"Fay"``, ``"JK1"``, ``"JKn"``, ``"bootstrap"``, ``"ACS"``,
        ``"successive-difference"``, ``"JK2"`` or ``"other"``: fixes ``scale``/``rscales`` as R
        does (BRR: 1/R; Fay: 1/(R (1-rho)^2); bootstrap: ``bootstrap_average``/(R-1); JK1:
        (R-1)/R guessed with a warning; JKn: ``rscales`` required with combined weights;
        ACS / successive-difference: 4/R; JK2: 1; other: given, else 1 with a warning).
    scale, rscales : the overall and per-replicate multipliers of R's variance formula.
    rho : Fay's coefficient (required for ``type="Fay"``).
    mse : centre replicates on the full-sample estimate (R ``mse=TRUE``). ``None`` (default):
        ``True`` for ``type="ACS"`` and ``False`` otherwise, as R survey 4.5 (which also warns
        when ``mse=False`` is given for ACS, as we do); with ``survey_version="4.1"``,
        ``False`` for every type (R survey 4.1.1's ``getOption("survey.replicates.mse")``).
    survey_version : ``"4.5"`` (default) or ``"4.1"``: which R survey's ``mse`` default.
    combined_weights : the replicate columns already include the sampling weights (R's
        default, as in ACS files); ``False``: they are factors multiplied by ``weights``.
    bootstrap_average : for ``type="bootstrap"``, how many bootstrap samples each column
        averages (R ``bootstrap.average``).
    fpc, fpctype : per-replicate finite population corrections (R: ``"fraction"`` f,
        multiplying rscales by 1 - f, or ``"correction"`` 1 - f).
    dtype : storage type of the replicate weights (``"float32"`` halves memory; sums are
        always computed in float64).

    The analysis API is the estimators (``mean``, ``total``, ``ratio``, ``proportion``,
    ``quantile``), ``subset``, the replicate-design makers and calibration. Methods whose
    docstring starts "Engine API, internal" (``domains``, ``missing_rows``,
    ``numeric_values``, ``level_indicators``, ``domain_ratios``, ``domain_df``,
    ``resolve_df``, ...) are the interface of estimation engines (also third-party ones,
    entry-point group ``surveysynth.engines``), tables and privacy mechanisms; they keep
    public names because that code lives outside the class (docs/architecture.md).

    Example (usually made from a design by ``bootstrap``, ``jackknife`` or ``brr``):

    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"stype": ["E", "E", "E", "H", "H", "H"],
    ...                    "pw": [10.0, 10.0, 10.0, 5.0, 5.0, 5.0],
    ...                    "api00": [600.0, 650.0, 700.0, 550.0, 600.0, 640.0]})
    >>> rd = ss.SurveyDesign(df, strata="stype", weights="pw").jackknife()
    >>> rd.replicates
    6
    >>> rd.mean("api00")[["variable", "estimate", "se"]].round(2)
      variable  estimate     se
    0    api00    632.22  21.11
    """

    design_kind = "replicate"

    # ------------------------------------------------------------------ construction
    def __init__(
        self,
        data: pd.DataFrame,
        repweights: str | Sequence[str] | np.ndarray | pd.DataFrame,
        weights: str | np.ndarray | None = None,
        type: str = "other",  # noqa: A002 - R's argument name
        scale: float | None = None,
        rscales: float | Sequence[float] | np.ndarray | None = None,
        rho: float | None = None,
        mse: bool | None = None,
        combined_weights: bool = True,
        bootstrap_average: float | None = None,
        fpc: Sequence[float] | np.ndarray | None = None,
        fpctype: str | None = None,
        dtype: Any = np.float64,
        survey_version: str = "4.5",
    ) -> None:
        if not isinstance(data, pd.DataFrame):
            raise TypeError(f"data must be a pandas DataFrame, got {type_name(data)}.")
        if data.shape[0] == 0:
            raise ValueError("data has no rows.")
        if not data.columns.is_unique:
            dup = data.columns[data.columns.duplicated()].tolist()
            raise ValueError(f"data has duplicated column names {dup[:5]}: rename them first.")
        if type not in SVREP_TYPES:
            raise ValueError(f"type={type!r}: choose one of {SVREP_TYPES} (R svrepdesign).")
        mse = _default_mse(type, mse, survey_version)
        frame = data.copy(deep=False)
        n = frame.shape[0]
        rep, rep_names = _repweights_matrix(frame, repweights, n)
        R = rep.shape[1]
        if R < 2:
            raise ValueError(f"repweights: {R} replicate column(s); need at least 2.")
        bad = ~np.isfinite(rep)
        if bad.any():
            j = int(np.argwhere(bad)[0][1])
            raise ValueError(
                f"repweights: column {rep_names[j]!r} has missing or infinite values in "
                f"{first_rows(frame.index, bad[:, j])}. Replicate weights cannot be missing "
                "(R: 'Missing values not allowed in repweights'): fix or drop those rows."
            )
        if weights is None:
            warnings.warn("No sampling weights provided: equal probability assumed",
                          UserWarning, stacklevel=2)
            pw = np.ones(n)
            self.weights_var = None
        elif isinstance(weights, str):
            cols = parse_vars(weights, "weights")
            require_columns(frame, cols, "weights")
            if len(cols) != 1:
                raise ValueError(f"weights={weights!r}: give one column of full-sample weights.")
            pw = numeric_column(frame, cols[0], "weights")
            self.weights_var = cols[0]
        else:
            pw = np.asarray(weights, dtype=float).reshape(-1)
            if pw.shape[0] == 1:  # a scalar: the same weight for every row
                pw = np.full(n, float(pw[0]))
            if pw.shape[0] != n:
                raise ValueError(f"weights: {pw.shape[0]} values for {n} rows of data.")
            self.weights_var = None
        badw = ~np.isfinite(pw) | (pw < 0)
        if badw.any():
            raise ValueError(
                f"weights: must be finite and non-negative; offending "
                f"{first_rows(frame.index, badw)} (R: 'Missing values not allowed in weights')."
            )
        # R's heuristics on whether the replicate columns include the sampling weights
        repwtmn = float(rep.mean())
        wtmn = float(pw.mean())
        if combined_weights and repwtmn < 5 and wtmn / repwtmn > 5:
            warnings.warn(
                f"Data do not look like combined weights: mean replication weight is {repwtmn:g} "
                f"and mean sampling weight is {wtmn:g} (use combined_weights=False for factors).",
                UserWarning, stacklevel=2)
        if not combined_weights and repwtmn > 5 and wtmn / repwtmn < 5:
            warnings.warn(
                f"Data look like combined weights: mean replication weight is {repwtmn:g} and "
                f"mean sampling weight is {wtmn:g} (use combined_weights=True).",
                UserWarning, stacklevel=2)
        scale, rscales = _scales(type, scale, rscales, rho, R, combined_weights, rep,
                                 bootstrap_average, fpc, fpctype)
        self._setup(frame, pw, rep.astype(dtype, copy=False), None, type, scale, rscales, rho,
                    mse, combined_weights, np.ones(n, dtype=bool))

    @classmethod
    def from_factors(cls, frame: pd.DataFrame, pw: np.ndarray, factors: np.ndarray,
                     index: np.ndarray | None, type_: str, scale: float, rscales: np.ndarray,
                     rho: float | None, mse: bool, inside: np.ndarray,
                     source: str = "", combined: bool = False) -> ReplicateDesign:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        A design from compact replicate factors: replicate weight = pw * factors[index].

        ``frame``/``pw``/``inside`` are a design's ``full_data``, ``full_weights`` and
        ``in_subset``; ``factors`` (K, R) and ``index`` (row -> factor row, None: identity)
        come from the generators of :mod:`surveysynth.variance.replicate_weights`.
        ``combined=True``: ``factors`` are the replicate weights themselves (calibration).
        """
        new = object.__new__(cls)
        new.weights_var = None
        new._setup(frame, pw, factors, index, type_, scale, rscales, rho, mse, combined, inside)
        new._source = source
        return new

    def _setup(self, frame, pw, rep, index, type_, scale, rscales, rho, mse, combined, inside):
        self._frame = frame
        self._w = np.asarray(pw, dtype=float)
        self._w.setflags(write=False)
        self._rep = rep
        self._index = index
        self.type = type_
        self.scale = float(scale)
        self.rscales = np.asarray(rscales, dtype=float).reshape(-1)
        self.rho = rho
        self.mse = bool(mse)
        self.combined_weights = bool(combined)
        inside = np.asarray(inside, dtype=bool).copy()
        inside.setflags(write=False)
        self._in = inside
        self._df_cache: dict[tuple[str, int], np.ndarray] = {}
        self._source = getattr(self, "_source", "")

    # ------------------------------------------------------------------ properties
    @property
    def replicates(self) -> int:
        """Number of replicates R."""
        return int(self._rep.shape[1])

    @property
    def degf(self) -> float:
        """Design degrees of freedom: rank of the replicate analysis weights - 1 (R ``degf``)."""
        return float(self._df_core(np.where(self._in, 0, -1), 1)[0])

    @property
    def nbytes(self) -> int:
        """Memory held by the replicate factors (and their row index)."""
        return int(self._rep.nbytes + (0 if self._index is None else self._index.nbytes))

    def replicate_weights(self, kind: str = "analysis", dtype: Any = np.float64) -> np.ndarray:
        """The (n, R) matrix of replicate weights of the rows in :attr:`data`.

        ``kind="analysis"``: the weights each replicate uses (R ``weights(d, "analysis")``);
        ``"replication"``: the stored columns (factors unless combined weights). This
        materializes n x R values: for large designs prefer the estimators.
        """
        if kind not in ("analysis", "replication"):
            raise ValueError(f"kind={kind!r}: choose 'analysis' or 'replication'.")
        rows = np.flatnonzero(self._in)
        k = rows if self._index is None else self._index[rows]
        out = np.asarray(self._rep[k], dtype=dtype)
        if kind == "analysis" and not self.combined_weights:
            out = out * self._w[rows, None].astype(dtype)
        return out

    def _on_subset(self) -> None:
        self._df_cache = {}  # design df depend on the rows in the subset

    # ------------------------------------------------------------------ engine hooks
    def _rep_products(self, MT: sparse.csr_matrix) -> np.ndarray:
        """MT @ (replicate factors), in float64, in column blocks: (C, R)."""
        rep = self._rep
        K, R = rep.shape
        if rep.dtype == np.float64 and rep.flags.c_contiguous:
            return np.asarray(MT @ rep)
        # float32 (or non-contiguous) storage: row blocks converted to float64
        out = np.zeros((MT.shape[0], R))
        MTc = MT.tocsc()
        block = max(1, int(_BLOCK_BYTES // max(R * 8, 1)))
        for k0 in range(0, K, block):
            part = MTc[:, k0 : k0 + block]
            if part.nnz:
                out += part @ np.asarray(rep[k0 : k0 + block], dtype=np.float64)
        return out

    def _replicate_totals(self, cols_data: list[tuple[np.ndarray, np.ndarray]], rows: np.ndarray,
                          C: int) -> np.ndarray:
        """(C, R) replicate totals: sum over rows of analysis weight * value, per column code."""
        pwf = np.ones(rows.shape[0]) if self.combined_weights else self._w[rows]
        k = rows if self._index is None else self._index[rows]
        K = self._rep.shape[0]
        col_idx = np.concatenate([c for c, _ in cols_data])
        vals = np.concatenate([v * pwf for _, v in cols_data])
        krow = np.tile(k, len(cols_data))
        nz = vals != 0
        MT = sparse.coo_matrix((vals[nz], (col_idx[nz], krow[nz])), shape=(C, K)).tocsr()
        return self._rep_products(MT)

    def _replicate_thetas(self, Y, X, dom, D):
        """Full-sample domain ratios (D, V), their replicates (R, D*V) and score values."""
        rows = np.flatnonzero(dom >= 0)
        ds = dom[rows]
        w = self._w[rows]
        V = Y.shape[1]
        Ys = Y[rows]
        Ty = np.column_stack([np.bincount(ds, weights=w * Ys[:, v], minlength=D) for v in range(V)])
        cols = [(ds * V + v, Ys[:, v]) for v in range(V)]
        shared_x = X is not None and bool((X == X[:, :1]).all())
        if X is not None:
            Xs = X[rows]
            Vx = 1 if shared_x else V
            Tx = np.column_stack(
                [np.bincount(ds, weights=w * Xs[:, v], minlength=D) for v in range(Vx)]
            )
            cols += [(D * V + ds * Vx + v, Xs[:, v]) for v in range(Vx)]
            C = D * V + D * Vx
        else:
            C = D * V
        reps = self._replicate_totals(cols, rows, C)  # (C, R)
        R = reps.shape[1]
        ty_r = reps[: D * V].reshape(D, V, R)
        z = np.zeros_like(Y, dtype=float)
        if X is None:
            est = Ty
            th = ty_r
            z[rows] = w[:, None] * Ys
        else:
            tx_r = reps[D * V :].reshape(D, Vx, R)
            with np.errstate(invalid="ignore", divide="ignore"):
                est = Ty / (Tx if not shared_x else Tx[:, :1])
                th = ty_r / tx_r
                Txr = Tx if not shared_x else np.repeat(Tx[:, :1], V, axis=1)
                z[rows] = w[:, None] * (Ys - est[ds] * Xs) / Txr[ds]
        return est, th.reshape(D * V, R).T, z

    def replicate_estimates(self, Y: np.ndarray, X: np.ndarray | None, codes: np.ndarray,
                            count: int) -> tuple[np.ndarray, np.ndarray]:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        Domain ratios of weighted totals (as :meth:`domain_ratios`) and their replicates.

        Returns the (count, V) full-sample estimates and the (R, count*V) replicate estimates
        (domain-major columns), for statistics built on them (R ``return.replicates=TRUE``).
        """
        est, thetas, _ = self._replicate_thetas(Y, X, codes, count)
        return est, thetas

    def _replicate_quantile_ci(self, x, ps, dom, D, crit, qrule, survey_version="4.5"):
        """Quantiles with R's ``repCI``: each replicate's quantile (one call per replicate and
        domain), ``svrVar`` of them centred as the design says, estimate -+ crit * SE."""
        if self.type in ("JK1", "JKn"):
            warnings.warn("Jackknife replicate weights may not give valid standard errors for "
                          "quantiles (R's warning)", UserWarning, stacklevel=3)
        P = ps.shape[0]
        q = np.empty((D, P))
        se = np.empty((D, P))
        for d in range(D):
            rows = np.flatnonzero(dom == d)
            k = rows if self._index is None else self._index[rows]
            pwf = np.ones(rows.shape[0]) if self.combined_weights else self._w[rows]
            W = np.asarray(self._rep[k], dtype=np.float64) * pwf[:, None]
            xd = x[rows]
            q[d] = weighted_quantile(xd, self._w[rows], ps, qrule, survey_version)
            reps = np.vstack([weighted_quantile(xd, W[:, r], ps, qrule, survey_version)
                              for r in range(W.shape[1])])
            var, dropped = replicate_variance(reps, q[d], self.scale, self.rscales, self.mse)
            warn_dropped(dropped)
            se[d] = np.sqrt(var)
        return q, q - crit[:, None] * se, q + crit[:, None] * se

    def _ratio_core(self, Y, X, dom, D):
        """Domain ratios of totals (X None: totals) and their replicate variances."""
        est, thetas, z = self._replicate_thetas(Y, X, dom, D)
        var, dropped = replicate_variance(thetas, est.reshape(-1), self.scale, self.rscales,
                                          self.mse)
        warn_dropped(dropped)
        return est, var.reshape(est.shape), z

    def _ratio_cov(self, Y, X, dom, D):
        """Domain ratios, their (D*V, D*V) replicate covariance (R ``svrVar`` of a matrix of
        replicates: replicates with any NaN dropped, as its ``na.omit``) and score values."""
        est, thetas, z = self._replicate_thetas(Y, X, dom, D)
        cov, dropped = replicate_covariance(thetas, est.reshape(-1), self.scale, self.rscales,
                                            self.mse)
        warn_dropped(np.atleast_1d(dropped))
        return est, cov, z

    def _df_core(self, dom, D) -> np.ndarray:
        """R's ``degf`` of each domain: rank of its analysis-weight matrix minus 1.

        The rank is that of the distinct replicate rows present, each weighted as R's
        (rows x R) matrix weights them, from a pivoted Cholesky of the smaller Gram matrix
        (A'A over replicates, or AA' over replicate units when there are fewer units than
        replicates) with R's QR tolerance: R's number whenever the rank is not numerically
        ambiguous (see :func:`~surveysynth.variance.replicate_weights.rank_like_r`).
        """
        key = (hashlib.sha1(np.ascontiguousarray(dom).view(np.uint8)).hexdigest(), D)
        if key in self._df_cache:
            return self._df_cache[key]
        rows = np.flatnonzero(dom >= 0)
        ds = dom[rows]
        pwf2 = np.ones(rows.shape[0]) if self.combined_weights else self._w[rows] ** 2
        k = rows if self._index is None else self._index[rows]
        out = np.empty(D)
        K = self._rep.shape[0]
        # per domain, weights of each replicate row: c_k = sum of pwf^2 of its data rows
        pair = ds.astype(np.int64) * K + k
        upair, inv = np.unique(pair, return_inverse=True)
        c = np.bincount(inv.reshape(-1), weights=pwf2, minlength=upair.shape[0])
        p_dom = upair // K
        p_k = upair % K
        bounds = np.searchsorted(p_dom, np.arange(D + 1))
        for d in range(D):
            sl = slice(bounds[d], bounds[d + 1])
            kk, cc = p_k[sl], c[sl]
            keep = cc > 0
            if not keep.any():
                out[d] = -1.0
                continue
            out[d] = _rank(self._rep, kk[keep], cc[keep]) - 1.0
        self._df_cache[key] = out
        return out

    # ------------------------------------------------------------------ any statistic
    def with_replicates(self, func: Callable[[np.ndarray, pd.DataFrame], Any],
                        scale_weights: bool = False, level: float = 0.95, ci: str = "normal",
                        progress: bool = False, return_replicates: bool = False):
        """Estimate and replicate SE of any statistic (R ``withReplicates``).

        ``func(weights, data)`` gets a weight vector aligned with :attr:`data` and the data,
        and returns a number, a 1-d array, or a pandas Series (its index names the rows of
        the output). It is called once with the full-sample weights and once per replicate
        with that replicate's analysis weights (``scale_weights=True`` rescales each weight
        vector to sum to 1, as R). Returns the estimator DataFrame (``variable, estimate,
        se, ci_low, ci_high, df``); with ``return_replicates`` also the (R, m) replicate
        estimates.
        """
        data = self.data
        rows = np.flatnonzero(self._in)
        pw = self._w[rows]
        if scale_weights:
            pw = pw / pw.sum()
        full_raw = func(pw.copy(), data)
        names = list(full_raw.index) if isinstance(full_raw, pd.Series) else None
        full = np.atleast_1d(np.asarray(full_raw, dtype=float)).reshape(-1)
        R = self.replicates
        thetas = np.empty((R, full.shape[0]))
        k = rows if self._index is None else self._index[rows]
        pwf = np.ones(rows.shape[0]) if self.combined_weights else self._w[rows]
        it = range(R)
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(it, desc="replicates", unit="rep")
        for r in it:
            wr = np.asarray(self._rep[k, r], dtype=np.float64) * pwf
            if scale_weights:
                wr = wr / wr.sum()
            val = np.atleast_1d(np.asarray(func(wr, data), dtype=float)).reshape(-1)
            if val.shape != full.shape:
                raise ValueError(
                    f"with_replicates: func returned {val.shape[0]} values for replicate {r + 1} "
                    f"but {full.shape[0]} for the full sample; it must return the same shape."
                )
            thetas[r] = val
        var, dropped = replicate_variance(thetas, full, self.scale, self.rscales, self.mse)
        warn_dropped(dropped)
        labels = [(str(x), None) for x in names] if names is not None else (
            [("theta", None)] if full.shape[0] == 1 else
            [(f"theta{i + 1}", None) for i in range(full.shape[0])]
        )
        df = self._df_core(np.where(self._in, 0, -1), 1)
        out = self._frame_out(None, 1, labels, full[None, :], np.sqrt(var)[None, :], df,
                              level, ci)
        return (out, thetas) if return_replicates else out

    # ------------------------------------------------------------------ printing
    def __repr__(self) -> str:
        sub = f"\nsubset: {self.n} of {self._frame.shape[0]} rows" if not self._in.all() else ""
        src = f"\n{self._source}" if self._source else ""
        return (
            f"Call: ReplicateDesign(type={self.type!r}, replicates={self.replicates}, "
            f"scale={self.scale:g}, mse={self.mse}, combined_weights={self.combined_weights})"
            f"{src}\nReplicate weights held as {self._rep.shape[0]} x {self._rep.shape[1]} "
            f"{self._rep.dtype} ({self.nbytes / 2**20:.1f} MiB){sub}"
        )


def _rank(rep: np.ndarray, rows: np.ndarray, c: np.ndarray) -> int:
    """Rank of the analysis-weight matrix of ``rows`` of ``rep`` weighted by ``c``.

    With more rows than replicates, an evenly spaced subset of about 1.125 R rows is tried
    first: if it already has full column rank R, so has the whole matrix (the rank cannot
    exceed R), which saves the (rows x R^2) Gram product; otherwise the full Gram matrix.
    """
    R = rep.shape[1]
    m = rows.shape[0]

    def rank_of(sel):
        A = np.asarray(rep[rows[sel]], dtype=np.float64) * np.sqrt(c[sel])[:, None]
        G = A @ A.T if A.shape[0] < A.shape[1] else A.T @ A
        return rank_like_r(G)

    if m > R + R // 8 + 8:
        sub = np.unique(np.linspace(0, m - 1, R + R // 8 + 8).astype(np.int64))
        if rank_of(sub) == R:
            return R
    return rank_of(np.arange(m))


def type_name(x: Any) -> str:
    return type(x).__name__


def _repweights_matrix(frame: pd.DataFrame, repweights: Any, n: int) -> tuple[np.ndarray, list]:
    if isinstance(repweights, str) and not repweights.strip().startswith("~"):
        pattern = re.compile(repweights)
        cols = [c for c in frame.columns if pattern.search(str(c))]
        if not cols:
            raise ValueError(
                f"repweights={repweights!r}: no column name matches this regular expression "
                "(R: grep(repweights, names(data))). Fix: give the pattern or a list of names."
            )
    elif isinstance(repweights, (str, list, tuple)):
        cols = parse_vars(repweights, "repweights")
        require_columns(frame, cols, "repweights")
    else:
        if isinstance(repweights, pd.DataFrame):
            names = [str(c) for c in repweights.columns]
            mat = repweights.to_numpy(dtype=float, na_value=np.nan)
        else:
            mat = np.asarray(repweights, dtype=float)
            names = [f"replicate {j + 1}" for j in range(mat.shape[1] if mat.ndim == 2 else 0)]
        if mat.ndim != 2 or mat.shape[0] != n:
            raise ValueError(
                f"repweights: got an array of shape {mat.shape}; need ({n}, R), one row per row "
                "of data and one column per replicate. Fix: transpose or align it with data."
            )
        return mat, names
    mat = np.column_stack([numeric_column(frame, c, "repweights") for c in cols])
    return mat, cols


def _default_mse(type_: str, mse: bool | None, survey_version: str) -> bool:
    """R's ``mse`` for ``svrepdesign``: survey 4.5 makes ACS designs ``mse=TRUE`` unless
    ``mse=FALSE`` is given (then warns: the ACS's published SEs are MSE ones); 4.1.1 used
    ``options(survey.replicates.mse)``, FALSE, for every type."""
    if survey_version not in ("4.5", "4.1"):
        raise ValueError(f"survey_version={survey_version!r}: choose '4.5' (R survey 4.5, the "
                         "default) or '4.1' (R survey 4.1.1's mse default).")
    if mse is None:
        return type_ == "ACS" and survey_version == "4.5"
    if type_ == "ACS" and not mse and survey_version == "4.5":
        warnings.warn("The ACS uses MSE standard errors but you have specified mse=False "
                      "(R survey 4.5's warning).", UserWarning, stacklevel=3)
    return bool(mse)


def _scales(type_, scale, rscales, rho, R, combined, rep, bootstrap_average, fpc, fpctype):
    """scale and rscales exactly as R's svrepdesign.default sets them."""
    rscales = _check_scale_args(type_, scale, rscales, rho, R)
    scale, rscales = _type_scales(type_, scale, rscales, rho, R, bootstrap_average)
    scale, rscales = _jackknife_scales(type_, scale, rscales, R, combined, rep)
    if type_ == "other" and (rscales is None or scale is None):
        warnings.warn("scale or rscales not specified, set to 1", UserWarning, stacklevel=3)
    if rscales is None:
        rscales = np.ones(R)
    if fpc is not None:
        rscales = _fpc_rscales(type_, rscales, R, fpc, fpctype)
    if scale is None:
        scale = 1.0
    rscales = np.broadcast_to(np.asarray(rscales, dtype=float), (R,)).copy()
    return float(scale), rscales


def _check_scale_args(type_, scale, rscales, rho, R):
    """R's checks on rho, rscales and scale; rscales as an array (or None)."""
    if type_ == "Fay" and rho is None:
        raise ValueError("type='Fay': give rho, Fay's coefficient (R: 'you must supply rho').")
    if type_ in ("JK1", "JKn", "ACS", "successive-difference", "JK2", "other") and rho is not None:
        warnings.warn(f"rho not relevant to type {type_!r}: ignored.", UserWarning, stacklevel=4)
    if rscales is not None:
        rscales = np.atleast_1d(np.asarray(rscales, dtype=float))
        if rscales.shape[0] not in (1, R):
            raise ValueError(
                f"rscales has length {rscales.shape[0]}, should be {R} (one per replicate "
                "column) or 1."
            )
        if not np.isfinite(rscales).all() or (rscales < 0).any():
            raise ValueError("rscales: must be finite and non-negative.")
    if scale is not None and (not np.isfinite(scale) or scale < 0):
        raise ValueError(f"scale={scale}: must be finite and non-negative.")
    if type_ in ("ACS", "successive-difference") and (scale is not None or rscales is not None):
        warnings.warn(f"with type {type_} scale= and rscales= are not needed and will be ignored",
                      UserWarning, stacklevel=4)
    return rscales


def _type_scales(type_, scale, rscales, rho, R, bootstrap_average):
    """The scales R fixes by type: BRR, Fay, bootstrap, ACS/successive-difference, JK2."""
    if type_ == "BRR":
        if scale is not None:
            warnings.warn("type='BRR' does not use 'scale='", UserWarning, stacklevel=4)
        scale = 1.0 / R
    elif type_ == "Fay":
        if not 0 <= rho < 1:
            raise ValueError(f"rho={rho}: Fay's coefficient must be in [0, 1).")
        scale = 1.0 / (R * (1.0 - rho) ** 2)
    elif type_ == "bootstrap":
        avg = 1.0 if bootstrap_average is None else float(bootstrap_average)
        scale = avg / (R - 1) if scale is None else scale
        rscales = np.ones(R) if rscales is None else rscales
    elif type_ in ("ACS", "successive-difference"):
        rscales, scale = np.ones(R), 4.0 / R
    elif type_ == "JK2":
        rscales, scale = np.ones(R), 1.0
    return scale, rscales


def _jackknife_scales(type_, scale, rscales, R, combined, rep):
    """JK1's scale and JKn's rscales when not given: guessed as R guesses them (or an error)."""
    if type_ == "JK1" and scale is None:
        if not combined:
            warnings.warn("scale (n-1)/n not provided: guessing from weights", UserWarning,
                          stacklevel=4)
            scale = 1.0 / float(rep[:, 0].max())
        else:
            warnings.warn("scale (n-1)/n not provided: guessing n=number of replicates",
                          UserWarning, stacklevel=4)
            scale = (R - 1.0) / R
    if type_ == "JKn" and rscales is None:
        if combined:
            raise ValueError(
                "type='JKn' with combined weights: give rscales ((n_h - 1)/n_h for each "
                "replicate of stratum h); R: 'Must provide rscales for combined JKn weights'."
            )
        warnings.warn("rscales (n-1)/n not provided: guessing from weights", UserWarning,
                      stacklevel=4)
        rscales = 1.0 / rep.max(axis=0)
    return scale, rscales


def _fpc_rscales(type_, rscales, R, fpc, fpctype):
    """rscales times the per-replicate fpc (R: ``fraction`` 1 - f, ``correction`` as given)."""
    if fpctype not in ("fraction", "correction"):
        raise ValueError("fpc given: set fpctype='fraction' or 'correction' (R).")
    if type_ in ("BRR", "Fay", "JK2", "ACS", "successive-difference", "bootstrap"):
        raise ValueError(f"fpc is not available for type {type_!r} (R).")
    fpc = np.atleast_1d(np.asarray(fpc, dtype=float))
    if fpc.shape[0] != np.broadcast_to(rscales, (R,)).shape[0] or fpc.shape[0] != R:
        raise ValueError(f"fpc has length {fpc.shape[0]}: need one value per replicate ({R}).")
    if ((fpc > 1) | (fpc < 0)).any():
        raise ValueError("fpc: values must be in [0, 1] (R: 'Illegal fpc value').")
    return rscales * (fpc if fpctype == "correction" else 1.0 - fpc)


# ---------------------------------------------------------------------- from SurveyDesign
def _check_design(design: Any) -> None:
    # a SurveyDesign, told by its kind: design.py imports this module (d.bootstrap() and
    # friends), so this module does not import design.py
    if not isinstance(design, Estimators) or design.design_kind != "taylor":
        raise ValueError(f"design must be a SurveyDesign, got {type_name(design)}.")


def bootstrap(design: Any, replicates: int = 500, method: str = "preston", seed: Any = None,
              mse: bool = False, dtype: Any = np.float64, progress: bool = True,
              block: int | None = None) -> ReplicateDesign:
    """Bootstrap replicate design of a SurveyDesign.

    ``method="preston"``: Preston's (2009) multistage rescaled bootstrap, R's
    ``as.svrepdesign(d, type="mrbbootstrap", replicates=)`` (all stages when the design has an
    fpc, stage 1 otherwise); scale 1, rscales 1/(R-1). ``method="rao-wu"``: Rao and Wu's
    rescaled bootstrap with n_h - 1 PSUs drawn with replacement per stratum, R's
    ``type="subbootstrap"``; scale 1/(R-1), rscales 1. Factors are generated vectorized
    over replicates, strata and clusters, in blocks of replicates, and stored compactly
    (one row per last-stage cluster; ``dtype="float32"`` halves memory).
    ``method="canty-davison"``: R's ``type="bootstrap"``
    (:func:`canty_davison`, also exported by :mod:`surveysynth.replicate_generators`).
    The same ``seed`` gives the same replicate weights.
    """
    _check_design(design)
    if method == "canty-davison":  # R type="bootstrap"
        return canty_davison(design, replicates, seed=seed, mse=mse)
    if method not in ("preston", "rao-wu"):
        raise ValueError(f"method={method!r}: choose 'preston', 'rao-wu' or 'canty-davison'.")
    if not isinstance(replicates, (int, np.integer)) or replicates < 2:
        raise ValueError(f"replicates={replicates!r}: need an integer >= 2.")
    rng = as_generator(seed)
    stages = design.stages
    if method == "preston":
        if not design.has_fpc and len(stages) > 1:
            warnings.warn(
                "Design is sampled with replacement (no fpc): only the first stage is used "
                "(as R's mrbbootstrap).", UserWarning, stacklevel=3)
        n1 = np.bincount(stages[0].stratum_of_cluster, minlength=stages[0].n_strata)
        if (n1 < 2).any() and (n1 >= 2).any():
            lone = stages[0].labels[np.flatnonzero(n1 < 2)[:5]]
            warnings.warn(
                f"Preston bootstrap: stratum ({', '.join(map(str, lone))}) has a single PSU and "
                "contributes no variance (as R's mrbweights).", UserWarning, stacklevel=3)
        fac, index = preston_factors(stages, design.has_fpc, int(replicates), rng, dtype=dtype,
                                     block=block, progress=progress)
        type_, scale, rscales = "mrbbootstrap", 1.0, np.full(replicates, 1.0 / (replicates - 1))
        src = f"Preston multistage rescaled bootstrap, {replicates} replicates"
    else:
        fac, index = rao_wu_factors(stages[0], int(replicates), rng, dtype=dtype)
        type_, scale, rscales = "subbootstrap", 1.0 / (replicates - 1), np.ones(replicates)
        src = f"Rao-Wu rescaled bootstrap (n_h - 1 draws), {replicates} replicates"
    return ReplicateDesign.from_factors(design.full_data, design.full_weights, fac, index, type_, scale,
                                         rscales, None, mse, design.in_subset, src)


def jackknife(design: Any, method: str = "auto", mse: bool = False) -> ReplicateDesign:
    """Delete-one-PSU jackknife (R ``as.svrepdesign(type="JK1"|"JKn"|"auto")``).

    ``"auto"``: JK1 without strata, JKn with strata. The stage-1 fpc, if any, enters the
    scale (JK1) or rscales (JKn) as R's ``jk1weights``/``jknweights``; later-stage fpcs are
    dropped (R warns likewise). Lonely PSUs follow the design's ``lonely_psu``.
    """
    _check_design(design)
    if method not in ("auto", "JK1", "JKn"):
        raise ValueError(f"method={method!r}: choose 'auto', 'JK1' or 'JKn'.")
    if method == "auto":
        method = "JKn" if design.has_strata else "JK1"
    if method == "JK1" and design.has_strata:
        raise ValueError("JK1 cannot be used for a stratified design (R): use method='JKn'.")
    if method == "JKn" and not design.has_strata:
        raise ValueError("JKn needs a stratified design (R): use method='JK1'.")
    st = design.stages[0]
    if design.has_fpc and design.n_stages > 1:
        warnings.warn("Finite population corrections after first stage have been dropped",
                      UserWarning, stacklevel=3)
    f = np.asarray(st.fpc_factor, dtype=float) if design.has_fpc else None
    fac, index, scale, rscales = jackknife_factors(st, method == "JKn", f, design.lonely_psu)
    return ReplicateDesign.from_factors(design.full_data, design.full_weights, fac, index, method, scale,
                                         rscales, None, mse, design.in_subset,
                                         f"{method} jackknife, {fac.shape[1]} replicates")


def brr(design: Any, fay_rho: float = 0.0, mse: bool = False,
        hadamard: np.ndarray | None = None) -> ReplicateDesign:
    """Balanced repeated replication (Fay's variant when ``fay_rho`` > 0), R
    ``as.svrepdesign(type="BRR"|"Fay")``: exactly two PSUs per stratum; any fpc is dropped
    with R's warning. See :func:`surveysynth.variance.replicate_weights.brr_factors` for the
    Hadamard matrix used.
    """
    _check_design(design)
    if not design.has_strata:
        raise ValueError("BRR needs a stratified design with 2 PSUs per stratum (R).")
    if design.has_fpc:
        warnings.warn("Finite population correction dropped in conversion", UserWarning,
                      stacklevel=3)
    fac, index, scale = brr_factors(design.stages[0], fay_rho, hadamard)
    type_ = "BRR" if fay_rho == 0 else "Fay"
    return ReplicateDesign.from_factors(design.full_data, design.full_weights, fac, index, type_, scale,
                                         np.ones(fac.shape[1]), fay_rho, mse, design.in_subset,
                                         f"{type_}, {fac.shape[1]} half-samples")


def canty_davison(design: Any, replicates: int = 50, seed: Any = None,
                  mse: bool = False) -> ReplicateDesign:
    """Canty-Davison bootstrap of stage-1 PSUs, R ``as.svrepdesign(type="bootstrap")``.

    Per stratum, n_h PSUs drawn with replacement, or with a stage-1 fpc without replacement
    from a pseudo-population of N_h units (R ``bootweights``); the factor is the number of
    draws. ``scale = nbar / ((nbar - 1)(R - 1))``, nbar the harmonic mean of the PSUs per
    stratum, rscales 1. Later-stage fpcs are dropped with R's warning. Random: checked by its
    defining properties and against R's own replicate weights (docs/weighting.md).
    """
    _check_design(design)
    if not isinstance(replicates, (int, np.integer)) or replicates < 2:
        raise ValueError(f"replicates={replicates!r}: need an integer >= 2.")
    st = design.stages[0]
    popsize = None
    if design.has_fpc:
        if design.n_stages > 1:
            warnings.warn("Finite population corrections after first stage have been dropped",
                          UserWarning, stacklevel=3)
        row_str = np.asarray(st.stratum_of_cluster)[st.cluster]
        popsize = np.empty(st.n_strata)
        popsize[row_str[::-1]] = np.asarray(design.popsize, dtype=float)[::-1, 0]
    fac, scale = canty_davison_factors(st.stratum_of_cluster, int(replicates),
                                       as_generator(seed), popsize, st.labels)
    return ReplicateDesign.from_factors(
        design.full_data, design.full_weights, fac, np.asarray(st.cluster, dtype=np.int64),
        "bootstrap", scale, np.ones(replicates), None, mse, design.in_subset,
        f"Canty-Davison bootstrap, {replicates} replicates")
