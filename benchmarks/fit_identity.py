"""Seeded releases of every fitting synthesizer, written to a folder and compared byte for byte
(issue 38 item 1: a refactoring of the fitting engine and tuner must not change a seeded
release).

    python benchmarks/fit_identity.py make OUT_DIR [--only NAME ...] [--n-jobs K]
    python benchmarks/fit_identity.py compare DIR_A DIR_B

``make`` runs FBS, FBP, PBP (unclustered, with tuning to a target), FBS on apiclus2
(clustered, PSU random intercepts), Sequential with three variables of different types
(unclustered apistrat and clustered apiclus2), and the risk-weighted NB (marginal
identification-risk weights) and mixture (unweighted) synthesizers, with short chains and fixed
seeds. For each case it writes the m synthetic data sets as CSV and ``facts.json`` (achieved
Delta_alpha, c, epsilon, or the error message when the fit is refused). ``compare`` lists every
file that differs (exit code 1) or says they are identical. The chains are short on purpose:
the point is the bytes, not the quality of the fits.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from surveysynth.datasets import load_api, sdr_population, sdr_sample  # noqa: E402
from surveysynth.datasets.risk import ce_like, nb_mixture  # noqa: E402
from surveysynth.design import SurveyDesign  # noqa: E402
from surveysynth.synth import (  # noqa: E402
    FBP,
    FBS,
    PBP,
    MixtureSynthesizer,
    NBSynthesizer,
    Sequential,
)

PP = dict(chains=2, draws=120, warmup=150, progress=False, allow_unconverged=True)
SEQ = dict(chains=2, draws=100, warmup=120, allow_unconverged=True, progress=False)
SEQ_VARS = [{"name": "sch.wide", "type": "binary"},
            {"name": "meals", "type": "count", "bounds": (0, 100)},
            {"name": "api00", "type": "bounded", "bounds": (200, 1000)}]


def _sdr(n: int, seed: int) -> SurveyDesign:
    return sdr_sample(sdr_population(seed=2021), n=n, seed=seed)


def _api(name: str) -> SurveyDesign:
    d = load_api(name)
    if name == "apiclus2":
        return SurveyDesign(d, ids="~dnum+snum", weights="pw", fpc="~fpc1+fpc2")
    return SurveyDesign(d, strata="stype", weights="pw", fpc="fpc")


def _cases() -> dict[str, Callable[[dict], tuple[Any, SurveyDesign]]]:
    """name -> (extra settings -> (unfitted synthesizer, design))."""
    return {
        "fbs": lambda kw: (FBS("salary", ["field", "gender"], population_size=100_000,
                               target_lipschitz=3.4, m=2, random_state=11, **PP), _sdr(400, 7)),
        "fbp": lambda kw: (FBP("salary", ["field", "gender"], population_size=100_000,
                               target_lipschitz=3.4, m=2, random_state=12, **PP), _sdr(400, 7)),
        "pbp": lambda kw: (PBP("salary", ["field", "gender"], population_size=100_000,
                               target_epsilon=20.0, m=2, random_state=13, **PP), _sdr(300, 8)),
        "fbs_clustered": lambda kw: (FBS("api00", ["stype"], log=True, target_epsilon=30.0, m=2,
                                         random_state=14, **PP), _api("apiclus2")),
        "seq": lambda kw: (Sequential(variables=SEQ_VARS, public=["stype"], target_epsilon=30.0,
                                      m=2, random_state=15, **SEQ, **kw), _api("apistrat")),
        "seq_clustered": lambda kw: (Sequential(variables=SEQ_VARS, public=["stype"],
                                                target_epsilon=30.0, m=2, random_state=16,
                                                **SEQ, **kw), _api("apiclus2")),
        "pbp_main": lambda kw: (PBP("salary", ["field", "gender"], effects="main",
                                    population_size=100_000, target_epsilon=20.0, m=2,
                                    random_state=19, **PP), _sdr(300, 8)),
        "fbp_c": lambda kw: (FBP("salary", ["field", "gender"], c=0.8, m=2, random_state=20,
                                 **PP), _sdr(300, 9)),
        "nb": lambda kw: (NBSynthesizer("y", alpha="marginal", known=[], r=0.2, m=2,
                                        random_state=17, chains=2, draws=150, warmup=150,
                                        allow_unconverged=True, progress=False),
                          nb_mixture(300, seed=2024)),
        "mixture": lambda kw: (MixtureSynthesizer("income", ["age", "earner"], K=2,
                                                  transform="log", shift=10_000.0,
                                                  categorical=["earner"], m=2, random_state=18,
                                                  chains=2, draws=100, warmup=100,
                                                  allow_unconverged=True, log_lik=True,
                                                  progress=False), ce_like(200, seed=1)),
    }


def _facts(syn: Any, rel: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"epsilon": getattr(rel, "epsilon", None)}
    for k in ("delta_alpha_", "c_", "delta_alpha_steps_"):
        if hasattr(syn, k):
            out[k] = getattr(syn, k)
    fits = getattr(syn, "step_fits_", None)
    if fits:
        out["step_c"] = [r["c"] for r in fits]
        keep = ("step", "c", "delta_alpha", "role")   # not seconds (not reproducible)
        out["step_tuning"] = [[{k: row.get(k) for k in keep} for row in r["tuning"]]
                              for r in fits]
    tuning = getattr(syn, "tuning_", None)
    if tuning is not None:
        out["tuning"] = tuning.drop(columns=["seconds"], errors="ignore").to_dict("records")
    return out


def make(out: Path, only: list[str] | None, extra: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, build in _cases().items():
        if only and name not in only:
            continue
        folder = out / name
        folder.mkdir(exist_ok=True)
        syn, data = build(extra if name.startswith("seq") else {})
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                syn.fit(data)
                rel = syn.release()
            for i, d in enumerate(rel.designs):
                d.data.to_csv(folder / f"set{i}.csv", index=False)
            facts = _facts(syn, rel)
        except Exception as exc:  # a refusal is a result too: same message before and after
            facts = {"error": f"{type(exc).__name__}: {exc}"}
        (folder / "facts.json").write_text(json.dumps(facts, indent=1, sort_keys=True,
                                                      default=repr))
        print(name, {k: v for k, v in facts.items() if k in ("epsilon", "delta_alpha_", "c_",
                                                             "error")}, flush=True)


def compare(a: Path, b: Path) -> int:
    files = sorted({p.relative_to(a) for p in a.rglob("*") if p.is_file()}
                   | {p.relative_to(b) for p in b.rglob("*") if p.is_file()})
    bad = [str(f) for f in files
           if not ((a / f).is_file() and (b / f).is_file()
                   and filecmp.cmp(a / f, b / f, shallow=False))]
    print(f"{len(files)} files; " + ("identical" if not bad else f"{len(bad)} differ: {bad}"))
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("out", type=Path)
    mk.add_argument("--only", nargs="*")
    mk.add_argument("--n-jobs", type=int, default=None, help="Sequential's n_jobs (if it has one)")
    cp = sub.add_parser("compare")
    cp.add_argument("a", type=Path)
    cp.add_argument("b", type=Path)
    args = ap.parse_args()
    if args.cmd == "compare":
        return compare(args.a, args.b)
    make(args.out, args.only, {} if args.n_jobs is None else {"n_jobs": args.n_jobs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
