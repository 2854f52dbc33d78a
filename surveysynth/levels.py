"""R's factor rules, shared by the estimation core: level order and the categorical test.

A categorical variable's levels are its factor levels (a pandas Categorical's categories),
else its sorted distinct values, as R's ``factor()`` orders them; a column is categorical
unless it is numeric (booleans count as categorical, as R factors). Estimators, calibration,
tables and the engines all ask this module, so that one column gets the same levels and the
same order everywhere. It sits below ``estimate.py`` and ``calibration.py`` (which both need
it) so that neither imports the other for it; ``surveysynth.estimate.category_levels`` and
``surveysynth.estimate.is_categorical`` remain the public names.

Changes when R's factor rules (or ours for non-R dtypes) change.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["category_levels", "is_categorical"]


def category_levels(series: pd.Series) -> list:
    """Levels of a categorical variable in R's order (factor levels, else sorted values)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        return list(series.cat.categories)
    values = series.dropna().unique()
    try:
        return sorted(values.tolist())
    except TypeError:
        return sorted(values.tolist(), key=str)


def is_categorical(series: pd.Series) -> bool:
    """True unless the column is numeric (booleans count as categorical, as R factors)."""
    return not (pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series))
