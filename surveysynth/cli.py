"""The ``surveysynth`` command.

``surveysynth demo [--out FOLDER]``: the main job as it stands: design-based estimates on R's
api data, computed by surveysynth's native engine, printed beside R ``survey``'s own numbers
(live through rpy2) and samplics', with their largest relative difference.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="surveysynth", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="confidential file + CONFIG.toml -> release folder",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         description=_release_help())
    rel.add_argument("config", type=Path, help="the release configuration (TOML)")
    rel.add_argument("--quiet", action="store_true", help="no progress output")
    rel.add_argument("--check", action="store_true",
                     help="only validate the configuration against the data (no MCMC)")
    demo = sub.add_parser("demo", help="estimates on R's api data beside R survey's own")
    demo.add_argument("--out", type=Path, default=None, help="folder for the demo's outputs")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args.out)
    if args.command == "release":
        from .pipeline import ConfigError, load_config, run_release

        try:
            cfg = load_config(args.config)
            if args.check:
                print(f"{args.config}: configuration OK ({cfg.method}, {len(cfg.tables)} tables)")
                return 0
            out = run_release(cfg, quiet=args.quiet)
        except ConfigError as exc:
            print(f"surveysynth release: configuration error: {exc}", file=sys.stderr)
            return 2
        print(f"release written to {out}")
        return 0
    return 2


def _release_help() -> str:
    from .pipeline import __doc__ as doc

    return doc or ""


if __name__ == "__main__":
    sys.exit(main())
