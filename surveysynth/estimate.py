"""Estimators shared by every design kind: total, mean, ratio, proportion, quantile.

Every estimate here is a ratio of weighted domain totals (a total has no denominator; a mean
divides by the total weight; a proportion is the mean of a level's indicator), so one hook,
``_ratio_core(Y, X, dom, D)``, gives point estimates and variances for all of them. A
linearization design implements it with influence functions; a replicate design with
replicate weights. Quantiles use Woodruff's interval on top of the same hook.

Conventions (R ``survey`` 4.1, the reference):

* domains (``by=``) follow ``svyby``: each group is the design subset to that group, the
  groups ordered as ``interaction(by)`` orders them (first by-variable fastest);
* ``na_rm=True`` removes rows with a missing value from the domain (R: ``design[nas == 0, ]``);
  without it a missing value is an error naming the rows (R would return NA);
* confidence intervals are normal by default (R ``confint``), ``ci="t"`` uses the design
  degrees of freedom; quantile intervals are Woodruff's with the design df (R default);
* ``deff=True`` is variance over the SRS-without-replacement variance, ``deff="replace"``
  over SRS with replacement, as R computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import special, stats

from ._validate import as_list, first_rows, require_columns
from .engines import get_engine
from .levels import category_levels, is_categorical  # public here too (levels.py)
from .results import Covariance, Estimate, confidence_interval, t_critical

__all__ = ["Estimate", "Estimators", "category_levels", "confidence_interval", "is_categorical",
           "t_critical"]  # and the helpers


class Domains(NamedTuple):
    """Domain codes of a design's rows, from :meth:`Estimators.domains`.

    ``codes`` holds the domain of every row of :attr:`Estimators.full_data` (``-1`` outside
    every domain: outside the subset, or removed by ``na_rm``), ``count`` the number of
    domains, ``labels`` their ``by`` values in R ``svyby``'s order (None without ``by``).
    Unpacks as ``codes, count, labels``.
    """

    codes: np.ndarray
    count: int
    labels: pd.DataFrame | None


def _indicators(codes: np.ndarray, L: int) -> np.ndarray:
    """(n, L) float 0/1 indicators of level codes (a row of zeros for code -1)."""
    return (codes[:, None] == np.arange(L)[None, :]).astype(float)


def _ones(like: np.ndarray) -> np.ndarray:
    """A read-only array of ones shaped as ``like`` that takes no memory (a broadcast view):
    the denominator of means and proportions, read by every path but never written."""
    return np.broadcast_to(np.float64(1.0), like.shape)


def _zero_nan(a: np.ndarray) -> np.ndarray:
    """``a`` with NaN replaced by 0 (``a`` itself when it has none: no copy)."""
    nan = np.isnan(a)
    return np.where(nan, 0.0, a) if nan.any() else a


def _level_codes(s: pd.Series, inside: np.ndarray) -> tuple[list, np.ndarray]:
    """Levels of ``s`` among the rows ``inside`` (:func:`category_levels`) and the level code
    of every row (-1 for a missing value or one that is not a level).

    Integer columns with a small value range are coded with a bincount (no hashing);
    categoricals by their own codes; anything else through a pandas Index."""
    every = bool(inside.all())
    if isinstance(s.dtype, pd.CategoricalDtype):
        return list(s.cat.categories), np.asarray(s.cat.codes, dtype=np.int64)
    if isinstance(s.dtype, np.dtype) and s.dtype.kind in "iu" and s.dtype != np.uint64 and (
            s.shape[0]):
        vals = s.to_numpy()
        seen = vals if every else vals[inside]
        if seen.shape[0]:
            lo, hi = int(seen.min()), int(seen.max())
            if hi - lo <= 4 * vals.shape[0] + 1_000_000:
                shifted = vals.astype(np.int64)
                if lo != 0:
                    shifted -= lo
                counts = np.bincount(shifted if every else shifted[inside],
                                     minlength=hi - lo + 1)
                present = np.flatnonzero(counts)
                if present.shape[0] == hi - lo + 1 and every:  # codes 0..L-1 as they are
                    return (present + lo).tolist(), shifted
                lookup = np.where(counts > 0, np.cumsum(counts > 0) - 1, -1)
                code = lookup[np.clip(shifted, 0, hi - lo)]
                if not every:  # values of rows outside the scope may be out of range
                    code[(shifted < 0) | (shifted > hi - lo)] = -1
                return (present + lo).tolist(), code
    if s.dtype.kind in "Obf" or isinstance(s.dtype, pd.StringDtype):
        # hash once (pd.factorize), then order the levels seen in scope as R does
        fcodes, uniques = pd.factorize(s, sort=False)
        fcodes = np.asarray(fcodes, dtype=np.int64)
        counted = fcodes if every else fcodes[inside]
        seen = np.bincount(counted[counted >= 0], minlength=len(uniques)) > 0
        keep = np.flatnonzero(seen)
        values = np.asarray(uniques, dtype=object)[keep].tolist()
        try:
            rank = sorted(range(len(values)), key=values.__getitem__)
        except TypeError:
            rank = sorted(range(len(values)), key=lambda i: str(values[i]))
        mapping = np.full(len(uniques) + 1, -1, dtype=np.int64)  # last entry: NaN (-1)
        mapping[keep[rank]] = np.arange(len(rank))
        return [values[i] for i in rank], mapping[fcodes]
    levels = category_levels(s if every else s[inside])
    return levels, pd.Index(levels).get_indexer(s)


def qrule_math(x: np.ndarray, w: np.ndarray, p: np.ndarray,
               survey_version: str = "4.5") -> np.ndarray:
    """R ``survey:::qrule_math``: the weighted quantile R uses by default.

    The smallest x whose cumulative weight share reaches p, taking x at an exact boundary.
    Cumulative sums are accumulated in extended precision as R's ``cumsum``/``sum`` do, so the
    boundary comparisons give R's answers. ``p`` may be an array; NaN in p gives NaN.
    ``survey_version``: R survey 4.5 (default) takes the lower value when the gap
    ``wlow = p - F(x_pos)`` is ``<= 0``; 4.1 only when it is exactly 0, so a gap of -1e-17
    left by rounding (or p = 0) gave the next value up (R's Chile example: a domain's first
    quartile 551,525 above its median 449,613). ``"4.1"`` restores that.
    """
    check_survey_version(survey_version)
    keep = w != 0
    x, w = x[keep], w[keep]
    if x.shape[0] == 0:  # no row with weight (a replicate deleting the whole domain)
        return np.full(np.atleast_1d(np.asarray(p, dtype=float)).shape, np.nan)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    cumw = np.cumsum(w[order].astype(np.longdouble)).astype(float)
    total = float(np.cumsum(w.astype(np.longdouble))[-1])
    p = np.atleast_1d(np.asarray(p, dtype=float))
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    target = p[ok] * total
    pos = np.searchsorted(cumw, target, side="right") - 1  # last cumw <= p * sum(w)
    pos = np.where(pos < 0, 0, pos)  # R's last() returns 1 when nothing qualifies
    wlow = p[ok] - cumw[pos] / total
    nxt = np.minimum(pos + 1, xs.shape[0] - 1)
    out[ok] = np.where(_at_boundary(wlow, survey_version), xs[pos], xs[nxt])
    return out


SURVEY_VERSIONS = ("4.5", "4.1")


def check_survey_version(survey_version: str) -> None:
    """Refuse a ``survey_version`` other than ``"4.5"`` and ``"4.1"`` (docs/r_survey_functions.md:
    R survey 4.5's changed defaults, and the switch back to 4.1.1's)."""
    if survey_version not in SURVEY_VERSIONS:
        raise ValueError(f"survey_version={survey_version!r}: choose '4.5' (R survey 4.5, the "
                         "default) or '4.1' (R survey 4.1.1's old behaviour).")


def _at_boundary(wlow: np.ndarray, survey_version: str) -> np.ndarray:
    """R's test for an exact cumulative-share boundary: ``wlow <= 0`` (4.5), ``== 0`` (4.1)."""
    return wlow <= 0 if survey_version == "4.5" else wlow == 0


QRULES = ("math", "school", "shahvaish", "hf1", "hf2", "hf3", "hf4", "hf5", "hf6", "hf7",
          "hf8", "hf9")
INTERVAL_TYPES = ("mean", "beta", "xlogit", "asin", "quantile")


def _qs(xs: np.ndarray, cumw: np.ndarray, total: float, p: np.ndarray):
    """R ``survey:::qs`` for sorted x: lower/upper positions and weight gaps at p."""
    pos = np.searchsorted(cumw, p * total, side="right") - 1
    pos = np.where(pos < 0, 0, pos)
    nxt = np.minimum(pos + 1, xs.shape[0] - 1)
    return pos, nxt, p - cumw[pos] / total, cumw[nxt] / total - p


def _approx(pk: np.ndarray, xs: np.ndarray, p: np.ndarray, constant: bool) -> np.ndarray:
    """R ``approx(pk, x, p, rule=2)``: linear, or constant with f=0 (left value). As R's
    ``regularize.values``, the points are first ordered by pk and tied pk values averaged
    (Shah-Vaish's pk need not be monotone)."""
    order = np.argsort(pk, kind="stable")
    pk, xs = pk[order], xs[order]
    uniq, inv = np.unique(pk, return_inverse=True)
    if uniq.shape[0] < pk.shape[0]:
        xs = np.bincount(inv, weights=xs) / np.bincount(inv)
        pk = uniq
    if not constant:
        return np.interp(p, pk, xs)
    j = np.clip(np.searchsorted(pk, p, side="right") - 1, 0, xs.shape[0] - 1)
    return xs[j]


def weighted_quantile(x: np.ndarray, w: np.ndarray, p: Any, rule: str = "math",
                      survey_version: str = "4.5") -> np.ndarray:
    """R ``survey``'s quantile rules (``qrule=``), read from ``survey:::qrule_*``.

    ``math``/``hf1``: smallest x whose cumulative weight share reaches p; ``school``/``hf2``:
    the midpoint at an exact boundary; ``hf3``: the nearest even order statistic at a boundary
    (on distinct values); ``hf4``: interpolation by weight share; ``hf5``-``hf9``: Hyndman
    and Fan's interpolation rules with weights; ``shahvaish``: Shah and Vaish's rule.
    Zero weights are dropped first; cumulative sums in extended precision as R's.
    ``survey_version``: the boundary test of ``math``/``school``/``hf3`` (see
    :func:`qrule_math`); one row gives that row's value for every rule (R 4.5; R 4.1's
    continuous rules fail on one row, so there is nothing to restore).
    """
    if rule in ("math", "hf1"):
        return qrule_math(x, w, p, survey_version)
    check_survey_version(survey_version)
    keep = w != 0
    x, w = x[keep], w[keep]
    p = np.atleast_1d(np.asarray(p, dtype=float))
    out = np.full(p.shape, np.nan)
    if x.shape[0] == 0:
        return out
    ok = np.isfinite(p)
    pp = p[ok]
    order = np.argsort(x, kind="stable")
    xs, ws = x[order], w[order]
    if rule == "hf3":  # weights summed over distinct values
        xs, inv = np.unique(xs, return_inverse=True)
        ws = np.bincount(inv.reshape(-1), weights=ws)
    cumw = np.cumsum(ws.astype(np.longdouble)).astype(float)
    total = float(np.cumsum(ws.astype(np.longdouble))[-1])
    n = xs.shape[0]
    if rule in ("school", "hf2", "hf3", "hf4"):
        pos, nxt, wlow, wup = _qs(xs, cumw, total, pp)
        at = _at_boundary(wlow, survey_version)
        if rule in ("school", "hf2"):
            val = np.where(at, (xs[pos] + xs[nxt]) / 2, xs[nxt])
        elif rule == "hf3":
            val = np.where(at & ((pos + 1) % 2 == 0), xs[pos], xs[nxt])
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                gamma = wlow / (wup + wlow)
            val = xs[pos] * (1 - gamma) + xs[nxt] * gamma
        out[ok] = val
        return out
    prev = np.concatenate([[0.0], cumw[:-1]])
    if rule == "shahvaish":
        S = np.cumsum((ws / ws.mean()).astype(np.longdouble)).astype(float)
        pk = (S + 0.5 - ws / 2) / (n + 1)
        out[ok] = _approx(pk, xs, pp, constant=True)
        return out
    pk = {
        "hf5": lambda: (cumw - ws / 2) / cumw[-1],
        "hf6": lambda: cumw / (cumw[-1] + ws[-1]),
        "hf7": lambda: prev / cumw[n - 2] if n > 1 else prev,
        "hf8": lambda: (prev / 3 + cumw * 2 / 3) / (cumw[-1] + ws[-1] / 3),
        "hf9": lambda: (prev * 3 / 8 + cumw * 5 / 8) / (cumw[-1] + ws[-1] / 4),
    }[rule]()
    out[ok] = _approx(pk, xs, pp, constant=False)
    return out


def woodruff_share_limits(m: np.ndarray, var: np.ndarray, crit: np.ndarray, method: str,
                          n_rows: np.ndarray, df_dom: np.ndarray,
                          alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """R ``woodruffCI``'s interval for the share m at or below the estimate (``method`` =
    ``interval.type``): Wald (``mean``), on the logit (``xlogit``) or arcsine-root (``asin``)
    scale by the delta method, or Korn-Graubard's beta (``beta``, with the domain's rows and
    df, as R). ``crit`` is (D, 1); m, var (D, P)."""
    se = np.sqrt(var)
    with np.errstate(invalid="ignore", divide="ignore"):
        if method == "mean":
            return m - crit * se, m + crit * se
        if method == "xlogit":
            x, sx = special.logit(m), se / (m * (1 - m))
            return special.expit(x - crit * sx), special.expit(x + crit * sx)
        if method == "asin":
            x, sx = np.arcsin(np.sqrt(m)), se / (2 * np.sqrt(m) * np.sqrt(1 - m))
            return np.sin(x - crit * sx) ** 2, np.sin(x + crit * sx) ** 2
        n_eff = m * (1 - m) / var
        d = df_dom[:, None]
        n_eff = n_eff * (stats.t.ppf(alpha / 2, n_rows[:, None] - 1.0) / np.where(
            d > 0, stats.t.ppf(alpha / 2, np.where(d > 0, d, 1.0)), np.nan)) ** 2
        return (stats.beta.ppf(alpha / 2, n_eff * m, n_eff * (1 - m) + 1),
                stats.beta.ppf(1 - alpha / 2, n_eff * m + 1, n_eff * (1 - m)))


def estimate_names(by_df: pd.DataFrame | None, D: int, labels: list[tuple]) -> list[str]:
    """Names of the rows of an estimator's output, for :func:`surveysynth.contrasts.vcov` and
    ``contrast``: ``variable`` plus the level (R's ``svymean`` names, ``"sch.wideYes"``), led
    by the domain's ``by`` values joined with ``"."`` and a colon (``"E:api00"``; R's
    ``svyby`` names drop the variable when there is only one)."""
    per = [f"{v}{'' if lev is None else lev}" for v, lev in labels]
    if by_df is None:
        return per
    keys = [".".join(map(str, row)) for row in by_df.astype(object).to_numpy().tolist()]
    return [f"{k}:{p}" for k in keys for p in per]


def attach_vcov(out: pd.DataFrame, names: list[str], cov: np.ndarray) -> None:
    """Store the covariance of the rows of ``out`` with their names and estimates (on an
    :class:`~surveysynth.results.Estimate`, and in ``out.attrs["covmat"]``), so
    :meth:`Estimate.vcov` and :func:`surveysynth.contrasts.vcov` can check the rows they are
    given are still those it was computed for."""
    covariance = Covariance(tuple(names), out["estimate"].to_numpy(float).copy(),
                            np.asarray(cov, dtype=float))
    if isinstance(out, Estimate):
        out.set_covariance(covariance)
    else:
        out.attrs["covmat"] = covariance.as_attrs()


def estimate_frame(by_df, D, labels, est, se, df, level, ci, deff=None, level_name="level",
                   extra: dict[str, Any] | None = None, n=None) -> Estimate:
    """The estimator output frame, an :class:`~surveysynth.results.Estimate`: by-variable
    columns, ``variable`` (and ``level``), estimate, se, CI, df, cv, and optionally n, deff and
    extra columns (one row per domain x variable)."""
    V = len(labels)
    rows = {}
    if by_df is not None:
        for c in by_df.columns:
            rows[c] = np.repeat(by_df[c].to_numpy(), V)
            if isinstance(by_df[c].dtype, pd.CategoricalDtype):
                rows[c] = pd.Categorical(rows[c], categories=by_df[c].cat.categories)
    rows["variable"] = [lab[0] for lab in labels] * D
    if any(lab[1] is not None for lab in labels):
        rows[level_name] = [lab[1] for lab in labels] * D
    est = np.asarray(est, float).reshape(D * V)
    se = np.asarray(se, float).reshape(D * V)
    dfv = np.repeat(np.asarray(df, float), V)
    lo, hi = confidence_interval(est, se, dfv, level, ci)
    rows.update(estimate=est, se=se, ci_low=lo, ci_high=hi, df=dfv)
    with np.errstate(divide="ignore", invalid="ignore"):
        rows["cv"] = np.where(est != 0, se / np.abs(est), np.nan)
    if n is not None:
        rows["n"] = np.repeat(np.asarray(n, dtype=np.int64), V)
    if deff is not None:
        rows["deff"] = np.asarray(deff, float).reshape(D * V)
    if extra:
        for k, v in extra.items():
            rows[k] = v
    return Estimate.wrap(pd.DataFrame(rows), level, ci)


class Estimators:
    """Base of every design kind: the rows API, the domain-estimation API and the estimators.

    A design stores ``_frame`` (all rows of the full sample), ``_in`` (rows in the current
    subset) and ``_w`` (full-sample weights), and implements the hooks ``_ratio_core`` and
    ``_df_core``. Code outside the design class reads them only through the public API below
    (:attr:`full_data`, :attr:`in_subset`, :attr:`full_weights`, :meth:`domains`,
    :meth:`missing_rows`, :meth:`numeric_values`, :meth:`level_indicators`,
    :meth:`domain_ratios`, :meth:`domain_df`): tables, engines, privacy mechanisms and the R
    bridge estimate over domains with these, and never touch a private attribute.
    """

    #: the design kind engines are chosen for (``"taylor"`` or ``"replicate"``)
    design_kind: str = "taylor"
    #: statistics of :class:`~surveysynth.results.EstimatorProtocol` not computed (none)
    unsupported_estimators: tuple[str, ...] = ()

    @property
    def data(self) -> pd.DataFrame:
        """The rows of the design (of the subset, after ``subset``). Do not mutate it."""
        if self._in.all():
            return self._frame.copy(deep=False)
        return self._frame.loc[self._in]

    @property
    def weights(self) -> np.ndarray:
        """Full-sample sampling weights of the rows in :attr:`data` (read-only)."""
        return self._w if self._in.all() else self._w[self._in]

    @property
    def n(self) -> int:
        """Number of rows (in the subset)."""
        return int(self._in.sum())

    # ---------------------------------------------------------------- full-sample access
    @property
    def full_data(self) -> pd.DataFrame:
        """All rows of the full sample, including rows outside the subset (read-only view).

        Domain codes (:meth:`domains`) and :attr:`in_subset` index these rows; variances use
        them all, as R keeps the full design after ``subset``. Do not mutate it.
        """
        return self._frame.copy(deep=False)

    @property
    def in_subset(self) -> np.ndarray:
        """Boolean mask over :attr:`full_data`: True for the rows of :attr:`data` (read-only)."""
        return self._in

    @property
    def full_weights(self) -> np.ndarray:
        """Full-sample sampling weights of every row of :attr:`full_data` (read-only)."""
        return self._w

    @property
    def is_subset(self) -> bool:
        """True when the design was restricted by :meth:`subset` (some rows are outside)."""
        return not bool(self._in.all())

    def full_design(self):
        """The same design without its subset: every row of :attr:`full_data` in scope."""
        if not self.is_subset:
            return self
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        inside = np.ones(self._frame.shape[0], dtype=bool)
        inside.setflags(write=False)
        new._in = inside
        new._on_subset()
        return new

    def subset(self, mask: Any):
        """The domain where ``mask`` holds, keeping the full design for variance (R ``subset``).

        ``mask`` is a boolean array or Series aligned with :attr:`data`. Variances count every
        PSU (or replicate) of the full design; degrees of freedom count what the domain reaches.
        """
        m = pd.Series(mask).to_numpy() if not isinstance(mask, np.ndarray) else mask
        if isinstance(mask, pd.Series) and not mask.index.equals(self.data.index):
            m = mask.reindex(self.data.index).to_numpy()
        if m.dtype != bool:
            if pd.isna(m).any():
                raise ValueError(
                    "subset(): the mask has missing values in "
                    f"{first_rows(self.data.index, pd.isna(m))}; fill them with True/False."
                )
            m = m.astype(bool)
        if m.shape[0] != self.n:
            raise ValueError(f"subset(): mask has {m.shape[0]} entries for {self.n} rows.")
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        inside = self._in.copy()
        inside[np.flatnonzero(self._in)] = m
        inside.setflags(write=False)
        new._in = inside
        new._on_subset()
        return new

    def update(self, **columns: Any):
        """The design with new or replaced data columns (R ``update(design, name = expr)``).

        Each value is the name of an existing column (copied), a function of
        :attr:`full_data` returning one value per row, or one value per row of
        :attr:`full_data` (array or scalar). Weights, strata, clusters and the subset are
        unchanged (as in R, replacing a design variable's column does not change the design).
        The caller's data are not modified.
        """
        frame = self._frame.copy(deep=False)
        nrow = frame.shape[0]
        for name, value in columns.items():
            if isinstance(value, str):
                if value not in frame.columns:
                    raise ValueError(f"update({name}={value!r}): no column {value!r} in the "
                                     "data. Fix: give an existing column, a function or values.")
                value = frame[value]
            elif callable(value):
                value = value(frame)
            if isinstance(value, pd.Series):
                value = value.to_numpy()
            if np.ndim(value) and len(value) != nrow:
                raise ValueError(f"update({name}=...): {len(value)} values for {nrow} rows of "
                                 "the full sample. Fix: give one value per row of full_data.")
            frame[name] = value
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._frame = frame
        return new

    def _on_subset(self) -> None:
        """Hook: reset caches that depend on the rows in the subset."""

    def with_columns(self, extra: pd.DataFrame):
        """Engine API, internal (database-backed designs): the same design (calibration,
        subset, replicates kept) whose full data also holds the columns of ``extra``, one row
        per row of :attr:`full_data` in the same order."""
        if extra.shape[0] != self._frame.shape[0]:
            raise ValueError(f"with_columns: {extra.shape[0]} rows for a design of "
                             f"{self._frame.shape[0]}.")
        clash = [c for c in extra.columns if c in self._frame.columns]
        if clash:
            raise ValueError(f"with_columns: columns {clash} are already in the design.")
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._frame = pd.concat([self._frame, extra.set_axis(self._frame.index)], axis=1)
        return new

    # ---------------------------------------------------------------- calibration
    def calibrate(self, formula_or_columns: str | Sequence[str], population: Any,
                  calfun: str = "linear", bounds: tuple[float, float] | None = None,
                  **options: Any):
        """Calibrated design (R ``calibrate``); see :func:`surveysynth.calibration.calibrate`."""
        from .calibration import calibrate

        return calibrate(self, formula_or_columns, population, calfun=calfun, bounds=bounds,
                         **options)

    def rake(self, margins: Sequence[str | Sequence[str]], population_margins: Any,
             **options: Any):
        """Raked design (R ``rake``); see :func:`surveysynth.calibration.rake`."""
        from .calibration import rake

        return rake(self, margins, population_margins, **options)

    def post_stratify(self, strata: str | Sequence[str], population: Any,
                      partial: bool = False):
        """Post-stratified design (R ``postStratify``); see
        :func:`surveysynth.calibration.post_stratify`."""
        from .calibration import post_stratify

        return post_stratify(self, strata, population, partial=partial)

    postStratify = post_stratify  # R's spelling

    def redistribute_weights(self, reduce_if: Any, increase_if: Any,
                             by: str | Sequence[str] | None = None):
        """Nonresponse weighting-class adjustment (svrep ``redistribute_weights``); see
        :func:`surveysynth.nonresponse.redistribute_weights`."""
        from .nonresponse import redistribute_weights

        return redistribute_weights(self, reduce_if, increase_if, by)

    def trim_weights(self, upper: float | None = None, lower: float | None = None,
                     strict: bool = False, **options: Any):
        """Design with trimmed weights (R ``trimWeights``); see
        :func:`surveysynth.calibration.trim_weights`."""
        from .calibration import trim_weights

        return trim_weights(self, upper=upper, lower=lower, strict=strict, **options)

    trimWeights = trim_weights  # R's spelling

    # ---------------------------------------------------------------- domain-estimation API
    def domains(self, by: str | Sequence[str] | None = None,
                na_rows: np.ndarray | None = None) -> Domains:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        Domain codes of every row of :attr:`full_data` (R ``svyby``'s groups).

        Rows outside the subset, and ``na_rows`` (from :meth:`missing_rows`), get code -1.
        Without ``by`` every row in scope is domain 0. Missing ``by`` values are an error.
        """
        inside = self._in.copy()
        if na_rows is not None:
            inside &= ~na_rows
        by_cols = as_list(by)
        every = bool(inside.all())
        if not by_cols:
            return Domains(np.where(inside, 0, -1), 1, None)
        require_columns(self._frame, by_cols, "by")
        codes, level_lists = [], []
        for c in by_cols:
            s = self._frame[c]
            na = s.isna().to_numpy() & inside
            if na.any():
                raise ValueError(
                    f"by: column {c!r} has missing values in {first_rows(self._frame.index, na)}. "
                    "Fix: recode them as a level of their own, or subset() the design first."
                )
            levels, code = _level_codes(s, inside)
            codes.append(code)
            level_lists.append(levels)
        if len(by_cols) == 1 and not isinstance(self._frame[by_cols[0]].dtype,
                                                pd.CategoricalDtype):
            # one by-variable: its levels are those seen in scope, all present, in order
            present = np.arange(len(level_lists[0]))
            dom = codes[0] if every else np.where(inside, codes[0], -1)
            return Domains(dom, len(level_lists[0]), self._by_frame(by_cols, level_lists, present))
        # R: interaction(by) with the first factor varying fastest; svyby sorts by that code
        key = np.zeros(self._frame.shape[0], dtype=np.int64)
        mult = 1
        for code, levels in zip(codes, level_lists, strict=True):
            key = key + np.where(code < 0, 0, code) * mult
            mult *= max(len(levels), 1)
        if mult <= 4 * key.shape[0] + 1_000_000:  # small key space: dense lookup, no sort
            seen = np.bincount(key[inside], minlength=mult) > 0
            present = np.flatnonzero(seen)
            lookup = np.cumsum(seen) - 1
            dom = np.where(inside, lookup[key], -1)
        else:
            present = np.unique(key[inside])
            dom = np.where(inside, np.searchsorted(present, key), -1)
        return Domains(dom, int(present.shape[0]), self._by_frame(by_cols, level_lists, present))

    def _by_frame(self, by_cols: list[str], level_lists: list[list],
                  present: np.ndarray) -> pd.DataFrame:
        """The ``by`` values of the domains whose interaction codes are ``present``."""
        by_frame = {}
        rem = present.copy()
        for c, levels in zip(by_cols, level_lists, strict=True):
            by_frame[c] = [levels[i] for i in rem % len(levels)]
            rem = rem // len(levels)
        by_df = pd.DataFrame(by_frame)
        for c in by_cols:
            if isinstance(self._frame[c].dtype, pd.CategoricalDtype):
                by_df[c] = pd.Categorical(by_df[c], categories=self._frame[c].cat.categories)
        return by_df

    def missing_rows(self, columns: list[str], na_rm: bool, what: str) -> np.ndarray | None:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        Rows of :attr:`full_data` in scope with a missing value in ``columns`` (None: none).

        Without ``na_rm`` a missing value is a ValueError naming the column, the first rows
        and the fix (``what`` names the caller in the message).
        """
        na = np.zeros(self._frame.shape[0], dtype=bool)
        for c in columns:
            na |= self._frame[c].isna().to_numpy()
        na &= self._in
        if not na.any():
            return None
        if not na_rm:
            col = next(c for c in columns if (self._frame[c].isna().to_numpy() & self._in).any())
            bad = self._frame[col].isna().to_numpy() & self._in
            raise ValueError(
                f"{what}: column {col!r} has missing values in "
                f"{first_rows(self._frame.index, bad)}. Fix: na_rm=True to drop them from the "
                "estimate (the design keeps them for variance), or impute them."
            )
        return na

    def numeric_values(self, col: str) -> np.ndarray:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        Values of numeric column ``col`` over :attr:`full_data` as float (NaN if missing)."""
        s = self._frame[col]
        if is_categorical(s):
            raise ValueError(
                f"column {col!r} is {s.dtype}, not numeric: use proportion() for the share of each "
                "level, or total()/mean() after converting it."
            )
        return s.to_numpy(dtype=float, na_value=np.nan)

    def level_indicators(self, col: str) -> tuple[np.ndarray, list]:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        0/1 indicator columns of the levels of ``col`` (levels seen in the subset, R order).

        Rows of :attr:`full_data` in a (n_full, L) float matrix, NaN where ``col`` is missing.
        """
        codes, levels = self._level_codes(col)
        Y = _indicators(codes, len(levels))
        Y[self._frame[col].isna().to_numpy()] = np.nan
        return Y, levels

    def _level_codes(self, col: str) -> tuple[np.ndarray, list]:
        """Level code (0..L-1, R order, levels seen in the subset) of every row of
        :attr:`full_data` for ``col``; -1 where missing."""
        levels, codes = _level_codes(self._frame[col], self._in)
        return codes, levels

    def domain_ratios(self, Y: np.ndarray, X: np.ndarray | None, codes: np.ndarray,
                      count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        Domain ratios of weighted totals sum(w Y) / sum(w X) and their design variances.

        ``Y`` and ``X`` are (n_full, V) arrays over :attr:`full_data` (no NaN: zero-fill
        first); ``X=None`` gives totals. ``codes``/``count`` come from :meth:`domains`.
        Returns ``(estimate, variance, influence)``: (count, V) arrays and the (n_full, V)
        linearized values (Taylor designs) or score values (replicate designs). Every
        estimator of the package is built on this one call; so can any table or mechanism.
        """
        return self._ratio_core(Y, X, codes, count)

    def _linearize(self, Y, X, dom, D, *, want_z=True, want_df=False, x_is_one=False,
                   levels=None):
        """Hook: :meth:`_ratio_core` plus, when a design computes them in the same pass,
        each domain's df and row count (None here: the caller computes them). ``levels``:
        ``(codes, L)`` standing for Y = the L level indicators and X = 1 (Y, X None)."""
        if Y is None:
            Y = _indicators(*levels)
            X = np.ones_like(Y)
        est, var, z = self._ratio_core(Y, X, dom, D)
        return est, var, z, None, None

    def domain_covariance(self, Y: np.ndarray, X: np.ndarray | None, codes: np.ndarray,
                          count: int) -> tuple[np.ndarray, np.ndarray]:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        :meth:`domain_ratios` with the (count*V, count*V) covariance of all the estimates
        (domain-major: estimate (d, v) is row d*V + v), as ``covmat=True`` computes it.
        Returns ``(estimate (count, V), covariance)``."""
        est, cov, _ = self._ratio_cov(Y, X, codes, count)
        return est, cov

    def domain_df(self, codes: np.ndarray, count: int) -> np.ndarray:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        Design degrees of freedom of each domain (R ``degf`` of the domain subset)."""
        return self._df_core(codes, count)

    def _variables(self, variables, allow_categorical: bool):
        """Expand variables to value columns: (matrix, labels[(variable, level)])."""
        cols = as_list(variables)
        if not cols:
            raise ValueError("no variable given.")
        require_columns(self._frame, cols, "variables")
        mats, labels = [], []
        for c in cols:
            s = self._frame[c]
            if is_categorical(s):
                if not allow_categorical:
                    self.numeric_values(c)
                Y, levels = self.level_indicators(c)
                mats.append(Y)
                labels += [(c, lev) for lev in levels]
            else:
                mats.append(None)
                labels.append((c, None))
        if all(m is None for m in mats):  # every variable numeric: one (n, V) float matrix
            return self._numeric_matrix(cols), labels, cols
        mats = [self.numeric_values(c)[:, None] if m is None else m
                for c, m in zip(cols, mats, strict=True)]
        return (mats[0] if len(mats) == 1 else np.column_stack(mats)), labels, cols

    def _numeric_matrix(self, cols: list[str]) -> np.ndarray:
        """(n_full, V) float values of the numeric columns ``cols`` (NaN where missing),
        read-only. float64 columns held in one pandas block are returned as a view of the
        frame (no copy: at census scale a copy of the analysis variables is most of the
        memory); anything else is converted column by column."""
        for c in cols:
            if is_categorical(self._frame[c]):
                self.numeric_values(c)  # raises, naming the column
        if all(isinstance(self._frame[c].dtype, np.dtype) and self._frame[c].dtype == np.float64
               for c in cols):
            Y = self._frame[cols].to_numpy(dtype=np.float64, copy=False)
        elif len(cols) == 1:
            Y = self.numeric_values(cols[0])[:, None]
        else:
            Y = np.column_stack([self.numeric_values(c) for c in cols])
        Y = Y.view()
        Y.setflags(write=False)
        return Y

    # ---------------------------------------------------------------- output

    _frame_out = staticmethod(estimate_frame)

    # ---------------------------------------------------------------- df and counts
    def resolve_df(self, df: Any, dom: np.ndarray, D: int) -> np.ndarray:
        """Engine API, internal (engines, tables, privacy mechanisms; not for analysis).

        Degrees of freedom of each domain for ``df=``: None -> the domain's own (R ``degf``
        of the domain subset), ``"design"`` -> the design's (R ``degf(design)``), a number."""
        if df is None:
            return np.asarray(self._df_core(dom, D), dtype=float)
        if isinstance(df, str):
            if df != "design":
                raise ValueError(
                    f"df={df!r}: give None (each domain's own df), 'design' (the full design's "
                    "df, R's degf(design)) or a positive number."
                )
            return np.full(D, float(self.degf))
        try:
            val = float(df)
        except (TypeError, ValueError):
            raise ValueError(f"df={df!r}: give None, 'design' or a positive number.") from None
        if not val > 0:
            raise ValueError(f"df={df!r}: must be positive (or np.inf for normal intervals).")
        return np.full(D, val)

    @staticmethod
    def _domain_n(dom: np.ndarray, D: int) -> np.ndarray:
        """Unweighted number of rows in each domain (after ``na_rm``)."""
        return np.bincount(dom[dom >= 0], minlength=D)

    # ---------------------------------------------------------------- deff
    def _deff(self, U: np.ndarray, dom: np.ndarray, D: int, var: np.ndarray, kind: str, deff):
        """R's deff: var / SRS variance, from the weighted variance of U in each domain."""
        w = self._w
        sel = dom >= 0
        ds, ws, Us = dom[sel], w[sel], U[sel]
        W = np.bincount(ds, weights=ws, minlength=D)
        nobs = np.bincount(ds, weights=(ws != 0).astype(float), minlength=D)
        out = np.empty_like(var)
        for v in range(U.shape[1]):
            mu = np.bincount(ds, weights=ws * Us[:, v], minlength=D) / W
            ss = np.bincount(ds, weights=ws * (Us[:, v] - mu[ds]) ** 2, minlength=D)
            s2 = ss / W * nobs / (nobs - 1)
            if deff == "replace":
                vsrs = s2 / nobs if kind == "mean" else s2 * W**2 / nobs
            else:
                with np.errstate(invalid="ignore"):
                    vsrs = s2 * (W - nobs) / (W * nobs)
                    if kind == "mean":
                        vsrs = np.where(W < nobs, np.nan, vsrs)
                    else:
                        vsrs = vsrs * W**2
            out[:, v] = var[:, v] / vsrs
        return out

    # ---------------------------------------------------------------- engines
    def _engine(self, engine: str):
        """The registered engine for ``engine=`` (None: the design's own native hooks)."""
        eng = get_engine(engine, kind=self.design_kind)
        if not eng.native and getattr(self, "_calibration", ()):
            raise ValueError(
                f"engine={engine!r}: this design is calibrated (calibrate/rake/post_stratify) "
                "and the engine would ignore the calibration in the variance. Fix: "
                "engine='native', or a replicate design calibrated the same way.")
        return None if eng.native else eng

    def _ratio_family(self, kind, Y, X, labels, cols, by, na_rm, deff, engine, level, ci,
                      R_call, df=None, covmat=False, levels=None) -> Estimate:
        """The estimators' common body. ``levels``: ``(codes, L)`` of one categorical
        variable (proportions); Y and X are then None and the (n, L) indicator matrix is
        built only where a path needs it."""
        if Y is None:
            def materialize():
                Y = _indicators(*levels)
                return Y, np.ones_like(Y)
        na_rows = self.missing_rows(cols, na_rm, kind)
        dom, D, by_df = self.domains(by, na_rows)
        eng = self._engine(engine)
        own_df = n_dom = None
        if eng is not None:
            if covmat:
                raise ValueError(
                    f"covmat=True needs engine='native' (engine {engine!r} returns SEs only).")
            est, se = eng.estimate(self, R_call, dom=dom, D=D, by=by, by_df=by_df, na_rm=na_rm)
            var = se**2
            z = None
        else:
            # means and proportions divide by the total weight: X is all ones, never NaN
            x_is_one = kind in ("mean", "proportion")
            if Y is None and covmat:
                Y, X = materialize()
            # every row in scope and none missing: no NaN anywhere, nothing to zero-fill
            clean = na_rows is None and not self.is_subset
            Yc = Y if Y is None or clean else _zero_nan(Y)
            Xc = X if X is None or x_is_one or clean else _zero_nan(X)
            if covmat:
                est, cov, z = self._ratio_cov(Yc, Xc, dom, D)
                var = np.diag(cov).reshape(est.shape).copy()
            elif Y is None:
                est, var, z, own_df, n_dom = self._linearize(
                    None, None, dom, D, want_z=False, want_df=df is None, x_is_one=True,
                    levels=levels)
            else:
                est, var, z, own_df, n_dom = self._linearize(
                    Yc, Xc, dom, D, want_z=bool(deff) and kind == "ratio",
                    want_df=df is None, x_is_one=x_is_one)
            se = np.sqrt(var)
        dfs = own_df if own_df is not None and df is None else self.resolve_df(df, dom, D)
        deffs = None
        if deff:
            if kind == "ratio":
                U = np.where(np.isnan(z), 0.0, z / self._w[:, None])
                deffs = self._deff(U, dom, D, var, "total", deff)
            else:
                if Y is None:
                    Y = materialize()[0]
                Yc = np.where(np.isnan(Y), 0.0, Y)
                deffs = self._deff(Yc, dom, D, var, "mean" if kind != "total" else "total", deff)
        out = self._frame_out(by_df, D, labels, est, se, dfs, level, ci, deffs,
                              n=self._domain_n(dom, D) if n_dom is None else n_dom)
        if covmat:
            attach_vcov(out, estimate_names(by_df, D, labels), cov)
        return out

    # ---------------------------------------------------------------- public estimators
    def total(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
              na_rm: bool = False, deff: bool | str = False, engine: str = "native",
              level: float = 0.95, ci: str = "normal", df: float | str | None = None,
              covmat: bool = False) -> Estimate:
        """Estimated population totals (R ``svytotal`` / ``svyby(..., svytotal)``).

        A categorical variable gives the estimated count of each level, as in R.

        ``df``: degrees of freedom of ``ci="t"`` intervals and of the ``df`` column. The
        default (None) is each domain's own design df (R's ``degf`` of the domain subset,
        what ``svyby`` and ``svyciprop`` use per domain), so a domain reaching few PSUs gets
        the wide interval it deserves; ``"design"`` uses the whole design's df (R's examples
        ``confint(svyby(...), df=degf(design))``); a number is used as given. ``covmat=True``
        also computes the covariance of all the estimates (R ``svyby(covmat=TRUE)``,
        ``vcov(svytotal)``), read with :func:`surveysynth.contrasts.vcov`.
        """
        Y, labels, cols = self._variables(variables, allow_categorical=True)
        call = {"stat": "total", "variables": cols}
        return self._ratio_family("total", Y, None, labels, cols, by, na_rm, deff, engine,
                                  level, ci, call, df, covmat)

    def mean(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
             na_rm: bool = False, deff: bool | str = False, engine: str = "native",
             level: float = 0.95, ci: str = "normal", df: float | str | None = None,
             covmat: bool = False) -> Estimate:
        """Estimated population means (Hajek), R ``svymean``; categorical gives level shares.

        ``df`` and ``covmat`` as in :meth:`total`.
        """
        Y, labels, cols = self._variables(variables, allow_categorical=True)
        X = _ones(Y)
        call = {"stat": "mean", "variables": cols}
        return self._ratio_family("mean", Y, X, labels, cols, by, na_rm, deff, engine, level,
                                  ci, call, df, covmat)

    def proportion(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
                   na_rm: bool = False, deff: bool | str = False, engine: str = "native",
                   level: float = 0.95, ci: str = "normal", df: float | str | None = None,
                   covmat: bool = False, ci_method: str = "wald",
                   survey_version: str = "4.5") -> Estimate:
        """Share of every level of categorical variables (R ``svymean`` on a factor).

        Numeric variables are treated as categorical here (each distinct value a level).
        ``ci_method="wald"`` (default) gives Wald intervals, as ``confint(svymean(~factor))``
        (normal unless ``ci="t"``). The other methods are R ``svyciprop``'s, for the share of
        each level, with t quantiles on ``df`` (default: each domain's design df, as
        ``svyby(..., svyciprop)``): ``"logit"`` (Wald on the logit scale from the design-based
        logistic fit, R's default), ``"likelihood"`` (Rao-Scott scaled profile likelihood),
        ``"asin"``, ``"beta"`` (Korn-Graubard), ``"mean"`` (Wald with t), ``"xlogit"``
        (delta method on the logit) and ``"wilson"`` (Wilson score, R survey 4.5). See :mod:`surveysynth.ciprop`. ``covmat`` as in
        :meth:`total`. ``survey_version``: ``"4.5"`` (default) or ``"4.1"``; only
        ``"likelihood"`` on replicate designs differs (R 4.5's dispersion 1; R 4.1.1 gave NA,
        and so does ``"4.1"``).
        """
        check_survey_version(survey_version)
        cols = as_list(variables)
        require_columns(self._frame, cols, "variables")
        call = {"stat": "proportion", "variables": cols}
        if len(cols) == 1 and ci_method == "wald":  # level codes; indicators only if needed
            codes, levels = self._level_codes(cols[0])
            labels = [(cols[0], lev) for lev in levels]
            return self._ratio_family("proportion", None, None, labels, cols, by, na_rm,
                                      deff, engine, level, ci, call, df, covmat,
                                      levels=(codes, len(levels)))
        mats, labels = [], []
        for c in cols:
            Y, levels = self.level_indicators(c)
            mats.append(Y)
            labels += [(c, lev) for lev in levels]
        Y = mats[0] if len(mats) == 1 else np.column_stack(mats)
        if ci_method != "wald":
            from .ciprop import CI_METHODS, proportion_ci

            if ci_method not in CI_METHODS:
                raise ValueError(f"ci_method={ci_method!r}: choose 'wald' or one of {CI_METHODS}.")
            if engine != "native":
                raise ValueError(f"ci_method={ci_method!r} needs engine='native'.")
            out = self._ratio_family("proportion", Y, _ones(Y), labels, cols, by, na_rm,
                                     deff, engine, level, "t", call, df, covmat)
            return proportion_ci(self, out, Y, cols, by, na_rm, level, df, ci_method,
                                 survey_version)
        return self._ratio_family("proportion", Y, _ones(Y), labels, cols, by, na_rm,
                                  deff, engine, level, ci, call, df, covmat)

    def ratio(self, numerator: str | Sequence[str], denominator: str | Sequence[str],
              by: str | Sequence[str] | None = None, na_rm: bool = False,
              deff: bool | str = False, engine: str = "native", level: float = 0.95,
              ci: str = "normal", df: float | str | None = None,
              covmat: bool = False) -> Estimate:
        """Ratio of two totals, R ``svyratio`` (every numerator over every denominator).

        ``df`` and ``covmat`` as in :meth:`total`.
        """
        nums, dens = as_list(numerator), as_list(denominator)
        require_columns(self._frame, nums + dens, "ratio")
        pairs = [(a, b) for b in dens for a in nums]
        Y = self._numeric_matrix([a for a, _ in pairs])
        X = self._numeric_matrix([b for _, b in pairs])
        labels = [(f"{a}/{b}", None) for a, b in pairs]
        call = {"stat": "ratio", "numerator": nums, "denominator": dens}
        return self._ratio_family("ratio", Y, X, labels, nums + dens, by, na_rm, deff, engine,
                                  level, ci, call, df, covmat)

    def quantile(self, variables: str | Sequence[str], quantiles: float | Sequence[float],
                 by: str | Sequence[str] | None = None, na_rm: bool = False,
                 engine: str = "native", level: float = 0.95,
                 df: float | str | None = None, qrule: str = "math",
                 interval_type: str = "mean", survey_version: str = "4.5") -> Estimate:
        """Quantiles with R's default rule (``qrule="math"``) and Woodruff interval.

        The interval inverts a confidence interval for the share of the population at or below
        the estimate (mean of ``x <= q``, t with the design df, as R ``svyquantile``); the SE
        is the interval's length over 2 t_{df, (1+level)/2}, as R reports it. ``df`` as in
        :meth:`total` (default each domain's own df, as ``svyby(..., svyquantile)``); a
        domain with df 0 gets NaN limits and SE, as R.

        ``qrule``: R 4.1's quantile rules (``"math"`` default, ``"school"``, ``"shahvaish"``,
        ``"hf1"``-``"hf9"``; see :func:`weighted_quantile`), used for the estimate and to read
        the interval's limits. ``interval_type``: how the interval for the share below the
        estimate is made before it is inverted: ``"mean"`` (Wald, R's default), ``"xlogit"``,
        ``"asin"`` or ``"beta"`` (R ``svyquantile(interval.type=)``), or, for replicate designs
        only, ``"quantile"``: the replicate variance of the quantile itself and a symmetric
        interval (R's ``repCI``; R warns it may be invalid for jackknife weights, so do we).
        R's ``"score"`` (Francisco-Fuller) is not available. R 4.1 ignores ``interval.type``
        other than ``"quantile"`` on replicate designs (always ``"mean"``); here it is applied
        (as R 4.5 does).

        ``survey_version``: ``"4.5"`` (default) reads an exact cumulative-share boundary as
        R survey 4.5 does (``wlow <= 0``); ``"4.1"`` as 4.1.1 (``wlow == 0``), which differs
        at p = 0, where rounding leaves a gap of -1e-17, and so in small domains (R's Chile
        example: a first quartile of 551,525 under 4.1.1, 449,613 under 4.5). See
        :func:`qrule_math` and docs/r_survey_functions.md. ``engine="r"`` computes with the
        installed R survey, whatever ``survey_version`` says.
        """
        check_survey_version(survey_version)
        if qrule not in QRULES:
            raise ValueError(f"qrule={qrule!r}: choose one of {QRULES} (R 4.1's qrule).")
        if interval_type not in INTERVAL_TYPES:
            raise ValueError(f"interval_type={interval_type!r}: choose one of {INTERVAL_TYPES} "
                             "(R's 'score' is not available).")
        if interval_type == "quantile" and self.design_kind != "replicate":
            raise ValueError("interval_type='quantile' needs replicate weights (R: replicate "
                             "designs only); use 'mean', 'beta', 'xlogit' or 'asin'.")
        if engine != "native" and (qrule != "math" or interval_type != "mean"):
            raise ValueError("qrule= and interval_type= other than R's defaults need "
                             "engine='native'.")
        cols = as_list(variables)
        require_columns(self._frame, cols, "variables")
        ps = np.atleast_1d(np.asarray(quantiles, dtype=float))
        if ((ps < 0) | (ps > 1) | np.isnan(ps)).any():
            raise ValueError(f"quantiles={quantiles!r}: each must be in [0, 1].")
        na_rows = self.missing_rows(cols, na_rm, "quantile")
        dom, D, by_df = self.domains(by, na_rows)
        df = self.resolve_df(df, dom, D)
        eng = self._engine(engine)
        alpha = 1 - level
        crit = t_critical(df, level)
        labels = [(c, p) for c in cols for p in ps]
        V = len(labels)
        est = np.empty((D, V))
        lo = np.empty((D, V))
        hi = np.empty((D, V))
        if eng is not None:
            # the engine's own (asymmetric) Woodruff limits, not estimate +- t * se
            call = {"stat": "quantile", "variables": cols, "quantiles": ps.tolist(), "level": level}
            est, se, lo, hi = eng.estimate(self, call, dom=dom, D=D, by=by, by_df=by_df,
                                           na_rm=na_rm, return_ci=True)
        else:
            se = np.empty((D, V))
            for j, c in enumerate(cols):
                x = self.numeric_values(c)
                sl = slice(j * ps.shape[0], (j + 1) * ps.shape[0])
                if interval_type == "quantile":
                    q, l_, h_ = self._replicate_quantile_ci(x, ps, dom, D, crit, qrule,
                                                            survey_version)
                else:
                    q, l_, h_ = self._woodruff(x, ps, dom, D, crit, alpha, qrule, interval_type,
                                               survey_version)
                est[:, sl], lo[:, sl], hi[:, sl] = q, l_, h_
                se[:, sl] = (h_ - l_) / (2 * crit[:, None])
        out = self._frame_out(by_df, D, labels, est, se, df, level, "t", level_name="quantile",
                              n=self._domain_n(dom, D))
        # Woodruff limits are not estimate -+ t se; the replicate "quantile" interval is
        out.set_intervals(np.asarray(lo, float).reshape(D * V),
                          np.asarray(hi, float).reshape(D * V),
                          "t" if interval_type == "quantile" and eng is None else "woodruff")
        return out

    def _woodruff(self, x, ps, dom, D, crit, alpha, qrule="math", interval_type="mean",
                  survey_version="4.5"):
        """Quantiles and Woodruff limits for every domain, one variable."""
        w = self._w
        P = ps.shape[0]
        q = np.empty((D, P))
        groups = [np.flatnonzero(dom == d) for d in range(D)] if D > 1 else [np.flatnonzero(dom == 0)]
        for d, rows in enumerate(groups):
            q[d] = weighted_quantile(x[rows], w[rows], ps, qrule, survey_version)
        # share at or below the estimate: a mean per (domain, p), variance from the design
        sel = dom >= 0
        ind = np.zeros((x.shape[0], P))
        ind[sel] = (x[sel][:, None] <= q[dom[sel]]).astype(float)
        m, var, _ = self._ratio_core(ind, np.ones_like(ind), dom, D)
        n_rows = self._domain_n(dom, D).astype(float)
        df_dom = np.asarray(self._df_core(dom, D), float) if interval_type == "beta" else None
        pl, pu = woodruff_share_limits(m, var, crit[:, None], interval_type, n_rows, df_dom,
                                       alpha)
        lo = np.full((D, P), np.nan)
        hi = np.full((D, P), np.nan)
        for d, rows in enumerate(groups):
            okl = ~(np.isnan(pl[d]) | (pl[d] < 0))
            oku = ~(np.isnan(pu[d]) | (pu[d] > 1))
            lo[d, okl] = weighted_quantile(x[rows], w[rows], pl[d, okl], qrule, survey_version)
            hi[d, oku] = weighted_quantile(x[rows], w[rows], pu[d, oku], qrule, survey_version)
        return q, lo, hi
