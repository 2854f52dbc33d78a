"""Dual-frame designs (R survey 4.4+ ``multiframe``): samples drawn independently from two
overlapping frames (e.g. a landline and a mobile-phone frame) estimated as one sample.

``multiframe([design_A, design_B], [overlap_A, overlap_B], estimator=, theta=)``: each
overlap has one row per row of its frame's sample and one column per frame.

* ``estimator="constant"`` (Hartley 1962, 1974): overlap units (in both frames) have their
  frame-A weights multiplied by ``theta`` and their frame-B weights by ``1 - theta``; units in
  one frame keep theirs. ``theta=None`` is R's default: ``theta_f`` = frame f's mean sampling
  weight over the sum of the two means. Overlaps are membership indicators (> 0: in the frame).
* ``estimator="expected"`` (Bankier 1986; Kalton and Anderson 1986): every unit's weight is the
  reciprocal of its expected number of selections, ``1 / sum_k pi_k`` (overlaps hold each unit's
  inclusion probabilities in each frame, all <= 1, or weights, all >= 1; 0 outside a frame).

Variance (R's ``multiframevar``): the frames are sampled independently, so the variance of a
total is the sum over frames of each frame design's own variance of its rows' weighted values
(R computes each as the Horvitz-Thompson form with the frame's Delta-check matrix, which is
what each frame design's variance is: the PPS joint-probability form for ``pps=ppsmat``
designs, the SRS-without-replacement form for designs with an fpc). Means are linearized:
``(y - mean) w / sum w``. Degrees of freedom: ``sum(degf) - frames + 1`` (R ``degf``).

Differences from R: frames without an fpc use their design's with-replacement variance (R's
Delta-check uses ``1 - 1/w`` there as if without replacement); only two frames, as in R 4.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ._validate import first_rows
from .levels import category_levels, is_categorical

ESTIMATORS = ("constant", "expected")


class MultiFrameDesign:
    """Two frame samples estimated as one (R ``multiframe``); build with :func:`multiframe`.

    Attributes: ``designs``, ``frame_weights`` (the split factors), ``design_weights`` (each
    frame's sampling weights), ``weights`` (their product, stacked frame by frame),
    ``frame_scale`` (theta, 1 - theta; None for ``"expected"``), ``degf``.

    >>> import numpy as np, pandas as pd
    >>> import surveysynth as ss
    >>> a = pd.DataFrame({"y": [1.0, 2, 3, 4], "both": [1, 0, 1, 0], "N": 40})
    >>> b = pd.DataFrame({"y": [2.0, 5, 6], "both": [1, 1, 0], "N": 30})
    >>> mf = ss.multiframe([ss.SurveyDesign(a, fpc="N"), ss.SurveyDesign(b, fpc="N")],
    ...                    [np.column_stack([np.ones(4), a["both"]]),
    ...                     np.column_stack([b["both"], np.ones(3)])], theta=0.5)
    >>> mf.total("y")[["estimate", "se"]].round(3)
       estimate      se
    0     175.0  50.572
    """

    def __init__(self, designs: Sequence[Any], overlaps: Sequence[Any],
                 estimator: str = "constant", theta: float | None = None) -> None:
        designs = list(designs)
        if len(designs) != 2:
            raise ValueError(f"multiframe: {len(designs)} designs; only two frames (dual-frame "
                             "designs), as in R survey 4.5.")
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator={estimator!r}: choose 'constant' or 'expected'.")
        for i, d in enumerate(designs):
            if getattr(d, "design_kind", None) != "taylor" or d.is_subset:
                raise TypeError(f"multiframe: design {i} must be a SurveyDesign (not a subset, "
                                "not replicate weights), as R requires svydesign() objects.")
        ov = []
        for f, (d, o) in enumerate(zip(designs, overlaps, strict=True)):
            a = np.asarray(o, dtype=float)
            if a.ndim != 2 or a.shape != (d.n, 2):
                raise ValueError(f"multiframe: overlap {f} has shape {a.shape}; it needs one row "
                                 f"per row of design {f} ({d.n}) and one column per frame (2).")
            if np.isnan(a).any():
                bad = np.isnan(a).any(axis=1)
                raise ValueError(f"multiframe: overlap {f} has missing values in rows "
                                 f"{first_rows(d.data.index, bad)}.")
            ov.append(a)
        dw = [np.asarray(d.full_weights, dtype=float) for d in designs]
        self.designs = tuple(designs)
        self.estimator = estimator
        if estimator == "constant":
            if theta is None:
                means = np.array([w.mean() for w in dw])
                scale = means / means.sum()
            else:
                if not 0 <= theta <= 1:
                    raise ValueError(f"theta={theta}: must be in [0, 1].")
                scale = np.array([theta, 1 - theta])
            fw = [np.where(ov[f][:, 1 - f] > 0, scale[f], 1.0) for f in range(2)]
            self.frame_scale: np.ndarray | None = scale
        else:
            pos = np.concatenate([o[o > 0] for o in ov])
            if pos.min() >= 1:
                probs = [np.where(o > 0, 1 / np.where(o > 0, o, 1), 0.0) for o in ov]
            elif max(o.max() for o in ov) > 1:
                raise ValueError("multiframe(estimator='expected'): overlaps must be all >= 1 "
                                 "(weights) or all <= 1 (probabilities), as in R.")
            else:
                probs = ov
            fw = [(1 / p.sum(axis=1)) / w for p, w in zip(probs, dw, strict=True)]
            self.frame_scale = None
        self.frame_weights = np.concatenate(fw)
        self.design_weights = np.concatenate(dw)
        self.weights = self.frame_weights * self.design_weights
        self._sizes = [d.n for d in designs]
        self.degf = float(sum(d.degf for d in designs) - len(designs) + 1)

    @property
    def data(self) -> pd.DataFrame:
        """The frame samples stacked (frame A's rows first), with a ``frame`` column."""
        return pd.concat([d.data.assign(frame=f) for f, d in enumerate(self.designs)],
                         ignore_index=True)

    # ------------------------------------------------------------------ estimation
    def _values(self, variables: str | Sequence[str], na_rm: bool
                ) -> tuple[np.ndarray, list[tuple[str, Any]], np.ndarray]:
        cols = [variables] if isinstance(variables, str) else list(variables)
        data = self.data
        missing = [c for c in cols if c not in data.columns]
        if missing:
            raise ValueError(f"multiframe: variables {missing} are not in every frame sample.")
        mats, labels = [], []
        for c in cols:
            s = data[c]
            if is_categorical(s):
                levels = category_levels(s)
                mats.append(np.column_stack([(s == lev).to_numpy(float) for lev in levels]))
                mats[-1][s.isna().to_numpy()] = np.nan
                labels += [(c, lev) for lev in levels]
            else:
                mats.append(pd.to_numeric(s).to_numpy(dtype=float)[:, None])
                labels.append((c, None))
        Y = np.column_stack(mats)
        na = np.isnan(Y).any(axis=1)
        if na.any() and not na_rm:
            raise ValueError(f"multiframe: missing values in {cols} at stacked rows "
                             f"{first_rows(data.index, na)}. Fix: na_rm=True.")
        Y = np.where(np.isnan(Y), 0.0, Y)
        return Y, labels, na

    def _variance(self, Z: np.ndarray) -> np.ndarray:
        """R's multiframevar: sum over frames of each frame design's variance of its rows'
        totals of ``Z`` (weighted values, stacked frame by frame)."""
        v = np.zeros(Z.shape[1])
        start = 0
        for d, n in zip(self.designs, self._sizes, strict=True):
            w = np.asarray(d.full_weights, dtype=float)
            block = Z[start:start + n] / w[:, None]
            v += d.domain_ratios(block, None, np.zeros(n, np.int64), 1)[1][0]
            start += n
        return v

    def _estimate(self, kind: str, variables: str | Sequence[str], by: str | None,
                  na_rm: bool, level: float) -> pd.DataFrame:
        Y, labels, na = self._values(variables, na_rm)
        w = np.where(na, 0.0, self.weights)
        if by is None:
            groups, doms = [None], [np.ones(Y.shape[0], bool)]
        else:
            b = self.data[by]
            groups = [g for g in category_levels(b)] if is_categorical(b) else sorted(
                b.dropna().unique())
            doms = [(b == g).to_numpy() for g in groups]
        rows = []
        for g, dom in zip(groups, doms, strict=True):
            wd = np.where(dom, w, 0.0)
            if kind == "total":
                est = wd @ Y
                Z = wd[:, None] * Y
            else:
                W = wd.sum()
                est = wd @ Y / W
                Z = wd[:, None] * (Y - est) / W
            se = np.sqrt(self._variance(Z))
            for j, (var, lev) in enumerate(labels):
                rows.append({**({by: g} if by is not None else {}), "variable": var,
                             "level": lev, "estimate": est[j], "se": se[j]})
        out = pd.DataFrame(rows)
        if all(lev is None for _, lev in labels):
            out = out.drop(columns="level")
        z = stats.norm.ppf((1 + level) / 2)
        out["ci_low"] = out["estimate"] - z * out["se"]
        out["ci_high"] = out["estimate"] + z * out["se"]
        out["df"] = self.degf
        return out

    def total(self, variables: str | Sequence[str], by: str | None = None,
              na_rm: bool = False, level: float = 0.95) -> pd.DataFrame:
        """Totals (R ``svytotal`` / ``svyby(..., svytotal)`` on a multiframe design). Rows
        with a missing ``by`` value are in no domain (R's svyby)."""
        return self._estimate("total", variables, by, na_rm, level)

    def mean(self, variables: str | Sequence[str], by: str | None = None,
             na_rm: bool = False, level: float = 0.95) -> pd.DataFrame:
        """Means (R ``svymean`` / ``svyby(..., svymean)`` on a multiframe design)."""
        return self._estimate("mean", variables, by, na_rm, level)


def multiframe(designs: Sequence[Any], overlaps: Sequence[Any], estimator: str = "constant",
               theta: float | None = None) -> MultiFrameDesign:
    """A dual-frame design (R ``multiframe(designs, overlaps, estimator, theta)``); see
    :class:`MultiFrameDesign` and the module notes."""
    return MultiFrameDesign(designs, overlaps, estimator=estimator, theta=theta)
