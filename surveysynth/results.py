"""What every estimator returns and what every design kind promises (issue 38, item 4).

* :class:`Estimate` -- the one result type of ``total``, ``mean``, ``ratio``, ``proportion``
  and ``quantile`` on every design kind (``SurveyDesign``, ``ReplicateDesign``,
  ``SyntheticRelease``, the Dask designs), of ``with_replicates``, ``svyvar`` and
  ``contrast``. It *is* a pandas DataFrame (the columns are unchanged: the ``by`` columns,
  ``variable`` (and ``level`` / ``quantile``), ``estimate``, ``se``, ``ci_low``, ``ci_high``,
  ``df``, ...), so every existing use keeps working, and it carries what a DataFrame cannot:
  the covariance of its rows (``covmat=True``), the interval's level and kind. From those it
  answers ``.vcov()``, ``.conf_int(level=)``, ``.se`` and ``.estimate`` as R's ``svystat``
  answers ``vcov``, ``confint``, ``SE`` and ``coef``.
* :class:`EstimatorProtocol` and :data:`ESTIMATOR_OPTIONS` -- the estimator methods and the
  options every design kind takes (R dispatches ``svymean`` on the design class; here each
  class implements the same methods with the same option names). ``tests/
  test_estimator_conformance.py`` checks every design kind against them, as scikit-learn's
  ``check_estimator`` checks an estimator.

Why a DataFrame subclass and not a wrapper object: every estimator has returned a DataFrame
since the first release, and user code indexes it, filters it, writes it to CSV and hands it to
R through reticulate; a subclass keeps all of that, a wrapper would break it. Any pandas
operation on an :class:`Estimate` (filtering rows, selecting columns, ``copy``, ``concat``)
returns a plain DataFrame (``_constructor``): after rows are dropped or reordered the stored
covariance no longer describes them, so the result must not claim it. The covariance is also
mirrored in ``attrs["covmat"]`` (its home before this type; code that reads it keeps working),
and both are checked against the current ``estimate`` column before use, so an in-place edit
is an error rather than a wrong SE.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd
from scipy import stats

#: how an Estimate's intervals were made: ``"normal"`` / ``"t"`` (Wald, est -+ crit * se, t on
#: the ``df`` column; a release's rule df is such a t), anything else (``"woodruff"`` quantile
#: intervals, ``svyciprop`` methods) is not a function of se and df: it is only available at
#: the level it was computed for.
WALD_KINDS = ("normal", "t")


def t_critical(df: Any, level: float) -> np.ndarray:
    """Two-sided critical value of a ``level`` interval: t with ``df``, normal where df is
    infinite, NaN where df <= 0 or NaN (R's ``qt(p, 0)`` is NaN: a domain with no design
    degrees of freedom has no t interval, rather than a zero-width one)."""
    q = (1 + level) / 2
    d = np.asarray(df, dtype=float)
    ok = np.isfinite(d) & (d > 0)
    with np.errstate(invalid="ignore"):
        tq = stats.t.ppf(q, np.where(ok, d, 1.0))
    return np.where(np.isposinf(d), stats.norm.ppf(q), np.where(ok, tq, np.nan))


def confidence_interval(est: Any, se: Any, df: Any, level: float,
                        ci: str) -> tuple[np.ndarray, np.ndarray]:
    """Wald interval ``est -+ crit * se``: normal (R ``confint``) or t with ``df`` (``ci="t"``,
    normal where df is infinite, NaN where df <= 0 as R's ``qt``)."""
    if ci not in ("normal", "t"):
        raise ValueError(f"ci={ci!r}: choose 'normal' (R confint) or 't' (design df).")
    if not 0 < level < 1:
        raise ValueError(f"level={level}: must be in (0, 1).")
    if ci == "normal":
        crit = stats.norm.ppf((1 + level) / 2)
    else:
        crit = t_critical(df, level)
    return est - crit * se, est + crit * se


@dataclass(frozen=True)
class Covariance:
    """The covariance matrix of an estimator's rows, with the rows' names and the estimates it
    was computed for (so a result edited since can be recognised)."""

    names: tuple[str, ...]
    estimate: np.ndarray
    matrix: np.ndarray

    def as_attrs(self) -> dict[str, Any]:
        """The ``attrs["covmat"]`` mirror (the layout code written before this type reads)."""
        return {"names": list(self.names), "estimate": self.estimate, "vcov": self.matrix}

    @classmethod
    def from_attrs(cls, cm: dict[str, Any]) -> Covariance:
        return cls(tuple(cm["names"]), np.asarray(cm["estimate"], dtype=float),
                   np.asarray(cm["vcov"], dtype=float))


def frame_names(frame: pd.DataFrame) -> list[str]:
    """Names of an estimator output's rows, as :func:`surveysynth.estimate.estimate_names`
    makes them: the ``by`` values joined by ``"."``, a colon, then the variable and its level
    (``"E:api00"``, ``"sch.wideYes"``). Read from the columns: the ``by`` columns are those
    before ``variable``, the level column the ``level`` / ``quantile`` one after it. A frame
    without ``variable`` (a contrast, a model) is named by its ``contrast`` or ``term``
    column, else by row number."""
    cols = list(frame.columns)
    if "variable" not in cols:
        for key in ("contrast", "term"):
            if key in cols:
                return [str(x) for x in frame[key].tolist()]
        return [str(i) for i in range(frame.shape[0])]
    i = cols.index("variable")
    lev = cols[i + 1] if i + 1 < len(cols) and cols[i + 1] in ("level", "quantile") else None

    def text(x: Any) -> str:
        return "" if x is None or (isinstance(x, float) and np.isnan(x)) else str(x)

    per = [f"{v}{'' if lev is None else text(le)}" for v, le in zip(
        frame["variable"].tolist(), frame[lev].tolist() if lev else [None] * len(frame),
        strict=True)]
    if i == 0:
        return per
    keys = [".".join(map(str, row)) for row in frame[cols[:i]].astype(object).to_numpy().tolist()]
    return [f"{k}:{p}" for k, p in zip(keys, per, strict=True)]


class Estimate(pd.DataFrame):
    """An estimator's result: a pandas DataFrame (one row per variable x domain) that knows
    its covariance, its interval's level and kind (R ``svystat`` / ``svyby``).

    * ``.estimate``, ``.se`` -- the columns (R ``coef``, ``SE``);
    * ``.vcov()`` -- the covariance of the rows, labelled with their names (R ``vcov``): the
      full matrix when the estimator was called with ``covmat=True``; otherwise only the
      variances are known and, as R's ``vcov.svyby``, the diagonal is returned, with a warning
      when there is more than one row;
    * ``.conf_int(level=0.95)`` -- the intervals (R ``confint``): at the estimate's own level
      its ``ci_low`` / ``ci_high``; at another level, for Wald intervals (``ci="normal"`` or ``"t"``,
      a release's rule intervals), ``estimate -+ crit * se`` with the t on the ``df`` column;
      Woodruff quantile and ``svyciprop`` intervals are not functions of the SE and must be
      recomputed by the estimator (an error says so);
    * ``.conf_level``, ``.ci_kind`` -- the interval's level and kind; ``.names`` -- the rows' names.

    Any pandas operation returns a plain DataFrame (see the module notes).

    Example (R: ``svyby(~api00, ~stype, d, svymean, covmat = TRUE)``, then ``vcov``, ``confint``):

    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"stype": ["E", "E", "E", "H", "H", "H"],
    ...                    "pw": [10.0, 10.0, 10.0, 5.0, 5.0, 5.0],
    ...                    "api00": [600.0, 650.0, 700.0, 550.0, 600.0, 640.0]})
    >>> est = ss.SurveyDesign(df, strata="stype", weights="pw").mean("api00", by="stype",
    ...                                                                covmat=True)
    >>> type(est).__name__, est.names
    ('Estimate', ['E:api00', 'H:api00'])
    >>> est.vcov().round(1)
             E:api00  H:api00
    E:api00    833.3      0.0
    H:api00      0.0    677.8
    >>> est.conf_int(level=0.9).round(1)
       ci_low  ci_high
    0   602.5    697.5
    1   553.8    639.5
    """

    _metadata = ["_covariance", "_level", "_ci"]
    _covariance: Covariance | None = None
    _level: float = 0.95
    _ci: str = "normal"

    @property
    def _constructor(self) -> type[pd.DataFrame]:
        return pd.DataFrame

    @classmethod
    def wrap(cls, frame: pd.DataFrame, level: float, ci: str,
             covariance: Covariance | None = None) -> Estimate:
        """``frame`` (an estimator's output columns) as an Estimate at ``level`` with intervals
        of kind ``ci``; its ``attrs`` (a covariance stored there included) are kept."""
        out = cls(frame)
        out.attrs = dict(frame.attrs)
        out._level = float(level)
        out._ci = str(ci)
        if covariance is None and "covmat" in frame.attrs:
            covariance = Covariance.from_attrs(frame.attrs["covmat"])
        if covariance is not None:
            out.set_covariance(covariance)
        return out

    def set_intervals(self, ci_low: Any, ci_high: Any, kind: str) -> None:
        """Replace the interval columns by limits of another ``kind`` (Woodruff quantile
        limits, ``svyciprop`` methods), at the estimate's level."""
        self["ci_low"] = np.asarray(ci_low, dtype=float).reshape(-1)
        self["ci_high"] = np.asarray(ci_high, dtype=float).reshape(-1)
        self._ci = str(kind)

    def set_covariance(self, covariance: Covariance) -> None:
        """Store the covariance of the rows (and its ``attrs["covmat"]`` mirror)."""
        self._covariance = covariance
        self.attrs["covmat"] = covariance.as_attrs()

    # ------------------------------------------------------------------ R's generics
    @property
    def estimate(self) -> pd.Series:
        """The point estimates (the ``estimate`` column; R ``coef``)."""
        return self["estimate"]

    @property
    def se(self) -> pd.Series:
        """The standard errors (the ``se`` column; R ``SE``)."""
        return self["se"]

    @property
    def conf_level(self) -> float:
        """The confidence level of ``ci_low`` / ``ci_high`` (not ``.level``: that is the
        column of a categorical variable's levels)."""
        return self._level

    @property
    def ci_kind(self) -> str:
        """How the intervals were made: ``"normal"``, ``"t"`` (on the ``df`` column),
        ``"woodruff"`` (quantiles) or a ``svyciprop`` method."""
        return self._ci

    @property
    def names(self) -> list[str]:
        """The rows' names (those of :meth:`vcov` and :func:`surveysynth.contrasts.contrast`)."""
        cov = self.covariance(required=False)
        return list(cov.names) if cov is not None else frame_names(self)

    @property
    def has_covariance(self) -> bool:
        """True when the full covariance of the rows is known (``covmat=True``)."""
        return self._covariance is not None or "covmat" in self.attrs

    def covariance(self, required: bool = True) -> Covariance | None:
        """The stored covariance, checked against the current rows (None, or an error when
        ``required``, if there is none)."""
        return stored_covariance(self, required)

    def vcov(self) -> pd.DataFrame:
        """Covariance of the estimates, labelled with their names (R ``vcov``).

        Without ``covmat=True`` only the variances are known: the diagonal matrix of se^2 is
        returned, with a warning when there is more than one row (R ``vcov.svyby``: "Only
        diagonal elements of vcov() available")."""
        cov = self.covariance(required=False)
        if cov is not None:
            return pd.DataFrame(cov.matrix, index=list(cov.names), columns=list(cov.names))
        names = frame_names(self)
        var = self["se"].to_numpy(float) ** 2
        if len(var) > 1:
            warnings.warn(
                "vcov(): only the diagonal (the variances) is known for this result; the "
                "covariances between its rows were not computed. Fix: call the estimator with "
                "covmat=True (R: svyby(..., covmat=TRUE)).", UserWarning, stacklevel=2)
        return pd.DataFrame(np.diag(var), index=names, columns=names)

    def conf_int(self, level: float = 0.95) -> pd.DataFrame:
        """Confidence intervals (R ``confint``, whose ``level`` is 0.95 unless given): columns
        ``ci_low``, ``ci_high``, indexed as the estimate's rows. At the estimate's own level
        (:attr:`conf_level`) the stored limits; at another level ``estimate -+ crit * se``
        (normal, or t on ``df``) for Wald intervals, an error for the others."""
        if level == self._level:
            return pd.DataFrame({"ci_low": self["ci_low"], "ci_high": self["ci_high"]})
        if not 0 < level < 1:
            raise ValueError(f"level={level}: must be in (0, 1).")
        if self._ci not in WALD_KINDS:
            raise ValueError(
                f"conf_int(level={level}): these are {self._ci!r} intervals computed at level "
                f"{self._level}; they are not estimate -+ crit * se, so another level needs "
                "the estimator again. Fix: call it with level=.")
        df = self["df"].to_numpy(float) if "df" in self.columns else np.inf
        lo, hi = confidence_interval(self["estimate"].to_numpy(float),
                                     self["se"].to_numpy(float), df, level, self._ci)
        return pd.DataFrame({"ci_low": lo, "ci_high": hi}, index=self.index)


def stored_covariance(result: pd.DataFrame, required: bool = True) -> Covariance | None:
    """The covariance stored with an estimator's output (an :class:`Estimate`, or a frame
    derived from one that kept ``attrs["covmat"]``), checked against its current rows."""
    cov = getattr(result, "_covariance", None) if isinstance(result, Estimate) else None
    if cov is None and isinstance(result, pd.DataFrame) and "covmat" in result.attrs:
        cov = Covariance.from_attrs(result.attrs["covmat"])
    if cov is None:
        if not required:
            return None
        raise ValueError(
            "vcov/contrast: this result carries no covariance matrix. Fix: compute it with "
            "covmat=True, e.g. design.mean(['a', 'b'], by='g', covmat=True) (R: "
            "svyby(..., covmat=TRUE))."
        )
    est = result["estimate"].to_numpy(float)
    if est.shape != cov.estimate.shape or not np.array_equal(est, cov.estimate, equal_nan=True):
        raise ValueError(
            "vcov/contrast: the rows of this result are not those its covariance was computed "
            f"for ({len(result)} rows now, {len(cov.names)} then, or reordered/edited). Fix: "
            "take vcov/contrast of the estimator's output as returned, and filter afterwards."
        )
    return cov


# ---------------------------------------------------------------------- the estimator protocol
#: The options every design kind's estimators take, by method (R: the arguments shared by the
#: ``svytotal``/``svymean``/... methods of every design class). Defaults are common too
#: (:data:`COMMON_DEFAULTS`), except ``ci`` (a release's default ``"t"`` is its combining
#: rule's reference) and ``engine`` (a Dask design's default is ``"dask"``). A design kind may
#: add options of its own (``deff``, ``covmat``, ``ci_method``, ``qrule``, ...): they are
#: documented on it, and the others refuse them by name.
ESTIMATOR_OPTIONS: dict[str, tuple[str, ...]] = {
    "total": ("variables", "by", "na_rm", "level", "ci", "df", "engine", "covmat"),
    "mean": ("variables", "by", "na_rm", "level", "ci", "df", "engine", "covmat"),
    "proportion": ("variables", "by", "na_rm", "level", "ci", "df", "engine", "covmat"),
    "ratio": ("numerator", "denominator", "by", "na_rm", "level", "ci", "df", "engine",
              "covmat"),
    "quantile": ("variables", "quantiles", "by", "na_rm", "level", "df", "engine"),
}
#: defaults every design kind shares (for the options a method takes)
COMMON_DEFAULTS: dict[str, Any] = {"by": None, "na_rm": False, "level": 0.95, "df": None,
                                   "covmat": False}


@runtime_checkable
class EstimatorProtocol(Protocol):
    """The estimators of a design kind (``SurveyDesign``, ``ReplicateDesign``,
    ``SyntheticRelease``, ``DaskSurveyDesign``, ``DaskReplicateDesign``): each returns an
    :class:`Estimate` and takes the options of :data:`ESTIMATOR_OPTIONS`.

    Options: ``by`` domains (R ``svyby``); ``na_rm`` drop missing values from the domain;
    ``level`` of the intervals; ``ci`` ``"normal"`` or ``"t"`` (on ``df``); ``df`` the
    complete-data degrees of freedom: None each domain's own design df, ``"design"`` the whole
    design's, or a number (on a release: the synthetic designs' df that cap the rule's df);
    ``engine`` the estimation engine (a release passes it to every synthetic design);
    ``covmat`` also compute the covariance of all the estimates (``Estimate.vcov()``; on a
    release, the combining rule applied to the sets' matrices).

    A class that cannot compute a statistic lists it in ``unsupported_estimators`` and raises
    a ``NotImplementedError`` naming the alternative (the Dask designs: ``quantile``).
    """

    unsupported_estimators: tuple[str, ...]

    def total(self, variables: Any, by: Any = None, na_rm: bool = False, level: float = 0.95,
              ci: str = "normal", df: Any = None, engine: str = "native",
              covmat: bool = False, **options: Any) -> Estimate: ...

    def mean(self, variables: Any, by: Any = None, na_rm: bool = False, level: float = 0.95,
             ci: str = "normal", df: Any = None, engine: str = "native",
             covmat: bool = False, **options: Any) -> Estimate: ...

    def proportion(self, variables: Any, by: Any = None, na_rm: bool = False,
                   level: float = 0.95, ci: str = "normal", df: Any = None,
                   engine: str = "native", covmat: bool = False,
                   **options: Any) -> Estimate: ...

    def ratio(self, numerator: Any, denominator: Any, by: Any = None, na_rm: bool = False,
              level: float = 0.95, ci: str = "normal", df: Any = None, engine: str = "native",
              covmat: bool = False, **options: Any) -> Estimate: ...

    def quantile(self, variables: Any, quantiles: Any, by: Any = None, na_rm: bool = False,
                 level: float = 0.95, df: Any = None, engine: str = "native",
                 **options: Any) -> Estimate: ...
