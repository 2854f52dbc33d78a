"""Wall time of one sequential synthesis, end to end: 10 variables, n = 10,000 (issue 22).

Data (:func:`survey`): a stratified sample of n records (5 strata, unequal weights, fpc) with
ten variables of six types, each depending on the ones before it: two binaries, a 4-level
categorical, an ordinal with 3 levels, three continuous, two positive, one count.
``Sequential`` synthesizes all ten given the strata (weights smoothed, m = 5), tuned to
``--epsilon`` in total, in three MCMC configurations side by side in one run (``CONFIGS``: the
defaults, 4 chains x 1000 draws after 1000 warm-up; one chain per core; four chains of half
length). The Stan programs
are compiled (and cached) by a small untimed fit first, so the time is that of a warm cache.
Timed: fit (every step's unweighted fit, tuning fits and final fit) and release.

    python benchmarks/sequential.py          # writes the "sequential" section of docs/benchmarks.md
    python benchmarks/sequential.py --fast   # n = 1,000, short chains, prints only (tests)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

VARIABLES = [
    {"name": "female", "type": "binary"},
    {"name": "region", "type": "categorical"},
    {"name": "age", "type": "bounded", "bounds": (18, 90)},
    {"name": "educ", "type": "ordinal"},
    {"name": "employed", "type": "binary"},
    {"name": "hours", "type": "continuous"},
    {"name": "income", "type": "positive"},
    {"name": "savings", "type": "positive"},
    {"name": "score", "type": "continuous"},
    {"name": "visits", "type": "count", "bounds": (0, None)},
]


def survey(n: int, seed: int = 1) -> pd.DataFrame:
    """A stratified sample of n records with the ten variables (vectorized generator)."""
    rng = np.random.default_rng(seed)
    H = 5
    stratum = rng.integers(0, H, n)
    Nh = np.array([40_000, 25_000, 15_000, 12_000, 8_000])
    nh = np.bincount(stratum, minlength=H)
    female = (rng.random(n) < 0.5 + 0.03 * stratum).astype(int)
    region = rng.choice(["n", "e", "s", "w"], n, p=[0.3, 0.3, 0.2, 0.2])
    age = np.clip(np.round(45 + 3 * stratum + 14 * rng.standard_normal(n)), 18, 90)
    educ = np.digitize(0.02 * (age - 45) + 0.3 * female + rng.logistic(size=n), [-0.8, 0.9])
    employed = (rng.random(n) < 1 / (1 + np.exp(-(1.0 - 0.04 * (age - 45) + 0.4 * educ)))).astype(int)
    hours = np.round(employed * (38 - 4 * female) + 6 * rng.standard_normal(n), 1)
    income = np.exp(9.5 + 0.3 * educ + 0.8 * employed + 0.4 * rng.standard_normal(n))
    savings = np.exp(np.log(income) - 1.5 + 0.02 * (age - 45) + 0.8 * rng.standard_normal(n))
    score = 50 + 5 * educ - 0.1 * (age - 45) + 8 * rng.standard_normal(n)
    visits = rng.poisson(np.exp(0.5 + 0.015 * (age - 45) - 0.2 * employed))
    # base weights N_h / n_h times a nonresponse-style adjustment (weights constant within
    # strata leave a model of log w no residual variance: its sampler fails)
    w = (Nh / nh)[stratum] * (1.0 + np.exp(-(1.0 + 0.5 * rng.standard_normal(n))))
    w *= (Nh / np.bincount(stratum, weights=w, minlength=H))[stratum]
    return pd.DataFrame({
        "stratum": stratum.astype(str), "w": w, "fpc": Nh[stratum].astype(float),
        "female": female, "region": region, "age": age,
        "educ": pd.Categorical(np.array(["low", "mid", "high"])[educ],
                               categories=["low", "mid", "high"], ordered=True),
        "employed": employed, "hours": hours, "income": np.round(income, 2),
        "savings": np.round(savings, 2), "score": score, "visits": visits.astype(np.int64)})


class _Stamped:
    """stdout that prefixes each line with the seconds since the timed fit began (for the
    per-fit progress lines of ``--progress``: where the time goes, fit by fit)."""

    def __init__(self, stream) -> None:  # noqa: ANN001 - a text stream
        self.stream, self.t0, self.bol = stream, time.perf_counter(), True

    def write(self, text: str) -> int:
        out = []
        for part in text.splitlines(keepends=True):
            if self.bol:
                out.append(f"[{time.perf_counter() - self.t0:8.1f} s] ")
            out.append(part)
            self.bol = part.endswith("\n")
        self.stream.write("".join(out))
        self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):  # noqa: ANN204 - the stream's other attributes
        return getattr(self.stream, name)   # (pystan's console output reads .closed, .isatty)


def run(n: int, epsilon: float | None, fast: bool, seed: int, progress: bool = False,
        mcmc_settings: dict | None = None) -> dict:
    """Time one fit + release; returns the times, the epsilon and the convergence summary.
    ``mcmc_settings``: Sequential's chains / draws / warmup for this run (None or {}: its
    defaults, 4 chains x 1000 draws after 1000 warm-up)."""
    import surveysynth as ss
    from surveysynth.synth.sequential import Sequential

    d = ss.SurveyDesign(survey(n, seed), strata="stratum", fpc="fpc", weights="w")
    mcmc = dict(chains=2, draws=150, warmup=150, allow_unconverged=True,
                convergence={"rhat": 1.5, "ess_bulk": 20}) if fast else {}
    if mcmc_settings and not fast:
        mcmc.update(mcmc_settings)
    syn = Sequential(variables=VARIABLES, target_epsilon=epsilon, m=5, population_size=100_000,
                     random_state=seed, progress=progress, **mcmc)
    stdout = sys.stdout
    if progress:
        sys.stdout = _Stamped(stdout)
    t0 = time.perf_counter()
    from surveysynth.synth.base import ConvergenceError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        syn.fit(d)
        t1 = time.perf_counter()
        try:
            rel = syn.release()
        except ConvergenceError as exc:    # the gates refused the release: reported, not hidden
            rel = None
            print(f"release refused: {exc}", flush=True)
    t2 = time.perf_counter()
    sys.stdout = stdout
    return {"fit": t1 - t0, "release": t2 - t1, "total": t2 - t0,
            "epsilon": rel.epsilon if rel is not None else float("nan"),
            "release_obj": rel, "synth": syn}


def warm_cache() -> None:
    """Compile every Stan program Sequential uses (a tiny, untimed fit, c = 1, no tuning)."""
    run(300, None, True, 99)


def step_table(syn) -> pd.DataFrame:
    """Per step: model family, weighted fits run (tuning + final), tuning constant c,
    Delta_alpha, epsilon share and wall seconds (``timings_``), in synthesis order."""
    rows = []
    for st, r in zip(syn.steps_, syn.step_fits_, strict=True):
        roles = [t.get("role") for t in r.get("tuning", [])]
        rows.append({"step": st.name, "family": st.family, "Stan program": r.get("program"),
                     "rows in Stan": ("sums" if r.get("program") == "seq_normal_ss"
                                      else r.get("patterns")), "fits": 1 + sum(
            x not in ("unweighted",) for x in roles), "c": r.get("c"),
            "delta_alpha": r["delta_alpha"], "seconds": syn.timings_.get(st.name, np.nan),
            "s per fit": syn.timings_.get(st.name, np.nan) / (1 + sum(
                x not in ("unweighted",) for x in roles))})
    return pd.DataFrame(rows)


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(
                                 __file__))))
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def nproc() -> int | None:
    try:
        return int(subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip())
    except (OSError, ValueError):
        return None


def load() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average {os.getloadavg()}"


#: the configurations timed side by side in one run: Sequential's defaults (4 chains, two
#: rounds on 2 cores); one chain per core (2 chains, the same 1000 draws per chain); and four
#: half-length chains (the 2-chain run's 2,000 draws per fit and the same gradient work, but
#: four chains for R-hat, as Vehtari et al. 2021 recommend; refits warm up for 250)
CONFIGS = [("4 chains x 1000 draws after 1000 warm-up (defaults)", {}),
           ("2 chains x 1000 draws after 1000 warm-up (one chain per core)", {"chains": 2}),
           ("4 chains x 500 draws after 500 warm-up (half-length chains)",
            {"chains": 4, "draws": 500, "warmup": 500})]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--epsilon", type=float, default=50.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--progress", action="store_true",
                    help="print every fit of every step, stamped with the seconds since start")
    a = ap.parse_args(argv)
    n = a.n or (1000 if a.fast else 10_000)
    warm_cache()
    configs = [("chains 2 x 150 draws (fast mode)", {})] if a.fast else CONFIGS
    types = sorted({v["type"] for v in VARIABLES})
    body = [
        "### Sequential synthesis (fit + release, warm Stan cache)", "",
        f"`benchmarks/sequential.py`: n = {n:,} records (5 strata, fpc, unequal weights), "
        f"{len(VARIABLES)} variables of {len(types)} types ({', '.join(types)}) + the weights "
        f"step (weights smoothed), m = 5, target epsilon {a.epsilon:g}; each step: an unweighted "
        "fit, tuning fits and a final fit (warm-started refits warm up for half the unweighted "
        "fit's warm-up). Stan is given the distinct (x, y) "
        "patterns with summed alphas, and untruncated normals their weighted sufficient "
        "statistics, and steps with >= 1,000 rows sample whitened coefficients (all exact; "
        "docs/sequential.md). Goal: under 5 minutes. The configurations in "
        "one run, one after the other.", "",
        "| MCMC per fit | fit s | release s | **total s** | under 5 min | epsilon | "
        "convergence gates | max R-hat | min bulk ESS | divergent |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    tables = []
    before = load()
    for label, settings in configs:
        r = run(n, a.epsilon, a.fast, a.seed, a.progress, settings)
        rel, syn = r["release_obj"], r["synth"]
        cv = syn.convergence_
        body.append(f"| {label} | {r['fit']:.1f} | {r['release']:.1f} | **{r['total']:.1f}** | "
                    + (f"{r['total'] < 300}" if rel is not None else "False (refused)") + " | "
                    + (f"{rel.epsilon:.4g}" if rel is not None else "refused (gates)") + " | "
                    f"{'passed' if cv['passed'] else 'FAILED'} | {cv['max_rhat']:.4f} | "
                    f"{cv['min_ess_bulk']:.0f} | {cv['divergent']} |")
        steps = step_table(syn)
        cols = list(steps.columns)
        tables += ["", f"Per step, {label}:", "",
                   "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        tables += ["| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v)
                                     for v in row) + " |"
                   for row in steps[cols].itertuples(index=False)]
        if not cv["passed"]:
            tables += ["", "Convergence problems: " + "; ".join(cv["problems"])]
    after = load()
    body += ["", f"Load before: `{before}`; after: `{after}`. `nproc` = "
             f"{os.cpu_count() if nproc() is None else nproc()}; code at commit {commit()}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."]
    text = "\n".join(body + tables)
    print(text, flush=True)
    if not a.fast:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from benchmarks._report import write_section

        write_section("sequential", text)


if __name__ == "__main__":
    main()
