"""SurveyDesign: survey data plus the design that produced them, immutable and validated.

The constructor follows R ``survey``'s ``svydesign`` rule for rule (read from
``survey:::svydesign.default`` and ``survey:::as.fpc``, version 4.1):

* ``ids`` give one column per sampling stage; ``None`` or ``"~1"`` means each row is its own
  PSU. Later-stage clusters are nested in earlier ones automatically (R: ``interaction``).
* ``strata`` give one column per stage (R: a formula ``~a+b`` means stage-1 strata ``a`` and
  stage-2 strata ``b``, not their crossing). Later-stage strata are nested in the previous
  stage's clusters, as R does.
* ``nest=True`` makes PSU ids unique within strata; with ``nest=False`` PSU ids that appear in
  more than one stratum are an error (R's ``check.strata``).
* ``fpc`` gives one column per stage: population sizes (all values >= 1, some > 1) or sampling
  fractions (all <= 1); it must be constant within each stratum.
* Without ``weights`` or ``probs`` the weights come from the fpc (product over stages of N/n),
  or are 1 with a warning, as in R.
* Variance is multistage only when an fpc is given; otherwise the ultimate-cluster
  (with-replacement first stage) approximation is used, as in R.

Differences from R, on purpose: bad input fails when the design is built, with a message that
names the column, the first offending rows and the fix (R often fails later or only warns:
``fpc`` varying within a stratum and non-positive weights are errors here). Lonely PSUs are
checked when a variance is computed, as in R, because a domain may not reach the stratum.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ._validate import (
    check_no_na,
    first_rows,
    numeric_column,
    parse_vars,
    require_columns,
)
from .estimate import Estimators, check_survey_version
from .variance.pps import build_pps, parse_pps, pps_popsize
from .variance.taylor import (
    LONELY_OPTIONS,
    DomainPairs,
    Stage,
    design_df,
    taylor_covariance,
    taylor_variance,
)

ColumnSpec = str | Sequence[str] | None
_PANDAS_COW = int(pd.__version__.split(".")[0]) >= 3


def as_pandas(data: Any, name: str = "data") -> pd.DataFrame:
    """``data`` as a pandas DataFrame: a pandas DataFrame as given, a polars DataFrame converted
    at this boundary with ``to_pandas()`` (polars categoricals and enums become pandas
    Categoricals, so tables print their labels). polars is not a dependency: it is recognised
    by the frame's module, never imported here. Anything else is a TypeError naming ``name``."""
    if isinstance(data, pd.DataFrame):
        return data
    module = type(data).__module__ or ""
    if module.split(".")[0] == "polars":
        if type(data).__name__ == "LazyFrame":
            raise TypeError(f"{name} is a polars LazyFrame. Fix: pass {name}.collect() (a polars "
                            "DataFrame) or a pandas DataFrame.")
        to_pandas = getattr(data, "to_pandas", None)
        if type(data).__name__ == "DataFrame" and callable(to_pandas):
            try:
                return to_pandas()
            except ImportError as exc:
                raise ImportError(
                    f"{name}: converting a polars DataFrame to pandas needs polars and pyarrow "
                    f"({exc}). Fix: pip install polars pyarrow, or pass {name}.to_pandas()."
                ) from exc
    raise TypeError(f"{name} must be a pandas or polars DataFrame, got {type(data).__name__}.")


def _codes(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """Integer codes of the distinct combinations of ``columns`` (order of first appearance)."""
    if len(columns) == 1:
        return pd.factorize(frame[columns[0]], sort=False)[0].astype(np.int64, copy=False)
    return _combine([pd.factorize(frame[c], sort=False)[0] for c in columns])


def _combine(codes: list[np.ndarray]) -> np.ndarray:
    """Codes of the crossing of several code vectors (R's ``interaction``, unused levels
    dropped), numbered in order of first appearance.

    Every input is such a code vector already (0..K-1 by first appearance, as
    ``pd.factorize`` gives): one vector is returned as it is (factorizing it again is the
    identity), and each crossing is factorized once, with one row-length key at a time."""
    out = np.asarray(codes[0], dtype=np.int64)
    for c in codes[1:]:
        key = np.multiply(out, int(np.max(c)) + 1, dtype=np.int64)
        key += c
        out = pd.factorize(key, sort=False)[0].astype(np.int64, copy=False)
        del key
    return out


def _first_of(codes: np.ndarray, values: np.ndarray, n_codes: int) -> np.ndarray:
    """Value of ``values`` at the first row of each code (later rows are written first, so
    the first row's index is the one that stays)."""
    first = np.full(n_codes, -1, dtype=np.int64)
    first[codes[::-1]] = np.arange(codes.shape[0] - 1, -1, -1)
    return values[first]


def _nested(clusters: np.ndarray, strata: np.ndarray, str_first: np.ndarray) -> bool:
    """True when every row's stratum is that of its cluster's first row (``str_first``,
    per cluster): each cluster lies in one stratum. One gather and compare, no hashing."""
    return bool(np.array_equal(np.take(str_first, clusters), strata))


def _sample_size(clusters: np.ndarray, strata: np.ndarray) -> np.ndarray:
    """(H,) number of distinct clusters in each stratum (R's ``sampsize``)."""
    H = int(strata.max()) + 1
    str_first = _first_of(clusters, strata, int(clusters.max()) + 1)
    if _nested(clusters, strata, str_first):  # one stratum per cluster: count clusters
        return np.bincount(str_first, minlength=H)
    pairs = _combine([strata, clusters])
    return np.bincount(_first_of(pairs, strata, int(pairs.max()) + 1), minlength=H)


class _WeightedColumns:
    """The weighted columns ``w y`` (and ``w x``) of the rows in some domain, as
    :meth:`SurveyDesign._linearize` reads them: ``V`` columns of Y; X absent (totals), all
    ones (one column ``w``) or V columns; or Y the indicators of ``levels = (codes, L)``.

    The (rows, V) products are never held together: each column is formed in one reused
    buffer when its pair totals are taken (at census scale V row-length products would be
    several times the data), and again on request for the row-level influence values."""

    def __init__(self, Y, X, x_is_one, levels, ws, take) -> None:
        self.levels, self.ws, self._take = levels, ws, take
        self.Y, self.X, self.x_is_one = Y, X, x_is_one
        if levels is None:
            self.V = Y.shape[1]
            self.n_x = 0 if X is None else (1 if x_is_one else X.shape[1])
        else:
            self.codes, self.V = take(levels[0]), levels[1]
            self.n_x = 1
        self._buf = None

    def y(self, v: int, out: np.ndarray | None = None) -> np.ndarray:
        """Row-level ``w y`` of column v (level indicator times w when coded)."""
        if self.levels is not None:
            return np.multiply(self.ws, self.codes == v, out=out)
        return np.multiply(self.ws, self._take(self.Y[:, v]), out=out)

    def x(self, c: int, out: np.ndarray | None = None) -> np.ndarray:
        """Row-level ``w x`` of denominator column c (``w`` itself when X is all ones)."""
        if self.levels is not None or self.x_is_one:
            # into the buffer when one is given: np.bincount copies read-only weights
            # (the design's weights are read-only), a row-length copy per call
            return self.ws if out is None else np.copyto(out, self.ws) or out
        return np.multiply(self.ws, self._take(self.X[:, c]), out=out)

    def pair_totals(self, pairs: DomainPairs):
        """(ty, tx): lists of pair totals of the columns (tx None for totals)."""
        if self._buf is None:
            self._buf = np.empty(self.ws.shape[0])
        if self.levels is not None:
            ty, tw = pairs.level_totals(self.codes, self.V, self.x(0, self._buf))
            return ty, [tw]
        ty = [pairs.totals(self.y(v, self._buf)) for v in range(self.V)]
        if self.n_x == 0:
            return ty, None
        return ty, [pairs.totals(self.x(c, self._buf)) for c in range(self.n_x)]

    def x_totals(self, pairs: DomainPairs) -> list[np.ndarray] | None:
        """Pair totals of the denominator columns (None for totals)."""
        if self.n_x == 0:
            return None
        if self._buf is None:
            self._buf = np.empty(self.ws.shape[0])
        return [pairs.totals(self.x(c, self._buf)) for c in range(self.n_x)]

    def y_totals(self, pairs: DomainPairs, v: int) -> np.ndarray:
        """Pair totals of numerator column v (a fresh array, free to modify)."""
        if self._buf is None:
            self._buf = np.empty(self.ws.shape[0])
        return pairs.totals(self.y(v, self._buf))

    def release(self) -> None:
        """Free the scratch buffer (the pair totals are taken)."""
        self._buf = None


def _stage_pass(pairs: DomainPairs, cols: _WeightedColumns, number: int, est, Tx,
                var: np.ndarray, lonely_psu: str, adjust_domain_lonely: bool,
                survey_version: str = "4.5"):
    """Add one stage's variance of every column to ``var`` (D, V), one column at a time:
    its pair totals, its influence totals ``(ty - R tx) / X`` in place, its variance
    (pair-sized arrays: V + 1 of them at once exceed the rows' own arrays when PSUs x
    domains is larger than the sample). At stage 1 (``est`` None) the estimates and the
    denominators' domain totals are computed; returns ``(est, Tx)``."""
    D, V = pairs.D, cols.V
    first = est is None
    if cols.levels is not None:  # all levels' totals come from one bincount
        ty, tx = cols.pair_totals(pairs)
        if first:
            est, Tx = _domain_ratio(pairs, ty, tx, D)
    else:
        ty, tx = None, cols.x_totals(pairs)
        if first:  # est is filled column by column below, from the same pair totals
            est = np.empty((D, V))
            Tx = None if tx is None else np.column_stack([pairs.domain_totals(t) for t in tx])
    for v in range(V):
        t = cols.y_totals(pairs, v) if ty is None else ty[v]
        c = 0 if tx is None or len(tx) == 1 else v
        with np.errstate(invalid="ignore", divide="ignore"):
            if ty is None and first:
                est[:, v] = pairs.domain_totals(t)
                if tx is not None:
                    est[:, v] /= Tx[:, c]
            if tx is not None:  # the influence totals, in place
                t -= pairs.spread(est[:, v]) * tx[c]
                t /= pairs.spread(Tx[:, c])
        var[:, v] += pairs.variance([t], lonely_psu, adjust_domain_lonely, number,
                                    survey_version)[:, 0]
        if ty is not None:
            ty[v] = None
        del t
    return est, Tx


def _domain_ratio(pairs: DomainPairs, ty: list, tx: list | None, D: int):
    """Domain totals of the pair totals ``ty`` (and ``tx``) and their ratio (the totals when
    tx is None): ``(estimate (D, V), Tx (D, V or 1) or None)``."""
    est = np.empty((D, len(ty)))
    for v, t in enumerate(ty):
        est[:, v] = pairs.domain_totals(t)
    if tx is None:
        return est, None
    Tx = np.column_stack([pairs.domain_totals(t) for t in tx])
    with np.errstate(invalid="ignore", divide="ignore"):
        return est / Tx, Tx


def _variance_order(adjustments: tuple) -> list:
    """The order in which weight adjustments residualize influence values. R's calibrations
    (``postStrata``) apply in the order they were made, as R's ``svyrecvar``; an adjustment
    with ``chain_rule = True`` (the nonresponse adjustment, which R lacks) applies after every
    adjustment made later, as the chain rule of linearization requires (the last step first):
    runs of R calibrations keep R's order and the runs and chain-rule steps go last first."""
    segments: list[list] = []
    for adj in adjustments:
        if getattr(adj, "chain_rule", False) or not segments or getattr(
                segments[-1][-1], "chain_rule", False):
            segments.append([adj])
        else:
            segments[-1].append(adj)
    return [adj for seg in reversed(segments) for adj in seg]


def _check_options(lonely_psu: Any, ultimate_cluster: Any) -> None:
    if lonely_psu not in LONELY_OPTIONS:
        raise ValueError(f"lonely_psu={lonely_psu!r}: choose one of {LONELY_OPTIONS}.")
    if not isinstance(ultimate_cluster, (bool, np.bool_)):
        raise ValueError(f"ultimate_cluster={ultimate_cluster!r}: give True or False "
                         "(R's options(survey.ultimate.cluster=)).")


def domain_ratio_influence(w: np.ndarray, Y: np.ndarray, X: np.ndarray | None, dom: np.ndarray,
                           D: int) -> tuple[np.ndarray, np.ndarray]:
    """Weighted totals (``X`` None) or ratios of the columns of ``Y`` per domain (``dom`` codes
    0..D-1, -1 outside every domain), and each row's linearized (influence) values ``z``:
    w y for a total, w (y - R x) / T_x for a ratio; rows outside the domains are 0."""
    sel = dom >= 0
    ds, ws, Ys = dom[sel], w[sel], Y[sel]
    Ty = np.column_stack(
        [np.bincount(ds, weights=ws * Ys[:, v], minlength=D) for v in range(Y.shape[1])])
    z = np.zeros_like(Y, dtype=float)
    if X is None:
        z[sel] = ws[:, None] * Ys
        return Ty, z
    Xs = X[sel]
    Tx = np.column_stack(
        [np.bincount(ds, weights=ws * Xs[:, v], minlength=D) for v in range(X.shape[1])])
    with np.errstate(invalid="ignore", divide="ignore"):
        est = Ty / Tx
        z[sel] = ws[:, None] * (Ys - est[ds] * Xs) / Tx[ds]
    return est, z


class SurveyDesign(Estimators):
    """A survey sample and its design: strata, multistage clusters, weights and fpc.

    Parameters
    ----------
    data : pandas.DataFrame
        The sample, one row per responding unit. It is copied (never mutated).
    ids : column name, list of names (one per stage), or formula ``"~psu+ssu"``; ``None`` or
        ``"~1"`` for no clustering.
    strata : column name, list (one per stage), formula, or ``None``.
    weights, probs : sampling weights or selection probabilities (a column name, a formula
        of one or more columns multiplied over stages, or an array); give at most one.
    fpc : finite population correction per stage: population sizes or sampling fractions.
    nest : make PSU ids unique within strata (R's ``nest=TRUE``).
    lonely_psu : what a stratum with one PSU contributes to the variance: ``"fail"``
        (error, R's default), ``"remove"``, ``"certainty"``, ``"adjust"`` or ``"average"``,
        with R's ``options(survey.lonely.psu=)`` meaning.
    adjust_domain_lonely : R's ``options(survey.adjust.domain.lonely=)``: apply ``"adjust"``
        and ``"average"`` also to strata where a domain reaches a single PSU.
    survey_version : ``"4.5"`` (default) or ``"4.1"``: which R survey's ``"adjust"`` to
        follow. R 4.5 centres a lonely PSU's total on the mean PSU total over all strata (of
        the stage, within the domain); R 4.1.1 did not centre it (on mu284 with a lonely
        third stratum, R's tests/multistage-rcpp.R example, the SE of the y1 total is 7,261
        under 4.5 and 10,723 under 4.1.1). Other lonely-PSU rules are the same in both.
    pps : PPS sampling without replacement (R's ``svydesign(pps=)``): ``"brewer"`` (fpc =
        the PSUs' inclusion probabilities, any number of stages), ``"overton"``, ``"hr"`` or
        ``HR(psum)`` (Hartley-Rao), or ``ppsmat(joint)`` (joint inclusion probabilities); see
        :mod:`surveysynth.variance.pps` and docs/pps_without_replacement.md.
    variance : ``"HT"`` (Horvitz-Thompson) or ``"YG"`` (Yates-Grundy), for ``pps=``.
    ultimate_cluster : R's ``options(survey.ultimate.cluster=TRUE)``, per design: the
        variance uses the first-stage units only (the ultimate-cluster estimator, with the
        stage-1 fpc), ignoring later stages even when their fpc is given. Without any fpc
        the variance is already the ultimate-cluster one.

    Estimators (``total``, ``mean``, ``ratio``, ``proportion``, ``quantile``) return a pandas
    DataFrame with ``estimate, se, ci_low, ci_high, df`` (see :class:`Estimators`).

    The analysis API is the estimators (``mean``, ``total``, ``ratio``, ``proportion``,
    ``quantile``), ``subset``, the replicate-design makers and calibration. Methods whose
    docstring starts "Engine API, internal" (``domains``, ``missing_rows``,
    ``numeric_values``, ``level_indicators``, ``domain_ratios``, ``domain_df``,
    ``resolve_df``, ...) are the interface of estimation engines (also third-party ones,
    entry-point group ``surveysynth.engines``), tables and privacy mechanisms; they keep
    public names because that code lives outside the class (docs/architecture.md).

    Example (R: ``svydesign(id = ~1, strata = ~stype, weights = ~pw, data = df)``):

    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"stype": ["E", "E", "E", "H", "H", "H"],
    ...                    "pw": [10.0, 10.0, 10.0, 5.0, 5.0, 5.0],
    ...                    "api00": [600.0, 650.0, 700.0, 550.0, 600.0, 640.0]})
    >>> d = ss.SurveyDesign(df, strata="stype", weights="pw")
    >>> d.mean("api00")[["variable", "estimate", "se"]].round(2)
      variable  estimate     se
    0    api00    632.22  21.11
    >>> d.mean("~api00", by="stype")[["stype", "estimate", "se"]].round(2)
      stype  estimate     se
    0     E    650.00  28.87
    1     H    596.67  26.03
    """

    def __init__(
        self,
        data: pd.DataFrame,
        ids: ColumnSpec = None,
        strata: ColumnSpec = None,
        weights: ColumnSpec | np.ndarray = None,
        probs: ColumnSpec | np.ndarray = None,
        fpc: ColumnSpec = None,
        nest: bool = False,
        lonely_psu: str = "fail",
        adjust_domain_lonely: bool = False,
        pps: Any = None,
        variance: str = "HT",
        survey_version: str = "4.5",
        ultimate_cluster: bool = False,
    ) -> None:
        data = as_pandas(data, "data")
        _check_options(lonely_psu, ultimate_cluster)
        pps_spec = parse_pps(pps, variance)  # None without pps=
        if data.shape[0] == 0:
            raise ValueError("data has no rows: a design needs at least two PSUs.")
        check_survey_version(survey_version)
        if not data.columns.is_unique:
            dup = data.columns[data.columns.duplicated()].tolist()
            raise ValueError(f"data has duplicated column names {dup[:5]}: rename them first.")
        # pandas >= 3 is copy-on-write: a shallow copy is isolated from the caller's later edits
        frame = data.copy(deep=not _PANDAS_COW)
        self._frame = frame
        self.nest = bool(nest)
        self.lonely_psu = lonely_psu
        self.adjust_domain_lonely = bool(adjust_domain_lonely)
        self.survey_version = survey_version
        self.ultimate_cluster = bool(ultimate_cluster)
        n = frame.shape[0]

        ids_vars = parse_vars(ids, "ids") or []
        strata_vars = parse_vars(strata, "strata")
        fpc_vars = parse_vars(fpc, "fpc")
        for arg, cols in (("ids", ids_vars), ("strata", strata_vars), ("fpc", fpc_vars)):
            if cols:
                require_columns(frame, cols, arg)
                check_no_na(frame, cols, arg)
        self.ids_vars = ids_vars
        self.strata_vars = strata_vars or None
        self.fpc_vars = fpc_vars or None
        self.has_strata = bool(strata_vars)

        # -- clusters per stage (R: ids[,i] <- interaction(ids[,1:i])) -------------------
        raw_ids = [_codes(frame, [c]) for c in ids_vars] or [np.arange(n, dtype=np.int64)]
        S = len(raw_ids)
        ids_codes = [_combine(raw_ids[: s + 1]) for s in range(S)]
        raw_strata = (
            [_codes(frame, [c]) for c in strata_vars] if strata_vars else [np.zeros(n, np.int64)]
        )
        NS = len(raw_strata)
        if self.nest and self.has_strata:
            ids_codes = [
                _combine(raw_strata[: min(s + 1, NS)] + [ids_codes[s]]) for s in range(S)
            ]
        if not self.nest and self.has_strata:
            self._check_nested(ids_codes[0], raw_strata[0], ids_vars, strata_vars[0])
        # codes are 0..K-1: one PSU when the largest code is 0 (one pass, no sort)
        if int(ids_codes[0].max()) == 0 and not (self.nest and self.has_strata):
            raise ValueError(
                "Design has only one primary sampling unit: variance cannot be estimated. "
                "Fix: check the ids= column (or use ids=None for one PSU per row)."
            )
        strata_codes = [raw_strata[0]] + [
            _combine([raw_strata[min(s, NS - 1)], ids_codes[s - 1]]) for s in range(1, S)
        ]
        # -- sample sizes per stage: distinct clusters within the stage's strata -----------
        sampsize = [_sample_size(ids_codes[s], strata_codes[s]) for s in range(S)]
        # -- fpc -----------------------------------------------------------------------
        if fpc_vars and pps_spec is not None:  # PPS: fpc are probabilities varying by PSU
            popsize = pps_popsize(frame, fpc_vars, ids_codes, strata_codes, sampsize)
        else:
            popsize = (self._popsize(frame, fpc_vars, S, strata_codes, sampsize) if fpc_vars
                       else None)
        self.has_fpc = popsize is not None
        # -- weights ---------------------------------------------------------------------
        self._w = self._weights(frame, weights, probs, popsize, sampsize, strata_codes)
        self._w.setflags(write=False)
        # -- stages for the variance engine ------------------------------------------------
        stages: list[Stage] = []
        multiplier_prev = prev_ratio = np.ones(1)
        for s in range(S):
            clu = ids_codes[s]
            K = int(clu.max()) + 1
            str_of_clu = _first_of(clu, strata_codes[s], K)
            if s > 0 and _combine([clu, strata_codes[s]]).max() + 1 != K:
                raise ValueError(
                    f"ids stage {s + 1} ({ids_vars[s]!r}): some clusters lie in more than one "
                    f"stage-{s + 1} stratum. Fix: make stage-{s + 1} strata constant within "
                    "each cluster."
                )
            H = int(strata_codes[s].max()) + 1
            n_h = sampsize[s].astype(float)
            if popsize is not None:
                N_h = _first_of(strata_codes[s], popsize[:, s], H)
                # R: f <- ifelse(fpc == Inf, 1, (fpc - nPSU)/fpc)
                with np.errstate(invalid="ignore"):
                    fpc_factor = np.where(np.isinf(N_h), 1.0, (N_h - n_h) / N_h)
                ratio = n_h / N_h
            else:
                fpc_factor = np.ones(H)
                ratio = np.zeros(H)
            if s == 0:
                group = np.zeros(H, dtype=np.int64)
                multiplier = np.ones(H)
            else:
                group = _first_of(strata_codes[s], ids_codes[s - 1], H)
                parent_str = stages[s - 1].stratum_of_cluster[group]
                multiplier = multiplier_prev[parent_str] * prev_ratio[parent_str]
            labels = self._stratum_labels(frame, strata_vars, strata_codes[s], s, H, ids_vars)
            stages.append(
                Stage(
                    cluster=clu,
                    stratum_of_cluster=str_of_clu,
                    group_of_stratum=group,
                    n_psu=sampsize[s],
                    fpc_factor=fpc_factor,
                    multiplier=multiplier,
                    labels=labels,
                )
            )
            multiplier_prev, prev_ratio = multiplier, ratio
        self._stages = stages
        self._popsize = popsize
        self._pps = None if pps_spec is None else build_pps(
            pps_spec, stages, 1.0 / self._w, popsize, frame, ids_vars,
            strata_vars[0] if strata_vars else None, lonely_psu)
        if self._pps is not None:
            self._pps.survey_version = survey_version  # lonely_psu="adjust" (Brewer stages)
        self._in = np.ones(n, dtype=bool)
        self._in.setflags(write=False)

    # ------------------------------------------------------------------ construction helpers
    @staticmethod
    def _check_nested(psu, stratum, ids_vars, strata_var) -> None:
        # a PSU lies in more than one stratum iff some row's stratum differs from the
        # stratum of the PSU's first row (no (PSU, stratum) crossing is hashed)
        str_first = _first_of(psu, stratum, int(psu.max()) + 1)
        off = np.take(str_first, psu)
        np.not_equal(off, stratum, out=off)
        bad_psu = np.unique(psu[off.astype(bool)])
        del off
        if bad_psu.shape[0]:
            rows = np.isin(psu, bad_psu)
            name = ids_vars[0] if ids_vars else "row"
            raise ValueError(
                f"Clusters not nested in strata at top level: {bad_psu.shape[0]} PSU(s) of "
                f"{name!r} appear in more than one stratum of {strata_var!r} "
                f"(first offending {first_rows(pd.RangeIndex(psu.shape[0]), rows)}). "
                "Fix: nest=True if PSU ids are only unique within strata (R: nest=TRUE)."
            )

    @staticmethod
    def _popsize(frame, fpc_vars, S, strata_codes, sampsize) -> np.ndarray:
        if len(fpc_vars) != S:
            raise ValueError(
                f"fpc: {len(fpc_vars)} column(s) {fpc_vars} for a {S}-stage design. Fix: give one "
                "fpc column per stage of ids (or none: the with-replacement approximation)."
            )
        fpc = np.column_stack([numeric_column(frame, c, "fpc") for c in fpc_vars])
        n = fpc.shape[0]
        samp = np.column_stack([sampsize[s][strata_codes[s]] for s in range(S)]).astype(float)
        is_pop = bool((fpc > 1).any())
        if is_pop != bool((fpc >= 1).all()):
            big = np.flatnonzero((fpc >= 1).any(axis=1))[:3].tolist()
            small = np.flatnonzero((fpc < 1).any(axis=1))[:3].tolist()
            raise ValueError(
                f"fpc {fpc_vars}: must be all population sizes (>= 1) or all sampling fractions "
                f"(<= 1); rows {big} have values >= 1 and rows {small} values < 1. Fix: use one "
                "kind throughout (R: 'Must have all fpc>=1 or all fpc<=1')."
            )
        if (fpc < 0).any():
            bad = (fpc < 0).any(axis=1)
            raise ValueError(f"fpc: negative values in {first_rows(frame.index, bad)}.")
        with np.errstate(divide="ignore"):
            popsize = fpc if is_pop else samp / fpc
        too_small = popsize < samp
        if too_small.any():
            r, s = np.argwhere(too_small)[0]
            raise ValueError(
                f"fpc column {fpc_vars[s]!r} is smaller than the sample size at stage {s + 1}: "
                f"population {popsize[r, s]:g} < {samp[r, s]:g} sampled clusters in "
                f"{first_rows(frame.index, too_small[:, s])}. Fix: fpc must be the population "
                "count of clusters in the stratum (or the sampling fraction n/N)."
            )
        for s in range(S):
            h = strata_codes[s]
            lo = np.full(int(h.max()) + 1, np.inf)
            hi = np.full(int(h.max()) + 1, -np.inf)
            np.minimum.at(lo, h, popsize[:, s])
            np.maximum.at(hi, h, popsize[:, s])
            varies = lo[h] != hi[h]
            if varies.any():
                raise ValueError(
                    f"fpc column {fpc_vars[s]!r} varies within a stage-{s + 1} stratum "
                    f"({first_rows(frame.index, varies)}). Fix: the fpc must be constant "
                    "within each stratum (R only warns, then mixes values)."
                )
        del n
        return popsize

    def _weights(self, frame, weights, probs, popsize, sampsize, strata_codes) -> np.ndarray:
        if weights is not None and probs is not None:
            raise ValueError("Give weights= or probs=, not both (R: 'Can't specify both').")
        spec = weights if weights is not None else probs
        arg = "weights" if weights is not None else "probs"
        self.weights_var = None
        if spec is None:
            if popsize is not None:
                samp = np.column_stack(
                    [sampsize[s][strata_codes[s]] for s in range(popsize.shape[1])]
                )
                # as R: prob = prod over stages of 1/(N/n), weights = 1/prob
                allprob = 1.0 / (popsize / samp)  # R's allprob, one column per stage
                self._keep_allprob(allprob)
                return 1.0 / np.prod(allprob, axis=1)
            warnings.warn(
                "No weights or probabilities supplied, assuming equal probability",
                UserWarning,
                stacklevel=3,
            )
            return np.ones(frame.shape[0])
        if isinstance(spec, (str, list, tuple)):
            cols = parse_vars(spec, arg)
            require_columns(frame, cols, arg)
            vals = np.column_stack([numeric_column(frame, c, arg) for c in cols])
            if weights is not None:
                self.weights_var = cols[0] if len(cols) == 1 else cols
        else:
            vals = np.asarray(spec, dtype=float)
            if vals.ndim == 0:  # a scalar: the same weight (or probability) for every row
                vals = np.full((frame.shape[0], 1), float(vals))
            elif vals.shape[0] != frame.shape[0]:
                raise ValueError(
                    f"{arg}: got {vals.shape[0]} values for {frame.shape[0]} rows of data. Fix: "
                    "give one value per row (or a single number for all rows)."
                )
            vals = vals.reshape(frame.shape[0], -1)
            cols = [f"<{arg} array>"]
        bad = ~np.isfinite(vals) | (vals <= 0)
        if arg == "probs":
            bad |= vals > 1
        if bad.any():
            row_bad = bad.any(axis=1)
            col = cols[int(np.argwhere(bad)[0][1])] if len(cols) > 1 else cols[0]
            what = "in (0, 1]" if arg == "probs" else "positive and finite"
            raise ValueError(
                f"{arg}: column {col!r} must be {what}; offending {first_rows(frame.index, row_bad)}. "
                "Fix: correct or drop those rows (a zero weight means the unit cannot be "
                "sampled; use subset() for domains)."
            )
        # R holds prob = prod(1/weights) (or prod(probs)) and weights() is 1/prob: the same
        # double inversion here makes weighted quantiles break ties at exact cumulative
        # shares as R does (1/(1/w) differs from w in the last bit for ~14% of values)
        self._keep_allprob(1.0 / vals if arg == "weights" else vals)  # R's allprob
        if arg == "weights":
            return 1.0 / np.prod(1.0 / vals, axis=1)
        return 1.0 / np.prod(vals, axis=1)

    def _keep_allprob(self, allprob: np.ndarray) -> None:
        """R's ``allprob`` (one column per stage), kept only with more than one column: a
        single column is 1 / the weights, which calibration's ``stage=`` derives from them,
        so a one-stage design holds no second copy of its weights."""
        if allprob.shape[1] > 1:
            self._allprob = allprob

    @staticmethod
    def _stratum_labels(frame, strata_vars, codes, s, H, ids_vars) -> np.ndarray:
        if s == 0 and strata_vars:
            first = _first_of(codes, np.arange(codes.shape[0]), H)
            return frame[strata_vars[0]].to_numpy()[first].astype(object)
        if s == 0:
            return np.array(["(unstratified)"], dtype=object)
        return np.array([f"stage-{s + 1} stratum {h + 1}" for h in range(H)], dtype=object)

    # ------------------------------------------------------------------ public properties
    # data, weights, n and subset() come from Estimators (shared with ReplicateDesign)
    design_kind = "taylor"

    @property
    def n_stages(self) -> int:
        """Number of sampling stages (columns of ``ids``; 1 without clustering)."""
        return len(self._stages)

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The sampling stages in integer codes (:class:`~surveysynth.variance.taylor.Stage`),
        read by replicate-weight generators and engines. Their arrays cover the full sample."""
        return tuple(self._stages)

    @property
    def popsize(self) -> np.ndarray | None:
        """Population size of each row's stratum at each stage, (rows of :attr:`full_data`,
        stages), R's ``design$fpc$popsize``; None without an fpc (read-only view)."""
        if self._popsize is None:
            return None
        out = np.asarray(self._popsize).view()
        out.setflags(write=False)
        return out

    @property
    def degf(self) -> float:
        """Design degrees of freedom: PSUs minus strata among the rows (R ``degf``)."""
        dom = np.where(self._in, 0, -1)
        return float(design_df(self._stages[0], dom, 1, self._w > 0)[0])

    @property
    def _variance_stages(self) -> list[Stage]:
        # R recurses into later stages only when an fpc was given and
        # survey.ultimate.cluster is FALSE (svyrecvar/multistage: one.stage)
        if self.__dict__.get("ultimate_cluster", False) or not self.has_fpc:
            return self._stages[:1]
        return self._stages

    # ------------------------------------------------------------------ replicate designs
    def _no_pps_replicates(self, method: str) -> None:
        if self._pps is not None:
            raise ValueError(
                f"{method}() of a PPS-without-replacement design ({self._pps.spec.label}): "
                "replicate weights would ignore the joint inclusion probabilities and read "
                "per-PSU fpc probabilities as stratum fpcs. Fix: build the design without pps= "
                "(and without fpc) for with-replacement replicates.")

    def bootstrap(self, replicates: int = 500, method: str = "preston", seed: Any = None,
                  mse: bool = False, **options: Any):
        """Bootstrap replicate design (Preston's multistage rescaled bootstrap by default).

        See :func:`surveysynth.replicate_design.bootstrap`; returns a ReplicateDesign.
        """
        self._no_pps_replicates("bootstrap")
        from .replicate_design import bootstrap

        return bootstrap(self, replicates=replicates, method=method, seed=seed, mse=mse, **options)

    def sdr(self, replicates: int, sort_variable: str, mse: bool = True, **options: Any):
        """Successive-difference replication (svrep ``as_sdr_design``, the ACS's SDR).

        See :func:`surveysynth.replicate_generators.sdr`; returns a ReplicateDesign.
        """
        self._no_pps_replicates("sdr")
        from .replicate_generators import sdr

        return sdr(self, replicates=replicates, sort_variable=sort_variable, mse=mse, **options)

    def canty_davison(self, replicates: int = 50, seed: Any = None, mse: bool = False):
        """Canty-Davison bootstrap, R ``as.svrepdesign(type="bootstrap")``.

        See :func:`surveysynth.replicate_generators.canty_davison`; returns a ReplicateDesign.
        """
        self._no_pps_replicates("canty_davison")
        from .replicate_generators import canty_davison

        return canty_davison(self, replicates=replicates, seed=seed, mse=mse)

    def gen_boot(self, variance_estimator: str, replicates: int = 500, **options: Any):
        """Generalized bootstrap (svrep ``as_gen_boot_design``).

        See :func:`surveysynth.replicate_generators.gen_boot`; returns a ReplicateDesign.
        """
        self._no_pps_replicates("gen_boot")
        from .replicate_generators import gen_boot

        return gen_boot(self, variance_estimator, replicates=replicates, **options)

    def fays_gen_rep(self, variance_estimator: str, **options: Any):
        """Fay's generalized replication (svrep ``as_fays_gen_rep_design``).

        See :func:`surveysynth.replicate_generators.fays_gen_rep`; returns a ReplicateDesign.
        """
        self._no_pps_replicates("fays_gen_rep")
        from .replicate_generators import fays_gen_rep

        return fays_gen_rep(self, variance_estimator, **options)

    def jackknife(self, method: str = "auto", mse: bool = False, **options: Any):
        """Jackknife replicate design (JK1 unstratified, JKn stratified, as R's "auto")."""
        self._no_pps_replicates("jackknife")
        from .replicate_design import jackknife

        return jackknife(self, method=method, mse=mse, **options)

    def brr(self, fay_rho: float = 0.0, mse: bool = False, **options: Any):
        """Balanced repeated replication (Fay's method with ``fay_rho`` > 0), 2 PSUs/stratum."""
        self._no_pps_replicates("brr")
        from .replicate_design import brr

        return brr(self, fay_rho=fay_rho, mse=mse, **options)

    # ------------------------------------------------------------------ calibration
    #: variance adjustments of calibrations applied so far (R's ``design$postStrata``)
    _calibration: tuple = ()
    #: the PPS-without-replacement variance engine (None: the Taylor recursion)
    _pps = None

    @property
    def is_calibrated(self) -> bool:
        """True after calibrate / rake / post_stratify (R ``is.calibrated``): R's subset of such
        a design keeps every row with weight 0 outside, where it drops the rows otherwise."""
        return bool(self._calibration)

    def with_calibration(self, weights: np.ndarray, adjustment: Any) -> SurveyDesign:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        A copy with calibrated ``weights`` whose linearization variance first passes the
        influence values through ``adjustment.residualize`` (after earlier calibrations'), as
        R's ``svyrecvar`` does with ``postStrata``. Built by :mod:`surveysynth.calibration`."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        w = np.array(weights, dtype=float)
        w.setflags(write=False)
        new._w = w
        new._calibration = self._calibration + (adjustment,)
        return new

    def _calibrated_columns(self, z: np.ndarray, dom: np.ndarray, D: int) -> np.ndarray:
        """(n, D*V) influence of each (domain, column) estimate over all rows, adjusted: a
        calibrated design keeps every row in every domain (R sets weights outside to 0)."""
        V = z.shape[1]
        rows = np.flatnonzero(dom >= 0)
        Z = np.zeros((z.shape[0], D * V))
        Z[rows[:, None], dom[rows][:, None] * V + np.arange(V)[None, :]] = z[rows]
        population_level = tuple(a for a in self._calibration if not getattr(a, "stage", 0))
        for adj in _variance_order(population_level):
            Z = adj.residualize(Z)
        return Z

    def _staged(self, Z: np.ndarray, fn):
        """``fn(stages, Z)`` (a Taylor variance or covariance) with R's calibration within
        clusters (``calibrate(stage=k)``): ``svyrecvar``'s recursion residualizes the values
        within each stage-k cluster before the terms of the stages below k. The stage terms
        add up, so the term of stage s is ``fn(stages[:s], Z_s) - fn(stages[:s-1], Z_s)``
        with ``Z_s`` the values residualized by every calibration within stages < s."""
        stages = self._variance_stages
        within = [a for a in self._calibration if getattr(a, "stage", 0)]
        if not within or len(stages) == 1:
            return fn(stages, Z)
        total = fn(stages[:1], Z)
        for s in range(1, len(stages)):
            for adj in within:
                if adj.stage == s:
                    Z = adj.residualize(Z)
            total = total + fn(stages[:s + 1], Z) - fn(stages[:s], Z)
        return total

    # ------------------------------------------------------------------ engine hooks
    def _ratio_core(self, Y, X, dom, D):
        """Point estimates and Taylor variances of domain ratios of totals (X None: totals)."""
        est, var, z, _, _ = self._linearize(Y, X, dom, D, want_z=True)
        return est, var, z

    def _ratio_core_general(self, Y, X, dom, D):
        """The row-level path of :meth:`_ratio_core`: influence values of every row, then
        their (cluster, domain) totals. Used for calibrated designs (whose influence values
        are residualized row by row) and as the reference the fast path is tested against."""
        est, z = domain_ratio_influence(self._w, Y, X, dom, D)
        if self._pps is not None:  # PPS without replacement: surveysynth.variance.pps
            if self._calibration:
                raise ValueError("A calibrated PPS-without-replacement design has no variance "
                                 "here yet. Fix: calibrate the design without pps=.")
            return est, self._pps.variance(z, dom, D), z
        if self._calibration:
            Z = self._calibrated_columns(z, dom, D)
            var = self._staged(Z, lambda st, M: taylor_variance(
                st, M, np.zeros(M.shape[0], np.int64), 1, self.lonely_psu,
                self.adjust_domain_lonely, self._survey_version))
            return est, var.reshape(est.shape), z
        var = taylor_variance(
            self._variance_stages, z, dom, D, self.lonely_psu, self.adjust_domain_lonely,
            self._survey_version
        )
        return est, var, z

    @property
    def _survey_version(self) -> str:
        """The R survey version whose ``lonely_psu="adjust"`` this design follows (designs
        built without the attribute, e.g. by engines, follow 4.5)."""
        return self.__dict__.get("survey_version", "4.5")

    def _weights_positive(self) -> bool:
        """True when every full-sample weight is > 0 (cached per weight vector)."""
        cached = self.__dict__.get("_positive_cache")
        if cached is None or cached[0] is not self._w:
            cached = (self._w, bool((self._w > 0).all()))
            self.__dict__["_positive_cache"] = cached
        return cached[1]

    def _linearize(self, Y, X, dom, D, *, want_z=True, want_df=False, x_is_one=False,
                   levels=None):
        """Domain ratios of totals, their Taylor variances, and on request the row-level
        influence values, each domain's df (R ``degf``) and row count, in one pass.

        The linearized value of row i in domain d is ``w_i (y_i - R_d x_i) / X_d``, so its
        (cluster, domain) total is ``(ty - R_d tx) / X_d`` with ``ty``, ``tx`` the pair totals
        of ``w y`` and ``w x``: the rows are read once per stage by a bincount over (cluster,
        domain), and everything after works on pairs, not rows. (The difference cancels no
        worse than the row-level ``w (y - R x)``: both carry the rounding of ``R x``.)
        ``x_is_one``: X is all ones (means, proportions); its columns are not read.
        ``levels``: ``(codes, L)``, Y and X None: proportions of the L levels (Y the level
        indicators, X = 1), all levels' pair totals from one bincount over (pair, level).
        Returns ``(est, var, z or None, df or None, n or None)``.
        """
        if self._calibration or self._pps is not None:
            # calibrated designs residualize row by row; PPS-without-replacement designs
            # have their own variance (surveysynth.variance.pps): both take the row path
            if Y is None:
                Y = (levels[0][:, None] == np.arange(levels[1])[None, :]).astype(float)
                X = np.ones_like(Y)
            est, var, z = self._ratio_core_general(Y, X, dom, D)
            return est, var, z, (self._df_core(dom, D) if want_df else None), None
        sel = dom >= 0
        rows = None if bool(sel.all()) else np.flatnonzero(sel)

        def take(a):
            return a if rows is None else a[rows]

        ds, ws = take(dom), take(self._w)
        cols = _WeightedColumns(Y, X, x_is_one, levels, ws, take)
        V = cols.V
        var = np.zeros((D, V))
        est = Tx = dfs = n_dom = None
        for number, stage in enumerate(self._variance_stages, start=1):
            pairs = DomainPairs(stage, take(stage.cluster), ds, D)
            if number == 1:
                if want_df and self._weights_positive():
                    dfs = pairs.df()
                n_dom = pairs.row_counts()
            est, Tx = _stage_pass(pairs, cols, number, est, Tx, var, self.lonely_psu,
                                  self.adjust_domain_lonely, self._survey_version)
            del pairs
        if want_df and dfs is None:
            dfs = self._df_core(dom, D)
        cols.release()
        z = None
        if want_z:  # row-level influence values, zero outside every domain
            z = np.zeros((dom.shape[0], V))
            with np.errstate(invalid="ignore", divide="ignore"):
                for v in range(V):
                    zv = cols.y(v)
                    if cols.n_x:
                        c = 0 if cols.n_x == 1 else v
                        zv -= est[ds, v] * cols.x(c)
                        zv /= Tx[ds, c]
                    z[slice(None) if rows is None else rows, v] = zv
        return est, var, z, dfs, n_dom

    def _ratio_cov(self, Y, X, dom, D):
        """Point estimates, their (D*V, D*V) Taylor covariance and the influence values.

        Estimate (d, v) has influence ``z[:, v]`` on the rows of domain d and 0 elsewhere;
        the covariance is R's ``svyrecvar`` of those columns over the design's rows, as
        ``svyby(..., covmat=TRUE)`` computes it (domain rows stay zero-padded in every
        stratum, so the diagonal is the domain variance of :meth:`_ratio_core`).
        """
        est, _, z = self._ratio_core(Y, X, dom, D)
        if self._calibration:
            Z = self._calibrated_columns(z, dom, D)
            cov = self._staged(Z, lambda st, M: taylor_covariance(
                st, M, np.ones(M.shape[0], dtype=bool), self.lonely_psu,
                self.adjust_domain_lonely, self._survey_version))
            return est, cov, z
        V = Y.shape[1]
        rows = np.flatnonzero(dom >= 0)
        Z = np.zeros((Y.shape[0], D * V))
        Z[rows[:, None], dom[rows][:, None] * V + np.arange(V)[None, :]] = z[rows]
        if self._pps is not None:
            return est, self._pps.covariance(Z), z
        cov = taylor_covariance(self._variance_stages, Z, np.asarray(self._in), self.lonely_psu,
                                self.adjust_domain_lonely, self._survey_version)
        return est, cov, z

    def _engine(self, engine: str):
        eng = super()._engine(engine)
        if eng is not None and self._pps is not None:
            raise ValueError(f"engine={engine!r}: this is a PPS-without-replacement design "
                             f"({self._pps.spec.label}) and the engine would ignore it. Fix: "
                             "engine='native'.")
        return eng

    def _df_core(self, dom, D) -> np.ndarray:
        return design_df(self._stages[0], dom, D, self._w > 0)

    # ------------------------------------------------------------------ printing
    def __repr__(self) -> str:
        K = [int(np.unique(s.cluster[self._in]).shape[0]) for s in self._stages]
        if self.ids_vars:
            kind = f"{self.n_stages} - level Cluster Sampling design" if self.n_stages > 1 else (
                "1 - level Cluster Sampling design"
            )
            clusters = f"With ({', '.join(map(str, K))}) clusters."
        else:
            kind = "Independent Sampling design"
            clusters = ""
        if self.has_strata:
            kind = "Stratified " + (kind if self.ids_vars else "Independent Sampling design")
        fpc = "" if self.has_fpc else " (with replacement)"
        if self._pps is not None:
            fpc = f" (PPS without replacement: {self._pps.spec.label})"
        sub = f"\nsubset: {self.n} of {self._frame.shape[0]} rows" if not self._in.all() else ""
        spec = (
            f"ids={self.ids_vars or '~1'}, strata={self.strata_vars}, weights={self.weights_var}, "
            f"fpc={self.fpc_vars}, nest={self.nest}, lonely_psu={self.lonely_psu!r}"
            + (", ultimate_cluster=True" if self.__dict__.get("ultimate_cluster") else "")
        )
        return f"{kind}{fpc}\n{clusters}\nSurveyDesign({spec}){sub}".replace("\n\n", "\n")
