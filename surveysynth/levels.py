"""R's factor rules, shared by the estimation core: level order and the categorical test.

A categorical variable's levels are its factor levels (a pandas Categorical's categories),
else its sorted distinct values, as R's ``factor()`` orders them; a column is categorical
unless it is numeric (booleans count as categorical, as R factors). Estimators, tables and the
engines ask this module (which asks :mod:`surveysynth.encoding`, the one encoder), so that one column gets the same levels and the
same order everywhere. It sits below ``estimate.py`` and ``calibration.py`` (which both need
it) so that neither imports the other for it; ``surveysynth.estimate.category_levels`` and
``surveysynth.estimate.is_categorical`` remain the public names.

Changes when R's factor rules (or ours for non-R dtypes) change.
"""

from __future__ import annotations

import pandas as pd

from .encoding import is_factor, r_levels

__all__ = ["category_levels", "is_categorical"]


def category_levels(series: pd.Series) -> list:
    """Levels of a categorical variable in R's order (factor levels, else sorted values):
    :func:`surveysynth.encoding.r_levels`, the package's one encoder."""
    return r_levels(series)


def is_categorical(series: pd.Series) -> bool:
    """True unless the column is numeric (booleans count as categorical, as R factors):
    :func:`surveysynth.encoding.is_factor`."""
    return is_factor(series)
