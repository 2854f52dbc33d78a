"""One Sequential step's Stan fit, a baseline program against the checkout's, side by side in
one run (issue 39 item 2: cheaper exact fits where the rows cannot collapse).

A step of ``seq_scale.py``'s 20-variable file (its predictors: the weights' log and every earlier
variable, categorical ones as indicators, all standardised) is fitted unweighted with the
baseline commit's program and the checkout's, on the same data, from the same natural inits,
with the same seed, one after the other. What is compared: wall seconds, leapfrog steps per
iteration (the geometry), seconds per 1,000 gradients (the cost of one evaluation) and the
posterior means of the natural parameters (the same posterior: they must agree within Monte
Carlo error). Steps whose rows do not collapse (a continuous predictor) are the point: at
100,000 records they were the hours of the 100,000 x 20 attempt.

    python benchmarks/seq_programs.py --baseline 39ab3a3 --n 20000 --draws 300 \\
        --steps occupation:categorical educ:ordinal --json /tmp/programs.json

The baseline's program text comes from ``git show <ref>:surveysynth/synth/stan/<name>.stan``;
it is fed the checkout's data (extra keys are ignored by Stan) and inits in its own
coordinates (the categorical program before Q sampled (at, Bt)). ``--fast``: a small file and
short chains, for the suite (it checks that the harness runs, not the timings).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import seq_scale  # noqa: E402

from surveysynth.synth import _seq_models as sm  # noqa: E402
from surveysynth.synth._stan import load_program, run_stan  # noqa: E402

LOG_COLUMNS = ("income", "savings", "w", "rent", "debt")   # positive, skewed: log1p


def step_data(n: int, var: str, family: str, seed: int = 1):
    """(y, X, spec) of ``var``'s step on seq_scale's n-record 20-variable file."""
    df = seq_scale.survey(n, p=20, seed=seed)
    order = [v["name"] for v in seq_scale.variables(20)]
    if var not in order:
        raise ValueError(f"--steps: {var!r} is not one of seq_scale's variables {order}.")
    parts = []
    for c in ["w", *order[:order.index(var)]]:
        s = df[c]
        if not pd.api.types.is_numeric_dtype(s):
            parts.append(pd.get_dummies(s, prefix=c, drop_first=True).to_numpy(float))
            continue
        v = s.to_numpy(float)
        v = np.log1p(np.abs(v)) if c in LOG_COLUMNS else v
        parts.append(((v - v.mean()) / v.std())[:, None])
    X = np.hstack(parts)
    s = df[var]
    if family in ("categorical", "ordinal"):
        codes = pd.Categorical(s).codes if not isinstance(s.dtype, pd.CategoricalDtype) \
            else s.cat.codes
        y = np.asarray(codes, np.int64)
        spec = {"K": int(y.max()) + 1}
    elif family == "logistic":
        y, spec = s.to_numpy().astype(np.int64), {}
    elif family == "negbin":
        y = s.to_numpy().astype(np.int64)
        spec = {"hi": None, "eta0": float(np.log(max(y.mean(), 0.1)))}
    else:
        raise ValueError(f"--steps: family {family!r} is not one of categorical, ordinal, "
                         "logistic, negbin.")
    return y, X, spec


def baseline_inits(family: str, model, inits, spec, pre, code: str):
    """The natural inits in the baseline program's coordinates."""
    if family == "categorical" and " Ct;" not in code:     # before Q: (at, Bt)
        return [{"at": at.tolist(), "Bt": Bt.tolist()} for at, Bt in model._at_bt(inits, pre)]
    return model.sampler_inits(inits, spec, pre)


def fit_one(code: str, data: dict, init, draws: int, seed: int) -> dict:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_stan(code, data, chains=4, draws=draws, warmup=draws, seed=seed,
                       progress=False, init=init, warn=False)
    wall = time.perf_counter() - t0
    nl = np.asarray(res.sampler["n_leapfrog__"], float)
    iters = 4 * 2 * draws                 # warm-up runs at about the sampling depth
    return {"seconds": round(wall, 2), "leapfrog_per_iteration": round(float(nl.mean()), 2),
            "ms_per_gradient": round(1e3 * wall / (nl.mean() * iters), 4),
            "divergences": int(res.summary["divergences"]),
            "max_rhat": res.summary["max_rhat"], "draws": res.draws}


def compare(n: int, var: str, family: str, baseline: str, draws: int, seed: int) -> dict:
    model = sm.MODELS[family]
    y, X, spec = step_data(n, var, family)
    first, inv = sm.patterns(X, y)
    yu, Xu = y[first], X[first]
    pre = model.sampler_pre(sm.whitening(X), y, spec)
    data = model.stan_data(yu, Xu, np.bincount(inv).astype(float), spec, save_log_lik=False,
                           pre=pre)
    nat = model.inits(y, X, spec, 4, np.random.default_rng(seed))
    name = model.program_for(spec)
    old = subprocess.run(["git", "-C", str(ROOT), "show",
                          f"{baseline}:surveysynth/synth/stan/{name}.stan"],
                         capture_output=True, text=True, check=True).stdout
    new = load_program(name)
    row = {"step": var, "family": family, "n": n, "rows_in_stan": len(yu), "P": X.shape[1],
           "program": name, "same_text": old == new}
    fit_one(new, data, model.sampler_inits(nat, spec, pre), 5, seed)  # untimed: loads the
    # sampler service and the programs, so that neither timed fit pays the process's first call
    for tag, code, init in (("baseline", old, baseline_inits(family, model, nat, spec, pre, old)),
                            ("checkout", new, model.sampler_inits(nat, spec, pre))):
        r = fit_one(code, data, init, draws, seed)
        d = r.pop("draws")
        r["means"] = {k: np.round(np.ravel(d[k].mean(axis=0)), 4).tolist()
                      for k in model.params}
        r["sds"] = {k: np.ravel(d[k].std(axis=0)).tolist() for k in model.params}
        row[tag] = r
    row["speedup"] = round(row["baseline"]["seconds"] / row["checkout"]["seconds"], 2)
    return row


def markdown(rows: list[dict], meta: dict) -> str:
    out = [f"Machine: {meta['machine']}; {meta['date']}; load at start {meta['load_start']}, "
           f"at end {meta['load_end']}; baseline {meta['baseline']}, checkout {meta['head']}; "
           f"4 chains x ({meta['draws']} warm-up + {meta['draws']} draws).", "",
           "| step | family | records (rows in Stan) | P | baseline s | checkout s | speedup "
           "| leapfrog per iteration (baseline; checkout) | ms per gradient (baseline; "
           "checkout) | largest gap of posterior means (in baseline posterior SD units) |",
           "|" + "---|" * 10]
    for r in rows:
        b, c = r["baseline"], r["checkout"]
        out.append(f"| {r['step']} | {r['family']} | {r['n']:,} ({r['rows_in_stan']:,}) "
                   f"| {r['P']} | {b['seconds']} | {c['seconds']} | **{r['speedup']}x** "
                   f"| {b['leapfrog_per_iteration']}; {c['leapfrog_per_iteration']} "
                   f"| {b['ms_per_gradient']}; {c['ms_per_gradient']} | {r['max_gap']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="HEAD", help="git ref of the baseline programs")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--draws", type=int, default=300, help="warm-up and sampling draws/chain")
    ap.add_argument("--steps", nargs="+", default=["occupation:categorical", "educ:ordinal"],
                    help="variable:family pairs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fast", action="store_true", help="n = 600, 40 draws (the suite)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.fast:
        a.n, a.draws = 600, 40
    meta = {"machine": f"{platform.node()} ({os.cpu_count()} cores)",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_start": round(os.getloadavg()[0], 2), "baseline": a.baseline,
            "head": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip(),
            "draws": a.draws}
    rows = []
    for item in a.steps:
        var, _, family = item.partition(":")
        if not family:
            ap.error(f"--steps: {item!r} must be variable:family, e.g. educ:ordinal.")
        r = compare(a.n, var, family, a.baseline, a.draws, a.seed)
        rows.append(r)
        print(json.dumps(r), flush=True)
    meta["load_end"] = round(os.getloadavg()[0], 2)
    for r in rows:
        r["max_gap"] = max_gap(r)
    print(markdown(rows, meta))
    if a.json:
        Path(a.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


def max_gap(row: dict) -> float:
    """The largest |checkout - baseline| posterior mean over the natural parameters, in units
    of the baseline's posterior SD of each (a coarse check that both programs sample one
    posterior, up to Monte Carlo error; the tests check the densities exactly)."""
    def flat(tag, key):
        return np.concatenate([np.ravel(v) for v in row[tag][key].values()])
    gap = np.abs(flat("checkout", "means") - flat("baseline", "means")) / flat("baseline", "sds")
    return round(float(np.max(gap)), 3)


if __name__ == "__main__":
    sys.exit(main())
