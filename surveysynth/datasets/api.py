"""R ``survey``'s California API example data (apisrs, apistrat, apiclus1, apiclus2, apipop).

They ship with R's ``survey`` package, so they are read from R through rpy2: the same bytes
the R reference numbers are computed from. Factors arrive as pandas Categoricals with R's
level order.
"""

from __future__ import annotations

import pandas as pd

API_TABLES = ("apisrs", "apistrat", "apiclus1", "apiclus2", "apipop")


def load_api(name: str = "apistrat") -> pd.DataFrame:
    """One of R survey's ``data(api)`` tables as a DataFrame (needs R and r-cran-survey)."""
    if name not in API_TABLES:
        raise ValueError(f"load_api({name!r}): choose one of {API_TABLES}.")
    from r_bridge import r_session

    with r_session() as (ro, _):
        env = ro.r("new.env()")
        ro.r["data"]("api", package="survey", envir=env)
        from r_bridge.convert import r_to_pandas

        return r_to_pandas(env[name])
