"""Two-phase designs (R ``survey::twophase``, ``method="full"`` and ``"approx"``).

A phase-1 sample is drawn (``ids[0]``, ``strata[0]``, ``probs[0]``, ``fpc[0]``); a phase-2
subsample (``subset``) is drawn from it (``ids[1]``, ``strata[1]``, ``probs[1]``, ``fpc[1]``),
e.g. a case-cohort or validation subsample stratified on phase-1 variables. Estimation uses the
phase-2 rows with weights ``1 / (pi_1 pi_2)``; the variance has a phase-1 and a phase-2 part.

* ``fpc[1]`` defaults, as in R, to the phase-1 counts: the number of phase-2 sampling units in
  the phase-1 sample of each phase-2 stratum (so phase 2 is a stratified SRS of the phase-1
  sample), and ``pi_2 = n_2h / N_2h``.
* ``method="full"`` (R ``twophase2``, the default): the variance is R's ``twophase2var``, the
  Horvitz-Thompson quadratic form ``x' D x`` of the weighted values with R's "Delta-check"
  matrices: ``D2`` of the phase-2 design (stratified SRS of clusters: ``1 - pi`` on the
  diagonal, ``-(1 - pi)/(n_h - 1)`` within a stratum), ``D1`` of the phase-1 design restricted
  to the phase-2 rows (the identity for an iid phase 1), combined as
  ``D = D1 + D2 - D1 * D2``; the phase-2 part is ``x' D2 x`` and the phase-1 part the rest.
* ``method="approx"`` (R ``twophase`` with ``twophasevar``): phase-1 variance from R's
  ``svyrecvar.phase1`` (each phase-1 unit's total expanded by its probability of being
  represented at phase 2) plus the phase-2 linearization variance (``svyrecvar`` on the
  phase-2 design).
* ``calibrate(formula, population=None)`` on a full two-phase design is R's
  ``calibrate(design, phase=2, ...)``: the phase-2 weights are calibrated to the phase-1 totals
  (R: unweighted column sums of the model matrix over the phase-1 rows) and the phase-2 part of
  the variance uses the calibration residuals (``twophase2var`` with ``postStrata``).

Each phase has one sampling stage here (R allows multistage phases); a multistage phase is an
error naming the argument. Estimators, domains (``by=``, ``subset``), ``svyglm`` and the other
analysis functions work as on any :class:`~surveysynth.SurveyDesign` (this class is one),
with the two-phase variance. Degrees of freedom are the phase-2 design's (R
``degf.twophase2``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ._validate import first_rows
from .design import SurveyDesign, domain_ratio_influence
from .variance.taylor import taylor_variance

METHODS = ("full", "approx")
#: the largest phase-2 sample for the dense Delta-check matrices of method="full"
MAX_FULL_N = 20000


def _pair(arg: Any, name: str) -> tuple[Any, Any]:
    if arg is None:
        return None, None
    if not isinstance(arg, (list, tuple)) or len(arg) != 2:
        raise ValueError(f"twophase: {name} must be a pair (phase 1, phase 2), e.g. "
                         f"{name}=[None, 'rel'] (R: list(NULL, ~rel)); got {arg!r}.")
    for ph, a in enumerate(arg, start=1):
        if isinstance(a, (list, tuple)) and len(a) > 1:
            raise ValueError(f"twophase: {name} for phase {ph} names {len(a)} columns {list(a)}:"
                             " each phase has one sampling stage here (R allows multistage "
                             "phases). Fix: give one column per phase.")
    return tuple(a[0] if isinstance(a, (list, tuple)) else a for a in arg)


def _codes(values: Any) -> np.ndarray:
    return pd.factorize(pd.Series(values), sort=True)[0].astype(np.int64)


def _n_unique_by(units: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """For each row: the number of distinct ``units`` among the rows of its group."""
    pairs = pd.DataFrame({"g": groups, "u": units}).drop_duplicates()
    per_group = pairs.groupby("g").size()
    return per_group.reindex(groups).to_numpy(dtype=float)


def _dcheck_strat(strata: np.ndarray, prob: np.ndarray, sampsize: np.ndarray | None,
                  with_replacement: bool) -> np.ndarray:
    """R's ``Dcheck_strat`` / ``Dcheck_subset`` over units (one per row of the arguments)."""
    k = strata.shape[0]
    D = np.zeros((k, k))
    if not with_replacement:
        if sampsize is None:
            sampsize = _n_unique_by(np.arange(k), strata)
        same = strata[:, None] == strata[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            off = -(1 - prob) / (sampsize - 1)
        D = np.where(same, off[:, None], 0.0)
    np.fill_diagonal(D, 1 - prob)
    return D


def _subset_mask(data: pd.DataFrame, subset: Any) -> np.ndarray:
    """The phase-2 indicator over the phase-1 rows (a column name or an array)."""
    if isinstance(subset, str):
        if subset not in data.columns:
            raise ValueError(f"twophase: subset column {subset!r} is not in the data.")
        sub = data[subset].to_numpy()
    else:
        sub = np.asarray(subset)
    if sub.shape[0] != data.shape[0]:
        raise ValueError(f"twophase: subset has {sub.shape[0]} entries for {data.shape[0]} "
                         "phase-1 rows.")
    if pd.isna(sub).any():
        raise ValueError(f"twophase: missing values in subset at {first_rows(data.index, pd.isna(sub))}"
                         ". Fix: give TRUE/FALSE for every phase-1 row.")
    sub = sub.astype(bool)
    return sub


class _PhasedDesign(SurveyDesign):
    """What a two-phase or multiphase design refuses: its variance is its own, so engines
    (R, samplics), replicate weights and the one-phase weighting steps (which would attach a
    one-phase variance adjustment it does not read) are errors, not silently wrong numbers."""

    def _ratio_core(self, Y, X, dom, D):
        """Ratios (or totals, ``X`` None) per domain and their linearized values, with the
        variance of the subclass's phases (:meth:`_total_variance`)."""
        est, z = domain_ratio_influence(self._w, Y, X, dom, D)
        V = z.shape[1]
        rows = np.flatnonzero(dom >= 0)
        Z = np.zeros((z.shape[0], D * V))
        Z[rows[:, None], dom[rows][:, None] * V + np.arange(V)[None, :]] = z[rows]
        var = self._total_variance(Z).reshape(D, V)
        return est, var, z

    def _linearize(self, Y, X, dom, D, *, want_z=True, want_df=False, x_is_one=False,
                   levels=None):
        """Both phased designs linearize through :meth:`_ratio_core` (shares of a
        categorical variable as ratios to a column of ones)."""
        if Y is None:
            Y = (levels[0][:, None] == np.arange(levels[1])[None, :]).astype(float)
            X = np.ones_like(Y)
        est, var, z = self._ratio_core(Y, X, dom, D)
        return est, var, z, (self._df_core(dom, D) if want_df else None), None

    def _engine(self, engine: str):
        if engine != "native":
            raise ValueError(f"engine={engine!r}: a {type(self).__name__} has its own variance"
                             " (native only). Fix: engine='native'.")
        return None

    def _refuse(self, what: str):
        raise ValueError(f"{what}() is not available on a {type(self).__name__}: it would "
                         "ignore the phases in the variance. Fix: calibrate() (phase 2), or "
                         "build the design from adjusted weights.")

    def bootstrap(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("bootstrap")

    def sdr(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("sdr")

    def canty_davison(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("canty_davison")

    def gen_boot(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("gen_boot")

    def fays_gen_rep(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("fays_gen_rep")

    def jackknife(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("jackknife")

    def brr(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("brr")

    def rake(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("rake")

    def post_stratify(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("post_stratify")

    def trim_weights(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("trim_weights")

    def redistribute_weights(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("redistribute_weights")

    def with_calibration(self, *a: Any, **k: Any):  # noqa: D102
        self._refuse("with_calibration")


class TwoPhaseDesign(_PhasedDesign):
    """A two-phase design (R ``twophase``); build it with :func:`twophase`.

    It is the phase-2 sample as a :class:`~surveysynth.SurveyDesign` (weights
    ``1/(pi_1 pi_2)``, the phase-2 clusters and strata) whose variance is the two-phase
    variance of the chosen ``method``. ``phase1_data`` holds every phase-1 row.

    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"id": range(8), "x": [1, 0, 1, 0, 1, 0, 1, 0],
    ...                    "y": [2.0, 3, 4, 5, 6, 7, 8, 9],
    ...                    "in2": [True, True, False, True, True, False, True, True]})
    >>> d = ss.twophase(df, ids=["id", "id"], strata=[None, "x"], subset="in2")
    >>> d.total("y")[["estimate", "se"]].round(3)
       estimate      se
    0      44.0  17.801
    """

    method: str
    phase1_data: pd.DataFrame

    # ------------------------------------------------------------------ variance
    def _total_variance(self, Z: np.ndarray) -> np.ndarray:
        """The phased variance of the columns of ``Z`` (both phases): the hook of
        :meth:`_PhasedDesign._ratio_core`."""
        return self.twophase_variance(Z)[0]

    def twophase_variance(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(total, phase-1 part, phase-2 part) of the variance of each column's total of the
        weighted values ``Z`` (n, k) over the phase-2 rows (R's ``attr(v, "phases")``)."""
        Z = np.asarray(Z, dtype=float)
        if self.method == "full":
            D2 = self._D2
            Dfull = self._D1 + D2 - self._D1 * D2
            q = np.einsum("ij,ij->j", Z, Dfull @ Z)
            q2 = np.einsum("ij,ij->j", Z, D2 @ Z)
            v1 = q - q2
            Z2 = Z
            for adj in self._phase2_calibration:
                Z2 = adj.residualize(Z2)
            v2 = np.einsum("ij,ij->j", Z2, D2 @ Z2) if self._phase2_calibration else q2
            return v1 + v2, v1, v2
        v1 = self._phase1_approx(Z)
        u2 = Z if self._samescale else Z * np.sqrt(self._p1)[:, None]
        v2 = taylor_variance(list(self._stages2), u2, np.zeros(Z.shape[0], np.int64), 1,
                             self.lonely_psu, self.adjust_domain_lonely)[0]
        return v1 + v2, v1, v2

    def _phase1_approx(self, Z: np.ndarray) -> np.ndarray:
        """R's ``svyrecvar.phase1`` for a one-stage phase 1 (``onestrat.phase1``)."""
        out = np.zeros(Z.shape[1])
        strata = self._s1
        nstrat = 0
        for h in np.unique(strata):
            idx = np.flatnonzero(strata == h)
            cl = self._c1[idx]
            ucl, first, inv = np.unique(cl, return_index=True, return_inverse=True)
            x = np.zeros((ucl.shape[0], Z.shape[1]))
            np.add.at(x, inv, Z[idx])
            p = self._usu[idx][first]
            nsub = ucl.shape[0]
            n_full = self._n1_full[idx[0]]
            xcenter = x.sum(axis=0) / n_full
            x = x * p[:, None]
            N = self._N1[idx[0]]
            f = 1.0 if not np.isfinite(N) else (N - n_full) / N
            if self.lonely_psu != "adjust" or nsub > 1:
                x = x - xcenter
            scale = f * n_full / (n_full - 1) if nsub > 1 else f
            q = ((x / np.sqrt(p)[:, None]) ** 2).sum(axis=0)
            nstrat += 1
            if nsub > 1:
                out += q * scale
            elif f < 1e-7:
                continue
            elif self.lonely_psu in ("certainty", "remove", "adjust"):
                out += q * scale
            else:
                raise ValueError(f"twophase (approx): phase-1 stratum {h!r} has only one PSU "
                                 "in the phase-2 sample. Fix: lonely_psu='remove', "
                                 "'certainty' or 'adjust'.")
        return out

    # ------------------------------------------------------------------ calibration
    def calibrate(self, formula_or_columns: str | Sequence[str], population: Any = None,
                  **options: Any) -> TwoPhaseDesign:
        """Calibrate the phase-2 weights (R ``calibrate(design, phase=2, formula,
        population)``; ``method="full"`` designs). ``population=None`` calibrates to the
        phase-1 totals: R's unweighted column sums of the model matrix over the phase-1 rows.
        Other options as :meth:`SurveyDesign.calibrate`."""
        if self.method != "full":
            raise ValueError("calibrate(): a method='approx' two-phase design cannot be "
                             "calibrated (R: calibrate.twophase2 only). Fix: twophase(..., "
                             "method='full').")
        if self.is_subset:
            raise ValueError("calibrate(): calibrate the two-phase design before subset().")
        ph2 = SurveyDesign(self.full_data, ids=self._ids2, strata=self._strata2,
                           weights=self._w2, lonely_psu=self.lonely_psu)
        if population is None:
            from .calibration import model_matrix

            mm, names = model_matrix(self.phase1_data, formula_or_columns)
            population = dict(zip(names, mm.sum(axis=0), strict=True))
        cal = ph2.calibrate(formula_or_columns, population, **options)
        g = np.asarray(cal.full_weights) / self._w2
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        w = np.asarray(self._w, dtype=float) * g
        w.setflags(write=False)
        new._w = w
        # the GREG adjustment R's twophase2var residualizes the phase-2 part with (postStrata)
        adj = cal._calibration  # noqa: SLF001 (a SurveyDesign, our base class)
        new._phase2_calibration = self._phase2_calibration + tuple(adj)
        new._usu = self._usu / g
        new._w2 = self._w2 * g
        return new

    @classmethod
    def from_data(cls, data: pd.DataFrame, ids: Sequence[Any], subset: Any,
                  strata: Sequence[Any] | None = None, probs: Sequence[Any] | None = None,
                  fpc: Sequence[Any] | None = None, weights: Sequence[Any] | None = None,
                  method: str = "full", lonely_psu: str = "fail") -> TwoPhaseDesign:
        """The two-phase design of :func:`twophase` (same arguments)."""
        if method not in METHODS:
            raise ValueError(f"method={method!r}: choose 'full' or 'approx' (R's 'simple' is not "
                             "implemented).")
        ids1, ids2 = _pair(ids, "ids")
        s1, s2 = _pair(strata, "strata")
        p1, p2 = _pair(probs, "probs")
        f1, f2 = _pair(fpc, "fpc")
        w1, w2 = _pair(weights, "weights")
        if method == "full" and (w1 is not None or w2 is not None):
            raise ValueError("twophase: weights are not accepted by method='full' (as in R). Fix: "
                             "give probs=, or method='approx'.")
        if not isinstance(data, pd.DataFrame):
            raise TypeError("twophase: data must be a pandas DataFrame of every phase-1 row.")
        sub = _subset_mask(data, subset)
        with warnings.catch_warnings():
            # an iid phase 1 without probabilities is the usual case (R's twophase2 is silent)
            warnings.filterwarnings("ignore", "No weights or probabilities supplied")
            d1 = SurveyDesign(data, ids=ids1, strata=s1, probs=p1, fpc=f1, weights=w1,
                              lonely_psu=lonely_psu)
        st1 = d1.stages[0]
        c1 = st1.cluster
        s1c = st1.stratum_of_cluster[c1]
        n1_full = st1.n_psu[s1c].astype(float)
        N1 = (n1_full / (1 - st1.fpc_factor[s1c]) if d1.has_fpc
              else np.full(c1.shape[0], np.inf))
        prob1 = 1.0 / np.asarray(d1.full_weights, dtype=float)

        frame2 = data.loc[sub].copy()
        fpc_col = None
        if f2 is None:
            need = [c for c in (ids2, s2) if c is not None]
            bad = [c for c in need if data[c].isna().any()]
            if bad:
                raise ValueError(f"twophase: phase-2 ids/strata {bad} have missing values in the "
                                 "phase-1 rows, so the phase-2 fpc (phase-1 counts) cannot be "
                                 "computed. Fix: give fpc=[..., column].")
            units = _codes(data[ids2]) if ids2 is not None else np.arange(data.shape[0])
            groups = _codes(data[s2]) if s2 is not None else np.zeros(data.shape[0], np.int64)
            fpc_col = "_twophase_fpc2"
            while fpc_col in frame2.columns:
                fpc_col += "_"
            frame2[fpc_col] = _n_unique_by(units, groups)[sub]
            f2 = fpc_col
        with_p2 = {"probs": p2} if w2 is None else {"weights": w2}
        d2 = SurveyDesign(frame2, ids=ids2, strata=s2, fpc=f2, lonely_psu=lonely_psu, **with_p2)
        w2v = np.asarray(d2.full_weights, dtype=float)
        if fpc_col is not None:
            frame2 = frame2.drop(columns=fpc_col)

        # probability of each phase-2 row's phase-1 unit being represented at phase 2 (R's usu)
        if s2 is not None:
            sa = _codes(data[s2])
            usu = _n_unique_by(c1[sub], sa[sub]) / _n_unique_by(c1, sa)[sub]
            if np.unique(sa).shape[0] != np.unique(sa[sub]).shape[0]:
                raise ValueError("twophase: some phase-2 strata have no phase-2 rows (zero sampling"
                                 " fraction). Fix: drop them or merge strata.")
        else:
            usu = _n_unique_by(c1[sub], s1c[sub]) / n1_full[sub]
        st2 = d2.stages[0]
        first2 = np.unique(st2.cluster, return_index=True)[1]
        samescale = not pd.Series(c1[sub][first2]).duplicated().any()

        des = cls(frame2, ids=ids2, strata=s2, weights=prob1[sub] ** -1 * w2v,
                             lonely_psu=lonely_psu)
        des.method = method
        des.phase1_data = data.copy(deep=False)
        des._ids2, des._strata2 = ids2, s2
        des._w2 = w2v
        des._usu = usu
        des._samescale = bool(samescale)
        des._p1 = prob1[sub]
        des._c1, des._s1 = c1[sub], s1c[sub]
        des._n1_full, des._N1 = n1_full[sub], N1[sub]
        des._stages2 = d2.stages
        des._phase2_calibration = ()
        if method == "full":
            n2 = int(sub.sum())
            if n2 > MAX_FULL_N:
                raise ValueError(f"twophase(method='full'): {n2} phase-2 rows; the dense "
                                 f"Delta-check matrices are limited to {MAX_FULL_N}. Fix: "
                                 "method='approx'.")
            iid = p1 is None and s1 is None and f1 is None and not pd.Series(c1).duplicated().any()
            if iid:
                D1 = np.eye(n2)
            else:
                cs = c1[sub]
                ucl, first, inv = np.unique(cs, return_index=True, return_inverse=True)
                Dc = _dcheck_strat(s1c[sub][first], prob1[sub][first], n1_full[sub][first],
                                   with_replacement=not d1.has_fpc)
                D1 = Dc[np.ix_(inv, inv)]
            cl2 = st2.cluster
            u2, first2, inv2 = np.unique(cl2, return_index=True, return_inverse=True)
            p2v = 1.0 / w2v
            Dc2 = _dcheck_strat(st2.stratum_of_cluster[u2], p2v[first2], None,
                                with_replacement=False)
            des._D1 = D1
            des._D2 = Dc2[np.ix_(inv2, inv2)]
        return des


def twophase(data: pd.DataFrame, ids: Sequence[Any], subset: Any,
             strata: Sequence[Any] | None = None, probs: Sequence[Any] | None = None,
             fpc: Sequence[Any] | None = None, weights: Sequence[Any] | None = None,
             method: str = "full", lonely_psu: str = "fail") -> TwoPhaseDesign:
    """A two-phase design (R ``twophase(id=list(...), strata=list(...), subset=, data=,
    method=)``).

    Parameters
    ----------
    data : every phase-1 row (phase-2 variables may be missing outside the phase-2 sample).
    ids : ``[phase-1 ids, phase-2 ids]``, each a column or None (one unit per row; R ``~1``).
    subset : the phase-2 sample: a boolean column name or a boolean array over ``data``.
    strata, probs, fpc : pairs like ``ids`` (None for none). ``fpc[1]`` None: the phase-1
        counts (R's default).
    weights : phase-1 / phase-2 weights, ``method="approx"`` only (R refuses them for "full").
    method : ``"full"`` (R's default, ``twophase2``) or ``"approx"`` (``twophasevar``).
    lonely_psu : as on :class:`~surveysynth.SurveyDesign` (R's ``survey.lonely.psu``).
    """
    return TwoPhaseDesign.from_data(data, ids, subset, strata=strata, probs=probs, fpc=fpc,
                                    weights=weights, method=method,
                                    lonely_psu=lonely_psu)
