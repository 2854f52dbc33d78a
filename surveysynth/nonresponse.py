"""Nonresponse weighting-class adjustment (svrep ``redistribute_weights``).

Within each weighting class (``by=``), the weight of the cases to reduce (nonrespondents) is
moved to the cases to increase (respondents): respondents' weights are multiplied by
``1 + D_c / U_c`` (D_c, U_c the classes' sums of the reduced and increased cases' weights),
the reduced cases get weight 0, every other case (e.g. known ineligibles) keeps its weight.

* :class:`~surveysynth.ReplicateDesign`: the full-sample weights and every replicate's analysis
  weights are adjusted the same way, replicate by replicate (svrep; Rust and Rao 1996), so the
  replicate variance reflects the adjustment. The result holds combined replicate weights.
* :class:`~surveysynth.SurveyDesign`: the weights are adjusted and the linearization variance
  takes the adjustment into account (Decision; R has no such function): the adjusted total is
  ``sum_c (U_c + D_c) * ybar_Uc``, a smooth function of totals, and its influence values are
  ``z - 1_up w_adj m_c + 1_(up or down) w m_c``, ``m_c`` the class mean of ``z / w_adj`` over
  the increased cases. Equal to R's delta method (``svycontrast`` on the class totals) to
  1e-10 (tests/test_nonresponse.py).

Docs: docs/weighting.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ._validate import first_rows


class NonresponseAdjustment:
    """Variance adjustment of :func:`redistribute_weights` on a SurveyDesign: influence
    values of the adjusted weights -> influence values with respect to the base weights.
    ``chain_rule``: applied after the adjustments made later (the last step first), see
    ``surveysynth.design._variance_order``."""

    chain_rule = True

    def __init__(self, codes: np.ndarray, up: np.ndarray, down: np.ndarray,
                 base_w: np.ndarray, new_w: np.ndarray) -> None:
        self.codes = codes  # class of each row (-1: neither reduced nor increased)
        self.up = up
        self.moved = (up | down) & (codes >= 0)
        self.base_w = np.asarray(base_w, float)
        self.new_w = np.asarray(new_w, float)
        self.K = int(codes.max()) + 1 if codes.size and codes.max() >= 0 else 0
        upc = np.where(up & (codes >= 0), codes, self.K)
        self.upc = upc
        self.up_sum = np.bincount(upc, weights=self.new_w, minlength=self.K + 1)[: self.K]

    def residualize(self, Z: np.ndarray) -> np.ndarray:
        if not self.K or not Z.shape[1]:
            return Z
        ok = self.up_sum > 0
        denom = np.where(ok, self.up_sum, 1.0)
        m = np.column_stack([
            np.bincount(self.upc, weights=Z[:, j], minlength=self.K + 1)[: self.K] / denom
            for j in range(Z.shape[1])
        ])
        m[~ok] = 0.0  # a class without increased cases: its weight is lost, nothing moves
        m = np.vstack([m, np.zeros((1, Z.shape[1]))])  # row K: outside every class
        cls = np.where(self.codes >= 0, self.codes, self.K)
        out = Z - np.where(self.up, self.new_w, 0.0)[:, None] * m[self.upc]
        return out + np.where(self.moved, self.base_w, 0.0)[:, None] * m[cls]


def _flags(frame: pd.DataFrame, spec: Any, name: str) -> np.ndarray:
    """A boolean per row from a boolean column name, a ``DataFrame.eval`` expression
    (``"resp == 0"``) or an array."""
    if isinstance(spec, str):
        if spec in frame.columns:
            val = frame[spec]
        else:
            try:
                val = frame.eval(spec)
            except Exception as exc:  # noqa: BLE001 - re-raised with the fix
                raise ValueError(
                    f"{name}={spec!r}: not a column and not an expression pandas can evaluate "
                    f"on the data ({exc}). Fix: give a boolean column name, an expression such "
                    "as \"resp == 0\", or a boolean array.") from exc
        val = pd.Series(val)
    else:
        val = pd.Series(np.asarray(spec))
    if val.shape[0] != frame.shape[0]:
        raise ValueError(f"{name}: {val.shape[0]} values for {frame.shape[0]} rows of data.")
    if val.isna().any():
        bad = val.isna().to_numpy()
        raise ValueError(f"{name} is missing in {first_rows(frame.index, bad)}: it must be "
                         "TRUE or FALSE, not NA (svrep).")
    if not pd.api.types.is_bool_dtype(val):
        raise ValueError(f"{name} must give logical values (True/False), got dtype "
                         f"{val.dtype} (svrep: 'must result in logical values').")
    return val.to_numpy(dtype=bool)


def _shift(W: np.ndarray, codes: np.ndarray, up: np.ndarray, down: np.ndarray,
           K: int) -> tuple[np.ndarray, np.ndarray]:
    """svrep's ``shift_weight`` on every column of W at once, class by class. Returns the
    adjusted weights and, per class, whether its increased cases had zero weight in some
    column (their class's reduced weight is then lost, as svrep)."""
    upc = np.where(up, codes, K)
    dnc = np.where(down, codes, K)
    U = np.zeros((K + 1, W.shape[1]))
    D = np.zeros((K + 1, W.shape[1]))
    np.add.at(U, upc, W)
    np.add.at(D, dnc, W)
    factor = np.where(U != 0, 1.0 + D / np.where(U != 0, U, 1.0), 1.0)
    out = W.copy()
    out[up] = W[up] * factor[codes[up]]
    out[down] = 0.0
    lost = ((U[:K] == 0) & (D[:K] != 0)).any(axis=1)
    return out, lost


def redistribute_weights(design: Any, reduce_if: Any, increase_if: Any,
                         by: str | Sequence[str] | None = None):
    """Nonresponse weighting-class adjustment (svrep ``redistribute_weights``).

    ``reduce_if`` / ``increase_if``: the cases whose weight is moved (nonrespondents) and the
    cases that receive it (respondents), as a boolean column name, a ``DataFrame.eval``
    expression (``"resp == 0"``) or a boolean array; ``by``: the weighting-class columns
    (None: one class). Returns a design of the same kind (see the module docstring for the
    variance). Errors: overlapping reduce/increase cases, missing or non-logical flags, a
    subset design (adjust the full design, then subset). A class with reduced cases but no
    increased cases loses its weight (svrep's behaviour), with a warning naming the class.
    """
    from .calibration import _kind, _new_replicate

    kind = _kind(design)
    frame = design.full_data
    down = _flags(frame, reduce_if, "reduce_if")
    up = _flags(frame, increase_if, "increase_if")
    both = down & up
    if both.any():
        raise ValueError(f"reduce_if and increase_if conflict in {first_rows(frame.index, both)}: "
                         "a case cannot have its weight both reduced and increased (svrep).")
    if by is None:
        codes = np.zeros(frame.shape[0], dtype=np.int64)
        labels = ["(all)"]
    else:
        cols = [by] if isinstance(by, str) else list(by)
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise ValueError(f"by: the following columns are missing from the data: "
                             f"{missing} (svrep).")
        if frame[cols].isna().any(axis=None):
            bad = frame[cols].isna().any(axis=1).to_numpy()
            raise ValueError(f"by columns {cols} are missing in {first_rows(frame.index, bad)}: "
                             "every case needs a weighting class.")
        grouped = frame[cols].astype(str).agg("_<>_".join, axis=1)
        codes, uniq = pd.factorize(grouped, sort=True)
        codes = codes.astype(np.int64)
        labels = list(uniq)
    K = len(labels)
    w = np.asarray(design.full_weights, float)
    if kind == "taylor":
        new, lost = _shift(w[:, None], codes, up, down, K)
        _warn_lost(lost, labels)
        adj = NonresponseAdjustment(np.where(up | down, codes, -1), up, down, w, new[:, 0])
        return design.with_calibration(new[:, 0], adj)
    rep = design.replicate_weights("analysis")
    new, lost = _shift(np.column_stack([w, rep]), codes, up, down, K)
    _warn_lost(lost, labels)
    return _new_replicate(design, new[:, 0], new[:, 1:], "nonresponse-adjusted")


def _warn_lost(lost: np.ndarray, labels: list) -> None:
    if lost.any():
        names = [str(labels[k]) for k in np.flatnonzero(lost)[:5]]
        warnings.warn(
            f"redistribute_weights: weighting class(es) {names} have cases to reduce but no "
            "case (with positive weight) to increase: their weight is dropped (svrep's "
            "behaviour). Fix: collapse classes.", UserWarning, stacklevel=3)
