"""Covariances of estimates and contrasts of them: R ``vcov`` and ``svycontrast``.

An estimator called with ``covmat=True`` (``total``, ``mean``, ``proportion``, ``ratio``, with
or without ``by=``, on a :class:`~surveysynth.SurveyDesign` or a
:class:`~surveysynth.ReplicateDesign`) keeps the covariance matrix of all its rows:
linearization designs from the influence values of every estimate over the whole design (R
``svyby(..., covmat=TRUE)``, ``vcov(svymean(~a+b))``), replicate designs from the replicate
estimates (R ``svrVar`` on the matrix of replicates). :func:`vcov` returns it labelled with the
estimates' names (:func:`surveysynth.estimate.estimate_names`).

:func:`contrast` gives linear combinations ``L theta`` with covariance ``L V L'`` and nonlinear
functions ``f(theta)`` by the delta method, ``J V J'`` with J the Jacobian of f at the
estimates (R ``svycontrast`` with a list of weights or an expression). R differentiates
expressions symbolically; here f is a Python function and its derivative is taken by the
complex step, ``Im f(theta + i h e_k) / h``, which is exact to rounding (no subtraction), so
the SEs equal R's to about 1e-15 relative. f must therefore be written with operations that
accept complex numbers (arithmetic and numpy's ``np.log``, ``np.exp``, ``np.sqrt``...);
otherwise pass ``gradient=``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from .estimate import attach_vcov
from .results import Estimate, stored_covariance

Spec = Mapping[str, float] | Sequence[float] | np.ndarray | Callable[..., Any]


def _covmat(result: pd.DataFrame) -> dict[str, Any]:
    """The covariance stored with ``result`` (an :class:`~surveysynth.results.Estimate`, or a
    frame that kept its ``attrs["covmat"]``), checked against its current rows."""
    cov = stored_covariance(result)
    return {"names": list(cov.names), "estimate": cov.estimate, "vcov": cov.matrix}


def vcov(result: pd.DataFrame) -> pd.DataFrame:
    """Covariance matrix of the estimates of an estimator's output computed with
    ``covmat=True`` (R ``vcov``), indexed both ways by the estimates' names. The same as
    ``result.vcov()`` on the :class:`~surveysynth.results.Estimate`, except that without a
    stored covariance this is an error (a contrast needs the covariances), where
    ``Estimate.vcov`` gives the diagonal with a warning, as R's ``vcov.svyby``."""
    cm = _covmat(result)
    return pd.DataFrame(cm["vcov"], index=cm["names"], columns=cm["names"])


def _weights_row(spec: Any, names: list[str], label: str) -> np.ndarray:
    """One row of contrast weights from a {name: weight} mapping or a sequence."""
    K = len(names)
    if isinstance(spec, Mapping):
        unknown = [k for k in spec if k not in names]
        if unknown:
            raise ValueError(
                f"contrast {label!r}: name(s) {unknown[:5]} are not estimates of this result. "
                f"Names: {names[:12]}{' ...' if K > 12 else ''}."
            )
        row = np.zeros(K)
        pos = {n: i for i, n in enumerate(names)}
        for k, v in spec.items():
            row[pos[k]] = float(v)
        return row
    row = np.asarray(spec, dtype=float).reshape(-1)
    if row.shape[0] != K:
        raise ValueError(
            f"contrast {label!r}: {row.shape[0]} weights for {K} estimates. Fix: give one "
            "weight per row of the result, or a {name: weight} dict."
        )
    return row


def _jacobian(f: Callable[..., Any], theta: np.ndarray, names: list[str], label: str,
              gradient: Callable[..., Any] | None) -> tuple[float, np.ndarray]:
    """Value of f at theta and its gradient (complex step, or ``gradient`` if given)."""
    def call(x):
        return f(dict(zip(names, x, strict=True)))

    value = float(np.real(call(theta.astype(float))))
    if gradient is not None:
        g = np.asarray(gradient(dict(zip(names, theta, strict=True))), dtype=float).reshape(-1)
        if g.shape[0] != theta.shape[0]:
            raise ValueError(f"contrast {label!r}: gradient gave {g.shape[0]} values for "
                             f"{theta.shape[0]} estimates.")
        return value, g
    h = 1e-30
    g = np.empty(theta.shape[0])
    for k in range(theta.shape[0]):  # one evaluation per estimate (K is small)
        x = theta.astype(complex)
        x[k] += 1j * h
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", np.exceptions.ComplexWarning)
                g[k] = np.imag(call(x)) / h
        except (TypeError, ValueError, np.exceptions.ComplexWarning) as err:
            raise ValueError(
                f"contrast {label!r}: the function does not accept complex numbers ({err}), "
                "which the exact complex-step derivative needs. Fix: write it with numpy "
                "functions (np.log, np.exp, np.sqrt, arithmetic) or pass gradient=."
            ) from None
    # a function that silently drops the imaginary part would give a zero derivative:
    # cross-check with central differences
    step = 1e-6 * np.maximum(np.abs(theta), 1e-8)
    fd = np.array([(float(np.real(call(theta + step * e))) - float(np.real(call(theta - step * e))))
                   / (2 * s_) for e, s_ in zip(np.eye(theta.shape[0]), step, strict=True)])
    if not np.allclose(g, fd, rtol=1e-3, atol=1e-6 * (np.abs(fd).max() + 1e-300)):
        raise ValueError(
            f"contrast {label!r}: the complex-step derivative {g} disagrees with finite "
            f"differences {fd}: the function loses complex parts (float(), math.*). Fix: write "
            "it with numpy functions and arithmetic, or pass gradient=."
        )
    return value, g


def contrast(result: pd.DataFrame, contrasts: Spec | Mapping[str, Spec],
             level: float = 0.95, gradient: Callable[..., Any] | None = None) -> Estimate:
    """Linear or nonlinear contrasts of estimates with their SEs (R ``svycontrast``).

    Parameters
    ----------
    result : an estimator's output computed with ``covmat=True``.
    contrasts : one contrast or a dict ``{label: contrast}`` of several. A contrast is a
        ``{name: weight}`` dict (names from :func:`vcov`; others weigh 0), a sequence of
        one weight per row of ``result``, or a function ``f(values)`` of the dict
        ``{name: estimate}`` returning a number (delta method).
    level : confidence level of the normal interval (R ``confint``).
    gradient : for a single nonlinear contrast, its gradient as a function of the same dict
        (default: the exact complex-step derivative).

    Returns an :class:`~surveysynth.results.Estimate` ``contrast, estimate, se, ci_low,
    ci_high`` whose covariance (of the contrasts jointly) is again available through
    :func:`vcov` or its ``.vcov()``.
    """
    cm = _covmat(result)
    names, V = cm["names"], cm["vcov"]
    theta = cm["estimate"]
    specs = dict(contrasts) if isinstance(contrasts, Mapping) and all(
        not isinstance(v, (int, float, np.number)) for v in contrasts.values()
    ) and len(contrasts) > 0 else {"contrast": contrasts}
    values, rows = [], []
    for label, spec in specs.items():
        if callable(spec):
            val, g = _jacobian(spec, theta, names, label, gradient)
            values.append(val)
            rows.append(g)
        else:
            row = _weights_row(spec, names, label)
            used = row != 0
            values.append(float(row[used] @ theta[used]) if used.any() else 0.0)
            rows.append(row)
    J = np.vstack(rows)
    used = (J != 0).any(axis=0)  # as R, estimates with weight 0 everywhere do not enter
    Vc = J[:, used] @ V[np.ix_(used, used)] @ J[:, used].T
    est = np.asarray(values, dtype=float)
    se = np.sqrt(np.diag(Vc))
    crit = stats.norm.ppf((1 + level) / 2)
    out = Estimate.wrap(pd.DataFrame({"contrast": list(specs), "estimate": est, "se": se,
                                      "ci_low": est - crit * se, "ci_high": est + crit * se}),
                        level, "normal")
    attach_vcov(out, list(specs), Vc)
    return out
