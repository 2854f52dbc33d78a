"""User-facing Dask designs: :class:`DaskSurveyDesign` and :class:`DaskReplicateDesign`.

They take a Dask DataFrame or a Parquet dataset, run the engine's one pass
(:mod:`surveysynth.engines.dask_pass`) on a client (:mod:`surveysynth.engines.dask_cluster`)
and turn the group sums into the native estimators' output. For a linearization design the
sums become the rows of a small ``SurveyDesign`` (one row per group, weight 1), whose own
domain API (``domains``, ``domain_ratios``, ``domain_df``) gives the estimates, the multistage
Taylor variances (fpc, lonely-PSU rules, later stages) and the degrees of freedom of the
native engine: the same formulas, not a copy of them. Replicate weights given as columns:
per domain, the full-sample and replicate totals and the Gram matrix of the replicate
weights (for R's ``degf``), then R's ``svrVar``. ``tables.tabulate`` of a Dask design is one
pass too (``_engine_tabulate``).

Supported: ``total``, ``mean``, ``ratio``, ``proportion`` (numeric and categorical
variables), ``by=`` domains, ``na_rm``, ``level``, ``ci`` ("normal"/"t"), ``df``, ``covmat``
(the covariance of all the estimates, from the same pass). Not supported
(:class:`UnsupportedByDask`): quantiles, ``deff``, ``subset``,
``ci_method`` other than Wald, linearization designs without ``ids`` (one PSU per row: give a
row-id column as ``ids=``; the aggregate then has one row per data row), and weights from
``probs``.

This module changes when what a Dask design offers its users changes (estimators, options,
tables); the public import paths ``surveysynth.DaskSurveyDesign`` and
``surveysynth.engines.dask_engine.DaskSurveyDesign`` stay.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse

from .._validate import as_list
from ..design import SurveyDesign
from ..estimate import (
    attach_vcov,
    category_levels,
    estimate_frame,
    estimate_names,
    is_categorical,
)
from ..replicate_design import ReplicateDesign
from ..results import Estimate
from ..variance.replicate_weights import (
    rank_like_r,
    replicate_covariance,
    replicate_variance,
    warn_dropped,
)
from .dask_cluster import as_dask, client_for, start_cluster
from .dask_pass import NA_FLAG, UnsupportedByDask, one_pass, raise_problems


class _DaskBase:
    """What both Dask designs share: the columns, the call's value matrices, the output."""

    design_kind = "taylor"

    def _init_data(self, data, npartitions, client, split_every, progress=False,
                   read_kwargs=None):
        self._ddf = as_dask(data, npartitions, read_kwargs)
        self._client = client
        self._cluster = None
        self.split_every = int(split_every)
        self.progress = bool(progress)
        self.columns = list(self._ddf.columns)

    @classmethod
    def from_parquet(cls, path: str | Path, *, client: Any = None, n_workers: int | None = None,
                     memory_limit: str | int | None = "4GiB", threads_per_worker: int = 1,
                     progress: bool | None = None, read_kwargs: dict | None = None,
                     **design: Any) -> Any:
        """The design over a Parquet dataset (a directory, a glob or a URL every worker can
        read), computed on ``client`` if given, else on a :class:`distributed.LocalCluster`
        of ``n_workers`` processes (default: up to 2) with ``memory_limit`` each, started
        here and closed by :meth:`close` (or at the end of a ``with`` block).

        For a multi-node cluster pass ``client=distributed.Client("tcp://scheduler:8786")``
        (docs/dask.md); to share a cluster, ``client=distributed.default_client()``. ``progress`` shows a progress bar of each pass (default: when
        standard output is a terminal; a redrawn bar floods a log file); ``read_kwargs`` go to
        ``dask.dataframe.read_parquet`` (e.g. ``blocksize``, ``filesystem``); ``design``
        are the design's own arguments (``ids``, ``strata``, ``weights``, ...)."""
        if progress is None:
            import sys

            progress = sys.stdout.isatty()
        cl, cluster = start_cluster(client, n_workers, memory_limit, threads_per_worker)
        try:
            obj = cls(path, client=cl, progress=progress, read_kwargs=read_kwargs, **design)
        except BaseException:
            if cluster is not None:
                cl.close()
                cluster.close()
            raise
        obj._cluster = cluster
        return obj

    def close(self) -> None:
        """Close the LocalCluster :meth:`from_parquet` started (nothing if it used a given or
        default client)."""
        if self._cluster is not None:
            self._client.close()
            self._cluster.close()
            self._cluster = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _require(self, cols: list[str], arg: str) -> None:
        missing = [c for c in cols if c not in self.columns]
        if missing:
            raise ValueError(f"{arg}: column(s) {missing} not in the data (columns: "
                             f"{self.columns[:20]}).")

    def _kinds(self, cols: list[str], force_categorical: bool) -> tuple[list[str], list[str]]:
        dtypes = self._ddf.dtypes
        num, cat = [], []
        for c in cols:
            probe = pd.Series([], dtype=dtypes[c])
            (cat if force_categorical or is_categorical(probe) else num).append(c)
        return num, cat

    # ---- the public estimators (R's svytotal/svymean/svyratio, by domain), with the options
    # of surveysynth.results.EstimatorProtocol; ``engine`` is "dask" (the pass over the data)
    #: statistics of the estimator protocol this design does not compute (they raise)
    unsupported_estimators: tuple[str, ...] = ("quantile",)

    def total(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
              na_rm: bool = False, level: float = 0.95, ci: str = "normal",
              df: float | str | None = None, engine: str = "dask", covmat: bool = False,
              **unsupported: Any) -> Estimate:
        """Estimated totals by domain (categorical: the count of each level), as
        :meth:`surveysynth.SurveyDesign.total` (``covmat=True``: the covariance of all the
        estimates from the same pass, read with ``.vcov()``)."""
        return self._run("total", as_list(variables), None, by, na_rm, level, ci, df,
                         {**unsupported, "engine": engine}, covmat)

    def mean(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
             na_rm: bool = False, level: float = 0.95, ci: str = "normal",
             df: float | str | None = None, engine: str = "dask", covmat: bool = False,
             **unsupported: Any) -> Estimate:
        """Estimated means by domain (categorical: level shares), as ``SurveyDesign.mean``."""
        return self._run("mean", as_list(variables), None, by, na_rm, level, ci, df,
                         {**unsupported, "engine": engine}, covmat)

    def proportion(self, variables: str | Sequence[str], by: str | Sequence[str] | None = None,
                   na_rm: bool = False, level: float = 0.95, ci: str = "normal",
                   df: float | str | None = None, engine: str = "dask",
                   covmat: bool = False, **unsupported: Any) -> Estimate:
        """Share of every level (numeric columns: each value a level), Wald intervals."""
        return self._run("proportion", as_list(variables), None, by, na_rm, level, ci, df,
                         {**unsupported, "engine": engine}, covmat)

    def ratio(self, numerator: str | Sequence[str], denominator: str | Sequence[str],
              by: str | Sequence[str] | None = None, na_rm: bool = False, level: float = 0.95,
              ci: str = "normal", df: float | str | None = None, engine: str = "dask",
              covmat: bool = False, **unsupported: Any) -> Estimate:
        """Ratios of totals (every numerator over every denominator), as ``svyratio``."""
        return self._run("ratio", as_list(numerator), as_list(denominator), by, na_rm, level,
                         ci, df, {**unsupported, "engine": engine}, covmat)

    def quantile(self, variables: str | Sequence[str], quantiles: float | Sequence[float],
                 by: str | Sequence[str] | None = None, na_rm: bool = False,
                 level: float = 0.95, df: float | str | None = None, engine: str = "dask",
                 **options: Any) -> Estimate:
        """Not available: quantiles need sorted values per domain, not additive sums (the
        signature is the protocol's, so that the refusal is the only difference)."""
        raise UnsupportedByDask(
            "quantile() is not computed by the Dask engine (a quantile is not a ratio of sums). "
            "Use SurveyDesign on an in-memory sample, or engine='native'.")

    def subset(self, *args: Any, **kwargs: Any) -> None:
        """Not available: filter as a domain with ``by=`` (its variance keeps every PSU)."""
        raise UnsupportedByDask("subset() is not available on Dask designs: estimate by= a "
                                "0/1 column and read the domain you need.")

    # ---- tables: surveysynth.tables.tabulate(dask_design, ...) comes here
    def tabulate(self, rows: str | Sequence[str], cols: str | Sequence[str] | None = None,
                 value: str | None = None, stat: str = "total", *args: Any,
                 **kwargs: Any) -> Any:
        """:func:`surveysynth.tables.tabulate` of this design (the same arguments and the same
        :class:`~surveysynth.tables.Table`), computed in one pass over the data."""
        from ..tables import tabulate

        return tabulate(self, rows, cols, value, stat, *args, **kwargs)

    def _engine_tabulate(self, rows: Any, cols: Any, value: str | None, stat: str,
                         cv_max: float | None, n_min: float | None, level: float, ci: str,
                         na_rm: bool, margin_label: str, *, of: str, quantiles: Any,
                         qrule: str, interval_type: str, ci_method: str) -> Any:
        """The table of ``tables.tabulate`` from ONE pass over the data.

        The pass sums weights (and ``w y``, replicate weights) per group of (rows, cols,
        proportion levels, design columns); every block of the table (interior, row and
        column margins, grand total) is then a domain estimate on those sums, computed as
        ``tables`` computes it on a native design (same grids, fills of empty cells, df, n),
        and ``tables._finish`` turns the cells into the Table (CV, CI, flags)."""
        from .. import tables as tb

        stat, of = {"row percent": ("percent", "row"),
                    "column percent": ("percent", "col")}.get(stat, (stat, of))
        row_vars, col_vars = as_list(rows), as_list(cols)
        tb._check_layout(row_vars, col_vars, value, stat)  # noqa: SLF001 - tables' own checks
        if stat in ("median", "quantile"):
            raise UnsupportedByDask(f"tabulate(stat={stat!r}): quantiles are not sums, so the "
                                    "Dask engine does not compute them. Tabulate an in-memory "
                                    "SurveyDesign instead.")
        tb._check_stat(stat, of, value, quantiles, ci_method, [], None, col_vars)  # noqa: SLF001
        if ci_method != "wald":
            raise UnsupportedByDask(f"tabulate(ci_method={ci_method!r}): the Dask engine gives "
                                    "Wald intervals only (ci_method='wald').")
        self._require(row_vars + col_vars + ([value] if value else []), "tabulate")
        share_levels = stat == "proportion"
        num, cat = [], []
        if share_levels:
            cat = [value]
        elif value is not None:
            num, bad = self._kinds([value], False)
            if bad:
                raise ValueError(
                    f"column {value!r} is {self._ddf.dtypes[value]}, not numeric: use "
                    "stat='proportion' for the share of each level, or convert it.")
        extra_var = [value] if share_levels else []
        label_vars = row_vars + col_vars + extra_var
        keys = list(dict.fromkeys(label_vars + self._table_keys()))
        call = {"stat": "tabulate", "num": num, "cat": cat, "na_rm": na_rm,
                "by": row_vars + col_vars}
        P, grams = self._fetch(call, keys, self._table_rep(), gram=bool(self._table_rep()))
        levels = {v: _table_levels(P[v]) for v in label_vars}
        ctx = self._table_context(P, grams, row_vars + col_vars)
        if stat in ("total", "mean"):
            ycol = "_w" if value is None else f"y:{value}"
            xcol = "_w" if stat == "mean" else None
            fill = ({"e": 0.0, "v": 0.0, "d": np.nan, "n": 0.0} if stat == "total"
                    else {"e": np.nan, "v": np.nan, "d": np.nan, "n": 0.0})
        else:  # shares of counts, or of the total of a numeric value
            ycol = xcol = "_w" if (share_levels or value is None) else f"y:{value}"
            fill = {"n": 0.0}

        labels, parts = [], []
        for cell, by, numv in tb._blocks(stat, of, row_vars, col_vars):  # noqa: SLF001
            shown = [v for v in label_vars if v in by + numv + extra_var]
            grid = (pd.MultiIndex.from_product([levels[v] for v in shown], names=shown)
                    if shown else None)
            labels.append(tb.cell_labels(label_vars, shown, grid, 1 if grid is None
                                         else len(grid), cell, margin_label))
            within = extra_var if stat == "proportion" else numv  # numv: [] unless percent
            parts.append(self._table_block(ctx, by, within, grid, levels, ycol, xcol, fill))
        long = pd.concat(labels, ignore_index=True)
        scale = 100.0 if stat == "percent" else 1.0

        def stack(key: str) -> np.ndarray:
            return np.concatenate([p[key] for p in parts])[None, :]

        meta: dict[str, Any] = {"cv_max": cv_max, "n_min": n_min, "level": level}
        meta.update({"percent": {"of": of}, "proportion": {"ci_method": ci_method}}.get(stat, {}))
        if stat == "percent":
            meta["ci_method"] = ci_method
        shell = tb.Table(long, row_vars, col_vars + extra_var, stat, value, margin_label, meta)
        return tb._finish(long, stack("e") * scale, stack("v") * scale**2,  # noqa: SLF001
                          stack("d"), stack("n"), None, self, None, level, ci, cv_max, n_min,
                          meta, shell)

    def _table_block(self, ctx: dict, by: list[str], num: list[str], grid: Any,
                     levels: dict, ycol: str, xcol: str | None,
                     fill: dict) -> dict[str, np.ndarray]:
        """One block of the table on its grid: the shares (or totals, means) of the level
        combinations of ``num`` within the domains of ``by``: tables._block (``num`` empty)
        and tables._share_block computed on the group sums."""
        from ..tables import _align

        P = ctx["P"]
        G = P.shape[0]
        if num:
            codes = [pd.Index(levels[v]).get_indexer(P[v]) for v in num]
            bad = np.zeros(G, dtype=bool)
            for c in codes:
                bad |= c < 0
            dims = [max(len(levels[v]), 1) for v in num]
            flat = np.ravel_multi_index([np.where(c < 0, 0, c) for c in codes], dims)
            code = np.where(bad, -1, flat)
            L = int(np.prod(dims))
        else:
            code, L = np.zeros(G, dtype=np.int64), 1
        ind = (code[:, None] == np.arange(L)[None, :]).astype(float)

        def Y(sfx: str) -> np.ndarray:
            return P[f"{ycol}{sfx}"].to_numpy(float)[:, None] * ind

        def X(sfx: str) -> np.ndarray | None:
            if xcol is None:
                return None
            return np.repeat(P[f"{xcol}{sfx}"].to_numpy(float)[:, None], L, axis=1)

        dom, D, by_df, est, var, df = self._block_stats(ctx, by, Y, X)
        sel = (dom >= 0) & (code >= 0)
        n = np.bincount(dom[sel] * L + code[sel], weights=P["_n"].to_numpy(float)[sel],
                        minlength=D * L)
        res = {"e": est.reshape(-1), "v": var.reshape(-1), "d": np.repeat(df, L), "n": n}
        if grid is None:
            return res
        dom_keys = by_df[by].astype(object).to_numpy().tolist() if by else [[]]
        combos = list(pd.MultiIndex.from_product([levels[v] for v in num])) if num else [()]
        keys = [tuple(k) + tuple(c) for k in dom_keys for c in combos]
        have = pd.MultiIndex.from_tuples(keys, names=by + num)
        g = grid.reorder_levels(by + num) if list(grid.names) != by + num else grid
        return _align(have, g, res, fill)

    def _run(self, stat, cols, dens, by, na_rm, level, ci, df, unsupported,
             covmat=False) -> Estimate:
        bad = {k: v for k, v in unsupported.items() if v not in (None, False, "native", "wald",
                                                                   "dask")}
        if bad:
            raise UnsupportedByDask(
                f"{stat}(): {sorted(bad)} not supported by the Dask engine (it computes "
                "estimates, SEs, intervals and df of totals, means, ratios and proportions by "
                "domain). Use SurveyDesign with engine='native' for deff, ci_method.")
        if not cols:
            raise ValueError(f"{stat}(): no variable given.")
        by_cols = as_list(by)
        self._require(cols + (dens or []), "variables")
        self._require(by_cols, "by")
        if stat == "ratio":
            num, cat = cols + [d for d in dens if d not in cols], []
            _, bad_cat = self._kinds(num, False)
            if bad_cat:
                raise ValueError(f"ratio: column(s) {bad_cat} are not numeric.")
        else:
            num, cat = self._kinds(cols, stat == "proportion")
        call = {"stat": stat, "cols": cols, "dens": dens, "num": num, "cat": cat,
                "by": by_cols, "na_rm": na_rm, "scope": None, "covmat": bool(covmat)}
        return self._estimate(call, level, ci, df)[2]

    # ---- value matrices over the aggregated groups
    @staticmethod
    def _levels(P: pd.DataFrame, c: str) -> list:
        return category_levels(P[c])

    def _matrices(self, P: pd.DataFrame, call: dict, suffix: str = ""):
        """(Y, X, labels): columns of group sums for the call (X None for totals)."""
        stat = call["stat"]
        wsum = P[f"_w{suffix}"].to_numpy(float)
        Ys, Xs, labels = [], [], []
        if stat == "ratio":
            for b in call["dens"]:
                for a in call["cols"]:
                    Ys.append(P[f"y:{a}{suffix}"].to_numpy(float))
                    Xs.append(P[f"y:{b}{suffix}"].to_numpy(float))
                    labels.append((f"{a}/{b}", None))
            return np.column_stack(Ys), np.column_stack(Xs), labels
        for c in call["cols"]:
            if c in call["cat"]:
                for lev in self._levels(P, c):
                    Ys.append(np.where((P[c] == lev).to_numpy(), wsum, 0.0))
                    labels.append((c, lev))
            else:
                Ys.append(P[f"y:{c}{suffix}"].to_numpy(float))
                labels.append((c, None))
        Y = np.column_stack(Ys)
        X = None if stat == "total" else np.repeat(wsum[:, None], Y.shape[1], axis=1)
        return Y, X, labels

    def _fetch(self, call: dict, keys: list[str], rep: list[str], gram: bool):
        no_na = [k for k in keys if k not in call["cat"]]
        spec = {"keys": keys, "numeric": call["num"], "categorical": call["cat"],
                "analysis": [] if call["na_rm"] else call["num"] + call["cat"],
                "weights": self.weights_var, "rep": rep, "combined": self._combined,
                "no_na": no_na, "positive_w": self.design_kind == "taylor",
                "gram_by": (call["by"] if gram else None)}
        client = client_for(self._client)
        agg, problems, grams = one_pass(self._ddf, spec, client, self.split_every,
                                         self.progress)
        raise_problems(problems, call["stat"])
        return agg.reset_index(), grams

    @staticmethod
    def _output(by_df, labels, est, se, dfs, n, level, ci) -> Estimate:
        """The native estimators' output frame (the same columns, with n)."""
        return estimate_frame(by_df, est.shape[0], labels, est, se, dfs, level, ci, n=n)


def _resolve_df(df: Any, own: np.ndarray, design_df: float) -> np.ndarray:
    if df is None:
        return own
    if isinstance(df, str):
        if df != "design":
            raise ValueError(f"df={df!r}: give None, 'design' or a positive number.")
        return np.full(own.shape[0], design_df)
    val = float(df)
    if not val > 0:
        raise ValueError(f"df={df!r}: must be positive (or np.inf for normal intervals).")
    return np.full(own.shape[0], val)


# ------------------------------------------------------------------------ linearization
class DaskSurveyDesign(_DaskBase):
    """A linearization design (R ``svydesign``) over a Dask DataFrame or a Parquet dataset.

    Parameters
    ----------
    data : a ``dask.dataframe.DataFrame``, a Parquet path (read with ``dd.read_parquet``) or a
        pandas DataFrame (split into ``npartitions``).
    ids, strata, fpc, nest, lonely_psu, adjust_domain_lonely, ultimate_cluster : as
        :class:`SurveyDesign` (``ids`` is required here: one PSU per row would make the aggregate as large as the
        data; give a row-id column if that is the design).
    weights : column of sampling weights (required; positive and finite).
    client : a ``distributed.Client`` (default: the current one, else a LocalCluster started
        once for the process). ``split_every``: fan-in of the tree that adds the partials.

    Each estimator makes one pass over the data (see the module docstring) and returns the
    native engine's output columns (by columns, variable, level, estimate, se, ci_low,
    ci_high, df, cv, n).

    Example (one PSU per row: a row-id column as ``ids``):

    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"stype": ["E", "E", "E", "H", "H", "H"],
    ...                    "pw": [10.0, 10.0, 10.0, 5.0, 5.0, 5.0],
    ...                    "api00": [600.0, 650.0, 700.0, 550.0, 600.0, 640.0]})
    >>> import dask.dataframe as dd
    >>> df["id"] = range(len(df))
    >>> d = ss.DaskSurveyDesign(dd.from_pandas(df, npartitions=2), ids="id", strata="stype",
    ...                         weights="pw")
    >>> d.mean("api00")[["variable", "estimate", "se"]].round(2)
      variable  estimate     se
    0    api00    632.22  21.11
    """

    design_kind = "taylor"
    _combined = True

    def __init__(self, data: Any, ids: str | Sequence[str] | None = None,
                 strata: str | Sequence[str] | None = None, weights: str | None = None,
                 fpc: str | Sequence[str] | None = None, nest: bool = False,
                 lonely_psu: str = "fail", adjust_domain_lonely: bool = False,
                 npartitions: int | None = None, client: Any = None,
                 split_every: int = 8, progress: bool = False,
                 read_kwargs: dict | None = None, ultimate_cluster: bool = False) -> None:
        self._init_data(data, npartitions, client, split_every, progress, read_kwargs)
        self.ultimate_cluster = bool(ultimate_cluster)
        self.ids_vars = as_list(ids)
        if not self.ids_vars or self.ids_vars in (["1"], ["~1"], ["0"]):
            raise UnsupportedByDask(
                "ids=: DaskSurveyDesign needs cluster columns (the PSUs, and later-stage units). "
                "For one PSU per row, add a row-id column and pass it as ids= (the aggregate is "
                "then one row per data row).")
        if not isinstance(weights, str):
            raise ValueError("weights=: give the column of sampling weights (a name); weights "
                             "from probs= or fpc= are not derived by the Dask engine.")
        self.strata_vars = as_list(strata)
        self.fpc_vars = as_list(fpc)
        self.weights_var = weights
        self._require(self.ids_vars, "ids")
        self._require(self.strata_vars, "strata")
        self._require(self.fpc_vars, "fpc")
        self._require([weights], "weights")
        self.nest = bool(nest)
        self.lonely_psu = lonely_psu
        self.adjust_domain_lonely = bool(adjust_domain_lonely)
        self._design_cols = list(dict.fromkeys(self.strata_vars + self.ids_vars + self.fpc_vars))

    def _group_design(self, P: pd.DataFrame) -> SurveyDesign:
        """The design over the aggregated groups: one row per group, weight 1."""
        return SurveyDesign(P, ids=self.ids_vars, strata=self.strata_vars or None,
                            weights=np.ones(P.shape[0]), fpc=self.fpc_vars or None,
                            nest=self.nest, lonely_psu=self.lonely_psu,
                            adjust_domain_lonely=self.adjust_domain_lonely,
                            ultimate_cluster=self.ultimate_cluster)

    def _estimate(self, call: dict, level: float, ci: str, df: Any):
        scope = [call["scope"]] if call["scope"] else []
        keys = list(dict.fromkeys(call["by"] + self._design_cols + call["cat"] + scope))
        P, _ = self._fetch(call, keys, [], gram=False)
        design = self._group_design(P)
        out_of_domain = P[NA_FLAG].to_numpy(bool)
        if scope:
            out_of_domain = out_of_domain | ~P[scope[0]].to_numpy(bool)
        dom, D, by_df = design.domains(call["by"] or None, out_of_domain if out_of_domain.any()
                                       else None)
        Y, X, labels = self._matrices(P, call)
        est, var, _ = design.domain_ratios(Y, X, dom, D)
        own = np.asarray(design.domain_df(dom, D), float)
        dfs = _resolve_df(df, own, design.degf)
        n = np.bincount(dom[dom >= 0], weights=P["_n"].to_numpy(float)[dom >= 0], minlength=D)
        out = self._output(by_df, labels, est, np.sqrt(var), dfs, n, level, ci)
        if call.get("covmat"):  # the group sums' design gives the covariance as the rows'
            attach_vcov(out, estimate_names(by_df, D, labels),
                        design.domain_covariance(Y, X, dom, D)[1])
        return est, np.sqrt(var), out

    # ---- tabulate hooks: the group sums as a small design
    def _table_keys(self) -> list[str]:
        return list(self._design_cols)

    def _table_rep(self) -> list[str]:
        return []

    def _table_context(self, P: pd.DataFrame, grams: dict, gram_by: list[str]) -> dict:
        return {"P": P, "design": self._group_design(P), "ood": P[NA_FLAG].to_numpy(bool)}

    @staticmethod
    def _block_stats(ctx: dict, by: list[str], Y: Any, X: Any) -> tuple:
        """Domains of ``by`` among the groups, ratios sum(Y)/sum(X) (totals if X is None),
        their Taylor variances and the domain df: the native design's own calls."""
        design, ood = ctx["design"], ctx["ood"]
        dom, D, by_df = design.domains(by or None, ood if ood.any() else None)
        est, var, _ = design.domain_ratios(Y(""), X(""), dom, D)
        df = np.asarray(design.domain_df(dom, D), float).reshape(D)
        return dom, D, by_df, est, var, df

    def __repr__(self) -> str:
        return (f"<DaskSurveyDesign ids={self.ids_vars} strata={self.strata_vars} "
                f"fpc={self.fpc_vars} weights={self.weights_var!r}, "
                f"{self._ddf.npartitions} partitions>")


# ------------------------------------------------------------------------ replicate weights
class DaskReplicateDesign(_DaskBase):
    """Replicate weights as columns (R ``svrepdesign``) over a Dask DataFrame or Parquet path.

    ``repweights`` is a list of column names (or a regular expression matched against the
    columns); ``weights`` the full-sample weight column; ``type``, ``scale``, ``rscales``,
    ``rho``, ``mse``, ``combined_weights`` as :class:`ReplicateDesign` (the scales are set by
    ReplicateDesign's own rules; JK1/JKn guesses from the weights use the column maxima).

    Example (the jackknife weights of a small design as columns ``rw1`` ... ``rw6``):

    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> df = pd.DataFrame({"stype": ["E", "E", "E", "H", "H", "H"],
    ...                    "pw": [10.0, 10.0, 10.0, 5.0, 5.0, 5.0],
    ...                    "api00": [600.0, 650.0, 700.0, 550.0, 600.0, 640.0]})
    >>> import dask.dataframe as dd
    >>> jk = ss.SurveyDesign(df, strata="stype", weights="pw").jackknife()
    >>> reps = pd.DataFrame(jk.replicate_weights(), columns=[f"rw{i}" for i in range(1, 7)])
    >>> data = dd.from_pandas(pd.concat([df, reps], axis=1), npartitions=2)
    >>> rd = ss.DaskReplicateDesign(data, repweights="^rw", weights="pw", type="JKn", scale=1,
    ...                             rscales=[2 / 3] * 6)
    >>> rd.mean("api00")[["variable", "estimate", "se"]].round(2)
      variable  estimate     se
    0    api00    632.22  21.11
    """

    design_kind = "replicate"

    def __init__(self, data: Any, repweights: str | Sequence[str], weights: str,
                 type: str = "other", scale: float | None = None,  # noqa: A002 - R's name
                 rscales: Any = None, rho: float | None = None, mse: bool = False,
                 combined_weights: bool = True, npartitions: int | None = None,
                 client: Any = None, split_every: int = 8, progress: bool = False,
                 read_kwargs: dict | None = None) -> None:
        self._init_data(data, npartitions, client, split_every, progress, read_kwargs)
        if isinstance(repweights, str):
            import re

            rx = re.compile(repweights)
            reps = [c for c in self.columns if rx.search(str(c))]
            if not reps:
                raise ValueError(f"repweights={repweights!r} matches no column.")
        else:
            reps = list(repweights)
        self._require(reps, "repweights")
        if not isinstance(weights, str):
            raise ValueError("weights=: give the column of full-sample weights (a name).")
        self._require([weights], "weights")
        self.repweights = reps
        self.weights_var = weights
        self._combined = bool(combined_weights)
        # R's scales from ReplicateDesign's own rules, on a two-row frame holding the column
        # maxima (the only data R's JK1/JKn guesses read)
        mx = client_for(self._client).compute(
            self._ddf[reps + [weights]].max()).result().to_numpy(float)
        tiny = pd.DataFrame(np.vstack([mx, mx]), columns=reps + [weights])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ref = ReplicateDesign(tiny, repweights=reps, weights=weights, type=type, scale=scale,
                                  rscales=rscales, rho=rho, mse=mse,
                                  combined_weights=combined_weights)
        for wmsg in caught:
            if "combined weights" not in str(wmsg.message):
                warnings.warn(str(wmsg.message), wmsg.category, stacklevel=2)
        self.type, self.scale, self.rscales, self.mse = type, ref.scale, ref.rscales, ref.mse

    def _estimate(self, call: dict, level: float, ci: str, df: Any):
        scope = [call["scope"]] if call["scope"] else []
        keys = list(dict.fromkeys(call["by"] + call["cat"] + scope))
        P, grams = self._fetch(call, keys, self.repweights, gram=not scope)
        out_of_domain = P[NA_FLAG].to_numpy(bool)
        if scope:
            out_of_domain = out_of_domain | ~P[scope[0]].to_numpy(bool)
        P = P.loc[~out_of_domain].reset_index(drop=True)
        if call["by"]:
            frame = P[call["by"]]
            dom, by_df = _domain_codes(frame)
        else:
            dom, by_df = np.zeros(P.shape[0], dtype=np.int64), None
        D = 1 if by_df is None else by_df.shape[0]
        Y, X, labels = self._matrices(P, call)
        V = Y.shape[1]
        R = len(self.repweights)

        def totals(M):
            return np.column_stack([np.bincount(dom, weights=M[:, v], minlength=D)
                                    for v in range(M.shape[1])])

        Ty = totals(Y)
        Tx = None if X is None else totals(X)
        thetas = np.empty((R, D * V))
        for r in range(R):
            Yr, Xr, _ = self._matrices(P, call, suffix=f"@{r}")
            with np.errstate(invalid="ignore", divide="ignore"):
                th = totals(Yr) if Xr is None else totals(Yr) / totals(Xr)
            thetas[r] = th.reshape(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            est = Ty if Tx is None else Ty / Tx
        var, _ = replicate_variance(thetas, est.reshape(-1), self.scale, self.rscales, self.mse)
        cov = None
        if call.get("covmat"):
            cov, dropped = replicate_covariance(thetas, est.reshape(-1), self.scale,
                                                self.rscales, self.mse)
            warn_dropped(np.atleast_1d(dropped))
        se = np.sqrt(var.reshape(D, V))
        own = np.full(D, np.nan)
        if grams:
            for d in range(D):
                key = () if by_df is None else tuple(by_df.iloc[d].tolist())
                own[d] = rank_like_r(grams[key]) - 1.0
        if df == "design":
            raise UnsupportedByDask("df='design' on a Dask replicate design: give a number.")
        dfs = _resolve_df(df, own, np.nan)
        n = np.bincount(dom, weights=P["_n"].to_numpy(float), minlength=D)
        out = self._output(by_df, labels, est, se, dfs, n, level, ci)
        if cov is not None:
            attach_vcov(out, estimate_names(by_df, D, labels), cov)
        return est, se, out

    # ---- tabulate hooks: replicate totals per domain, df from the summed Gram matrices
    def _table_keys(self) -> list[str]:
        return []

    def _table_rep(self) -> list[str]:
        return list(self.repweights)

    def _table_context(self, P: pd.DataFrame, grams: dict, gram_by: list[str]) -> dict:
        keep = ~P[NA_FLAG].to_numpy(bool)
        return {"P": P.loc[keep].reset_index(drop=True), "grams": grams, "gram_by": gram_by}

    def _block_stats(self, ctx: dict, by: list[str], Y: Any, X: Any) -> tuple:
        """Domains of ``by``, full-sample and replicate ratios of domain totals, R's svrVar
        and R's degf per domain (rank of the domain's replicate Gram matrix, the sum of the
        Gram matrices of the finer cells the pass returned) minus 1."""
        P = ctx["P"]
        G = P.shape[0]
        if by:
            dom, by_df = _domain_codes(P[by])
        else:
            dom, by_df = np.zeros(G, dtype=np.int64), None
        D = 1 if by_df is None else by_df.shape[0]
        onehot = sparse.csr_matrix((np.ones(G), (dom, np.arange(G))), shape=(D, G))

        def ratio(sfx: str) -> np.ndarray:
            ty = np.asarray(onehot @ Y(sfx))
            x = X(sfx)
            if x is None:
                return ty
            with np.errstate(invalid="ignore", divide="ignore"):
                return ty / np.asarray(onehot @ x)

        est = ratio("")
        R = len(self.repweights)
        thetas = np.empty((R, est.size))
        for r in range(R):
            thetas[r] = ratio(f"@{r}").reshape(-1)
        var, _ = replicate_variance(thetas, est.reshape(-1), self.scale, self.rscales, self.mse)
        pos = [ctx["gram_by"].index(v) for v in by]
        summed: dict = {}
        for key, gm in ctx["grams"].items():
            k = tuple(key[i] for i in pos)
            summed[k] = summed[k] + gm if k in summed else gm
        df = np.full(D, np.nan)
        for d in range(D):
            k = () if by_df is None else tuple(by_df.iloc[d].tolist())
            if k in summed:
                df[d] = rank_like_r(summed[k]) - 1.0
        return dom, D, by_df, est, var.reshape(est.shape), df

    def __repr__(self) -> str:
        return (f"<DaskReplicateDesign {len(self.repweights)} replicates ({self.type}), "
                f"weights={self.weights_var!r}, {self._ddf.npartitions} partitions>")


def _table_levels(series: pd.Series) -> list:
    """A table variable's levels as tables.union_levels gives them: every category of a
    categorical column, else the sorted values present."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        return list(series.cat.categories)
    return category_levels(series)


def _domain_codes(frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """svyby's domains of aggregated rows: levels in R's order, first column fastest."""
    key = np.zeros(frame.shape[0], dtype=np.int64)
    mult = 1
    levels_all = []
    for c in frame.columns:
        levels = category_levels(frame[c])
        code = pd.Index(levels).get_indexer(frame[c])
        key += code * mult
        mult *= max(len(levels), 1)
        levels_all.append(levels)
    present, dom = np.unique(key, return_inverse=True)
    rem = present.copy()
    by = {}
    for c, levels in zip(frame.columns, levels_all, strict=True):
        by[c] = [levels[i] for i in rem % len(levels)]
        rem = rem // len(levels)
    by_df = pd.DataFrame(by)
    for c in frame.columns:
        if isinstance(frame[c].dtype, pd.CategoricalDtype):
            by_df[c] = pd.Categorical(by_df[c], categories=frame[c].cat.categories)
    return dom.reshape(-1), by_df
