"""What an agency would pick instead: Sequential vs AIM, MST and CART on apistrat (issue 22).

Run: python vignettes/public_use_agency.py [--fast] [--out DIR] [--epsilon E] [--seed N]

The same apistrat columns for every method: the strata ``stype`` and ten variables
(:data:`VARIABLES`: bounded scores and percentages, a count, three binaries). Methods:

* **Sequential** (``surveysynth.synth.Sequential``): risk-weighted pseudo posterior, the
  design carried (strata and fpc as collected, weights smoothed), m sets, tuned to
  ``--epsilon`` in total; its guarantee is ``rel.guarantee``.
* **AIM** and **MST** (smartnoise-synth 1.0.8, McKenna et al.): at the *same total epsilon* as
  the Sequential release reports, delta = 1e-9 (smartnoise's default). They model categorical
  data only: continuous columns are cut into 5 quantile bins whose edges are the quintiles of R's
  population frame ``apipop`` (public here, as in the weekly vignette; no budget spent on them)
  with the public bounds as outer edges; a synthetic bin is turned back into a value by a
  draw from apipop's values in that bin (the same public frame; a uniform draw in a long-tailed
  top bin such as enroll's [817, 5000) inflated the mean by half). This decoder uses the
  population's within-bin distribution, which favours AIM and MST; it is stated here. The domain (every category and bin) is declared from public
  codes, so smartnoise spends nothing on preprocessing. One fit, m samples (post-processing).
  smartnoise pins opendp < 0.15 (ours is 0.16): it runs in its own venv
  ``.venv-smartnoise`` (``make smartnoise-venv``) as a subprocess; without that venv the script
  says so and leaves the two rows out.
* **CART**: synthpop's default method written with scikit-learn's trees
  (``public_use_common.cart_synthesize``), no privacy (the no-privacy reference).

AIM, MST and CART release no design: each synthetic set gets weights N_h / n_h from the public
school-type counts of apipop (4421 / 755 / 1018) and no strata or fpc; their m sets are combined
by the full-synthesis rule. Sequential's sets carry the design and combine by its release's rule.

Measures: pMSE with all pairwise interactions and its ratio to the null expectation (on the
released values, categorical columns one-hot); NIST k-marginal for k = 2 and 3 on the binned
columns (same public bins for every method); CI overlap (Karr et al.) of five means against the
confidential design's (stratified, fpc); whether the design's SEs survive: each method's SE of
the five means per synthetic set (with its design) and combined, over the confidential SE.
pMSE and k-marginal compare records unweighted (the sample's distribution, the target of every
method here). Writes DIR/public_use_agency.md and DIR/public_use_agency.json (the numbers, full precision).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "vignettes"))

from public_use_common import (  # noqa: E402
    bin_codes,
    cart_synthesize,
    combined_means,
    k_marginal,
    md_table,
    numeric_matrix,
    overlap,
    pmse_with_ratio,
    unbin,
)

import surveysynth as ss  # noqa: E402
from surveysynth.datasets import load_api  # noqa: E402

SNVENV = ROOT / ".venv-smartnoise" / "bin" / "python"
STRATA = "stype"
STYPE_N = {"E": 4421, "H": 755, "M": 1018}
N_POP = 6194
#: synthesis order, types and public bounds
VARIABLES = [
    {"name": "yr.rnd", "type": "binary"},
    {"name": "meals", "type": "bounded", "bounds": (0, 100)},
    {"name": "ell", "type": "bounded", "bounds": (0, 100)},
    {"name": "avg.ed", "type": "bounded", "bounds": (1, 5)},
    {"name": "full", "type": "bounded", "bounds": (0, 100)},
    {"name": "enroll", "type": "count", "bounds": (0, None)},
    {"name": "api99", "type": "bounded", "bounds": (200, 1000)},
    {"name": "api00", "type": "bounded", "bounds": (200, 1000)},
    {"name": "sch.wide", "type": "binary"},
    {"name": "awards", "type": "binary"},
]
FAST_NAMES = ["yr.rnd", "meals", "enroll", "api00", "sch.wide"]
MEANS = ["api00", "api99", "meals", "ell", "enroll"]
FAST_MEANS = ["api00", "meals", "enroll"]
INTEGER = {"meals", "ell", "full", "enroll", "api99", "api00"}
DELTA = 1e-9
#: public outer edges of the bins where the synthesis has no upper bound
BIN_RANGE = {"enroll": (0, 5000)}

#: run inside .venv-smartnoise: fit AIM or MST on coded data with a public domain, sample m sets
RUNNER = r"""
import contextlib, io, json, sys, warnings
warnings.filterwarnings("ignore")
import numpy as np, pandas as pd
a = json.loads(sys.argv[1])
np.random.seed(a["seed"])
import snsynth
from snsynth import Synthesizer
from snsynth.transform import LabelTransformer, TableTransformer
from snsynth.utils import cdp_rho
df = pd.read_csv(a["input"])
cols = list(df.columns)
sizes = a["sizes"]
public = pd.DataFrame({c: np.arange(max(sizes.values())) % sizes[c] for c in cols})
tt = TableTransformer([LabelTransformer(nullable=False) for _ in cols])
tt.fit(public, epsilon=0.0)
kw = {"epsilon": a["epsilon"], "delta": a["delta"]}
if a["method"] == "aim" and a.get("rounds"):
    kw["rounds"] = a["rounds"]
s = Synthesizer.create(a["method"], **kw)
with contextlib.redirect_stdout(io.StringIO()):
    s.fit(df, transformer=tt, preprocessor_eps=0.0)
    for l in range(a["m"]):
        s.sample(len(df)).to_csv(a["output"] + f"_{l}.csv", index=False)
json.dump({"rho": float(cdp_rho(a["epsilon"], a["delta"])), "version": snsynth.__version__
           if hasattr(snsynth, "__version__") else "1.0.8"}, open(a["output"] + ".json", "w"))
"""


def public_edges(apipop: pd.DataFrame, variables: list[dict]) -> dict[str, np.ndarray]:
    """Quintile bins of each non-binary variable from the public frame apipop, outer edges at
    the public bounds (integer columns: integer edges)."""
    edges = {}
    for v in variables:
        if v["type"] == "binary":
            continue
        lo, hi = BIN_RANGE.get(v["name"], v["bounds"])
        q = np.nanquantile(apipop[v["name"]].to_numpy(float), [0.2, 0.4, 0.6, 0.8])
        if v["name"] in INTEGER:
            q = np.round(q)
        edges[v["name"]] = np.unique(np.r_[lo, q, hi])
    return edges


def smartnoise(method: str, codes: pd.DataFrame, sizes: dict[str, int], epsilon: float,
               m: int, seed: int, rounds: int | None) -> tuple[list[pd.DataFrame] | None, dict]:
    """Run AIM/MST in the smartnoise venv; (None, {"reason": ...}) when it cannot run."""
    if not SNVENV.exists():
        return None, {"reason": f"{SNVENV.relative_to(ROOT)} not found: smartnoise-synth needs "
                                "opendp < 0.15 and this project pins opendp 0.16, so it lives in "
                                "its own venv; create it with `make smartnoise-venv`."}
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "codes.csv")
        codes.to_csv(inp, index=False)
        args = {"input": inp, "output": os.path.join(tmp, method), "method": method,
                "epsilon": float(epsilon), "delta": DELTA, "m": m, "seed": seed,
                "sizes": {c: int(k) for c, k in sizes.items()}, "rounds": rounds}
        res = subprocess.run([str(SNVENV), "-c", RUNNER, json.dumps(args)], capture_output=True,
                             text=True)
        if res.returncode != 0:
            return None, {"reason": f"smartnoise {method} failed: {res.stderr.strip()[-600:]}"}
        frames = [pd.read_csv(os.path.join(tmp, f"{method}_{k}.csv")) for k in range(m)]
        info = json.loads(Path(os.path.join(tmp, f"{method}.json")).read_text())
    return [f[list(codes.columns)] for f in frames], info


def within(x: pd.Series, bounds: tuple) -> bool:
    """Every value within the public bounds (None: no bound on that side)."""
    lo, hi = bounds
    x = x.to_numpy(float)
    return bool((lo is None or (x >= lo).all()) and (hi is None or (x <= hi).all()))


def poststratified(frame: pd.DataFrame) -> ss.SurveyDesign:
    """A design with weights N_h / n_h from the public school-type counts, no strata/fpc."""
    st = frame[STRATA].astype(str)
    nh = st.map(st.value_counts())
    w = st.map(STYPE_N).to_numpy(float) / nh.to_numpy(float)
    return ss.SurveyDesign(frame.assign(w=w), weights="w")


def sequential_release(design: ss.SurveyDesign, variables: list[dict], a: argparse.Namespace):
    from surveysynth.synth.sequential import Sequential

    fast = dict(chains=2, draws=150, warmup=150, allow_unconverged=True,
                convergence={"rhat": 1.5, "ess_bulk": 20}) if a.fast else dict(
        allow_unconverged=a.allow_unconverged)
    budget = None
    if a.enroll_share is not None:
        others = [v["name"] for v in variables if v["name"] != "enroll"] + ["pw"]
        budget = {"enroll": a.enroll_share,
                  **{k: (1 - a.enroll_share) / len(others) for k in others}}
    syn = Sequential(variables=variables, public=[], target_epsilon=a.epsilon, m=a.m,
                     budget=budget,
                     population_size=N_POP, random_state=a.seed, progress=a.progress, **fast)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rel = syn.fit(design).release()
    return syn, rel


def measures(name: str, frames: list[pd.DataFrame], designs: list, kind: str, ctx: dict) -> dict:
    """Every measure of one method's m synthetic sets against the confidential data."""
    cols, cats, edges = ctx["cols"], ctx["cats"], ctx["edges"]
    orig = ctx["data"]
    pm = pmse_with_ratio(numeric_matrix(orig, cols, cats),
                         [numeric_matrix(f, cols, cats) for f in frames])
    oc = bin_codes(orig[cols], edges, cats)
    sc = [bin_codes(f[cols], edges, cats) for f in frames]
    k2, k3 = k_marginal(oc, sc, 2)["score"], k_marginal(oc, sc, 3)["score"]
    cm = combined_means(designs, ctx["means"], kind, n_original=len(orig)).set_index("variable")
    conf = ctx["conf"]
    ov = overlap(conf["ci_low"], conf["ci_high"], cm["ci_low"], cm["ci_high"])
    per_set = cm["se_per_set"] / conf["se"]
    comb = cm["se"] / conf["se"]
    return {"method": name, "pMSE": pm["pMSE"], "pMSE ratio": pm["ratio"],
            "k-marginal k=2": k2, "k-marginal k=3": k3, "CI overlap (mean)": float(np.mean(ov)),
            "CI overlap (min)": float(np.min(ov)), "SE ratio per set (mean)": float(per_set.mean()),
            "SE ratio combined (mean)": float(comb.mean()),
            "_means": cm.assign(overlap=ov, se_ratio_set=per_set, se_ratio_comb=comb)}


def main(argv=None) -> Path:  # noqa: C901 - a linear script
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="5 variables, short chains (tests)")
    ap.add_argument("--out", type=Path, default=ROOT / "vignettes" / "output")
    ap.add_argument("--epsilon", type=float, default=None, help="Sequential's target epsilon")
    ap.add_argument("--m", type=int, default=None)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--progress", action="store_true", help="Sequential's step lines")
    ap.add_argument("--enroll-share", type=float, default=None,
                    help="enroll's share of the budget (the rest in equal shares); its NB "
                         "model's bound has a floor near 1.4 at n = 200")
    ap.add_argument("--subset", action="store_true",
                    help="the fast mode's 5 variables and 3 means with full MCMC settings")
    ap.add_argument("--allow-unconverged", action="store_true",
                    help="release a Sequential fit that fails the convergence gates (the "
                         "guarantee text and this report then say so)")
    a = ap.parse_args(argv)
    a.m = a.m or (2 if a.fast else 5)
    a.epsilon = a.epsilon or (40.0 if a.fast else 60.0)
    small = a.fast or a.subset
    variables = [v for v in VARIABLES if v["name"] in FAST_NAMES] if small else VARIABLES
    means = FAST_MEANS if small else MEANS
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rng = np.random.default_rng(a.seed)

    api = load_api("apistrat")
    apipop = load_api("apipop")
    names = [v["name"] for v in variables]
    cols = [STRATA, *names]
    cats = {STRATA: ["E", "H", "M"], **{v["name"]: ["No", "Yes"] for v in variables
                                         if v["type"] == "binary"}}
    data = api[cols + ["pw", "fpc"]].copy()
    for c in cats:
        data[c] = data[c].astype(str)
    design = ss.SurveyDesign(data, strata=STRATA, fpc="fpc", weights="pw")
    conf = design.mean(means).set_index("variable")
    edges = public_edges(apipop, variables)
    ctx = {"cols": cols, "cats": cats, "edges": edges, "data": data, "means": means, "conf": conf}
    rows, notes, guarantees = [], [], {}

    # ------------------------------------------------------------------ Sequential
    t = time.perf_counter()
    syn, rel = sequential_release(design, variables, a)
    eps = float(rel.epsilon)
    frames = [d.data for d in rel.designs]
    rows.append(measures("Sequential", frames, list(rel.designs), rel.kind, ctx))
    guarantees["Sequential"] = (rel.privacy.guarantee, rel.guarantee)
    ledger = pd.DataFrame(rel.privacy.ledger)
    in_range = all(within(f[v["name"]], v["bounds"]) for f in frames for v in variables
                   if "bounds" in v)
    design_kept = all(d.strata_vars and d.fpc_vars for d in rel.designs)
    conv = getattr(syn, "convergence_", None) or {}
    if conv and not conv.get("passed", True):
        notes.append("Sequential's fit FAILED the convergence gates and was released with "
                     "allow_unconverged=True: " + "; ".join(conv.get("problems", [])))
    notes.append(f"Sequential: {time.perf_counter() - t:.0f} s; released epsilon {eps:.4g} "
                 f"(target {a.epsilon:g}); every value within its public bounds: {in_range}; "
                 f"strata and fpc in every synthetic design: {design_kept}.")

    # ------------------------------------------------------------------ AIM, MST
    reference = {c: apipop[c].dropna().to_numpy(float) for c in edges}
    sizes = {c: len(cats[c]) for c in cats} | {c: len(e) - 1 for c, e in edges.items()}
    codes = bin_codes(data[cols], edges, cats)
    sn_info: dict[str, dict] = {}
    for method in ("aim", "mst"):
        t = time.perf_counter()
        got, info = smartnoise(method, codes, sizes, eps, a.m, int(rng.integers(2**31)),
                               rounds=3 * len(cols) if a.fast else None)
        label = method.upper()
        sn_info[label] = info
        if got is None:
            notes.append(f"{label}: not run. {info['reason']}")
            print(f"{label}: not run: {info['reason']}", flush=True)
            continue
        frames = []
        for g in got:
            f = unbin(g, edges, INTEGER, rng, reference=reference)
            for c in cats:
                f[c] = np.asarray(cats[c], dtype=object)[g[c].to_numpy()]
            frames.append(f)
        rows.append(measures(label, frames, [poststratified(f) for f in frames], "full", ctx))
        text = (f"(epsilon = {eps:.4g}, delta = {DELTA:g})-differential privacy, from "
                f"rho-zCDP with rho = {info['rho']:.4g} (smartnoise-synth {info['version']}: "
                "Gaussian-noise marginals, record-level neighbours); public domain, no budget on "
                "preprocessing; no survey design")
        guarantees[label] = (f"(epsilon, delta)-DP via rho = {info['rho']:.4g} zCDP", text)
        notes.append(f"{label}: {time.perf_counter() - t:.0f} s.")

    # ------------------------------------------------------------------ CART
    t = time.perf_counter()
    cart = cart_synthesize(data, cols, list(cats), rng, m=a.m)
    rows.append(measures("CART", cart, [poststratified(f) for f in cart], "full", ctx))
    guarantees["CART"] = ("none", "none: every synthetic value is a confidential value drawn "
                          "from a tree leaf; no formal privacy guarantee")
    notes.append(f"CART: {time.perf_counter() - t:.0f} s.")

    # ------------------------------------------------------------------ report
    table = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
    table["guarantee"] = [guarantees[m][0] for m in table["method"]]
    conf_tab = conf[["estimate", "se", "ci_low", "ci_high"]].reset_index()
    per_mean = []
    for r in rows:
        mm = r["_means"]
        for v in means:
            per_mean.append({"method": r["method"], "variable": v,
                             "estimate": mm.at[v, "estimate"], "SE combined": mm.at[v, "se"],
                             "SE per set": mm.at[v, "se_per_set"], "conf SE": conf.at[v, "se"],
                             "overlap": mm.at[v, "overlap"]})
    md = ["# Public-use files from apistrat: Sequential beside what an agency would pick", "",
          "Command: `python vignettes/public_use_agency.py" + (" --fast" if a.fast else "")
          + (" --subset" if a.subset else "")
          + (" --allow-unconverged" if a.allow_unconverged else "")
          + (f" --enroll-share {a.enroll_share:g}" if a.enroll_share is not None else "")
          + f" --epsilon {a.epsilon:g}`" + (" -- **fast mode: 5 variables, short chains, "
                                            "gates lowered; a code-path check**" if a.fast else "")
          + f". m = {a.m}. Run time {time.perf_counter() - t0:.0f} s.", "",
          f"Columns (every method): `{STRATA}` and " + ", ".join(
              f"`{v['name']}` ({v['type']}{', ' + str(v['bounds']) if 'bounds' in v else ''})"
              for v in variables) + ".", "",
          f"Same total epsilon: AIM and MST get the epsilon the Sequential release reports "
          f"({eps:.4g}) with delta = {DELTA:g}. The guarantees are of different kinds (stated "
          "next to each row; full texts below): AIM/MST's is worst-case (epsilon, delta)-DP; "
          "Sequential's is the pseudo posterior's asymptotic, database-local guarantee; CART has "
          "none.", "",
          "## Utility and guarantee", "",
          md_table(table), "",
          "pMSE ratio: pMSE over its null expectation (k - 1)(1 - c)^2 c / N (1 = as good as "
          "a draw from the original's distribution). k-marginal: 1000 = identical k-way tables "
          "of the binned columns. CI overlap: the five means' combined intervals against the "
          "confidential design's. SE ratio: SE of a mean from one synthetic set (with the "
          "method's design) and from the combining rule, over the confidential design's SE.", "",
          "## The five means", "",
          "Confidential design (strata stype, fpc, weights pw):", "", md_table(conf_tab), "",
          md_table(pd.DataFrame(per_mean)), "",
          "## Guarantees (exact texts)", ""]
    md += [f"- **{k}**: {v[1]}" for k, v in guarantees.items()]
    md += ["", "## Sequential's budget per step (ledger)", "",
           md_table(ledger) if len(ledger) else "(empty)", "", "## Notes", ""]
    md += [f"- {n}" for n in notes]
    md += ["- Bins (public: apipop quintiles, public bounds outside): "
           + "; ".join(f"{c}: {list(np.round(e, 2))}" for c, e in edges.items())]
    numbers = {"epsilon": eps, "delta": DELTA, "means": means, "in_bounds": in_range,
               "design_kept": bool(design_kept),
               "rho": {k: v.get("rho") for k, v in sn_info.items()},
               "not_run": {k: v["reason"] for k, v in sn_info.items() if "reason" in v},
               "confidential": conf[["estimate", "se", "ci_low", "ci_high"]].to_dict("index"),
               "methods": table.to_dict("records"),
               "per_mean": {r["method"]: r["_means"].drop(columns=["note"], errors="ignore")
                            .to_dict("index") for r in rows},
               "guarantees": {k: v[1] for k, v in guarantees.items()}}
    (out / "public_use_agency.json").write_text(json.dumps(numbers, indent=1, default=float))
    path = out / "public_use_agency.md"
    path.write_text("\n".join(md) + "\n")
    print(f"wrote {path} in {time.perf_counter() - t0:.0f} s")
    return path


if __name__ == "__main__":
    main()
