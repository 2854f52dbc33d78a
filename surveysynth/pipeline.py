"""The release pipeline: one TOML file in, one release folder out.

``surveysynth release CONFIG.toml`` reads a confidential file (CSV or Parquet), builds its
survey design, runs a synthesizer to its privacy target, and writes a folder a disclosure
review board can read:

    <output.folder>/
      manifest.json       method, epsilon and the exact guarantee text, Delta, m, seeds,
                          package and dependency versions, input SHA-256, the config, file list
      synthetic/          the m synthetic data sets (Parquet) and their release manifest
      tables/<name>.csv   each published table, from the synthetic release (SE, CV, CI, flags)
      tables/<name>.xlsx
      report.html         risk, utility and MCMC diagnostics, pictures embedded as PNG
      figures/*.png       the same pictures as files

What the folder never holds: a confidential record value, weight, per-record risk weight or
bound. The report compares the release with the confidential data only through aggregates that
are about the comparison (relative differences of cell estimates, CI overlap, ECDF and
propensity-score distances, identification-risk summaries).

Every config error is found before any MCMC starts and names the key and the fix. The folder is
written under a temporary name beside the target and renamed into place at the end, so a run
that fails or is killed leaves no release folder (at most a hidden ``.partial-*`` folder, which
the next run to the same target removes).
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SYNTHESIZERS = ("FBS", "FBP", "PBP", "quantile", "mixture", "nb")
_TOP_KEYS = {"input", "design", "synthesizer", "tables", "report", "output"}
_DESIGN_KEYS = {"ids", "strata", "weights", "probs", "fpc", "nest", "lonely_psu"}
_SYNTH_KEYS = {
    "method", "outcome", "predictors", "variables", "log", "target_epsilon", "target_lipschitz",
    "epsilon", "m", "seed", "init", "fit", "known", "r", "weights",
}
_TABLE_KEYS = {"name", "rows", "cols", "value", "stat", "cv_max", "n_min"}


class ConfigError(ValueError):
    """The release configuration is wrong; the message names the key and the fix."""


@dataclass
class TableSpec:
    name: str
    rows: list[str]
    cols: list[str]
    value: str | None
    stat: str
    cv_max: float | None = 0.30
    n_min: float | None = 30


@dataclass
class ReleaseConfig:
    """A validated release configuration (see the module docstring for the file format)."""

    input_path: Path
    design: dict[str, Any]
    method: str
    synth: dict[str, Any]
    tables: list[TableSpec]
    output: Path
    overwrite: bool = False
    known: list[str] = field(default_factory=list)
    r: float = 0.2
    source: dict[str, Any] = field(default_factory=dict)


def _as_list(x: Any) -> list[str]:
    if x is None:
        return []
    return [x] if isinstance(x, str) else list(x)


def _unknown(section: dict, allowed: set, where: str) -> None:
    extra = sorted(set(section) - allowed)
    if extra:
        raise ConfigError(
            f"{where}: unknown key(s) {extra}. Allowed: {sorted(allowed)}. Fix: check the spelling."
        )


def load_config(path: str | Path) -> ReleaseConfig:
    """Parse and check a release TOML file against the data it names (no MCMC is run)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} not found.")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}).") from exc
    return check_config(raw, base=path.parent)


def check_config(raw: dict[str, Any], base: Path = Path(".")) -> ReleaseConfig:
    """Validate a parsed configuration; every error names its key."""
    _unknown(raw, _TOP_KEYS, "config")
    for key in ("input", "design", "synthesizer", "output"):
        if key not in raw:
            raise ConfigError(f"[{key}] section missing. Fix: add it (see `surveysynth release --help`).")
    inp = raw["input"]
    _unknown(inp, {"path"}, "[input]")
    if "path" not in inp:
        raise ConfigError("input.path missing: the confidential CSV or Parquet file.")
    input_path = (base / inp["path"]).resolve()
    if not input_path.exists():
        raise ConfigError(f"input.path: {str(input_path)!r} does not exist.")
    if input_path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise ConfigError(f"input.path: {input_path.name!r} must be .csv or .parquet.")
    data = read_input(input_path)
    columns = set(data.columns)

    design = dict(raw["design"])
    _unknown(design, _DESIGN_KEYS, "[design]")

    syn = dict(raw["synthesizer"])
    _unknown(syn, _SYNTH_KEYS, "[synthesizer]")
    method = syn.get("method")
    if method not in SYNTHESIZERS:
        raise ConfigError(
            f"synthesizer.method = {method!r} is not a known synthesizer. Choose one of "
            f"{list(SYNTHESIZERS)}."
        )
    m = syn.get("m", 1)
    if not isinstance(m, int) or m < 1:
        raise ConfigError(f"synthesizer.m = {m!r}: must be a positive integer (number of synthetic sets).")
    for key in ("target_epsilon", "target_lipschitz", "epsilon"):
        if key in syn and (not isinstance(syn[key], (int, float)) or syn[key] <= 0):
            raise ConfigError(f"synthesizer.{key} = {syn[key]!r}: must be a number > 0.")
    if method in ("FBS", "FBP", "PBP"):
        if ("target_epsilon" in syn) == ("target_lipschitz" in syn):
            raise ConfigError(
                f"synthesizer: {method} needs exactly one of target_epsilon or target_lipschitz."
            )
    if method == "quantile" and "epsilon" not in syn:
        raise ConfigError("synthesizer.epsilon missing: the total epsilon of the KNG synthesis.")
    needed = []
    if method == "quantile":
        variables = _as_list(syn.get("variables"))
        if not variables:
            raise ConfigError("synthesizer.variables missing: the variables to synthesize, in order.")
        needed += [("synthesizer.variables", v) for v in variables]
    else:
        if "outcome" not in syn:
            raise ConfigError("synthesizer.outcome missing: the confidential variable to synthesize.")
        needed.append(("synthesizer.outcome", syn["outcome"]))
        needed += [("synthesizer.predictors", v) for v in _as_list(syn.get("predictors"))]
    for key in ("ids", "strata", "weights", "probs", "fpc"):
        spec = design.get(key)
        if isinstance(spec, str) and spec.strip().startswith("~"):
            from ._validate import parse_vars

            names = parse_vars(spec, key)
        else:
            names = _as_list(spec)
        needed += [(f"design.{key}", v) for v in names]
    for key, col in needed:
        if col not in columns:
            raise ConfigError(
                f"{key}: column {col!r} is not in {input_path.name} (columns: "
                f"{sorted(columns)[:15]}). Fix: correct the name."
            )

    tables = []
    for i, t in enumerate(raw.get("tables", [])):
        where = f"tables[{i}]"
        _unknown(t, _TABLE_KEYS, where)
        spec = TableSpec(
            name=str(t.get("name", f"table_{i + 1}")),
            rows=_as_list(t.get("rows")),
            cols=_as_list(t.get("cols")),
            value=t.get("value"),
            stat=t.get("stat", "total"),
            cv_max=t.get("cv_max", 0.30),
            n_min=t.get("n_min", 30),
        )
        if not spec.rows:
            raise ConfigError(f"{where}.rows missing: the classification variable(s) of the rows.")
        if spec.stat not in ("total", "mean"):
            raise ConfigError(f"{where}.stat = {spec.stat!r}: choose 'total' or 'mean'.")
        if spec.stat == "mean" and spec.value is None:
            raise ConfigError(f"{where}.value missing: stat='mean' needs the variable to average.")
        for key, v in [("rows", x) for x in spec.rows] + [("cols", x) for x in spec.cols] + (
            [("value", spec.value)] if spec.value else []
        ):
            if v not in columns:
                raise ConfigError(
                    f"{where}.{key}: {v!r} is not a variable of the data. Fix: use one of "
                    f"{sorted(columns)[:15]}."
                )
        if not spec.name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"{where}.name = {spec.name!r}: use letters, digits, - and _ only.")
        tables.append(spec)

    _construct(method, syn)
    rep = raw.get("report", {})
    _unknown(rep, {"known", "r"}, "[report]")
    known = _as_list(rep.get("known", syn.get("known", syn.get("predictors"))))
    for k in known:
        if k not in columns:
            raise ConfigError(f"report.known: {k!r} is not a column of the data.")
    r = rep.get("r", 0.2)
    if not isinstance(r, (int, float)) or r <= 0:
        raise ConfigError(f"report.r = {r!r}: the identification-risk radius must be > 0.")
    out = raw["output"]
    _unknown(out, {"folder", "overwrite"}, "[output]")
    if "folder" not in out:
        raise ConfigError("output.folder missing: where the release folder goes.")
    return ReleaseConfig(
        input_path=input_path, design=design, method=method, synth=syn, tables=tables,
        output=(base / out["folder"]).resolve(), overwrite=bool(out.get("overwrite", False)),
        known=known, r=float(r), source=raw,
    )


def read_input(path: Path) -> pd.DataFrame:
    if path.suffix.lower() == ".csv":
        return pd.read_csv(path)
    return pd.read_parquet(path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _versions() -> dict[str, str]:
    from importlib import metadata

    from . import __version__

    out = {"surveysynth": __version__, "python": sys.version.split()[0]}
    for pkg in ("numpy", "scipy", "pandas", "pyarrow", "pystan", "httpstan", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[surveysynth release] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- synthesis
def _construct(method: str, s: dict[str, Any]):
    """Build the synthesizer object (cheap: no data, no MCMC) so option errors surface early."""
    init = dict(s.get("init", {}))
    if not isinstance(init, dict) or not isinstance(s.get("fit", {}), dict):
        raise ConfigError("synthesizer.init and synthesizer.fit must be tables of options.")
    try:
        if method in ("FBS", "FBP", "PBP"):
            from . import synth

            return getattr(synth, method)(outcome=s["outcome"], predictors=_as_list(s.get("predictors")),
                                          log=s.get("log", True), **init)
        if method == "quantile":
            from .synth import QuantileSynthesizer

            init.setdefault("progress", False)
            return QuantileSynthesizer(variables=_as_list(s["variables"]), epsilon=s["epsilon"],
                                       seed=s.get("seed"), **init)
        from .synth import MixtureSynthesizer, NBSynthesizer

        cls = MixtureSynthesizer if method == "mixture" else NBSynthesizer
        return cls(outcome=s["outcome"], predictors=_as_list(s.get("predictors")), **init)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"synthesizer.init: {exc}") from exc


def fit_and_release(cfg: ReleaseConfig, design: Any, progress: bool = True):
    """Run the configured synthesizer; returns (fit object, SyntheticRelease)."""
    s = cfg.synth
    init = dict(s.get("init", {}))
    fit_opts = dict(s.get("fit", {}))
    seed = s.get("seed")
    m = s.get("m", 1)
    if cfg.method in ("FBS", "FBP", "PBP"):
        from . import synth

        cls = getattr(synth, cfg.method)
        syn = cls(outcome=s["outcome"], predictors=_as_list(s.get("predictors")),
                  log=s.get("log", True), **init)
        target = ({"target_epsilon": s["target_epsilon"]} if "target_epsilon" in s
                  else {"target_lipschitz": s["target_lipschitz"]})
        fit = syn.fit(design, m=m, seed=seed, progress=progress, **target, **fit_opts)
        return fit, fit.release()
    if cfg.method == "quantile":
        from .synth import QuantileSynthesizer

        init.setdefault("progress", progress)
        syn = QuantileSynthesizer(variables=_as_list(s["variables"]), epsilon=s["epsilon"],
                                  seed=seed, **init)
        syn.fit(design)
        return syn, syn.release(m)
    from .synth import MixtureSynthesizer, NBSynthesizer

    cls = MixtureSynthesizer if cfg.method == "mixture" else NBSynthesizer
    syn = cls(outcome=s["outcome"], predictors=_as_list(s.get("predictors")), **init)
    fit = syn.fit(design, weights=s.get("weights", "pairwise"), known=cfg.known, r=s.get("r", cfg.r),
                  seed=seed, m=m, **fit_opts)
    return fit, fit.release()


# ----------------------------------------------------------------------------- report
def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _utility_sections(cfg, design, release, figures) -> list[str]:
    """Comparisons of the release with the confidential data, as aggregates only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .tables import tabulate

    html = ["<h2>Utility</h2>"]
    for t in cfg.tables:
        conf = tabulate(design, t.rows, t.cols or None, t.value, t.stat).long
        syn = tabulate(release, t.rows, t.cols or None, t.value, t.stat).long
        keys = [c for c in conf.columns if c in t.rows + t.cols] + (["block"] if "block" in conf else [])
        merged = conf.merge(syn, on=keys, suffixes=("_c", "_s"))
        rel = (merged["estimate_s"] - merged["estimate_c"]) / merged["estimate_c"].abs()
        lo = np.maximum(merged["ci_low_c"], merged["ci_low_s"])
        hi = np.minimum(merged["ci_high_c"], merged["ci_high_s"])
        overlap = 0.5 * (np.clip(hi - lo, 0, None) / (merged["ci_high_c"] - merged["ci_low_c"])
                         + np.clip(hi - lo, 0, None) / (merged["ci_high_s"] - merged["ci_low_s"]))
        html.append(
            f"<h3>Table {t.name}</h3><p>{len(merged)} cells. Relative difference of the release "
            f"from the confidential estimate: median |diff| {np.nanmedian(np.abs(rel)):.3f}, "
            f"max {np.nanmax(np.abs(rel)):.3f}. CI overlap (Karr et al. 2006): mean "
            f"{np.nanmean(overlap):.3f}, min {np.nanmin(overlap):.3f}.</p>"
        )
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.hist(np.asarray(rel[np.isfinite(rel)]), bins=20, color="#4477aa")
        ax.set_xlabel("relative difference, release vs confidential")
        ax.set_ylabel("cells")
        ax.set_title(f"{t.name}")
        figures[f"utility_{t.name}.png"] = _png(fig)
        html.append(f'<img src="data:image/png;base64,{{{{utility_{t.name}.png}}}}">')
    outcome = cfg.synth.get("outcome")
    if outcome is not None:
        from .synthetic_utility import ecdf_utility, pmse

        orig = design.data[outcome].to_numpy(dtype=float)
        syns = [d.data[outcome].to_numpy(dtype=float) for d in release.designs]
        eu = ecdf_utility(orig, syns)
        pm = pmse(orig[:, None], [s[:, None] for s in syns])
        html.append(
            f"<h3>Distribution of {outcome}</h3><p>ECDF utility (Woo et al. 2009): U_m = "
            f"{eu['U_m']:.4f}, U_a = {eu['U_a']:.6f}; pMSE (main effects) = {pm['pMSE']:.6f} "
            "(0 best, 0.25 worst). Smaller is closer to the confidential data.</p>"
        )
        fig, ax = plt.subplots(figsize=(6, 3))
        grid = np.quantile(np.concatenate([orig, *syns]), np.linspace(0.005, 0.995, 200))
        f_o = np.searchsorted(np.sort(orig), grid, side="right") / orig.size
        for k, s in enumerate(syns):
            f_s = np.searchsorted(np.sort(s), grid, side="right") / s.size
            ax.plot(np.linspace(0.5, 99.5, 200), f_s - f_o, lw=0.8, label=f"set {k + 1}" if k < 5 else None)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xlabel("pooled percentile")
        ax.set_ylabel("F_syn - F_conf")
        ax.set_title(f"ECDF differences, {outcome}")
        figures["ecdf.png"] = _png(fig)
        html.append('<img src="data:image/png;base64,{{ecdf.png}}">')
    return html


def _risk_sections(cfg, design, fit, release, figures) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    html = ["<h2>Disclosure risk</h2>"]
    p = release.privacy
    html.append(
        f"<p>Mechanism: {p.get('mechanism')}. Epsilon: {p.get('epsilon')}. Lipschitz bound "
        f"Delta_alpha: {p.get('delta_alpha')}. Guarantee: {release.guarantee}</p>"
    )
    # Per-record bounds and risk weights stay on the fit object (fit.plot_risk() for the
    # curator): even their quantiles describe confidential records, so the release shows only
    # the tuning path, whose points are the released bound and its predecessors.
    tuning = getattr(fit, "tuning_", None)
    if isinstance(tuning, pd.DataFrame) and {"c", "delta_alpha"} <= set(tuning.columns):
        html.append(
            f"<p>Tuning: {len(tuning)} weighted refit(s) to reach the target bound "
            f"{getattr(fit, 'target_lipschitz_', None)}; the release reports the achieved bound "
            f"{p.get('delta_alpha')}.</p>"
        )
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(np.arange(1, len(tuning) + 1), tuning["delta_alpha"], "o-")
        target = getattr(fit, "target_lipschitz_", None)
        if target is not None:
            ax.axhline(target, color="k", lw=0.6, ls="--", label="target")
            ax.legend()
        ax.set_xlabel("refit")
        ax.set_ylabel("Delta_alpha")
        ax.set_title("Lipschitz bound of each weighted refit")
        figures["tuning.png"] = _png(fig)
        html.append('<img src="data:image/png;base64,{{tuning.png}}">')
    outcome = cfg.synth.get("outcome")
    if release.kind == "partial" and outcome is not None and cfg.known:
        from .privacy import identification_risk

        ir = identification_risk(design.data, release, known=cfg.known, outcome=outcome, r=cfg.r)
        vals = np.asarray(ir.ir, dtype=float)
        text = ir.summary().to_html(float_format=lambda v: f"{v:.3f}")  # aggregates only
        html.append(
            f"<h3>Identification risk (Hu, Savitsky &amp; Williams), known = {cfg.known}, "
            f"r = {cfg.r}</h3>{text}"
        )
        if vals.size:
            fig, ax = plt.subplots(figsize=(6, 3))
            ax.hist(vals, bins=20, color="#aa3377")
            ax.set_xlabel("identification risk of a record")
            ax.set_ylabel("records")
            figures["identification_risk.png"] = _png(fig)
            html.append('<img src="data:image/png;base64,{{identification_risk.png}}">')
    else:
        html.append("<p>Identification risk: not applicable (full synthesis: synthetic records "
                    "are not linked to confidential ones).</p>")
    return html


def _diagnostic_sections(fit) -> list[str]:
    html = ["<h2>MCMC diagnostics</h2>"]
    diag = getattr(fit, "diagnostics_table_", None)
    if diag is None:
        diag = getattr(fit, "diagnostics_", None)
    if diag is None:
        diag = getattr(fit, "diagnostics", None)
    if callable(diag):
        diag = diag()
    if diag is None:
        html.append("<p>The synthesizer reports no MCMC diagnostics.</p>")
    elif isinstance(diag, pd.DataFrame):
        html.append(diag.to_html(float_format=lambda v: f"{v:.3f}"))
    else:
        html.append(f"<pre>{json.dumps(diag, indent=1, default=str)}</pre>")
    return html


def write_report(path: Path, cfg, design, fit, release, figures_dir: Path) -> None:
    figures: dict[str, bytes] = {}
    body = [
        "<h1>surveysynth release report</h1>",
        f"<p>Method {cfg.method}, {release.kind} synthesis, m = {release.m}. "
        f"Created {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC}.</p>",
    ]
    body += _risk_sections(cfg, design, fit, release, figures)
    body += _utility_sections(cfg, design, release, figures)
    body += _diagnostic_sections(fit)
    html = "\n".join(body)
    figures_dir.mkdir(exist_ok=True)
    for name, data in figures.items():
        (figures_dir / name).write_bytes(data)
        html = html.replace("{{" + name + "}}", base64.b64encode(data).decode())
    style = "body{font-family:sans-serif;max-width:60em;margin:2em auto} img{max-width:100%}"
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>surveysynth "
                    f"release</title><style>{style}</style></head><body>{html}</body></html>")


# ----------------------------------------------------------------------------- run
def run_release(config: str | Path | ReleaseConfig, quiet: bool = False) -> Path:
    """Run the whole pipeline; returns the release folder."""
    cfg = config if isinstance(config, ReleaseConfig) else load_config(config)
    from .design import SurveyDesign
    from .tables import tabulate

    out = cfg.output
    if out.exists() and not cfg.overwrite:
        raise ConfigError(f"output.folder: {str(out)!r} exists. Fix: another folder, or overwrite = true.")
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".partial-{out.name}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    data = read_input(cfg.input_path)
    checksum = _sha256(cfg.input_path)
    try:
        design = SurveyDesign(data, **cfg.design)
    except ValueError as exc:
        raise ConfigError(f"[design]: {exc}") from exc
    _say(f"design: {design.n} records; synthesizer {cfg.method}", quiet)
    tmp = Path(tempfile.mkdtemp(prefix=f".partial-{out.name}-", dir=out.parent))
    try:
        fit, release = fit_and_release(cfg, design, progress=not quiet)
        _say(f"writing {release.m} synthetic data sets", quiet)
        release.save(tmp / "synthetic")
        (tmp / "tables").mkdir()
        files = []
        for t in cfg.tables:
            tab = tabulate(release, t.rows, t.cols or None, t.value, t.stat, cv_max=t.cv_max,
                           n_min=t.n_min)
            tab.to_csv(tmp / "tables" / f"{t.name}.csv")
            tab.to_excel(tmp / "tables" / f"{t.name}.xlsx")
            files += [f"tables/{t.name}.csv", f"tables/{t.name}.xlsx"]
        _say("writing the report", quiet)
        write_report(tmp / "report.html", cfg, design, fit, release, tmp / "figures")
        manifest = {
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "method": cfg.method,
            "kind": release.kind,
            "m": release.m,
            "epsilon": release.epsilon,
            "delta_alpha": release.privacy.get("delta_alpha"),
            "guarantee": release.privacy.get("guarantee"),
            "guarantee_text": release.guarantee,
            "privacy": release.privacy,
            "seed": cfg.synth.get("seed"),
            "input": {"file": cfg.input_path.name, "sha256": checksum, "rows": int(data.shape[0])},
            "design": cfg.design,
            "synthesizer": {k: v for k, v in cfg.synth.items()},
            "tables": [t.__dict__ for t in cfg.tables],
            "versions": _versions(),
            "files": sorted(
                [str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file()] + ["manifest.json"]
            ),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the release is a normal folder
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _say(f"release written to {out}", quiet)
    return out
