"""Inclusion probabilities and stratified PPS selection through R ``sampling`` (METHODS sec. 3).

The native counterparts live in :mod:`surveysynth.sampling`; these call R's own
``inclusionprobabilities``, ``UPsystematic`` and ``UPtille`` so that simulation studies can use
R's reference implementation, and so the native code can be checked against it.

Decisions:

* Strata: the R functions are applied stratum by stratum (strata in sorted label order, units
  in their given order within a stratum), with one ``set.seed(seed)`` before the first stratum;
  the same seed gives the same sample.
* ``seed`` may be an int or a numpy Generator; a Generator gives R the seed
  ``int(gen.integers(2**31 - 1))``. R's global random state is saved before and restored after,
  so calling this does not disturb an R session's own random numbers.
* Inputs are validated as the native functions validate them (missing or negative sizes and
  impossible sample sizes raise ValueError instead of R's warnings and shifts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from . import r_session

_R_FUNS: dict[str, Any] = {}
_R_CODE = {
    "incl": r"""
function(a, n, codes) {
  out <- numeric(length(a))
  for (h in seq_along(n)) {
    idx <- which(codes == h)
    if (length(idx)) out[idx] <- sampling::inclusionprobabilities(a[idx], n[h])
  }
  out
}""",
    "pps": r"""
function(pik, codes, H, method, seed) {
  had <- exists(".Random.seed", envir = globalenv(), inherits = FALSE)
  if (had) old <- get(".Random.seed", envir = globalenv(), inherits = FALSE)
  on.exit(if (had) assign(".Random.seed", old, envir = globalenv())
          else rm(".Random.seed", envir = globalenv()))
  set.seed(seed)
  FUN <- if (method == "tille") sampling::UPtille else sampling::UPsystematic
  out <- integer(length(pik))
  for (h in seq_len(H)) {
    idx <- which(codes == h)
    if (length(idx)) out[idx] <- as.integer(FUN(pik[idx]))
  }
  out
}""",
}


def _rfun(ro, name: str):
    if name not in _R_FUNS:
        _R_FUNS[name] = ro.r(_R_CODE[name])
    return _R_FUNS[name]


def _codes(strata: Any, N: int, what: str) -> tuple[np.ndarray, pd.Index]:
    if strata is None:
        return np.zeros(N, dtype=np.int64), pd.Index([0])
    from surveysynth.sampling import stratum_codes

    return stratum_codes(strata, N, what)


def inclusion_probabilities_r(size: Any, n: Any, strata: Any = None) -> np.ndarray:
    """R ``sampling::inclusionprobabilities(size, n)``, within strata when ``strata`` is given.

    Same arguments and checks as :func:`surveysynth.inclusion_probabilities`: with ``strata``,
    ``n`` maps each stratum label to its sample size.
    """
    from surveysynth.sampling import inclusion_probabilities

    a = np.asarray(size, dtype=float)
    inclusion_probabilities(a, n, strata)  # the native checks: same errors for the same input
    codes, labels = _codes(strata, a.size, "inclusion_probabilities_r")
    if strata is None:
        n_h = np.array([float(n)])
    else:
        n_h = pd.Series(n).reindex(labels).to_numpy(dtype=float)
    with r_session("sampling") as (ro, _):
        out = _rfun(ro, "incl")(
            ro.FloatVector(np.ascontiguousarray(a)),
            ro.FloatVector(n_h),
            ro.IntVector((codes + 1).astype(np.int32)),
        )
        return np.array(out, dtype=float)


def pps_sample_r(pik: Any, strata: Any = None, method: str = "systematic",
                 seed: int | np.random.Generator | None = None) -> np.ndarray:
    """Draw a stratified PPS sample with R ``sampling``; returns a boolean mask of selected units.

    ``method="systematic"`` uses ``UPsystematic`` (units in the given order), ``"tille"``
    uses ``UPtille`` (Tille's elimination procedure; all joint inclusion probabilities
    positive). ``pik`` are the inclusion probabilities (e.g. from
    :func:`inclusion_probabilities_r`); ``seed`` is R's ``set.seed`` (required: an int or a
    numpy Generator).
    """
    if method not in ("systematic", "tille"):
        raise ValueError(f"method={method!r}: choose 'systematic' or 'tille'.")
    from surveysynth.sampling import check_pik

    p = check_pik(pik)
    if seed is None:
        raise ValueError("pps_sample_r needs seed= (an int or a numpy Generator) for R's set.seed.")
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(2**31 - 1))
    elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        seed = int(seed)
    else:
        raise ValueError(f"seed={seed!r}: give an int or a numpy Generator.")
    if not -(2**31) < seed < 2**31:
        raise ValueError(f"seed={seed}: R's set.seed needs a 32-bit integer.")
    codes, labels = _codes(strata, p.size, "pps_sample_r")
    if isinstance(strata, Mapping):
        raise ValueError("strata must be one label per unit, not a mapping.")
    with r_session("sampling") as (ro, _):
        out = _rfun(ro, "pps")(
            ro.FloatVector(np.ascontiguousarray(p)),
            ro.IntVector((codes + 1).astype(np.int32)),
            len(labels),
            method,
            seed,
        )
        return np.asarray(out, dtype=np.int32).astype(bool)
