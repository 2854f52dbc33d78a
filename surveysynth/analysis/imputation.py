"""Designs over multiply imputed data and plausible values, with Rubin's rules (R ``survey``
``svydesign(data=imputationList(...))``, ``with.svyimputationList``, ``withPV`` and
``mitools::MIcombine``).

* :class:`ImputationDesign` holds m designs, one per completed data set, with the same design
  variables (R's ``svyimputationList``). Build it with :meth:`ImputationDesign.from_frames`
  (m data frames and ``SurveyDesign`` arguments, R's ``svydesign(id=, data=imputationList)``)
  or from m designs you built (e.g. replicate designs, R's ``as.svrepdesign`` on the list:
  :meth:`ImputationDesign.map`).
* Every estimator (``total``, ``mean``, ``proportion``, ``ratio``, ``quantile``, ``glm``)
  runs on each design and combines the m results by Rubin's rules: the point estimate is the
  mean of the m estimates, the variance ``T = ubar + (1 + 1/m) b`` with the within variance
  ``ubar`` (mean of the squared SEs) and the between variance ``b``; the df are Rubin's
  large-sample ``(m-1)(1 + 1/r)^2``, ``r = (1+1/m) b / ubar`` (MIcombine's default,
  ``df.complete=Inf``), and intervals are ``qbar -+ t_df sqrt(T)``. The rule is
  :func:`surveysynth.combine.combine` with ``kind="mi"`` (the package's one MI rule).
  ``missinfo`` is R's fraction of missing information ``(r + 2/(df+3)) / (r + 1)``.
* :meth:`ImputationDesign.with_` is R's ``with(designs, expr)``: a list of the m results,
  combined by :func:`MIcombine`.
* :func:`withPV` is R's ``withPV(mapping, data=design, action)``: the action runs once per
  plausible value with the working variable(s) holding that plausible value (R's
  ``rewrite=FALSE`` route: the design gets the working column, :meth:`update`); the list of
  results goes to :func:`MIcombine`.

Differences from R, on purpose: :func:`MIcombine` combines each estimate with its own SE (the
diagonal of R's matrix rule; every reported number, estimate, SE, df, interval, missinfo, is
the same as R's, which uses only the diagonal for them); results whose labels differ between
imputations (a level missing from one data set) are an error naming the imputations, where R
would combine mismatched vectors by position.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ..combine import combine
from ..design import SurveyDesign
from .glm import GLMResults, svyglm

#: columns of an estimator's frame that carry values (everything else labels the row)
_VALUE_COLS = ("estimate", "se", "ci_low", "ci_high", "df", "deff", "cv", "n", "variance",
               "var", "t", "p")


class ImputationDesign:
    """m survey designs over m completed (imputed) data sets; estimators apply Rubin's rules.

    R: ``svydesign(ids, strata, weights, data=imputationList(list_of_frames))`` (class
    ``svyimputationList``). Example (R's ``?with.svyimputationList``)::

        designs = ImputationDesign.from_frames(frames, ids="id", strata="sex")
        designs.mean("drkfre")                    # MIcombine(with(designs, svymean(~drkfre)))
        designs.map(lambda d: d.bootstrap(50, method="canty-davison")).mean("drkfre")

    A runnable example (three imputations of one small sample):

    >>> import numpy as np, pandas as pd
    >>> import surveysynth as ss
    >>> frames = [pd.DataFrame({"y": [1.0, 2, 3, 4, 5, 6 + k], "g": [0, 0, 0, 1, 1, 1]})
    ...           for k in range(3)]
    >>> designs = ss.ImputationDesign.from_frames(frames, strata="g", weights=np.full(6, 10.0))
    >>> designs.mean("y")[["estimate", "se", "df", "m"]].round(4)
       estimate      se     df  m
    0    3.6667  0.5774  162.0  3
    """

    def __init__(self, designs: Sequence[Any]) -> None:
        designs = list(designs)
        if not designs:
            raise ValueError("ImputationDesign: no designs (m = 0). Fix: pass one design per "
                             "imputed data set.")
        for i, d in enumerate(designs):
            if not hasattr(d, "mean") or not hasattr(d, "full_weights"):
                raise TypeError(f"ImputationDesign: item {i} is a {type(d).__name__}, not a "
                                "SurveyDesign or ReplicateDesign.")
        self._designs = tuple(designs)

    @classmethod
    def from_frames(cls, frames: Sequence[pd.DataFrame], **design_args: Any) -> ImputationDesign:
        """One :class:`~surveysynth.SurveyDesign` per data frame with the same arguments (R
        ``svydesign(..., data=imputationList(frames))``). The frames must have the same rows
        (the imputations of one sample)."""
        frames = list(frames)
        if not frames:
            raise ValueError("from_frames: no data frames. Fix: pass the m imputed data sets.")
        n0 = len(frames[0])
        bad = [i for i, f in enumerate(frames) if len(f) != n0]
        if bad:
            raise ValueError(
                f"from_frames: imputations {bad[:5]} have {len(frames[bad[0]])} rows but "
                f"imputation 0 has {n0}: each imputed data set must hold the same sample. Fix: "
                "pass the m completed copies of one data set.")
        return cls([SurveyDesign(f, **design_args) for f in frames])

    # ------------------------------------------------------------------ the list
    @property
    def designs(self) -> tuple[Any, ...]:
        """The m designs (one per imputed data set)."""
        return self._designs

    @property
    def m(self) -> int:
        """Number of imputations."""
        return len(self._designs)

    def __len__(self) -> int:
        return self.m

    def __repr__(self) -> str:
        d = self._designs[0]
        return (f"ImputationDesign: {self.m} imputations of a {type(d).__name__} "
                f"({d.n} rows)")

    def map(self, func: Callable[[Any], Any]) -> ImputationDesign:
        """A new ImputationDesign with ``func`` applied to each design (R's
        ``as.svrepdesign``, ``subset``, ``calibrate``... on a ``svyimputationList``)."""
        return ImputationDesign([func(d) for d in self._designs])

    def with_(self, func: Callable[[Any], Any]) -> list[Any]:
        """R ``with(designs, expr)``: ``func(design)`` for each imputation, as a list (give it
        to :func:`MIcombine`)."""
        return [func(d) for d in self._designs]

    def subset(self, mask: Callable[[pd.DataFrame], Any]) -> ImputationDesign:
        """R ``subset(designs, cond)``: ``mask(data)`` is evaluated in each imputation (the
        domain may differ between imputations when it depends on imputed values)."""
        if not callable(mask):
            raise TypeError("subset(): give a function of the data, e.g. "
                            "lambda df: df['age'] > 30 (it is evaluated in every imputation).")
        return self.map(lambda d: d.subset(mask(d.data)))

    def update(self, **columns: Any) -> ImputationDesign:
        """R ``update(designs, name = expr)``: new columns in every imputation (see
        :meth:`surveysynth.SurveyDesign.update`; a callable is evaluated per imputation)."""
        return self.map(lambda d: d.update(**columns))

    # ------------------------------------------------------------------ estimators
    def _run(self, method: str, *args: Any, level: float = 0.95, **kw: Any) -> pd.DataFrame:
        return MIcombine([getattr(d, method)(*args, **kw) for d in self._designs], level=level)

    def total(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
              na_rm: bool = False, level: float = 0.95) -> pd.DataFrame:
        """Totals combined over the imputations by Rubin's rules (R
        ``MIcombine(with(designs, svytotal(~x)))``). Columns: the label columns of
        ``d.total``, ``estimate``, ``variance``, ``se``, ``df``, ``ci_low``, ``ci_high``,
        ``between``, ``within``, ``missinfo``, ``m``."""
        return self._run("total", variables, by=by, na_rm=na_rm, level=level)

    def mean(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
             na_rm: bool = False, level: float = 0.95) -> pd.DataFrame:
        """Means combined by Rubin's rules (columns as :meth:`total`)."""
        return self._run("mean", variables, by=by, na_rm=na_rm, level=level)

    def proportion(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
                   na_rm: bool = False, level: float = 0.95) -> pd.DataFrame:
        """Level shares combined by Rubin's rules (columns as :meth:`total`)."""
        return self._run("proportion", variables, by=by, na_rm=na_rm, level=level)

    def ratio(self, numerator: str | Sequence[str], denominator: str | Sequence[str],
              by: str | Sequence[str] | None = None, na_rm: bool = False,
              level: float = 0.95) -> pd.DataFrame:
        """Ratios of totals combined by Rubin's rules (columns as :meth:`total`)."""
        return self._run("ratio", numerator, denominator, by=by, na_rm=na_rm, level=level)

    def quantile(self, variables: str | Sequence[str], quantiles: float | Sequence[float],
                 by: str | Sequence[str] | None = None, na_rm: bool = False,
                 level: float = 0.95) -> pd.DataFrame:
        """Quantiles with their Woodruff SEs combined by Rubin's rules (R
        ``MIcombine(with(designs, svyquantile(...)))``, which uses each quantile's SE)."""
        frames = [d.quantile(variables, quantiles, by=by, na_rm=na_rm)
                  for d in self._designs]
        return MIcombine(frames, level=level)

    def glm(self, formula: str, family: str = "gaussian", link: str | None = None,
            na_rm: bool = False, level: float = 0.95) -> pd.DataFrame:
        """svyglm on every imputation, coefficients combined by Rubin's rules (R
        ``MIcombine(with(designs, svyglm(formula)))``); one row per term."""
        fits = [svyglm(formula, d, family=family, link=link, na_rm=na_rm)
                for d in self._designs]
        return MIcombine(fits, level=level)


def _glm_frame(fit: GLMResults) -> pd.DataFrame:
    return pd.DataFrame({"term": list(fit.params.index),
                         "estimate": fit.params.to_numpy(dtype=float),
                         "se": fit.bse.to_numpy(dtype=float)})


def _as_frame(result: Any, i: int) -> pd.DataFrame:
    if isinstance(result, GLMResults):
        return _glm_frame(result)
    if isinstance(result, pd.DataFrame):
        if "estimate" not in result.columns or "se" not in result.columns:
            raise ValueError(f"MIcombine: result {i} has no 'estimate' and 'se' columns (it "
                             f"has {list(result.columns)[:8]}). Fix: combine estimator frames "
                             "or svyglm fits.")
        return result
    if isinstance(result, tuple) and len(result) == 2:
        est, var = (np.atleast_1d(np.asarray(a, dtype=float)) for a in result)
        if var.ndim == 2:
            var = np.diag(var)
        return pd.DataFrame({"term": np.arange(est.size), "estimate": est,
                             "se": np.sqrt(var)})
    raise TypeError(f"MIcombine: result {i} is a {type(result).__name__}; give estimator "
                    "frames, svyglm fits or (estimates, variances) pairs.")


def MIcombine(results: Sequence[Any], level: float = 0.95) -> pd.DataFrame:
    """Rubin's rules over m analyses of imputed data (R ``mitools::MIcombine``).

    ``results``: one per imputation, all of one kind: estimator frames (``d.mean(...)``,
    ``d.total(...)``, ...), :class:`~surveysynth.analysis.GLMResults`, or ``(estimates,
    variances)`` pairs (variances a vector or a covariance matrix). Rows are matched by their
    label columns; every imputation must give the same rows (an error names the ones that
    differ). Returns the label columns and ``estimate`` (qbar), ``variance`` (T), ``se``,
    ``df`` (Rubin's), ``ci_low``, ``ci_high``, ``between``, ``within``, ``missinfo`` (R's
    fraction of missing information), ``m`` and ``note``.
    """
    results = list(results)
    if not results:
        raise ValueError("MIcombine: no results. Fix: pass one analysis per imputation.")
    frames = [_as_frame(r, i) for i, r in enumerate(results)]
    keys = [c for c in frames[0].columns if c not in _VALUE_COLS]
    labels0 = frames[0][keys].reset_index(drop=True)
    for i, f in enumerate(frames[1:], start=1):
        lab = f[[c for c in f.columns if c not in _VALUE_COLS]].reset_index(drop=True)
        if list(lab.columns) != keys or not lab.astype(object).equals(labels0.astype(object)):
            got = lab.astype(str).agg(" ".join, axis=1).tolist()[:6]
            want = labels0.astype(str).agg(" ".join, axis=1).tolist()[:6]
            raise ValueError(
                f"MIcombine: imputation {i} gives rows {got} but imputation 0 gives "
                f"{want}: every imputation "
                "must estimate the same quantities (a level absent from one imputed data set "
                "changes them). Fix: declare the levels (pandas Categorical) so every "
                "imputation has them all.")
    q = np.vstack([f["estimate"].to_numpy(dtype=float) for f in frames])
    u = np.vstack([f["se"].to_numpy(dtype=float) ** 2 for f in frames])
    out = combine(q, u, kind="mi", level=level)
    m = q.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        b = out["between"].to_numpy(dtype=float)
        ubar = out["within"].to_numpy(dtype=float)
        r = (1 + 1 / m) * b / ubar
        df = out["df"].to_numpy(dtype=float)
        miss = np.where(np.isfinite(df), (r + 2 / (df + 3)) / (r + 1), r / (r + 1))
    out.insert(out.columns.get_loc("m"), "missinfo", miss)
    res = pd.concat([labels0, out], axis=1)
    if "term" in res.columns and isinstance(results[0], GLMResults):
        est, se, dfv = (res[c].to_numpy(dtype=float) for c in ("estimate", "se", "df"))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = est / se
            p = np.where(np.isfinite(dfv), 2 * stats.t.sf(np.abs(t), np.where(
                np.isfinite(dfv) & (dfv > 0), dfv, 1.0)), 2 * stats.norm.sf(np.abs(t)))
        res["t"] = t
        res["p"] = p
    return res


def withPV(mapping: Mapping[str, Sequence[str]], design: Any,
           action: Callable[[Any], Any]) -> list[Any]:
    """Run ``action`` once per plausible value (R ``withPV(mapping, data=design, action)``).

    ``mapping``: working variable name -> its plausible-value columns, e.g.
    ``{"maths": ["PV1MATH", ..., "PV5MATH"]}`` (R: ``list(maths ~ PV1MATH + ... + PV5MATH)``).
    For i = 1..k, ``action`` gets the design with column ``maths`` holding ``PV{i}MATH``
    (every working variable its i-th plausible value). Returns the k results; combine them with
    :func:`MIcombine` (R: ``MIcombine(withPV(...))``).
    """
    if not isinstance(mapping, Mapping) or not mapping:
        raise ValueError("withPV: mapping must be a non-empty dict {working name: [PV columns]}"
                         ", e.g. {'maths': ['PV1MATH', 'PV2MATH']}.")
    cols = design.full_data.columns
    lists = {}
    for name, pvs in mapping.items():
        pvs = [pvs] if isinstance(pvs, str) else list(pvs)
        if name in cols:
            raise ValueError(f"withPV: working name {name!r} is already a column of the data "
                             "(R: 'working PV names must not already occur in the data'). "
                             "Fix: choose a new name.")
        missing = [c for c in pvs if c not in cols]
        if missing:
            raise ValueError(f"withPV: plausible-value columns {missing} for {name!r} are not "
                             "in the data.")
        lists[name] = pvs
    sizes = {len(v) for v in lists.values()}
    if len(sizes) > 1:
        raise ValueError(f"withPV: the working variables have different numbers of plausible "
                         f"values ({ {k: len(v) for k, v in lists.items()} }); R requires the "
                         "same number for all.")
    k = sizes.pop()
    return [action(design.update(**{name: pvs[i] for name, pvs in lists.items()}))
            for i in range(k)]


#: snake_case aliases
mi_combine = MIcombine
with_pv = withPV
