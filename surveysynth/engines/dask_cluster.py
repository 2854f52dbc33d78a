"""Where the Dask engine computes: the data as a Dask frame, and the client to run on.

A design is given a client, or uses the process's default client, or starts a LocalCluster
of its own (:meth:`DaskSurveyDesign.from_parquet`, closed by ``close``). This module changes
when the way clusters are found, started or configured changes; the arithmetic is elsewhere
(:mod:`surveysynth.engines.dask_pass`, :mod:`surveysynth.engines.dask_design`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd


def as_dask(data: Any, npartitions: int | None, read_kwargs: dict | None = None):
    """``data`` as a Dask DataFrame: a Parquet path is read lazily, a pandas frame split into
    ``npartitions`` (default 4), a Dask frame taken as it is."""
    import dask.dataframe as dd

    if isinstance(data, (str, Path)):
        return dd.read_parquet(str(data), **(read_kwargs or {}))
    if isinstance(data, pd.DataFrame):
        return dd.from_pandas(data, npartitions=npartitions or 4)
    if isinstance(data, dd.DataFrame):
        return data
    raise TypeError(f"data must be a Dask DataFrame, a Parquet path or a pandas DataFrame, got "
                    f"{type(data).__name__}.")


def client_for(client: Any) -> Any:
    """The client to compute with: the one given, else the current default (``Client(...)``
    made earlier), else a LocalCluster started once for this process."""
    if client is not None:
        return client
    from distributed import Client, LocalCluster, default_client

    try:
        return default_client()
    except ValueError:
        pass
    global _LOCAL
    if _LOCAL is None:
        _LOCAL = Client(LocalCluster(processes=False, dashboard_address=_DASHBOARD))
    return _LOCAL


_LOCAL = None
#: the clusters started here serve their dashboard on a free port of the loopback interface:
#: dashboard_address=None does not disable it (dask/distributed#8136; it then takes :8787 on
#: every interface and warns when a second cluster finds the port taken)
_DASHBOARD = "127.0.0.1:0"


def start_cluster(client: Any, n_workers: int | None, memory_limit: str | int | None,
                   threads_per_worker: int) -> tuple[Any, Any]:
    """(client, cluster we started or None): the client given, else a new LocalCluster of
    worker processes, each held to ``memory_limit`` by its nanny (spill to disk at 60%,
    pause at 80%, restart at 95%: Dask's defaults). The new client does not become the
    process's default client (other designs keep theirs)."""
    if client is not None:
        return client, None
    import os

    from distributed import Client, LocalCluster

    workers = n_workers or max(1, min(2, os.cpu_count() or 1))
    cluster = LocalCluster(n_workers=workers, threads_per_worker=threads_per_worker,
                           processes=True, memory_limit=memory_limit,
                           dashboard_address=_DASHBOARD)
    return Client(cluster, set_as_default=False), cluster
