"""Multiphase designs (R survey 4.5 ``multiphase``), two phases: the Sarndal-Swensson-Wretman
(1991, ch. 9) decomposition R 4.5 uses, with a calibration at phase 2.

``multiphase(data, ids=[ids1, ids2], subset=[sub2], strata=[s1, s2], probs=["~1", None])``:
phase 1 is every row of ``data`` (``probs[0]="~1"``: iid sampling from a generating model, R's
``probs=list(~1, ...)``; or a column of phase-1 inclusion probabilities, with ``fpc`` given
for sampling without replacement); phase 2 is the rows where ``subset`` holds, a stratified
sample of phase-2 units within the phase-1 sample (``probs[1]=None``: ``n_h / N_h`` from the
phase-1 counts, as R's ``compute_probs``; or a column).

Variance (R's ``multiphasevar``): with ``x`` the unweighted values (a total's ``y``, a mean's
``(y - ybar)/sum w``), phase weights ``w_1`` (1 for an iid phase 1, else ``1/pi_1``) and
``w_2 = w_1 / pi_2`` (times the calibration's g), and R's Delta-check matrices
``D_1`` (phase 1 restricted to the phase-2 rows; the identity when iid) and ``D_2`` (phase 2),
``V = sum_k (x w_k)' C_k (x w_k)`` with ``C_2 = D_2`` and ``C_1 = D_1 / pi*`` where
``pi*_ij = pi_1ij pi_2ij`` is the joint probability of being in the phase-2 sample
(``pi_2ij = pi_2i pi_2j / (1 - D_2ij)``; R's ``pdag``). Phase ``k``'s part uses its
calibration residuals (R's ``project_ps``). ``twophase_variance(Z)``-like access:
:meth:`MultiPhaseDesign.phase_variances`.

Limits: two phases with one sampling stage each (R allows more phases and multistage phases;
R's code indexes phase 3 on phase-2 rows and is marked FIXME there), calibration of phase 2 to
the phase-1 totals only, no ``pps_spec`` probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .design import SurveyDesign
from .twophase_design import _dcheck_strat, _n_unique_by, _PhasedDesign, _subset_mask


def _one(arg: Any, name: str, k: int) -> Any:
    if isinstance(arg, (list, tuple)) and len(arg) > 1:
        raise ValueError(f"multiphase: {name} for phase {k} names {len(arg)} columns "
                         f"{list(arg)}: one sampling stage per phase here.")
    return arg[0] if isinstance(arg, (list, tuple)) else arg


def _codes(s: pd.Series) -> np.ndarray:
    return pd.factorize(s, sort=True)[0].astype(np.int64)


class MultiPhaseDesign(_PhasedDesign):
    """A two-phase ``multiphase`` design (R 4.5); build it with :func:`multiphase`. It is the
    phase-2 sample as a :class:`~surveysynth.SurveyDesign` (weights the final phase weights)
    whose variance is R's ``multiphasevar``.

    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"id": range(8), "x": [1, 0, 1, 0, 1, 0, 1, 0],
    ...                    "y": [2.0, 3, 4, 5, 6, 7, 8, 9],
    ...                    "in2": [True, True, False, True, True, False, True, True]})
    >>> m = ss.multiphase(df, ids=["id", "id"], strata=[None, "x"], subset=["in2"])
    >>> m.total("y")[["estimate", "se"]].round(3)
       estimate      se
    0      44.0  17.801
    """

    phase1_data: pd.DataFrame

    @property
    def degf(self) -> float:
        """R ``degf.multiphase``: rows of the phase-2 sample (in the subset) minus 1."""
        return float(self.n - 1)

    def _df_core(self, dom, D):
        return np.bincount(dom[dom >= 0], minlength=D).astype(float) - 1

    def _total_variance(self, Z: np.ndarray) -> np.ndarray:
        """The sum of the phase variances of the columns of ``Z``: the hook of
        :meth:`surveysynth.twophase_design._PhasedDesign._ratio_core`."""
        return sum(self.phase_variances(Z))

    def phase_variances(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(phase-1, phase-2) parts of the variance of each column's total of the weighted
        values ``Z`` (n, k) over the phase-2 rows (R's ``attr(vcov, "phases")``)."""
        x = np.asarray(Z, dtype=float) / np.asarray(self._w, dtype=float)[:, None]
        out = []
        for k, (wk, C) in enumerate(zip(self._phase_w, self._C, strict=True)):
            xc = x * wk[:, None]
            for adj in self._phase_cal[k]:
                xc = adj.residualize(xc)
            out.append(np.einsum("ij,ij->j", xc, C @ xc))
        return out[0], out[1]

    def calibrate(self, formula_or_columns: str | Sequence[str], population: Any = None,
                  phase: int = 2, **options: Any) -> MultiPhaseDesign:
        """Calibrate the phase-2 weights (R ``calibrate(design, formula, phase=2, ...)``);
        ``population=None``: R's phase-1 totals (unweighted column sums of the model matrix
        over the phase-1 rows). Options (``calfun=``, ``bounds=``...) as
        :meth:`SurveyDesign.calibrate`; the phase-2 part of the variance then uses the
        calibration residuals."""
        if phase != 2:
            raise ValueError(f"calibrate(phase={phase}): only phase 2 (to the phase-1 totals) "
                             "is implemented.")
        if self.is_subset:
            raise ValueError("calibrate(): calibrate the multiphase design before subset().")
        w2 = self._phase_w[1]
        ph2 = SurveyDesign(self.full_data, weights=w2)
        if population is None:
            from .calibration import model_matrix

            mm, names = model_matrix(self.phase1_data, formula_or_columns)
            population = dict(zip(names, mm.sum(axis=0), strict=True))
        cal = ph2.calibrate(formula_or_columns, population, **options)
        g = np.asarray(cal.full_weights) / w2
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        w = np.asarray(self._w, dtype=float) * g
        w.setflags(write=False)
        new._w = w
        new._phase_w = (self._phase_w[0], w2 * g)
        adj = cal._calibration  # noqa: SLF001 (a SurveyDesign, our base class)
        new._phase_cal = (self._phase_cal[0], self._phase_cal[1] + tuple(adj))
        return new

    @classmethod
    def from_data(cls, data: pd.DataFrame, ids: Sequence[Any], subset: Any,
                  strata: Sequence[Any] | None = None, probs: Sequence[Any] | None = None,
                  fpc: Any = None) -> MultiPhaseDesign:
        """The design of :func:`multiphase` (same arguments)."""
        if not isinstance(data, pd.DataFrame):
            raise TypeError("multiphase: data must be a pandas DataFrame of every phase-1 row.")
        if not isinstance(ids, (list, tuple)) or len(ids) != 2:
            raise ValueError("multiphase: ids must list the two phases' ids, e.g. "
                             "['seqno', 'seqno'] (more than two phases are not implemented).")
        sub_arg = subset[0] if isinstance(subset, (list, tuple)) else subset
        if isinstance(subset, (list, tuple)) and len(subset) != 1:
            raise ValueError("multiphase: subset lists one indicator per phase after the first"
                             " (two phases: one).")
        strata = strata if strata is not None else [None, None]
        probs = probs if probs is not None else ["~1", None]
        ids1, ids2 = _one(ids[0], "ids", 1), _one(ids[1], "ids", 2)
        s1, s2 = _one(strata[0], "strata", 1), _one(strata[1], "strata", 2)
        p1, p2 = probs[0], probs[1]
        sub = _subset_mask(data, sub_arg)
        n = data.shape[0]
        # phase 1 (on the phase-2 rows): weights, Delta-check
        c1 = _codes(data[ids1]) if ids1 is not None else np.arange(n)
        st1 = _codes(data[s1]) if s1 is not None else np.zeros(n, np.int64)
        iid = p1 is None or (isinstance(p1, str) and p1.replace(" ", "") == "~1")
        if iid:
            w1 = np.ones(int(sub.sum()))
            D1 = np.eye(int(sub.sum()))
        else:
            pi1 = pd.to_numeric(data[p1]).to_numpy(dtype=float)
            n_clu = _n_unique_by(c1, st1)
            D1 = _dcheck_strat(st1[sub], pi1[sub], n_clu[sub], with_replacement=fpc is None)
            same_clu = c1[sub][:, None] == c1[sub][None, :]
            D1 = np.where(same_clu, np.diag(D1)[:, None], D1)
            w1 = 1 / pi1[sub]
        # phase 2: probabilities from the phase-1 counts unless given
        u2 = _codes(data[ids2]) if ids2 is not None else np.arange(n)
        st2 = _codes(data[s2]) if s2 is not None else np.zeros(n, np.int64)
        if p2 is None:
            pi2 = (_n_unique_by(u2[sub], st2[sub]) / _n_unique_by(u2, st2)[sub])
        else:
            pi2 = pd.to_numeric(data[p2]).to_numpy(dtype=float)[sub]
        cl2 = u2[sub]
        ucl, first, inv = np.unique(cl2, return_index=True, return_inverse=True)
        D2 = _dcheck_strat(st2[sub][first], pi2[first], None, with_replacement=False)[
            np.ix_(inv, inv)]
        w2 = w1 / pi2
        with np.errstate(divide="ignore", invalid="ignore"):
            pdag2 = np.outer(pi2, pi2) / (1 - D2)
            pdag1 = pdag2 if iid else np.outer(1 / w1, 1 / w1) / (1 - D1) * pdag2
            C1 = np.where(D1 != 0, D1 / pdag1, 0.0)
        des = cls(data.loc[sub], ids=ids2, strata=s2, weights=w2)
        des.phase1_data = data.copy(deep=False)
        des._phase_w = (w1, w2)
        des._C = (C1, D2)
        des._phase_cal = ((), ())
        return des


def multiphase(data: pd.DataFrame, ids: Sequence[Any], subset: Any,
               strata: Sequence[Any] | None = None, probs: Sequence[Any] | None = None,
               fpc: Any = None) -> MultiPhaseDesign:
    """A two-phase R 4.5 ``multiphase`` design (``multiphase(id=list(...), strata=list(...),
    subset=list(...), probs=list(~1, NULL), data=)``); see the module notes."""
    return MultiPhaseDesign.from_data(data, ids, subset, strata=strata, probs=probs, fpc=fpc)
