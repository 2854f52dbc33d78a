"""The release pipeline: one TOML file in, one release folder out.

``surveysynth release CONFIG.toml`` reads a confidential file (CSV or Parquet), builds its
survey design, runs a synthesizer through the one synthesizer protocol
(``Synth(**settings).fit(design).release()``), and writes:

    <output.folder>/
      public/                      what may be published, and nothing else
        manifest.json              method, kind, m, the privacy record (exact guarantee text,
                                   epsilon ledger, what is published without budget, whether
                                   the run was seeded), package versions, file list
        synthetic/                 the m synthetic data sets (Parquet, random row order) and
                                   their release manifest
        tables/<name>.csv|.xlsx    each published table, computed from the synthetic release
      confidential/                for the disclosure review only; every file says so
        README.txt                 the not-for-publication notice
        report.html, figures/      release vs confidential data, risk, tuning, MCMC diagnostics
        confidential.json          seed (if any), input file and its SHA-256, the config,
                                   convergence verdict, fit summary
        *.csv                      tuning path, per-parameter diagnostics, risk summaries

Nothing derived from the confidential data reaches ``public/`` unless the privacy record covers
it or lists it under ``published_without_budget`` with the reason.

Every config error is found before any MCMC starts and names the key and the fix. The folder is
written under a temporary name beside the target and renamed into place at the end, so a run
that fails or is killed leaves no release folder (at most a hidden ``.partial-*`` folder, which
the next run to the same target removes).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
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
    "epsilon", "m", "seed", "init", "fit", "known", "r", "weights", "population_size",
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


def _check_input(raw: dict[str, Any], base: Path) -> tuple[Path, pd.DataFrame]:
    inp = raw["input"]
    _unknown(inp, {"path"}, "[input]")
    if "path" not in inp:
        raise ConfigError("input.path missing: the confidential CSV or Parquet file.")
    input_path = (base / inp["path"]).resolve()
    if not input_path.exists():
        raise ConfigError(f"input.path: {str(input_path)!r} does not exist.")
    if input_path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise ConfigError(f"input.path: {input_path.name!r} must be .csv or .parquet.")
    return input_path, read_input(input_path)


def _check_synth(syn: dict[str, Any]) -> str:
    """The [synthesizer] keys that do not need the data; returns the method."""
    _unknown(syn, _SYNTH_KEYS, "[synthesizer]")
    method = syn.get("method")
    if method not in SYNTHESIZERS:
        raise ConfigError(
            f"synthesizer.method = {method!r} is not a known synthesizer. Choose one of "
            f"{list(SYNTHESIZERS)}."
        )
    m = syn.get("m", 5)
    if not isinstance(m, int) or isinstance(m, bool) or m < 1:
        raise ConfigError(f"synthesizer.m = {m!r}: must be a positive integer (number of synthetic sets).")
    for key in ("target_epsilon", "target_lipschitz", "epsilon", "population_size"):
        if key in syn and (not isinstance(syn[key], (int, float)) or syn[key] <= 0):
            raise ConfigError(f"synthesizer.{key} = {syn[key]!r}: must be a number > 0.")
    if method in ("FBS", "FBP", "PBP") and ("target_epsilon" in syn) == ("target_lipschitz" in syn):
        raise ConfigError(
            f"synthesizer: {method} needs exactly one of target_epsilon or target_lipschitz."
        )
    if method == "quantile" and "epsilon" not in syn:
        raise ConfigError("synthesizer.epsilon missing: the total epsilon of the KNG synthesis.")
    return method


def _synthesized(method: str, syn: dict[str, Any]) -> list[tuple[str, str]]:
    """(config key, column) of every variable the synthesizer models."""
    if method == "quantile":
        variables = _as_list(syn.get("variables"))
        if not variables:
            raise ConfigError("synthesizer.variables missing: the variables to synthesize, in order.")
        return [("synthesizer.variables", v) for v in variables]
    if "outcome" not in syn:
        raise ConfigError("synthesizer.outcome missing: the confidential variable to synthesize.")
    return [("synthesizer.outcome", syn["outcome"])] + [
        ("synthesizer.predictors", v) for v in _as_list(syn.get("predictors"))]


def _design_columns(design: dict[str, Any]) -> list[tuple[str, str]]:
    from ._validate import parse_vars

    out = []
    for key in ("ids", "strata", "weights", "probs", "fpc"):
        spec = design.get(key)
        names = (parse_vars(spec, key) if isinstance(spec, str) and spec.strip().startswith("~")
                 else _as_list(spec))
        out += [(f"design.{key}", v) for v in names]
    return out


def _check_columns(needed: list[tuple[str, str]], data: pd.DataFrame, name: str) -> None:
    columns = set(data.columns)
    for key, col in needed:
        if col not in columns:
            raise ConfigError(
                f"{key}: column {col!r} is not in {name} (columns: {sorted(columns)[:15]}). "
                "Fix: correct the name."
            )


def _check_missing(modelled: list[tuple[str, str]], data: pd.DataFrame) -> None:
    """A modelled variable with missing values would fail after the run started: refuse it now
    (nothing is dropped silently)."""
    for key, col in modelled:
        na = data[col].isna().to_numpy()
        if na.any():
            rows = np.flatnonzero(na)[:5].tolist()
            raise ConfigError(
                f"{key}: column {col!r} has {int(na.sum())} missing value(s), first at rows "
                f"{rows}. Fix: impute them or drop those records in the input file (the "
                "synthesizers model complete records only)."
            )


def _released_columns(method: str, syn: dict[str, Any], data: pd.DataFrame) -> set[str] | None:
    """Columns a full synthesis releases (None: partial synthesis releases the data's own)."""
    if method == "quantile":
        return set(_as_list(syn.get("variables")))
    if method == "PBP":
        return {syn["outcome"], *_as_list(syn.get("predictors"))}
    return None


def _check_tables(raw_tables: list, data: pd.DataFrame, released: set[str] | None) -> list[TableSpec]:
    columns = set(data.columns)
    tables = []
    for i, t in enumerate(raw_tables):
        where = f"tables[{i}]"
        _unknown(t, _TABLE_KEYS, where)
        spec = TableSpec(
            name=str(t.get("name", f"table_{i + 1}")), rows=_as_list(t.get("rows")),
            cols=_as_list(t.get("cols")), value=t.get("value"), stat=t.get("stat", "total"),
            cv_max=t.get("cv_max", 0.30), n_min=t.get("n_min", 30),
        )
        if not spec.rows:
            raise ConfigError(f"{where}.rows missing: the classification variable(s) of the rows.")
        if spec.stat not in ("total", "mean"):
            raise ConfigError(f"{where}.stat = {spec.stat!r}: choose 'total' or 'mean'.")
        if spec.stat == "mean" and spec.value is None:
            raise ConfigError(f"{where}.value missing: stat='mean' needs the variable to average.")
        used = [("rows", x) for x in spec.rows] + [("cols", x) for x in spec.cols] + (
            [("value", spec.value)] if spec.value else [])
        for key, v in used:
            if v not in columns:
                raise ConfigError(
                    f"{where}.{key}: {v!r} is not a variable of the data. Fix: use one of "
                    f"{sorted(columns)[:15]}."
                )
            if released is not None and v not in released:
                raise ConfigError(
                    f"{where}.{key}: {v!r} is not released by this full synthesis (it releases "
                    f"{sorted(released)}). Fix: tabulate released variables only."
                )
        if not spec.name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"{where}.name = {spec.name!r}: use letters, digits, - and _ only.")
        tables.append(spec)
    return tables


def check_config(raw: dict[str, Any], base: Path = Path(".")) -> ReleaseConfig:
    """Validate a parsed configuration against the data it names (no MCMC); every error names
    its key and the fix."""
    _unknown(raw, _TOP_KEYS, "config")
    for key in ("input", "design", "synthesizer", "output"):
        if key not in raw:
            raise ConfigError(f"[{key}] section missing. Fix: add it (see `surveysynth release --help`).")
    input_path, data = _check_input(raw, base)
    design = dict(raw["design"])
    _unknown(design, _DESIGN_KEYS, "[design]")
    syn = dict(raw["synthesizer"])
    method = _check_synth(syn)
    modelled = _synthesized(method, syn)
    _check_columns(modelled + _design_columns(design), data, input_path.name)
    _check_missing(modelled, data)
    tables = _check_tables(raw.get("tables", []), data, _released_columns(method, syn, data))
    _construct(method, syn)
    rep = raw.get("report", {})
    _unknown(rep, {"known", "r"}, "[report]")
    known = _as_list(rep.get("known", syn.get("known", syn.get("predictors"))))
    _check_columns([("report.known", k) for k in known], data, input_path.name)
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


def _say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[surveysynth release] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- synthesis
def _synth_class(method: str):
    from . import synth

    return {"FBS": synth.FBS, "FBP": synth.FBP, "PBP": synth.PBP,
            "quantile": synth.QuantileSynthesizer, "mixture": synth.MixtureSynthesizer,
            "nb": synth.NBSynthesizer}[method]


def _settings(method: str, s: dict[str, Any]) -> dict[str, Any]:
    """Constructor settings of the synthesizer from the [synthesizer] section."""
    init = s.get("init", {})
    fit_opts = s.get("fit", {})
    if not isinstance(init, dict) or not isinstance(fit_opts, dict):
        raise ConfigError("synthesizer.init and synthesizer.fit must be tables of options.")
    out = {k: v for k, v in s.items() if k not in ("method", "init", "fit", "seed", "known", "r", "weights")}
    if "predictors" in out:
        out["predictors"] = _as_list(out["predictors"])
    if "variables" in out:
        out["variables"] = _as_list(out["variables"])
    if method in ("mixture", "nb"):
        out["alpha"] = s.get("weights", "pairwise")
        if "known" in s:
            out["known"] = _as_list(s["known"])
        if "r" in s:
            out["r"] = s["r"]
    if "seed" in s:
        out["random_state"] = s["seed"]
    return {**out, **init, **fit_opts}


def _construct(method: str, s: dict[str, Any]):
    """Build and validate the synthesizer (cheap: no data, no MCMC) so option errors surface
    before any MCMC starts."""
    try:
        syn = _synth_class(method)(**_settings(method, s))
        validate = getattr(syn, "_validate", None)
        if callable(validate):
            validate()
        return syn
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[synthesizer]: {exc}") from exc


def fit_and_release(cfg: ReleaseConfig, design: Any, progress: bool = True):
    """Run the configured synthesizer through the protocol; returns (synthesizer, release)."""
    syn = _construct(cfg.method, cfg.synth)
    if "progress" in syn.get_params():
        syn.set_params(progress=progress)
    syn.fit(design)
    return syn, syn.release()


# ----------------------------------------------------------------------------- report
def write_confidential_report(folder: Path, cfg: ReleaseConfig, design: Any, syn: Any,
                              release: Any) -> None:
    """report.html and figures/ in the confidential folder (see surveysynth.report)."""
    import base64

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import report

    figures: dict[str, bytes] = {}
    sections: list[dict] = []
    warns: list[str] = []
    conv = getattr(syn, "convergence_", None)
    if conv is not None and not conv["passed"]:
        warns.append("MCMC convergence gates failed: " + "; ".join(conv["problems"]))
    if release.privacy.convergence_override:
        warns.append("Released with allow_unconverged=True (the public manifest says so).")
    tuning = getattr(syn, "tuning_", None)
    if isinstance(tuning, pd.DataFrame) and len(tuning):
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(np.arange(1, len(tuning) + 1), tuning["delta_alpha"], "o-", label="fit")
        target = getattr(syn, "target_lipschitz_", None)
        if target is not None:
            ax.axhline(target, color="k", lw=0.6, ls="--", label="target")
        ax.set_xlabel("weighted fit")
        ax.set_ylabel("Delta_alpha")
        ax.legend()
        figures["tuning.png"] = report.png(fig)
        sections.append(report.section(
            "Tuning of the risk weights",
            [f"{len(tuning)} weighted fit(s); c = {getattr(syn, 'c_', float('nan')):.4g}. The "
             "released bound comes from the last (final) fit, whose draws played no part in "
             "choosing c."],
            table=tuning,
            images=[{"caption": "Delta_alpha of each weighted fit (tuning, then final)",
                     "data": base64.b64encode(figures["tuning.png"]).decode()}]))
    summary = getattr(syn, "summary", None)
    if callable(summary):
        try:
            sections.append(report.section("Fit summary", table=summary().to_frame("value")))
        except Exception:  # noqa: BLE001 - a summary is a convenience of some synthesizers
            pass
    outcome_vars = ([cfg.synth["outcome"]] if cfg.synth.get("outcome") else
                    _as_list(cfg.synth.get("variables")))
    sections += report.utility_sections(cfg.tables, design, release, outcome_vars, figures)
    outcome = cfg.synth.get("outcome")
    if release.kind == "partial" and outcome is not None and cfg.known:
        from .privacy import identification_risk
        perms = release.confidential.get("_row_permutations")
        if perms is not None:  # undo the release's random row order to link records
            linked = [d.data.iloc[np.argsort(p)].reset_index(drop=True)[outcome].to_numpy(float)
                      for d, p in zip(release.designs, perms, strict=True)]
            ir = identification_risk(design.data, np.vstack(linked), known=cfg.known,
                                     outcome=outcome, r=cfg.r)
            sections.append(report.section(
                f"Identification risk (known = {cfg.known}, r = {cfg.r})",
                ["Aggregates over the confidential records (Hu, Savitsky & Williams)."],
                table=ir.summary()))
    diag = getattr(syn, "diagnostics_table_", None)
    if isinstance(diag, pd.DataFrame) and len(diag):
        worst = diag.sort_values("rhat", ascending=False).head(15)
        sections.append(report.section(
            "MCMC diagnostics (15 parameters with the largest R-hat)", table=worst))
    html = report.render(method=cfg.method, release=release, sections=sections,
                         convergence=conv, warnings=warns)
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    for name, data in figures.items():
        (folder / "figures" / name).write_bytes(data)
    (folder / "report.html").write_text(html)


# ----------------------------------------------------------------------------- run
def run_release(config: str | Path | ReleaseConfig, quiet: bool = False) -> Path:
    """Run the whole pipeline; returns the release folder."""
    cfg = config if isinstance(config, ReleaseConfig) else load_config(config)
    from ._versions import versions
    from .design import SurveyDesign
    from .release import write_confidential
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
        syn, release = fit_and_release(cfg, design, progress=not quiet)
        pub = tmp / "public"
        _say(f"writing {release.m} synthetic data sets", quiet)
        release.save_public(pub / "synthetic")
        (pub / "tables").mkdir()
        for t in cfg.tables:
            tab = tabulate(release, t.rows, t.cols or None, t.value, t.stat, cv_max=t.cv_max,
                           n_min=t.n_min)
            tab.to_csv(pub / "tables" / f"{t.name}.csv")
            tab.to_excel(pub / "tables" / f"{t.name}.xlsx")
        record = release.manifest()["privacy"]
        manifest = {
            "part": "public",
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "method": cfg.method,
            "kind": release.kind,
            "m": release.m,
            "epsilon": release.epsilon,
            "delta_alpha": release.privacy.delta_alpha,
            "guarantee": release.privacy.guarantee,
            "differentially_private": release.privacy.differentially_private,
            "guarantee_text": release.privacy.guarantee_text,
            "privacy": record,
            "tables": [{k: v for k, v in t.__dict__.items()} for t in cfg.tables],
            "versions": versions(),
            "files": sorted(
                [str(p.relative_to(pub)) for p in pub.rglob("*") if p.is_file()] + ["manifest.json"]
            ),
        }
        (pub / "manifest.json").write_text(json.dumps(manifest, indent=2, allow_nan=False))
        _say("writing the confidential disclosure-review part", quiet)
        conf = tmp / "confidential"
        extra = {}
        cs = getattr(syn, "confidential_summary", None)
        if callable(cs):
            extra = cs()
        write_confidential(conf, {
            **extra,
            "seed": cfg.synth.get("seed"),
            "input": {"file": str(cfg.input_path), "sha256": checksum, "rows": int(data.shape[0])},
            "config": cfg.source,
        })
        write_confidential_report(conf, cfg, design, syn, release)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the release is a normal folder
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _say(f"release written to {out} (publish only {out / 'public'})", quiet)
    return out
