"""SyntheticRelease: m synthetic survey designs, how they were made, and what they promise.

A release is what leaves the agency: m data sets of synthetic microdata, each with the design
an analyst should use on it (weights, strata, clusters), the synthesis kind that decides the
combining rule (partial or full synthesis, METHODS section 4) and a privacy record (mechanism,
epsilon, Lipschitz bound, guarantee label and its exact text).

Its estimators (``total``, ``mean``, ``ratio``, ``proportion``, ``quantile``, with the options
of every design kind: ``by``, ``na_rm``, ``level``, ``ci``, ``df``, ``engine``;
:class:`surveysynth.results.EstimatorProtocol`) run the same estimator on every synthetic
design and combine the m results with :func:`surveysynth.combine` under the release's rule, so
analysts never do combining-rule arithmetic by hand. They return a :class:`ReleaseEstimate`,
an :class:`~surveysynth.results.Estimate` whose intervals are the rule's.

``save(path)`` writes only what may be published: one Parquet file per synthetic data set, and a
JSON manifest with the design specification (column names of ids/strata/weights/fpc), the kind,
the privacy record with the guarantee text, m, the package version and the column list.
:func:`load_release` rebuilds the designs.

Decisions (docs/tables.md):

* Domains missing from some synthetic sets (a synthetic set may have no record in a cell): for
  totals and counts the set's estimate is 0 with variance 0 (an empty domain has total 0), which
  keeps released counts additive; for means, ratios and proportions the combined cell is NaN
  and ``note`` says in how many sets the domain was empty.
* The full-synthesis floor T_s needs the confidential sample size n: ``n_original`` when given
  (a count, not a confidential value; kept in the manifest). Without it n is taken equal to the
  synthetic set size (the synthesizers here generate n records) and ``note`` says so.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from .combine import NOTE_FALLBACK, combine_sets, low_df_note, rule_note
from .privacy.confidential import write_confidential
from .privacy.record import PrivacyRecord
from .results import Covariance, Estimate, confidence_interval, stored_covariance

RELEASE_KINDS = ("partial", "full")
MANIFEST = "manifest.json"
FORMAT = "surveysynth-release"
FORMAT_VERSION = 2
_WEIGHT_COLUMN = "__surveysynth_weight__"
# per-set value columns (everything else labels a cell); the combined frame recomputes cv
_VALUE_COLS = ("estimate", "se", "ci_low", "ci_high", "df", "deff", "cv", "n", "variance")


class ReleaseEstimate(Estimate):
    """A combined estimate of a release: an :class:`~surveysynth.results.Estimate` (a pandas
    DataFrame with ``.vcov()``, ``.conf_int(level=)``, ``.se``, ``.estimate``) that prints
    every column. Its intervals are the rule's: ``ci="t"`` on the rule's df (the ``df``
    column), so ``conf_int(level)`` at another level is ``estimate -+ t_df se`` as well.

    Printed (``repr``), it shows all columns, ``df``, ``ci_low`` and ``ci_high`` included
    (pandas would otherwise elide middle columns in a narrow terminal), then the rule, its df
    (capped by the synthetic design's df, issue 36 D8) and one line of its assumptions
    (:func:`surveysynth.combine.rule_note`), and, when a row has df < 2, one line saying why
    and what helps (:func:`surveysynth.combine.low_df_note`). Any operation on it returns a
    plain DataFrame.
    """

    # Estimate's covariance, level and interval kind, then the release's own
    _metadata = ["_covariance", "_level", "_ci", "release_kind", "design_df"]
    release_kind: str = "full"  # the release's rule ("partial" / "full"), set by the release
    design_df: Any = None  # per row: the synthetic designs' df that capped the rule's df

    def df_note(self) -> str | None:
        """The df < 2 explanation (None when every row has df >= 2)."""
        return low_df_note(self, self.release_kind)

    def rule_note(self) -> str:
        """The rule, its df (and the design df that capped it) and its assumptions: two lines."""
        return rule_note(self, self.release_kind, self.design_df)

    def __repr__(self) -> str:
        with pd.option_context("display.max_columns", None):
            text = pd.DataFrame(self).__repr__()
        text = f"{text}\n{self.rule_note()}"
        note = self.df_note()
        return text if note is None else f"{text}\n{note}"

    def _repr_html_(self) -> str | None:
        with pd.option_context("display.max_columns", None):
            html = pd.DataFrame(self)._repr_html_()
        if html is None:
            return html
        from html import escape
        html = f"{html}<p>{escape(self.rule_note())}</p>"
        note = self.df_note()
        return html if note is None else f"{html}<p>{escape(note)}</p>"


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` as a plain DataFrame without ``attrs`` (the same columns, no copy)."""
    out = pd.DataFrame(frame)
    out.attrs = {}
    return out


def _check_ci(ci: str, level: float) -> None:
    """A release's ``ci`` and ``level``, checked before any synthetic set is estimated."""
    if ci not in ("t", "normal"):
        raise ValueError(f"ci={ci!r}: choose 't' (the combining rule's t on its df, the "
                         "default) or 'normal' (the large-sample normal reference).")
    if not 0 < level < 1:
        raise ValueError(f"level={level}: must be in (0, 1).")


def _as_record(privacy: Any, m: int) -> PrivacyRecord:
    if isinstance(privacy, dict):
        privacy = PrivacyRecord.from_dict(privacy)
    if not isinstance(privacy, PrivacyRecord):
        raise ValueError(
            "privacy must be a PrivacyRecord built by surveysynth.privacy.record.build_record "
            f"(the one builder that generates the guarantee text), got {type(privacy).__name__}."
        )
    if privacy.m != m:
        raise ValueError(
            f"privacy record m={privacy.m} but the release holds {m} synthetic designs: they "
            "must agree (epsilon usually scales with m)."
        )
    return privacy


def _design_spec(design: Any) -> dict[str, Any]:
    """Column-name specification of a SurveyDesign (what load_release needs to rebuild it)."""
    from .design import SurveyDesign

    if not isinstance(design, SurveyDesign):
        raise ValueError(
            f"save(): only SurveyDesign members can be saved, got {type(design).__name__}. "
            "Fix: release the linearization designs; analysts can build replicate designs."
        )
    if design.is_subset:
        raise ValueError(
            "save(): a synthetic design is a subset() of its data; release whole designs "
            "(domain estimation needs the full design)."
        )
    return {
        "ids": list(design.ids_vars) or None,
        "strata": list(design.strata_vars) if design.strata_vars else None,
        "fpc": list(design.fpc_vars) if design.fpc_vars else None,
        "weights": design.weights_var,
        "nest": bool(design.nest),
        "lonely_psu": design.lonely_psu,
        "adjust_domain_lonely": bool(design.adjust_domain_lonely),
    }


def _design_df(stacked: pd.DataFrame, sets: np.ndarray, row: np.ndarray, m: int,
               k: int) -> np.ndarray | None:
    """Per estimand, the smallest design df over the m synthetic sets (their ``df`` column,
    R's ``degf`` of the domain); NaN where no set reports one (no cap)."""
    if "df" not in stacked.columns:
        return None
    d = np.full((m, k), np.nan)
    d[sets, row] = pd.to_numeric(stacked["df"], errors="coerce").to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        nu = np.where(np.isnan(d).all(axis=0), np.nan, np.nanmin(np.where(np.isnan(d), np.inf, d), axis=0))
        # a domain with no design df in some set (<= 0): no cap (its per-set t has none either)
        nu[~(nu > 0)] = np.nan
    return nu


class SyntheticRelease:
    """m synthetic survey designs with their synthesis kind and privacy record.

    Parameters
    ----------
    designs : list of SurveyDesign (or ReplicateDesign)
        One design per synthetic data set, each holding synthetic data only.
    kind : ``"partial"`` (some variables kept as collected: Reiter's partial-synthesis rule) or
        ``"full"`` (every released value synthetic: Raghunathan-Reiter-Rubin full-synthesis rule).
    privacy : PrivacyRecord
        Built by :func:`surveysynth.privacy.record.build_record` (the one builder: guarantee
        label and text generated from what was done, scalars only, no seed).
    n_original : the confidential sample size (a count), used by the full-synthesis floor T_s.
        It is published in the manifest when given (listed there as published without budget).
    confidential : dict, optional
        What the disclosure review needs (tuning path, diagnostics, seed, ...): kept in memory
        and written only to ``confidential/`` by :meth:`save`, never to ``public/``.

    Example (made by a synthesizer's ``release``; KNG quantile synthesis of one variable):

    >>> import numpy as np
    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> rng = np.random.default_rng(1)
    >>> df = pd.DataFrame({"field": rng.choice(["a", "b"], 60),
    ...                    "salary": rng.lognormal(11, 0.5, 60).round(),
    ...                    "visits": rng.poisson(3, 60)})
    >>> df["w"] = np.where(df["field"] == "a", 80.0, 120.0)  # constant within strata
    >>> d = ss.SurveyDesign(df, strata="field", weights="w")
    >>> syn = ss.synth.QuantileSynthesizer(variables="salary", bounds={"salary": (0, 5e5)},
    ...                                    epsilon=5, m=3, random_state=1, progress=False)
    >>> rel = syn.fit(d).release()
    >>> rel.kind, rel.m, rel.epsilon
    ('full', 3, 5.0)
    >>> rel.mean("salary").columns.tolist()[:6]
    ['variable', 'estimate', 'variance', 'se', 'cv', 'df']
    """

    #: statistics of :class:`~surveysynth.results.EstimatorProtocol` not computed (none)
    unsupported_estimators: tuple[str, ...] = ()

    def __init__(
        self,
        designs: Sequence[Any],
        kind: str,
        privacy: dict[str, Any],
        *,
        n_original: int | None = None,
        confidential: dict[str, Any] | None = None,
    ) -> None:
        if kind not in RELEASE_KINDS:
            raise ValueError(
                f"kind={kind!r}: choose 'partial' (some variables released as collected) or "
                "'full' (all released values synthetic)."
            )
        designs = list(designs) if not isinstance(designs, (str, bytes)) else None
        if not designs:
            raise ValueError("designs: give a non-empty list of synthetic SurveyDesigns.")
        bad = [i for i, d in enumerate(designs) if not hasattr(d, "total") or not hasattr(d, "data")]
        if bad:
            raise ValueError(
                f"designs: items {bad[:5]} are not survey designs (got "
                f"{type(designs[bad[0]]).__name__}). Fix: wrap each synthetic DataFrame in "
                "SurveyDesign(frame, weights=...)."
            )
        cols0 = list(designs[0].data.columns)
        for i, d in enumerate(designs[1:], start=1):
            if list(d.data.columns) != cols0:
                raise ValueError(
                    f"designs[{i}] has columns {list(d.data.columns)[:8]} but designs[0] has "
                    f"{cols0[:8]}: all synthetic sets must have the same columns in the same order."
                )
        if n_original is not None:
            if not isinstance(n_original, numbers.Integral) or n_original <= 0:
                raise ValueError(f"n_original={n_original!r}: must be a positive integer count.")
            n_original = int(n_original)
        self._designs = tuple(designs)
        self._kind = kind
        self._privacy = _as_record(privacy, len(self._designs))
        self._n_original = n_original
        self._confidential = dict(confidential or {})

    # ---------------------------------------------------------------- properties
    @property
    def designs(self) -> tuple[Any, ...]:
        """The m synthetic designs."""
        return self._designs

    @property
    def kind(self) -> str:
        """``"partial"`` or ``"full"``: decides the combining rule."""
        return self._kind

    @property
    def m(self) -> int:
        return len(self._designs)

    @property
    def privacy(self) -> PrivacyRecord:
        """The public privacy record (frozen)."""
        return self._privacy

    @property
    def epsilon(self) -> float | None:
        return self._privacy.epsilon

    @property
    def guarantee(self) -> str:
        """The exact text of the release's privacy guarantee."""
        return self._privacy.guarantee_text

    @property
    def confidential(self) -> dict[str, Any]:
        """The disclosure-review material (not for publication); a shallow copy."""
        return dict(self._confidential)

    @property
    def n_original(self) -> int | None:
        return self._n_original

    @property
    def n_syn(self) -> float:
        """Rows of one synthetic data set (their mean if the sets differ in size)."""
        return float(np.mean([d.n for d in self._designs]))

    @property
    def columns(self) -> list[str]:
        return list(self._designs[0].data.columns)

    def __repr__(self) -> str:
        eps = "None" if self.epsilon is None else f"{self.epsilon:g}"
        sizes = sorted({d.n for d in self._designs})
        size = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        return (
            f"SyntheticRelease(kind={self.kind!r}, m={self.m}, rows per set={size}, "
            f"columns={len(self.columns)}, mechanism={self._privacy.mechanism!r}, "
            f"guarantee={self._privacy.guarantee!r}, epsilon={eps})"
        )

    # ---------------------------------------------------------------- combining
    def _combine_arrays(self, q: np.ndarray, u: np.ndarray, level: float,
                        df_complete: np.ndarray | None = None) -> pd.DataFrame:
        """The release's combining rule (q, u shaped (m, k)), with a ``cv`` column;
        ``df_complete`` (k,): the synthetic designs' df per estimand, capping the rule's df."""
        out = combine_sets(q, u, kind=self._kind, n_syn=self.n_syn,
                           n_original=self._n_original, level=level, df_complete=df_complete)
        with np.errstate(divide="ignore", invalid="ignore"):
            out.insert(out.columns.get_loc("se") + 1, "cv",
                       out["se"].to_numpy(float) / np.abs(out["estimate"].to_numpy(float)))
        return out

    def _combine_frames(self, frames: list[pd.DataFrame], additive: bool,
                        level: float, ci: str = "t") -> ReleaseEstimate:
        """Align the m per-set result frames on their label columns and combine each row.
        ``ci="t"``: the rule's interval (t on its df); ``"normal"``: qbar -+ z sqrt(T)."""
        _check_ci(ci, level)
        keys = [c for c in frames[0].columns if c not in _VALUE_COLS]
        stacked = pd.concat(  # without attrs: pandas compares them, a covariance is an array
            [_plain(f).assign(_set=i) for i, f in enumerate(frames)], ignore_index=True
        )
        labels = stacked[keys].drop_duplicates(ignore_index=True)
        # order cells as the first set orders them, new cells (absent from set 0) after
        key_codes = pd.MultiIndex.from_frame(stacked[keys].astype(object))
        uniq = pd.MultiIndex.from_frame(labels[keys].astype(object))
        row = uniq.get_indexer(key_codes)
        k = labels.shape[0]
        q = np.full((self.m, k), np.nan)
        u = np.full((self.m, k), np.nan)
        sets = stacked["_set"].to_numpy()
        q[sets, row] = stacked["estimate"].to_numpy(dtype=float)
        u[sets, row] = stacked["se"].to_numpy(dtype=float) ** 2
        absent = np.ones((self.m, k), dtype=bool)
        absent[sets, row] = False
        if additive:
            q[absent] = 0.0
            u[absent] = 0.0
        nu = _design_df(stacked, sets, row, self.m, k)
        out = self._combine_arrays(q, u, level, nu)
        notes = out["note"].to_numpy(dtype=object).copy()
        n_absent = absent.sum(axis=0)
        if n_absent.any():
            msg = "empty in {} of {} synthetic sets" + (" (counted as 0)" if additive else "")
            for j in np.flatnonzero(n_absent):
                extra = msg.format(int(n_absent[j]), self.m)
                notes[j] = f"{notes[j]}; {extra}" if notes[j] else extra
        out["note"] = notes
        res = labels.reset_index(drop=True)
        for c in keys:
            if isinstance(frames[0][c].dtype, pd.CategoricalDtype):
                res[c] = pd.Categorical(res[c], categories=frames[0][c].cat.categories)
        if ci == "normal":
            out["ci_low"], out["ci_high"] = confidence_interval(
                out["estimate"].to_numpy(float), out["se"].to_numpy(float),
                out["df"].to_numpy(float), level, "normal")
        est = ReleaseEstimate.wrap(pd.concat([res, out], axis=1), level, ci)
        est.release_kind = self._kind
        est.design_df = nu
        return est

    def _run(self, method: str, args: tuple, by, na_rm: bool, level: float, additive: bool,
             ci: str = "t", df: Any = None, engine: str = "native",
             covmat: bool = False) -> ReleaseEstimate:
        _check_ci(ci, level)
        extra = {"covmat": True} if covmat else {}
        frames = [getattr(d, method)(*args, by=by, na_rm=na_rm, df=df, engine=engine, **extra)
                  for d in self._designs]
        out = self._combine_frames(frames, additive, level, ci)
        if covmat:
            out.set_covariance(self._combined_covariance(frames, out))
        return out

    def _combined_covariance(self, frames: list[pd.DataFrame], out: ReleaseEstimate) -> Covariance:
        """The release's rule applied to the m covariance matrices (``covmat=True``): with
        ``Ubar`` the mean of the sets' matrices and ``B`` the between-set covariance of their
        estimates, ``Ubar + B/m`` (partial synthesis, Reiter 2003) or ``(1 + 1/m) B - Ubar``
        (full synthesis, Raghunathan, Reiter & Rubin 2003; Reiter 2005 for several estimands),
        ``Ubar`` for m = 1. Its diagonal is set to the ``variance`` column (the same formulas
        per row; the matrix products differ from it only by rounding). A full-synthesis row
        floored at ``T_s`` (combine.py) has no matrix version here: an error, as are sets whose rows
        differ (a domain empty in some set)."""
        covs = [stored_covariance(f) for f in frames]
        names = covs[0].names
        differ = [i for i, c in enumerate(covs) if c.names != names]
        if differ or len(names) != len(out):
            raise ValueError(
                f"covmat=True: synthetic sets {differ[:5] or 'some'} give other rows than set 0 "
                "(a domain empty in some set), so no common covariance matrix exists. Fix: "
                "merge rare domains, or take covmat=False (the variances are still combined).")
        fell_back = out["note"].astype(str).str.startswith(NOTE_FALLBACK).to_numpy()
        if fell_back.any():
            raise ValueError(
                "covmat=True: the full-synthesis variance of rows "
                f"{np.flatnonzero(fell_back)[:5].tolist()} was floored at T_s = ubar (n_syn/n + "
                "(1 + n_syn/n)/m) (T_f below it), and a matrix mixing floored and unfloored "
                "rows need not be a covariance matrix. Fix: more synthetic sets (a larger m), "
                "or covmat=False (each row's variance is still combined).")
        m = len(covs)
        Q = np.vstack([c.estimate for c in covs])
        Ubar = np.mean([c.matrix for c in covs], axis=0)
        if m == 1:
            T = Ubar.copy()
        else:
            B = np.atleast_2d(np.cov(Q, rowvar=False, ddof=1))
            T = Ubar + B / m if self._kind == "partial" else (1 + 1 / m) * B - Ubar
        np.fill_diagonal(T, out["variance"].to_numpy(float))
        return Covariance(tuple(names), out["estimate"].to_numpy(float).copy(), T)

    def total(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
              na_rm: bool = False, level: float = 0.95, ci: str = "t",
              df: float | str | None = None, engine: str = "native",
              covmat: bool = False) -> ReleaseEstimate:
        """Combined totals (counts for categorical variables) over the m synthetic sets.

        Columns: the ``by`` columns, ``variable`` (and ``level``), ``estimate``, ``variance``,
        ``se``, ``df``, ``ci_low``, ``ci_high``, ``between``, ``within``, ``m``, ``note``.
        A :class:`ReleaseEstimate` (a DataFrame whose print shows every column and, when a
        row has df < 2, one line explaining it).

        The options are a design's (:class:`~surveysynth.results.EstimatorProtocol`), with
        the combining rule's meaning: ``ci="t"`` (default) is the rule's interval, qbar -+ t
        sqrt(T) on the rule's df (the ``df`` column); ``ci="normal"`` uses the normal
        quantile instead (the large-sample reference). ``df`` is each synthetic set's
        complete-data df, as on a design (None: each domain's own design df; ``"design"``:
        the whole synthetic design's; a number; ``np.inf``: none), which caps the rule's df
        (issue 36, D8). ``engine`` is passed to every synthetic design's estimator.
        ``covmat=True``: the covariance of all the combined estimates, read with ``.vcov()``
        or :func:`surveysynth.vcov` (the rule applied to the sets' matrices: ``Ubar + B/m``
        for partial synthesis, ``(1 + 1/m) B - Ubar`` for full synthesis, where it may fail to
        be positive definite; an error where a row used the T_f* fallback or a domain is
        empty in some set).
        """
        return self._run("total", (variables,), by, na_rm, level, True, ci, df, engine, covmat)

    def mean(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
             na_rm: bool = False, level: float = 0.95, ci: str = "t",
             df: float | str | None = None, engine: str = "native",
             covmat: bool = False) -> ReleaseEstimate:
        """Combined (Hajek) means over the m synthetic sets (see :meth:`total` for columns
        and options)."""
        return self._run("mean", (variables,), by, na_rm, level, False, ci, df, engine, covmat)

    def proportion(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
                   na_rm: bool = False, level: float = 0.95, ci: str = "t",
                   df: float | str | None = None, engine: str = "native",
                   covmat: bool = False) -> ReleaseEstimate:
        """Combined level shares of categorical variables over the m synthetic sets (options
        as :meth:`total`)."""
        return self._run("proportion", (variables,), by, na_rm, level, False, ci, df, engine,
                         covmat)

    def ratio(self, numerator: str | Sequence[str], denominator: str | Sequence[str],
              by: str | Sequence[str] | None = None, na_rm: bool = False,
              level: float = 0.95, ci: str = "t", df: float | str | None = None,
              engine: str = "native", covmat: bool = False) -> ReleaseEstimate:
        """Combined ratios of totals over the m synthetic sets (options as :meth:`total`)."""
        return self._run("ratio", (numerator, denominator), by, na_rm, level, False, ci, df,
                         engine, covmat)

    def quantile(self, variables: str | Sequence[str], quantiles: float | Sequence[float],
                 by: str | Sequence[str] | None = None, na_rm: bool = False,
                 level: float = 0.95, df: float | str | None = None,
                 engine: str = "native") -> ReleaseEstimate:
        """Combined quantiles over the m synthetic sets (R ``svyquantile`` per set).

        Each set's quantile (R's ``qrule="math"``) and its Woodruff SE (interval length over
        2 t) enter the release's rule like any other estimate: a sample quantile is
        asymptotically linear (Bahadur: the mean of an indicator over the density at the
        quantile) and the Woodruff SE estimates its sampling variance consistently, which is
        what the partial and full synthesis rules assume of the per-set estimates. The combined
        interval is therefore symmetric (qbar -+ t sqrt(T)), unlike a per-set Woodruff interval.
        Columns as :meth:`total`, with ``quantile``; ``df`` (each set's Woodruff df and the
        cap of the rule's df) and ``engine`` as :meth:`total`.
        """
        _check_ci("t", level)
        frames = [d.quantile(variables, quantiles, by=by, na_rm=na_rm, level=level, df=df,
                             engine=engine)
                  for d in self._designs]
        return self._combine_frames(frames, additive=False, level=level)

    def glm(self, formula: str, family: str = "gaussian", link: str | None = None,
            offset: Any = None, na_rm: bool = False, level: float = 0.95) -> ReleaseEstimate:
        """Survey-weighted GLM (:func:`surveysynth.analysis.svyglm`) on every synthetic set,
        coefficients combined by the release's rule.

        Each set gives coefficients q_l and design-based variances u_l (SE squared); the
        release's rule (partial or full synthesis) combines each coefficient separately.
        Returns one row per term: ``term``, ``estimate`` (qbar), ``variance`` (T), ``se``,
        ``cv``, ``df``, ``ci_low``, ``ci_high``, ``between``, ``within``, ``m``, ``note``,
        ``t`` and ``p`` (t on the combined df, normal where it is infinite). Every set must give
        the same terms (a level missing from a synthetic set is an error naming the sets).
        """
        from .analysis import svyglm

        fits = [svyglm(formula, d, family=family, link=link, offset=offset, na_rm=na_rm)
                for d in self._designs]
        terms = list(fits[0].params.index)
        differ = [i for i, f in enumerate(fits) if list(f.params.index) != terms]
        if differ:
            raise ValueError(
                f"glm: synthetic sets {differ[:5]} give terms {list(fits[differ[0]].params.index)}"
                f" but set 0 gives {terms}: a factor level is missing from some sets. Fix: "
                "merge rare levels before fitting, or subset all sets alike."
            )
        q = np.vstack([f.params.to_numpy() for f in fits])
        u = np.vstack([f.bse.to_numpy() ** 2 for f in fits])
        # each coefficient's complete-data df: the smallest residual df (design df + 1 - p)
        nu = np.full(q.shape[1], float(min(f.df_resid for f in fits)))
        nu[~(nu > 0)] = np.nan  # no design df: no cap (the per-set t has none either)
        out = self._combine_arrays(q, u, level, nu)
        out.insert(0, "term", terms)
        est, se, df = (out[c].to_numpy(float) for c in ("estimate", "se", "df"))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = est / se
            p = np.where(np.isfinite(df), 2 * stats.t.sf(np.abs(t), np.where(
                np.isfinite(df) & (df > 0), df, 1.0)), 2 * stats.norm.sf(np.abs(t)))
        out["t"] = t
        out["p"] = p
        est = ReleaseEstimate.wrap(out, level, "t")
        est.release_kind = self._kind
        est.design_df = nu
        return est

    # ---------------------------------------------------------------- persistence
    def manifest(self) -> dict[str, Any]:
        """The public manifest written by :meth:`save` (without the file list)."""
        from ._versions import versions

        record = self._privacy.to_dict()
        pwb = list(record["published_without_budget"])
        if self._n_original is not None:
            pwb.append({"item": f"confidential sample size n = {self._n_original}",
                        "reason": "the full-synthesis combining rule needs n (its floor T_s)"})
        record["published_without_budget"] = pwb
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "part": "public",
            "kind": self._kind,
            "m": self.m,
            "n_original": self._n_original,
            "columns": self.columns,
            "privacy": record,
            "versions": versions(),
        }

    def save(self, path: str | Path, overwrite: bool = False,
             confidential: dict[str, Any] | None = None, report: bool = True) -> Path:
        """Write ``path/public/`` and ``path/confidential/``; returns ``path``.

        ``public/``: ``synthetic_<l>.parquet`` per data set and ``manifest.json`` (method,
        privacy record with the exact guarantee, ledger, m, versions). ``confidential/``: the
        disclosure-review material (``confidential=`` merged over what the synthesizer attached),
        every file headed by a not-for-publication notice, and (``report=True``, for a release
        made by a synthesizer in this session) the disclosure-review report
        ``report.html`` / ``report.md`` with ``figures/``: the report `surveysynth release`
        writes for the same release (docs/report.md; no published tables, and the attack
        evidence refits the synthesizer as the command does). What the report flags is also
        given as one UserWarning. A loaded release holds no confidential data: no report.
        """
        path = Path(path)
        if path.exists() and any(path.iterdir()) and not overwrite:
            raise ValueError(
                f"save(): {str(path)!r} exists and is not empty. Fix: choose a new directory or "
                "pass overwrite=True."
            )
        pub = path / "public"
        self.save_public(pub, overwrite=overwrite)
        write_confidential(path / "confidential", {**self._confidential, **(confidential or {})},
                           overwrite=overwrite)
        if report:
            flags = _report_writer()(path / "confidential", self)
            if flags:
                import warnings

                warnings.warn(
                    f"the disclosure-review report ({path / 'confidential' / 'report.html'}, "
                    f"confidential) flags {len(flags)} problem(s): " + " | ".join(flags[:10])
                    + (f" | ({len(flags) - 10} more in the report)" if len(flags) > 10 else ""),
                    UserWarning, stacklevel=2)
        return path

    def save_public(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write only the public part (synthetic data sets and manifest) to ``path``."""
        path = Path(path)
        if path.exists() and any(path.iterdir()) and not overwrite:
            raise ValueError(
                f"save(): {str(path)!r} exists and is not empty. Fix: choose a new directory or "
                "pass overwrite=True."
            )
        specs = [_design_spec(d) for d in self._designs]
        path.mkdir(parents=True, exist_ok=True)
        if overwrite:
            for old in path.glob("synthetic_*.parquet"):
                old.unlink()
        manifest = self.manifest()
        datasets = []
        width = len(str(self.m))
        for i, (d, spec) in enumerate(zip(self._designs, specs, strict=True), start=1):
            frame = d.data.reset_index(drop=True)
            bad = [c for c in frame.columns if not isinstance(c, str)]
            if bad:
                raise ValueError(f"save(): column names must be strings, got {bad[:5]!r}.")
            if spec["weights"] is None:
                if _WEIGHT_COLUMN in frame.columns:
                    raise ValueError(f"save(): column {_WEIGHT_COLUMN!r} is reserved.")
                frame = frame.assign(**{_WEIGHT_COLUMN: np.asarray(d.weights, dtype=float)})
                spec = {**spec, "weights_column": _WEIGHT_COLUMN}
            name = f"synthetic_{i:0{width}d}.parquet"
            frame.to_parquet(path / name, index=False)
            datasets.append({"file": name, "rows": int(d.n), "design": spec})
        manifest["datasets"] = datasets
        (path / MANIFEST).write_text(json.dumps(manifest, indent=2, allow_nan=False))
        return path


def _report_writer() -> Any:
    """The disclosure-review report writer (``surveysynth.pipeline.write_release_report``):
    a service of the top layer, looked up at run time as the R engine is, so that the release
    layer does not depend on the pipeline (pyproject.toml, import layers)."""
    import importlib

    return importlib.import_module("surveysynth.pipeline").write_release_report


def load_release(path: str | Path) -> SyntheticRelease:
    """Read a release written by :meth:`SyntheticRelease.save` (the folder holding ``public/``,
    or the ``public/`` folder itself) and rebuild its designs. Reads nothing confidential."""
    from .design import SurveyDesign

    path = Path(path)
    if (path / "public" / MANIFEST).exists():
        path = path / "public"
    mf = path / MANIFEST
    if not mf.exists():
        raise ValueError(f"load_release: no {MANIFEST} in {str(path)!r}; is it a saved release?")
    manifest = json.loads(mf.read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"load_release: {str(mf)!r} is not a surveysynth release manifest.")
    if manifest.get("format_version", 0) != FORMAT_VERSION:
        raise ValueError(
            f"load_release: format version {manifest.get('format_version')} is not the one this "
            f"package reads ({FORMAT_VERSION}); use the surveysynth version that wrote it."
        )
    designs = []
    for entry in manifest["datasets"]:
        frame = pd.read_parquet(path / entry["file"])
        spec = dict(entry["design"])
        wcol = spec.pop("weights_column", None)
        if wcol is not None:
            w = frame[wcol].to_numpy(dtype=float)
            frame = frame.drop(columns=[wcol])
            spec["weights"] = w
        designs.append(SurveyDesign(frame, **spec))
    record = dict(manifest["privacy"])
    n_orig = manifest.get("n_original")
    if n_orig is not None:  # the manifest adds the n entry itself; do not duplicate it
        record["published_without_budget"] = [
            e for e in record["published_without_budget"]
            if not e["item"].startswith("confidential sample size n =")]
    return SyntheticRelease(designs, manifest["kind"], record, n_original=n_orig)
