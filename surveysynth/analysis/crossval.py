"""Design-based cross-validation with replicate weights (R survey 4.5's ``withCrossval``).

Each replicate of a replicate design is a fold: the rows a replicate drops (replicate weight
/ sampling weight at most ``nearly_zero``) are its test set, the others its training set
with the replicate weights. A model is trained per fold and tuning value, predicts its test
rows, and the loss is summed over folds with R's replicate scaling
(``scale * sum_r rscales_r * loss_r / sum(w)``), step for step as R's ``xval.R``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .formulas import formula_matrix

__all__ = ["with_crossval", "withCrossval"]

_LOSSES: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], float]] = {
    "MSE": lambda y, hat, w: float(np.sum(w * (y - hat) ** 2)),
    "AbsError": lambda y, hat, w: float(np.sum(w * np.abs(y - hat))),
    # R's sign: the weighted log-likelihood (not its negative)
    "entropy": lambda y, hat, w: float(np.sum(w * (y * np.log(hat) + (1 - y) * np.log(1 - hat)))),
}


def with_crossval(design: Any, formula: str,
                  trainfun: Callable[..., Any], testfun: Callable[..., Any],
                  loss: str | Callable[[np.ndarray, np.ndarray, np.ndarray], float] = "MSE",
                  intercept: bool = True, tuning: Sequence[Any] | None = None,
                  nearly_zero: float = 1e-4) -> np.ndarray:
    """Cross-validated loss of a prediction method on a replicate design (R ``withCrossval``).

    ``formula`` (``"y ~ x1 + x2"``) gives the response and R's model matrix (with its
    intercept column, as R's ``model.matrix``; ``intercept`` is accepted as R accepts it and
    is not used, as in R). ``trainfun(X, y, w, tuning)`` fits on a fold's training rows with
    the replicate weights; ``testfun(X, trainfit, tuning)`` returns predictions for the test
    rows. ``loss``: ``"MSE"``, ``"AbsError"``, ``"entropy"`` (R's sign: the weighted
    log-likelihood) or a function ``(y, hat, w)``; weighted by the sampling weights.
    ``tuning``: the values to try (default ``[None]``). Returns one loss per tuning value.
    Every replicate must leave out some rows (jackknife, bootstrap, cross-validation
    replicates do; BRR with ``fay_rho > nearly_zero`` does not): else an error, as R.
    """
    if getattr(design, "design_kind", None) != "replicate":
        raise ValueError("withCrossval: needs a ReplicateDesign (R: svyrep.design); the "
                         "replicates are the folds. Fix: d.jackknife() or d.bootstrap() first.")
    lossfun = _LOSSES.get(loss) if isinstance(loss, str) else loss
    if lossfun is None or not callable(lossfun):
        raise ValueError(f"withCrossval: loss={loss!r}: choose 'MSE', 'entropy', 'AbsError' "
                         "or a function (y, hat, w).")
    tuning = [None] if tuning is None else list(tuning)
    rep = design.replicate_weights("analysis")
    inside = np.asarray(design.in_subset, dtype=bool)
    pw = np.asarray(design.full_weights, dtype=float)[inside]
    test = (rep / pw[:, None]) <= nearly_zero
    if (test.sum(axis=0) == 0).any():
        raise ValueError("withCrossval: some replicates have no test-set observations (R's "
                         "message). Fix: check nearly_zero, or use replicates that drop rows "
                         "(jackknife, bootstrap).")
    data = design.full_data.loc[inside]
    mm = formula_matrix(formula, data, "withCrossval", na_action="raise")
    y = np.asarray(mm.lhs, dtype=float).reshape(-1)
    X = np.asarray(mm.rhs, dtype=float)
    scale, rscales = float(design.scale), np.asarray(design.rscales, float)
    losses = np.empty(len(tuning))
    for t, tune in enumerate(tuning):
        hat = np.full(rep.shape, np.nan)
        for r in range(rep.shape[1]):
            is_test = test[:, r]
            fit = trainfun(X[~is_test], y[~is_test], rep[~is_test, r], tuning=tune)
            hat[is_test, r] = np.asarray(testfun(X[is_test], trainfit=fit, tuning=tune),
                                         dtype=float).reshape(-1)
        total = 0.0
        for r in range(rep.shape[1]):
            ok = ~np.isnan(hat[:, r])
            total += lossfun(y[ok], hat[ok, r], pw[ok]) * rscales[r]
        losses[t] = total * scale
    return losses / pw.sum()


withCrossval = with_crossval  # noqa: N816 - R's name
