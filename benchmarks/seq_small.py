"""Where a small Sequential release spends its fits (issue 39 item 4): R's apiclus2 (126
records, clustered: PSU random intercepts) and apistrat (200 records, unclustered), the same 8
variables of 4 types, target epsilon 40, m = 5, the default MCMC (4 chains x 1000 draws after
1000 warm-up).

The cost of a fit is measured by its sampler diagnostics, not by seconds (the machine is
shared): leapfrog steps over the sampling draws of all chains (warm-up is not saved by pystan;
it runs at the same or larger tree depths, so the sampling total is a lower bound on its cost
per iteration), tree-depth hits, step size, divergences; and the count of fits per step. The
Python side (bound evaluation, encoding) is profiled with cProfile as a share of the fit.

    python benchmarks/seq_small.py apiclus2 --seed 1 --out /tmp/prof_apiclus2.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from surveysynth.datasets import load_api  # noqa: E402
from surveysynth.design import SurveyDesign  # noqa: E402
from surveysynth.synth import fitting as fitmod  # noqa: E402
from surveysynth.synth import sequential as seqmod  # noqa: E402

#: 8 variables of 4 types (binary, bounded, count, positive), none with missing values in
#: apiclus2 or apistrat; stype public (3 levels)
VARIABLES = [
    {"name": "sch.wide", "type": "binary"},
    {"name": "awards", "type": "binary"},
    {"name": "meals", "type": "count", "bounds": (0, 100)},
    {"name": "ell", "type": "count", "bounds": (0, 100)},
    {"name": "avg.ed", "type": "bounded", "bounds": (1, 5)},
    {"name": "api99", "type": "bounded", "bounds": (200, 1000)},
    {"name": "api00", "type": "bounded", "bounds": (200, 1000)},
    {"name": "api.stu", "type": "positive"},
]


def design(name: str) -> SurveyDesign:
    d = load_api(name)
    if name == "apiclus2":
        return SurveyDesign(d, ids="~dnum+snum", weights="pw", fpc="~fpc1+fpc2")
    return SurveyDesign(d, strata="stype", weights="pw", fpc="fpc")


def run(name: str, seed: int, chains: int, draws: int, warmup: int,
        tuning: str | None = None) -> dict:
    fits: list[dict] = []
    orig = fitmod.run_stan     # every Stan run of a step goes through synth/fitting.run_fit

    def logged(program, data, **kw):
        res = orig(program, data, **kw)
        smp = res.sampler
        nl = np.asarray(smp["n_leapfrog__"])
        td = np.asarray(smp["treedepth__"])
        fits.append({"label": kw.get("label"), "rows": int(data.get("n", 0)),
                     "leapfrog": int(nl.sum()), "mean_leapfrog": float(nl.mean()),
                     "max_treedepth": int(td.max()),
                     "treedepth_hits": res.summary["treedepth_hits"],
                     "stepsize": res.summary["mean_stepsize"],
                     "divergences": res.summary["divergences"],
                     "max_rhat": res.summary["max_rhat"],
                     "min_ess_bulk": res.summary["min_ess_bulk"],
                     "warmup": kw.get("warmup"), "seconds": res.summary["seconds_sample"]})
        print(json.dumps(fits[-1]), flush=True)
        return res

    fitmod.run_stan = logged
    syn = seqmod.Sequential(variables=VARIABLES, public=["stype"], m=5, target_epsilon=40.0,
                            chains=chains, draws=draws, warmup=warmup, random_state=seed,
                            progress=False, allow_unconverged=True,
                            **({"tuning": tuning} if tuning else {}))
    des = design(name)
    load0 = os.getloadavg()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof.enable()
        syn.fit(des)
        prof.disable()
    wall = time.perf_counter() - t0
    st = pstats.Stats(prof)
    cum = {f"{k[2]}": v[3] for k, v in st.stats.items()
           if k[2] in ("run_stan", "logged", "bounds_of", "chain_maxima", "_encode_step",
                       "_build_steps", "stan_data", "last_inits")}
    rel = syn.release()
    summ = syn.summary()
    conf = des.data
    w = conf["pw"].to_numpy(float)
    means = {}
    for v in VARIABLES:
        c = v["name"]
        col = conf[c]
        x = (col.astype(str) == col.astype(str).iloc[0]).astype(float) if v["type"] == "binary" \
            else col.astype(float)
        syn_means = []
        for d in rel.designs:
            sc = d.data[c]
            sx = (sc.astype(str) == col.astype(str).iloc[0]).astype(float) \
                if v["type"] == "binary" else sc.astype(float)
            syn_means.append(float(np.average(sx, weights=d.data["pw"].to_numpy(float))))
        means[c] = {"conf": float(np.average(x, weights=w)), "syn": syn_means}
    out = {"dataset": name, "seed": seed, "wall": wall, "load_start": load0,
           "load_end": os.getloadavg(), "fits": fits, "python_cum": cum,
           "delta_alpha": float(syn.delta_alpha_), "epsilon": 2 * 5 * float(syn.delta_alpha_),
           "convergence": syn.convergence_,
           "steps": summ.to_dict(orient="records"), "means": means}
    return out


def table(log_lines: list[str]) -> str:
    """Markdown table per step from the per-fit JSON lines this script prints."""
    import re
    rows: dict[str, list[dict]] = {}
    for ln in log_lines:
        if ln.startswith("{"):
            d = json.loads(ln)
            step = re.sub(r"^Sequential (.*?) (unweighted|weighted|final).*$", r"\1", d["label"])
            rows.setdefault(step, []).append(d)
    out = ["| step | rows in Stan | fits | sampling leapfrog per fit (unweighted; weighted mean) "
           "| total sampling leapfrog | max tree depth | depth-10 hits | step size | divergent "
           "| max R-hat | s per 1k leapfrog |", "|" + "---|" * 11]
    tot = 0
    for step, fs in rows.items():
        lf = [f["leapfrog"] for f in fs]
        tot += sum(lf)
        w = lf[1:] or [0]
        out.append(f"| {step} | {fs[0]['rows']} | {len(fs)} | {lf[0]}; {np.mean(w):.0f} | {sum(lf)} "
                   f"| {max(f['max_treedepth'] for f in fs)} | {sum(f['treedepth_hits'] for f in fs)} "
                   f"| {min(f['stepsize'] for f in fs):.3f}-{max(f['stepsize'] for f in fs):.3f} "
                   f"| {sum(f['divergences'] for f in fs)} | {max(f['max_rhat'] for f in fs):.4f} "
                   f"| {1e3 * sum(f['seconds'] for f in fs) / sum(lf):.3f} |")
    nf = sum(len(f) for f in rows.values())
    out.append(f"| **all** | | **{nf}** | | **{tot}** | | | | | | |")
    return "\n".join(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", choices=["apiclus2", "apistrat"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--out")
    ap.add_argument("--tuning", default=None, help="Sequential's tuning (default: its own)")
    ap.add_argument("--table", help="print the per-step table of a log of this script")
    a = ap.parse_args()
    if a.table:
        print(table(Path(a.table).read_text().splitlines()))
        sys.exit(0)
    res = run(a.dataset, a.seed, a.chains, a.draws, a.warmup, a.tuning)
    Path(a.out).write_text(json.dumps(res, indent=1, default=str))

