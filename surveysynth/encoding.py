"""One encoder of categorical predictors: R's factor levels, treatment contrasts and names.

Every place that turns a categorical variable into numbers goes through this module: the
calibration model matrix (:func:`surveysynth.calibration.model_matrix`), the formulas of the
analysis layer (formulaic, through :class:`surveysynth.analysis.formulas.RMaterializer`), the
predictor cells of the pseudo posterior synthesizers (``synth/cells.py``), the design matrix of
the risk-weighted synthesizers (``synth/risk_weighted.py``), Sequential's public predictors and
synthesized categories (``synth/sequential.py``) and the joint utility measures of the report
(``report.py``). So a categorical variable is coded alike wherever it is used: the same levels
in the same order, the same reference level, the same column names. The decisions (written in
docs/architecture.md, "Encoding of categorical variables"):

* **What is a factor**: a column that is not numeric, a boolean column (R codes a logical
  variable as a factor with levels ``FALSE``, ``TRUE``), or a pandas Categorical (whatever the
  type of its categories). :func:`is_factor`.
* **Level order** (:func:`r_levels`): a Categorical keeps its categories in their order (R's
  ``factor`` levels); anything else is sorted as R's ``factor()`` sorts it: numbers
  numerically, logicals ``FALSE`` before ``TRUE``, character strings by code point (R's order
  in the C collation, ``LC_COLLATE=C``, as under ``R CMD check``; an ICU locale orders ``a``
  before ``B``, which Python's sort does not follow). Values of mixed types are sorted by their
  text, as R sorts them after coercing to character. ``used_only=True`` keeps only the levels
  present (R's ``droplevels``), for the synthesizers, where a level with no record has no
  estimable effect.
* **Levels are learned once**, on the confidential data (:meth:`Factor.learn`), and re-applied
  to every synthetic set (:meth:`Factor.codes`): a value that is not a learned level is an error
  naming the column, the first rows and the fix, never a silent missing value.
* **Contrasts**: treatment contrasts, reference = the first level (R's ``contr.treatment``);
  ``full=True`` gives one indicator per level (R's coding of the first factor of a model
  without intercept).
* **Names**: R's ``model.matrix`` names, the variable name followed by the level's text with
  no separator (``stypeH``, ``sch.wideYes``, ``ownerTRUE``): :meth:`Factor.names`.
* **Missing values**, one policy: by default a missing value is an error naming the column
  and the rows (``na="error"``: nothing is dropped silently). Where missingness is itself
  information (the report's joint measures, Sequential's public predictors), it is ONE extra
  level, :data:`NA_LEVEL`, always the last one (R's ``addNA``; R's name ``xNA``). Sequential's
  synthesized variables model missingness by a missing-indicator step before the value's
  step, the same level split into its own step: their value codes carry ``-1`` for a missing
  value (``na="skip"``), an all-zero row of indicators.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["NA_LEVEL", "Factor", "is_factor", "r_label", "r_levels"]


class _NALevel:
    """The missing-value level: one object (never equal to a data value), shown as R shows
    it (``<NA>``) and named as R names it in a model matrix (``NA``)."""

    _instance: _NALevel | None = None

    def __new__(cls) -> _NALevel:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<NA>"

    def __reduce__(self) -> str:  # pickles (a fitted synthesizer) keep the one object
        return "NA_LEVEL"


#: The level of missing values under ``na="level"``: always the last level.
NA_LEVEL = _NALevel()

_NA_POLICIES = ("error", "level", "skip")


def is_factor(values: Any) -> bool:
    """True for what R codes as a factor: a non-numeric column, a boolean column (R's
    logical), or a pandas Categorical (whatever its categories' type)."""
    dtype = getattr(values, "dtype", None)
    if dtype is None:
        values = pd.Series(values)
        dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return True
    if str(dtype) in ("bool", "boolean"):
        return True
    return not pd.api.types.is_numeric_dtype(dtype)


def r_levels(values: pd.Series, used_only: bool = False) -> list:
    """The levels of a categorical variable in R's order (module notes): a Categorical's
    categories (``used_only``: those with a non-missing value, in category order), else the
    distinct non-missing values sorted (numbers numerically, ``False`` before ``True``, text by
    code point; mixed types by their text)."""
    s = values if isinstance(values, pd.Series) else pd.Series(values)
    if isinstance(s.dtype, pd.CategoricalDtype):
        cats = list(s.cat.categories)
        if not used_only:
            return cats
        codes = np.asarray(s.cat.codes)
        present = np.bincount(codes[codes >= 0], minlength=len(cats)) > 0
        return [c for c, p in zip(cats, present, strict=True) if p]
    uniq = pd.unique(s.dropna()).tolist()
    try:
        return sorted(uniq)
    except TypeError:
        return sorted(uniq, key=str)


def r_label(level: Any) -> str:
    """A level's text in R's model matrix names: ``TRUE``/``FALSE`` for logicals, ``NA`` for
    the missing-value level, else ``str`` (a float level keeps Python's text, ``1.0``, where R
    writes ``1``: the calibration's population keys are matched on this text)."""
    if level is NA_LEVEL:
        return "NA"
    if isinstance(level, (bool, np.bool_)):
        return "TRUE" if level else "FALSE"
    return str(level)


def _first_rows(index: pd.Index, mask: np.ndarray, k: int = 5) -> str:
    rows = index[np.asarray(mask, dtype=bool)][:k].tolist()
    more = int(np.asarray(mask).sum()) - len(rows)
    return f"{rows}" + (f" (and {more} more)" if more > 0 else "")


@dataclass(frozen=True)
class Factor:
    """The coding of one categorical variable, learned on the confidential data.

    ``levels`` in R's order (``NA_LEVEL`` last when missing values form a level); ``na`` the
    missing-value policy: ``"error"`` (a missing value is refused), ``"level"`` (the last level,
    ``NA_LEVEL``) or ``"skip"`` (code -1: an all-zero row of indicators; Sequential's steps,
    whose missingness a missing-indicator step models)."""

    name: str
    levels: tuple
    na: str = "error"

    @classmethod
    def learn(cls, values: pd.Series, name: str | None = None, used_only: bool = False,
              na: str = "error", what: str | None = None) -> Factor:
        """Learn the levels of ``values`` (the confidential column). ``na="level"`` adds
        :data:`NA_LEVEL` as the last level when a value is missing (and only then);
        ``na="error"`` refuses a missing value, naming the column, rows and fix. ``what``
        names the column in messages (default: ``predictor 'name'``)."""
        if na not in _NA_POLICIES:
            raise ValueError(f"na must be one of {_NA_POLICIES}; got {na!r}.")
        s = values if isinstance(values, pd.Series) else pd.Series(values)
        nm = str(name if name is not None else s.name)
        miss = s.isna().to_numpy()
        if na == "error" and miss.any():
            raise ValueError(
                f"{what or f'predictor {nm!r}'} has missing values in rows "
                f"{_first_rows(s.index, miss)} ({int(miss.sum())} in all); nothing is dropped "
                "silently. Fix: impute them, recode missing as a category, or drop those rows "
                "explicitly.")
        levels = r_levels(s, used_only=used_only)
        if na == "level" and miss.any():
            levels = [*levels, NA_LEVEL]
        return cls(nm, tuple(levels), na)

    def with_levels(self, extra: Iterable[Any]) -> Factor:
        """This coding with the new levels ``extra`` appended (sorted, before ``NA_LEVEL``):
        for a comparison that must code values a synthetic set has and the confidential data
        have not (the report's utility measures), where an unseen level is a finding, not an
        error."""
        known = set(self.levels)
        new = [v for v in dict.fromkeys(extra) if v not in known and v is not NA_LEVEL]
        if not new:
            return self
        try:
            new = sorted(new)
        except TypeError:
            new = sorted(new, key=str)
        base = [v for v in self.levels if v is not NA_LEVEL]
        tail = [NA_LEVEL] if NA_LEVEL in self.levels else []
        return Factor(self.name, tuple(base + new + tail), self.na)

    @property
    def n_levels(self) -> int:
        return len(self.levels)

    def codes(self, values: pd.Series, what: str | None = None) -> np.ndarray:
        """0-based level code of every value (int64). A missing value gets the ``NA_LEVEL``
        code (``na="level"``; a data set without missing values at learning time has no such
        level, so a missing value later is refused like an unseen level), -1 (``"skip"``), or
        is refused (``"error"``). A value that is not a level is an error naming the column,
        the first rows and the fix."""
        s = values if isinstance(values, pd.Series) else pd.Series(values)
        miss = s.isna().to_numpy()
        lv = [v for v in self.levels if v is not NA_LEVEL]
        codes = np.asarray(pd.Index(lv, dtype=object).get_indexer(s.astype(object)),
                           dtype=np.int64)
        if miss.any():
            if self.na == "skip":
                codes[miss] = -1
            elif self.na == "level" and NA_LEVEL in self.levels:
                codes[miss] = self.levels.index(NA_LEVEL)
        bad = codes < 0
        if self.na == "skip":
            bad &= ~miss
        if bad.any():
            shown = pd.unique(s[bad].astype(object)).tolist()[:5]
            raise ValueError(
                f"{what or f'column {self.name!r}'}: values {shown} in rows "
                f"{_first_rows(s.index, bad)} are not among the levels {list(self.levels)} "
                "learned when the coding was fitted (for a release: on the confidential data). "
                "Fix: recode them to a learned level, or fit on data that has them.")
        return codes

    def indicators(self, codes: np.ndarray, full: bool = False) -> np.ndarray:
        """Treatment-contrast indicators of level ``codes``: (n, K - 1) float columns for the
        levels after the reference (the first), or (n, K) with ``full``. Code -1 (a skipped
        missing value) is a row of zeros."""
        codes = np.asarray(codes, dtype=np.int64)
        first = 0 if full else 1
        return (codes[:, None] == np.arange(first, self.n_levels)[None, :]).astype(float)

    def matrix(self, values: pd.Series, full: bool = False, what: str | None = None) -> np.ndarray:
        """:meth:`indicators` of :meth:`codes` of ``values``."""
        return self.indicators(self.codes(values, what), full)

    def names(self, full: bool = False, sep: str = "") -> list[str]:
        """Column names of :meth:`indicators`, R's ``model.matrix`` names (``stypeH``);
        ``sep`` between variable and level for a label (``"="``: ``stype=H``)."""
        use = self.levels if full else self.levels[1:]
        return [f"{self.name}{sep}{r_label(v)}" for v in use]
