"""The engine interface: what an estimation engine declares and the one call it answers.

An engine computes the estimates and standard errors of an estimator's call over domains the
design has already coded (R ``svyby``'s groups). It reads the design through its public
domain-estimation API only (``full_data``, ``in_subset``, ``full_weights``, ``stages``,
``numeric_values``, ``level_indicators``); see :class:`surveysynth.estimate.Estimators`.
"""

from __future__ import annotations

import importlib.util
from typing import Any, ClassVar

import numpy as np
import pandas as pd


def module_available(module: str | None) -> bool:
    """True when ``module`` can be imported (checked without importing it)."""
    if module is None:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class Engine:
    """Base class of estimation engines (``engine="native"``, ``"samplics"``, ``"r"``, ...).

    Class attributes
    ----------------
    name : the ``engine=`` value.
    description : one line for :func:`~surveysynth.engines.list_engines` and messages.
    required_module : the module the engine needs (None: nothing beyond surveysynth).
    install_hint : what to install when ``required_module`` is missing.
    design_kinds : the design kinds it estimates (``"taylor"``, ``"replicate"``).
    native : True for the engine that computes through the design's own
        ``domain_ratios`` (no ``estimate`` call is made).
    available : whether ``required_module`` is importable (set per subclass).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    required_module: ClassVar[str | None] = None
    install_hint: ClassVar[str] = ""
    design_kinds: ClassVar[tuple[str, ...]] = ("taylor", "replicate")
    native: ClassVar[bool] = False
    available: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.available = module_available(cls.required_module)

    def estimate(self, design: Any, call: dict, *, dom: np.ndarray, D: int, by: Any = None,
                 by_df: pd.DataFrame | None = None, na_rm: bool = False,
                 return_ci: bool = False) -> tuple:
        """Estimates and SEs as (D, V) arrays in the native engine's order.

        ``call`` names the statistic and its variables (``{"stat": "mean", "variables":
        [...]}``, ``{"stat": "ratio", "numerator": [...], "denominator": [...]}``,
        ``{"stat": "quantile", ..., "quantiles": [...], "level": 0.95}``); ``dom`` codes every
        row of ``design.full_data`` (-1 outside). ``return_ci=True`` returns
        ``(est, se, ci_low, ci_high)`` (limits None when they are est -+ crit * se).
        """
        raise NotImplementedError(f"engine {self.name!r} does not implement estimate().")

    def __repr__(self) -> str:
        state = "available" if self.available else f"not installed ({self.install_hint})"
        return f"<engine {self.name!r}: {self.description} [{state}]>"
