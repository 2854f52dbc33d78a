"""Identification-risk weights alpha in [0, 1] (seed 002 eqs. 3 and 6-9; METHODS.md 11).

The weights of a risk-weighted pseudo likelihood, computed from the CONFIDENTIAL data: keep them
on the fitted synthesizer, never release them. The counts come from the exact range-count kernel
of :mod:`surveysynth.privacy.identification` (O(n log n), no quadratic step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from .identification import risk_counts, risk_inputs

__all__ = ["risk_weights"]


def risk_weights(
    data: Any,
    known: Sequence[str] | str | None,
    outcome: str,
    r: float = 0.2,
    kind: Literal["marginal", "pairwise"] = "marginal",
    scale: float = 1.0,
    shift: float = 0.0,
    on_singleton: Literal["raise", "marginal"] = "raise",
) -> np.ndarray:
    """Identification-risk weights alpha_i in [0, 1] for a risk-weighted pseudo posterior.

    ``kind="marginal"``: ``alpha^m_i = 1 - IR^c_i`` (seed 002 eq. 3).
    ``kind="pairwise"``: ``alpha^pw_i = 1 - sum_{j in M_i, j != i} IR^c_ij / (|M_i| - 1)`` with the
    joint risk ``IR^c_ij = #{h in M: y_h outside both B(y_i) and B(y_j)} / |M|`` (eqs. 6-9). The
    pairwise weight ties records together (a risky record whose neighbours are also risky is
    downweighted less) and always satisfies ``alpha^pw_i >= alpha^m_i``.

    Both are then adjusted as ``alpha = clip(scale * alpha + shift, 0, 1)`` (METHODS.md section 11;
    defaults leave them unchanged; seed 002's supplement uses such adjustments to trade utility
    for risk).

    A pattern with a single record has ``IR^c = 0`` (alpha^m = 1) but no pairs, so its pairwise
    weight is undefined (0/0). ``on_singleton="raise"`` (default) raises a ValueError naming those
    records; ``on_singleton="marginal"`` gives them the marginal weight (1, before adjustment) —
    the record is alone in its pattern, so the intruder's guess is certain anyway; downweighting its
    outcome cannot change that, which is why the paper's CE patterns have no singletons.

    Parameters
    ----------
    data : DataFrame or SurveyDesign; never modified.
    known : intruder-known pattern columns ([] or None: all records form one pattern).
    outcome : numeric column, original scale.
    r : ball radius as a fraction of |y_i|; must be > 0.
    kind, scale, shift, on_singleton : see above.

    Returns
    -------
    float array alpha of length n, in record order. Keep it on the fit object: it must never be
    released.
    """
    if kind not in ("marginal", "pairwise"):
        raise ValueError(f"kind must be 'marginal' or 'pairwise'; got {kind!r}.")
    if on_singleton not in ("raise", "marginal"):
        raise ValueError(f"on_singleton must be 'raise' or 'marginal'; got {on_singleton!r}.")
    scale_f, shift_f = float(scale), float(shift)
    if not (np.isfinite(scale_f) and np.isfinite(shift_f)):
        raise ValueError(f"scale and shift must be finite numbers; got scale={scale!r}, shift={shift!r}.")
    frame, known_l, r, y, codes = risk_inputs(data, known, outcome, r, "data")
    ir_c, size, s = risk_counts(y, codes, r, pairwise=(kind == "pairwise"))
    if kind == "marginal":
        alpha = 1.0 - ir_c
    else:
        single = size == 1
        if single.any() and on_singleton == "raise":
            rows = frame.index[single][:5].tolist()
            pats = frame.loc[single, known_l].head(3).to_dict("records") if known_l else []
            raise ValueError(
                f"{int(single.sum())} record(s) are alone in their known pattern (rows {rows}, first shown; "
                f"patterns {pats}): the pairwise weight needs at least one other record in the pattern "
                "and is undefined (0/0) for them. Use kind='marginal', or on_singleton='marginal' to give "
                "these records their marginal weight, or coarsen the known variables."
            )
        denom = size * (size - 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            alpha = np.where(single, 1.0 - ir_c, 1.0 - s / np.where(single, 1.0, denom))
    return np.clip(scale_f * alpha + shift_f, 0.0, 1.0)

