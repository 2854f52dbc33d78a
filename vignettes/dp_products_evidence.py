"""Side-by-side evidence for the DP products (issue 40, item 4).

Run:
    python vignettes/dp_products_evidence.py --fast                    # smoke (the test runs it)
    nice -n 10 python vignettes/dp_products_evidence.py --reps 200     # full (resumable stores)
    python vignettes/dp_products_evidence.py --microdata DIR           # part (b) from a
                                                                       # public_use_agency run

**(a) Tables.** Repeated samples from two populations; in every sample, at each matched budget
(:data:`BUDGETS`), the same cells are published by

* ``DP pure``: :func:`surveysynth.dp_tabulate`, pure epsilon-DP (global sensitivity from a
  public weight cap and public value bounds, add/remove-one neighbours);
* ``DP zCDP``: the same under rho-zCDP, with rho chosen so that its (epsilon, delta)
  implication at delta = :data:`ZCDP_DELTA` equals the budget's epsilon (Bun & Steinke 2016;
  a weaker guarantee than pure epsilon-DP at the same epsilon);
* ``Laplace``: the local-sensitivity baseline (``surveysynth.privacy.laplace_tables``, seed 001
  Section 2.5) at the same nominal epsilon; not differentially private (its noise scale
  depends on the data);
* ``FBS`` / ``FBP``: the risk-weighted pseudo posterior synthesizers tuned to Delta_alpha and
  released with m sets, epsilon = 2 Delta_alpha m: an asymptotic, database-local guarantee
  with risk weights that are not privatized (docs/privacy.md);
* ``Sample``: the confidential sample's own design-based (Taylor) interval, no noise (the
  reference; not publishable).

Populations and cells:

* **SDR**: ``sdr_population(seed=2021)``, stratified PPS samples of n = 1,000 drawn exactly as
  ``vignettes/sdr_monte_carlo.py`` draws them (same seed, same generator calls), so the first
  100 samples are those of its stored FBS/FBP study; counts and mean salary by field x gender
  with every margin (the 27 rows of seed 001 Tables 2-5). FBS/FBP are *not refitted* here:
  their rows are read from that study's stored summaries (``vignettes/output/
  sdr_monte_carlo*_summary.csv``: 24 cells, the margins of Tables 8-9, over its samples) and the
  script checks that its own ``Sample`` rows on the first 100 samples equal that study's.
* **apistrat**: population R's ``apipop`` (N = 6,194), stratified SRS by school type with
  apistrat's sizes (100 / 50 / 50, fpc), counts and mean api00 by school type x awards with
  every margin. FBS/FBP are fitted on the first ``--fbs-reps`` samples (short chains).

Measures per cell over the samples: RMSE to the population value, coverage of the 95%
interval (sampling plus noise), mean interval length; summaries over cells in relative terms
(RMSE / truth, length / truth) so that large and small cells weigh alike.

**(b) Microdata** (``--microdata DIR``): the public-use agency study
(``vignettes/public_use_agency.py``; AIM and MST from the package at the Sequential release's
total epsilon, CART without privacy) is run with ``--out DIR``; this script reads its
``public_use_agency.json`` and writes the utility table with each method's guarantee.

Writes (full mode) ``vignettes/output/dp_products_evidence_tables.csv`` (summary by population,
budget, method, kind), ``..._cells.csv`` (every cell) and ``..._microdata.csv``; ``--fast``
writes to ``--out`` (a temporary folder in the test).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from dp_tables_coverage import LEVELS as SDR_LEVELS  # noqa: E402
from dp_tables_coverage import SETTINGS as SDR_DP_SETTINGS  # noqa: E402

import surveysynth as ss  # noqa: E402
from surveysynth.combine import combine_sets  # noqa: E402
from surveysynth.datasets import load_api, sdr_population, sdr_sample  # noqa: E402
from surveysynth.dp_tables import dp_tabulate  # noqa: E402
from surveysynth.privacy import laplace_tables  # noqa: E402
from surveysynth.simulate import monte_carlo  # noqa: E402

#: (epsilon, Delta_alpha, m): epsilon = 2 Delta_alpha m, the two releases of the papers
#: (seed 000: Delta 1.8, m 3; seed 001: Delta 3.4, m 10); every method spends this epsilon
BUDGETS = ((10.8, 1.8, 3), (68.0, 3.4, 10))
#: the delta at which a zCDP release's (epsilon, delta) implication is matched to epsilon
ZCDP_DELTA = 1e-6
SDR_SEED = 2021
#: sdr_monte_carlo.run draws its samples with monte_carlo(seed=seed + 30)
SDR_MC_SEED = SDR_SEED + 30
API_SEED = 4040
API_SIZES = {"E": 100, "H": 50, "M": 50}
API_LEVELS = {"stype": ["E", "H", "M"], "awards": ["No", "Yes"]}
#: public: the largest weight the design can give is N_E / n_E = 4421 / 100 = 44.21
API_DP_SETTINGS = dict(bounds=(200.0, 1000.0), weight_cap=50.0, groups=10, count_share=0.3)
#: the stored FBS/FBP summaries of vignettes/sdr_monte_carlo.py, by Delta
SDR_FBS_CSV = {1.8: HERE / "output" / "sdr_monte_carlo_D1.8_main_summary.csv",
               3.4: HERE / "output" / "sdr_monte_carlo_summary.csv"}
KINDS = ("count", "mean")


def matched_rho(epsilon: float, delta: float = ZCDP_DELTA) -> float:
    """The rho whose zCDP implies (epsilon, delta)-DP: rho + 2 sqrt(rho log(1/delta)) = epsilon
    (Bun & Steinke 2016, Prop. 1.3), solved for rho."""
    L = np.log(1.0 / delta)
    return float((np.sqrt(L + epsilon) - np.sqrt(L)) ** 2)


# ------------------------------------------------------------------------------ populations

def population_truth(pop: pd.DataFrame, rows: str, cols: str, value: str,
                     levels: dict) -> pd.Series:
    """Population count and mean of ``value`` for every cell and margin, keyed
    ``"<kind> <row>/<col>"`` (margins "All")."""
    out = {}
    for r in [*levels[rows], "All"]:
        for c in [*levels[cols], "All"]:
            sel = np.ones(len(pop), bool)
            if r != "All":
                sel &= (pop[rows] == r).to_numpy()
            if c != "All":
                sel &= (pop[cols] == c).to_numpy()
            out[f"count {r}/{c}"] = float(sel.sum())
            out[f"mean {r}/{c}"] = float(pop[value].to_numpy(float)[sel].mean())
    return pd.Series(out)


def sdr_study() -> dict:
    pop = sdr_population(seed=SDR_SEED)

    def sample(rng):
        # exactly sdr_monte_carlo.run's generator calls, so sample r is its sample r
        int(rng.integers(0, 2**62))
        return sdr_sample(pop, n=1000, seed=rng)

    return {"name": "SDR", "rows": "field", "cols": "gender", "value": "salary",
            "levels": SDR_LEVELS, "dp": SDR_DP_SETTINGS, "sample": sample,
            "seed": SDR_MC_SEED, "population_size": len(pop),
            "truth": population_truth(pop, "field", "gender", "salary", SDR_LEVELS)}


def api_population() -> pd.DataFrame:
    pop = load_api("apipop")[["stype", "awards", "api00"]].copy()
    for c in ("stype", "awards"):
        pop[c] = pop[c].astype(str)
    return pop


def api_sample(pop: pd.DataFrame, rng: np.random.Generator) -> ss.SurveyDesign:
    """Stratified SRS without replacement by school type with apistrat's sizes (fpc N_h)."""
    parts = []
    for h, n_h in API_SIZES.items():
        idx = np.flatnonzero((pop["stype"] == h).to_numpy())
        take = rng.choice(idx, size=n_h, replace=False)
        part = pop.iloc[np.sort(take)].copy()
        part["fpc"] = float(len(idx))
        part["pw"] = len(idx) / n_h
        parts.append(part)
    data = pd.concat(parts, ignore_index=True)
    return ss.SurveyDesign(data, strata="stype", fpc="fpc", weights="pw")


def api_study() -> dict:
    pop = api_population()
    return {"name": "apistrat", "rows": "stype", "cols": "awards", "value": "api00",
            "levels": API_LEVELS, "dp": API_DP_SETTINGS,
            "sample": lambda rng: api_sample(pop, rng), "seed": API_SEED,
            "population_size": len(pop), "laplace": False,
            "truth": population_truth(pop, "stype", "awards", "api00", API_LEVELS)}


# ------------------------------------------------------------------------------ methods

def frame(long: pd.DataFrame, kind: str, rows: str, cols: str) -> pd.DataFrame:
    """A table's long form -> estimate, se, ci_low, ci_high indexed like the truth."""
    idx = [f"{kind} {r}/{c}" for r, c in zip(long[rows], long[cols], strict=True)]
    return pd.DataFrame({k: long[k].to_numpy(float) for k in ("estimate", "se", "ci_low",
                                                               "ci_high")}, index=idx)


def table_methods(study: dict, budgets=BUDGETS):
    """analyze(design, rng) for monte_carlo: Sample, and per budget DP pure, DP zCDP and the
    Laplace baseline, each a frame of count and mean rows. The Laplace baseline is left out
    where ``study["laplace"]`` is False: on apistrat every cell's weights are constant (a
    stratified SRS, cells within strata), its local count sensitivity is 0 and
    ``laplace_tables`` refuses to publish (it would publish the counts exactly)."""
    laplace = study.get("laplace", True)
    rows, cols, value, levels = study["rows"], study["cols"], study["value"], study["levels"]

    def both(counts, means):
        return pd.concat([frame(counts.long, "count", rows, cols),
                          frame(means.long, "mean", rows, cols)])

    def analyze(design, rng):
        out = {"Sample": both(ss.tabulate(design, rows=rows, cols=cols),
                              ss.tabulate(design, rows=rows, cols=cols, value=value,
                                          stat="mean"))}
        for eps, _, _ in budgets:
            for label, kw in ((f"DP pure eps={eps:g}", {"measure": "pure", "epsilon": eps}),
                              (f"DP zCDP eps={eps:g}",
                               {"measure": "zcdp", "rho": matched_rho(eps)})):
                r = dp_tabulate(design, [rows, cols], value, "mean", levels=levels, seed=rng,
                                **study["dp"], **kw)
                out[label] = both(r.counts, r.table)
            if laplace:
                lap = laplace_tables(design, rows=rows, cols=cols, value=value, epsilon=eps,
                                     seed=rng)
                out[f"Laplace eps={eps:g}"] = both(lap.counts, lap.means)
        return out

    return analyze


def fbs_methods(study: dict, cfg: dict, budgets=BUDGETS):
    """analyze(design, rng): FBS and FBP tuned to each budget's Delta_alpha, m sets combined by
    the partial-synthesis rule (as vignettes/sdr_monte_carlo.py does). A sample on which the
    package refuses the target is scored as missing for that method."""
    from surveysynth.synth import FBP, FBS
    from surveysynth.synth.pseudo_posterior import TargetUnreachableError

    rows, cols, value = study["rows"], study["cols"], study["value"]

    def per_set(d):
        c = frame(ss.tabulate(d, rows=rows, cols=cols).long, "count", rows, cols)
        mn = frame(ss.tabulate(d, rows=rows, cols=cols, value=value, stat="mean").long,
                   "mean", rows, cols)
        f = pd.concat([c, mn])
        return f["estimate"].to_numpy(float), f["se"].to_numpy(float) ** 2, f.index

    def analyze(design, rng):
        out = {}
        for eps, delta, m in budgets:
            for cls in (FBS, FBP):
                seed = int(rng.integers(1, 2**31 - 1))
                syn = cls(value, [rows, cols], population_size=study["population_size"],
                          chains=cfg["chains"], draws=cfg["draws"], warmup=cfg["draws"],
                          tol=0.10, progress=False, target_lipschitz=delta, m=m,
                          random_state=seed, convergence={"ess_bulk": 50, "rhat": 1.1},
                          allow_unconverged=True)
                try:
                    rel = syn.fit(design).release()
                except TargetUnreachableError:
                    continue
                per = [per_set(d) for d in rel.designs]
                comb = combine_sets(np.array([p[0] for p in per]), np.array([p[1] for p in per]),
                                    kind=rel.kind, n_syn=rel.n_syn, n_original=rel.n_original)
                out[f"{cls.__name__} eps={eps:g}"] = pd.DataFrame(
                    {k: comb[k].to_numpy(float) for k in ("estimate", "se", "ci_low", "ci_high")},
                    index=per[0][2])
        return out

    return analyze


# ------------------------------------------------------------------------------ summaries

def cell_table(mc, study: str) -> pd.DataFrame:
    """Every cell: truth, RMSE, coverage (and its MC SE), mean CI length, samples scored."""
    s = mc.summary.reset_index()
    s.insert(0, "population", study)
    s["kind"] = s["estimand"].str.split(" ").str[0]
    s["margin"] = s["estimand"].str.contains("All")
    # a cell the design fixes (apistrat's stratum counts: sum of N_h / n_h over the stratum
    # is N_h in every sample) has no sampling error; a zero-length interval (the Sample's, or
    # a synthesizer's that leaves the weights as collected) is not scored (it covers or not
    # by rounding)
    fixed = s["rmse"] <= 1e-9 * s["truth"].abs()
    s.loc[fixed, ["coverage", "coverage_mc_se", "avg_ci_length"]] = np.nan
    return s[["population", "method", "estimand", "kind", "margin", "truth", "rmse",
              "coverage", "coverage_mc_se", "avg_ci_length", "bias", "reps"]]


def method_meta(method: str) -> tuple[str, float]:
    """(method family, epsilon) from a method label like 'DP pure eps=10.8'."""
    if "eps=" in method:
        fam, eps = method.split(" eps=")
        return fam, float(eps)
    m = method.split(" ")
    if len(m) == 3 and m[1].startswith("D") and m[2].startswith("m"):   # 'FBS D1.8 m3'
        return m[0], 2 * float(m[1][1:]) * int(m[2][1:])
    return method, np.nan


GUARANTEE = {
    "Sample": "none (confidential, not publishable)",
    "DP pure": "pure eps-DP, global sensitivity, add/remove-one",
    "DP zCDP": f"rho-zCDP, implies (eps, {ZCDP_DELTA:g})-DP, add/remove-one",
    "Laplace": "none: local (data-dependent) sensitivity, nominal eps",
    "FBS": "asymptotic database-local pDP, risk weights not privatized",
    "FBP": "asymptotic database-local pDP, risk weights not privatized",
}


def summarize(cells: pd.DataFrame, only_cells: list[str] | None = None) -> pd.DataFrame:
    """By population x method x kind: mean (and median) relative RMSE, mean coverage (and min), share of
    cells within 2 MC SE of 0.95, mean relative CI length, over the cells scored."""
    c = cells if only_cells is None else cells[cells["estimand"].isin(only_cells)]
    rows = []
    for (pop, method, kind), g in c.groupby(["population", "method", "kind"], sort=False):
        fam, eps = method_meta(method)
        se = np.sqrt(0.95 * 0.05 / g["reps"].clip(lower=1))
        scored = g["coverage"].notna()
        rows.append({"population": pop, "epsilon": eps, "method": fam, "kind": kind,
                     "cells": len(g), "samples": int(g["reps"].min()),
                     "rel_rmse": float((g["rmse"] / g["truth"]).mean()),
                     "rel_rmse_median": float((g["rmse"] / g["truth"]).median()),
                     "coverage": float(g["coverage"].mean()),
                     "coverage_min": float(g["coverage"].min()),
                     "within_2se": float(np.mean((np.abs(g["coverage"] - 0.95)
                                                  <= 2 * se)[scored])),
                     "rel_ci_length": float((g["avg_ci_length"] / g["truth"]).mean()),
                     "rel_ci_length_median": float((g["avg_ci_length"] / g["truth"]).median()),
                     "guarantee": GUARANTEE.get(fam, "")})
    out = pd.DataFrame(rows)
    return out.sort_values(["population", "kind", "epsilon", "method"], na_position="first",
                           kind="stable").reset_index(drop=True)


def stored_sdr_fbs(budgets=BUDGETS) -> pd.DataFrame:
    """FBS/FBP rows of the stored sdr_monte_carlo summaries at each budget's (Delta, m), in
    :func:`cell_table`'s shape (labels 'FBS eps=...'), plus that study's Sample rows."""
    parts = []
    for eps, delta, m in budgets:
        s = pd.read_csv(SDR_FBS_CSV[delta])
        keep = s[s["method"].isin([f"FBS D{delta:g} m{m}", f"FBP D{delta:g} m{m}"])].copy()
        keep["method"] = keep["method"].str.split(" ").str[0] + f" eps={eps:g}"
        parts.append(keep)
    s = pd.concat(parts, ignore_index=True)
    s.insert(0, "population", "SDR")
    s["kind"] = s["estimand"].str.split(" ").str[0]
    s["margin"] = s["estimand"].str.contains("All")
    return s[["population", "method", "estimand", "kind", "margin", "truth", "rmse",
              "coverage", "coverage_mc_se", "avg_ci_length", "bias", "reps"]]


def check_same_samples(mc, reps: int = 100) -> float:
    """Largest relative difference between the RMSE of this study's ``Sample`` estimates on
    its first ``reps`` samples and sdr_monte_carlo's stored Sample RMSE (0 when the samples are
    the same ones; NaN when fewer samples were run). Only the estimates are compared: that
    study's Sample interval is normal (1.96 SE), the table's uses t quantiles."""
    stored = pd.read_csv(SDR_FBS_CSV[3.4])
    stored = stored[stored["method"] == "Sample"].set_index("estimand")
    r = mc.replicates
    r = r[(r["method"] == "Sample") & (r["rep"] < reps)]
    if r["rep"].nunique() < reps or int(stored["reps"].min()) != reps:
        return float("nan")
    r = r[r["estimand"].isin(stored.index)]
    rmse = np.sqrt(((r["estimate"] - r["truth"]) ** 2).groupby(r["estimand"]).mean())
    return float(((rmse - stored.loc[rmse.index, "rmse"]) / stored.loc[rmse.index, "rmse"])
                 .abs().max())


def md(df: pd.DataFrame, digits: int = 3) -> str:
    def fmt(x):
        if isinstance(x, (float, np.floating)):
            if not np.isfinite(x):
                return "-"
            return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.{digits}g}"
        return str(x)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ microdata

def microdata(run_dirs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Part (b): the public-use agency study's utility rows with each method's guarantee and
    epsilon, read from the ``public_use_agency.json`` of each run folder (one row per run and
    method), and their mean and range over the runs by method."""
    rows = []
    keep = ["pMSE", "pMSE ratio", "k-marginal k=2", "k-marginal k=3", "CI overlap (mean)",
            "CI overlap (min)"]
    kinds = {"Sequential": "asymptotic database-local pDP (risk weights not privatized)",
             "AIM": "pure eps-DP (worst case), replace-one",
             "MST": "pure eps-DP (worst case), replace-one",
             "CART": "none (no privacy; the no-privacy reference)"}
    for run_dir in run_dirs:
        j = json.loads((Path(run_dir) / "public_use_agency.json").read_text())
        eps = float(j["epsilon"])
        for r in j["methods"]:
            m = r["method"]
            # 'AIM eps=1' rows: AIM/MST at a further budget (public_use_agency --dp-epsilons)
            e = np.nan if m == "CART" else float(m.split("eps=")[1]) if "eps=" in m else eps
            rows.append({"run": Path(run_dir).name, "method": m, "epsilon": e,
                         **{k: r.get(k, np.nan) for k in keep},
                         "guarantee": kinds.get(m.split(" ")[0], ""), "m": j.get("m"),
                         "sequential_mcmc": f"{j.get('chains')} chains x {j.get('draws')} draws"})
    per_run = pd.DataFrame(rows)
    g = per_run.groupby("method", sort=False)
    summ = g[["epsilon"]].first()
    summ["runs"] = g.size()
    for k in keep:
        summ[k] = g[k].mean()
        summ[f"{k} range"] = [f"{lo:.3g} to {hi:.3g}" for lo, hi in zip(g[k].min(), g[k].max(),
                                                                       strict=True)]
    summ["guarantee"] = g["guarantee"].first()
    return per_run, summ.reset_index()


# ------------------------------------------------------------------------------ report

def render(summ: pd.DataFrame, micro: pd.DataFrame | None, run: dict) -> str:
    """The markdown tables the docs' Evidence sections copy (numbers from the CSVs)."""
    cols = ["epsilon", "method", "cells", "samples", "rel_rmse", "rel_rmse_median", "coverage",
            "coverage_min", "within_2se", "rel_ci_length", "rel_ci_length_median"]
    text = ["# Evidence for the DP products (issue 40 item 4)", "",
            f"Generated by `{run['command']}` ({run['seconds']} s, reading the resumable "
            f"stores of earlier runs where they hold the samples); {run['reps']} samples per "
            f"population (FBS/FBP on apistrat: the first {run['fbs_reps']}; on SDR: read from "
            "the stored sdr_monte_carlo study). Numbers: "
            "`vignettes/output/dp_products_evidence_tables.csv` (summary), "
            "`..._cells.csv` (every cell).", "",
            "rel_rmse: mean over cells of RMSE / population value (rel_rmse_median: their "
            "median; a DP mean is a ratio of noisy totals and its error is heavy-tailed in "
            "small cells); coverage: mean over cells of "
            "the share of 95% intervals covering the population value (min: the lowest cell); "
            "within_2se: share of cells within 2 Monte Carlo SE of 0.95; rel_ci_length: mean "
            "interval length / population value (and its median over cells). samples: fewest "
            "samples with an estimate in a cell (a DP mean has none when its noisy count is "
            "0).", ""]
    for pop in summ["population"].unique():
        for kind in KINDS:
            g = summ[(summ["population"] == pop) & (summ["kind"] == kind)]
            if len(g):
                text += [f"## {pop}: {kind}s ({int(g['cells'].max())} cells)", "",
                         md(g[cols]), ""]
    if micro is not None:
        cols = ["method", "epsilon", "runs", "pMSE ratio", "pMSE ratio range", "k-marginal k=2",
                "k-marginal k=3", "CI overlap (mean)", "CI overlap (mean) range", "guarantee"]
        text += ["## Microdata: public-use study (apistrat)", "",
                 "Means over the runs of `vignettes/public_use_agency.py` (one row per method; "
                 "per run: `dp_products_evidence_microdata_runs.csv`).", "", md(micro[cols]), ""]
    return "\n".join(text)


# ------------------------------------------------------------------------------ main

def run_tables(reps: int, fbs_reps: int, store: Path | None, progress: bool,
               fbs_cfg: dict, budgets=BUDGETS, only: str | None = None) -> tuple:
    """Run (or read from ``store``) the repeated-sampling studies; ``only`` runs one part
    ("SDR", "apistrat", "fbs") so that parts can run as separate background processes."""
    cells, checks = [], {}
    sdr, api = sdr_study(), api_study()
    for study in (sdr, api):
        if only not in (None, study["name"]):
            continue
        n = reps
        sub = None if store is None else store / f"{study['name']}_tables"
        mc = monte_carlo(study["sample"], table_methods(study, budgets), study["truth"],
                         reps=n, seed=study["seed"], progress=progress, store=sub)
        cells.append(cell_table(mc, study["name"]))
        checks.setdefault("replicates", []).append(mc.replicates.assign(population=study["name"]))
        if study["name"] == "SDR":
            checks["sdr_mc"] = mc
    if fbs_reps and only in (None, "fbs"):
        sub = None if store is None else store / "apistrat_fbs"
        mc = monte_carlo(api["sample"], fbs_methods(api, fbs_cfg, budgets), api["truth"],
                         reps=fbs_reps, seed=api["seed"], progress=progress, store=sub)
        c = cell_table(mc, "apistrat")
        # FBS/FBP synthesize api00 only: school type, awards and the weights are released as
        # collected, so their counts are the confidential counts (no protection): not scored
        cells.append(c[c["kind"] != "count"])
        # the table products on the same first samples (their stored replicates, no rerun
        # when the store holds them), for a like-for-like comparison with FBS/FBP
        if store is not None:
            same = monte_carlo(api["sample"], table_methods(api, budgets), api["truth"],
                               reps=fbs_reps, seed=api["seed"], progress=False,
                               store=store / "apistrat_tables")
            label = f"apistrat (the {fbs_reps} samples with FBS/FBP)"
            cells.append(pd.concat([cell_table(same, label),
                                    c[c["kind"] != "count"].assign(population=label)]))
    return pd.concat(cells, ignore_index=True), checks


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fast", action="store_true",
                    help="3 samples per population, no FBS/FBP fits (the test runs it)")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--fbs-reps", type=int, default=None,
                    help="apistrat samples with FBS/FBP fits (default 20; fast 0)")
    ap.add_argument("--store", type=Path, default=HERE.parent / ".mc" / "dp_evidence")
    ap.add_argument("--out", type=Path, default=HERE / "output")
    ap.add_argument("--microdata", type=Path, nargs="+", default=None,
                    help="folders of public_use_agency.py runs (their --out) for part (b)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--only", choices=("SDR", "apistrat", "fbs"), default=None,
                    help="run one part into the store and stop (the background runs)")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    t0 = time.perf_counter()
    reps = 3 if a.fast else a.reps
    fbs_reps = (0 if a.fast else 20) if a.fbs_reps is None else a.fbs_reps
    store = None if a.fast else a.store
    fbs_cfg = {"chains": 2, "draws": 300}
    cells, checks = run_tables(reps, fbs_reps, store, not a.quiet, fbs_cfg, only=a.only)
    if a.only:
        return {"cells": cells}
    if not a.fast:
        cells = pd.concat([cells, stored_sdr_fbs()], ignore_index=True)
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    summ = summarize(cells)
    # the SDR comparison with the stored FBS/FBP study on its 24 cells (Tables 8-9's rows)
    sdr24 = [k for k in cells["estimand"].unique() if not k.split(" ")[1].startswith("All/")]
    summ24 = summarize(cells[cells["population"] == "SDR"], only_cells=sdr24)
    summ24["population"] = "SDR (24 cells of Tables 8-9)"
    summ = pd.concat([summ, summ24], ignore_index=True)
    cells.to_csv(out / "dp_products_evidence_cells.csv", index=False)
    summ.to_csv(out / "dp_products_evidence_tables.csv", index=False)
    same = check_same_samples(checks["sdr_mc"]) if "sdr_mc" in checks else float("nan")
    result = {"cells": cells, "summary": summ,
              "replicates": pd.concat(checks.get("replicates", []), ignore_index=True), "seconds": time.perf_counter() - t0,
              "reps": reps, "fbs_reps": fbs_reps}
    if a.microdata is not None:
        per_run, micro = microdata(a.microdata)
        per_run.to_csv(out / "dp_products_evidence_microdata_runs.csv", index=False)
        micro.to_csv(out / "dp_products_evidence_microdata.csv", index=False)
        result["microdata"] = micro
    run = {"command": "python vignettes/dp_products_evidence.py "
                      + " ".join(argv if argv is not None else sys.argv[1:]),
           "reps": reps, "fbs_reps": fbs_reps, "seconds": round(result["seconds"])}
    (out / "dp_products_evidence.md").write_text(render(summ, result.get("microdata"), run))
    (out / "dp_products_evidence_run.json").write_text(json.dumps(
        {"command": run["command"],
         "reps": reps, "fbs_reps": fbs_reps, "fbs_chains": fbs_cfg, "budgets": BUDGETS,
         "zcdp_delta": ZCDP_DELTA, "matched_rho": {str(e): matched_rho(e) for e, _, _ in
                                                    BUDGETS},
         "sdr_sample_check_max_abs_diff": same,
         "seconds": round(result["seconds"])}, indent=1))
    if not a.quiet:
        print(md(summ))
    return result


if __name__ == "__main__":
    main()
