"""Sequential risk-weighted pseudo posterior synthesis of a whole survey file (issue 22).

``Sequential(variables=[{"name": "api00", "type": "bounded", "bounds": (200, 1000)}, ...],
public=["stype"], target_epsilon=10, m=5).fit(design).release()``

The listed variables are synthesized in order, as synthpop does, but each by a risk-weighted
pseudo posterior model in Stan suited to its type (docs/sequential.md):

* variable j is modelled given the public variables and the variables listed before it, one
  Stan program per family (``surveysynth/synth/stan/seq_*.stan``): continuous (normal),
  positive (normal on log y), bounded (normal truncated to the public bounds; with
  ``"scale": "logit"`` normal on the empirical logit, for skewed shares), count / integer
  (negative binomial, truncated to the bounds), binary (logistic), categorical (multinomial
  logit), ordinal (ordered logistic); each with per-record risk weights alpha_i
  (``target += alpha_i * log p_i``);
* per variable: an unweighted fit gives Delta_i = max_s |log p_i|, alpha =
  :func:`~surveysynth.privacy.lipschitz.lipschitz_weights` (or, with
  ``risk_weights="identification"``, the same map applied to the records' identification risks:
  see :func:`step_identification_risk`), and c is tuned by the pseudo
  posterior synthesizers' own tuning code (:meth:`_PseudoPosterior._tune`: tuning fits, then a
  final fit with fresh draws whose bound is reported and never above the target) to the
  variable's share of the budget, Delta_alpha_j <= eps_j / (2 m);
* synthesis is sequential: the synthetic values of j are drawn given the SYNTHETIC values of the
  variables before it (and the public variables), set l from posterior draw s_l, the m draws
  spaced evenly over the chains;
* epsilon composes: epsilon = sum_j 2 Delta_alpha_j m, each step in the ledger;
* the design goes through: strata, cluster ids and fpc are public and carried into every
  synthetic design (the strata also serve as predictors);
* clustered designs (ids with fewer first-stage units than records; :func:`psu_codes`; issue
  36 D1/D3/D4/D5, docs/sequential.md "Clustered designs"): every step's model gets a random
  intercept per PSU, u_j ~ N(0, sigma_u), non-centred (``seq_*_re.stan``; the rows are the
  distinct (x, y, PSU) patterns); each record's bound is of its density GIVEN its PSU's u_j
  (u is inside theta, so a record's move of its cluster's effect is covered); each synthetic
  set draws u*_j afresh from N(0, sigma_u^(s)), never the posterior u_j (which would publish
  the cluster means); with design weights, the standardised log weight is a predictor of every
  step so that weighted synthetic estimates target the population. Unclustered designs keep the
  original programs and code path (seeded output unchanged);
* design weights: when the sampling weights are a function of the public design columns
  (exactly constant within each stratum x fpc cell, as apistrat's pw = N_h / n_h), they are
  design information -- what the released strata and fpc already say (N_h / n_h from the
  released stratum counts and the fpc) -- not a record's value: they are released as collected
  (times the public factor N / sum(w), 1 unless ``population_size`` differs from their sum),
  with no model, no budget share and no ledger step; the record lists them under
  "published without budget" and its facts say ``weights_step = "design"``. (Such weights
  cannot be modelled anyway: log w has no variance within a cell.) Checked exactly, not up
  to a tolerance: weights that differ within a cell (nonresponse or calibration adjustments)
  carry record-level information and take the weights step below;
* otherwise the weights are modelled last, as a normal model of log w given everything
  synthesized (its own budget share), and released either smoothed (exp of the posterior mean
  at the synthetic values, ``weights="smoothed"``) or synthesized (a draw,
  ``weights="synthesized"``), rescaled to sum to the population size;
* missing values: ``missing="refuse"`` raises naming the column, rows and fix;
  ``missing="model"`` synthesizes a missing indicator first (logistic) and then the value given
  not missing (fitted on the observed records), each a step with half the variable's share.

Combining rule: partial synthesis (the public variables and the design are released as
collected and every released row corresponds to a confidential record).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .._validate import as_list
from ..encoding import Factor, r_levels
from ..privacy.identification import check_known, check_radius, pattern_codes, risk_counts
from ..privacy.randomness import child_seed
from ._seq_models import (
    MODELS,
    MODELS_RE,
    WHITEN_MIN_ROWS,
    identity_pre,
    patterns,
    sampler_kwargs,
    split_groups,
    whitening,
)
from ._stan import StanDraws, load_program, release_sampler_pool
from .base import Synthesizer, convergence_verdict
from .fitting import WeightedFits, absmax_over_draws, chain_bounds, check_weights, run_fit
from .params import MCMC, RELEASE, Columns, DaskClient, Interval, Options
from .pseudo_posterior import _even_draws, _round_up
from .tuning import (
    TargetUnreachableError,
    TunerSettings,
    default_predict,
    fit_to_target,
    log_spread,
)
from .tuning_shortcut import shortcut_predict

__all__ = ["Sequential", "TYPES"]

#: variable type -> model family
TYPES: dict[str, str] = {
    "continuous": "normal", "positive": "normal", "bounded": "normal", "count": "negbin",
    "integer": "negbin", "binary": "logistic", "categorical": "categorical",
    "ordinal": "ordinal",
}

#: a log-scale step without a public upper bound (positive variables, the log weights) is
#: flagged when its fitted model's predictive SD of log y exceeds this multiple of the
#: confidential SD of log y (docs/sequential.md, "Positive variables at small risk weights")
LOG_SPREAD_FLAG = 2.0


def _first(mask: np.ndarray, index: pd.Index | None = None, k: int = 5) -> list:
    pos = np.flatnonzero(mask)[:k]
    return pos.tolist() if index is None else index[pos].tolist()


@dataclass
class _Step:
    """One mechanism: a variable's value model, its missing indicator, or the weights model."""

    name: str              # ledger name: the variable, "<var> (missing)", or the weights column
    column: str            # the data column
    role: str              # "value", "missing", "weights"
    type: str              # variable type (weights: "positive")
    family: str            # model family
    spec: dict[str, Any]   # model constants (bounds on the modelled scale, K, loc/scale, eta0)
    share: float = 0.0
    levels: list = field(default_factory=list)   # categories (binary/categorical/ordinal)
    enc: dict[str, Any] = field(default_factory=dict)   # how it enters later designs


class Sequential(Synthesizer):
    """Sequential risk-weighted pseudo posterior synthesis of many variables of mixed types.

    Settings (stored unchanged; ``fit`` validates; docs/sequential.md):

    variables : list of dicts {"name", "type", "bounds", "scale"} in synthesis order; type
        one of continuous, positive, bounded, count (or integer), binary, categorical,
        ordinal; bounds = (lo, hi) PUBLIC bounds (required for bounded; optional for
        continuous, positive and count, where they truncate the model; either end may be
        None); scale (bounded only): "identity" (default: a normal truncated to the bounds)
        or "logit" (a normal, truncated likewise, on the empirical logit t(y) = log((y - lo +
        e) / (hi - y + e)), e = (hi - lo) / 200: for skewed shares with mass near a bound,
        where a normal on the original scale puts the long tail's records at the largest
        |log p| and the risk weights then pull the mean towards the bulk; docs/sequential.md).
    public : variables released as collected and used as predictors of every synthesized
        variable (the design's strata are added to them).
    unlisted : "drop" (default) or "public": other columns released as collected (not used
        as predictors).
    weights : how the SAMPLING weights are released (risk weights are ``risk_weights``, alpha):
        "smoothed" (exp of the posterior mean of the log-weights model at the synthetic
        values) or "synthesized" (a draw from it); rescaled to sum to the population size.
        Not used when the weights are design weights (exactly constant within each stratum x
        fpc cell): those are released as collected, without budget (module docstring).
    missing : "refuse" (a ValueError naming column, rows and fix) or "model" (a missing
        indicator synthesized first, then the value given observed).
    target_epsilon : total epsilon of a release of m sets, shared over the steps by budget;
        None: no tuning, alpha at c = 1 for every step.
    budget : dict variable (or the weights column) -> share of target_epsilon, shares
        summing to 1; default equal shares. Design weights take no share (no weights step).
    risk_weights : "lipschitz" (default: D_i the normalised per-record Lipschitz bounds of the
        step's unweighted fit), "identification" (D_i the normalised identification risks
        IR^c_i of the step's variable within the intruder-known patterns ``known``, seed 002;
        :func:`step_identification_risk`) or "none" (alpha = 1: the unweighted posterior; its
        bound is still measured and composed). Lipschitz and identification weights are both
        alpha_i = clip(c (1 - D_i), 0, 1) with c tuned to the step's share of the budget, and
        both releases carry the same measured, composed bound.
    known : with risk_weights="identification": the intruder-known columns whose
        cross-classification forms the patterns (released as collected: public, design or
        unlisted="public" columns; default: the public variables and the strata).
    r : with risk_weights="identification": the ball radius as a fraction of |y_i| for
        numeric variables (default 0.2, seed 002's); discrete variables use the exact value.
    m : number of synthetic data sets (one posterior draw of every step each).
    chains : MCMC chains per fit.
    draws : post-warm-up draws per chain of every fit.
    warmup : warm-up iterations of each step's unweighted fit.
    refit_warmup : warm-up of the weighted (tuning and final) fits, warm-started (default
        max(100, warmup / 2)).
    tol : the released bound of a step lies in [(1 - tol) target, target] when tuning lands.
    max_refits : weighted fits per step at most (tuning and final).
    population_size : public population size N the released weights sum to (default: the
        sum of the confidential weights, then listed as published without budget).
    convergence : overrides of the release gates (rhat, ess_bulk, divergent_share).
    allow_unconverged : release although a step failed the gates (the record says so).
    random_state : None (secret OS entropy) or a seed (a secret key).
    progress : print each weighted fit's bound.
    tuning : how each step's tuner proposes c. "shortcut" (the default since 2026-11-27): c
        predicted from the unweighted fit's draws by importance sampling
        (:func:`surveysynth.synth.tuning_shortcut.shortcut_predict`), and the step's FINAL fit
        run at that c with no tuning fit before it, released only when its bound lies in the
        band [(1 - tol) target, target]; outside it that fit is not released and the
        prediction, corrected by it, proposes again; the refit rule takes over when the
        corrected prediction misses a real fit by more than 1.5x (the first fit recalibrates
        it), and tuning also ends on a fit within the bound's own noise of the aim
        (docs/pseudo_posterior.md, "Direct final fits", "Recalibration", "Noise-aware tuning
        band"; at
        10,000 x 10: 27 fits instead of 44). "refits" (the rule before; "default" is its old
        name): plug-in, then log-linear tuning refits, then a final fit. The released bound is
        the final fit's fresh draws either way, never above the target.
    stan_kwargs : extra arguments of pystan's sample (e.g. delta=0.95); they override a
        model's own defaults key by key (truncated counts: delta=0.95).
    n_jobs : steps fitted at once (default 1: one after another). The steps' fits are
        independent (step j's model is fitted to the confidential values, never to synthetic
        ones), so with n_jobs > 1 they run in that many worker processes; synthesis then runs
        in step order. Each step's fits draw their seeds from their own stream, spawned up
        front from the release seed in step order (np.random.SeedSequence.spawn), so a seeded
        release is the same bytes whichever way its fits ran (docs/sequential.md, "Parallel
        step fits").
    client : a Dask ``distributed.Client`` (Python API only): the steps' fits run as tasks
        on its workers (n_jobs is then not used); the workers need surveysynth, pystan and a
        C++ compiler, and must not be daemonic (pystan starts a process per chain: start the
        cluster under dask.config.set({"distributed.worker.daemon": False})).
    max_epsilon : the declared total of the budget account (a privacy filter): a release whose
        new draws would take the account (every release and refit of this object) above it, or
        a release without protection (risk_weights="none"), is refused (BudgetExceededError).

    Example (short chains to run quickly; a release keeps the default chains and draws):

    >>> import numpy as np
    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> rng = np.random.default_rng(1)
    >>> df = pd.DataFrame({"field": rng.choice(["a", "b"], 60),
    ...                    "salary": rng.lognormal(11, 0.5, 60).round(),
    ...                    "visits": rng.poisson(3, 60),
    ...                    "w": rng.uniform(50, 150, 60).round(1)})
    >>> d = ss.SurveyDesign(df, weights="w")
    >>> syn = ss.synth.Sequential(variables=[{"name": "salary", "type": "positive"}],
    ...                           public=["field"], m=2, chains=4, draws=500,
    ...                           warmup=500, random_state=1, progress=False)
    >>> rel = syn.fit(d).release()
    >>> rel.kind, rel.m
    ('partial', 2)
    """

    name = "Sequential"
    kind = "partial"
    release_spends = False
    #: every setting's allowed values (surveysynth.synth.params; cross-setting rules and the
    #: [[variables]] entries: _validate)
    _parameter_constraints = {
        "variables": [None, "sequence"],
        "public": [None, Columns()],
        "unlisted": [Options("drop", "public")],
        "weights": [Options("smoothed", "synthesized")],
        "missing": [Options("refuse", "model")],
        "target_epsilon": [None, Interval("number", 0, None, closed="neither")],
        "budget": [None, dict],
        "risk_weights": [Options("lipschitz", "identification", "none")],
        "known": [None, Columns()],
        "r": [None, Interval("number", 0, None, closed="neither")],
        "refit_warmup": [None, Interval("integer", 1, None)],
        "tol": [Interval("number", 0, 1, closed="neither")],
        "max_refits": [Interval("integer", 1, None)],
        "n_jobs": [Interval("integer", 1, None)],
        "client": [None, DaskClient()],
        "tuning": [Options("shortcut", "refits", "default")],
        **MCMC, **RELEASE,
    }

    def __init__(
        self,
        variables: list[dict] | None = None,
        public: list[str] | None = None,
        unlisted: str = "drop",
        weights: str = "smoothed",
        missing: str = "refuse",
        target_epsilon: float | None = None,
        budget: dict[str, float] | None = None,
        risk_weights: str = "lipschitz",
        known: list[str] | None = None,
        r: float | None = None,
        m: int = 5,
        chains: int = 4,
        draws: int = 1000,
        warmup: int = 1000,
        refit_warmup: int | None = None,
        tol: float = 0.10,
        max_refits: int = 12,
        population_size: float | None = None,
        convergence: dict | None = None,
        allow_unconverged: bool = False,
        random_state: Any = None,
        progress: bool = True,
        stan_kwargs: dict | None = None,
        max_epsilon: float | None = None,
        n_jobs: int = 1,
        client: Any = None,
        tuning: str = "shortcut",
    ) -> None:
        self.variables = variables
        self.public = public
        self.unlisted = unlisted
        self.weights = weights
        self.missing = missing
        self.target_epsilon = target_epsilon
        self.budget = budget
        self.risk_weights = risk_weights
        self.known = known
        self.r = r
        self.m = m
        self.chains = chains
        self.draws = draws
        self.warmup = warmup
        self.refit_warmup = refit_warmup
        self.tol = tol
        self.max_refits = max_refits
        self.population_size = population_size
        self.convergence = convergence
        self.allow_unconverged = allow_unconverged
        self.random_state = random_state
        self.progress = progress
        self.stan_kwargs = stan_kwargs
        self.max_epsilon = max_epsilon
        self.n_jobs = n_jobs
        self.client = client
        self.tuning = tuning

    # ================================================================== validation
    def _check_settings(self) -> None:
        self._validate()

    def _validate(self) -> dict[str, Any]:
        """Data-free cross-setting rules and the [[variables]] entries (each setting alone is
        checked by the constraint table, :meth:`check_params`; the release config runs both
        before any MCMC)."""
        if not self.variables:
            raise ValueError("variables must be a non-empty list of dicts {'name': ..., 'type': "
                             "..., 'bounds': (lo, hi)} in synthesis order.")
        m = self._m(None)
        if self.risk_weights == "none" and self.target_epsilon is not None:
            raise ValueError("risk_weights='none' (alpha = 1) cannot be tuned to target_epsilon; "
                             "drop target_epsilon or use risk_weights='lipschitz'.")
        r = self._identification_radius()
        gates = dict(self.convergence or {})
        specs = []
        scales: dict[str, str] = {}
        for i, v in enumerate(self.variables):
            if not isinstance(v, dict) or "name" not in v or "type" not in v:
                raise ValueError(f"variables[{i}] = {v!r}: each entry is a dict with 'name' and "
                                 "'type' (and optional 'bounds').")
            extra = set(v) - {"name", "type", "bounds", "scale"}
            if extra:
                raise ValueError(f"variables[{i}] ({v['name']!r}): unknown key(s) "
                                 f"{sorted(extra)}; keys are name, type, bounds, scale.")
            scales[v["name"]] = _scale(v, i)
            if v["type"] not in TYPES:
                raise ValueError(f"variables[{i}] ({v['name']!r}): type {v['type']!r} is not "
                                 f"one of {sorted(TYPES)}.")
            try:
                bounds = _bounds(v.get("bounds"), v["name"], v["type"])
            except ValueError as exc:  # named by position, as the config's [[variables]]
                raise ValueError(f"variables[{i}]: {exc}") from None
            specs.append((v["name"], v["type"], bounds))
        names = [s[0] for s in specs]
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise ValueError(f"variables: {dup} listed more than once; list each variable once.")
        public = [] if self.public is None else as_list(self.public, "public")  # also '~a+b'
        return {"specs": specs, "scales": scales, "public": public, "m": m, "gates": gates,
                "r": r}

    def _identification_radius(self) -> float | None:
        """The ball radius r of risk_weights="identification" (default 0.2); known and r with
        another risk_weights are refused (they would be silently unused)."""
        if self.risk_weights != "identification":
            if self.known is not None or self.r is not None:
                raise ValueError("known and r define identification risks; they apply only with "
                                 f"risk_weights='identification' (now {self.risk_weights!r}). "
                                 "Set risk_weights='identification' or drop them.")
            return None
        return check_radius(0.2 if self.r is None else self.r)

    def _validate_design(self, design: Any) -> dict[str, Any]:
        cfg = self._validate()
        data = design.data
        cols = list(data.columns)
        specs, public = cfg["specs"], cfg["public"]
        wname = design.weights_var if isinstance(design.weights_var, str) else "weight"
        design_cols = [c for c in (_cols(design.strata_vars) + _cols(design.ids_vars)
                                   + _cols(design.fpc_vars)) if c in cols]
        public = [] if self.public is None else as_list(self.public, "public")  # also '~a+b'
        for i, (name, _, _) in enumerate(specs):
            if name not in cols:
                raise ValueError(f"variables[{i}]: column {name!r} is not in the design's data "
                                 f"(columns: {cols[:12]}...). Fix the name.")
            if name in public or name in design_cols or name == wname:
                raise ValueError(
                    f"variables[{i}] ({name!r}) is also public, a design column (strata, ids, "
                    f"fpc: {design_cols}) or the weights ({wname!r}); the design and the public "
                    "variables are released as collected. Remove it from one list.")
        badp = [p for p in public if p not in cols]
        if badp:
            raise ValueError(f"public: columns {badp} are not in the design's data. Fix the names.")
        if wname in public:
            raise ValueError(f"public: {wname!r} is the weights column; weights are modelled "
                             "(weights='smoothed' or 'synthesized'), or released as collected "
                             "without budget when they are exactly constant within each "
                             "stratum x fpc cell (design weights). Remove it from public.")
        predictors = list(dict.fromkeys(_cols(design.strata_vars) + public))
        known: list[str] = []
        if self.risk_weights == "identification":
            known = predictors if self.known is None else _cols(self.known)
            released = set(public) | set(design_cols) | (
                set(cols) - {n for n, _, _ in specs} - {wname}
                if self.unlisted == "public" else set())
            check_known(data, known, "the design's data")   # present, no missing values
            hidden = [k for k in known if k not in released]
            if hidden:
                raise ValueError(
                    f"known: {hidden} are synthesized, the weights, or not released; the "
                    "intruder-known pattern variables must be released as collected (public, "
                    f"design columns {design_cols}, or unlisted='public'). Fix: list only such "
                    "columns in known.")
        return {**cfg, "predictors": predictors, "weights_name": wname,
                "design_cols": design_cols, "known": known}

    # ================================================================== steps
    def _build_steps(self, data: pd.DataFrame, w: np.ndarray, cfg: dict,
                     shares: bool = True) -> list[_Step]:
        steps: list[_Step] = []
        for name, typ, (lo, hi) in cfg["specs"]:
            col = data[name]
            na = col.isna().to_numpy()
            if na.any() and self.missing == "refuse":
                raise ValueError(
                    f"variable {name!r} has missing values at rows {_first(na, data.index)} "
                    f"({int(na.sum())} in all); nothing is dropped silently. Fix: "
                    "missing='model' (a missing indicator is synthesized first), impute them, or "
                    "drop those records explicitly.")
            obs = col[~na]
            if na.any():
                steps.append(_Step(f"{name} (missing)", name, "missing", "binary", "logistic",
                                   {}, levels=[False, True], enc={"kind": "binary"}))
            steps.append(self._value_step(name, typ, lo, hi, obs, data.index[~na],
                                          cfg["scales"].get(name, "identity")))
        if not cfg["design_weights"]:
            lw = np.log(w)
            steps.append(_Step(cfg["weights_name"], cfg["weights_name"], "weights", "positive",
                               "normal", {"lo": None, "hi": None, "loc": float(np.mean(lw)),
                                          "scale": float(max(np.std(lw), 0.1)), "tf": "log"}))
        if shares:
            self._assign_shares(steps, cfg)
        return steps

    def _value_step(self, name, typ, lo, hi, obs: pd.Series, index,
                    scale: str = "identity") -> _Step:
        fam = TYPES[typ]
        if fam in ("normal", "negbin"):
            v = pd.to_numeric(obs, errors="coerce").to_numpy(dtype=float)
            bad = ~np.isfinite(v)
            if bad.any():
                raise ValueError(f"variable {name!r} ({typ}) has non-numeric values at rows "
                                 f"{_first(bad, index)} ({obs[bad].head(3).tolist()}). "
                                 + number_text_fix(obs[bad]))
            out = ((lo is not None) & (v < (lo if lo is not None else 0))) | (
                (hi is not None) & (v > (hi if hi is not None else 0)))
            if out.any():
                raise ValueError(
                    f"variable {name!r}: rows {_first(out, index)} (values "
                    f"{v[out][:3].tolist()}) lie outside the declared public bounds ({lo}, {hi}). "
                    "Fix: wider public bounds (they must hold for every record), or recode.")
            if typ == "positive":
                if (v <= 0).any():
                    raise ValueError(f"variable {name!r} (positive) must be > 0; rows "
                                     f"{_first(v <= 0, index)} are not. Fix: type 'continuous' "
                                     "or 'bounded', or 'count' for integers.")
                y = np.log(v)
                slo = None if lo is None or lo <= 0 else float(np.log(lo))
                shi = None if hi is None else float(np.log(hi))
            elif scale == "logit":
                tf = {"tf": "logit", "tf_lo": float(lo), "tf_hi": float(hi),
                      "tf_e": (float(hi) - float(lo)) / 200.0}
                y = _to_model(tf, v)
                slo, shi = (float(t) for t in _to_model(tf, np.array([lo, hi])))
            else:
                y, slo, shi = v, lo, hi
            if fam == "negbin":
                if (v != np.round(v)).any():
                    raise ValueError(f"variable {name!r} ({typ}) must hold integers; rows "
                                     f"{_first(v != np.round(v), index)} do not. Fix: type "
                                     "'continuous' or 'bounded'.")
                shift = 0.0 if lo is None else float(lo)
                if lo is None and (v < 0).any():
                    raise ValueError(f"variable {name!r} ({typ}) has negative values at rows "
                                     f"{_first(v < 0, index)}; give public bounds (lo, hi) with "
                                     "lo <= the smallest possible value.")
                yy = v - shift
                spec = {"shift": shift, "hi": None if hi is None else float(hi - shift),
                        "eta0": float(np.log(np.mean(yy) + 0.5))}
                enc = {"kind": "numeric", "f": "log1p", "shift": shift}
                z = np.log1p(yy)
            else:
                if slo is not None and shi is not None:
                    loc, sd = (slo + shi) / 2, (shi - slo) / 4
                else:
                    loc, sd = float(np.mean(y)), float(max(np.std(y), 1e-6))
                tf = ({"tf": "log"} if typ == "positive" else tf if scale == "logit"
                      else {"tf": "id"})
                spec = {"lo": slo, "hi": shi, "loc": loc, "scale": sd, **tf}
                enc = {"kind": "numeric", "f": "model", "shift": 0.0, **tf}
                z = y
            enc.update(mean=float(np.mean(z)), sd=float(max(np.std(z), 1e-9)))
            spec["integer"] = bool(fam == "negbin")
            return _Step(name, name, "value", typ, fam, spec, enc=enc)
        levels = r_levels(obs, used_only=True)  # the levels present, R's order (encoding.py)
        if fam == "logistic" and len(levels) != 2:
            numeric = pd.api.types.is_numeric_dtype(obs) and not pd.api.types.is_bool_dtype(obs)
            fix = ("type 'continuous' (or 'count' for counts, 'bounded' with public bounds)"
                   if numeric and len(levels) > 10 else "type 'categorical'")
            raise ValueError(f"variable {name!r} (binary) has {len(levels)} distinct value(s) "
                             f"{levels[:5]}{'...' if len(levels) > 5 else ''}; a binary variable "
                             f"has exactly 2. Fix: {fix}, or release it as public.")
        if fam != "logistic" and len(levels) < 2:
            raise ValueError(f"variable {name!r} ({typ}) has a single value {levels}; nothing to "
                             "model. Release it as public or drop it.")
        enc = {"kind": "binary"} if fam == "logistic" else {"kind": "onehot", "K": len(levels)}
        return _Step(name, name, "value", typ, fam, {"K": len(levels)}, levels=levels, enc=enc)

    def _assign_shares(self, steps: list[_Step], cfg: dict) -> None:
        units = list(dict.fromkeys(s.column if s.role != "weights" else s.name for s in steps))
        if self.budget is None:
            shares = {u: 1.0 / len(units) for u in units}
        else:
            b = dict(self.budget)
            missing = [u for u in units if u not in b]
            extra = [k for k in b if k not in units]
            if cfg["design_weights"] and cfg["weights_name"] in extra:
                raise ValueError(
                    f"budget: {cfg['weights_name']!r} is given a share, but the weights are "
                    f"design weights (constant within each cell of {cfg['weight_cells']}) and are "
                    "released as collected without budget. Fix: remove it from budget and "
                    f"share the budget over {units}.")
            if missing or extra:
                raise ValueError(
                    f"budget: shares are needed for exactly the synthesized variables and the "
                    f"weights ({units}); missing {missing}, unknown {extra}.")
            vals = np.array([b[u] for u in units], dtype=float)
            if (vals <= 0).any() or not np.isfinite(vals).all() or abs(vals.sum() - 1) > 1e-9:
                raise ValueError(f"budget: shares must be positive and sum to 1 (got sum "
                                 f"{vals.sum():.6g}: {b}).")
            shares = dict(zip(units, vals.tolist(), strict=True))
        for u in units:
            own = [s for s in steps if (s.name if s.role == "weights" else s.column) == u]
            for s in own:
                s.share = shares[u] / len(own)

    def check_data(self, design: Any) -> None:
        """Every check of the data that ``fit`` makes before its first MCMC run (names in the
        data, each variable against its type, bounds, missing values, budget shares), so a
        release config's ``--check`` refuses what the run would hit. A ValueError names the
        variable's position (``variables[i]``), the rows and the fix."""
        self.check_params()
        cfg = self._validate_design(design)
        data = design.data
        w = np.asarray(design.weights, dtype=float)
        cfg["weight_cells"] = [c for c in _cols(design.strata_vars) + _cols(design.fpc_vars)
                               if c in data.columns]
        wcol = (pd.to_numeric(data[cfg["weights_name"]]).to_numpy(dtype=float)
                if cfg["weights_name"] in data.columns else w)
        cfg["design_weights"] = weights_are_design(data, wcol, cfg["weight_cells"])
        for i, spec in enumerate(cfg["specs"]):  # one variable at a time: name its position
            try:
                self._build_steps(data, w, {**cfg, "specs": [spec], "design_weights": True},
                                  shares=False)
            except ValueError as exc:
                raise ValueError(f"variables[{i}] (name {spec[0]!r}, type {spec[1]!r}): "
                                 f"{exc}") from exc
        self._build_steps(data, w, cfg)

    # ================================================================== encoding
    def _encode_public(self, data: pd.DataFrame, preds: list[str]) -> tuple[list, np.ndarray]:
        encs, mats = [], []
        for p in preds:
            col = data[p]
            if pd.api.types.is_numeric_dtype(col) and not isinstance(col.dtype, pd.CategoricalDtype) \
                    and not pd.api.types.is_bool_dtype(col):
                v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
                na = np.isnan(v)
                e = {"col": p, "kind": "numeric", "mean": float(np.nanmean(v)) if (~na).any() else 0.0,
                     "sd": float(max(np.nanstd(v), 1e-9)) if (~na).any() else 1.0,
                     "na": bool(na.any()), "f": "id", "shift": 0.0}
            else:  # R's levels, a missing value the last level (surveysynth.encoding)
                e = {"col": p, "kind": "factor",
                     "factor": Factor.learn(col, name=p, used_only=True, na="level")}
            encs.append(e)
            mats.append(_apply_public(e, col))
        X = np.column_stack(mats) if mats else np.zeros((len(data), 0))
        return encs, X

    # ================================================================== fit
    def _fit(self, design: Any, rng: np.random.Generator) -> None:
        cfg = self._validate_design(design)
        self._cfg_ = cfg
        data = design.data
        w = np.asarray(design.weights, dtype=float)
        check_weights(w, data.index)
        cfg["weight_cells"] = [c for c in _cols(design.strata_vars) + _cols(design.fpc_vars)
                               if c in data.columns]
        # the weights as collected (the design holds 1 / (1 / w), R's convention, which can
        # differ from the column in the last bit): the decision and the release use the column
        wcol = (pd.to_numeric(data[cfg["weights_name"]]).to_numpy(dtype=float)
                if cfg["weights_name"] in data.columns else w)
        cfg["design_weights"] = weights_are_design(data, wcol, cfg["weight_cells"])
        steps = self._build_steps(data, w, cfg)
        psu = psu_codes(design)
        cfg["clustered"] = psu is not None
        if psu is not None:         # D3: a PSU random intercept in every step's model
            J = int(psu.max()) + 1
            for step in steps:
                step.spec["J"] = J
        self._psu_ = psu
        self._design_ = {"strata": _cols(design.strata_vars), "ids": _cols(design.ids_vars),
                         "fpc": _cols(design.fpc_vars)}
        self._dtypes_ = {name: data[name].dtype for name, _, _ in cfg["specs"]}
        self._bounds_ = {name: b for name, _, b in cfg["specs"]}
        N = self._population(design)
        m = cfg["m"]
        pub_enc, X_pub = self._encode_public(data, cfg["predictors"])
        if psu is not None and cfg["design_weights"]:
            # D5: the design weights are released as collected: log w is a public continuous
            # predictor of every step (standardised), when it adds a direction to the others
            pub_enc, X_pub = _with_log_weight(pub_enc, X_pub,
                                              _design_weights(wcol, N), cfg["weights_name"])
        cfg["log_weight_predictor"] = any(e.get("f") == "log_weight" for e in pub_enc)
        n = len(data)
        eps = None if self.target_epsilon is None else float(self.target_epsilon)
        progress = bool(self.progress)
        t_all = time.perf_counter()
        # the account lists this fit: its unweighted, tuning and final fits release no draw;
        # the risk weights they choose are not privatized (the guarantee says so)
        self._spend({"step": "fit", "model": "Sequential", "epsilon": None, "charge": "outside",
                     "what": "per step: unweighted, tuning and final fits on the confidential "
                             "data; no draw of them is released by the fit; the risk weights and "
                             "c they choose are not privatized (the guarantee is given these "
                             "weights)"})
        conf_enc: list[np.ndarray] = []     # encoded confidential columns of earlier steps
        groups = (pattern_codes(data, cfg["known"]) if self.risk_weights == "identification"
                  else None)
        # each step's fits get their own random stream, spawned up front in step order, so the
        # release does not depend on where or in which order the fits run
        seeds = np.random.SeedSequence(int(rng.integers(0, 2**63 - 1))).spawn(len(steps))
        fit_cfg = self._fit_settings()
        jobs, inputs = [], []
        for step, seed in zip(steps, seeds, strict=True):
            X = np.column_stack([X_pub, *conf_enc]) if conf_enc else X_pub
            if psu is not None:     # the PSU code as the last column (split_groups)
                X = np.c_[X, psu]
            rows, y = self._response(step, data, w)
            target = None if eps is None else eps * step.share / (2.0 * m)
            risk = (None if groups is None else step_identification_risk(
                step, y, groups[rows], cfg["r"], self._original(step, data, w, rows)))
            jobs.append(StepJob(fit_cfg, step, y, X[rows], target, seed, progress, risk))
            inputs.append((rows, y, X[rows], target))
            conf_enc.append(self._encode_step(step, data, w))
        results = self._run_jobs(jobs)
        for step, res, (rows, y, Xr, target) in zip(steps, results, inputs, strict=True):
            res["rows"] = rows
            res["target"] = target
            _flag_log_spread(step, res, y, Xr)
            _flag_near_prior(step, res, Xr)
        self.steps_ = steps
        self.step_fits_ = results
        self._prep_ = {"data_public": data, "X_pub": X_pub, "pub_enc": pub_enc, "N": N, "n": n,
                       "weights_name": cfg["weights_name"],
                       "design_w": _design_weights(wcol, N) if cfg["design_weights"] else None,
                       "w_const_psu": psu is not None and _constant_within(wcol, psu)}
        self.design_weights_ = bool(cfg["design_weights"])
        self.n_ = n
        self.delta_alpha_steps_ = {s.name: r["delta_alpha"] for s, r in zip(steps, results,
                                                                              strict=True)}
        self.delta_alpha_ = float(sum(self.delta_alpha_steps_.values()))
        self.convergence_ = _combine_verdicts(
            [(s.name, r["convergence"]) for s, r in zip(steps, results, strict=True)],
            cfg["gates"])
        self.timings_ = {"total": time.perf_counter() - t_all,
                         **{s.name: r["seconds"] for s, r in zip(steps, results, strict=True)}}

    def _response(self, step: _Step, data: pd.DataFrame, w: np.ndarray):
        """Rows fitted (observed records for a value step) and the response on the modelled
        scale (codes for discrete families)."""
        if step.role == "weights":
            return np.ones(len(w), bool), np.log(w)
        col = data[step.column]
        na = col.isna().to_numpy()
        if step.role == "missing":
            return np.ones(len(col), bool), na.astype(np.int64)
        rows = ~na
        obs = col[rows]
        if step.family == "normal":
            v = pd.to_numeric(obs).to_numpy(dtype=float)
            return rows, _to_model(step.spec, v)
        if step.family == "negbin":
            v = pd.to_numeric(obs).to_numpy(dtype=float)
            return rows, np.round(v - step.spec["shift"]).astype(np.int64)
        return rows, _factor(step).codes(obs)

    @staticmethod
    def _original(step: _Step, data: pd.DataFrame, w: np.ndarray,
                  rows: np.ndarray) -> np.ndarray | None:
        """A numeric step's values as collected (its rows); None for discrete steps."""
        if step.role == "weights":
            return np.asarray(w, dtype=float)
        if step.role == "missing" or step.family not in ("normal", "negbin"):
            return None
        return pd.to_numeric(data[step.column][rows]).to_numpy(dtype=float)

    def _encode_step(self, step: _Step, data_or_values: Any, w: np.ndarray | None = None,
                     synthetic: bool = False) -> np.ndarray:
        """Columns step j contributes to the design matrices of later steps."""
        if step.role == "weights":
            return np.zeros((len(w) if w is not None else len(data_or_values), 0))
        if synthetic:
            vals = data_or_values
        else:
            col = data_or_values[step.column]
            if step.role == "missing":
                vals = col.isna().to_numpy().astype(np.int64)
            elif step.family in ("normal", "negbin"):
                vals = pd.to_numeric(col).to_numpy(dtype=float)
            else:
                na = col.isna().to_numpy()
                vals = np.full(len(col), -1, dtype=np.int64)
                vals[~na] = _factor(step).codes(col[~na])
        e = step.enc
        if step.role == "missing":
            return np.asarray(vals, dtype=float)[:, None]
        if e["kind"] == "numeric":
            v = np.asarray(vals, dtype=float)
            na = np.isnan(v)
            z = np.zeros_like(v)
            vv = v[~na]
            f = np.log1p(vv - e["shift"]) if e["f"] == "log1p" else _to_model(e, vv)
            z[~na] = (f - e["mean"]) / e["sd"]
            return z[:, None]
        # binary and categorical steps alike: treatment contrasts, code -1 (missing) zeros
        return _factor(step).indicators(np.asarray(vals, dtype=np.int64))

    def _run_jobs(self, jobs: list[StepJob]) -> list[dict[str, Any]]:
        """The steps' fits (serially, in processes or on Dask: :func:`run_step_jobs`)."""
        return run_step_jobs(jobs, int(self.n_jobs), self.client)

    def _fit_settings(self) -> dict[str, Any]:
        """What a step's fits read of the synthesizer (plain values: a step's fit is a job)."""
        return {"chains": int(self.chains), "draws": int(self.draws), "warmup": int(self.warmup),
                "refit_warmup": (int(self.refit_warmup) if self.refit_warmup is not None
                                 else max(100, int(self.warmup) // 2)),
                "stan_kwargs": dict(self.stan_kwargs or {}), "tol": float(self.tol),
                "max_refits": int(self.max_refits), "risk_weights": self.risk_weights,
                "gates": self._cfg_["gates"],
                "predict": (shortcut_predict if getattr(self, "tuning", "default") == "shortcut"
                            else type(self).tuning_predict),
                "direct_final": getattr(self, "tuning", "default") == "shortcut",
                "noise_band": getattr(self, "tuning", "default") == "shortcut"}

    #: the tuner's ``predict`` step for every step (surveysynth.synth.tuning.Proposal)
    tuning_predict = staticmethod(default_predict)

    # ================================================================== synthesis
    def _draw_indices(self, m: int) -> np.ndarray:
        S = min(r["S"] for r in self.step_fits_)
        if m > S:
            raise ValueError(f"m={m} synthetic sets need m distinct posterior draws per variable; "
                             f"the fits have {S}. Raise draws or chains.")
        return _even_draws(S, m)

    def synthesize(self, m: int | None = None) -> list[pd.DataFrame]:
        """m synthetic frames in the confidential row order (for the curator's diagnostics and
        tests; publishing them costs like a release: use :meth:`release`)."""
        self._check_fitted()
        m = self._m(m)
        rng = np.random.default_rng(self._rng_.integers(0, 2**63 - 1))
        return [self._synthesize_one(int(s), rng) for s in self._draw_indices(m)]

    def _synthesize(self, m: int, rng: np.random.Generator):
        idx = self._draw_indices(m)
        rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
        frames = [self._synthesize_one(int(s), rng) for s in idx]
        return frames, self._spec()

    def _step_bound(self, r: dict[str, Any]) -> tuple[float, str]:
        """A step's public per-draw bound: its target (its share of target_epsilon; the
        achieved bound is at most it), else the achieved bound rounded up (declared)."""
        if r["target"] is not None:
            return float(r["target"]), "target"
        return _round_up(float(r["delta_alpha"])), "achieved"

    def _release_charges(self, m: int, book: bool) -> list[dict[str, Any]]:
        """Per step: 2 Delta_alpha_j for each draw of step j not released before from this
        fit; risk_weights="none": no guarantee ("none")."""
        idx = self._draw_indices(m)
        used = vars(self).setdefault("draws_released_", {})
        out = []
        for step, r in zip(self.steps_, self.step_fits_, strict=True):
            seen = used.setdefault(step.name, set())
            new = sorted(set(int(i) for i in idx) - seen)
            if book or not new:
                seen.update(new)
                continue
            entry = {"step": "release", "variable": step.name, "m": m, "new_draws": len(new)}
            if self.risk_weights == "none":
                out.append({**entry, "epsilon": None, "charge": "none"})
            else:
                bound, _ = self._step_bound(r)
                out.append({**entry, "delta_alpha": bound, "epsilon": 2.0 * bound * len(new)})
        return out

    def released_as_collected(self) -> list[str]:
        self._check_fitted()
        cols = self._released_columns(self._prep_["data_public"])
        return [c for c in cols if c != self._prep_["weights_name"]] + (
            [self._prep_["weights_name"]] if self._prep_["design_w"] is not None else [])

    def _spec(self) -> dict[str, Any]:
        design_spec: dict[str, Any] = {"weights": self._prep_["weights_name"]}
        d = self._design_
        if d["strata"]:
            design_spec["strata"] = d["strata"]
        if d["ids"]:
            design_spec["ids"] = d["ids"]
        if d["fpc"]:
            design_spec["fpc"] = d["fpc"]
        return design_spec

    def _synthesize_one(self, s: int, rng: np.random.Generator) -> pd.DataFrame:
        """One synthetic frame from draw s of every step, each variable given the SYNTHETIC
        values of the ones before it."""
        prep = self._prep_
        data = prep["data_public"]
        n = prep["n"]
        out = data[self._released_columns(data)].reset_index(drop=True).copy()
        if prep["design_w"] is not None:     # design weights: released as collected
            out[prep["weights_name"]] = prep["design_w"]
        syn_enc: list[np.ndarray] = []
        values: dict[str, np.ndarray] = {}
        missing_mask: dict[str, np.ndarray] = {}
        for step, r in zip(self.steps_, self.step_fits_, strict=True):
            X = np.column_stack([prep["X_pub"], *syn_enc]) if syn_enc else prep["X_pub"]
            if self._psu_ is not None:    # the synthetic record keeps its PSU (released ids)
                X = np.c_[X, self._psu_]
            model = _model(step)
            if step.role == "weights":
                lw = model.draw(r["fit"].draws, s, X, step.spec, rng,
                                mean_only=self.weights == "smoothed")
                wv = np.exp(lw - lw.max())
                if self._psu_ is not None and prep.get("w_const_psu"):
                    # D5: weights constant within PSUs as collected stay so: the PSU's average
                    wv = (np.bincount(self._psu_, wv) / np.bincount(self._psu_))[self._psu_]
                out[prep["weights_name"]] = wv * prep["N"] / wv.sum()
                continue
            if step.role == "missing":
                code = model.draw(r["fit"].draws, s, X, step.spec, rng)
                missing_mask[step.column] = code == 1
                syn_enc.append(self._encode_step(step, code, synthetic=True))
                continue
            rows = ~missing_mask.get(step.column, np.zeros(n, bool))
            y = model.draw(r["fit"].draws, s, X[rows], step.spec, rng)
            if step.family in ("normal", "negbin"):
                v = np.full(n, np.nan)
                if step.family == "negbin":
                    v[rows] = y + step.spec["shift"]
                else:
                    v[rows] = _from_model(step.spec, y)
                values[step.column] = v
                syn_enc.append(self._encode_step(step, v, synthetic=True))
            else:
                codes = np.full(n, -1, dtype=np.int64)
                codes[rows] = y
                values[step.column] = codes
                syn_enc.append(self._encode_step(step, codes, synthetic=True))
            out[step.column] = self._as_column(step, values[step.column])
        return out

    def _released_columns(self, data: pd.DataFrame) -> list[str]:
        cfg = self._cfg_
        keep = list(dict.fromkeys(cfg["design_cols"] + cfg["public"]))
        if self.unlisted == "public":
            synth = {name for name, _, _ in cfg["specs"]} | {cfg["weights_name"]}
            keep += [c for c in data.columns if c not in synth and c not in keep]
        return keep

    def _as_column(self, step: _Step, v: np.ndarray) -> pd.Series:
        """Synthetic values in the input column's dtype: integers stay integers, categories
        the input's categories (missing values where the indicator says so)."""
        src = self._dtypes_[step.column]
        if step.family in ("normal", "negbin"):
            na = np.isnan(v)
            if not (step.family == "negbin" or pd.api.types.is_integer_dtype(src)):
                return pd.Series(v)
            if step.family == "normal":  # an integer column modelled as continuous: rounded
                lo, hi = self._bounds_[step.column]
                v = np.clip(np.round(v), -np.inf if lo is None else np.ceil(lo),
                            np.inf if hi is None else np.floor(hi))
            iv = np.where(na, 0, v).astype(np.int64)
            if na.any() or isinstance(src, pd.api.extensions.ExtensionDtype):
                arr = pd.array(iv, dtype="Int64")
                arr[na] = pd.NA
                return pd.Series(arr)
            return pd.Series(iv)
        levels = np.asarray(step.levels, dtype=object)
        na = v < 0
        vals = np.where(na, None, levels[np.clip(v, 0, len(levels) - 1)])
        if isinstance(src, pd.CategoricalDtype):
            return pd.Series(pd.Categorical(vals, categories=src.categories, ordered=src.ordered))
        ser = pd.Series(vals, dtype=object)
        if not na.any():
            try:
                return ser.astype(src)
            except (TypeError, ValueError):
                return ser
        return ser

    # ================================================================== privacy
    def _privacy_facts(self, m: int) -> dict[str, Any]:
        bounds = [self._step_bound(r) for r in self.step_fits_]
        da = float(sum(b for b, _ in bounds))
        how = ("target" if all(h == "target" for _, h in bounds) else "achieved")
        kind = "identification" if self.risk_weights == "identification" else "lipschitz"
        src = ("unweighted" if self.risk_weights == "none" else
               f"{kind}_tuned" if self.target_epsilon is not None else f"{kind}_fixed_c")
        cfg = self._cfg_
        notes = [
            "Sequential: each listed variable (and the log weights, last, unless they are "
            "design weights) is modelled by a risk-weighted pseudo posterior given the public "
            "variables and the variables before it; synthetic values are drawn given the "
            "synthetic earlier values.",
            f"public variables (released as collected, predictors): {cfg['predictors']}; "
            f"design columns carried: {cfg['design_cols']}.",
            "full normalised log densities on each variable's modelled scale (log y for "
            "positive variables and the weights"
            + ("; the empirical logit log((y - lo + e) / (hi - y + e)), e = (hi - lo) / 200, "
               "for " + ", ".join(n for n, sc in cfg["scales"].items() if sc == "logit")
               if "logit" in cfg["scales"].values() else "")
            + "; truncation normalisers included).",
            "centring and scaling constants of the models (and of the predictors) are computed "
            "from the confidential data where no public bounds are given; they shape the "
            "weakly informative priors and are not privatized.",
        ]
        if cfg.get("clustered"):
            notes.append(
                "clustered design (issue 36 D3/D4): every step's model has a random intercept "
                "per first-stage sampling unit (PSU), u_j ~ N(0, sigma_u), so theta includes "
                "sigma_u and u_1..u_J; each record's bound is of its density GIVEN its PSU's "
                "u_j (a record's change moves its cluster's u_j, which is inside theta, so the "
                "bound covers it); each synthetic set draws fresh u*_j ~ N(0, sigma_u^(s)) "
                "(post-processing of the released draw), never the posterior u_j.")
        if cfg.get("log_weight_predictor"):
            notes.append(
                f"the log of the design weights {cfg['weights_name']!r} (released as "
                "collected) is a predictor of every step (standardised), so that weighted "
                "synthetic estimates target the population (issue 36 D5).")
        pwb = []
        if self.risk_weights != "none" and how == "achieved":
            pwb.append({
                "item": "each step's Delta_alpha_j without a target: the achieved maximum of "
                        "|alpha_i log p_j(y_i | theta_s)| over its released fit's draws (rounded "
                        "up to 3 significant digits, in the ledger), and the epsilon from them",
                "reason": "no target_epsilon was given (fixed c), so the guarantee's epsilon is "
                          "computed from these data-dependent bounds. Give target_epsilon to "
                          "publish public per-step targets instead."})
        if self.design_weights_:
            pwb.append({
                "item": f"the sampling weights {cfg['weights_name']!r}, released as collected "
                        f"(one value per cell of the public design columns "
                        f"{cfg['weight_cells']}, e.g. N_h / n_h)",
                "reason": "the weights are exactly constant within each cell of the released "
                          "design columns, so they are design information (what the released "
                          "strata and fpc say), not a record's value; they are not modelled "
                          "and take no budget."})
        miss = [s.column for s in self.steps_ if s.role == "missing"]
        if miss:
            pwb.append({"item": f"which variables have missing values ({miss})",
                        "reason": "missing='model' adds a missing-indicator step for each "
                                  "variable with missing values in the confidential data."})
        cats = [s.name for s in self.steps_ if s.family in ("logistic", "categorical", "ordinal")
                and s.role == "value"]
        if cats:
            pwb.append({"item": f"the categories observed in {cats}",
                        "reason": "the released categories are those present in the "
                                  "confidential data."})
        return {
            "family": "pseudo_posterior_sequential",
            "mechanism": "pseudo_posterior_sequential",
            "delta_alpha": None if src == "unweighted" else da,
            "facts": {"alpha_source": src, "steps": len(self.steps_), "bound": how,
                      "draws_released": max((len(v) for v in
                                             getattr(self, "draws_released_", {}).values()),
                                            default=0),
                      "draws": int(min(r["S"] for r in self.step_fits_)),
                      "bound_draws": "final_fit" if self.risk_weights != "none" else "same_fit",
                      "weights": "design" if self.design_weights_ else self.weights,
                      "weights_step": "design" if self.design_weights_ else "modelled",
                      **({"random_effects": "psu"} if cfg.get("clustered") else {}),
                      **({"known": ", ".join(map(str, self._cfg_["known"])) or "none (one "
                          "pattern)", "r": self._cfg_["r"]} if kind == "identification"
                         and src != "unweighted" else {}),
                      "convergence_gates": ", ".join(
                          f"{k} {'<=' if k != 'ess_bulk' else '>='} {v:g}"
                          for k, v in self.convergence_["gates"].items())},
            "notes": notes,
            "published_without_budget": pwb,
        }

    def summary(self) -> pd.DataFrame:
        """Per step: type, share, target, Delta unweighted, Delta_alpha, c, mean alpha,
        records' worth (sum of alpha: see :func:`_flag_near_prior`), convergence
        (confidential: for the curator)."""
        self._check_fitted()
        rows = []
        for step, r in zip(self.steps_, self.step_fits_, strict=True):
            rows.append({"step": step.name, "type": step.type, "model": step.family,
                         "stan_program": r["program"], "patterns": r["patterns"],
                         "share": step.share, "target_lipschitz": r["target"],
                         "delta_unweighted": r["delta_unweighted"],
                         "delta_alpha": r["delta_alpha"], "epsilon_per_set": 2 * r["delta_alpha"],
                         "c": r["c"], "mean_alpha": float(np.mean(r["alpha"])),
                         "records_worth": float(np.sum(r["alpha"])),
                         "max_rhat": r["convergence"]["max_rhat"],
                         "min_ess_bulk": r["convergence"]["min_ess_bulk"],
                         "divergent": r["convergence"]["divergent"], "seconds": r["seconds"]})
        return pd.DataFrame(rows).set_index("step")

    def confidential_summary(self) -> dict[str, Any]:
        """Disclosure-review material (never public)."""
        self._check_fitted()
        return {
            "fit_summary": self.summary(),
            "tuning_path": pd.DataFrame([row for r in self.step_fits_ for row in r["tuning"]]),
            "convergence": {k: v for k, v in self.convergence_.items() if k != "gates"},
            "gates": self.convergence_["gates"],
            "seeded": bool(self.seeded_),
        }


class _StepFit:
    """The fits of one step: unweighted, then tuned weighted fits and a final fit (the
    pseudo posterior synthesizers' algorithm, METHODS section 6, on this step's model), by the
    one engine (:mod:`surveysynth.synth.fitting`) and the one tuner
    (:func:`surveysynth.synth.tuning.fit_to_target`). ``cfg``: :meth:`Sequential._fit_settings`."""

    def __init__(self, cfg: dict[str, Any], step: _Step, y: np.ndarray, X: np.ndarray,
                 target: float | None, rng: np.random.Generator, progress: bool,
                 risk: np.ndarray | None = None) -> None:
        self.cfg, self.step, self.y, self.X, self.target = cfg, step, y, X, target
        self.risk = risk     # identification risks IR^c_i (risk_weights="identification")
        self.rng, self.progress = rng, progress
        self.model = _model(step)
        self.program = load_program(self.model.program_for(step.spec))
        self.n = len(y)
        # Stan and the bounds work on the distinct (x, y) patterns, exactly (see ``patterns``);
        # ``inv`` maps them back to the records
        first, self.inv = patterns(X, y)
        self.yu, self.Xu = y[first], X[first]
        # whitened predictors (exact reparametrization; records' X, so the same for every fit of
        # the step) when Stan gets many rows; the programs' own coordinates otherwise
        Xp = split_groups(X)[0] if "J" in step.spec else X   # predictors without the PSU
        self.pre = (self.model.sampler_pre(whitening(Xp), y, step.spec)
                    if len(self.yu) >= WHITEN_MIN_ROWS else identity_pre(Xp.shape[1]))

    def run(self, alpha: np.ndarray, draws: int, warmup: int, init: Any, label: str,
            seed: int) -> StanDraws:
        wsum = np.bincount(self.inv, weights=alpha, minlength=len(self.yu))
        # the sampling parametrization (exact; _seq_models.whitening); inits are kept in the
        # natural parameters and converted
        data = self.model.stan_data(self.yu, self.Xu, wsum, self.step.spec, save_log_lik=False,
                                    pre=self.pre)
        if init is not None:
            init = self.model.sampler_inits(init, self.step.spec, self.pre)
        return run_fit(self.program, data, label=f"Sequential {self.step.name} {label}",
                       chains=self.cfg["chains"], draws=draws, warmup=warmup, seed=seed,
                       progress=self.progress, init=init,
                       stan_kwargs=sampler_kwargs(self.model, self.step.spec,
                                                  self.cfg["stan_kwargs"]))

    def _patterns_loglik(self, res: StanDraws, s: slice) -> np.ndarray:
        return self.model.loglik(res.draws, s, self.yu, self.Xu, self.step.spec)

    def bounds_of(self, res: StanDraws) -> np.ndarray:
        """max_s |log p_i(theta_s)| per record over the fit's draws (numpy, in chunks),
        computed once per distinct (x, y) pattern and mapped back to the records."""
        S = res.chains * res.draws_per_chain
        u = len(self.yu)
        chunk = max(1, int(4e6 // max(1, u * self.step.spec.get("K", 1))))
        return absmax_over_draws(lambda s: self._patterns_loglik(res, s), S, u, chunk)[self.inv]

    def run_all(self) -> dict[str, Any]:
        n, target, cfg = self.n, self.target, self.cfg
        init0 = self.model.inits(self.y, self.X, self.step.spec, cfg["chains"],
                                 np.random.default_rng(child_seed(self.rng)))
        unw = self.run(np.ones(n), cfg["draws"], cfg["warmup"], init0, "unweighted",
                       child_seed(self.rng))
        # the bounds chain by chain (their max is the bound: one pass either way); the spread
        # of the per-chain maxima says whether the bound's noise leaves room for direct
        # final fits (below)
        by_chain = chain_bounds(unw, self.bounds_of)
        delta = by_chain.max(axis=0)
        # what the weights normalise: the Lipschitz bounds, or the identification risks (a
        # record whose log density is not finite gets alpha = 0 either way)
        base = (delta if self.risk is None else np.where(np.isfinite(delta), self.risk, np.inf))
        finite = np.isfinite(delta)
        name = f"Sequential {self.step.name}"
        params = list(self.model.params)
        self.fits = fits = WeightedFits(
            self.run, self.bounds_of, name=name, base=base, g=0.0, rng=self.rng,
            draws=cfg["draws"], warmup=cfg["refit_warmup"], tune_draws=cfg["draws"],
            tune_warmup=cfg["refit_warmup"], init=unw.last_inits(params), init_names=params,
            progress=self.progress, target=target, row={"step": self.step.name},
            alpha_one_role="final (alpha = 1)")
        if cfg["risk_weights"] == "none":
            alpha, res, c, R = np.ones(n), unw, None, delta
            da = float(R.max())
            fits.rows.append({"step": self.step.name, "c": None, "delta_alpha": da,
                              "role": "unweighted"})
        else:
            settings = TunerSettings(name=name, tol=cfg["tol"], g=0.0,
                                     max_refits=cfg["max_refits"],
                                     direct_final=bool(cfg.get("direct_final", False))
                                     and direct_final_pays(by_chain, cfg["tol"]),
                                     noise_band=bool(cfg.get("noise_band", False)))
            S_unw = unw.chains * unw.draws_per_chain
            try:
                c, (da, alpha, _, res, R) = fit_to_target(
                    fits.evaluate, target, delta, fits.chain_maxima, settings, c=1.0, base=base,
                    predict=cfg["predict"],
                    loglik=lambda s: self._patterns_loglik(unw, s), loglik_inv=self.inv,
                    loglik_draws=S_unw, annotate=fits.annotate)
            except TargetUnreachableError as exc:
                raise TargetUnreachableError(f"variable step {self.step.name!r}: {exc}") from exc
        verdict = convergence_verdict(res.summary, res.diagnostics, cfg["gates"])
        return {"fit": res, "alpha": alpha, "delta": delta, "delta_alpha": da,
                "delta_unweighted": float(delta[finite].max()), "c": c,
                "tuning": fits.rows, "convergence": verdict,
                "S": res.chains * res.draws_per_chain, "X_columns": self.X.shape[1],
                "patterns": len(self.yu), "program": self.model.program_for(self.step.spec),
                "random_effect": "J" in self.step.spec}


def direct_final_pays(by_chain: np.ndarray, tol: float) -> bool:
    """Whether a step tries direct final fits (``tuning="shortcut"``): only when the bound's
    own fit-to-fit noise leaves room to land in the band [(1 - tol) target, target], i.e. when
    1.645 x the relative SD of the unweighted fit's per-chain maxima (``by_chain``, chains x
    records; the refit rule's margin statistic) is at most tol / 2. On a small file the bound
    is too noisy for that (apistrat, 200 records: direct fits missed the band and cost fits;
    docs/benchmarks.md "Small files") and the refit rule, with the shortcut's proposals,
    decides; at 10,000 records the spread is well under 1%. Only how many fits run depends on
    this, never what is released or reported."""
    s = log_spread(np.max(np.where(np.isfinite(by_chain), by_chain, -np.inf), axis=1))
    return s is not None and bool(1.645 * s <= tol / 2.0)


@dataclass
class StepJob:
    """One step's fits as a picklable job: the step, its response and design matrix (the
    public predictors and the CONFIDENTIAL earlier variables: no step's fit depends on another
    step's fit), its target, and its own seed (a SeedSequence spawned from the release seed in
    step order). Calling it runs :class:`_StepFit` and returns the step's result dict, with the
    warnings of its fits (re-issued by :func:`run_step_jobs` in step order, wherever the job
    ran) and its wall time."""

    cfg: dict[str, Any]
    step: _Step
    y: np.ndarray
    X: np.ndarray
    target: float | None
    seed: np.random.SeedSequence
    progress: bool
    risk: np.ndarray | None = None

    def __call__(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                res = _StepFit(self.cfg, self.step, self.y, self.X, self.target,
                               np.random.default_rng(self.seed), self.progress,
                               self.risk).run_all()
            except Exception as exc:   # the error and the warnings before it travel back
                return {"error": exc, "warnings": _portable(caught)}
        res["seconds"] = time.perf_counter() - t0
        res["warnings"] = _portable(caught)
        return res


def _portable(caught: list) -> list[tuple[type, str]]:
    return [(w.category, str(w.message)) for w in caught]


def _call(job: StepJob) -> dict[str, Any]:
    """A job in a worker process (or Dask task): httpstan's sampling processes are stopped
    after it, so the worker can exit (:func:`surveysynth.synth._stan.release_sampler_pool`)."""
    try:
        return job()
    finally:
        release_sampler_pool()


def _daemonic() -> bool:
    import multiprocessing

    return bool(multiprocessing.current_process().daemon)


def run_step_jobs(jobs: list[StepJob], n_jobs: int = 1, client: Any = None) -> list[dict]:
    """Run the steps' fit jobs: serially (n_jobs 1), in ``n_jobs`` worker processes, or as
    tasks on a Dask ``client``; results in step order. Each job's warnings are re-issued here,
    in step order, and the first failed step's error is raised (after its warnings), so the
    caller sees the same whichever way the jobs ran.

    Processes are started with "spawn", not fork: pystan runs its own asyncio loop and
    httpstan server in the calling process, and forking a process that holds them (or any
    thread) can deadlock; a spawned worker imports surveysynth afresh and shares the compiled
    models through httpstan's disk cache (~/.cache/httpstan)."""
    if client is not None:
        daemonic = sorted(w for w, d in client.run(_daemonic).items() if d)
        if daemonic:
            raise ValueError(
                f"Dask workers {daemonic[:3]} are daemonic processes, which may not start "
                "children, and pystan samples each chain in a child process. Fix: start the "
                "cluster with dask.config.set({'distributed.worker.daemon': False}) (e.g. "
                "`with dask.config.set({'distributed.worker.daemon': False}): cluster = "
                "LocalCluster(...)`), or fit with n_jobs= on this machine.")
        futures = client.map(_call, jobs, pure=False)
        results = client.gather(futures)
    elif n_jobs > 1 and len(jobs) > 1:
        import concurrent.futures
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=min(n_jobs, len(jobs)),
                                                    mp_context=ctx) as ex:
            results = list(ex.map(_call, jobs))
    else:
        results = []
        for job in jobs:        # serially: stop at the first step refused
            results.append(job())
            if "error" in results[-1]:
                break
    for res in results:
        for category, message in res.pop("warnings"):
            warnings.warn(message, category, stacklevel=3)
        if "error" in res:
            raise res["error"]
    return results


# ====================================================================== helpers
def _model(step: _Step):
    """The step's model: with PSU random intercepts when the design is clustered (its spec
    holds the number of PSUs J), else the family's original one (byte-identical path)."""
    return MODELS_RE[step.family] if "J" in step.spec else MODELS[step.family]


def log_scale_spread(step: _Step, draws: dict[str, np.ndarray], y: np.ndarray,
                     X: np.ndarray, max_draws: int = 200) -> float:
    """The predictive SD of a normal-family step's modelled variable (log y for positive
    variables) under its posterior draws, over the confidential SD of the same: sqrt(var over
    draws and records of mu + mean over draws of sigma^2) / sd(y), at the records' predictors
    ``X`` (at most ``max_draws`` draws, evenly spaced). About 1 for a fit that follows the data;
    a risk-weighted fit close to its prior gives several (docs/sequential.md, "Positive
    variables at small risk weights"). Confidential (the curator's warning, never released)."""
    model = _model(step)
    S = len(np.asarray(draws["s"]))
    idx = np.unique(np.linspace(0, S - 1, min(S, int(max_draws))).round().astype(np.int64))
    mu, sigma = model._mu_sigma(draws, idx, X, step.spec)  # noqa: SLF001
    sd = float(np.std(np.asarray(y, dtype=float)))
    return float(np.sqrt(np.var(mu) + np.mean(np.square(sigma)))) / max(sd, 1e-12)


def _flag_log_spread(step: _Step, res: dict[str, Any], y: np.ndarray, X: np.ndarray) -> None:
    """Warn (a fidelity flag of the release: fit warnings go into its report) when a log-scale
    step with no public upper bound has a model far wider than the data: exp of it gives
    synthetic values orders of magnitude off (apistrat's api.stu at target epsilon 40 over 8
    variables: synthetic means 2.6e6-8.1e10 against 498)."""
    if step.family != "normal" or step.spec.get("tf") != "log" or step.spec.get("hi") is not None:
        return
    ratio = log_scale_spread(step, res["fit"].draws, y, X)
    res["log_spread"] = ratio
    if not ratio > LOG_SPREAD_FLAG:
        return
    alpha = np.asarray(res["alpha"], dtype=float)
    what = "the log weights" if step.role == "weights" else f"variable {step.name!r} (positive)"
    warnings.warn(
        f"Sequential {step.name}: the risk-weighted model of {what} is {ratio:.1f} times as wide "
        f"as the data on the log scale (mean alpha {alpha.mean():.3f}: about {alpha.sum():.1f} "
        "records' worth of likelihood, so the posterior is close to its prior), and exp of it "
        "gives synthetic values far from the data (means orders of magnitude too large). The "
        "model is as designed at this budget; to keep the values sane give the variable public "
        "'bounds' (lo, hi) (the model is then truncated to them on the log scale), a larger "
        "budget share (budget=), or a larger target_epsilon. See docs/sequential.md, "
        "\"Positive variables at small risk weights\".", UserWarning, stacklevel=2)


def model_coefficients(step: _Step, X: np.ndarray) -> int:
    """The number of regression coefficients of a step's model on its design matrix X
    (predictor columns P; a clustered design's PSU code column counts as one, for its random
    intercepts' scale): P + 1 (intercept) for logistic, normal and count models, P + K - 1
    (K - 1 cut points) for ordinal, (P + 1)(K - 1) for categorical; scale or dispersion
    parameters not counted."""
    P = int(X.shape[1]) if X.ndim == 2 else 0
    K = max(len(step.levels), 2)
    if step.family == "ordinal":
        return P + K - 1
    if step.family == "categorical":
        return (P + 1) * (K - 1)
    return P + 1


def _flag_near_prior(step: _Step, res: dict[str, Any], X: np.ndarray) -> None:
    """Warn (a fidelity flag, like :func:`_flag_log_spread`; fit warnings go into the
    release's report) when a risk-weighted step's released fit keeps fewer records' worth of
    likelihood, sum_i alpha_i, than its model has regression coefficients: the data then weigh
    less than one record per coefficient and the posterior is close to its prior in some
    direction, so the synthetic values follow the prior within the public bounds rather than
    the data (apistrat at target epsilon 40 over 8 variables: ell's model keeps 0.25-0.34
    records' worth for 6 coefficients; docs/sequential.md "Steps close to their prior"). The
    sum is in :meth:`Sequential.summary` (``records_worth``; confidential: it derives from the
    data). Not repeated where the log-scale flag already fired for the step."""
    alpha = np.asarray(res.get("alpha", ()), dtype=float)
    if alpha.size == 0:
        return
    worth = float(alpha.sum())
    k = model_coefficients(step, X)
    if res.get("target") is None or res.get("c") is None or worth >= k:
        return
    if res.get("log_spread", 0.0) > LOG_SPREAD_FLAG:
        return
    what = "the log weights" if step.role == "weights" else f"variable {step.name!r}"
    warnings.warn(
        f"Sequential {step.name}: the released risk-weighted model of {what} keeps "
        f"{worth:.2f} records' worth of likelihood (sum of alpha over {alpha.size} records, "
        f"mean alpha {alpha.mean():.4f}) for {k} regression coefficients: its posterior is "
        "close to its prior, so the synthetic values follow the prior within the public "
        "bounds rather than the data. The bound is met as designed; for values that follow "
        "the data give this variable a larger budget share (budget=), a larger "
        "target_epsilon, or fewer predictors. See docs/sequential.md, \"Steps close to their "
        "prior\".", UserWarning, stacklevel=2)


def psu_codes(design: Any) -> np.ndarray | None:
    """The first-stage sampling units (PSUs, R's ultimate clusters; issue 36 D1) of a clustered
    design as codes 0..J-1, the design's own PSU index (unique within strata, as SurveyDesign
    computes it); None when the design has no real clusters: no ids (ids=~1: one record per
    PSU) or every PSU a single record. Later stages get no random effect: without a later-stage
    fpc R's variance is the ultimate-cluster one, driven by PSU totals, and with one the
    first stage still dominates it."""
    if not _cols(getattr(design, "ids_vars", None)):
        return None
    stages = getattr(design, "stages", None)
    if not stages:
        return None
    codes = np.asarray(stages[0].cluster, dtype=np.int64)
    _, codes = np.unique(codes, return_inverse=True)
    codes = codes.ravel().astype(np.int64)
    if int(codes.max()) + 1 >= len(codes):
        return None
    return codes


def _constant_within(w: np.ndarray, groups: np.ndarray) -> bool:
    """True when ``w`` is exactly constant within each group."""
    w = np.asarray(w, dtype=float)
    first = np.empty(int(groups.max()) + 1)
    first[groups] = w
    return bool(np.array_equal(first[groups], w))


def _with_log_weight(encs: list, X: np.ndarray, w: np.ndarray, name: str) -> tuple[list, np.ndarray]:
    """The public design matrix with the standardised log of the released design weights as
    one more column (issue 36 D5), unless it adds no direction to an intercept and the columns
    already there (constant weights, as apiclus1's; weights constant within strata that are
    already predictors): then unchanged."""
    lw = np.log(np.asarray(w, dtype=float))
    sd = float(np.std(lw))
    if not sd > 0:
        return encs, X
    z = (lw - float(np.mean(lw))) / sd
    base = np.c_[np.ones(len(z)), X]
    if np.linalg.matrix_rank(np.c_[base, z]) == np.linalg.matrix_rank(base):
        return encs, X
    e = {"col": name, "kind": "numeric", "mean": float(np.mean(lw)), "sd": sd, "na": False,
         "f": "log_weight", "shift": 0.0}
    return [*encs, e], np.c_[X, z]


def step_identification_risk(step: _Step, y: np.ndarray, groups: np.ndarray,
                             r: float, original: np.ndarray | None = None) -> np.ndarray:
    """IR^c_i of one step's records (seed 002 eq. 2): the share of the records in i's known
    pattern whose value is NOT close to y_i, on the variable's ORIGINAL scale.

    Numeric variables (normal and count families; the weights): "close" is the ball
    [y_i - r|y_i|, y_i + r|y_i|] (the exact range counts of
    :func:`surveysynth.privacy.identification.risk_counts`). Discrete variables (binary,
    categorical, ordinal, missing indicators): **Decision**: the same value (a ball on category
    codes has no meaning), so IR^c_i = 1 - #{h in M_i: y_h = y_i} / |M_i|. ``y`` is the step's
    response as fitted (``Sequential._response``), ``groups`` the pattern codes of its rows;
    ``original``: the same records' values as collected (the fit passes them: a value on a
    ball's edge must not move by the rounding of a transform's inverse), else recovered from
    ``y``. Derived from the confidential data: it only shapes the weights, never leaves the
    fit."""
    groups = np.asarray(groups, dtype=np.int64)
    if step.family in ("normal", "negbin"):
        v = np.asarray(y, dtype=float)
        if original is not None:
            v = np.asarray(original, dtype=float)
        elif step.family == "normal":
            v = _from_model(step.spec, v)  # positive (and w): fitted as log; logit shares
        elif step.family == "negbin":
            v = v + float(step.spec.get("shift", 0.0))
        return risk_counts(v, groups, float(r), pairwise=False)[0]
    codes = np.asarray(y, dtype=np.int64)
    key = groups * (int(codes.max(initial=0)) + 1) + codes
    same = np.bincount(key)[key]
    size = np.bincount(groups)[groups]
    return 1.0 - same / size


def _design_weights(w: np.ndarray, N: float) -> np.ndarray:
    """Design weights as released: unchanged (a copy) when the public N is their sum (up to
    float rounding of the sum, 1e-12 relative), else times the one public factor N / sum(w)."""
    f = N / float(w.sum())
    return w.copy() if abs(f - 1.0) <= 1e-12 else w * f


def weights_are_design(data: pd.DataFrame, w: np.ndarray, cells: list[str]) -> bool:
    """True when the weights ``w`` are exactly constant within each cell of the public design
    columns ``cells`` (strata and fpc; one cell when there are none), i.e. a function of the
    released design (apistrat's pw = N_h / n_h). Exact float equality, vectorized: a weight
    that differs from its cell's first weight by any amount (an adjustment) is record-level
    information and must be modelled."""
    w = np.asarray(w, dtype=float)
    if len(w) == 0:
        return False
    if cells:
        g = data[cells].groupby(cells, dropna=False, sort=False).ngroup().to_numpy()
    else:
        g = np.zeros(len(w), dtype=np.int64)
    first = np.empty(int(g.max()) + 1)
    first[g] = w      # one weight of each cell (whichever write lands; all equal iff design)
    return bool(np.array_equal(first[g], w))


def _scale(v: dict, i: int) -> str:
    """The validated modelled scale of variables[i] ('identity' or 'logit')."""
    scale = v.get("scale", "identity")
    if scale not in ("identity", "logit") or (scale == "logit" and v.get("type") != "bounded"):
        raise ValueError(f"variables[{i}] ({v['name']!r}): scale={scale!r}: choose 'identity' "
                         "(default) or 'logit' (type 'bounded' only).")
    return scale


def _to_model(spec: dict, v: np.ndarray) -> np.ndarray:
    """A normal-family variable's modelled scale: log for positive variables and the
    weights, the empirical logit for bounded ones with scale='logit', else the values."""
    tf = spec.get("tf", "id")
    v = np.asarray(v, dtype=float)
    if tf == "log":
        return np.log(v)
    if tf == "logit":
        e = spec["tf_e"]
        return np.log(v - spec["tf_lo"] + e) - np.log(spec["tf_hi"] - v + e)
    return v


def _from_model(spec: dict, y: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_to_model`. For the logit the model is truncated to [t(lo), t(hi)],
    so the values land in [lo, hi] (clipped against rounding at the ends)."""
    tf = spec.get("tf", "id")
    y = np.asarray(y, dtype=float)
    if tf == "log":
        return np.exp(y)
    if tf == "logit":
        lo, hi, e = spec["tf_lo"], spec["tf_hi"], spec["tf_e"]
        u = np.exp(-np.abs(y))
        # y = lo - e + (hi - lo + 2e) * sigmoid(t), written stably for large |t|
        sig = np.where(y >= 0, 1.0 / (1.0 + u), u / (1.0 + u))
        return np.clip(lo - e + (hi - lo + 2 * e) * sig, lo, hi)
    return y


def number_text_fix(bad: pd.Series) -> str:
    """The fix for text values in a variable modelled as a number: numbers written with
    thousands separators or a decimal comma ("1,234", "1 234", "12,5") are read as text by the
    CSV reader (it does not guess separators), so the fix is to write them as plain numbers;
    other text is a category."""
    text = bad.dropna().astype(str).str.strip()
    plain = text.str.replace(r"(?<=\d)[,' \u00a0\u202f](?=\d{3}(\D|$))", "", regex=True)
    if len(text) and pd.to_numeric(plain, errors="coerce").notna().all():
        return ("They are numbers written with thousands separators (e.g. "
                f"{text.iloc[0]!r}), which the CSV reader takes as text. Fix: write the "
                "column as plain numbers in the input file (in R: as.numeric(gsub(\",\", \"\", "
                "x)) before write.csv; in pandas: pd.read_csv(path, thousands=\",\") then "
                "to_csv), or save it from the spreadsheet without the separators.")
    decimal = text.str.replace(",", ".", regex=False)
    if len(text) and pd.to_numeric(decimal, errors="coerce").notna().all():
        return (f"They are numbers with a decimal comma (e.g. {text.iloc[0]!r}), which the CSV "
                "reader takes as text. Fix: write them with a decimal point in the input file "
                "(pandas: pd.read_csv(path, decimal=\",\") then to_csv).")
    return ("Fix: type 'categorical' if the variable is a category (or a binary one), or "
            "correct those values in the input file.")


def _cols(x: Any) -> list[str]:
    if x is None:
        return []
    cols = as_list(x, "known") if isinstance(x, str) else list(x)
    return [c for c in cols if isinstance(c, str) and c not in ("1", "~1")]


def _bounds(b: Any, name: str, typ: str) -> tuple[float | None, float | None]:
    if b is None:
        if typ == "bounded":
            raise ValueError(f"variable {name!r} (bounded) needs public bounds (lo, hi); give "
                             "'bounds': (lo, hi) or use type 'continuous'.")
        return None, None
    if typ in ("binary", "categorical", "ordinal"):
        raise ValueError(f"variable {name!r} ({typ}): bounds apply to numeric types only; "
                         "remove 'bounds'.")
    try:
        lo, hi = b
        lo = None if lo is None else float(lo)
        hi = None if hi is None else float(hi)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"variable {name!r}: bounds={b!r} must be a pair (lo, hi) of numbers "
                         "(either may be None).") from exc
    if typ == "bounded" and (lo is None or hi is None):
        raise ValueError(f"variable {name!r} (bounded) needs both bounds; got {b!r}.")
    if lo is not None and hi is not None and not lo < hi:
        raise ValueError(f"variable {name!r}: bounds {b!r} need lo < hi. Fix: give (lo, hi) "
                         "with lo < hi.")
    if typ == "positive" and hi is not None and hi <= 0:
        raise ValueError(f"variable {name!r} (positive): the upper bound must be > 0.")
    return lo, hi


def _factor(step: _Step) -> Factor:
    """The coding of a discrete step's variable: its levels (learned on the confidential
    data), a missing value code -1 (the step's missing indicator models it)."""
    return Factor(step.column, tuple(step.levels), na="skip")


def _apply_public(e: dict, col: pd.Series) -> np.ndarray:
    if e["kind"] == "numeric":
        v = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
        na = np.isnan(v)
        z = np.where(na, 0.0, (v - e["mean"]) / e["sd"])
        return np.c_[z, na.astype(float)] if e["na"] else z[:, None]
    return e["factor"].matrix(col)


def _combine_verdicts(items: list[tuple[str, dict]], gates: dict) -> dict[str, Any]:
    problems = [f"{name}: {p}" for name, v in items for p in v["problems"]]
    g = items[0][1]["gates"] if items else dict(gates)
    return {"passed": not problems, "problems": problems,
            "max_rhat": float(max(v["max_rhat"] for _, v in items)),
            "min_ess_bulk": float(min(v["min_ess_bulk"] for _, v in items)),
            "divergent": int(sum(v["divergent"] for _, v in items)),
            "transitions": int(sum(v["transitions"] for _, v in items)), "gates": g}
