"""The release pipeline: one TOML file in, one release folder out.

``surveysynth release CONFIG.toml`` reads a confidential file (CSV, Parquet, Stata, SAS or
SPSS: :func:`read_input`), builds its
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
        report.html, report.md,    release vs confidential data, risk, tuning, MCMC diagnostics
        figures/                   (surveysynth.report; SyntheticRelease.save writes the same)
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

import contextlib
import datetime as _dt
import hashlib
import inspect
import io
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .encoding import r_levels
from .release_config import (
    MARGINAL_METHODS,
    SYNTHESIZERS,
    VARIABLE_METHODS,
    ConfigError,
    check_keys,
    synth_class,
    upgrade,
)
from .release_inputs import FORMAT_NAMES as _FORMAT_NAMES
from .release_inputs import INPUT_FORMATS, build_design, read_input
from .release_inputs import apply_value_labels as apply_value_labels
from .release_inputs import joint_variables as _joint_variables
from .synth.params import ParameterError
from .synth.progress import listening

__all__ = ["SYNTHESIZERS", "ConfigError", "ReleaseConfig", "TableSpec", "check_config",
           "load_config", "run_release"]


@dataclass
class TableSpec:
    name: str
    rows: list[str]
    cols: list[str]
    value: str | None
    stat: str
    cv_max: float | None = 0.30
    n_min: float | None = 30
    title: str | None = None
    digits: dict[str, int] | None = None
    labels: dict[str, dict[str, str]] | None = None


@dataclass
class ReleaseConfig:
    """A validated release configuration (keys: docs/release-config.md)."""

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
    missing_policy: str = "refuse"
    regressions: list[dict[str, Any]] = field(default_factory=list)
    attacks: Any = None  # surveysynth.attack_evidence.AttackSettings ([report] attack keys)


def _as_list(x: Any) -> list[str]:
    if x is None:
        return []
    return [x] if isinstance(x, str) else list(x)


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
    input_path = (base / raw["input"]["path"]).resolve()
    if not input_path.exists():
        raise ConfigError(f"input.path: {str(input_path)!r} does not exist.")
    if input_path.suffix.lower() not in INPUT_FORMATS:
        raise ConfigError(f"input.path: {input_path.name!r} must be one of "
                          f"{', '.join(INPUT_FORMATS)} ({_FORMAT_NAMES}).")
    return input_path, read_input(input_path)


def _synthesized(method: str, syn: dict[str, Any]) -> list[tuple[str, str]]:
    """(config key, column) of every variable the synthesizer models."""
    if method in VARIABLE_METHODS:
        return [("synthesizer.variables", v) for v in _as_list(syn.get("variables"))]
    if method == "sequential":
        return [(f"variables[{i}].name", v["name"]) for i, v in enumerate(syn["variables"])] + [
            ("synthesizer.public", v) for v in _as_list(syn.get("public"))]
    return [("synthesizer.outcome", syn["outcome"])] + [
        ("synthesizer.predictors", v) for v in _as_list(syn.get("predictors"))]


def _missing_checked(method: str, syn: dict[str, Any],
                     needed: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The columns the [missing] policy applies to: all, except a sequential synthesis's
    variables when it models their missing values itself (init.missing = "model")."""
    if method == "sequential" and syn.get("init", {}).get("missing") == "model":
        return [(k, c) for k, c in needed if not k.startswith("variables[")]
    return needed


def _sequential_numeric(syn: dict[str, Any]) -> list[str]:
    """The numeric variables of a sequential synthesis (utility and fidelity sections)."""
    return [v["name"] for v in syn["variables"]
            if v["type"] not in ("binary", "categorical", "ordinal")]


def _marginal_numeric(syn: dict[str, Any]) -> list[str]:
    """The numeric (binned) variables of an AIM / MST synthesis (utility and fidelity)."""
    bins = {**syn.get("init", {}), **syn.get("fit", {})}.get("bins", {})
    return [v for v in _as_list(syn.get("variables")) if v in bins]


def _design_columns(design: dict[str, Any], data: pd.DataFrame) -> list[tuple[str, str]]:
    import re

    from ._validate import parse_vars

    out = []
    for key in ("ids", "strata", "weights", "probs", "fpc", "repweights"):
        spec = design.get(key)
        if key == "repweights" and isinstance(spec, str) and not spec.strip().startswith("~"):
            try:
                pattern = re.compile(spec)
            except re.error as exc:
                raise ConfigError(f"design.repweights = {spec!r}: not a regular expression "
                                  f"({exc}).") from exc
            names = [str(c) for c in data.columns if pattern.search(str(c))]
            if not names:
                raise ConfigError(f"design.repweights = {spec!r}: no column name matches. Fix: "
                                  "give the pattern (R grep) or a list of names.")
        else:
            names = (parse_vars(spec, key) if isinstance(spec, str)
                     and spec.strip().startswith("~") else _as_list(spec))
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


def apply_missing(policy: str, needed: list[tuple[str, str]],
                  data: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Apply the [missing] policy to the modelled variables and design columns.

    "refuse": a column with missing values is an error naming its key, the count, the first
    rows and the fix. "drop": records with a missing value in any of them are dropped (a new
    frame; the caller's is not changed) and the counts are returned for the confidential report
    (never silent)."""
    cols = list(dict.fromkeys(col for _, col in needed))
    na = data[cols].isna().to_numpy() if cols else np.zeros((len(data), 0), bool)
    if not na.any():
        return data, {"policy": policy, "dropped": 0}
    if policy == "refuse":
        key, col = next((k, c) for k, c in needed if data[c].isna().any())
        miss = data[col].isna().to_numpy()
        rows = np.flatnonzero(miss)[:5].tolist()
        raise ConfigError(
            f"{key}: column {col!r} has {int(miss.sum())} missing value(s), first at rows "
            f"{rows}. Fix: impute them or drop those records in the input file, or set "
            "[missing] policy = \"drop\" (complete records; the count is stated in the "
            "confidential report)."
        )
    drop = na.any(axis=1)
    by_col = {c: int(n) for c, n in zip(cols, na.sum(axis=0), strict=True) if n}
    kept = data.loc[~drop].reset_index(drop=True)
    if len(kept) < 2:
        raise ConfigError("missing.policy = \"drop\" leaves fewer than 2 records. Fix: impute "
                          "the missing values.")
    return kept, {"policy": policy, "dropped": int(drop.sum()), "records_kept": int(len(kept)),
                  "missing_by_column": by_col}


def _check_types(method: str, syn: dict[str, Any], data: pd.DataFrame) -> None:
    """The outcome / synthesized variables must be numeric (numbers written as text get the
    reader's fix)."""
    for key, col in _synthesized(method, syn):
        if key == "synthesizer.predictors":
            continue
        x = data[col]
        if pd.api.types.is_bool_dtype(x) or not pd.api.types.is_numeric_dtype(x):
            from .synth.sequential import number_text_fix

            mask = pd.to_numeric(x, errors="coerce").isna() & x.notna()
            bad = data.index[mask][:5].tolist()
            fix = number_text_fix(x[mask])
            if not fix.startswith("They are"):  # text that is not a number: a category
                fix = ("Fix: synthesize a numeric variable (recode it in the input file) or use "
                       "it as a predictor.")
            raise ConfigError(
                f"{key}: column {col!r} is not numeric (dtype {x.dtype}; first non-numeric rows "
                f"{bad}: {x[mask].head(3).tolist()}). {fix}")
    # the model's own rules on the outcome (log > 0, NB's counts, the mixture's log(y +
    # shift)) are the synthesizer's: check_data (_check_model_data), named by config key


def _released_columns(method: str, syn: dict[str, Any], design: dict[str, Any],
                      data: pd.DataFrame) -> set[str] | None:
    """The columns the release will hold (None: every column of the data, a sequential
    synthesis with ``unlisted = "public"``), so that a table or a regression on a variable
    that is not released is refused by ``--check`` instead of failing after the MCMC.

    FBS, FBP, PBP: the outcome, the predictors and the (smoothed) weights; mixture and nb: the
    outcome, predictors, known columns and ``init.release_columns`` (as collected) and the
    weights; quantile: its variables and the weights; sequential: its variables, the public
    and design columns and the weights."""
    weights = {"weight", *(_as_list(design.get("weights"))
                           if isinstance(design.get("weights"), str) else [])}
    settings = {**syn.get("init", {}), **syn.get("fit", {})}
    if method in VARIABLE_METHODS:
        return set(_as_list(syn.get("variables"))) | weights
    if method == "sequential":
        if syn.get("unlisted", "drop") == "public":
            return None
        return {c for _, c in _synthesized(method, syn)} | {
            c for _, c in _design_columns(design, data)} | weights
    out = {syn["outcome"], *_as_list(syn.get("predictors"))} | weights
    if method in ("mixture", "nb"):
        out |= set(_as_list(settings.get("known", syn.get("known"))))
        out |= set(_as_list(settings.get("release_columns")))
    return out


def _unreleased_fix(method: str, released: set[str]) -> str:
    """The fix for a table or regression on a variable the release does not hold."""
    fix = f"Fix: use a released variable ({sorted(released)})"
    if method in ("mixture", "nb"):
        fix += (", or release the variable as collected with synthesizer init = { "
                "release_columns = [\"<name>\"] } (only if it may be published unchanged)")
    elif method in ("FBS", "FBP", "PBP"):
        fix += ", or add it to synthesizer.predictors (released as collected)"
    elif method == "sequential":
        fix += ", or add it to synthesizer.public or a [[variables]] block"
    return fix + "."


def _check_tables(raw_tables: list, data: pd.DataFrame, released: set[str] | None,
                  method: str = "") -> list[TableSpec]:
    columns = set(data.columns)
    tables = []
    for i, t in enumerate(raw_tables):
        where = f"tables[{i}]"
        spec = TableSpec(
            name=str(t.get("name", f"table_{i + 1}")), rows=_as_list(t.get("rows")),
            cols=_as_list(t.get("cols")), value=t.get("value"), stat=t.get("stat", "total"),
            cv_max=t.get("cv_max", 0.30), n_min=t.get("n_min", 30), title=t.get("title"),
            digits=t.get("digits"), labels=t.get("labels"),
        )
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
                    f"{where}.{key}: {v!r} is not released by this {method} synthesis, so the "
                    f"table cannot be computed from the release. " + _unreleased_fix(method,
                                                                                      released)
                )
        if (spec.value and spec.stat not in ("proportion",)
                and not pd.api.types.is_numeric_dtype(data[spec.value])):
            from .synth.sequential import number_text_fix

            x = data[spec.value]
            fix = number_text_fix(x[pd.to_numeric(x, errors="coerce").isna() & x.notna()])
            raise ConfigError(f"{where}.value: {spec.value!r} is not numeric (dtype "
                              f"{x.dtype}). " + (fix if fix.startswith("They are") else
                                                 "Fix: a numeric variable, or stat = "
                                                 "\"proportion\" for the shares of its levels."))
        for var in spec.labels or {}:
            if var not in spec.rows + spec.cols:
                raise ConfigError(f"{where}.labels.{var}: not a classification variable of this "
                                  f"table ({spec.rows + spec.cols}). Fix: label those only.")
        tables.append(spec)
    return tables


def check_config(raw: dict[str, Any], base: Path = Path(".")) -> ReleaseConfig:
    """Validate a parsed configuration against the schema (surveysynth.release_config) and the
    data it names (no MCMC); every error names its key and the fix. Deprecated keys are read
    as their new names, with a DeprecationWarning (release_config.upgrade)."""
    raw = upgrade(raw)
    method = check_keys(raw)
    input_path, data = _check_input(raw, base)
    design = dict(raw["design"])
    syn = dict(raw["synthesizer"])
    if method == "sequential":  # the [[variables]] blocks are the synthesizer's variables
        syn["variables"] = [dict(v) for v in raw["variables"]]
    modelled = _synthesized(method, syn)
    needed = modelled + _design_columns(design, data)
    _check_columns(needed, data, input_path.name)
    policy = raw.get("missing", {}).get("policy", "refuse")
    complete, _ = apply_missing(policy, _missing_checked(method, syn, needed), data)
    # Sequential checks each variable against its type itself; AIM / MST take categorical
    # variables on their public categories and numeric ones on public bins (checked in fit)
    if method != "sequential" and method not in MARGINAL_METHODS:
        _check_types(method, syn, complete)
    constructed = _construct(method, syn)
    built = build_design(design, complete)
    _check_model_data(method, syn, constructed, built)
    released = _released_columns(method, syn, design, data)
    tables = _check_tables(raw.get("tables", []), data, released, method)
    rep = raw.get("report", {})
    known = _as_list(rep.get("known", syn.get("known", syn.get("predictors"))))
    _check_columns([("report.known", k) for k in known], data, input_path.name)
    regressions = _check_regressions(rep.get("regressions", []), built,
                                     released, method)
    attacks = _check_attacks(rep, base, data)
    out = raw["output"]
    folder = (base / out["folder"]).resolve()
    if folder.exists() and not out.get("overwrite", False):
        raise ConfigError(f"output.folder: {str(folder)!r} exists and overwrite = false, so the "
                          "run would refuse to replace it. Fix: another folder, or overwrite = "
                          "true in [output] (the folder is replaced only when the run succeeds).")
    return ReleaseConfig(
        input_path=input_path, design=design, method=method, synth=syn, tables=tables,
        output=(base / out["folder"]).resolve(), overwrite=bool(out.get("overwrite", False)),
        known=known, r=float(rep.get("r", 0.2)), source=raw, missing_policy=policy,
        regressions=regressions, attacks=attacks,
    )


def _check_model_data(method: str, syn: dict[str, Any], constructed: Any, design: Any) -> None:
    """What the fit would refuse before its first MCMC run, found without MCMC: FBS, FBP and
    PBP with full cell effects need every cell of the predictors' cross-classification to
    have records; then the design and the synthesizer's own data checks (check_data)."""
    if method in ("FBS", "FBP", "PBP") and getattr(constructed, "effects", "") == "cells":
        preds = _as_list(syn.get("predictors"))
        if preds:
            data = design.data
            levels = [r_levels(data[p]) for p in preds]  # as synth/cells.py builds the cells
            full = pd.MultiIndex.from_product(levels, names=preds)
            codes = full.get_indexer(pd.MultiIndex.from_frame(data[preds].astype(object)))
            counts = np.bincount(codes[codes >= 0], minlength=len(full))
            empty = [dict(zip(preds, full[i], strict=True)) for i in np.flatnonzero(counts == 0)]
            if empty:
                shown = "; ".join(", ".join(f"{p} = {v}" for p, v in e.items())
                                  for e in empty[:5])
                raise ConfigError(
                    f"synthesizer.predictors = {preds}: {len(empty)} cell(s) of their "
                    f"cross-classification have no records ({shown}), so {method}'s full cell "
                    "effects (init effects = \"cells\", the default) are not identified there. "
                    "Fix: init = { effects = \"main\" } (additive effects of each predictor, "
                    "which model every cell), or collapse the levels in the input file so that "
                    "every cell has records.")
    # issue 36 (D6, D7): the design the synthesizer refuses (clusters it cannot carry; weights
    # that vary within strata of a quantile synthesis), before any MCMC
    try:
        constructed.check_design(design)
    except ValueError as exc:
        keys = ", ".join(f"design.{k}" for k in getattr(exc, "keys", ("ids",)))
        raise ConfigError(f"[design] {keys}: {exc}") from exc
    # fit's own data checks before any MCMC, after the design's own refusal: FBS, FBP, PBP's
    # (among them the prior-scale refusal: an outcome whose magnitude makes the fixed priors
    # informative; fix log or outcome_scale), every Sequential variable against its type, the
    # mixture's and NB's outcome rules; a rule whose fix is one setting names its config key
    try:
        constructed.check_data(design)
    except ParameterError as exc:
        raise ConfigError(f"{_config_key(exc.param, syn)}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(str(exc) if method == "sequential" else f"[synthesizer]: {exc}") from exc


def _check_attacks(rep: dict[str, Any], base: Path, data: pd.DataFrame) -> Any:
    """The [report] keys of the attack-based evidence (surveysynth.attack_evidence): a holdout
    file must exist and hold the attacked columns' names; keys and target must be columns."""
    from .attack_evidence import AttackSettings

    keys = _as_list(rep.get("attack_keys")) or None
    target = rep.get("attack_target")
    _check_columns([("report.attack_keys", k) for k in keys or []]
                   + ([("report.attack_target", target)] if target else []), data, "the input")
    holdout = rep.get("holdout", "split")
    if holdout != "split":
        path = (base / holdout).resolve()
        if not path.exists():
            raise ConfigError(f"report.holdout: {str(path)!r} does not exist. Fix: a file of "
                              "records of the population that the synthesizer never saw, or "
                              "\"split\".")
        held = read_input(path)
        absent = [c for c in data.columns if c not in held.columns]
        if absent:
            raise ConfigError(f"report.holdout: {path.name!r} lacks the input's columns "
                              f"{absent[:10]}. Fix: the same columns as the input file.")
        holdout = str(path)
    share = float(rep.get("holdout_share", 0.2))
    if not 0 < share < 1:
        raise ConfigError(f"report.holdout_share = {share!r}: must be in (0, 1).")
    return AttackSettings(attacks=bool(rep.get("attacks", True)), holdout=holdout,
                          holdout_share=share, keys=keys, target=target)


def _check_regressions(raw: list[dict[str, Any]], design: Any,
                       released: set[str] | None, method: str = "") -> list[dict[str, Any]]:
    """[[report.regressions]]: every variable of each formula is a released column, and the
    model fits the confidential design (svyglm; cheap, no MCMC), else a ConfigError naming
    the block's key."""
    from .analysis import svyglm
    from .analysis.formulas import formula_columns

    out = []
    for i, r in enumerate(raw):
        key = f"report.regressions[{i}].formula"
        formula = r["formula"]
        used = formula_columns(formula, design.data.columns)
        if released is not None:
            dropped = [c for c in used if c not in released]
            if dropped:
                raise ConfigError(
                    f"{key} = {formula!r}: {dropped} are not released by this {method} "
                    "synthesis. " + _unreleased_fix(method, released))
        try:
            svyglm(formula, design, family=r.get("family", "gaussian"))
        except ValueError as exc:
            raise ConfigError(f"{key} = {formula!r}: the model does not fit the confidential "
                              f"design: {exc}") from exc
        out.append({"name": str(r.get("name", f"regression_{i + 1}")), "formula": formula,
                    "family": r.get("family", "gaussian")})
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Console:
    """What ``surveysynth release`` prints to stderr: numbered steps (design, compile, fit,
    synthesis, tables, writing) and a summary at verbosity 1 (the default); nothing at 0
    (``--quiet``); at 2 (``--verbose``) also pystan's and the synthesizers' own progress (with
    Stan's informational messages about our models filtered, synth/_stan.py).

    At verbosity 1 the console is the fit's progress listener (:mod:`surveysynth.synth.progress`):
    the fitting code's events become at most one line per Stan run (with its time) and, for long
    runs, a line with an ETA every 30 s; lines of the sampler's output that are neither progress
    nor Stan's known notes (real errors) are shown as they are."""

    STEPS = ("design", "compile", "fit", "synthesis", "tables", "writing")

    def __init__(self, verbosity: int = 1, stream: Any = None) -> None:
        self.verbosity = verbosity
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = time.perf_counter()
        self.runs = 0
        self._last = self.t0
        self._run_start = self.t0
        self._steps_start = self.t0
        self._quantiles = (0, 0)

    def say(self, msg: str) -> None:
        print(msg, file=self.stream, flush=True)

    def step(self, name: str, msg: str) -> None:
        if self.verbosity >= 1:
            k = self.STEPS.index(name) + 1
            self.say(f"[{k}/{len(self.STEPS)}] {name}: {msg}")

    def note(self, msg: str) -> None:
        if self.verbosity >= 1:
            self.say(f"      {msg}")

    def elapsed(self) -> str:
        return _duration(time.perf_counter() - self.t0)

    # ---- the progress listener (synth/progress.py): events of the fit at verbosity 1
    def on_fit_start(self, label: str) -> None:
        self._run_start = self._last = time.perf_counter()

    def on_compile(self, label: str, status: str, seconds: float) -> None:
        if status != "cached":  # step 2 said whether the model is compiled; a cached one is
            self.note(f"Stan model {status} ({seconds:0.1f}s)")  # not repeated per run

    def on_fit_progress(self, label: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self._last > 30 and done > 0:
            eta = (now - self._run_start) * (total - done) / done
            self.note(f"Stan run {self.runs + 1}: {round(100 * done / total)}% "
                      f"({done}/{total}), about {_duration(eta)} left")
            self._last = now

    def on_fit_end(self, label: str, gates: Any) -> None:
        now = time.perf_counter()
        self.runs += 1
        self.step("fit", f"Stan run {self.runs} done in {_duration(now - self._run_start)}")
        self._run_start = self._last = now

    def on_step(self, label: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 0:
            self._steps_start = now
        elif (done, total) != self._quantiles and (done == total or now - self._last > 30):
            self._quantiles = (done, total)
            eta = (now - self._steps_start) * (total - done) / done
            self.step("fit", f"quantile regressions {done}/{total}"
                             + ("" if done == total else f", about {_duration(eta)} left"))
            self._last = now

    def on_message(self, text: str) -> None:
        self.say(text)


def console_text(text: str, width: int = 100, limit: int = 800) -> str:
    """A message for the console: wrapped at word boundaries (lines after the first indented
    like Console.note's), never cut mid-word; a message longer than ``limit`` characters ends
    at a word boundary with a pointer to the confidential report, which holds it whole."""
    import textwrap

    text = " ".join(text.split())
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " ... (in full in the " \
            "confidential report)"
    return textwrap.fill(text, width=width, subsequent_indent=" " * 8,
                         break_long_words=False, break_on_hyphens=False)


def _duration(seconds: float) -> str:
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def _stan_compile_note(method: str, synth: dict[str, Any] | None = None) -> str:
    """Whether the method's Stan model is compiled already (httpstan's cache)."""
    program = getattr(synth_class(method), "program", "")
    with contextlib.suppress(Exception):  # the configured program (FBS main effects: collapsed)
        if synth is not None:
            program = _construct(method, synth).stan_program() or program
    if not program:
        return "no Stan model (KNG quantile regressions run in numpy)"
    try:
        import httpstan.cache
        import httpstan.models

        from .synth._stan import load_program

        name = httpstan.models.calculate_model_name(load_program(program))
        cached = name in httpstan.cache.list_model_names()
    except Exception:  # noqa: BLE001 - a note only; the fit reports real problems
        return f"Stan model {program!r}"
    if cached:
        return f"Stan model {program!r} is compiled (cached)"
    return (f"Stan model {program!r} is not compiled yet: the first fit compiles it (once; "
            "about 1-3 minutes)")


# ----------------------------------------------------------------------------- synthesis
def _settings(method: str, s: dict[str, Any]) -> dict[str, Any]:
    """Constructor settings of the synthesizer from the [synthesizer] section."""
    init = s.get("init", {})
    fit_opts = s.get("fit", {})
    out = {k: v for k, v in s.items() if k not in ("method", "init", "fit", "seed", "known", "r", "alpha")}
    if "predictors" in out:
        out["predictors"] = _as_list(out["predictors"])
    if "variables" in out:
        out["variables"] = _as_list(out["variables"])
    if method in ("mixture", "nb", "sequential"):
        if method != "sequential":
            out["alpha"] = s.get("alpha", "pairwise")
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
    cls = synth_class(method)
    settings = _settings(method, s)
    params = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(settings) - params)
    if unknown:
        where = ["synthesizer.init" if k in s.get("init", {}) else "synthesizer.fit"
                 if k in s.get("fit", {}) else "synthesizer" for k in unknown]
        raise ConfigError(
            f"[synthesizer] {where[0]}: unknown setting(s) {unknown} for {cls.__name__}. "
            f"Its settings: {sorted(params)}. Fix: check the spelling (docs/release-config.md, "
            "Synthesizer settings).")
    try:
        syn = cls(**settings)
        # the one validator (the class's constraint table, then its cross-setting rules),
        # naming each setting by its config key
        syn.check_params(key=lambda p: _config_key(p, s))
        if settings.get("stan_kwargs") is not None:  # pystan's names (delta, not adapt_delta)
            from .synth._stan import check_stan_kwargs

            check_stan_kwargs(settings["stan_kwargs"], "synthesizer.init.stan_kwargs")
        return syn
    except ParameterError as exc:  # the table's (named already) or a rule's on one setting
        key = exc.param if exc.param.startswith("synthesizer.") else _config_key(exc.param, s)
        raise ConfigError(str(exc) if str(exc).startswith(key) else f"{key}: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[synthesizer]: {exc}") from exc


def _config_key(param: str, s: dict[str, Any]) -> str:
    """The config key that set a synthesizer setting (for messages)."""
    for table in ("fit", "init"):  # fit is merged last: it wins
        if param in s.get(table, {}):
            return f"synthesizer.{table}.{param}"
    if param == "random_state":
        return "synthesizer.seed"
    if param in s or param in ("alpha",):
        return f"synthesizer.{param}"
    return f"synthesizer.init.{param}"


def fit_and_release(cfg: ReleaseConfig, design: Any, progress: bool = True,
                    console: Console | None = None):
    """Run the configured synthesizer through the protocol; returns (synthesizer, release,
    warnings). With a console at verbosity 1 the console is the fit's progress listener
    (synth/progress.py: one line per Stan run) and what the libraries print themselves is not
    shown (pystan's "Building..." line); Python warnings are collected (shown briefly, and kept
    for the report)."""
    syn = _construct(cfg.method, cfg.synth)
    translate = console is not None and console.verbosity == 1
    if "progress" in syn.get_params():
        syn.set_params(progress=bool(progress))
    with warnings.catch_warnings(record=True) as caught:
        if translate:
            quiet = io.StringIO()
            with listening(console), contextlib.redirect_stdout(quiet), \
                    contextlib.redirect_stderr(quiet):
                syn.fit(design)
        else:
            syn.fit(design)
        if console is not None:
            console.step("synthesis", f"{getattr(syn, 'm', '')} synthetic data sets")
        release = syn.release()
    msgs = list(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught))
    return syn, release, msgs


# ----------------------------------------------------------------------------- report
def write_confidential_report(folder: Path, cfg: ReleaseConfig, design: Any, syn: Any,
                              release: Any, notes: list[str] | None = None,
                              published: list[tuple[TableSpec, Any]] | None = None,
                              created: str | None = None) -> list[str]:
    """report.html, report.md and figures/ in the confidential folder (see
    surveysynth.report: every section for every method, in one order); ``published``: the
    (spec, Table) pairs written to ``public/tables/``. Returns the flags the report raised
    beyond ``notes`` (fidelity pile-ups and drifts, regression coefficients moved past the
    flag, failed convergence gates, sections that could not be computed), for the console
    summary. :meth:`SyntheticRelease.save` writes the same report (:func:`report_config`)."""
    from . import report

    T = report.TITLES
    figures: dict[str, bytes] = {}
    secs: dict[str, dict] = {}
    warns: list[str] = list(notes or [])
    conv = getattr(syn, "convergence_", None)
    if conv is not None and not conv["passed"]:
        warns.append("MCMC convergence gates failed: " + "; ".join(conv["problems"]))
    if release.privacy.convergence_override:
        warns.append("Released with allow_unconverged=True (the public manifest says so).")
    secs["tuning"] = _tuning_section(cfg.method, syn, figures)
    secs["fit_summary"] = _fit_summary_section(cfg.method, syn)
    outcome_vars = ([cfg.synth["outcome"]] if cfg.synth.get("outcome") else
                    _sequential_numeric(cfg.synth) if cfg.method == "sequential" else
                    _marginal_numeric(cfg.synth) if cfg.method in MARGINAL_METHODS else
                    _as_list(cfg.synth.get("variables")))
    # fidelity flags (surveysynth.fidelity): the synthesized numeric variables (a partial
    # synthesis models its outcome only) and their declared public bounds, if the synthesizer
    # has a bounds setting
    from .fidelity import release_fidelity

    modelled = [c for _, c in _synthesized(cfg.method, cfg.synth)]
    if cfg.method == "sequential":
        modelled = _sequential_numeric(cfg.synth)
    elif cfg.method in MARGINAL_METHODS:
        modelled = _marginal_numeric(cfg.synth)
    elif cfg.method not in ("quantile", "PBP", *MARGINAL_METHODS):
        modelled = modelled[:1]
    declared = syn.get_params().get("bounds") if hasattr(syn, "get_params") else None
    fid = release_fidelity(design, release, modelled,
                           bounds=declared if isinstance(declared, dict) else None)
    warns += [f"Fidelity: {w}" for w in fid.warnings]
    secs["fidelity"] = report.fidelity_section(fid)
    secs["utility_tables"], secs["utility_variables"] = report.utility_sections(
        cfg.tables, design, release, outcome_vars, figures)
    joint, types, context = _joint_variables(cfg)
    try:
        res = report.joint_utility(design, release, joint, types=types, context=context,
                                   regressions=cfg.regressions)
        secs["utility_joint"] = report.joint_utility_section(design, release, joint,
                                                             result=res)
        warns += report.regression_flags(res)
    except (ValueError, np.linalg.LinAlgError) as exc:  # a report gap, shown, not a lost release
        warns.append(f"Joint utility could not be computed: {exc}")
        secs["utility_joint"] = report.not_applicable(
            T["utility_joint"], f"Could not be computed: {exc}")
    outcome = cfg.synth.get("outcome")
    perms = release.confidential.get("_row_permutations")
    if release.kind == "partial" and outcome is not None and cfg.known and perms is not None:
        from .privacy import identification_risk

        # undo the release's random row order to link records
        linked = [d.data.iloc[np.argsort(p)].reset_index(drop=True)[outcome].to_numpy(float)
                  for d, p in zip(release.designs, perms, strict=True)]
        ir = identification_risk(design.data, np.vstack(linked), known=cfg.known,
                                 outcome=outcome, r=cfg.r)
        secs["risk"] = report.risk_section(ir, cfg.known, cfg.r, figures)
    else:
        secs["risk"] = report.not_applicable(T["risk"], _no_risk(cfg, release, perms))
    verdict = None
    try:  # attack-based evidence (issue 35): a failure is shown, never a lost release
        from .attack_evidence import AttackSettings, evaluate

        ev, text = evaluate(cfg, design, syn, release, cfg.attacks or AttackSettings())
        secs["attacks"] = report.attack_section(ev, text)
        verdict = ev.verdict()
    except Exception as exc:  # noqa: BLE001
        warns.append(f"Attack-based evidence could not be computed: {type(exc).__name__}: {exc}")
        secs["attacks"] = report.not_applicable(
            T["attacks"], f"Could not be computed: {type(exc).__name__}: {exc}")
    diag = getattr(syn, "diagnostics_table_", None)
    no_mcmc = _no_mcmc(cfg.method, syn)
    if isinstance(diag, pd.DataFrame) and len(diag):
        worst = diag.sort_values("rhat", ascending=False).head(15)
        secs["mcmc"] = report.section(
            T["mcmc"], [f"The {len(worst)} of {len(diag):,} parameters with the largest R-hat."],
            table=worst, folded=True)
    else:
        secs["mcmc"] = report.not_applicable(T["mcmc"], no_mcmc, folded=True)
    tables = [report.published_table(t.title or t.name, tab, t.digits, t.labels)
              for t, tab in (published or [])]
    created = created or f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC}"
    common = dict(method=cfg.method, release=release, sections=report.ordered(secs),
                  convergence=conv, warnings=warns, tables=tables, attack_verdict=verdict,
                  fidelity_flags=len(fid.warnings), created=created,
                  no_mcmc=None if conv is not None else no_mcmc,
                  tables_note="No published tables: none were requested (the [[tables]] of a "
                              "`surveysynth release` config; in Python, surveysynth.tabulate "
                              "on the release).")
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    for name, data in figures.items():
        (folder / "figures" / name).write_bytes(data)
    (folder / "report.html").write_text(report.render(**common))
    (folder / "report.md").write_text(report.render(**common, markdown=True))
    return warns[len(notes or []):]


def _tuning_section(method: str, syn: Any, figures: dict[str, bytes]) -> dict:
    """The report's tuning section: the risk weights' tuning path (FBS, FBP, PBP: with its
    picture; sequential: every step's fits), or one line saying why there is none."""
    import base64

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import report

    title = report.TITLES["tuning"]
    tuning = getattr(syn, "tuning_", None)
    path = (syn.confidential_summary().get("tuning_path")
            if tuning is None and callable(getattr(syn, "confidential_summary", None)) else None)
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
        return report.section(
            title,
            [f"{len(tuning)} weighted fit(s); " + _c_text(getattr(syn, "c_", None)) + ". The "
             "released bound comes from the last (final) fit, whose draws played no part in "
             "choosing c."],
            table=tuning,
            images=[{"caption": "Delta_alpha of each weighted fit (tuning fits, then the final "
                                "fit) against the target (dashed).",
                     "data": base64.b64encode(figures["tuning.png"]).decode(),
                     "file": "tuning.png"}], folded=True)
    if isinstance(path, pd.DataFrame) and len(path):
        return report.section(
            title, ["Every weighted fit of every step (tuning fits, then the final fit of the "
                    "step); the released bounds come from the final fits."],
            table=path, folded=True)
    return report.not_applicable(title, _no_tuning(method, syn), folded=True)


def _fit_summary_section(method: str, syn: Any) -> dict:
    """The synthesizer's fit summary, or one line saying why there is none."""
    from . import report

    summary = getattr(syn, "summary", None)
    table = None
    if callable(summary):
        try:
            table = summary()
        except Exception:  # noqa: BLE001 - a summary is a convenience of some synthesizers
            table = None
    if isinstance(table, pd.Series):
        table = table.to_frame("value")
    if isinstance(table, pd.DataFrame):
        return report.section(report.TITLES["fit_summary"], table=table, folded=True)
    return report.not_applicable(
        report.TITLES["fit_summary"], f"Not applicable: {method} fits no posterior model, so "
        "there is no fit summary; its mechanism's settings are in the guarantee's full text.",
        folded=True)


def report_config(syn: Any, design: Any) -> ReleaseConfig:
    """The configuration a `surveysynth release` run of the fitted synthesizer ``syn`` on
    ``design`` would have, without tables or regressions (what the report needs: method,
    settings, design columns, known variables = its ``known`` or predictors, r): so that
    :meth:`SyntheticRelease.save` writes the report the command writes for the same release."""
    from .release import _design_spec

    method = next((m for m in SYNTHESIZERS if type(syn) is synth_class(m)), None)
    if method is None:
        raise ValueError(f"no report for a {type(syn).__name__}: not one of the pipeline's "
                         f"synthesizers ({', '.join(SYNTHESIZERS)}).")
    params = dict(syn.get_params())
    synth: dict[str, Any] = {"method": method, **params, "init": dict(params)}
    seed = params.get("random_state")
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        synth["seed"] = int(seed)
    if method == "sequential":
        synth["variables"] = [dict(v) for v in params.get("variables") or []]
    try:
        spec = {k: v for k, v in _design_spec(design).items() if v is not None}
    except ValueError:  # a replicate design: the attack evidence's refit says it cannot run
        spec = {}
    known = _as_list(params.get("known") or params.get("predictors"))
    return ReleaseConfig(input_path=Path("."), design=spec, method=method, synth=synth,
                         tables=[], output=Path("."), known=known,
                         r=float(params.get("r") or 0.2))


def write_release_report(folder: Path, release: Any) -> list[str] | None:
    """The disclosure-review report of a release made by a synthesizer in this session
    (:meth:`SyntheticRelease.save`): the same report as `surveysynth release` writes
    (:func:`write_confidential_report`), into ``folder``, with the warnings the fit and the
    release raised (as the command lists them). Returns its flags beyond those warnings, or
    None when the release holds no fit (a loaded release: its confidential data is not in it)."""
    ctx = release.confidential.get("_report")
    if not ctx:
        return None
    syn, design = ctx["synthesizer"], ctx["design"]
    if not hasattr(design, "data"):  # fit on a data frame: a sample of equal weights
        from .design import SurveyDesign, as_pandas

        design = SurveyDesign(as_pandas(design, "design"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the utility fits' numerical notes
        return write_confidential_report(folder, report_config(syn, design), design, syn,
                                         release, list(dict.fromkeys(ctx.get("warnings", []))))


def _no_tuning(method: str, syn: Any) -> str:
    """Why a release has no tuning path (one line)."""
    if method in MARGINAL_METHODS:
        return (f"Not applicable: {method} has no risk weights to tune; its protection is "
                "OpenDP's noise on the measured marginals, calibrated to the budget.")
    if method == "quantile":
        return ("Not applicable: the quantile synthesizer has no risk weights to tune; its "
                "protection is its mechanism's noise, calibrated to the public bounds and "
                "epsilon.")
    if method in ("mixture", "nb"):
        alpha = getattr(syn, "alpha", None)
        if alpha is None:
            return f"Not applicable: {method} was fit without risk weights (alpha = none)."
        return (f"Not applicable: {method}'s risk weights (alpha = {alpha!r}) are computed "
                "directly from each record's identification risk; no tuning loop chooses them "
                "(their summary is in the fit summary).")
    if getattr(syn, "c_", 0) is None:
        return ("No tuning: the unweighted fit's bound was already within the target, so every "
                "risk weight is 1.")
    return f"Not applicable: {method} keeps no tuning path."


def _no_mcmc(method: str, syn: Any) -> str:
    """Why a release has no MCMC diagnostics table (one line)."""
    if method == "quantile":
        if getattr(syn, "method", "") == "jointexp":
            return "JointExp draws exactly: no MCMC diagnostics."
        used = getattr(syn, "sampler_used_", None)
        if used == "exact":
            return f"{getattr(syn, 'method', 'KNG')} drew every quantile exactly: no MCMC " \
                   "diagnostics."
        return (f"{getattr(syn, 'method', 'KNG')} sampler {used}: no Stan diagnostics; the "
                "per-quantile acceptance rates are in confidential.json.")
    if method in MARGINAL_METHODS:
        return f"{method} fits a graphical model by mirror descent: no MCMC diagnostics."
    if method == "sequential":
        return ("One Stan fit per step: each step's max R-hat, min bulk ESS and divergences "
                "are in the fit summary (the release gates apply to every step).")
    return f"{method} keeps no per-parameter MCMC diagnostics."


def _no_risk(cfg: ReleaseConfig, release: Any, perms: Any) -> str:
    """Why a release has no identification-risk section (one line)."""
    if release.kind != "partial":
        return (f"Not applicable: a full synthesis ({cfg.method}) releases no record's values "
                "as collected, so no synthetic record is linked to a confidential one through "
                "known variables; the attack-based evidence measures this release's "
                "disclosure risk.")
    if cfg.synth.get("outcome") is None:
        return (f"Not applicable: the identification risk of Hu, Savitsky & Williams is "
                f"defined for a partial synthesis of one outcome; {cfg.method} synthesizes "
                "several variables (the attack-based evidence measures this release's "
                "disclosure risk).")
    if not cfg.known:
        return "Not computed: no known variables ([report] known is empty)."
    return "Not computed: the release does not hold its row permutations (a loaded release)."


def _c_text(c: float | None) -> str:
    """The tuning constant for the report; None is the no-weighting path (alpha = 1)."""
    if c is None:
        return ("c = none: no risk weighting (the target was above the unweighted fit's bound; "
                "every alpha_i = 1, released as 'no privacy protection')")
    return f"c = {c:.4g}"


def _tables_without_budget(syn: Any, tables: list[TableSpec]) -> list[dict[str, str]]:
    """published_without_budget entries for tables whose n_unweighted are confidential counts:
    every classification variable released as collected, so each cell's count of synthetic
    records equals its count of confidential records (derivable from the released microdata
    anyway; docs/privacy.md, "What public/ holds")."""
    collected = set(syn.released_as_collected()) if hasattr(syn, "released_as_collected") else set()
    out = []
    for t in tables:
        by = t.rows + t.cols
        if by and set(by) <= collected:
            out.append({
                "item": f"n_unweighted of table {t.name!r}: the confidential record counts of "
                        f"its cells by {by}",
                "reason": f"{by} are released as collected (partial synthesis), so the count "
                          "of records in each cell is the confidential count and can be read "
                          "off the released microdata; suppressing it in the table would "
                          "protect nothing."})
    return out


# ----------------------------------------------------------------------------- run
#: the temporary folders of releases being written (renamed into place at the end): the
#: command's Ctrl-C / SIGTERM handler removes them before it exits (surveysynth.cli)
PARTIAL_FOLDERS: set[Path] = set()


def _dp_table_hook() -> tuple[Any, Any]:
    """``surveysynth.dp_tables``' ``dp_tabulate`` and ``Odometer`` (issue 40 item 1), the
    function every ``[[dp_tables]]`` block runs; a clear error while the module is absent."""
    try:
        from . import dp_tables
    except ImportError as exc:  # pragma: no cover - present once issue 40 item 1 is merged
        raise ConfigError(
            "[[dp_tables]]: this installation has no surveysynth.dp_tables (the DP table "
            "product of issue 40), which runs each block. Fix: update surveysynth, or remove "
            "the [[dp_tables]] blocks.") from exc
    return dp_tables.dp_tabulate, dp_tables.Odometer


def publish_dp_tables(cfg: ReleaseConfig, design: Any, release: Any,
                      folder: Path) -> dict[str, Any] | None:
    """Run the ``[[dp_tables]]`` blocks on the confidential design, write each table to
    ``folder/<name>.csv`` and return the composed budget of the release (None for a
    synthesizer without a formal budget): ``measure`` ("pure": epsilons add; "zcdp": rhos),
    ``entries`` (the synthesizer's account, then each table's measurements, as booked in one
    odometer, which refuses a table that would exceed ``[budget] total``), ``total`` and
    ``declared_total``."""
    if cfg.method not in MARGINAL_METHODS:
        return None
    measure = {**cfg.synth.get("init", {}), **cfg.synth.get("fit", {})}.get("privacy", "pure")
    declared = cfg.source.get("budget", {}).get("total")
    blocks = cfg.source.get("dp_tables", [])
    first = {"step": f"synthesizer {cfg.method} (its ledger: {len(release.privacy.ledger)} "
                     "entries)", "budget": float(release.epsilon)}
    entries: list[dict[str, Any]] = [first]
    if blocks:
        dp_tabulate, Odometer = _dp_table_hook()
        odo = Odometer(measure=measure, total=declared)
        odo.entries.append(dict(first))
        folder.mkdir(parents=True, exist_ok=True)
        for i, b in enumerate(blocks):
            kw = {k: v for k, v in b.items() if k not in ("name", "epsilon")}
            kw["epsilon" if measure == "pure" else "rho"] = float(b["epsilon"])
            if "bounds" in kw:
                kw["bounds"] = tuple(kw["bounds"])
            try:
                res = dp_tabulate(design, measure=measure, odometer=odo, **kw)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"dp_tables[{i}]: {exc}") from exc
            res.table.to_csv(folder / f"{b.get('name', f'dp_table_{i + 1}')}.csv")
        entries = [{str(k): v for k, v in e.items()} for e in odo.entries]
    total = float(sum(float(e["budget"]) for e in entries))
    if declared is not None and total > declared * (1 + 1e-12):  # pragma: no cover
        raise ConfigError(f"budget.total = {declared:g} exceeded: {total:g} spent.")
    # add/remove-one is the relation of the stated total: the synthesizer's loss at symmetric
    # distance 2 bounds distance 1 too, and each table's is add/remove-one. Under replace-one a
    # table's loss doubles (group-privacy bound), the synthesizer's does not.
    synth_part = float(first["budget"])
    return {"measure": measure, "unit": "epsilon" if measure == "pure" else "rho",
            "entries": entries, "total": total, "declared_total": declared,
            "total_neighbours": "add/remove one record",
            "total_replace_one": synth_part + (2.0 if measure == "pure" else 4.0)
            * (total - synth_part),
            "composition": "sequential: the synthesizer and every DP table use the same "
                           "confidential records, so their budgets add",
            "neighbours": "total is stated for add/remove-one neighbours: the synthesizer's loss "
                          "is OpenDP's map at symmetric distance 2 (replace-one), which also "
                          "bounds add/remove-one; each DP table's is add/remove-one. Under "
                          "replace-one a table's epsilon counts twice (rho four times, zCDP "
                          "group privacy): total_replace_one"}


def remove_partial_folders() -> None:
    """Remove the temporary folders of unfinished releases (see :data:`PARTIAL_FOLDERS`)."""
    for tmp in list(PARTIAL_FOLDERS):
        shutil.rmtree(tmp, ignore_errors=True)
        PARTIAL_FOLDERS.discard(tmp)


def run_release(config: str | Path | ReleaseConfig, quiet: bool = False,
                verbosity: int | None = None) -> Path:
    """Run the whole pipeline; returns the release folder. ``verbosity``: 0 silent (also
    ``quiet=True``), 1 steps and a summary (default), 2 also the synthesizers' own progress."""
    cfg = config if isinstance(config, ReleaseConfig) else load_config(config)
    from ._versions import versions
    from .release import write_confidential
    from .tables import tabulate

    level = 0 if quiet else (1 if verbosity is None else int(verbosity))
    con = Console(level)
    out = cfg.output
    if out.exists() and not cfg.overwrite:
        raise ConfigError(f"output.folder: {str(out)!r} exists. Fix: another folder, or overwrite = true.")
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".partial-{out.name}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    raw_data = read_input(cfg.input_path)
    checksum = _sha256(cfg.input_path)
    needed = _synthesized(cfg.method, cfg.synth) + _design_columns(cfg.design, raw_data)
    data, missing = apply_missing(cfg.missing_policy,
                                  _missing_checked(cfg.method, cfg.synth, needed), raw_data)
    design = build_design(cfg.design, data)
    notes = []
    if missing["dropped"]:
        notes.append(f"[missing] policy = \"drop\": {missing['dropped']} of {len(raw_data)} "
                     f"records dropped for missing values ({missing['missing_by_column']}); the "
                     "release is synthesized from the complete records.")
    con.step("design", f"{len(data)} records, {type(design).__name__}; synthesizer "
                       f"{cfg.method}" + (f" ({missing['dropped']} records with missing values "
                                          "dropped, see the confidential report)"
                                          if missing["dropped"] else ""))
    con.step("compile", _stan_compile_note(cfg.method, cfg.synth))
    tmp = Path(tempfile.mkdtemp(prefix=f".partial-{out.name}-", dir=out.parent))
    PARTIAL_FOLDERS.add(tmp)
    try:
        con.step("fit", f"{cfg.method} on {len(data)} records")
        syn, release, caught = fit_and_release(cfg, design, progress=level >= 2, console=con)
        for w in caught[:3]:
            con.note(console_text("warning: " + w))
        if len(caught) > 3:
            con.note(f"({len(caught) - 3} more warnings in the confidential report)")
        notes += caught
        pub = tmp / "public"
        release.save_public(pub / "synthetic")
        (pub / "tables").mkdir()
        con.step("tables", f"{len(cfg.tables)} table(s)")
        published = []
        for t in cfg.tables:
            tab = tabulate(release, t.rows, t.cols or None, t.value, t.stat, cv_max=t.cv_max,
                           n_min=t.n_min)
            published.append((t, tab))
            fmt = {"title": t.title, "digits": t.digits, "labels": t.labels}
            tab.to_csv(pub / "tables" / f"{t.name}.csv", **fmt)
            tab.to_excel(pub / "tables" / f"{t.name}.xlsx", **fmt)
        record = release.manifest()["privacy"]
        record["published_without_budget"] += _tables_without_budget(syn, cfg.tables)
        budget = publish_dp_tables(cfg, design, release, pub / "dp_tables")
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
            "guarantee_class": release.privacy.guarantee_class,
            "guarantee_text": release.privacy.guarantee_text,
            "privacy": record,
            "tables": [{k: v for k, v in t.__dict__.items()} for t in cfg.tables],
            **({} if budget is None else {"budget": budget}),
            "versions": versions(),
            "files": sorted(
                [str(p.relative_to(pub)) for p in pub.rglob("*") if p.is_file()] + ["manifest.json"]
            ),
        }
        (pub / "manifest.json").write_text(json.dumps(manifest, indent=2, allow_nan=False))
        con.step("writing", f"public part ({len(manifest['files'])} files) and the confidential "
                            "disclosure-review part")
        conf = tmp / "confidential"
        extra = {}
        cs = getattr(syn, "confidential_summary", None)
        if callable(cs):
            extra = cs()
        write_confidential(conf, {
            **extra,
            "seed": cfg.synth.get("seed"),
            "input": {"file": str(cfg.input_path), "sha256": checksum,
                      "rows": int(raw_data.shape[0])},
            "missing": missing,
            "warnings": caught,
            "config": cfg.source,
        })
        with warnings.catch_warnings():
            if level < 2:  # numerical notes of the utility fits (e.g. pMSE's logistic overflow)
                warnings.simplefilter("ignore", RuntimeWarning)
            flags = write_confidential_report(conf, cfg, design, syn, release, notes, published)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the release is a normal folder
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        PARTIAL_FOLDERS.discard(tmp)
    if level >= 1:
        eps = release.epsilon
        con.say(f"done in {con.elapsed()}: {cfg.method} {release.kind} synthesis, m = "
                   f"{release.m}, epsilon = " + ("none" if eps is None else f"{eps:.3g}")
                   + f", {release.privacy.guarantee}; {len(cfg.tables)} table(s)")
        con.say(f"publish only {out / 'public'}; disclosure review: "
                   f"{out / 'confidential' / 'report.html'} (confidential)")
        if flags:  # the report's flags, also where users look (issue 37)
            con.say(f"the report flags {len(flags)} problem(s) (confidential):")
            for f in flags[:10]:
                con.say(f"  - {f}")
            if len(flags) > 10:
                con.say(f"  ({len(flags) - 10} more in the report)")
    return out
