"""Coverage of DP survey tables over repeated samples of the SDR-like population (issue 40).

One population (``sdr_population(seed=2021)``, as vignettes/sdr_monte_carlo.py) and R stratified
PPS samples of n = 1,000 (``sdr_sample``). In every sample :func:`surveysynth.dp_tables.dp_tabulate`
publishes the mean salary by field x gender with every margin (which publishes the consistent
weighted counts and salary totals it is computed from), at each budget of ``BUDGETS``. Each
cell's interval (sampling plus noise, t with G - 1 df) is scored against the population value
(counts N_fg, totals, mean salaries; margins included); every sample checks that the published
margins equal the sums of their cells.

Resumable: each finished sample is written to ``--store`` (``surveysynth.simulate.monte_carlo``),
and a rerun reads what is there. ``--fast`` runs a few samples (the default-tier test runs it).

Usage:
    python vignettes/dp_tables_coverage.py --reps 200 --store .mc/dp_tables   # run / resume
    python vignettes/dp_tables_coverage.py --fast                             # smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from surveysynth.datasets import sdr_population, sdr_sample  # noqa: E402
from surveysynth.dp_tables import dp_tabulate  # noqa: E402
from surveysynth.simulate import monte_carlo  # noqa: E402

#: (label, measure, budget); public settings of every release
BUDGETS = (("pure eps=10", "pure", 10.0), ("pure eps=50", "pure", 50.0), ("zcdp rho=50", "zcdp", 50.0))
SETTINGS = dict(bounds=(0.0, 500_000.0), weight_cap=1000.0, groups=10, count_share=0.3)
LEVELS = {"field": list(range(1, 9)), "gender": ["female", "male"]}
KINDS = ("count", "total", "mean")


def truth(pop: pd.DataFrame) -> pd.Series:
    """Population counts, totals and means of every cell and margin, keyed like :func:`keys`."""
    out = {}
    for f in LEVELS["field"] + ["All"]:
        for g in LEVELS["gender"] + ["All"]:
            sel = np.ones(len(pop), bool)
            if f != "All":
                sel &= pop["field"].to_numpy() == f
            if g != "All":
                sel &= pop["gender"].to_numpy() == g
            y = pop["salary"].to_numpy()[sel]
            out[f"count {f}/{g}"] = float(sel.sum())
            out[f"total {f}/{g}"] = float(y.sum())
            out[f"mean {f}/{g}"] = float(y.mean())
    return pd.Series(out)


def keys(long: pd.DataFrame, kind: str) -> list[str]:
    return [f"{kind} {f}/{g}" for f, g in zip(long["field"], long["gender"], strict=True)]


def check_margins(t: pd.DataFrame) -> float:
    """Largest relative gap between a margin and the sum of its cells (must be ~0)."""
    inner = t[t["cell"] == "interior"]
    worst = 0.0
    for _, row in t[t["cell"] != "interior"].iterrows():
        sel = np.ones(len(inner), bool)
        for v in ("field", "gender"):
            if row[v] != "All":
                sel &= (inner[v] == row[v]).to_numpy()
        s = inner.loc[sel, "estimate"].sum()
        worst = max(worst, abs(s - row["estimate"]) / max(abs(row["estimate"]), 1.0))
    return worst


def analyze(design, rng) -> dict[str, pd.DataFrame]:
    out = {}
    for label, measure, b in BUDGETS:
        kw = {"epsilon": b} if measure == "pure" else {"rho": b}
        r = dp_tabulate(design, ["field", "gender"], "salary", "mean", measure=measure,
                        levels=LEVELS, seed=rng, **SETTINGS, **kw)
        parts = []
        for kind, tab in (("count", r.counts), ("total", r.totals), ("mean", r.table)):
            long = tab.long
            if kind != "mean":
                gap = check_margins(long)
                if gap > 1e-9:
                    raise AssertionError(f"{label}: {kind} margins differ from the sums of their "
                                         f"cells (relative gap {gap:.3g})")
            parts.append(pd.DataFrame({"estimate": long["estimate"].to_numpy(float),
                                       "se": long["se"].to_numpy(float),
                                       "ci_low": long["ci_low"].to_numpy(float),
                                       "ci_high": long["ci_high"].to_numpy(float)},
                                      index=keys(long, kind)))
        out[label] = pd.concat(parts)
    # the confidential sample's own design-based (Taylor) intervals, no noise: the baseline
    import surveysynth as ss

    parts = []
    for kind, kw in (("count", {}), ("total", {"value": "salary", "stat": "total"}),
                     ("mean", {"value": "salary", "stat": "mean"})):
        long = ss.tabulate(design, rows="field", cols="gender", **kw).long
        parts.append(pd.DataFrame({c: long[c].to_numpy(float) for c in
                                   ("estimate", "se", "ci_low", "ci_high")},
                                  index=keys(long, kind)))
    out["no noise (Taylor, confidential)"] = pd.concat(parts)
    return out


def run(reps: int, seed: int, store: Path | None, progress: bool):
    pop = sdr_population(seed=seed)
    return monte_carlo(lambda rng: sdr_sample(pop, n=1000, seed=rng), analyze, truth(pop),
                       reps=reps, seed=seed + 40, progress=progress, store=store)


def summarize(mc) -> pd.DataFrame:
    """Coverage by method x kind x cell type (interior / margin), with its MC SE, and the
    share of cells whose coverage is within 2 MC SEs of the nominal 0.95."""
    s = mc.summary.reset_index()
    s["kind"] = s["estimand"].str.split(" ").str[0]
    s["type"] = np.where(s["estimand"].str.contains("All"), "margin", "cell")
    rows = []
    for (method, kind, typ), g in s.groupby(["method", "kind", "type"], sort=False):
        cov = g["coverage"]
        reps = g["reps"]
        se = np.sqrt(0.95 * 0.05 / reps.clip(lower=1))
        rows.append({"method": method, "kind": kind, "cells": typ, "n": len(g),
                     "mean coverage": cov.mean(), "min": cov.min(), "max": cov.max(),
                     "within 2 MC SE of 0.95": float(np.mean(np.abs(cov - 0.95) <= 2 * se)),
                     "reps": int(reps.min())})
    return pd.DataFrame(rows)


def audit_runner(epsilon: float = 1.0, mutant: str | None = None):
    """(data, seed) -> (released grand total, NaN, claimed epsilon) for the package's auditor:
    records with a negative value are absent (replace-one arrays encode add/remove-one
    neighbours); the added record (value 1) carries the cap weight 10, the others weight 1.
    ``mutant="mean weight"``: the sensitivity from the mean weight instead of the cap."""
    import surveysynth as ss
    from surveysynth import dp_tables as dpt

    def run(data, seed):
        x = np.asarray(data, float)
        x = x[x >= 0]
        w = np.where(x == 1.0, 10.0, 1.0)
        d = ss.SurveyDesign(pd.DataFrame({"c": "a", "y": x, "w": w}), weights="w")
        real = dpt.table_sensitivity
        if mutant == "mean weight":
            dpt.table_sensitivity = lambda kind, cap, bounds: float(w.mean()) * (
                1.0 if kind == "count" else max(abs(bounds[0]), abs(bounds[1])))
        try:
            r = dpt.dp_tabulate(d, ["c"], "y", "total", epsilon=epsilon, bounds=(0, 1),
                                weight_cap=10.0, groups=2, margins=False, seed=seed)
        finally:
            dpt.table_sensitivity = real
        return r.table.long["estimate_linear"].to_numpy(), np.nan, r.privacy.epsilon
    run.__name__ = f"dp_tables total{' (' + mutant + ' mutant)' if mutant else ''}"
    return run


def run_audit(runs: int) -> list[str]:
    """The neighbour-pair audit (surveysynth.audit) of the mechanism and of a mutant."""
    from surveysynth.audit import audit_mechanism

    d_in, d_out = [0.5] * 10 + [-1.0], [0.5] * 10 + [1.0]
    return [audit_mechanism(audit_runner(mutant=m), d_in, d_out, runs=runs, seed=40).summary()
            for m in (None, "mean weight")]


def md(df: pd.DataFrame, digits: int = 3) -> str:
    """A markdown table (no optional dependency)."""
    def fmt(x):
        if isinstance(x, (float, np.floating)):
            return f"{x:.{digits}g}" if abs(x) >= 1000 else f"{x:.{digits}f}"
        return str(x)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |",
             "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2021)
    ap.add_argument("--store", default=str(HERE.parent / ".mc" / "dp_tables"))
    ap.add_argument("--fast", action="store_true", help="3 samples, no store (smoke)")
    ap.add_argument("--out", default=None, help="write the summary (markdown) here")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--audit", type=int, default=0, metavar="RUNS",
                    help="run the neighbour-pair audit with RUNS per side instead")
    args = ap.parse_args(argv)
    if args.audit:
        text = "\n".join(run_audit(args.audit))
        print(text)
        return text
    store = None if args.fast else Path(args.store)
    reps = 3 if args.fast else args.reps
    if store is not None:
        store.mkdir(parents=True, exist_ok=True)
        (store / "config.json").write_text(json.dumps(
            {"seed": args.seed, "budgets": BUDGETS, "settings": SETTINGS}, default=str))
    t0 = time.perf_counter()
    mc = run(reps, args.seed, store, not args.quiet)
    summ = summarize(mc)
    if args.out:
        per_cell = mc.summary.reset_index()
        text = ["# DP tables: coverage over repeated SDR-like samples", "",
                f"{reps} samples of n = 1,000, population seed {args.seed}; settings "
                f"{SETTINGS}; budgets {[b[0] for b in BUDGETS]}; margins equal the sums of their "
                f"cells in every sample (checked). Run time {time.perf_counter() - t0:.0f} s.", "",
                md(summ), "",
                "## Every cell", "",
                md(per_cell[["estimand", "method", "truth", "coverage", "coverage_mc_se",
                             "avg_ci_length", "bias", "rmse", "reps"]]), ""]
        Path(args.out).write_text("\n".join(text))
    if not args.quiet:
        print(summ.to_string(index=False))
    return summ


if __name__ == "__main__":
    main()
