"""The ``surveysynth`` command.

``surveysynth release CONFIG.toml``: a confidential file -> a release folder (see
:mod:`surveysynth.pipeline`).

``surveysynth demo [--out FOLDER]``: the main job on embedded data. (1) Design-based estimates
on R's api data by surveysynth's native engine beside R ``survey``'s own numbers (live through
rpy2) and samplics'. (2) A whole private release of the SDR-like simulation of seed 001: a
stratified PPS sample of 1,000 records (written as FOLDER/input/sdr_sample.csv, standing in for
the confidential file), the FBS synthesizer tuned to a Lipschitz bound of 3.4 with m = 3, and the
release folder FOLDER/release with tables, manifest and report. ``--quick`` uses fewer MCMC
draws (for tests).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from .release_config import SYNTHESIZERS

DEMO_DESIGNS = [
    ("apistrat", "stratified, fpc", dict(strata="stype", weights="pw", fpc="fpc")),
    ("apiclus1", "one-stage cluster, fpc", dict(ids="dnum", weights="pw", fpc="fpc")),
    ("apiclus2", "two-stage cluster, fpc1+fpc2", dict(ids="~dnum+snum", fpc="~fpc1+fpc2")),
]


def _demo(out: Path | None) -> int:
    import surveysynth as ss
    from surveysynth.datasets import load_api

    rows = []
    for table, label, spec in DEMO_DESIGNS:
        d = ss.SurveyDesign(load_api(table), **spec)
        for what, call in [
            ("mean api00", lambda d, e: d.mean("api00", engine=e)),
            ("total enroll", lambda d, e: d.total("enroll", engine=e, na_rm=True)),
            ("mean api00 by stype", lambda d, e: d.mean("api00", by="stype", engine=e)),
            ("median api00", lambda d, e: d.quantile("api00", 0.5, engine=e)),
        ]:
            native = call(d, "native")
            r = call(d, "r")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    samp = call(d, "samplics")["se"].to_numpy()
            except NotImplementedError:
                samp = np.full(native.shape[0], np.nan)
            for i in range(native.shape[0]):
                dom = f" [{native['stype'].iloc[i]}]" if "stype" in native else ""
                rows.append({
                    "design": f"{table} ({label})",
                    "statistic": what + dom,
                    "estimate": native["estimate"].iloc[i],
                    "R estimate": r["estimate"].iloc[i],
                    "SE": native["se"].iloc[i],
                    "R SE": r["se"].iloc[i],
                    "samplics SE": samp[i],
                })
    table = pd.DataFrame(rows)
    rel = np.max(np.abs(np.r_[table["estimate"] / table["R estimate"] - 1,
                              table["SE"] / table["R SE"] - 1]))
    with pd.option_context("display.width", 160, "display.max_columns", 20,
                           "display.float_format", "{:,.6f}".format):
        print(table.to_string(index=False))
    print(f"\nlargest relative difference, surveysynth native vs R survey: {rel:.2e}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "estimates_vs_R.csv", index=False)
        print(f"written: {out / 'estimates_vs_R.csv'}")
    return 0 if rel < 1e-9 else 1


DEMO_CONFIG = """\
# surveysynth demo: FBS release of the SDR-like simulation (seed 001, Section 3.1)
[input]
path = "input/sdr_sample.csv"

[design]
strata = "field"
weights = "weight"

[synthesizer]
method = "FBS"
outcome = "salary"
predictors = ["field", "gender"]
log = true
target_lipschitz = 3.4
m = 3
# the population size is a public total (seed 001's N); the released weights sum to it
population_size = 100000
init = {{ chains = {chains}, draws = {draws}, warmup = {draws}{gates} }}

[[tables]]
name = "count_by_field_gender"
rows = "field"
cols = "gender"
stat = "total"

[[tables]]
name = "mean_salary_by_field_gender"
rows = "field"
cols = "gender"
value = "salary"
stat = "mean"

[report]
known = ["field", "gender"]
r = 0.2
# attack-based evidence: a second sample of the population the synthesizer never saw
holdout = "input/sdr_holdout.csv"

[output]
folder = "release"
overwrite = true
"""


def _demo_release(out: Path, quick: bool, seed: int | None = None) -> int:
    from .datasets import sdr_population, sdr_sample
    from .pipeline import load_config, run_release

    out.mkdir(parents=True, exist_ok=True)
    (out / "input").mkdir(exist_ok=True)
    pop = sdr_population(seed=2021)
    design = sdr_sample(pop, n=1000, seed=2021)
    design.data.to_csv(out / "input" / "sdr_sample.csv", index=False)
    # the holdout of the confidential report's attacks: a second sample from the population
    # without the first sample's units (records the synthesizer never saw)
    on = ["field", "gender", "salary"]
    seen = pop.merge(design.data[on], on=on, how="left", indicator=True)
    rest = pop.loc[(seen["_merge"] == "left_only").to_numpy()].reset_index(drop=True)
    sdr_sample(rest, n=1000, seed=2022).data.to_csv(out / "input" / "sdr_holdout.csv",
                                                    index=False)
    cfg = out / "release.toml"
    # --quick (tests) runs short chains, so its gates are lowered (bulk ESS 100, R-hat 1.05); the
    # public manifest records the gates used
    gates = ", convergence = { ess_bulk = 100, rhat = 1.05 }" if quick else ""
    text = DEMO_CONFIG.format(chains=2 if quick else 4, draws=400 if quick else 1000, gates=gates)
    if seed is not None:
        text = text.replace("m = 3\n", f"m = 3\nseed = {int(seed)}\n")
    cfg.write_text(text)
    folder = run_release(load_config(cfg))
    manifest = json.loads((folder / "public" / "manifest.json").read_text())
    print(f"\nrelease: {folder}")
    print(f"  method {manifest['method']}, {manifest['kind']} synthesis, m = {manifest['m']}")
    print(f"  Lipschitz bound Delta_alpha = {manifest['delta_alpha']:.4f}, "
          f"epsilon = {manifest['epsilon']:.3g}")
    print(f"  guarantee: {manifest['guarantee']}")
    print(f"  publish only: {folder / 'public'}")
    print(f"  disclosure review (confidential): {folder / 'confidential' / 'report.html'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="surveysynth", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="confidential file + CONFIG.toml -> release folder",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         description=_release_help())
    rel.add_argument("config", type=Path, nargs="?",
                     help="the release configuration (TOML; keys: docs/release-config.md)")
    loud = rel.add_mutually_exclusive_group()
    loud.add_argument("--quiet", action="store_true", help="no progress output (errors only)")
    loud.add_argument("--verbose", action="store_true",
                      help="also the synthesizer's own progress (pystan, tuning fits)")
    rel.add_argument("--check", action="store_true",
                     help="only validate the configuration against the data (no MCMC)")
    rel.add_argument("--example", metavar="METHOD",
                     help=f"print a complete example config for METHOD ({', '.join(SYNTHESIZERS)}) "
                          "and exit; it runs on the data of "
                          "surveysynth.release_config.example_data()")
    rel.add_argument("--schema-doc", action="store_true",
                     help="print the configuration reference (docs/release-config.md) and exit")
    demo = sub.add_parser("demo", help="estimates on R's api data beside R survey's own")
    demo.add_argument("--out", type=Path, default=Path("release-demo"),
                      help="folder for the demo's outputs (default: release-demo)")
    demo.add_argument("--quick", action="store_true", help="fewer MCMC draws (for tests)")
    demo.add_argument("--seed", type=int, default=None,
                      help="seed the release (tests, internal reruns): a secret key, never "
                           "written to the public part; default: secret OS entropy")
    demo.add_argument("--skip-release", action="store_true",
                      help="only the estimates beside R (no synthesis)")
    aud = sub.add_parser("audit", help="neighbouring-database audit of a DP mechanism: empirical "
                                       "epsilon lower bound beside the claim")
    aud.add_argument("mechanism", choices=["jointexp", "kng-exact", "laplace"])
    aud.add_argument("--d-in", required=True, help="comma-separated values of D_in, e.g. 1,2,2,2")
    aud.add_argument("--d-out", required=True, help="D_out: D_in with one record replaced")
    aud.add_argument("--epsilon", type=float, default=1.0)
    aud.add_argument("--lower", type=float, default=0.0, help="public lower bound")
    aud.add_argument("--upper", type=float, default=100.0, help="public upper bound")
    aud.add_argument("--transform", default="identity", choices=["identity", "log", "pareto"])
    aud.add_argument("--quantiles", default=None, help="comma-separated (default: the paper's 49)")
    aud.add_argument("--runs", type=int, default=500, help="runs per side")
    aud.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if args.command == "audit":
        from .audit import audit_mechanism

        def floats(text: str) -> list[float]:
            return [float(v) for v in text.split(",") if v.strip()]

        res = audit_mechanism(args.mechanism, floats(args.d_in), floats(args.d_out),
                              epsilon=args.epsilon, lower=args.lower, upper=args.upper,
                              transform=args.transform, runs=args.runs, seed=args.seed,
                              quantiles=None if args.quantiles is None else floats(args.quantiles))
        print(res.summary())
        return 0 if res.passed else 1
    if args.command == "demo":
        rc = _demo(args.out)
        if rc or args.skip_release:
            return rc
        return _demo_release(args.out, args.quick, args.seed)
    if args.command == "release":
        return _release(args, parser)
    return 2


def _descendants(pid: int) -> list[int]:
    """The process ids of every descendant of ``pid`` (Linux /proc; empty elsewhere)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(c) for c in task.read_text().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


def _stop_now(signum: int, frame: object) -> None:
    """Ctrl-C / SIGTERM during ``surveysynth release``: end the processes this run started
    (httpstan's sampling workers, which ignore SIGINT; a compiler), remove the unfinished
    release folder, print one line and exit at once. Exiting from the handler, not by
    KeyboardInterrupt: pystan catches KeyboardInterrupt inside its event loop (and may finish
    the fit anyway), asyncio prints the cancelled tasks' tracebacks, and the interpreter's exit
    would wait for the workers' chains to finish."""
    import signal

    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        from .pipeline import remove_partial_folders

        remove_partial_folders()
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    with contextlib.suppress(OSError):
        os.write(_STDERR_FD if _STDERR_FD is not None else 2,
                 f"\nsurveysynth release: stopped by {name}; nothing was released (no output "
                 "folder written).\n".encode())
    os._exit(128 + int(signum))


#: a copy of the stderr descriptor taken before the run (a Stan build sends fd 2 to a log)
_STDERR_FD: int | None = None


def _release(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The release command. Ctrl-C and SIGTERM stop it within seconds with one line and exit
    status 130 (SIGINT) or 143 (SIGTERM), as a shell reports a process ended by the signal:
    see :func:`_stop_now`."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # handlers: main thread only
        return _release_run(args, parser)
    global _STDERR_FD
    _STDERR_FD = os.dup(2)
    previous = {s: signal.signal(s, _stop_now) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _release_run(args, parser)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        os.close(_STDERR_FD)
        _STDERR_FD = None


def _release_run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .pipeline import ConfigError, load_config, run_release
    from .release_config import example_config, render_markdown

    try:
        if args.schema_doc:
            print(render_markdown())
            return 0
        if args.example:
            print(example_config(args.example), end="")
            return 0
        if args.config is None:
            parser.error("release: give CONFIG.toml (or --example METHOD, --schema-doc)")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeprecationWarning)
            cfg = load_config(args.config)
        for w in caught:  # deprecated keys: said on the console (hidden by Python's default)
            if issubclass(w.category, DeprecationWarning):
                print(f"surveysynth release: {w.message}", file=sys.stderr)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if args.check:
            print(f"{args.config}: configuration OK ({cfg.method}, {len(cfg.tables)} tables)")
            return 0
        run_release(cfg, quiet=args.quiet, verbosity=2 if args.verbose else 1)
    except ConfigError as exc:
        print(f"surveysynth release: configuration error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a fit that may not be released: say why, no traceback
        from .synth.base import ConvergenceError
        from .synth.pseudo_posterior import TargetUnreachableError

        if not isinstance(exc, (ConvergenceError, TargetUnreachableError)):
            raise
        print(f"surveysynth release: not released: {exc}", file=sys.stderr)
        return 3
    return 0


def _release_help() -> str:
    from .pipeline import __doc__ as doc

    return (doc or "") + (
        "\nThe configuration's keys, types, defaults and allowed values, and a complete "
        "example per synthesizer: docs/release-config.md (`surveysynth release --schema-doc`; "
        "`surveysynth release --example FBS`).\n")


if __name__ == "__main__":
    sys.exit(main())
