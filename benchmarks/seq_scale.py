"""Sequential synthesis at agency scale, configurations side by side in one run (issue 39 item 5).

Cases (``--cases``): ``10k`` = 10,000 records x 10 variables, ``100k`` = 100,000 x 20,
``1m`` = 1,000,000 x 10 on a Dask LocalCluster of 2 memory-limited worker processes.
Data (:func:`survey`): a stratified sample (5 strata, fpc, unequal weights with a
nonresponse-style adjustment) whose first ten variables are those of
``benchmarks/sequential.py`` (binary, categorical, bounded, ordinal, binary, normal, two
lognormal, normal, count: each depending on the ones before it), so the 10-variable numbers
compare with that benchmark's; the 20-variable file adds ten more of the same kinds
(:data:`EXTRA`), again depending on earlier ones.

Configurations (``CONFIGS``, or ``--config NAME=JSON`` on the command line, repeatable) are
Sequential keyword sets: ``refits (before)`` (the tuning rule before issue 39,
``tuning="refits"``) and ``defaults`` (today's Sequential as installed: the tuning shortcut with
direct final fits, truncated normals on sums). A configuration naming an option
the installed Sequential does not take is reported as "not available" (with the option
names), not run and not crashed on; so the new options are just added here when they land.
The 1m case needs a Sequential that takes a Dask client (a keyword among
:data:`DASK_PARAMS`); otherwise it says "not supported by this Sequential" and stops cleanly.

Each (case, configuration, seed) runs in its own child process, so its peak memory is its own:
the peak summed RSS of the child and all its descendants (Stan's sampler processes, Dask's
workers), sampled every 0.1 s with psutil, each Dask worker's own peak (psutil on the worker
pids, and the worker's ``ru_maxrss``), the child's ``ru_maxrss``; wall time (fit, release,
utility) and CPU seconds (the child and its descendants). Recorded per run: the release gates
verdict, the achieved Delta_alpha and epsilon of the release, utility (CI overlap of the mean
of every synthesized variable, proportions for categorical ones, confidential design vs the
release's combined estimate; pMSE of every synthetic set against the confidential data,
:mod:`surveysynth.synthetic_utility`), and per step the number of fits and the tuning path
(and the tuning shortcut's predicted bound where the installed Sequential records one).

    nice -n 10 python benchmarks/seq_scale.py --cases 10k --label "before the issue-39 changes"
    python benchmarks/seq_scale.py --fast          # tiny sizes, short chains, prints only (tests)
    python benchmarks/seq_scale.py --fast --cases 10k --config 'x={"no_such_option": 1}'
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import sequential as _seqbench  # noqa: E402  (the 10-variable generator and its variables)

#: the first ten variables (benchmarks/sequential.py's, in its synthesis order)
BASE = list(_seqbench.VARIABLES)
#: ten more for the 20-variable file
EXTRA = [
    {"name": "insured", "type": "binary"},
    {"name": "occupation", "type": "categorical"},
    {"name": "health", "type": "ordinal"},
    {"name": "hhsize", "type": "count", "bounds": (1, None)},
    {"name": "children", "type": "count", "bounds": (0, None)},
    {"name": "owner", "type": "binary"},
    {"name": "rent", "type": "positive"},
    {"name": "commute", "type": "continuous"},
    {"name": "bmi", "type": "continuous"},
    {"name": "debt", "type": "positive"},
]

#: sizes of the cases (records, variables) and whether the case runs on a Dask cluster;
#: ``--fast`` shrinks them to FAST_SIZES
CASES = {"10k": (10_000, 10, False), "100k": (100_000, 20, False), "1m": (1_000_000, 10, True)}
FAST_SIZES = {"10k": (1000, 10), "100k": (1000, 20), "1m": (1000, 10)}

#: the configurations side by side: Sequential keyword sets (added to the common settings
#: below): the tuning rule before issue 39 ("refits": tuning fits, then a final fit) and
#: today's defaults (the tuning shortcut with direct final fits, truncated normals on sums);
#: keywords the installed Sequential does not take are reported as not available
CONFIGS: dict[str, dict[str, Any]] = {
    "refits (before)": {"tuning": "refits"},
    "defaults": {},
}
#: Sequential keywords that take a Dask client (the first one the installed Sequential has)
DASK_PARAMS = ("client", "dask_client", "dask")
#: the settings of every run (the release as a statistical agency would make it); the
#: target epsilon is 50 for the 10 variables and the weights step (benchmarks/sequential.py's)
#: and the same 50 / 11 per step for other numbers of variables (95.45 for 20: at 50 the
#: count steps' targets can fall below the floor of their bounds on small files)
COMMON = {"m": 5, "population_size": None}
EPSILON_PER_STEP = 50.0 / 11
#: short chains of --fast (and of the tests)
FAST_MCMC = {"chains": 2, "draws": 150, "warmup": 150, "allow_unconverged": True,
             "convergence": {"rhat": 1.5, "ess_bulk": 20}}
#: pMSE with all pairwise interactions up to this many pooled records x columns; main effects
#: beyond (a 2,000,000 x 500 float matrix per set is more than a benchmark should hold)
PMSE_INTERACTIONS_MAX = 2e7


# ------------------------------------------------------------------------------ data
def variables(p: int) -> list[dict]:
    """The first ``p`` variables (10 or 20; fewer for quick runs) in synthesis order."""
    allv = BASE + EXTRA
    if not 1 <= p <= len(allv):
        raise ValueError(f"variables: p = {p} must be between 1 and {len(allv)}.")
    return [dict(v) for v in allv[:p]]


def population(n: int) -> float:
    """The public population size of an n-record file: 100,000 (benchmarks/sequential.py's)
    up to 10,000 records, 10 n beyond."""
    return 100_000.0 * max(1.0, n / 10_000)


def survey(n: int, p: int = 10, seed: int = 1) -> pd.DataFrame:
    """A stratified sample of ``n`` records: design columns (stratum, w, fpc) and the first
    ``p`` variables of :func:`variables`, each depending on earlier ones (vectorized)."""
    df = _seqbench.survey(n, seed)
    k = population(n) / 100_000       # beyond 10,000 records the population grows with n
    if k > 1:                         # (sampling fraction 10%), weights and fpc with it
        df["w"] *= k
        df["fpc"] *= k
    if p > len(BASE):
        rng = np.random.default_rng([seed, 20])
        age, educ = df["age"].to_numpy(float), df["educ"].cat.codes.to_numpy()
        emp, inc = df["employed"].to_numpy(), np.log(df["income"].to_numpy(float))
        female = df["female"].to_numpy()
        lin = -0.5 + 0.03 * (age - 45) + 0.8 * emp + 0.3 * educ
        insured = (rng.random(n) < 1 / (1 + np.exp(-lin))).astype(int)
        occ_score = 0.6 * educ + 0.5 * emp + rng.gumbel(size=(n, 5)).T
        occ_score[0] += 1.0 - emp            # "not working" more likely when not employed
        occupation = np.array(["none", "manual", "service", "office", "professional"])[
            np.argmax(occ_score + np.arange(5)[:, None] * 0.2 * (educ - 1), axis=0)]
        health = np.digitize(-0.03 * (age - 45) + 0.4 * insured + 0.2 * educ
                             + rng.logistic(size=n), [-2.0, -0.7, 0.7, 2.0])
        hhsize = 1 + rng.poisson(np.exp(0.4 + 0.2 * (age < 50) - 0.1 * educ))
        children = rng.binomial(hhsize - 1, 0.45 * (age < 60))
        owner = (rng.random(n) < 1 / (1 + np.exp(-(-1.5 + 0.04 * (age - 30) + 0.4 * (inc - 9.5)))
                                      )).astype(int)
        rent = np.exp(6.5 + 0.3 * (inc - 9.5) + 0.1 * hhsize - 0.5 * owner
                      + 0.35 * rng.standard_normal(n))
        commute = np.round(emp * (25 + 5 * (occupation == "office")) + 8 * rng.standard_normal(n),
                           1)
        bmi = 26 + 0.05 * (age - 45) - 0.8 * female - 0.3 * (health - 2) \
            + 4 * rng.standard_normal(n)
        debt = np.exp(8 + 0.5 * (inc - 9.5) + 0.6 * owner + 1.0 * rng.standard_normal(n))
        levels = ["poor", "fair", "good", "very good", "excellent"]
        extra = pd.DataFrame({
            "insured": insured, "occupation": occupation,
            "health": pd.Categorical(np.array(levels)[health], categories=levels, ordered=True),
            "hhsize": hhsize.astype(np.int64), "children": children.astype(np.int64),
            "owner": owner, "rent": np.round(rent, 2), "commute": commute, "bmi": bmi,
            "debt": np.round(debt, 2)}, index=df.index)
        df = pd.concat([df, extra], axis=1)
    keep = ["stratum", "w", "fpc"] + [v["name"] for v in variables(p)]
    return df[keep]


# ------------------------------------------------------------------------------ options
def sequential_params() -> set[str]:
    """Keyword names the installed ``Sequential`` takes."""
    from surveysynth.synth.sequential import Sequential

    return set(inspect.signature(Sequential.__init__).parameters) - {"self"}


def unknown_options(kwargs: dict[str, Any], params: set[str] | None = None) -> list[str]:
    """The keys of ``kwargs`` the installed ``Sequential`` does not take (sorted)."""
    params = sequential_params() if params is None else params
    return sorted(set(kwargs) - params)


def dask_param(params: set[str] | None = None) -> str | None:
    """The keyword by which the installed ``Sequential`` takes a Dask client, or None."""
    params = sequential_params() if params is None else params
    return next((p for p in DASK_PARAMS if p in params), None)


# ------------------------------------------------------------------------------ measuring
class PeakRSS:
    """Peak RSS of this process and its descendants (Stan's sampler processes, Dask's
    workers), sampled every ``interval`` seconds with psutil: the peak of their sum, and each
    process's own peak by pid."""

    def __init__(self, interval: float = 0.1) -> None:
        import psutil

        self.proc = psutil.Process()
        self.interval = interval
        self.peak = 0
        self.by_pid: dict[int, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> int:
        total = 0
        for p in [self.proc] + self.proc.children(recursive=True):
            try:
                rss = p.memory_info().rss
            except Exception:  # noqa: BLE001 - a process that just ended
                continue
            total += rss
            self.by_pid[p.pid] = max(self.by_pid.get(p.pid, 0), rss)
        self.peak = max(self.peak, total)
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        self.sample()
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.sample()


def maxrss() -> int:
    """This process's own peak RSS in bytes: Linux's VmHWM (the high-water mark of this
    address space, reset by exec), else ``ru_maxrss``. Linux keeps ``ru_maxrss`` across fork
    and exec, so a child started by a large parent (a pytest worker of 1.9 GB) reported the
    parent's peak; VmHWM does not."""
    import resource

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process, its ended children and its live
    descendants (a pool of sampler or worker processes still running)."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for c in me.children(recursive=True):
        try:
            ct = c.cpu_times()
            total += ct.user + ct.system
        except Exception:  # noqa: BLE001 - ended meanwhile (then counted in children_*)
            pass
    return float(total)


def load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average {os.getloadavg()}"


# ------------------------------------------------------------------------------ utility
def utility(design: Any, release: Any, variables_: list[dict],
            interactions: bool | None = None) -> dict[str, Any]:
    """CI overlap of the mean of every synthesized variable (proportions of each level for
    binary, categorical and ordinal ones) between the confidential design and the release's
    combined estimate (:func:`surveysynth.synthetic_utility.estimate_overlap`), and the pMSE
    of every synthetic set against the confidential data (the variables coded as in the
    confidential utility report: numeric columns, one-hot categories; with all pairwise
    interactions when ``interactions``, by default when the pooled matrix is small)."""
    from surveysynth.synthetic_utility import (
        _Coder,
        _is_categorical,
        _pmse_null,
        estimate_overlap,
        joint_design_matrix,
    )

    types = {v["name"]: v["type"] for v in variables_}
    names = list(types)
    conf = design.data
    frames = [d.data for d in release.designs]
    coders = [_Coder(v, conf[v], [f[v] for f in frames], _is_categorical(conf[v], types[v]))
              for v in names]
    est = estimate_overlap(design, release, coders)
    width = sum(len(c.columns) for c in coders)
    if interactions is None:
        interactions = 2 * len(conf) * width * (width + 1) / 2 <= PMSE_INTERACTIONS_MAX
    X_o, _ = joint_design_matrix(coders, conf, interactions=interactions)
    sets = [_pmse_null(X_o, joint_design_matrix(coders, f, interactions=interactions)[0])
            for f in frames]
    ov = est["overlap"].to_numpy(float)
    per_var = est.groupby("variable", sort=False)["overlap"].agg(["mean", "min"])
    return {"overlap_mean": float(np.nanmean(ov)), "overlap_min": float(np.nanmin(ov)),
            "overlap_by_variable": {k: [float(a), float(b)] for k, (a, b) in
                                    zip(per_var.index, per_var.to_numpy(), strict=True)},
            "estimates": int(np.isfinite(ov).sum()),
            "pmse": float(np.mean([s["pMSE"] for s in sets])),
            "pmse_each": [float(s["pMSE"]) for s in sets],
            "pmse_ratio": float(np.mean([s["ratio"] for s in sets])),
            "pmse_converged": bool(all(s["converged"] for s in sets)),
            "pmse_interactions": bool(interactions)}


# ------------------------------------------------------------------------------ step facts
def step_rows(syn: Any) -> list[dict]:
    """Per step: family, Stan program, rows in Stan, fits (the unweighted fit + every
    weighted one), tuning path length (weighted fits before the final one), c, Delta_alpha,
    its target, seconds; and the tuning shortcut's predicted bound where recorded."""
    rows = []
    timings = getattr(syn, "timings_", {}) or {}
    for st, r in zip(syn.steps_, syn.step_fits_, strict=True):
        path = list(r.get("tuning", []) or [])
        roles = [str(t.get("role", "")) for t in path]
        weighted = [t for t, ro in zip(path, roles, strict=True) if ro != "unweighted"]
        final = [t for t, ro in zip(path, roles, strict=True) if ro.startswith("final")]
        predicted = [t.get(k) for t in path for k in ("predicted", "predicted_delta_alpha")
                     if t.get(k) is not None]
        rows.append({
            "step": st.name, "family": getattr(st, "family", None),
            "program": r.get("program"), "rows_in_stan": r.get("patterns"),
            "fits": 1 + len(weighted), "tuning_path": len(weighted) - len(final),
            "c": r.get("c"), "delta_alpha": float(r["delta_alpha"]),
            "target": r.get("target"),
            "predicted": float(predicted[-1]) if predicted else None,
            "seconds": float(timings.get(st.name, r.get("seconds", np.nan)))})
    return rows


def _plain(x: Any) -> Any:
    """JSON-ready copy (numpy scalars and arrays to Python)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


# ------------------------------------------------------------------------------ one run (child)
def run_one(spec: dict) -> dict:
    """One (case, configuration, seed) in this process: generate, fit, release, utility.
    ``spec``: n, p, seed, kwargs (Sequential keywords), fast, dask (bool), memory_limit,
    generate_only (only the data and the design: for the memory test)."""
    import surveysynth as ss

    t_start = time.perf_counter()
    out: dict[str, Any] = {"spec": {k: v for k, v in spec.items()}}
    with PeakRSS() as peak:
        df = survey(spec["n"], spec["p"], spec["seed"])
        d = ss.SurveyDesign(df, strata="stratum", fpc="fpc", weights="w")
        out["generate_s"] = time.perf_counter() - t_start
        if spec.get("generate_only"):
            out.update(peak_rss=None, maxrss=maxrss())
        else:
            out.update(_fit_release(d, spec))
    out["peak_rss"] = peak.peak
    out["maxrss"] = maxrss()
    workers = out.pop("_worker_pids", None)
    if workers:
        out["worker_peak_rss"] = [peak.by_pid.get(pid, 0) for pid in workers]
    out["cpu_s"] = cpu_seconds()
    out["wall_s"] = time.perf_counter() - t_start
    return _plain(out)


def start_cluster(memory_limit: str, n_workers: int = 2) -> tuple[Any, Any, list[int]]:
    """A LocalCluster of ``n_workers`` worker processes (one thread each) held to
    ``memory_limit`` each, its client, and the workers' pids (whose RSS :class:`PeakRSS`
    keeps apart: each worker's own peak). The workers are not daemonic (pystan starts a
    process per chain; Sequential refuses daemonic workers)."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                               memory_limit=memory_limit, dashboard_address=None)
    client = Client(cluster)
    return cluster, client, sorted(client.run(os.getpid).values())


def _fit_release(d: Any, spec: dict) -> dict:
    from surveysynth.synth.base import ConvergenceError
    from surveysynth.synth.sequential import Sequential

    vs = variables(spec["p"])
    kwargs = {**COMMON, "population_size": population(spec["n"]),
              "target_epsilon": EPSILON_PER_STEP * (spec["p"] + 1), **spec["kwargs"]}
    if spec.get("fast"):
        kwargs.update(FAST_MCMC)
    kwargs.setdefault("random_state", spec["seed"])
    kwargs.setdefault("progress", bool(spec.get("progress")))
    res: dict[str, Any] = {}
    cluster = client = None
    try:
        if spec.get("dask"):
            t0 = time.perf_counter()
            cluster, client, res["_worker_pids"] = start_cluster(spec["memory_limit"])
            res["cluster_start_s"] = time.perf_counter() - t0
            kwargs[spec["dask_param"]] = client
        syn = Sequential(variables=vs, **kwargs)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            syn.fit(d)
            t1 = time.perf_counter()
            try:
                rel = syn.release()
            except ConvergenceError as exc:    # the gates refused the release: reported
                rel = None
                res["refused"] = str(exc)[:500]
            except Exception as exc:  # noqa: BLE001 - a failed synthesis: reported, the fit kept
                rel = None
                res["refused"] = f"release failed: {type(exc).__name__}: {str(exc)[:400]}"
            t2 = time.perf_counter()
        res.update(fit_s=t1 - t0, release_s=t2 - t1)
        if client is not None:
            res["worker_maxrss"] = sorted(client.run(maxrss).values())
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    cv = syn.convergence_
    res.update(gates="passed" if cv["passed"] else "FAILED", max_rhat=cv["max_rhat"],
               min_ess_bulk=cv["min_ess_bulk"], divergent=cv["divergent"],
               problems=list(cv.get("problems", []))[:5],
               delta_alpha=float(syn.delta_alpha_), target_epsilon=kwargs["target_epsilon"],
               # achieved: 2 Delta_alpha per released set (the release declares each step's
               # target, the public bound, which the achieved one is at most)
               achieved_epsilon=2.0 * int(kwargs["m"]) * float(syn.delta_alpha_),
               steps=step_rows(syn))
    if rel is not None:
        res["epsilon"] = float(rel.epsilon)
        t0 = time.perf_counter()
        res["utility"] = utility(d, rel, vs)
        res["utility_s"] = time.perf_counter() - t0
    return res


def child(spec: dict, tmp: Path) -> dict:
    """Run ``spec`` in a fresh process (its own peak memory); returns its JSON, or an
    ``error`` entry with the end of its stderr when it failed."""
    out = tmp / f"run_{time.time_ns()}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec), str(out)]
    proc = subprocess.run(cmd, capture_output=not spec.get("progress"), text=True, check=False)
    if proc.returncode != 0 or not out.exists():
        return {"spec": spec, "error": (proc.stderr or "")[-2000:] or f"exit {proc.returncode}"}
    return json.loads(out.read_text())


# ------------------------------------------------------------------------------ driver
def gib(b: float | None) -> str:
    return "n/a" if b is None else f"{b / 2**30:.2f} GiB"


def plan(cases: list[str], configs: dict[str, dict], fast: bool,
         params: set[str] | None = None, nvars: int | None = None) -> list[dict]:
    """What runs: one entry per (case, configuration) with its spec, or the reason it does
    not run (options unknown to the installed Sequential; no Dask support for the 1m case)."""
    params = sequential_params() if params is None else params
    out = []
    for case in cases:
        n, p, on_dask = CASES[case]
        if fast:
            n, p = FAST_SIZES[case]
        p = min(p, nvars or p)
        dp = dask_param(params) if on_dask else None
        if on_dask and dp is None:
            out.append({"case": case, "config": None, "n": n, "p": p,
                        "skip": "not supported by this Sequential (it takes no Dask client: "
                                f"none of {', '.join(DASK_PARAMS)}); case stopped"})
            continue
        for name, kw in configs.items():
            bad = unknown_options(kw, params)
            entry = {"case": case, "config": name, "n": n, "p": p, "kwargs": kw}
            if bad:
                entry["skip"] = ("not available: option(s) " + ", ".join(bad)
                                 + " unknown to the installed Sequential")
            else:
                entry["dask_param"] = dp
            out.append(entry)
    return out


def report(results: list[dict], label: str, before: str, after: str, command: str,
           code: str | None = None) -> str:
    lines = [f"### Sequential at scale, side by side ({label})" if label else
             "### Sequential at scale, side by side", "",
             f"`{command}` (`benchmarks/seq_scale.py`). Each row is one child process "
             "(generate, fit, release, utility); m = 5, target epsilon 50 in total for 10 "
             "variables (50 / 11 per step, the weights step included: 95.45 for 20) "
             "(achieved: 2 m Delta_alpha, the sum over steps of the final fits' bounds; "
             "declared: the release's epsilon, each step's target); "
             "population size 100,000 (10 n beyond 10,000 records: weights and fpc scaled). "
             "Peak memory: the summed RSS of the child and its "
             "descendants (Stan's sampler processes; Dask workers), sampled every 0.1 s; CPU "
             "s: user + system of the child and its descendants. Utility: CI overlap of the "
             "mean (proportions for categorical variables) of every synthesized variable, "
             "confidential design vs the release's combined estimate (mean, minimum); pMSE of "
             "each synthetic set against the confidential data, mean over sets (ratio to its "
             "null expectation).", "",
             "| case | configuration | seed | fit s | release s | total s | CPU s | peak memory "
             "| gates (max R-hat, min ESS, divergent) | Delta_alpha | epsilon achieved (declared) "
             "| CI overlap mean "
             "(min) | pMSE (ratio) | fits | tuning fits |",
             "|" + "---|" * 15]
    details = []
    for r in results:
        if "skip" in r:
            lines.append(f"| {r['case']} ({r['n']:,} x {r['p']}) | {r['config'] or 'all'} | | "
                         f"{r['skip']} |" + " |" * 11)
            continue
        if "error" in r:
            lines.append(f"| {r['case']} ({r['n']:,} x {r['p']}) | {r['config']} | {r['seed']} "
                         f"| failed: {r['error'].strip().splitlines()[-1][:200]} |" + " |" * 11)
            continue
        u = r.get("utility")
        steps = r["steps"]
        mem = gib(r["peak_rss"])
        if r.get("worker_peak_rss"):
            mem += " (workers " + ", ".join(gib(x) for x in r["worker_peak_rss"]) + ")"
        total = r["fit_s"] + r["release_s"]
        lines.append(
            f"| {r['case']} ({r['n']:,} x {r['p']}) | {r['config']} | {r['seed']} | "
            f"{r['fit_s']:.1f} | {r['release_s']:.1f} | **{total:.1f}** | {r['cpu_s']:.0f} | "
            f"{mem} | {r['gates']} ({r['max_rhat']:.4f}, {r['min_ess_bulk']:.0f}, "
            f"{r['divergent']}) | {r['delta_alpha']:.4g} | "
            + f"{r['achieved_epsilon']:.4g} ("
            + (f"{r['epsilon']:.4g}" if "epsilon" in r else "refused") + ") | "
            + (f"{u['overlap_mean']:.3f} ({u['overlap_min']:.3f}) | {u['pmse']:.3g} "
               f"({u['pmse_ratio']:.3g}{'' if u['pmse_interactions'] else ', main effects'}) | "
               if u else " | | ")
            + f"{sum(s['fits'] for s in steps)} | {sum(s['tuning_path'] for s in steps)} |")
        details += ["", f"Per step, {r['case']}, {r['config']}, seed {r['seed']}:", "",
                    "| step | family | program | rows in Stan | fits | tuning fits | c | "
                    "Delta_alpha | target | predicted | s |", "|" + "---|" * 11]
        for s in steps:
            details.append(
                f"| {s['step']} | {s['family']} | {s['program']} | {s['rows_in_stan']} | "
                f"{s['fits']} | {s['tuning_path']} | "
                + (f"{s['c']:.4g}" if s["c"] is not None else "-") + f" | {s['delta_alpha']:.4g} | "
                + (f"{s['target']:.4g}" if s["target"] is not None else "-") + " | "
                + (f"{s['predicted']:.4g}" if s["predicted"] is not None else "-")
                + f" | {s['seconds']:.1f} |")
        if r.get("refused"):
            details += ["", f"Release refused: {r['refused']}"]
        if u:
            details += ["", "CI overlap by variable (mean, min over levels): " + "; ".join(
                f"{k} {a:.3f}" + (f" ({b:.3f})" if abs(a - b) > 1e-12 else "")
                for k, (a, b) in u["overlap_by_variable"].items())]
    lines += summary(results)
    lines += ["", f"Load before: `{before}`; after: `{after}`. `nproc` = {os.cpu_count()}; "
              f"code at commit {code or _seqbench.commit()}."]
    return "\n".join(lines + details)


#: issue 39's goals per case: seconds (fit + release) and GiB per Dask worker
GOALS = {"10k": (60.0, None), "100k": (1200.0, None), "1m": (7200.0, 4.0)}


def goal_met(r: dict) -> str:
    """Whether a run met its case's issue-39 goal (time with every gate passed; on Dask also
    the peak memory per worker)."""
    secs, gib_per_worker = GOALS[r["case"]]
    if (r["n"], r["p"]) != CASES[r["case"]][:2]:
        return "- (not the case's size)"
    total = r["fit_s"] + r["release_s"]
    ok = total < secs and r["gates"] == "passed" and "epsilon" in r
    text = f"under {secs / 60:g} min, gates passed"
    if gib_per_worker is not None:
        peaks = r.get("worker_peak_rss") or [np.inf]
        ok = ok and max(peaks) < gib_per_worker * 2**30
        text += f", under {gib_per_worker:g} GiB per worker"
    return f"{'yes' if ok else 'no'} ({text})"


def summary(results: list[dict]) -> list[str]:
    """Per case and configuration over its seeds: mean (sd) of the total time, achieved
    epsilon, CI overlap and pMSE (the Monte Carlo spread that "no loss" is judged against)."""
    runs = [r for r in results if "steps" in r]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["case"], r["config"]), []).append(r)
    if not groups:
        return []

    def ms(x: list[float]) -> str:
        x = [v for v in x if v is not None and np.isfinite(v)]
        if not x:
            return "-"
        return f"{np.mean(x):.4g}" + (f" ({np.std(x, ddof=1):.2g})" if len(x) > 1 else "")

    out = ["", "Over seeds, mean (sd):", "",
           "| case | configuration | runs | total s | epsilon achieved | CI overlap mean | pMSE "
           "| issue-39 goal met |", "|" + "---|" * 8]
    for (case, cfg), rs in groups.items():
        u = [r.get("utility") or {} for r in rs]
        out.append(f"| {case} | {cfg} | {len(rs)} | {ms([r['fit_s'] + r['release_s'] for r in rs])} "
                   f"| {ms([r['achieved_epsilon'] for r in rs])} | "
                   f"{ms([x.get('overlap_mean') for x in u])} | {ms([x.get('pmse') for x in u])} "
                   f"| {'; '.join(goal_met(r) for r in rs)} |")
    return out


#: the Stan model family of each variable type as Sequential fits it (continuous and positive
#: variables without bounds: a normal on sufficient statistics; bounded: a truncated normal on
#: sums plus one normaliser per distinct predictor row, seq_normal_tss: the same cost class)
FAMILY = {"binary": "logistic", "categorical": "categorical", "ordinal": "ordinal",
          "count": "negbin", "bounded": "normal_ss", "continuous": "normal_ss",
          "positive": "normal_ss"}
#: the programs fitted on sums (their cost does not grow with the records)
SUMS_PROGRAMS = ("seq_normal_ss", "seq_normal_tss")


def patterns(n: int, p: int, seed: int = 1) -> dict[str, int]:
    """Distinct (predictors, response) rows of each step of an n x p file: the strata and
    the variables before it, and its own (Stan is given these patterns, exactly: the raw
    values code the model's predictors one to one)."""
    df = survey(n, p, seed)
    cols = ["stratum"]
    out = {}
    for v in variables(p):
        cols.append(v["name"])
        out[v["name"]] = int(len(df[cols].drop_duplicates()))
    return out


def estimate_seconds(r: dict, n: int, p: int) -> float:
    """A rough fit time of an n x p file from a 10,000 x 10 run ``r``. A step fitted on
    sufficient statistics costs what it cost here at any n, and so does a step with under
    1,000 patterns; any other step costs the seconds per row in Stan of its model family here
    (measured on steps with >= 1,000 rows; a family not measured so, the costliest family's)
    times its distinct patterns at the larger size (counted on the generated file:
    :func:`patterns`); the weights step as here. Tuning fits per step as here. An estimate,
    not a measurement: sampler efficiency and tuning change with n."""
    fam = {v["name"]: FAMILY[v["type"]] for v in variables(20)}
    ss_cost = [s["seconds"] for s in r["steps"] if s["program"] in SUMS_PROGRAMS
               and s["step"] in fam]
    per_row: dict[str, list[float]] = {}
    for s in r["steps"]:     # per-row costs from steps with many rows (few: overhead)
        if s["step"] in fam and fam[s["step"]] != "normal_ss" and s["rows_in_stan"] >= 1000:
            per_row.setdefault(fam[s["step"]], []).append(s["seconds"] / s["rows_in_stan"])
    costliest = max(float(np.mean(v)) for v in per_row.values())
    here_s = {s["step"]: s["seconds"] for s in r["steps"]}
    t = sum(s["seconds"] for s in r["steps"] if s["step"] not in fam)   # the weights step
    for name, k in patterns(n, p).items():
        f = fam[name]
        if f == "normal_ss":
            t += float(np.mean(ss_cost))
        elif k < 1000:           # a few patterns: as here
            t += here_s.get(name, 0.0)
        else:                    # a family not measured on many rows: the costliest
            t += float(np.mean(per_row[f])) * k if f in per_row else costliest * k
    return t


def estimate(results: list[dict], sizes: tuple[tuple[int, int], ...] = (
        (100_000, 20), (1_000_000, 10))) -> str:
    """:func:`estimate_seconds` of the larger cases from each 10,000 x 10 run, as text."""
    out = []
    for r in results:
        if r.get("case") != "10k" or "steps" not in r or (r["n"], r["p"]) != (10_000, 10):
            continue
        parts = [f"{n:,} x {p}: about {estimate_seconds(r, n, p) / 3600:.1f} h serially"
                 for n, p in sizes]
        out.append(f"{r['config']} (seed {r['seed']}, {r['fit_s']:.0f} s here): "
                   + "; ".join(parts))
    return "; ".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fast", action="store_true", help="tiny sizes, short chains, no write")
    ap.add_argument("--cases", default="10k,100k,1m")
    ap.add_argument("--config", action="append", default=None, metavar="NAME=JSON",
                    help="a configuration (Sequential keywords as a JSON object); repeatable; "
                         "replaces the file's CONFIGS")
    ap.add_argument("--only", default=None, help="run only these CONFIGS names (comma list)")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--vars", type=int, default=None,
                    help="synthesize only the first VARS variables of each case (quick runs)")
    ap.add_argument("--memory-limit", default="5GiB", help="per Dask worker (1m case)")
    ap.add_argument("--label", default="", help="what the run measures (in the section title)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--report-from", default=None, metavar="JSON",
                    help="no run: the report (and the docs section unless --no-write) of the "
                         "results an earlier run saved with --json")
    ap.add_argument("--loads", default=None, metavar="BEFORE||AFTER",
                    help="with --report-from a JSON of results alone: the uptime lines")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        spec, path = json.loads(a.child[0]), a.child[1]
        Path(path).write_text(json.dumps(run_one(spec)))
        return
    if a.report_from:
        saved = json.loads(Path(a.report_from).read_text())
        if isinstance(saved, list):      # results alone (a run still going, or an old one)
            before, _, after = (a.loads or "not recorded||not recorded").partition("||")
            saved = {"results": saved, "before": before, "after": after,
                     "command": "see the run's log"}
        finish(saved, a.label, a.no_write or a.fast)
        return
    configs = dict(CONFIGS)
    if a.config:
        configs = {}
        for item in a.config:
            name, _, js = item.partition("=")
            try:
                kw = json.loads(js) if js.strip() else {}
            except json.JSONDecodeError as exc:
                ap.error(f"--config {item!r}: {js!r} after the first '=' is not a JSON object "
                         f"({exc.msg}); the name may not contain '='. Example: "
                         "--config 'two jobs={\"n_jobs\": 2}'.")
            if not isinstance(kw, dict):
                ap.error(f"--config {item!r}: the keywords must be a JSON object, e.g. "
                         "'two jobs={\"n_jobs\": 2}'.")
            configs[name.strip()] = kw
    if a.only:
        configs = {k: v for k, v in configs.items() if k in a.only.split(",")}
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad:
        ap.error(f"--cases: unknown {bad}; choose from {list(CASES)}")
    seeds = [int(s) for s in a.seeds.split(",")]
    command = "python benchmarks/seq_scale.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    before = load()
    results = []
    with tempfile.TemporaryDirectory(prefix="seq_scale_") as tmp:
        if not a.fast:   # compile every Stan program first (untimed): a warm-cache timing
            child({"n": 300, "p": max(CASES[c][1] for c in cases), "seed": 99, "kwargs": {},
                   "fast": True}, Path(tmp))
        for entry in plan(cases, configs, a.fast, nvars=a.vars):
            if "skip" in entry:
                results.append(entry)
                print(f"{entry['case']} {entry['config']}: {entry['skip']}", flush=True)
                if a.json:
                    Path(a.json).write_text(json.dumps(results, default=str))
                continue
            for seed in seeds:
                spec = {"n": entry["n"], "p": entry["p"], "seed": seed,
                        "kwargs": entry["kwargs"], "fast": a.fast,
                        "dask": CASES[entry["case"]][2], "dask_param": entry["dask_param"],
                        "memory_limit": a.memory_limit, "progress": a.progress}
                print(f"running {entry['case']} {entry['config']} seed {seed} ...", flush=True)
                r = child(spec, Path(tmp))
                r.update(case=entry["case"], config=entry["config"], seed=seed, n=entry["n"],
                         p=entry["p"])
                results.append(r)
                if a.json:
                    Path(a.json).write_text(json.dumps(results, default=str))
    saved = {"results": results, "before": before, "after": load(), "command": command,
             "commit": _seqbench.commit()}
    if a.json:
        Path(a.json).write_text(json.dumps(saved, default=str))
    finish(saved, a.label, a.fast or a.no_write)


def finish(saved: dict, label: str, no_write: bool) -> None:
    """Print the report of a run's results (and write the docs section unless ``no_write``)."""
    results = saved["results"]
    text = report(results, label, saved["before"], saved["after"], saved["command"],
                  saved.get("commit"))
    est = estimate(results)
    if est:
        text += "\n\nEstimate from this run (not measured): " + est + "."
    print(text, flush=True)
    if not no_write:
        from benchmarks._report import write_section

        write_section("seq_scale", text)


if __name__ == "__main__":
    main()
