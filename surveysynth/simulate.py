"""Repeated-sampling (Monte Carlo) studies: coverage, CI length, CV, bias and RMSE.

``monte_carlo(sample, analyze, truth, reps, seed)`` draws ``reps`` samples, analyses each and
scores every estimate against the truth, like seed 001 Appendix B (Tables 8-9) and seed 000
Appendix F. It is generic: ``sample`` and ``analyze`` are any callables, e.g. an SDR sample and
an FBS release tabulated by cell.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["MonteCarloResult", "monte_carlo"]

_REQUIRED = ("estimate", "ci_low", "ci_high")


@dataclass
class MonteCarloResult:
    """``replicates``: one row per (rep, method, estimand); ``summary``: one row per
    (method, estimand) with ``coverage`` (share of intervals covering the truth) and its Monte
    Carlo SE, ``avg_ci_length``, ``mean_cv`` (mean of se / estimate), ``bias``, ``rmse``
    (sqrt of mean squared error of the estimate), ``reps`` (replicates with an estimate)."""

    replicates: pd.DataFrame
    summary: pd.DataFrame
    seconds: float

    def table(self, what: str = "coverage") -> pd.DataFrame:
        """Estimands x methods view of one summary column (e.g. coverage, avg_ci_length)."""
        if what not in self.summary.columns:
            raise ValueError(f"what={what!r}: choose one of {list(self.summary.columns)}.")
        return self.summary[what].unstack("method")


def _as_frames(out: Any, rep: int) -> dict[str, pd.DataFrame]:
    frames = dict(out) if isinstance(out, Mapping) else {"estimate": out}
    for name, df in frames.items():
        if not isinstance(df, pd.DataFrame):
            raise ValueError(
                f"analyze returned {type(df).__name__} for method {name!r} in rep {rep}; return a "
                "DataFrame indexed by estimand with columns estimate, ci_low, ci_high (se "
                "optional), or a dict of such DataFrames (one per method)."
            )
        missing = [c for c in _REQUIRED if c not in df.columns]
        if missing:
            raise ValueError(
                f"analyze's DataFrame for method {name!r} (rep {rep}) lacks columns {missing}."
            )
    return frames


def monte_carlo(
    sample: Callable[[np.random.Generator], Any],
    analyze: Callable[[Any, np.random.Generator], Any],
    truth: pd.Series | Mapping,
    reps: int,
    seed: int | np.random.Generator | None = None,
    progress: bool = True,
    store: str | Path | None = None,
) -> MonteCarloResult:
    """Run a repeated-sampling study.

    ``sample(rng)`` returns one sample (e.g. ``sdr_sample(pop, seed=rng)``); ``analyze(sample,
    rng)`` returns a DataFrame indexed by estimand with ``estimate, ci_low, ci_high`` (and
    ``se``), or a dict ``{method: DataFrame}`` to compare methods on the same samples.
    ``truth`` maps estimand -> true value (a Series with the same index). Each replicate gets
    its own child generator spawned from ``seed``, so results are reproducible and a
    replicate's randomness does not depend on the others. Estimands missing from a
    replicate's output count as missing (``reps`` says how many replicates scored them).

    ``store``: a folder; each finished replicate is written there at once
    (``rep_<r>.parquet``, written to a temporary name and renamed, so a kill leaves no partial
    file), and replicates already there are read instead of rerun. With the same ``seed`` an
    interrupted study resumed this way gives the same results as one uninterrupted run (each
    replicate's generator depends only on the seed and its index). Long studies (R = 100) run
    in the background this way and survive interruptions.
    """
    if not isinstance(reps, (int, np.integer)) or reps < 1:
        raise ValueError(f"reps must be a positive integer, got {reps!r}.")
    truth = pd.Series(truth, dtype=float)
    if truth.index.has_duplicates:
        raise ValueError("truth has duplicated estimand labels; give each estimand once.")
    root = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    children = root.spawn(int(reps)) if hasattr(root, "spawn") else [
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(int(reps))]
    import time

    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    rows = []
    folder = None if store is None else Path(store)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    for r, rng in enumerate(tqdm(children, desc="Monte Carlo", disable=not progress)):
        done = None if folder is None else folder / f"rep_{r:05d}.parquet"
        if done is not None and done.exists():
            rows.append(pd.read_parquet(done))
            continue
        s = sample(rng)
        first = len(rows)
        for method, df in _as_frames(analyze(s, rng), r).items():
            unknown = df.index.difference(truth.index)
            if len(unknown):
                raise ValueError(
                    f"analyze returned estimands {list(unknown[:5])} (method {method!r}) that "
                    "are not in truth's index; align the labels."
                )
            part = df.reindex(truth.index)
            part = pd.DataFrame({
                "rep": r,
                "method": method,
                "estimand": truth.index,
                "estimate": part["estimate"].to_numpy(float),
                "se": part["se"].to_numpy(float) if "se" in part else np.nan,
                "ci_low": part["ci_low"].to_numpy(float),
                "ci_high": part["ci_high"].to_numpy(float),
                "truth": truth.to_numpy(float),
            })
            rows.append(part)
        if done is not None:
            tmp = done.with_suffix(".partial")
            pd.concat(rows[first:], ignore_index=True).to_parquet(tmp, index=False)
            os.replace(tmp, done)
    reps_df = pd.concat(rows, ignore_index=True)
    ok = reps_df["estimate"].notna()
    reps_df["covered"] = np.where(
        ok, (reps_df["ci_low"] <= reps_df["truth"]) & (reps_df["truth"] <= reps_df["ci_high"]),
        np.nan)
    reps_df["ci_length"] = reps_df["ci_high"] - reps_df["ci_low"]
    reps_df["cv"] = reps_df["se"] / reps_df["estimate"]
    reps_df["error"] = reps_df["estimate"] - reps_df["truth"]
    reps_df["sq_error"] = reps_df["error"] ** 2
    g = reps_df.groupby(["estimand", "method"], sort=False)
    summary = pd.DataFrame({
        "truth": g["truth"].first(),
        "coverage": g["covered"].mean(),
        "avg_ci_length": g["ci_length"].mean(),
        "mean_cv": g["cv"].mean(),
        "bias": g["error"].mean(),
        "rmse": np.sqrt(g["sq_error"].mean()),
        "reps": g["estimate"].count(),
    })
    summary["coverage_mc_se"] = np.sqrt(
        summary["coverage"] * (1 - summary["coverage"]) / summary["reps"].clip(lower=1))
    summary = summary.reindex(
        pd.MultiIndex.from_product([truth.index, reps_df["method"].unique()],
                                   names=["estimand", "method"]))
    return MonteCarloResult(reps_df, summary, time.perf_counter() - t0)
