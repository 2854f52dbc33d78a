"""The tuning shortcut (issue 39 item 1): predicted vs real Delta_alpha(c), and fits per step.

For each case (FBS and FBP on an SDR sample of 1,000 at target Lipschitz 4.5; Sequential
steps of several families on R's apistrat and on a simulated 2,000-record file) this runs
TODAY's path once (the synthesizer's own ``fit``) and keeps its unweighted fit's draws. Then:

1. every real weighted fit today's tuner ran (tuning and final fits, at several c) is compared
   with ``predict_delta_alpha`` from the unweighted draws at the same c (same number of draws):
   the ratio real / predicted and the Pareto k-hat;
2. the shortcut tuner is run for real on the same unweighted fit: c from ``propose_c``, one
   tuning fit to check (a second if the first is outside the band, its c corrected by the
   ratio real / predicted of the fits so far), then final fits at target x exp(-tol/2) until
   one is <= target; the fits it needs are counted against today's (unweighted + every
   tuning and final fit, read from today's own log).

The reported bound of the shortcut's final fit is its own fresh draws' max, never a
prediction. Prints markdown tables and writes JSON lines (``--out``).

    python benchmarks/tuning_shortcut.py            # all cases (about 30-60 min, 2 cores)
    python benchmarks/tuning_shortcut.py --fast     # FBS only, short chains (the suite's)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from surveysynth.synth.tuning import TuningPath  # noqa: E402
from surveysynth.synth.tuning_shortcut import lipschitz_map, predict_delta_alpha, propose_c  # noqa: E402

TOL = 0.10
#: FBS / FBP target Lipschitz bound on SDR sample 1001 (at 3.4 the cell-weight floor refuses it)
TARGET_FB = 4.5
SAVE_DIR: Path | None = None


def save(name: str, L, inv, X, base, rows, S) -> None:
    """Keep a case's unweighted draws and real fits (``--save``) to study predictors offline."""
    if SAVE_DIR is None:
        return
    SAVE_DIR.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(SAVE_DIR / f"{name.replace(' ', '_')}.npz", L=np.asarray(L, np.float32),
                        inv=np.arange(L.shape[1]) if inv is None else inv, X=X, base=base, S=S,
                        c=np.array([np.nan if r["c"] is None else r["c"] for r in rows]),
                        real=np.array([r["delta_alpha"] for r in rows]),
                        role=np.array([r["role"] for r in rows]))


def shortcut(L: np.ndarray, inv: np.ndarray | None, alpha_of: Callable, real: Callable,
             target: float, c_lo: float, c_max: float, S: int,
             info_weight: np.ndarray | None = None, design: np.ndarray | None = None,
             max_tuning: int = 2,
             max_final: int = 4) -> dict[str, Any]:
    """The shortcut tuner on real fits: ``real(c, final) -> Delta_alpha`` runs one fit."""
    aim = (1 - TOL / 2) * target
    kw = dict(c_lo=c_lo, c_hi=c_max, inv=inv, n_final=S, info_weight=info_weight,
              design=design)
    prop = propose_c(L, alpha_of, target, TOL, **kw)
    log: list[dict] = [{"role": "proposal", "c": prop.c, "predicted": prop.prediction.median,
                        "k_hat": prop.prediction.k_hat, "trusted": prop.trusted}]
    c, checks = prop.c, []
    for _ in range(max_tuning):
        f = real(c, False)
        checks.append((c, f))
        log.append({"role": "tuning", "c": c, "real": f})
        if abs(f - aim) <= TOL * aim:
            break
        c = propose_c(L, alpha_of, target, TOL, checks=checks, **kw).c
    goal = target * np.exp(-TOL / 2)
    for _ in range(max_final):
        p = propose_c(L, alpha_of, target, TOL, aim=goal, checks=checks, **kw)
        f = real(p.c, True)
        log.append({"role": "final", "c": p.c, "real": f,
                    "predicted_corrected": p.prediction.median * p.correction})
        if f <= target:
            break
        checks.append((p.c, f))
        goal *= np.exp(-TOL / 2)
    fits = 1 + sum(r["role"] in ("tuning", "final") for r in log)
    ok = log[-1]["role"] == "final" and log[-1]["real"] <= target
    # nothing above the target is ever reported: no release (today: TargetUnreachableError)
    return {"fits": fits, "log": log, "reported": log[-1]["real"] if ok else None,
            "released": ok}


def compare(L, inv, alpha_of, rows, S, info_weight=None, design=None) -> list[dict]:
    out = []
    for r in rows:
        if r["c"] is None or not np.isfinite(r["c"]):
            continue
        p = predict_delta_alpha(L, alpha_of(r["c"]), inv=inv, n_final=S,
                                info_weight=info_weight, design=design)
        out.append({"c": float(r["c"]), "role": r["role"], "real": float(r["delta_alpha"]),
                    "predicted": p.median, "ratio": float(r["delta_alpha"]) / p.median,
                    "k_hat": p.k_hat})
    return out


# ---------------------------------------------------------------- FBS / FBP
def pseudo_case(kind: str, chains: int, draws: int, warmup: int, seed: int) -> dict:
    from surveysynth.datasets import sdr_population, sdr_sample
    from surveysynth.synth import FBP, FBS
    from surveysynth.synth._stan import load_program, run_stan

    design = sdr_sample(sdr_population(seed=1), n=1000, seed=1001)
    cls = {"FBS": FBS, "FBP": FBP}[kind]
    syn = cls("salary", ["field", "gender"], target_lipschitz=TARGET_FB, population_size=100_000,
              chains=chains, draws=draws, warmup=warmup, random_state=seed, progress=False,
              allow_unconverged=True)
    t0 = time.perf_counter()
    syn.fit(design)
    wall = time.perf_counter() - t0
    prep, unw = syn._prep_, syn.unweighted_fit_
    scale = np.broadcast_to(np.asarray(syn._contribution_scale(prep), float), (prep["n"],))
    L = syn._record_loglik(prep, unw, slice(None)) * scale
    S = unw.chains * unw.draws_per_chain
    delta = syn.delta_
    alpha_of = lipschitz_map(delta, syn.g)
    rows = syn.tuning_.to_dict(orient="records")
    program = load_program(syn.stan_program_)
    rng = np.random.default_rng(seed + 100)
    refit_wu = max(200, warmup // 4)

    def real(c: float, final: bool) -> float:
        a = alpha_of(c)
        res = run_stan(program, syn._stan_data(prep, a, False), chains, draws, refit_wu,
                       seed=int(rng.integers(2**31)), progress=False,
                       init=unw.last_inits(), warn=False)
        R = syn._record_absmax(prep, res) * scale
        return float(np.max(np.where(a > 0, a * R, 0.0)))

    path = TuningPath(delta, syn.g, TARGET_FB)
    c_lo = float(syn.cell_weight_floor_["c_min"])
    codes = prep["cells"].codes
    X = np.eye(int(codes.max()) + 1)[codes]            # the predictor cells, one-hot
    sc = shortcut(L, None, alpha_of, real, TARGET_FB, c_lo, path.c_max, S, design=X)
    sc_rows = [{"c": x["c"], "delta_alpha": x["real"], "role": "shortcut " + x["role"]}
               for x in sc["log"] if "real" in x]
    save(kind, L, None, X, delta, rows + sc_rows, S)
    return {"case": f"{kind} SDR n=1000", "target": TARGET_FB, "today_fits": 1 + len(rows),
            "today_reported": float(syn.delta_alpha_), "today_seconds": wall,
            "compare": compare(L, None, alpha_of, rows + sc_rows, S, design=X),
            "shortcut": sc}


# ---------------------------------------------------------------- Sequential
def seq_cases(data: str, chains: int, draws: int, warmup: int, seed: int) -> list[dict]:
    from surveysynth.design import SurveyDesign
    from surveysynth.synth import sequential as seqmod

    if data == "apistrat":
        from surveysynth.datasets import load_api

        des = SurveyDesign(load_api("apistrat"), strata="stype", weights="pw", fpc="fpc")
        variables = [{"name": "api00", "type": "bounded", "bounds": (200, 1000)},
                     {"name": "sch.wide", "type": "binary"},
                     {"name": "ell", "type": "count", "bounds": (0, 100)}]
        public, eps = ["stype"], 30.0
    else:
        r = np.random.default_rng(7)
        n = 2000
        g = r.integers(0, 4, n)
        x = r.normal(0.3 * g, 1.0)
        b = (r.random(n) < 1 / (1 + np.exp(-(x - 0.2)))).astype(int)
        k = r.poisson(np.exp(0.5 + 0.3 * x))
        import pandas as pd

        df = pd.DataFrame({"grp": g.astype(str), "x": x, "b": b.astype(str), "k": k,
                           "w": np.full(n, 10.0)})
        des = SurveyDesign(df, weights="w")
        variables = [{"name": "x", "type": "continuous"}, {"name": "b", "type": "binary"},
                     {"name": "k", "type": "count"}]
        public, eps = ["grp"], 30.0
    fits: list[Any] = []
    unweighted: dict[int, Any] = {}
    orig_run, orig_all = seqmod._StepFit.run, seqmod._StepFit.run_all

    def run(self, alpha, *args, **kwargs):    # run(alpha, draws, warmup, init, label, seed)
        res = orig_run(self, alpha, *args, **kwargs)
        label = kwargs.get("label", args[3] if len(args) > 3 else None)
        if label == "unweighted":
            unweighted[id(self)] = res
        return res

    def run_all(self):
        out = orig_all(self)
        fits.append(self)
        return out

    seqmod._StepFit.run, seqmod._StepFit.run_all = run, run_all
    try:
        syn = seqmod.Sequential(variables=variables, public=public, m=5, target_epsilon=eps,
                                chains=chains, draws=draws, warmup=warmup, random_state=seed,
                                progress=False, allow_unconverged=True)
        t0 = time.perf_counter()
        syn.fit(des)
        wall = time.perf_counter() - t0
    finally:
        seqmod._StepFit.run, seqmod._StepFit.run_all = orig_run, orig_all
    out = []
    for sf in fits:
        unw = unweighted[id(sf)]
        S = unw.chains * unw.draws_per_chain
        L = sf.model.loglik(unw.draws, slice(None), sf.yu, sf.Xu, sf.step.spec)
        rows = [r for r in sf.rows if r["role"] != "unweighted"]
        today = 1 + len(rows)
        base = {"case": f"Sequential {data} {sf.step.name} ({sf.step.family})",
                "target": sf.target, "today_fits": today,
                "today_reported": float(rows[-1]["delta_alpha"]) if rows else None,
                "today_seconds": wall}
        if sf.target is None or all(r["c"] is None for r in rows):
            base.update(compare=[], shortcut=None, note="no weighting needed (alpha = 1)")
            out.append(base)
            continue
        alpha_of = lipschitz_map(sf.base, 0.0)
        n_before = len(sf.rows)

        def real(c: float, final: bool, sf=sf, unw=unw) -> float:
            sf.warm = unw.last_inits(list(sf.model.params))
            return float(sf.evaluate(c, final)[0])

        path = TuningPath(sf.base, 0.0, sf.target)
        X = np.c_[np.ones(sf.n), sf.X]
        sc = shortcut(L, sf.inv, alpha_of, real, float(sf.target), 0.0, path.c_max, S,
                      design=X)
        del sf.rows[n_before:]
        sc_rows = [{"c": x["c"], "delta_alpha": x["real"], "role": "shortcut " + x["role"]}
                   for x in sc["log"] if "real" in x]
        save(f"{data}_{sf.step.name}", L, sf.inv, X, sf.base, rows + sc_rows, S)
        base.update(compare=compare(L, sf.inv, alpha_of, rows + sc_rows, S, design=X),
                    shortcut=sc)
        out.append(base)
    return out


def tables(results: list[dict]) -> str:
    lines = ["| case | c | role (today) | real Delta_alpha | predicted | real / predicted | k-hat |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        for x in r["compare"]:
            lines.append(f"| {r['case']} | {x['c']:.3f} | {x['role']} | {x['real']:.3f} | "
                         f"{x['predicted']:.3f} | {x['ratio']:.3f} | {x['k_hat']:.2f} |")
    lines += ["", "| case | target | fits today | fits shortcut | shortcut path (c: real) | "
              "reported (final fit's draws) | first proposal trusted (k-hat) |",
              "|---|---|---|---|---|---|---|"]
    for r in results:
        sc = r["shortcut"]
        if sc is None:
            lines.append(f"| {r['case']} | {r['target']:.3g} | {r['today_fits']} | - | "
                         f"{r.get('note', '')} | | |")
            continue
        p = "; ".join(f"{x['role'][0]} {x['c']:.3f}: {x['real']:.3f}"
                      for x in sc["log"] if "real" in x)
        lines.append(f"| {r['case']} | {r['target']:.3g} | {r['today_fits']} | {sc['fits']} | "
                     f"{p} | {sc['reported'] if sc['reported'] is None else round(sc['reported'], 3)}"
                     f" | {sc['log'][0]['trusted']} "
                     f"({sc['log'][0]['k_hat']:.2f}) |")
    return "\n".join(lines)


def reanalyze(directory: str) -> str:
    """From saved cases (``--save``): real / predicted at every real fit for the method and for
    what each of its parts contributes (no design: one global kappa; no importance weights;
    the plug-in max_i alpha_i Delta_i of today's first step). Numpy only, seconds."""
    from surveysynth.synth.tuning_shortcut import lipschitz_map as lmap

    lines = ["| case | c | role | real | method | global kappa | no IS | plug-in | k-hat |",
             "|---|---|---|---|---|---|---|---|---|"]
    allr: dict[str, list[float]] = {"method": [], "global": [], "noIS": [], "plug": []}
    for f in sorted(Path(directory).glob("*.npz")):
        z = np.load(f)
        L, inv, X, S = z["L"].astype(float), z["inv"], z["X"], int(z["S"])
        amap = lmap(z["base"], 0.0)
        delta = np.abs(L).max(axis=0)[inv]
        for c, real, role in zip(z["c"], z["real"], z["role"], strict=True):
            if not np.isfinite(c):
                continue
            a = amap(c)
            p = predict_delta_alpha(L, a, inv=inv, n_final=S, design=X)
            g = predict_delta_alpha(L, a, inv=inv, n_final=S).median
            ni = predict_delta_alpha(L, a, inv=inv, n_final=S, design=X,
                                     exponent="none").median
            pl = float(np.max(a * delta))
            r = [real / p.median, real / g, real / ni, real / pl]
            for k, v in zip(allr, r, strict=True):
                allr[k].append(float(np.log(v)))
            lines.append(f"| {f.stem} | {c:.3f} | {role} | {real:.3f} | "
                         + " | ".join(f"{v:.3f}" for v in r) + f" | {p.k_hat:.2f} |")
    lines.append("| **all: geometric mean (SD of log)** | | | | " + " | ".join(
        f"{np.exp(np.mean(v)):.3f} ({np.std(v):.3f})" for v in allr.values()) + " | |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fast", action="store_true", help="FBS only, 2 chains x 300 draws")
    ap.add_argument("--cases", default="FBS,FBP,apistrat,sim2000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="JSON lines output")
    ap.add_argument("--save", default=None, help="directory for each case's draws (npz)")
    ap.add_argument("--reanalyze", default=None, help="print the parts table from a --save dir")
    a = ap.parse_args(argv)
    if a.reanalyze:
        print(reanalyze(a.reanalyze))
        return
    global SAVE_DIR
    SAVE_DIR = Path(a.save) if a.save else None
    warnings.filterwarnings("ignore")
    chains, draws, warmup = (2, 300, 300) if a.fast else (4, 1000, 1000)
    cases = ["FBS"] if a.fast else a.cases.split(",")
    results = []
    for case in cases:
        t0 = time.perf_counter()
        try:
            got = ([pseudo_case(case, chains, draws, warmup, a.seed)] if case in ("FBS", "FBP")
                   else seq_cases(case, chains, draws, warmup, a.seed))
        except Exception as exc:  # a refused target: say so, go on with the other cases
            import traceback

            traceback.print_exc()
            print(json.dumps({"case": case, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
            continue
        for g in got:
            g["seconds_case"] = time.perf_counter() - t0
            print(json.dumps(g, default=float), flush=True)
            if a.out:
                with open(a.out, "a") as fh:
                    fh.write(json.dumps(g, default=float) + "\n")
        results += got
    print(tables(results))


if __name__ == "__main__":
    main()
