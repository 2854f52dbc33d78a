"""The release configuration's one schema: it validates a config and generates its reference page.

``SCHEMA`` lists, per section of the TOML file and per key, the type, whether it is required
(always, or for some synthesizers), the default, the allowed values and a description.
:func:`check_keys` checks a parsed config against it (unknown keys, types, required keys,
allowed values; data-independent) and :func:`render_markdown` writes ``docs/release-config.md``
from it (``surveysynth release --schema-doc``; ``tests/test_release_config.py`` fails when the
page is not current). The synthesizers' own settings (``[synthesizer] init``) are documented from
their classes' signatures and docstrings, so the page cannot drift from the code either.
:func:`example_config` gives a complete working config per method (``surveysynth release
--example METHOD``) and :func:`example_data` the small data set the examples run on.

Checks that need the data (columns exist, missing values, types of the outcome, tables on
released variables, the design) are in :mod:`surveysynth.pipeline`.
"""

from __future__ import annotations

import inspect
import re
import warnings
from dataclasses import dataclass
from typing import Any

SYNTHESIZERS = ("FBS", "FBP", "PBP", "quantile", "mixture", "nb", "sequential", "AIM", "MST")
#: methods that synthesize a list of variables (synthesizer.variables) under a formal DP budget
VARIABLE_METHODS = ("quantile", "AIM", "MST")
#: the DP marginal-based synthesizers (surveysynth.synth.marginal_dp)
MARGINAL_METHODS = ("AIM", "MST")
#: variable types of the sequential synthesizer (surveysynth.synth.sequential.TYPES)
SEQUENTIAL_TYPES = ("continuous", "positive", "bounded", "count", "integer", "binary",
                    "categorical", "ordinal")
_PSEUDO = ("FBS", "FBP", "PBP")
_OUTCOME_METHODS = ("FBS", "FBP", "PBP", "mixture", "nb")
SVREP_TYPES = ("BRR", "Fay", "JK1", "JKn", "bootstrap", "ACS", "successive-difference", "JK2",
               "other")


#: ``family`` values of a ``[[report.regressions]]`` block (surveysynth.analysis.families)
REGRESSION_FAMILIES = ("gaussian", "binomial", "quasibinomial", "poisson", "quasipoisson")

#: ``stat`` values of a ``[[tables]]`` block (tabulate's, in the config's spelling)
TABLE_STATS = ("total", "mean", "proportion", "percent", "row percent", "column percent",
               "median")


class ConfigError(ValueError):
    """The release configuration is wrong; the message names the key and the fix."""


_NO_DEFAULT = object()

#: type name -> (check, phrase used in messages and the page)
_TYPES: dict[str, tuple[Any, str]] = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "strings": (lambda v: isinstance(v, str) or (isinstance(v, list)
                                                 and all(isinstance(x, str) for x in v)),
                "a string or a list of strings"),
    "integer": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "numbers": (lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool)) or (
        isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                    for x in v)), "a number or a list of numbers"),
    "boolean": (lambda v: isinstance(v, bool), "true or false"),
    "table": (lambda v: isinstance(v, dict), "a table ({ key = value, ... })"),
    "integer table": (lambda v: isinstance(v, dict) and all(
        isinstance(x, int) and not isinstance(x, bool) for x in v.values()),
        "a table of integers ({ estimate = 0, se = 1 })"),
    "labels": (lambda v: isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()),
               "a table of tables ({ gender = { 1 = \"male\", 2 = \"female\" } })"),
    # a synthesizer setting: checked against the class's constraint table (check_keys)
    "setting": (lambda v: True, "a setting of the synthesizer class"),
}


@dataclass(frozen=True)
class Key:
    """One key of a section: its type (a name of ``_TYPES``), whether it is required (True, or
    the synthesizer methods that need it), its default, allowed values and description."""

    name: str
    type: str
    description: str
    required: bool | tuple[str, ...] = False
    default: Any = _NO_DEFAULT
    allowed: tuple[Any, ...] | None = None
    positive: bool = False
    methods: tuple[str, ...] | None = None  # methods that read it (None: all)
    #: the synthesizer setting it sets: its type, range and choices are the class's
    #: constraint table's (surveysynth.synth.params), checked and documented from there
    setting: str = ""
    #: the new name of a deprecated key (kept for one release: warns and maps)
    renamed: str = ""

    def required_for(self, method: str | None) -> bool:
        if isinstance(self.required, tuple):
            return method in self.required
        return bool(self.required)


@dataclass(frozen=True)
class Section:
    name: str
    description: str
    keys: tuple[Key, ...]
    required: bool = True
    array: bool = False  # [[tables]]: an array of tables

    def key(self, name: str) -> Key:
        return {k.name: k for k in self.keys}[name]


SCHEMA: tuple[Section, ...] = (
    Section("input", "The confidential input file.", (
        Key("path", "string", "the confidential CSV or Parquet file (relative to the config "
            "file's folder)", required=True),
    )),
    Section("design", "The survey design of the input (R `svydesign`), or its replicate "
            "weights (R `svrepdesign`: give `repweights`). An empty section is a simple random "
            "sample with weights 1.", (
        Key("ids", "strings", "cluster ids, outermost first: a column, a list, or a formula "
            "`\"~dnum+snum\"` (default: one record per cluster); PBP, quantile, mixture and nb "
            "refuse real clusters (`--check` says so: docs/kng.md, \"Weights, strata and "
            "clusters\")"),
        Key("strata", "strings", "stratum column(s)"),
        Key("weights", "strings", "sampling weight column"),
        Key("probs", "strings", "inclusion probability column(s) (instead of weights)"),
        Key("fpc", "strings", "finite population correction column(s): population sizes or "
            "sampling fractions, one per stage"),
        Key("nest", "boolean", "cluster ids are nested in strata (relabel them)", default=False),
        Key("lonely_psu", "string", "what to do with a stratum of one PSU (R "
            "`survey.lonely.psu`)", default="fail",
            allowed=("fail", "remove", "adjust", "average", "certainty")),
        Key("repweights", "strings", "replicate weight columns: a regular expression matched "
            "against the column names (R `grep`), a list, or a formula; turns the design into a "
            "replicate design (`surveysynth.replicate_design.ReplicateDesign`)"),
        Key("type", "string", "replicate type (R `svrepdesign(type=)`); only with repweights",
            default="other", allowed=SVREP_TYPES),
        Key("scale", "number", "overall variance scale of the replicates; only with "
            "repweights", positive=True),
        Key("rscales", "numbers", "per-replicate scales; only with repweights"),
        Key("mse", "boolean", "centre the replicate variance at the full-sample estimate; only "
            "with repweights", default=False),
    )),
    Section("synthesizer", "The synthesizer and its privacy target. Settings not listed here go "
            "in `init` (see *Synthesizer settings* below).", (
        Key("method", "string", "the synthesizer", required=True, allowed=SYNTHESIZERS),
        Key("outcome", "setting", "the confidential variable to synthesize",
            required=_OUTCOME_METHODS, methods=_OUTCOME_METHODS, setting="outcome"),
        Key("predictors", "setting", "predictor columns of the outcome model (released as "
            "collected in a partial synthesis)", default=[], methods=_OUTCOME_METHODS,
            setting="predictors"),
        Key("variables", "setting", "the variables to synthesize, in order",
            required=VARIABLE_METHODS, methods=VARIABLE_METHODS, setting="variables"),
        Key("log", "setting", "model log(outcome) (the outcome must be > 0)", default=True,
            methods=_PSEUDO, setting="log"),
        Key("target_epsilon", "setting", "epsilon of the whole release (Delta target = epsilon "
            "/ (2 m)); give exactly one of target_epsilon or target_lipschitz; sequential: the "
            "total over its variables, shared by `init.budget` (default equal shares)",
            methods=(*_PSEUDO, "sequential"), setting="target_epsilon"),
        Key("public", "setting", "sequential: variables released as collected and used as "
            "predictors of every synthesized variable (the design's strata are added)",
            default=[], methods=("sequential",), setting="public"),
        Key("unlisted", "setting", "sequential: columns neither in `[[variables]]` nor public "
            "nor the design: \"drop\" them or release them as collected (\"public\")",
            default="drop", methods=("sequential",), setting="unlisted"),
        Key("target_lipschitz", "setting", "target Lipschitz bound Delta_alpha of the pseudo "
            "posterior", methods=_PSEUDO, setting="target_lipschitz"),
        Key("epsilon", "setting", "the total epsilon of the KNG synthesis; AIM / MST: their "
            "budget (epsilon, or rho with init.privacy = \"zcdp\")",
            required=VARIABLE_METHODS, methods=VARIABLE_METHODS, setting="epsilon"),
        Key("m", "setting", "number of synthetic data sets", default=5, setting="m"),
        Key("seed", "setting", "a secret key for a reproducible run (kept in confidential/ "
            "only); default: secret OS entropy", setting="random_state"),
        Key("population_size", "setting", "public population size N the released weights sum "
            "to (default: the sum of the confidential weights, then listed as published "
            "without budget)", setting="population_size"),
        Key("known", "setting", "variables an intruder is assumed to know (risk weights; "
            "sequential: with init.risk_weights = \"identification\")",
            methods=("mixture", "nb", "sequential"), setting="known"),
        Key("r", "setting", "identification-risk radius (relative) of the risk weights "
            "(sequential: with init.risk_weights = \"identification\")",
            methods=("mixture", "nb", "sequential"), setting="r"),
        Key("alpha", "setting", "risk weights alpha of the mixture / NB synthesizers: "
            "identification-risk weights from `known` and `r`", default="pairwise",
            allowed=("pairwise", "marginal"), methods=("mixture", "nb"), setting="alpha"),
        Key("weights", "setting", "deprecated old name of `alpha` (\"weights\" means sampling "
            "weights everywhere else); still read, with a warning, for one release",
            methods=("mixture", "nb"), renamed="alpha"),
        Key("init", "table", "further constructor settings of the method's class (see "
            "*Synthesizer settings*)", default={}),
        Key("fit", "table", "more settings, merged after `init` (kept for old configs)",
            default={}),
    )),
    Section("variables", "The variables of a sequential synthesis (`method = \"sequential\"`), "
            "one `[[variables]]` block each, in synthesis order (docs/sequential.md).", (
        Key("name", "string", "the column", required=True),
        Key("type", "string", "its type: the model it gets", required=True,
            allowed=SEQUENTIAL_TYPES),
        Key("bounds", "numbers", "public bounds [lo, hi] (required for bounded; optional for "
            "continuous, positive, count: the model is truncated to them)"),
        Key("scale", "string", "bounded only: \"identity\" (a normal truncated to the bounds) "
            "or \"logit\" (a normal on the empirical logit, for skewed shares with mass near a "
            "bound)", default="identity", allowed=("identity", "logit")),
    ), required=False, array=True),
    Section("missing", "What to do with records that have missing values in a modelled "
            "variable or a design column. Nothing is dropped silently: with \"drop\" the "
            "number of records dropped (per column) is stated in the confidential report and "
            "confidential.json, and on the console.", (
        Key("policy", "string", "\"refuse\": `--check` and the run stop naming the column and "
            "the first rows; \"drop\": drop those records (complete cases) before the design is "
            "built", default="refuse", allowed=("refuse", "drop")),
    ), required=False),
    Section("tables", "Published tables (`[[tables]]`, one block per table), computed from the "
            "synthetic release with the combining rule; written as CSV and XLSX to "
            "public/tables/.", (
        Key("name", "string", "file name of the table (letters, digits, - and _)",
            default="table_<i>"),
        Key("rows", "strings", "the classification variable(s) of the rows", required=True),
        Key("cols", "strings", "the classification variable(s) of the columns", default=[]),
        Key("value", "string", "the variable totalled, averaged or whose median is taken; for "
            "`proportion` the variable whose level shares are shown (none: counts)"),
        Key("stat", "string", "the statistic of each cell (`surveysynth.tables.tabulate`): "
            "`total` (counts, or totals of value), `mean`, `proportion` (share of each level "
            "of value in the cell), `percent` (share of the grand total, in percent), `row "
            "percent` / `column percent` (share of the row / column), `median` (R "
            "svyquantile per synthetic set); combined over the synthetic sets by the release's "
            "rule", default="total", allowed=TABLE_STATS),
        Key("cv_max", "number", "cells with a larger CV are flagged", default=0.30,
            positive=True),
        Key("n_min", "number", "cells with fewer unweighted records are flagged", default=30),
        Key("title", "string", "title written above the table in the XLSX and CSV exports"),
        Key("digits", "integer table", "decimals per statistic in the exports: keys "
            "`estimate`, `se`, `cv`, `ci` (default: 0 for counts and totals, 2 for means, 3 "
            "for cv)"),
        Key("labels", "labels", "value labels per classification variable, shown instead of "
            "the codes"),
    ), required=False, array=True),
    Section("report", "The confidential disclosure-review report.", (
        Key("known", "strings", "variables an intruder is assumed to know, for the "
            "identification risk (default: synthesizer.known, else the predictors)"),
        Key("r", "number", "the identification-risk radius", default=0.2, positive=True),
        Key("attacks", "boolean", "attack-based evidence against a holdout (docs/attacks.md): "
            "with `holdout = \"split\"` an evaluation refit of the configuration on the "
            "records not held out (about doubles the fitting time; the published release is "
            "still fit on every record); false: the release's measures against its own "
            "records only, no extra fit", default=True),
        Key("holdout", "string", "records the synthesizer never saw: \"split\" (hold out "
            "`holdout_share` of the records from an evaluation refit) or a file of records of "
            "the same population with the input's columns (a second sample; no extra fit), "
            "relative to the config file's folder", default="split"),
        Key("holdout_share", "number", "share of the records held out by `holdout = "
            "\"split\"` (within strata)", default=0.2, positive=True),
        Key("attack_keys", "strings", "the intruder's key variables of synthpop's measures "
            "and the linkability attack (default: `known`)"),
        Key("attack_target", "string", "the target of synthpop's attribute measures and the "
            "inference attack (default: the outcome, else the first numeric attacked "
            "column)"),
    ), required=False),
    Section("report.regressions", "Regressions compared in the confidential report "
            "(`[[report.regressions]]`, one block per model): the survey-weighted GLM "
            "(`surveysynth.analysis.svyglm`) on the confidential design against the release's "
            "combined coefficients (`SyntheticRelease.glm`), with the CI overlap per "
            "coefficient. Every variable of the formula must be released. Nothing of it is "
            "published.", (
        Key("formula", "string", "the model, R style: `\"api00 ~ meals + stype\"`",
            required=True),
        Key("name", "string", "its heading in the report", default="regression_<i>"),
        Key("family", "string", "the GLM family (R's names)", default="gaussian",
            allowed=REGRESSION_FAMILIES),
    ), required=False, array=True),
    Section("dp_tables", "Differentially private tables computed from the CONFIDENTIAL design "
            "(`[[dp_tables]]`, one block per table; issue 40), published beside an AIM or MST "
            "release under one budget: every table's budget and the synthesizer's are booked "
            "in one ledger, and public/manifest.json states the composed total (`budget`). Run "
            "by `surveysynth.dp_tables.dp_tabulate` (the keys below are its arguments); written "
            "as CSV to public/dp_tables/.", (
        Key("name", "string", "file name of the table (letters, digits, - and _)",
            default="dp_table_<i>"),
        Key("cells", "strings", "the classification variable(s)", required=True),
        Key("values", "string", "the numeric variable of a total or mean (the categorical one "
            "of a proportion)"),
        Key("statistic", "string", "count, total, mean or proportion", default="count",
            allowed=("count", "total", "mean", "proportion")),
        Key("epsilon", "number", "this table's budget (epsilon; rho when the synthesizer's "
            "init.privacy is \"zcdp\")", required=True, positive=True),
        Key("bounds", "numbers", "public [lo, hi] of values (totals and means)"),
        Key("weight_cap", "number", "public cap on the weights (larger weights are trimmed)",
            required=True, positive=True),
        Key("groups", "integer", "random groups of the variance estimate", default=10,
            positive=True),
        Key("levels", "table", "public level sets of the classification variables"),
    ), required=False, array=True),
    Section("budget", "One budget for the whole release (issue 40): the synthesizer's and the "
            "`[[dp_tables]]`' budgets compose sequentially (epsilons add under pure DP, rhos "
            "under zCDP).", (
        Key("total", "number", "the declared total: a configuration whose budgets add up to "
            "more is refused before anything is computed", positive=True),
    ), required=False),
    Section("output", "Where the release folder goes.", (
        Key("folder", "string", "where the release folder goes (relative to the config "
            "file's folder)", required=True),
        Key("overwrite", "boolean", "replace an existing folder", default=False),
    )),
)

SECTIONS = {s.name: s for s in SCHEMA}


# --------------------------------------------------------------------------------------------
# validation (data-independent)
# --------------------------------------------------------------------------------------------


def _unknown(section: dict, allowed: list[str], where: str) -> None:
    extra = sorted(set(section) - set(allowed))
    if extra:
        raise ConfigError(
            f"{where}: unknown key(s) {extra}. Allowed: {sorted(allowed)}. Fix: check the "
            "spelling (docs/release-config.md lists every key)."
        )


def _check_section(values: Any, sec: Section, where: str, prefix: str,
                   method: str | None) -> None:
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a table of keys. Fix: write it as [{sec.name}].")
    # nested sections ([[report.regressions]]) are keys of their parent section
    children = [s.name.split(".", 1)[1] for s in SCHEMA if s.name.startswith(sec.name + ".")]
    _unknown(values, [k.name for k in sec.keys] + children, where)
    for key in sec.keys:
        path = f"{prefix}{key.name}"
        if key.name not in values:
            if key.required_for(method):
                raise ConfigError(f"{path} missing: {key.description}. Fix: add it to {where}.")
            continue
        v = values[key.name]
        if key.allowed is not None and key.type == "setting" and v not in key.allowed:
            raise ConfigError(f"{path} = {v!r}: choose one of {list(key.allowed)}.")
        check, phrase = _TYPES[key.type]
        if not check(v):
            raise ConfigError(f"{path} = {v!r}: must be {phrase} ({key.description}). Fix: "
                              "correct the value.")
        if key.positive and (v <= 0 if not isinstance(v, list) else any(x <= 0 for x in v)):
            raise ConfigError(f"{path} = {v!r}: must be a number > 0 ({key.description}).")
        if key.allowed is not None and v not in key.allowed:
            raise ConfigError(f"{path} = {v!r}: choose one of {list(key.allowed)}.")


def section_value(raw: dict[str, Any], name: str) -> Any:
    """The parsed value of a section, nested ones by their dotted name
    (``report.regressions``); None when absent (or its parent is not a table)."""
    value: Any = raw
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def check_keys(raw: dict[str, Any]) -> str:
    """Check a parsed config against :data:`SCHEMA` (unknown keys, types, required keys,
    allowed values, and the cross-key rules that need no data); returns the method. The
    ``[synthesizer]`` keys that are settings of the method's class (``Key.setting``) are
    checked against the class's constraint table, named by their config keys. A deprecated key
    (``Key.renamed``) is read as its new name with a DeprecationWarning (:func:`upgrade`)."""
    raw = upgrade(raw)
    _unknown(raw, [s.name for s in SCHEMA if "." not in s.name], "config")
    for sec in SCHEMA:
        if sec.required and sec.name not in raw:
            raise ConfigError(f"[{sec.name}] section missing. Fix: add it (see "
                              "docs/release-config.md or `surveysynth release --example FBS`).")
    syn = raw["synthesizer"]
    method = syn.get("method") if isinstance(syn, dict) else None
    if method not in SYNTHESIZERS:
        raise ConfigError(f"synthesizer.method = {method!r} is not a known synthesizer. Choose "
                          f"one of {list(SYNTHESIZERS)}.")
    for sec in SCHEMA:
        value = section_value(raw, sec.name)
        if value is None:
            continue
        if sec.array:
            if not isinstance(value, list):
                raise ConfigError(f"[{sec.name}] must be an array of tables. Fix: write each "
                                  f"as [[{sec.name}]].")
            for i, t in enumerate(value):
                _check_section(t, sec, f"{sec.name}[{i}]", f"{sec.name}[{i}].", method)
        else:
            _check_section(value, sec, f"[{sec.name}]", f"{sec.name}.", method)
    _check_settings(raw["synthesizer"], method)
    _check_cross(raw, method)
    return method


def upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """The config with deprecated keys renamed (``synthesizer.weights`` -> ``synthesizer.alpha``),
    a DeprecationWarning naming the new key for each; a new dict (the caller's is unchanged).
    Both the old and the new key given is refused."""
    from .synth.params import user_stacklevel

    out = dict(raw)
    for sec in SCHEMA:
        values = out.get(sec.name)
        if sec.array or "." in sec.name or not isinstance(values, dict):
            continue
        for key in sec.keys:
            if not key.renamed or key.name not in values:
                continue
            if key.renamed in values:
                raise ConfigError(f"{sec.name}.{key.name} and {sec.name}.{key.renamed} both given; "
                                  f"{key.name!r} is the deprecated old name of {key.renamed!r}. "
                                  f"Fix: keep {sec.name}.{key.renamed} only.")
            warnings.warn(f"{sec.name}.{key.name} is deprecated and will be removed in the next "
                          f"release; write {sec.name}.{key.renamed} (same values).",
                          DeprecationWarning, stacklevel=user_stacklevel() + 1)
            values = {(key.renamed if k == key.name else k): v for k, v in values.items()}
        out[sec.name] = values
    return out


def _check_settings(syn: dict[str, Any], method: str) -> None:
    """The [synthesizer] keys that set the class's settings, against its constraint table."""
    from .synth.params import validate_params

    keys = {k.setting: k.name for k in SECTIONS["synthesizer"].keys
            if k.setting and k.name in syn and (k.methods is None or method in k.methods)}
    try:
        validate_params(synth_class(method), {p: syn[name] for p, name in keys.items()},
                        key=lambda p: f"synthesizer.{keys.get(p, p)}")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def _check_cross(raw: dict[str, Any], method: str) -> None:
    syn = raw["synthesizer"]
    for key in SECTIONS["synthesizer"].keys:
        if key.methods is not None and key.name in syn and method not in key.methods:
            raise ConfigError(f"synthesizer.{key.name} is not read by method {method!r} (only "
                              f"by {list(key.methods)}). Fix: remove it.")
    _check_sequential(raw, method)
    if method in _PSEUDO and ("target_epsilon" in syn) == ("target_lipschitz" in syn):
        raise ConfigError(
            f"synthesizer: {method} needs exactly one of target_epsilon or target_lipschitz. "
            "Fix: keep one of them.")
    design = raw["design"]
    rep_only = [k for k in ("type", "scale", "rscales", "mse") if k in design]
    if rep_only and "repweights" not in design:
        raise ConfigError(f"design.{rep_only[0]} is a replicate-weight setting. Fix: give "
                          "design.repweights (the replicate weight columns) or remove it.")
    if "repweights" in design:
        clash = [k for k in ("ids", "strata", "probs", "fpc", "nest") if k in design]
        if clash:
            raise ConfigError(f"design.{clash[0]}: a replicate design (design.repweights) "
                              "carries its design in the replicate weights. Fix: remove "
                              f"design.{clash[0]} (keep design.weights, the full-sample weight).")
    for i, t in enumerate(raw.get("tables", [])):
        stat = t.get("stat", "total")
        if stat in ("mean", "median", "proportion") and "value" not in t:
            raise ConfigError(f"tables[{i}].value missing: stat={stat!r} needs the variable "
                              "(to average, take the median of, or share by level).")
        if stat in ("row percent", "column percent") and not t.get("cols"):
            raise ConfigError(f"tables[{i}].cols missing: stat={stat!r} needs column "
                              "variables. Fix: give cols, or stat='percent'.")
        bad = sorted(set(t.get("digits", {})) - {"estimate", "se", "cv", "ci"})
        if bad:
            raise ConfigError(f"tables[{i}].digits: unknown statistic(s) {bad}. Fix: use "
                              "estimate, se, cv, ci.")
        name = str(t.get("name", f"table_{i + 1}"))
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"tables[{i}].name = {name!r}: use letters, digits, - and _ only.")
    # KNG's public bounds (and every other rule between settings) are the class's own:
    # check_params via the pipeline, named by config key (synthesizer.init.bounds)
    _check_budget(raw, method)


def _check_budget(raw: dict[str, Any], method: str) -> None:
    """[[dp_tables]] only beside a formally private synthesizer (AIM, MST), and the composed
    budget within [budget] total."""
    tables = raw.get("dp_tables", [])
    if tables and method not in MARGINAL_METHODS:
        raise ConfigError(
            f"[[dp_tables]] with synthesizer.method = {method!r}: DP tables compose into one "
            f"budget only with a formally private synthesizer ({list(MARGINAL_METHODS)}); {method}'s "
            "guarantee is of another kind. Fix: method = \"AIM\" or \"MST\", or publish the "
            "tables in a separate release.")
    for i, t in enumerate(tables):
        name = str(t.get("name", f"dp_table_{i + 1}"))
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"dp_tables[{i}].name = {name!r}: use letters, digits, - and _ "
                              "only.")
        if t.get("statistic", "count") != "count" and "values" not in t:
            raise ConfigError(f"dp_tables[{i}].values missing: statistic "
                              f"{t.get('statistic')!r} needs the variable.")
    total = raw.get("budget", {}).get("total")
    if total is not None and method in MARGINAL_METHODS:
        spent = float(raw["synthesizer"]["epsilon"]) + sum(float(t["epsilon"]) for t in tables)
        if spent > total * (1 + 1e-12):
            raise ConfigError(
                f"budget.total = {total:g}: the synthesizer ({raw['synthesizer']['epsilon']:g}) "
                f"and the {len(tables)} DP table(s) "
                f"({', '.join(format(float(t['epsilon']), 'g') for t in tables) or 'none'}) spend "
                f"{spent:g} in all. Fix: smaller budgets, or a larger declared total if the "
                "disclosure review allows it.")


def _check_sequential(raw: dict[str, Any], method: str) -> None:
    """[[variables]] blocks: only and always with method = "sequential"; their bounds."""
    if (method == "sequential") != bool(raw.get("variables")):
        raise ConfigError(
            "[[variables]]: a sequential synthesis needs one [[variables]] block per variable "
            "(name, type, bounds), and only it reads them. Fix: add them with method = "
            "\"sequential\", or remove them." if method == "sequential" else
            f"[[variables]] blocks are read by method = \"sequential\" only, not {method!r}. "
            "Fix: remove them.")
    # each block's bounds and scale: Sequential's own rules (check_params, via the pipeline)


# --------------------------------------------------------------------------------------------
# synthesizer settings from the classes
# --------------------------------------------------------------------------------------------

#: constructor parameters the pipeline fills from [synthesizer] keys or the command line
PIPELINE_SET = {"random_state": "synthesizer.seed", "alpha": "synthesizer.alpha",
                "progress": "the command line (--quiet / --verbose)"}


def synth_class(method: str) -> type:
    from . import synth
    from .synth import marginal_dp

    return {"FBS": synth.FBS, "FBP": synth.FBP, "PBP": synth.PBP,
            "quantile": synth.QuantileSynthesizer, "mixture": synth.MixtureSynthesizer,
            "nb": synth.NBSynthesizer, "sequential": synth.Sequential,
            "AIM": marginal_dp.AIM, "MST": marginal_dp.MST}[method]


def _doc_entries(cls: type) -> tuple[dict[str, str], list[str]]:
    """numpy-style ``name : text`` entries and ``*`` bullets of the class docstrings (the class
    and its bases, nearest first)."""
    entries: dict[str, str] = {}
    bullets: list[str] = []
    for klass in cls.__mro__:
        doc = inspect.cleandoc(klass.__dict__.get("__doc__") or "")
        for m in re.finditer(r"^(\w+) : (.*(?:\n {4}.*)*)", doc, flags=re.M):
            entries.setdefault(m.group(1), " ".join(m.group(2).split()))
        for m in re.finditer(r"^\* (.*(?:\n {2}.*)*)", doc, flags=re.M):
            bullets.append(" ".join(m.group(1).split()))
    return entries, bullets


def _setting_phrase(key: Key) -> str:
    """The type column of a [synthesizer] key that sets a class setting: its constraint
    table's words, per method where the methods differ."""
    from .synth.params import constraints_of, describe

    if key.renamed:
        return f"deprecated: see `{key.renamed}`"
    by_phrase: dict[str, list[str]] = {}
    for method in key.methods or SYNTHESIZERS:
        table = constraints_of(synth_class(method))
        by_phrase.setdefault(describe(table[key.setting]), []).append(method)
    if len(by_phrase) == 1:
        return next(iter(by_phrase))
    return "; ".join(f"{', '.join(ms)}: {ph}" for ph, ms in by_phrase.items())


def synth_settings(method: str) -> list[dict[str, str]]:
    """Constructor parameters of the method's class: name, default, allowed values (its
    constraint table) and description (from the docstring's entry for it, else the docstring
    bullet that names it)."""
    from .synth.params import aliases_of, constraints_of, describe

    cls = synth_class(method)
    table = constraints_of(cls)
    renamed = aliases_of(cls)
    entries, bullets = _doc_entries(cls)
    out = []
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        desc = entries.get(p.name)
        if desc is None:
            hit = [b for b in bullets if f"``{p.name}``" in b]
            desc = hit[0] if hit else ""
        default = "required" if p.default is p.empty else repr(p.default)
        allowed = (f"deprecated: use `{renamed[p.name]}`" if p.name in renamed
                   else describe(table[p.name]))
        out.append({"name": p.name, "default": default, "allowed": allowed,
                    "description": desc})
    return out


# --------------------------------------------------------------------------------------------
# examples
# --------------------------------------------------------------------------------------------

_EXAMPLE_SYNTH = {
    "FBS": """method = "FBS"
outcome = "salary"
predictors = ["field", "gender"]
log = true
target_epsilon = 20.0
m = 3
population_size = 100000
# main effects: 400 records leave some field x gender cells empty or tiny (full cell effects,
# effects = "cells", are refused by --check when a cell is empty)
init = { effects = "main", chains = 4, draws = 1000, warmup = 1000 }""",
    "FBP": """method = "FBP"
outcome = "salary"
predictors = ["field", "gender"]
log = true
target_lipschitz = 3.4
m = 3
population_size = 100000
init = { effects = "main" }""",
    "PBP": """method = "PBP"
outcome = "salary"
predictors = ["field", "gender"]
log = true
target_lipschitz = 3.4
m = 3
population_size = 100000
init = { effects = "main" }""",
    "quantile": """method = "quantile"
variables = ["visits", "salary"]
epsilon = 5.0
m = 3
population_size = 100000
# public bounds on every variable (required), stated from outside the data: visits per year
# are recorded up to 60 (the data's top code, stated with them: example_data() caps them) and
# salaries of doctorate holders lie within 0-500,000 (a round range from public salary
# statistics, not the sample's maximum); C_X: the public bound on the predictors of the
# second model (visits <= 60, with the intercept). The quantile grid is the default (seed
# 004's 49 quantiles, 0.01-0.99): a synthetic record takes a random grid quantile, so a short
# grid (0.1-0.9) leaves no tails (q99 = q90) and coarse values.
# Flags the report still shows (seeds 1-3: 2 / 3 / 2 of them): q10 of visits 2-3 against 1 (a
# count whose low quantiles are 0 and 1, so one unit is 100%), q99 of salary ~398,000 against
# 313,000 (27%: the tail towards the public bound at n = 400) and, on one seed, corr(visits,
# salary) -0.26 against 0.03 with the salary regression's coefficients. Epsilon 10 or a larger
# slope share left them unchanged (measured): they are the mechanism's resolution at this
# size. Means and medians, the release's main use, are not flagged.
init = { bounds = { visits = [0, 60], salary = [0, 500000] }, C_X = { visits = 1, salary = 60 }, n_iter = 200 }""",
    "AIM": """method = "AIM"
variables = ["field", "gender", "salary"]
# the budget: epsilon (pure DP; init.privacy = "zcdp" makes it rho)
epsilon = 4.0
m = 3
population_size = 100000
# public domains: the categories of field and gender, public bin edges of salary (the first
# and last are public bounds), public weight classes (a synthetic weight is its class's
# midpoint); fewer mirror-descent iterations for the example
init = { categories = { field = [1, 2, 3, 4, 5, 6, 7, 8], gender = ["male", "female"] }, bins = { salary = [0, 60000, 90000, 120000, 150000, 200000, 500000] }, weight_bins = [0, 100, 200, 300, 500, 1500], iters = 200 }""",
    "MST": """method = "MST"
variables = ["field", "gender", "salary"]
epsilon = 4.0
m = 3
population_size = 100000
init = { categories = { field = [1, 2, 3, 4, 5, 6, 7, 8], gender = ["male", "female"] }, bins = { salary = [0, 60000, 90000, 120000, 150000, 200000, 500000] }, weight_bins = [0, 100, 200, 300, 500, 1500], iters = 200 }""",
    "mixture": """method = "mixture"
outcome = "salary"
predictors = ["field", "gender"]
known = ["field", "gender"]
r = 0.2
alpha = "pairwise"
m = 3
population_size = 100000
# two components, gamma = 4 (the weights theta ~ Dirichlet(gamma / K) = Dirichlet(2, 2): no
# pull towards an empty component, whose funnel gave divergent transitions with the default
# gamma = 1 on 400 records) and a higher target acceptance rate (pystan's delta)
init = { K = 2, gamma = 4.0, categorical = ["field"], chains = 4, draws = 1000, warmup = 1000, stan_kwargs = { delta = 0.95 } }""",
    "nb": """method = "nb"
outcome = "visits"
predictors = ["field", "gender"]
known = ["field", "gender"]
r = 0.2
alpha = "pairwise"
m = 3
population_size = 100000
init = { categorical = ["field"], chains = 4, draws = 1000, warmup = 1000 }""",
    "sequential": """method = "sequential"
target_epsilon = 30.0
m = 3
population_size = 100000
unlisted = "drop"
init = { weights = "smoothed", missing = "refuse", chains = 4, draws = 1000, warmup = 1000 }

[[variables]]
name = "gender"
type = "binary"

[[variables]]
name = "salary"
type = "positive"

[[variables]]
name = "visits"
type = "count"
bounds = [0, 60]""",
}

_EXAMPLE_TABLE = """[[tables]]
name = "mean_salary_by_field_gender"
title = "Mean salary by field of degree and gender"
rows = "field"
cols = "gender"
value = "salary"
stat = "mean"
digits = { estimate = 0, se = 0 }
labels = { field = { 1 = "Biology", 2 = "Chemistry", 3 = "Physics" } }"""


def example_config(method: str) -> str:
    """A complete, working release config for ``method`` on :func:`example_data`'s columns."""
    if method not in SYNTHESIZERS:
        raise ConfigError(f"--example {method!r}: choose one of {list(SYNTHESIZERS)}.")
    if method == "nb":
        tables = (_EXAMPLE_TABLE.replace("salary", "visits")
                  .replace("estimate = 0, se = 0", "estimate = 1, se = 2"))
    elif method == "quantile":
        tables = """[[tables]]
name = "mean_salary"
title = "Mean salary (synthetic visits and salary)"
rows = "visits"
value = "salary"
stat = "mean"
n_min = 10"""
    else:
        tables = _EXAMPLE_TABLE
    risk = "" if method == "quantile" else '\n[report]\nknown = ["field", "gender"]\nr = 0.2\n'
    # on variables each method releases (a partial synthesis of one outcome releases it, its
    # predictors and the weights only)
    model = {"quantile": "salary ~ visits", "nb": "visits ~ gender",
             "sequential": "salary ~ gender + visits"}.get(method, "salary ~ gender")
    name = model.split("~")[0].strip()
    risk += ("\n# compared in the confidential report: confidential svyglm vs the release's "
             f'combined coefficients\n[[report.regressions]]\nname = "{name}"\n'
             f'formula = "{model}"\n')
    design = 'strata = "field"\nweights = "weight"'
    if method == "quantile":
        # issue 36 (D7): a quantile synthesis needs weights constant within strata, and it
        # runs within each stratum; the example's PPS weights vary within fields and 3 of its
        # 8 fields have 11-20 records, so it declares no design (measured: within the fields
        # 3-8 fidelity flags on seeds 1-3, quantiles near the bounds in the small fields)
        design = ('# no design: a quantile synthesis needs weights constant within strata and '
                  'runs\n# within each stratum (docs/kng.md, "Weights, strata and clusters"); '
                  'this PPS sample\'s\n# weights vary within fields, and 3 of its 8 fields '
                  'have 11-20 records, too few\n# for quantiles at epsilon 5 (within the '
                  'fields the report showed 3-8 fidelity\n# flags on seeds 1-3). So one '
                  'synthesis of all 400 records, weights 1 scaled to\n# population_size: '
                  'estimates describe the sample, not the population of fields.')
    return f"""# surveysynth release config: {method} (complete example; see docs/release-config.md)
# data: example.csv, made by surveysynth.release_config.example_data() (SDR-like sample)
[input]
path = "example.csv"

[design]
{design}

[missing]
policy = "refuse"

[synthesizer]
{_EXAMPLE_SYNTH[method]}

{tables}
{risk}
[output]
folder = "release-{method}"
overwrite = true
"""


def example_data(n: int = 400, seed: int = 1):
    """The example configs' data: a stratified PPS sample of the SDR-like simulation (field,
    gender, salary, weight) with a count ``visits`` (negative binomial, mean 5)."""
    import numpy as np

    from .datasets import sdr_population, sdr_sample

    pop = sdr_population(seed=2021)
    data = sdr_sample(pop, n=n, seed=seed).data.copy()
    rng = np.random.default_rng(seed)
    data["visits"] = np.minimum(rng.negative_binomial(2, 2 / 7, size=len(data)), 60)
    return data


# --------------------------------------------------------------------------------------------
# the reference page
# --------------------------------------------------------------------------------------------


def _cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _default(key: Key) -> str:
    if key.default is _NO_DEFAULT:
        return ""
    return "`" + (repr(key.default).replace("'", '"') if not isinstance(key.default, bool)
                  else str(key.default).lower()) + "`"


def _required(key: Key) -> str:
    if isinstance(key.required, tuple):
        return "for " + ", ".join(key.required)
    return "yes" if key.required else ""


def render_markdown() -> str:
    """docs/release-config.md, generated from :data:`SCHEMA` and the synthesizer classes."""
    out = [
        "# Release configuration reference",
        "",
        "<!-- generated by `surveysynth release --schema-doc` from surveysynth/release_config.py"
        "; do not edit by hand (tests/test_release_config.py checks it is current) -->",
        "",
        "`surveysynth release CONFIG.toml` reads one TOML file. The sections and keys below are "
        "the schema that validates it: an unknown key, a wrong type, a missing required key or "
        "a value outside the allowed ones is refused before anything runs, with a message "
        "naming the key. `surveysynth release CONFIG.toml --check` runs every check that needs "
        "the data too (columns exist, missing values, numeric outcomes, public KNG bounds, "
        "tables on released variables, the design builds) without any MCMC.",
        "",
        "`surveysynth release --example METHOD` prints a complete config per method "
        f"({', '.join(f'`{m}`' for m in SYNTHESIZERS)}); they are listed at the end.",
        "",
    ]
    for sec in SCHEMA:
        head = f"[[{sec.name}]]" if sec.array else f"[{sec.name}]"
        out += [f"## `{head}`" + ("" if sec.required else " (optional)"), "", sec.description,
                "", "| key | type | required | default | allowed | description |",
                "|---|---|---|---|---|---|"]
        for k in sec.keys:
            allowed = ", ".join(f"`{a}`" for a in k.allowed) if k.allowed else ""
            desc = k.description + (f" (methods: {', '.join(k.methods)})" if k.methods else "")
            if k.positive:
                desc += "; > 0"
            typ = _setting_phrase(k) if k.type == "setting" else _TYPES[k.type][1]
            out.append(f"| `{k.name}` | {_cell(typ)} | {_required(k)} | "
                       f"{_cell(_default(k))} | {_cell(allowed)} | {_cell(desc)} |")
        out.append("")
    out += [
        "## Synthesizer settings (`[synthesizer] init`)",
        "",
        "Every synthesizer follows one protocol: `Synth(**settings).fit(design).release()`. The "
        "pipeline builds the settings from the `[synthesizer]` keys above and the `init` table "
        "(`init` wins). It maps " + ", ".join(f"`{k}` from {v}" for k, v in
                                             PIPELINE_SET.items()) + ". An unknown setting is "
        "refused by `--check` naming it. The tables below are read from each class: the "
        "allowed values from its constraint table (`_parameter_constraints`, "
        "surveysynth/synth/params.py: the one validator the Python API, this config and the R "
        "package go through), defaults from its signature, descriptions from its docstring. "
        "A deprecated setting is still read for one release, with a warning naming the new one.",
        "",
    ]
    for method in SYNTHESIZERS:
        cls = synth_class(method)
        out += [f"### `{method}`: `{cls.__module__}.{cls.__name__}`", "",
                "| setting | default | allowed | description |", "|---|---|---|---|"]
        for s in synth_settings(method):
            name = s["name"] + (f" (set by {PIPELINE_SET[s['name']]})"
                                if s["name"] in PIPELINE_SET else "")
            out.append(f"| `{_cell(name)}` | `{_cell(s['default'])}` | {_cell(s['allowed'])} | "
                       f"{_cell(s['description'])} |")
        out.append("")
    out += [
        "## Examples",
        "",
        "Each runs on `example.csv`, written by `surveysynth.release_config.example_data()"
        ".to_csv(\"example.csv\", index=False)` (a stratified sample of 400 records of the "
        "SDR-like simulation: `field`, `gender`, `salary`, `weight`, and a count `visits`). "
        "tests/test_release_config.py checks each with `--check`; tests/test_examples.py runs "
        "each end to end (with short chains: 2 chains of 200 draws, the release gates "
        "lowered to bulk ESS 100 and R-hat 1.05 and a fit that misses them released anyway; "
        "the examples as shipped keep the defaults below).",
        "",
        "Run time of each example as shipped (`surveysynth release release.toml`, default "
        "settings, the Stan model already compiled: a first run compiles it once, 1-5 "
        "minutes), measured on the 2-core development machine while other jobs shared it:",
        "",
        "| example | run time | measured |",
        "|---|---|---|",
    ]
    out += [f"| `{m}` | {t} | {how} |" for m, (t, how) in EXAMPLE_TIMES.items()]
    out += ["", *DECISIONS, ""]
    for method in SYNTHESIZERS:
        out += [f"### `{method}`", "", "```toml", example_config(method).rstrip(), "```", ""]
    return "\n".join(out)


#: measured run times of the shipped examples with their default settings (scripts and
#: numbers: the commit that set them; docs/release-config.md shows them)
EXAMPLE_TIMES: dict[str, tuple[str, str]] = {
    "FBS": ("1 min", "61 s (8 Stan fits: tuning to the target); a first run also compiled the "
                     "model: 6 min 45 s in all"),
    "FBP": ("45 s", "44 s (4 fits)"),
    "PBP": ("35 s", "34 s (10 fits)"),
    "quantile": ("5-30 s", "26 s with the default 49-quantile grid while other jobs shared "
                           "the machine (no Stan; 5 s with the former 5-quantile grid)"),
    "mixture": ("1-3 min", "63 s and 80 s (two runs, seed 3 and OS entropy); the fit alone "
                           "took 123-202 s on seeds 2, 4 and 5 under a heavier load; every run "
                           "passed the gates with 0 divergent transitions"),
    "nb": ("20 s", "21 s (1 fit)"),
    "sequential": ("10-13 min", "10 min (34 fits); 13 min under a heavier load. Most of it is "
                                "the count `visits` with its public bound [0, 60]: each fit of "
                                "its truncated negative binomial evaluates the normaliser (61 "
                                "terms) per distinct predictor row, 30 s to 3 min a fit"),
}

#: the decisions behind the examples, --check and the command's behaviour (issue 37)
DECISIONS = [
    "### Decisions: examples, `--check`, fixes, stops",
    "",
    "* **Empty cells.** 400 records leave a cell of field x gender empty (field 2, female) and "
    "others with a handful of records. Full cell effects (`effects = \"cells\"`, the seed "
    "papers' model and the default of FBS, FBP and PBP) are not identified in an empty cell, "
    "so `--check` refuses them naming the cell(s) and the fix, `init = { effects = \"main\" "
    "}`: additive effects of each predictor, which model every cell, including empty ones. "
    "The FBS, FBP and PBP examples use main effects: on a sample this small that is the model "
    "a statistician would fit (a cell of 3 records has no usable mean of its own).",
    "* **The mixture example converges.** K = 4 components with the default gamma = 1 "
    "(weights ~ Dirichlet(1/4)) sampled 8.5 minutes and was refused on one run for 152 "
    "divergent transitions; K = 2 with delta = 0.95 still gave 145 and 108 divergences on "
    "seeds 2 and 3: a Dirichlet(gamma / K) prior with gamma / K < 1 pulls a component towards "
    "zero weight, whose parameters then sit in a funnel at their prior. The example uses K = 2, "
    "gamma = 4 (Dirichlet(2, 2)) and delta = 0.95: 0 divergences, R-hat <= 1.004, bulk ESS >= "
    "1,088 on seeds 2, 3, 4, 5 and an unseeded run.",
    "* **What a release holds.** FBS, FBP and PBP release the outcome, the predictors and the "
    "weights; the mixture and NB synthesizers also the `known` columns and "
    "`init.release_columns`; the quantile synthesizer its variables and the weights; a "
    "sequential synthesis its variables, the public and design columns and the weights (all "
    "columns with `unlisted = \"public\"`). A `[[tables]]` or `[[report.regressions]]` "
    "block on any other column is refused by `--check`, with the fix for the method (a "
    "released variable, a predictor, `release_columns`, or a public variable).",
    "* **`--check` runs every check the run makes before its first MCMC run**: the schema, "
    "columns, missing values, types (a sequential synthesis checks each `[[variables]]` "
    "type against the data: a `binary` type on a variable with more than two values, a "
    "numeric type on text), empty cells, tables and regressions on released variables, the "
    "design, `stan_kwargs` names (pystan 3's: `delta`, not Stan's `adapt_delta`) and an "
    "existing output folder without `overwrite = true`. Numbers written with thousands "
    "separators (`\"1,234\"`) are text to the CSV reader; the message says so and how to "
    "write them as plain numbers (the reader does not guess separators). Not checkable before "
    "MCMC: whether a privacy target is reachable at the cell-weight floor "
    "(`min_cell_weight`) and whether the chains converge; those refusals come from the run, "
    "with a fix.",
    "* **Fix texts that work.** A fit refused by the release gates states its fixes in the "
    "config's own syntax (`init = { warmup = 2000, draws = 2000 }`, `init = { stan_kwargs = "
    "{ delta = 0.95 } }`, `init = { allow_unconverged = true }`); tests/test_examples.py "
    "applies each. Row numbers in messages of the command are the input's 0-based row "
    "positions (the pandas index).",
    "* **Clean stops.** Ctrl-C and SIGTERM end the command at once: the processes it started "
    "(httpstan's sampling workers, which ignore Ctrl-C, or a compiler) are killed, the "
    "unfinished release folder (written under a temporary name and renamed at the end) is "
    "removed, one line is printed, and the exit status is 130 (SIGINT) or 143 (SIGTERM). "
    "A Stan build runs in a temporary working directory (setuptools writes `build/` to the "
    "working directory), and pystan's `pkg_resources` deprecation notice is silenced at its "
    "import. Console warnings are wrapped at word boundaries, never cut mid-word (a very long "
    "one ends at a word with a pointer to the confidential report, which holds it whole).",
]
