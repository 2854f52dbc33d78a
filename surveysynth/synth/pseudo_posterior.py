"""Risk-weighted pseudo posterior synthesizers for survey data: FBS, FBP, PBP.

Hu, Savitsky & Williams, "Private Tabular Survey Data Products through Synthetic Microdata
Generation" (seeds 000/001); METHODS sections 6-9. Each synthesizer

1. fits its model unweighted (alpha = 1) in Stan and computes per-record bounds
   Delta_i = max_s |log p_i(theta_s)| from FULL normalised log densities on the modelled scale;
2. sets risk weights alpha_i = clip(c (1 - D_i) + g, 0, 1) (:func:`lipschitz_weights`);
3. refits the alpha-weighted pseudo posterior, tuning c (plug-in root steps, each a refit with
   its own seed) until the achieved bound Delta_alpha is within ``tol`` (1%) of the target;
4. releases m synthetic data sets from m draws spaced evenly over the retained draws; the
   privacy record carries the ACHIEVED Delta_alpha and epsilon = 2 Delta_alpha m.

Models (predictors are categorical; record i's mean depends only on its predictor cell):

* FBS (partial synthesis): (log y, log w) ~ MVN_2(x B, Sigma), priors of seed 000 Appendix C.
  Synthetic (ly*, lw*) ~ MVN; smoothed weights E[lw | ly*] at the synthetic ly*, exponentiated
  and rescaled to sum to N.
* FBP (partial synthesis): population y ~ N(x beta, sigma_y), pi | y ~ LN(kappa_y y + x kappa_x,
  sigma_pi), exact sample likelihood (seed 001 eq. 6) with pi = 1/w on the weights' natural
  scale. Synthetic y* from the population model; smoothed weights from the pi model's mean
  exp(-kappa_y y* - x kappa_x) (``smoothed_weights="model"``; seed 001 uses exp(-kappa_y y*)
  alone, ``"outcome"``, which biases counts by predictor cell: docs/pseudo_posterior.md).
* PBP (full synthesis): pseudo likelihood prod p(y_i, x_i | theta)^(w_i alpha_i) with w
  normalised to sum to n; synthetic (x*, y*) for n records; constant weights N/n.

Decisions (see docs/pseudo_posterior.md and METHODS.md "Decision" items):

* x = full cell effects (the interaction of all predictors; ``effects="cells"``, METHODS 7);
  ``effects="main"`` gives intercept + main effect dummies. Every predictor is treated as
  categorical. FBP and PBP code cells as intercept + one dummy per non-reference cell (METHODS
  7); FBS defaults to cell-means coding (one indicator per cell, same likelihood), because with
  its hierarchical per-coefficient scales the intercept coding creates funnels (measured: 44-91
  divergences in 600 draws vs 0-1); ``coding="intercept"`` restores the METHODS coding.
* The Stan likelihoods are evaluated from exact alpha-weighted per-cell sufficient statistics
  (identical target density, O(cells) per gradient); per-record log densities are generated
  quantities (``log_lik="stan"``) or evaluated in numpy from the parameter draws
  (``log_lik="numpy"``, the same formulas); ``"auto"`` (default) uses numpy, which avoids
  pystan parsing n x S generated values per fit; ``"stan"`` is the reference the tests compare
  numpy against.
* MCMC starts from data-based inits (cell means, pooled SDs) with a small jitter per chain;
  refits are warm-started from the previous fit's last draws. Inits affect convergence only.
* N (the population size used to rescale smoothed weights) is ``population_size`` or, by
  default, the sum of the confidential weights (the design's own estimate of N, treated as a
  public total). For FBP the smoothed weight of a record is the mean of exp(-kappa_y y* -
  x kappa_x) over its predictor cell (seed 001 Section 2.2: "within strata, the individuals in the synthetic
  population are equally weighted"), so weighted cell means equal the unweighted cell means
  the paper tabulates and margins combine cells by their estimated counts.
* PBP's per-record mechanism contribution is w_i alpha_i log p(y_i, x_i | theta): its bounds
  Delta_i and Delta_alpha include the normalised weight w_i (seed 001: unweighted 45.39).
* Clustered designs (issue 36, docs/clustered_synthesis.md): FBS and FBP fit fbs_re.stan /
  fbp_re.stan, the same outcome models with a random intercept per PSU (the design's first-stage
  unit) and PSU-level covariates (FBS: log w; both: the PSU's cell shares); the bound is the
  conditional density given u_j; each synthetic set draws u*_j ~ N(0, sigma_u) afresh (never the
  posterior u_j); the synthetic designs carry the ids, strata and fpc as collected and weights
  constant within PSUs (the collected ones, or PSU means when they vary within PSUs).
  Unclustered designs keep fbs.stan / fbp.stan and their code path unchanged.
* FBP on an unclustered design whose log w is a function of the predictor cells fits
  fbp_nopi.stan (no pi model, as fbp_re.stan's has_pi = 0); otherwise fbp.stan, unchanged.
  FBS there fits fbs_nolw.stan (the outcome column alone, as fbs_re.stan); otherwise fbs.stan /
  fbs_collapsed.stan, unchanged. Both release the collected weights rescaled to N.
* The priors are fixed on the modelled scale (never rescaled from the data): an outcome whose
  magnitude makes them informative is refused at fit; the public ``outcome_scale`` constant
  (y / s is modelled, synthetic values multiplied back) or log=True are the fixes.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import pandas as pd

from .._validate import as_list
from ..privacy.randomness import child_seed
from ._stan import StanDraws, load_program
from .base import Synthesizer, collected_design, convergence_verdict
from .cells import build_cells, cell_moments, weight_groupings
from .fitting import WeightedFits, absmax_over_draws, check_weights, run_fit
from .params import DEPRECATED, MCMC, RELEASE, Columns, Interval, Options, ParameterError
from .tuning import (
    CellWeightFloor,
    Predictor,
    TargetUnreachableError,
    TunerSettings,
    TuningPath,
    default_predict,
    fit_to_target,
    smallest_group_weight,
    tune,
)
from .tuning_shortcut import shortcut_predict

__all__ = ["FBS", "FBP", "PBP", "TargetUnreachableError"]

_LOG2PI = float(np.log(2 * np.pi))


def _first(mask: np.ndarray, k: int = 5) -> list[int]:
    return np.flatnonzero(mask)[:k].tolist()


def _round_up(x: float, digits: int = 3) -> float:
    """x rounded UP to ``digits`` significant digits (a bound stays a bound)."""
    if not np.isfinite(x) or x <= 0:
        return float(x)
    e = int(np.floor(np.log10(x))) - digits + 1
    return float(np.ceil(x / 10.0**e) * 10.0**e)


def _log_w_beyond_cells(lw: np.ndarray, codes: np.ndarray, C: int) -> bool:
    """True when log w varies within some predictor cell (beyond float noise), i.e. log w is not
    a function of the cells. Used by the clustered path (``lw_free``) and by FBP's unclustered
    path (``pi_free``): when False, sampling is non-informative given x and FBP drops its pi
    model (docs/pseudo_posterior.md, "FBP with cell-constant weights")."""
    cnt = np.bincount(codes, minlength=C)
    cell_lw = np.bincount(codes, weights=lw, minlength=C) / np.maximum(cnt, 1)
    scale = max(1.0, float(np.max(np.abs(lw))))
    return bool(np.max(np.abs(lw - cell_lw[codes])) > 1e-8 * scale)


def _even_draws(S: int, m: int) -> np.ndarray:
    """m draw indices spaced evenly over S retained draws (the last one included)."""
    return (np.floor((np.arange(1, m + 1)) * S / m) - 1).astype(np.int64)


# --------------------------------------------------------------------------------------------
# the fit object


class _FittedMethods:
    """Methods of a fitted pseudo posterior synthesizer (summaries, synthesis, plots)."""

    @property
    def epsilon_(self) -> float:
        """epsilon = 2 Delta_alpha m of a release of ``m`` sets."""
        return 2.0 * self.delta_alpha_ * self.m

    def summary(self) -> pd.Series:
        """Key numbers of the fit (no per-record values; confidential: for the curator)."""
        self._check_fitted()
        return pd.Series(
            {
                "synthesizer": self.name,
                "n": self.n_,
                "delta_unweighted": self.delta_unweighted_,
                "target_lipschitz": self.target_lipschitz_,
                "delta_alpha": self.delta_alpha_,
                "delta_alpha_chain_min": float(np.min(self.delta_alpha_chains_)),
                "delta_alpha_chain_max": float(np.max(self.delta_alpha_chains_)),
                "c": self.c_,
                "g": self.g_,
                "refits": len(self.tuning_),
                "m": self.m,
                "epsilon": self.epsilon_,
                "mean_alpha": float(np.mean(self.alpha_)),
                "smallest_cell_weight": self.smallest_cell_weight_[0],
                "smallest_cell": self.smallest_cell_weight_[1],
                "stan_program": self.stan_program_,
                "max_rhat": self.convergence_["max_rhat"],
                "min_ess_bulk": self.convergence_["min_ess_bulk"],
                "divergences": self.convergence_["divergent"],
            }
        )

    def _program_name(self) -> str:
        """The Stan program (``surveysynth/synth/stan/<name>.stan``) this fit samples."""
        return self.program

    def stan_program(self) -> str:
        """The Stan program this configuration samples (FBS: the collapsed program with main
        effects)."""
        return self._program_name()

    # ------------------------------------------------------------------ synthesis
    def _draw_indices(self, m: int) -> np.ndarray:
        S = self.weighted_fit_.draws[next(iter(self.weighted_fit_.param_names))].shape[0]
        if m > S:
            raise ValueError(f"m={m} synthetic sets need m distinct posterior draws; the fit has {S}.")
        return _even_draws(S, m)

    def synthesize(self, m: int | None = None,
                   include_synthetic_weights: bool = False) -> list[pd.DataFrame]:
        """m synthetic data sets (DataFrames, confidential row order) from m evenly spaced draws
        of the released (final) fit; for the curator's diagnostics (seed 001 Figs. 2-3 with
        ``include_synthetic_weights=True``: the synthesized, unsmoothed weights as column
        ``<weights>_synthetic``). Publishing them costs like a release: use :meth:`release`.
        """
        self._check_fitted()
        m = self._m(m)
        rng = np.random.default_rng(self._rng_.integers(0, 2**63 - 1))
        return [self._synthesize_one(int(s), rng, include_synthetic_weights)
                for s in self._draw_indices(m)]

    def _synthesize(self, m: int, rng: np.random.Generator):
        if m != self.m:
            warnings.warn(
                f"releasing m={m} data sets from a fit tuned for m={self.m}: the privacy cost "
                f"of its new draws is 2 * Delta_alpha each (the account: privacy_record()).",
                UserWarning, stacklevel=3)
        idx = self._draw_indices(m)
        rng = np.random.default_rng(rng.integers(0, 2**63 - 1))
        frames = [self._synthesize_one(int(s), rng, False) for s in idx]
        prep = self._prep_
        spec: dict[str, Any] = {"weights": prep["weights_name"]}
        if prep.get("cluster"):
            # D2: the confidential design's ids (all stages), strata and fpc as collected
            spec.update(prep["cluster"]["design"]["spec"])
        elif prep["strata_release"]:
            spec["strata"] = prep["strata_release"]
        return frames, spec

    # ------------------------------------------------------------------ the budget account
    def _unprotected(self) -> bool:
        """Every risk weight is 1 (the no-weighting path, or g >= 1): no protection."""
        return bool(np.all(np.asarray(self.alpha_) >= 1.0))

    def _public_bound(self) -> tuple[float, str]:
        """The per-draw bound the record states and the account charges: the public target
        when the fit was tuned to one (the achieved bound is at most it: a fit above the
        target is never released), else the achieved bound rounded up to 3 significant digits
        (declared as published without budget)."""
        if self.target_lipschitz_ is not None:
            return float(self.target_lipschitz_), "target"
        return _round_up(float(self.delta_alpha_)), "achieved"

    def _release_charges(self, m: int, book: bool) -> list[dict[str, Any]]:
        """A release's charge: 2 Delta_alpha for each posterior draw not released before from
        this fit (the mechanism's output is the draw: synthetic values from an already released
        draw are post-processing); an unprotected fit is charged "none"."""
        idx = self._draw_indices(m)
        used = vars(self).setdefault("draws_released_", set())
        new = sorted(set(int(i) for i in idx) - used)
        if book or not new:
            used.update(new)
            return []
        entry: dict[str, Any] = {"step": "release", "m": m, "new_draws": len(new)}
        if self._unprotected():
            return [{**entry, "epsilon": None, "charge": "none"}]
        bound, _ = self._public_bound()
        return [{**entry, "delta_alpha": bound, "epsilon": 2.0 * bound * len(new)}]

    def _fit_entry(self) -> dict[str, Any]:
        """The fit's own use of the data: the unweighted, tuning and final fits release no draw;
        the risk weights they choose are not privatized (the guarantee says so)."""
        return {"step": "fit", "model": self.name, "epsilon": None, "charge": "outside",
                "what": "unweighted, tuning and final fits on the confidential data: no draw "
                        "of them is released by the fit; the risk weights and c they choose "
                        "are not privatized (the guarantee is given these weights)"}

    def _weights_collected(self) -> bool:
        """Unclustered fit whose log w is a function of the predictor cells: FBP fitted no pi
        model (fbp_nopi.stan), FBS no log w column (fbs_nolw.stan); the collected weights,
        rescaled to N, are released and none is synthesized (docs/pseudo_posterior.md)."""
        prep = getattr(self, "_prep_", None) or {}
        return (not prep.get("cluster")
                and not (prep.get("pi_free", True) and prep.get("lw_free", True)))

    def released_as_collected(self) -> list[str]:
        self._check_fitted()
        if self.kind != "partial":
            return []
        cl = self._prep_.get("cluster")
        if not cl:
            if self._weights_collected():
                # FBP without a pi model / FBS without the log w column: the weights (a
                # function of the released cells) as collected, rescaled to N
                return list(dict.fromkeys([*self._prep_["predictors"],
                                           self._prep_["weights_name"]]))
            return list(self._prep_["predictors"])
        # a clustered design (D2, D5): its ids, strata and fpc, and the weights (constant
        # within PSUs: PSU-level design information), rescaled to the public N
        cols = list(self._prep_["predictors"]) + cl["design"]["columns"]
        if not cl["weights_averaged"]:
            cols.append(self._prep_["weights_name"])
        return list(dict.fromkeys(cols))

    def _privacy_facts(self, m: int) -> dict[str, Any]:
        prep = self._prep_
        scale = ("outcome on the " + ("log" if self.log else "original") + " scale"
                 + {"FBS": ", weights as log w", "FBP": ", pi = 1/w on the weights' natural scale",
                    "PBP": ", contributions w_i alpha_i log p with w normalised to sum to n"}[self.name])
        notes = [f"{self.name}: {self.description}.",
                 f"full normalised log densities, {scale}."]
        if self.kind == "partial":
            notes.append(f"predictors {prep['predictors']} released as collected (public).")
        if prep.get("cluster"):
            cl = prep["cluster"]
            notes.append(
                f"clustered design: a random intercept per PSU ({cl['J']} PSUs) in the outcome "
                "model; the bound is computed from each record's density given its PSU's "
                "effect (a parameter of the released draw), and each synthetic set draws the "
                "PSU effects afresh from N(0, sigma_u) (post-processing of the draw); the "
                "design's ids, strata and fpc and the weights (constant within PSUs) are "
                "released as collected (docs/clustered_synthesis.md).")
        if self.name == "FBP" and not prep.get("cluster") and not prep.get("pi_free", True):
            notes.append("FBP: the weights are a function of the predictor cells, so selection "
                         "is not informative given the predictors: no pi model is fitted "
                         "(fbp_nopi.stan), the bound is that of the population model of the "
                         "outcome, and the weights are released as collected (a function of "
                         "the released predictors), rescaled to N (docs/pseudo_posterior.md).")
        elif self.name == "FBS" and self._weights_collected():
            notes.append("FBS: the weights are a function of the predictor cells, so log w "
                         "has no within-cell variation and, given the predictors, no "
                         "information about the outcome: only the outcome column of the model "
                         "is fitted (fbs_nolw.stan), the bound is that of the outcome's "
                         "density, and the weights are released as collected (a function of "
                         "the released predictors), rescaled to N (docs/pseudo_posterior.md).")
        elif self.name == "FBP" and not prep.get("cluster"):
            notes.append("FBP: weights are constant within predictor cells, so weighted cell "
                         "means equal unweighted cell means (seed 001 Section 2.4). Caution: "
                         "with cell-constant weights the standard errors of counts are too "
                         "small (they miss the sampling variability of the weights); use FBS "
                         "for counts (docs/pseudo_posterior.md).")
        pwb: list[dict[str, str]] = []
        tuned = self.target_lipschitz_ is not None
        if tuned:
            pwb.append({
                "item": "whether risk weighting was applied (the label: risk-weighted, or no "
                        "privacy protection when every alpha_i = 1)",
                "reason": "decided by comparing the unweighted fit's bound, computed from the "
                          "confidential data, with the public target; the label states the "
                          "outcome so that it cannot overstate the protection."})
        facts: dict[str, Any] = {
            "draws": int(prep["S_weighted"]), "bound_draws": "final_fit", "model": self.name,
            "target_lipschitz": self.target_lipschitz_,
            "draws_released": len(getattr(self, "draws_released_", ())),
            "convergence_gates": ", ".join(
                f"{k} {'<=' if k != 'ess_bulk' else '>='} {v:g}"
                for k, v in self.convergence_["gates"].items())}
        if prep.get("cluster") and prep["cluster"]["weights_averaged"]:
            pwb.append({
                "item": f"the released weights: each PSU's mean of the confidential weights "
                        f"(they varied within {prep['cluster']['weights_averaged']} of "
                        f"{prep['cluster']['J']} PSUs), rescaled to N",
                "reason": "clustered design (docs/clustered_synthesis.md, D5): the released "
                          "weights stay constant within PSUs, as the PSU random-intercept "
                          "model and the design's variance need; a PSU's mean weight is a "
                          "summary of its records' confidential weights, not covered by the "
                          "guarantee (which covers the synthesized outcome)."})
        if self._unprotected():
            facts["alpha_source"] = "none"
            facts["no_weighting"] = ("target_above_unweighted_bound" if tuned else "g_at_least_1")
            return {"family": "pseudo_posterior",
                    "mechanism": f"pseudo_posterior_{self.name.lower()}",
                    "facts": facts, "notes": notes, "published_without_budget": pwb}
        bound, how = self._public_bound()
        # also when the alpha = 1 branch was tuned away from: the public text states the rule
        facts["alpha_source"] = "lipschitz_tuned" if tuned else "lipschitz_fixed_c"
        facts["bound"] = how
        if how == "achieved":
            pwb.append({
                "item": "Delta_alpha, the achieved maximum of |alpha_i log p(y_i | theta_s)| over "
                        "the released fit's draws (rounded up to 3 significant digits), and "
                        "the epsilon computed from it",
                "reason": "no target was given (fixed c): the guarantee's epsilon is 2 "
                          "Delta_alpha per released draw, and Delta_alpha is computed from the "
                          "confidential data. Give target_lipschitz or target_epsilon to publish "
                          "a public bound instead."})
        return {
            "family": "pseudo_posterior",
            "mechanism": f"pseudo_posterior_{self.name.lower()}",
            "delta_alpha": bound,
            "facts": facts,
            "notes": notes,
            "published_without_budget": pwb,
        }

    def confidential_summary(self) -> dict[str, Any]:
        """Disclosure-review material (never public): key numbers, tuning path, diagnostics."""
        self._check_fitted()
        out: dict[str, Any] = {
            "fit_summary": self.summary().to_frame("value"),
            "tuning_path": self.tuning_,
            "mcmc_diagnostics": self.diagnostics_table_,
            "convergence": {k: v for k, v in self.convergence_.items() if k != "gates"},
            "gates": self.convergence_["gates"],
            "delta_alpha_per_chain": [float(v) for v in self.delta_alpha_chains_],
            "stan_seed_unweighted_fit": self.diagnostics_["unweighted"].get("seed"),
            "seeded": bool(self.seeded_),
            "random_state": None if self.random_state is None else str(self.random_state),
        }
        return out

    # ------------------------------------------------------------------ diagnostics plots
    def plot_risk(self, ax=None):
        """Violins of Delta_i (unweighted), Delta_alpha,i (weighted) and alpha_i (seed 001
        Fig. 1): confidential, for the curator (surveysynth.synth.risk_plots)."""
        from .risk_plots import plot_fit_risk

        return plot_fit_risk(self, ax)

    def plot_weights(self, index: int = 0):
        """Outcome vs confidential, synthesized and smoothed weights (seed 001 Figs. 2-3):
        confidential, for the curator (surveysynth.synth.risk_plots)."""
        from .risk_plots import plot_fit_weights

        if self._weights_collected():
            what = "no pi model" if self.name == "FBP" else "no model of log w"
            raise ValueError(
                f"{self.name} with weights that are a function of the predictor cells fits "
                f"{what} and releases the collected weights: there is no synthesized weight "
                "to plot (docs/pseudo_posterior.md).")
        if getattr(self, "_prep_", {}).get("cluster"):
            raise ValueError(
                f"{self.name} on a clustered design releases the collected weights (or their PSU "
                "means) and synthesizes none: there is no synthesized weight to plot "
                "(docs/clustered_synthesis.md).")

        return plot_fit_weights(self, index)


# --------------------------------------------------------------------------------------------
# the synthesizers


class _PseudoPosterior(_FittedMethods, Synthesizer):
    """Shared machinery; subclasses define the model (Stan data, inits, log-lik, synthesis).

    Settings (stored unchanged by ``__init__``, validated by ``fit``):

    * ``outcome``, ``predictors``, ``log``, ``effects`` ("cells" or "main"), ``coding``;
    * ``outcome_scale`` (default 1): a PUBLIC constant s; the model is fitted to y / s (log(y /
      s) with log=True) and synthetic values are multiplied back by s. The priors (coefficients
      N(0, 10^2), scales half-t / half-Cauchy) are fixed on the modelled scale and are part of
      the mechanism; an outcome whose magnitude makes them informative (raw api00 ~ 660 with
      log=False) is refused at fit (:meth:`_check_prior_scale`): choose log=True or an
      outcome_scale that brings the outcome to units (e.g. 100 for api00). s must not be
      computed from the confidential data (it would then be a data release outside the bound);
    * the privacy target: at most one of ``target_lipschitz`` (Delta_alpha) and
      ``target_epsilon`` (then Delta target = epsilon / (2 m)); without a target alpha uses
      ``c`` and ``g`` once; ``tol`` (default 0.10): the released bound is aimed into the
      one-sided band [(1 - tol) target, target] and never exceeds the target;
    * ``m`` (default 5) synthetic sets per release;
    * MCMC: ``chains``, ``draws``, ``warmup``, ``tune_draws``, ``tune_warmup``,
      ``refit_warmup``, ``max_refits``, ``stan_kwargs``, ``log_lik`` (where the per-record
      log-likelihood comes from: "auto", "stan" or "numpy"; ``loglik`` is its deprecated
      old name); release gates
      ``convergence`` (overrides of :data:`~surveysynth.synth.base.CONVERGENCE_DEFAULTS`) and
      ``allow_unconverged``;
    * ``min_cell_weight`` (default 1): tuning never takes c below the value at which every
      predictor cell (``effects="cells"``; every level of every predictor with
      ``effects="main"``) keeps this many records' worth of likelihood, sum_i alpha_i; a target
      that needs less is refused (:class:`~surveysynth.synth.tuning.CellWeightFloor`). 0 turns
      the check off;
    * ``tuning`` (default "default"): how the tuner proposes c. "default" (also named
      "refits"): today's rule (plug-in, then log-linear refits); "shortcut": the tuning shortcut
      (:func:`~surveysynth.synth.tuning_shortcut.shortcut_predict`: c predicted from the
      unweighted fit's draws by importance sampling and recalibrated by the real fits,
      today's rule when the corrected prediction misses a real fit by more than 1.5x; with
      it the final fit is run at the predicted c with no tuning fit before it,
      docs/pseudo_posterior.md "Direct final fits"). It stays opt-in
      here (Sequential's default since 2026-11-27): the evidence for the default is at
      Sequential's agency-scale sizes, and FBS/FBP/PBP's seeded releases and reproduced
      tables would all change. Either way the released bound is the final fit's fresh
      draws, never above the target;
    * ``population_size`` (public N the released weights sum to; default: the sum of the
      confidential weights, then listed in the manifest as published without budget);
    * ``random_state`` (None: secret OS entropy), ``progress``;
    * ``max_epsilon``: the declared total of the budget account (a privacy filter): a release
      whose new draws would take the account (every release and refit of this object) above
      it, or a release without protection, is refused (BudgetExceededError). None: no limit.
    """

    name = ""
    kind = "partial"
    program = ""
    description = ""
    default_coding = "intercept"
    #: the PSU random-intercept program for clustered designs (None: clusters not modelled)
    re_program: str | None = None
    #: every setting's allowed values (surveysynth.synth.params; cross-setting rules: _validate)
    _parameter_constraints = {
        "outcome": [str],
        "predictors": [None, Columns()],
        "log": [bool],
        "target_lipschitz": [None, Interval("number", 0, None, closed="neither")],
        "target_epsilon": [None, Interval("number", 0, None, closed="neither")],
        "effects": [Options("cells", "main")],
        "coding": [None, Options("intercept", "cellmeans")],
        "tune_draws": [None, Interval("integer", 1, None)],
        "tune_warmup": [None, Interval("integer", 1, None)],
        "refit_warmup": [None, Interval("integer", 1, None)],
        "c": [Interval("number", 0, None)],
        "g": [Interval("number")],
        "tol": [Interval("number", 0, 1, closed="neither")],
        "max_refits": [Interval("integer", 1, None)],
        "min_cell_weight": [Interval("number", 0, None)],
        "log_lik": [Options("auto", "stan", "numpy")],
        "pi_scale": [Options("natural", "sample")],
        "smoothed_weights": [Options("outcome", "model")],
        "tuning": [Options("default", "refits", "shortcut")],
        "outcome_scale": [Interval("number", 0, None, closed="neither")],
        **MCMC, **RELEASE,
    }
    _deprecated_parameters = {"loglik": "log_lik"}

    def __init__(
        self,
        outcome: str = "",
        predictors: list[str] | str | None = None,
        log: bool = True,
        target_lipschitz: float | None = None,
        target_epsilon: float | None = None,
        m: int = 5,
        effects: str = "cells",
        coding: str | None = None,
        chains: int = 4,
        draws: int = 1000,
        warmup: int = 1000,
        tune_draws: int | None = None,
        tune_warmup: int | None = None,
        refit_warmup: int | None = None,
        c: float = 1.0,
        g: float = 0.0,
        tol: float = 0.10,
        max_refits: int = 20,
        min_cell_weight: float = 1.0,
        population_size: float | None = None,
        log_lik: str = "auto",
        pi_scale: str = "sample",
        smoothed_weights: str = "model",
        convergence: dict | None = None,
        allow_unconverged: bool = False,
        random_state: Any = None,
        progress: bool = True,
        stan_kwargs: dict | None = None,
        max_epsilon: float | None = None,
        outcome_scale: float = 1.0,
        loglik: str = DEPRECATED,
        tuning: str = "default",
    ) -> None:
        self.outcome = outcome
        self.predictors = predictors
        self.log = log
        self.target_lipschitz = target_lipschitz
        self.target_epsilon = target_epsilon
        self.m = m
        self.effects = effects
        self.coding = coding
        self.chains = chains
        self.draws = draws
        self.warmup = warmup
        self.tune_draws = tune_draws
        self.tune_warmup = tune_warmup
        self.refit_warmup = refit_warmup
        self.c = c
        self.g = g
        self.tol = tol
        self.max_refits = max_refits
        self.min_cell_weight = min_cell_weight
        self.population_size = population_size
        self.log_lik = log_lik
        self.pi_scale = pi_scale
        self.smoothed_weights = smoothed_weights
        self.tuning = tuning
        self.convergence = convergence
        self.allow_unconverged = allow_unconverged
        self.random_state = random_state
        self.progress = progress
        self.stan_kwargs = stan_kwargs
        self.max_epsilon = max_epsilon
        self.outcome_scale = outcome_scale
        self.loglik = loglik

    def check_data(self, design: Any) -> None:
        """Pre-flight for ``surveysynth release --check`` (no MCMC): run the data checks that
        ``fit`` runs before its first MCMC run (outcome and predictor values, weights, cells and
        the prior-scale refusal of :meth:`_check_prior_scale`, so that a bad ``outcome_scale``
        or ``log`` is refused before any sampling). Raises ValueError; the object's state is
        left exactly as it was (nothing of the data is kept)."""
        self.check_params()
        state = dict(self.__dict__)
        try:
            self._cfg_ = self._validate()
            self._prepare(design)
        finally:
            self.__dict__.clear()
            self.__dict__.update(state)

    def _check_settings(self) -> None:
        self._validate()

    def _validate(self) -> dict[str, Any]:
        """The cross-setting rules (each setting alone is checked by the constraint table,
        :meth:`check_params`); returns the normalised settings used by the fit."""
        if not self.outcome:
            raise ValueError(f"outcome must be a column name, got {self.outcome!r}.")
        preds = self.predictors
        preds = [] if preds is None else as_list(preds, "predictors")  # also '~a+b'
        if self.outcome in preds:
            raise ValueError(f"outcome {self.outcome!r} is also listed in predictors; remove it.")
        # FBS's cell-means default applies to full cells; main effects always take the
        # intercept coding (there is no cell-means form of an additive model)
        coding = (self.coding if self.coding is not None else
                  self.default_coding if self.effects == "cells" else "intercept")
        if coding == "cellmeans" and self.effects != "cells":
            raise ValueError("coding='cellmeans' needs effects='cells'.")
        m = self._m(None)
        if self.target_lipschitz is not None and self.target_epsilon is not None:
            raise ValueError("give target_lipschitz or target_epsilon, not both.")
        target = self.target_lipschitz
        if self.target_epsilon is not None:
            target = float(self.target_epsilon) / (2.0 * m)
        return {"predictors": preds, "coding": coding, "target": None if target is None else float(target),
                "gates": dict(self.convergence or {})}

    # ------------------------------------------------------------------ data
    def _prepare(self, design: Any) -> dict:
        data = design.data
        missing = [c for c in [self.outcome, *self._cfg_['predictors']] if c not in data.columns]
        if missing:
            raise ValueError(
                f"{self.name}: columns {missing} are not in the design's data (columns: "
                f"{list(data.columns)[:10]}). Fix the outcome/predictors names."
            )
        y_raw = pd.to_numeric(data[self.outcome], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(y_raw)
        if bad.any():
            raise ValueError(
                f"outcome {self.outcome!r} has missing or non-numeric values at rows "
                f"{_first(bad)}; impute or drop them before synthesis (nothing is dropped "
                "silently)."
            )
        if self.log and (y_raw <= 0).any():
            raise ParameterError(
                f"outcome {self.outcome!r} must be > 0 with log=True; rows {_first(y_raw <= 0)} "
                f"are <= 0 (e.g. {y_raw[y_raw <= 0][:3].tolist()}). Fix: log=False, or shift "
                "the outcome to be positive.", "log")
        for p in self._cfg_['predictors']:
            na = data[p].isna().to_numpy()
            if na.any():
                raise ValueError(
                    f"predictor {p!r} has missing values at rows {_first(na)}; give them a "
                    "level (e.g. 'missing') or drop those records explicitly."
                )
        w = np.asarray(design.weights, dtype=float)
        check_weights(w, why=f"{self.name} models log w (or pi = 1/w).")
        cells = build_cells(data, self._cfg_['predictors'], self.effects, self._cfg_['coding'])
        groupings = weight_groupings(data, self._cfg_['predictors'], self.effects, cells)
        strata = design.strata_vars
        strata_release = None
        if (strata and self.kind == "partial" and self.name != "FBP"
                and set(strata) <= set(self._cfg_['predictors'])):
            # FBS: the synthetic weights vary within strata, and the stratified linearization
            # is the design's own. FBP: its smoothed weights are constant within predictor cells,
            # so a stratified linearization gives field totals almost no variance (measured
            # 0.14-0.48 x the sample's SE); released without strata, the single-stage
            # linearization carries the variability of the cell shares (1.5 x the sample's SE,
            # seed 000 Fig. 17's FBP/FBS ratio ~1.6). docs/pseudo_posterior.md.
            strata_release = list(strata)
        N = self._population(design)
        N_given = bool(self.population_size_given_)
        y_mod = y_raw / float(self.outcome_scale)   # exactly y_raw with the default 1.0
        y = np.log(y_mod) if self.log else y_mod
        self._check_prior_scale(y, cells.codes, cells.Xc.shape[0])
        cluster = (self._cluster_prep(design, data, y, w, cells, N)
                   if self.re_program else None)
        return {
            "cluster": cluster,
            "n": len(data),
            "y_raw": y_raw,
            "y": y,
            "w_raw": w,
            "cells": cells,
            "groupings": groupings,
            "predictors": list(self._cfg_['predictors']),
            "X_frame": data[self._cfg_['predictors']].reset_index(drop=True) if self._cfg_['predictors'] else None,
            "strata_release": strata_release,
            "weights_name": design.weights_var or "weight",
            "N": N,
            "N_given": N_given,
        }

    #: the prior SD of the regression coefficients on the modelled scale (all three programs)
    prior_coef_sd = 10.0
    #: refuse when the prior's pull on some cell mean exceeds this many standard errors
    prior_bias_max = 0.1

    def _check_prior_scale(self, y: np.ndarray, codes: np.ndarray, C: int) -> None:
        """Refuse an outcome whose magnitude makes the fixed coefficient prior N(0, 10^2)
        informative. The priors are part of the mechanism and are never rescaled from the data;
        instead, for each predictor cell c (n_c records, mean ybar_c, pooled within-cell SD s on
        the modelled scale) the normal-normal shrinkage of the cell mean towards 0,
        f_c = (s^2 / n_c) / (s^2 / n_c + 10^2), gives a prior bias f_c |ybar_c|; a bias above
        0.1 standard errors (s / sqrt(n_c)) in any cell is refused with a ValueError naming the
        outcome and the fixes. Measured: raw api00 on apistrat (log=False) gives a bias of ~30
        SEs and PBP's combined means were 11.9-43.4 against 662; log api00 gives < 0.01 SE.
        The check reads the confidential data only to refuse before any fit (nothing is
        released)."""
        cnt = np.bincount(codes, minlength=C).astype(float)
        ok = cnt > 0
        ybar = np.bincount(codes, weights=y, minlength=C)[ok] / cnt[ok]
        n = float(len(y))
        s2 = float(np.sum((y - (np.bincount(codes, weights=y, minlength=C)
                                / np.maximum(cnt, 1))[codes]) ** 2) / max(n - ok.sum(), 1.0))
        se2 = s2 / cnt[ok]
        bias_in_se = np.sqrt(se2) * np.abs(ybar) / (se2 + self.prior_coef_sd ** 2)
        worst = int(np.argmax(bias_in_se))
        if bias_in_se[worst] > self.prior_bias_max:
            mag = float(np.max(np.abs(ybar)))
            raise ValueError(
                f"{self.name}: outcome {self.outcome!r} on the modelled scale "
                f"({'log(y / outcome_scale)' if self.log else 'y / outcome_scale'}, "
                f"outcome_scale={self.outcome_scale!r}) has cell means up to {mag:.4g} and "
                f"within-cell SD {np.sqrt(s2):.4g}: the fixed priors (coefficients "
                f"N(0, {self.prior_coef_sd:g}^2), scales half-t/half-Cauchy) are informative at "
                f"this scale and would pull a cell mean {bias_in_se[worst]:.3g} standard errors "
                f"towards 0 (limit {self.prior_bias_max:g}), silently biasing the synthetic "
                "values. Fix: log=True (positive outcomes), or outcome_scale=<a public constant "
                "bringing the outcome to units, e.g. a round power of 10 near its typical "
                "magnitude>, not computed from the confidential data.")

    def _cluster_prep(self, design: Any, data: pd.DataFrame, y: np.ndarray, w: np.ndarray,
                      cells: Any, N: float) -> dict | None:
        """The PSU structure of a clustered design (issue 36, D1-D5), or None when the design
        has no real clusters (no ids, or one record per PSU): then the program and the code
        path are those of an unclustered design, byte for byte.

        D1: the cluster is the design's first-stage unit as the design itself codes it (unique
        within strata, R's ultimate cluster); later stages get no random effect (R's variance
        without later-stage fpc is driven by PSU totals). D5: weights constant within PSUs are
        PSU-level design information, released as collected (rescaled to the public N) beside
        the ids and fpc, and the outcome model conditions on log w. Weights that vary within
        PSUs (calibration, nonresponse adjustment) are replaced by their PSU means (D5: a
        weight is averaged within its PSU, the total rescaled to N): a PSU-level summary of
        the confidential weights, released outside the budget and listed as such."""
        carried = collected_design(design)
        if not carried["ids"]:
            return None
        psu_all = np.asarray(design.stages[0].cluster)[np.asarray(design.in_subset)]
        labels, psu = np.unique(psu_all, return_inverse=True)
        J = len(labels)
        n = len(psu)
        if J == n or J < 2:
            return None
        lo = np.full(J, np.inf)
        hi = np.full(J, -np.inf)
        np.minimum.at(lo, psu, w)
        np.maximum.at(hi, psu, w)
        varying = hi - lo > 1e-9 * hi
        n_j = np.bincount(psu, minlength=J)
        w_psu = np.bincount(psu, weights=w, minlength=J) / n_j
        if varying.any():
            w = w_psu[psu]      # D5: the PSU mean weight (the total is unchanged)
        lw = np.log(w)
        codes = cells.codes
        C = cells.Xc.shape[0]
        # log w (= -log pi + const) beyond the predictor cells: a covariate (FBS) and an
        # informative pi model (FBP); a function of the cells (apiclus1: constant) is neither
        free = _log_w_beyond_cells(lw, codes, C)
        lw_psu = np.zeros(J)
        lw_psu[psu] = lw
        Zpsu = self._psu_covariates(cells, psu, J, lw_psu if free and self.name == "FBS" else None)
        gkey = codes.astype(np.int64) * J + psu
        gvals, group = np.unique(gkey, return_inverse=True)
        return {
            "weights_averaged": int(varying.sum()),
            "w_model": w,
            "centred": self._centred(y, codes, C, psu, J),
            "design": carried,
            "frame": data[carried["columns"]].reset_index(drop=True),
            "psu": psu, "J": J, "psu_labels": labels,
            "group": group, "G": len(gvals),
            "g_cell": (gvals // J).astype(np.int64), "g_psu": (gvals % J).astype(np.int64),
            "lw_free": free,
            "Zpsu": Zpsu,
            "w_release": w * (N / w.sum()),
        }

    @staticmethod
    def _psu_covariates(cells: Any, psu: np.ndarray, J: int,
                        lw_psu: np.ndarray | None) -> np.ndarray:
        """PSU-level covariates of the outcome model, centred at their record means: FBS's log
        weight (``lw_psu``; FBP models pi instead) and the PSU's shares of the predictor cells
        but the first (contextual effects: the random-intercept model takes u independent of
        x, which fails when a cell gathers in low- or high-level PSUs, Mundlak 1978; measured
        on apiclus2, whose high schools sit in districts with low effects: without the shares
        the synthetic high-school mean was 705 against the confidential 598). Both are public
        in the release (the weights and the predictors are released with the PSU ids). Shares
        only with at least ten PSUs per PSU-level covariate: their coefficients are informed by
        the PSUs alone, and their posterior spread enters every synthetic set (measured on
        apiclus1, 15 PSUs, two shares: combined SE up to 3.4 x the confidential one, against
        1.1-1.8 x without). A column that adds no rank to the cells' design is dropped."""
        codes = cells.codes
        C = cells.Xc.shape[0]
        cols = [] if lw_psu is None else [lw_psu]
        if C > 1 and len(cols) + C - 1 <= J // 10:
            cnt = np.zeros((J, C))
            np.add.at(cnt, (psu, codes), 1.0)
            share = cnt / cnt.sum(axis=1, keepdims=True)
            cols += [share[:, c] for c in range(1, C)]
        X = cells.Xc[codes]
        keep = []
        for col in cols:
            z = col - col[psu].mean()
            trial = np.column_stack([X, *[k[psu] for k in keep], z[psu]])
            tol = 1e-8 * max(1.0, float(np.abs(trial).max()))
            if np.linalg.matrix_rank(trial, tol=tol) == trial.shape[1]:
                keep.append(z)
        return np.column_stack(keep) if keep else np.zeros((J, 0))

    @staticmethod
    def _centred(y: np.ndarray, codes: np.ndarray, C: int, psu: np.ndarray, J: int) -> bool:
        """The parametrization of the PSU effects (sampling geometry only; the posterior is
        the same): centred when the data inform a typical PSU's effect more than its prior
        does, n_j sigma_u^2 / sigma^2 > 1 at the median PSU size with one-way ANOVA estimates
        of sigma_u^2 and sigma^2 on the residuals from the cell means; else non-centred (D3's
        default). Centred here is hierarchical centring (the PSU's level z, u = z - pc'Xc b:
        see fbs_re.stan). Measured on apiclus2 (n_j ~ 3, ratio 7.6): non-centred fbp_re at
        4 x 1000 draws gave R-hat 1.008-1.016 and bulk ESS 409-526, centred R-hat <= 1.007 and
        ESS >= 496 (docs/clustered_synthesis.md)."""
        cnt_c = np.bincount(codes, minlength=C)
        r = y - (np.bincount(codes, weights=y, minlength=C) / np.maximum(cnt_c, 1))[codes]
        n_j = np.bincount(psu, minlength=J)
        r_j = np.bincount(psu, weights=r, minlength=J) / n_j
        s2 = float(np.sum((r - r_j[psu]) ** 2) / max(len(y) - J, 1))
        su2 = float(np.var(r_j, ddof=1)) - s2 * float(np.mean(1.0 / n_j))
        return bool(s2 > 0 and su2 > 0 and float(np.median(n_j)) * su2 / s2 > 1.0)

    # ------------------------------------------------------------------ fitting
    def _fit(self, design: Any, rng: np.random.Generator) -> None:
        """Fit unweighted, compute bounds and alpha, tune c on tuning fits, then a FINAL
        weighted fit with a fresh seed whose draws give the reported bound.

        Why a final fit: a max over draws is noisy (12% relative SD at n = 1,000), so stopping
        at the first tuning fit that lands near the target reports a lucky, downward-selected
        draw set. The reported Delta_alpha is computed on the final fit's draws, which played
        no part in choosing c. The final fit aims below the target by a margin set from the
        measured spread of the bound (1.645 x the relative SD of the per-chain maxima of the
        last tuning fit, at least tol / 2): a final fit above the target is never released
        (c is lowered and the final fit repeated, each a fresh draw set); one below the band
        [(1 - tol) target, target] is released as it is (a stronger guarantee than asked) with
        a note. A target above the unweighted bound (by more than tol) needs no weighting: a
        final fit at alpha = 1 (c_ None), tuned only if its fresh bound exceeds the target
        (:meth:`_weighted_fit`; Sequential's steps do the same).
        """
        cfg = self._validate()
        self._cfg_ = cfg
        target = cfg["target"]
        progress = bool(self.progress)
        stan_seed = child_seed(rng)
        prep = self._prepare(design)
        # the data are used from here on: the account lists this fit (charged "outside": no
        # draw of these fits is released; the guarantee states the weights as not privatized)
        self._spend(self._fit_entry())
        self._prep_ = prep
        self.n_ = int(prep["n"])
        self.target_lipschitz_ = target
        self.stan_program_ = self._program_name()
        program = load_program(self.stan_program_)
        n = prep["n"]
        timings: dict[str, float] = {}
        mode = "numpy" if self._param("log_lik") == "auto" else self._param("log_lik")
        # numpy from the parameter draws: the same formulas (tested equal to Stan's generated
        # quantities), without pystan parsing n x S values per fit.
        prep["loglik_mode"] = mode
        g = float(self.g)

        def run(alpha, draws, warmup, init, label, seed):
            return run_fit(program, self._stan_data(prep, alpha, save_log_lik=(mode == "stan")),
                           label=f"{self.name} {label}", chains=int(self.chains), draws=draws,
                           warmup=warmup, seed=seed, progress=progress, init=init,
                           stan_kwargs=self.stan_kwargs)

        def bounds_of(res: StanDraws) -> np.ndarray:
            """max_s |record contribution| per record (before alpha), all draws."""
            if mode == "stan":
                r = np.abs(res["log_lik"]).max(axis=0)
            else:
                r = self._record_absmax(prep, res)
            return r * self._contribution_scale(prep)

        # 1. unweighted fit
        init0 = self._inits(prep, np.random.default_rng(stan_seed))
        t0 = time.perf_counter()
        unw = run(np.ones(n), int(self.draws), int(self.warmup), init0, "unweighted", stan_seed)
        timings["unweighted_fit"] = time.perf_counter() - t0
        delta = bounds_of(unw)
        self.unweighted_fit_ = unw
        self.delta_ = delta
        self.delta_unweighted_ = float(np.max(np.where(np.isfinite(delta), delta, -np.inf)))
        refit_warmup = (self.refit_warmup if self.refit_warmup is not None
                        else max(200, int(self.warmup) // 4))
        fits = WeightedFits(run, bounds_of, name=self.name, base=delta, g=g, rng=rng,
                            draws=int(self.draws), warmup=refit_warmup,
                            tune_draws=int(self.tune_draws or self.draws),
                            tune_warmup=int(self.tune_warmup or refit_warmup),
                            init=unw.last_inits(), progress=progress, target=target)
        chain_maxima = fits.chain_maxima

        def unweighted_loglik(s: slice) -> np.ndarray:
            """The unweighted fit's record contributions (draws s) for a ``predict`` step."""
            ll = (unw["log_lik"][s] if mode == "stan" else self._record_loglik(prep, unw, s))
            return ll * self._contribution_scale(prep)

        t0 = time.perf_counter()
        c_best, (da, alpha, per, res, _) = self._weighted_fit(
            fits.evaluate, target, delta, chain_maxima, loglik=unweighted_loglik,
            loglik_draws=unw.chains * unw.draws_per_chain)
        timings["tuning_and_weighted_fit"] = time.perf_counter() - t0
        self.c_ = None if c_best is None else float(c_best)
        self.g_ = g
        self.alpha_ = alpha
        self.smallest_cell_weight_ = smallest_group_weight(
            prep["groupings"], alpha * self._contribution_scale(prep))
        if (target is None and self.smallest_cell_weight_[0] < float(self.min_cell_weight)
                and c_best is not None):
            warnings.warn(
                f"{self.name}: at the given c = {c_best:.4g} the cell "
                f"{self.smallest_cell_weight_[1]} keeps {self.smallest_cell_weight_[0]:.3g} "
                f"records' worth of likelihood (< min_cell_weight = {self.min_cell_weight:g}): "
                "its synthetic values come mostly from the prior. A larger c, or a target "
                "(tuning respects the floor).", UserWarning, stacklevel=3)
        self.delta_alpha_i_ = per
        self.delta_alpha_ = da
        self.delta_alpha_chains_ = chain_maxima(res, alpha)
        self.weighted_fit_ = res
        self.tuning_ = pd.DataFrame(fits.rows)
        prep["S_weighted"] = res.chains * res.draws_per_chain
        self.diagnostics_ = {
            "unweighted": {k: v for k, v in unw.summary.items()},
            "weighted": {k: v for k, v in res.summary.items()},
        }
        self.diagnostics_table_ = res.diagnostics
        self.convergence_ = convergence_verdict(res.summary, res.diagnostics, cfg["gates"])
        self.timings_ = timings
        if float(np.mean(alpha)) < 0.2:
            warnings.warn(
                f"{self.name}: the risk weights keep little of the likelihood (mean alpha "
                f"{float(np.mean(alpha)):.3f}): the weighted posterior is close "
                "to the prior and synthetic values can be far from the data (check the fidelity "
                "flags of the confidential report). A larger target, more data per cell, or "
                "fewer cells (effects='main') keep more of the data.", UserWarning, stacklevel=3)
        if target is not None and da < (1 - float(self.tol)) * target:
            warnings.warn(
                f"{self.name}: the final fit's bound Delta_alpha = {da:.4f} is below the band "
                f"[{(1 - float(self.tol)) * target:.4f}, {target:.4f}]: released as it is (a "
                "stronger guarantee than asked; utility somewhat lower). The bound of a single "
                "draw set is noisy at this sample size (see docs/pseudo_posterior.md).",
                UserWarning, stacklevel=3)

    #: the tuner's ``predict`` step (tuning.default_predict: today's rule); a tuning shortcut
    #: plugs in here (surveysynth.synth.tuning.Proposal says what it sees)
    tuning_predict: Predictor = staticmethod(default_predict)

    def _predictor(self) -> Predictor:
        """The ``predict`` step the ``tuning`` setting selects: the class's ``tuning_predict``
        ("default") or the tuning shortcut ("shortcut")."""
        return (shortcut_predict if getattr(self, "tuning", "default") == "shortcut"
                else type(self).tuning_predict)

    def _tuner_settings(self) -> TunerSettings:
        """The tuner's settings: name, tol, g, max_refits and the cell-weight floor from the
        prepared cells (``min_cell_weight`` records' worth in every group)."""
        prep = getattr(self, "_prep_", None)
        return TunerSettings(
            name=self.name, tol=float(self.tol), g=float(self.g), max_refits=int(self.max_refits),
            min_cell_weight=float(self.min_cell_weight),
            groupings=tuple([] if prep is None else prep.get("groupings", [])),
            scale=1.0 if prep is None else self._contribution_scale(prep),
            direct_final=getattr(self, "tuning", "default") == "shortcut")

    def _weighted_fit(self, evaluate, target: float | None, delta: np.ndarray, chain_maxima,
                      loglik=None, loglik_draws: int | None = None):
        """The released weighted fit: ``(c, (Delta_alpha, alpha, per_record, res, R))`` by the
        one tuner, :func:`surveysynth.synth.tuning.fit_to_target` (never above the target);
        ``loglik`` / ``loglik_draws``: the unweighted fit's record contributions for the
        ``tuning_predict`` step."""
        report: dict = {}
        try:
            return fit_to_target(evaluate, target, delta, chain_maxima, self._tuner_settings(),
                                 c=float(self.c), predict=self._predictor(),
                                 loglik=loglik, loglik_draws=loglik_draws, report=report,
                                 annotate=getattr(getattr(evaluate, "__self__", None),
                                                  "annotate", None))
        finally:
            self._keep_tuning_report(report)

    def _tune(self, evaluate, target: float, delta: np.ndarray, chain_maxima):
        """Tune c to the target and run the final fit (:func:`surveysynth.synth.tuning.tune`)."""
        report: dict = {}
        try:
            return tune(evaluate, target, delta, chain_maxima, self._tuner_settings(),
                        predict=self._predictor(), report=report)
        finally:
            self._keep_tuning_report(report)

    def _keep_tuning_report(self, report: dict) -> None:
        if "cell_weight_floor" in report:
            self.cell_weight_floor_ = report["cell_weight_floor"]
        if "bound_spread" in report:
            self.bound_spread_ = report["bound_spread"]

    def _cell_floor(self, path: TuningPath) -> CellWeightFloor:
        """The lower limit on c from ``min_cell_weight`` (:class:`CellWeightFloor`)."""
        return self._tuner_settings().floor(path)

    # ------------------------------------------------------------------ PSU random effects
    def _re_common_data(self, prep: dict, alpha: np.ndarray, save_log_lik: bool,
                        cols: list[np.ndarray]) -> tuple[dict, tuple]:
        """Stan data shared by fbs_re/fbp_re: cells, PSUs, the (cell x PSU) groups and their
        exact alpha-weighted statistics of ``cols`` (given u a group's records share a mean)."""
        cells, cl = prep["cells"], prep["cluster"]
        stats = cell_moments(cl["group"], cl["G"], alpha, cols)
        n = prep["n"]
        return dict(
            n=n, K=cells.Xc.shape[1], C=cells.Xc.shape[0], Xc=cells.Xc, J=cl["J"], G=cl["G"],
            centred=int(cl["centred"]),
            pc=np.bincount(cells.codes, minlength=cells.Xc.shape[0]) / n,
            g_cell=cl["g_cell"] + 1, g_psu=cl["g_psu"] + 1, w=stats[0],
            save_log_lik=int(save_log_lik),
            cell=(cells.codes + 1) if save_log_lik else np.zeros(0, dtype=int),
            psu=(cl["psu"] + 1) if save_log_lik else np.zeros(0, dtype=int),
        ), stats

    @staticmethod
    def _re_start(prep: dict, resid: np.ndarray, cell_means: np.ndarray,
                  rng: np.random.Generator) -> tuple:
        """Data-based starts for (within SD, sigma_u, z) from a residual: PSU means of the
        residual for u (z = u + pc' cell_means centred, u / sigma_u non-centred), their SD for
        sigma_u (at least a tenth of the within SD)."""
        cl = prep["cluster"]
        J, psu = cl["J"], cl["psu"]
        cnt = np.bincount(psu, minlength=J)
        r_j = np.bincount(psu, weights=resid, minlength=J) / np.maximum(cnt, 1)
        within = max(float(np.sqrt(np.mean((resid - r_j[psu]) ** 2))), 1e-3)
        su = max(float(np.std(r_j)), 0.1 * within)
        z = np.clip(r_j / su, -3, 3) + 0.1 * rng.standard_normal(J)
        if cl["centred"]:
            codes = prep["cells"].codes
            pc = np.bincount(codes, minlength=len(cell_means)) / len(codes)
            z = z * su + float(pc @ cell_means)
        return within, su, [z.tolist(),
                            float(su * np.exp(0.05 * rng.standard_normal()))]

    @staticmethod
    def _psu_level(cl: dict, res: StanDraws, s: Any, u: np.ndarray) -> np.ndarray:
        """(S, J) PSU levels u_j + Zpsu_j gamma of draws s given the effects u (S, J)."""
        if not cl["Zpsu"].shape[1]:
            return u
        return u + res["gamma"][s] @ cl["Zpsu"].T

    @staticmethod
    def _fresh_u(res: StanDraws, s: int, J: int, rng: np.random.Generator) -> np.ndarray:
        """D3: u*_j ~ N(0, sigma_u^(s)) drawn AFRESH for the set from draw s, never the
        posterior u_j (those would publish each cluster's mean)."""
        return float(res["sigma_u"][s]) * rng.standard_normal(J)

    # ------------------------------------------------------------------ model hooks
    def _contribution_scale(self, prep: dict) -> np.ndarray | float:
        return 1.0

    def _stan_data(self, prep: dict, alpha: np.ndarray, save_log_lik: bool) -> dict:
        raise NotImplementedError

    def _inits(self, prep: dict, rng: np.random.Generator) -> list[dict]:
        raise NotImplementedError

    def _record_loglik(self, prep: dict, res: StanDraws, s: slice) -> np.ndarray:
        raise NotImplementedError

    def _record_absmax(self, prep: dict, res: StanDraws, chunk: int = 200) -> np.ndarray:
        """max_s |log p_i(theta_s)| computed in numpy from the parameter draws, in chunks."""
        S = res[next(iter(res.param_names))].shape[0]
        return absmax_over_draws(lambda s: self._record_loglik(prep, res, s), S, prep["n"], chunk)

    def _synthesize_one(self, s: int, rng: np.random.Generator,
                        include_synthetic_weights: bool) -> pd.DataFrame:
        raise NotImplementedError

    def _frame(self, prep: dict, y_star: np.ndarray, w_star: np.ndarray,
               w_synth: np.ndarray | None, X_frame: pd.DataFrame | None) -> pd.DataFrame:
        out = X_frame.copy() if X_frame is not None else pd.DataFrame(index=range(len(y_star)))
        out[self.outcome] = (np.exp(y_star) if self.log else y_star) * float(self.outcome_scale)
        out[prep["weights_name"]] = w_star
        cl = prep.get("cluster")
        if cl:   # D2: the design columns as collected (confidential row order, as the rest)
            for c in cl["design"]["columns"]:
                if c not in out.columns:
                    out[c] = cl["frame"][c].to_numpy()
        if w_synth is not None:
            out[f"{prep['weights_name']}_synthetic"] = w_synth
        return out.reset_index(drop=True)

    @staticmethod
    def _ls_cells(Xc: np.ndarray, means: np.ndarray, w: np.ndarray) -> np.ndarray:
        ok = w > 0
        coef, *_ = np.linalg.lstsq(Xc[ok], means[ok], rcond=None)
        return coef


class FBS(_PseudoPosterior):
    """Fully Bayes model for the observed sample (partial synthesis; seed 001 Section 2.1).

    ``FBS(outcome="salary", predictors=["field", "gender"], log=True).fit(design,
    target_lipschitz=3.4, m=10, seed=1).release()``. (log y, log w) ~ MVN_2(x B, Sigma) with
    the seed 000 Appendix C priors: columns of B ~ MVN(0, diag(s) Omega diag(s)) with one shared
    Omega ~ LKJ(6) and separate half-t(3, 0, 10) scales s_y, s_w; Sigma = diag(tau) Omega_S
    diag(tau), Omega_S ~ LKJ(6), tau ~ half-t(3, 0, 10). Smoothed weights
    w* = exp(x b_w + rho (ly* - x b_y) tau_w / tau_y), rescaled to sum to N.
    When log w is a function of the predictor cells (weights constant within cells, e.g. strata
    that are predictors) the log w column is dropped (``fbs_nolw.stan``, the outcome column with
    its priors): its within-cell variance is 0 and, given x, it says nothing about y; the
    collected weights are released, rescaled to N.
    Constructor options: see ``_PseudoPosterior`` (chains, draws, warmup, tune_draws, c, g, tol,
    max_refits, population_size, effects, log_lik, progress, stan_kwargs).

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
    >>> syn = ss.synth.FBS("salary", ["field"], log=True, m=2, chains=4, draws=500,
    ...                    warmup=500, random_state=1, progress=False)
    >>> rel = syn.fit(d).release()
    >>> rel.kind, rel.m
    ('partial', 2)
    """

    name = "FBS"
    kind = "partial"
    program = "fbs"
    re_program = "fbs_re"
    default_coding = "cellmeans"
    description = ("bivariate normal model of (outcome, log weight) in the observed sample; "
                   "synthetic outcome, smoothed weights, predictors unsynthesized")

    def _program_name(self) -> str:
        """``fbs`` (B sampled jointly with its scales) for full cells; ``fbs_collapsed`` (the
        same posterior with B integrated out and drawn from its Gaussian conditional) for main
        effects. With an intercept and small contrasts each contrast's own half-t scale is
        informed by one coefficient, and the joint posterior of a near-zero contrast and its
        scale is a funnel: on the SDR design at Delta_alpha = 1.8 fbs.stan gave R-hat 1.09-1.39,
        bulk ESS 5-27 and 19-123 divergent transitions of 1000, fbs_collapsed.stan R-hat <= 1.03,
        ESS >= 680 and none (docs/pseudo_posterior.md). Full cells keep fbs.stan, with which
        every study of record was run and which converges there (cell means far from zero)."""
        prep = getattr(self, "_prep_", None)
        if prep is not None and prep.get("cluster"):
            return self.re_program
        if prep is not None and not prep.get("lw_free", True):
            return self.nolw_program
        return "fbs_collapsed" if self.effects == "main" else "fbs"

    nolw_program = "fbs_nolw"

    def _prepare(self, design: Any) -> dict:
        """The shared preparation plus ``lw_free`` (unclustered designs): whether log w varies
        within a predictor cell. When it does not (weights constant within cells, e.g. strata
        that are predictors) the log w column is dropped (fbs_nolw.stan), as fbs_re.stan does:
        its within-cell variance is 0 (tau_w -> 0, an unbounded density; measured on apistrat
        by stype: R-hat 4.0) and, given x, log w says nothing about y. The released weights
        are then the collected ones (a function of the released predictors), rescaled to N."""
        prep = super()._prepare(design)
        if not prep.get("cluster"):
            cells = prep["cells"]
            prep["lw_free"] = _log_w_beyond_cells(np.log(prep["w_raw"]), cells.codes,
                                                  cells.Xc.shape[0])
        return prep

    def _Z(self, prep):
        return np.c_[prep["y"], np.log(prep["w_raw"])]

    def _stan_data(self, prep, alpha, save_log_lik):
        if prep.get("cluster"):
            y = prep["y"]
            d, (_, means, cross) = self._re_common_data(prep, alpha, save_log_lik, [y])
            Zpsu = prep["cluster"]["Zpsu"]
            return dict(d, P=Zpsu.shape[1], Zpsu=Zpsu, ybar=means[0], S=cross[(0, 0)],
                        y=y if save_log_lik else np.zeros(0))
        cells = prep["cells"]
        if not prep.get("lw_free", True):   # fbs_nolw.stan: the outcome column alone
            C = cells.Xc.shape[0]
            w, means, cross = cell_moments(cells.codes, C, alpha, [prep["y"]])
            return dict(
                n=prep["n"], K=cells.Xc.shape[1], C=C, Xc=cells.Xc, w=w, ybar=means[0],
                Syy=cross[(0, 0)], save_log_lik=int(save_log_lik),
                cell=(cells.codes + 1) if save_log_lik else np.zeros(0, dtype=int),
                y=prep["y"] if save_log_lik else np.zeros(0))
        Z = self._Z(prep)
        C = cells.Xc.shape[0]
        w, means, cross = cell_moments(cells.codes, C, alpha, [Z[:, 0], Z[:, 1]])
        n = prep["n"]
        return dict(
            n=n, K=cells.Xc.shape[1], C=C, Xc=cells.Xc, w=w, zbar=np.c_[means[0], means[1]],
            S11=cross[(0, 0)], S12=cross[(0, 1)], S22=cross[(1, 1)],
            save_log_lik=int(save_log_lik),
            cell=(cells.codes + 1) if save_log_lik else np.zeros(0, dtype=int),
            Z=Z if save_log_lik else np.zeros((0, 2)),
        )

    def _inits(self, prep, rng):
        if prep.get("cluster"):
            return self._re_inits(prep, rng)
        cells = prep["cells"]
        if not prep.get("lw_free", True):   # fbs_nolw.stan
            C, K = cells.Xc.shape
            y = prep["y"]
            w, means, cross = cell_moments(cells.codes, C, np.ones(prep["n"]), [y])
            b = self._ls_cells(cells.Xc, means[0], w)
            tau = max(float(np.sqrt(cross[(0, 0)].sum() / prep["n"])), 1e-3)
            return [dict(b=(b + 0.1 * tau * rng.standard_normal(K)
                            / np.sqrt(max(w.mean(), 1))).tolist(),
                         lb=np.zeros(K * (K - 1) // 2).tolist(), s_y=(np.abs(b) + 0.5).tolist(),
                         tau=float(tau * np.exp(0.05 * rng.standard_normal())))
                    for _ in range(self.chains)]
        Z = self._Z(prep)
        C, K = cells.Xc.shape
        w, means, cross = cell_moments(cells.codes, C, np.ones(prep["n"]), [Z[:, 0], Z[:, 1]])
        B = self._ls_cells(cells.Xc, np.c_[means[0], means[1]], w)
        tau = np.sqrt(np.array([cross[(0, 0)].sum(), cross[(1, 1)].sum()]) / prep["n"])
        tau = np.maximum(tau, 1e-3)
        out = []
        for _ in range(self.chains):
            Bj = B + 0.1 * tau * rng.standard_normal(B.shape) / np.sqrt(np.maximum(w.mean(), 1))
            # lb = 0 and rs = 0 are identity correlation factors (see fbs.stan); the collapsed
            # program has no B parameter (it is drawn in generated quantities)
            d = {"B": Bj.tolist()} if self._program_name() == "fbs" else {}
            out.append(dict(d, lb=np.zeros(K * (K - 1) // 2).tolist(),
                            s_y=(np.abs(B[:, 0]) + 0.5).tolist(),
                            s_w=(np.abs(B[:, 1]) + 0.5).tolist(),
                            rs=0.0,
                            tau=(tau * np.exp(0.05 * rng.standard_normal(2))).tolist()))
        return out

    def _re_inits(self, prep, rng):
        cells, cl = prep["cells"], prep["cluster"]
        y = prep["y"]
        C, K = cells.Xc.shape
        w, means, _ = cell_moments(cells.codes, C, np.ones(prep["n"]), [y])
        b = self._ls_cells(cells.Xc, means[0], w)
        out = []
        for _ in range(self.chains):
            tau, su, (z, su_j) = self._re_start(prep, y - (cells.Xc @ b)[cells.codes],
                                                cells.Xc @ b, rng)
            jitter = 0.1 * tau * rng.standard_normal(K) / np.sqrt(max(w.mean(), 1))
            d = dict(b=(b + jitter).tolist(),
                     lb=np.zeros(K * (K - 1) // 2).tolist(), s_y=(np.abs(b) + 0.5).tolist(),
                     tau=float(tau * np.exp(0.05 * rng.standard_normal())), sigma_u=su_j, z=z)
            if cl["Zpsu"].shape[1]:
                d["gamma"] = [0.0] * cl["Zpsu"].shape[1]
            out.append(d)
        return out

    def _re_mean(self, prep, res, s, u):
        """(S, n) means given the PSU effects u (S, J): x b + Zpsu_j gamma + u_j."""
        cells, cl = prep["cells"], prep["cluster"]
        a = self._psu_level(cl, res, s, u)
        return (res["b"][s] @ cells.Xc.T)[:, cells.codes] + a[:, cl["psu"]]

    def _record_loglik(self, prep, res, s):
        if prep.get("cluster"):
            # D4: the CONDITIONAL density of y_i given its PSU's u_j (as fbs_re.stan's log_lik)
            m = self._re_mean(prep, res, s, res["u"][s])
            tau = res["tau"][s][:, None]
            return -0.5 * _LOG2PI - np.log(tau) - 0.5 * ((prep["y"][None] - m) / tau) ** 2
        cells = prep["cells"]
        if not prep.get("lw_free", True):   # fbs_nolw.stan's log_lik
            m = (res["b"][s] @ cells.Xc.T)[:, cells.codes]
            tau = res["tau"][s][:, None]
            return -0.5 * _LOG2PI - np.log(tau) - 0.5 * ((prep["y"][None] - m) / tau) ** 2
        Z = self._Z(prep)
        B = res["B"][s]  # (S, K, 2)
        tau = res["tau"][s]
        rho = res["rho"][s]
        M = np.einsum("ck,skj->scj", cells.Xc, B)[:, cells.codes]  # (S, n, 2)
        u1 = (Z[None, :, 0] - M[..., 0]) / tau[:, 0:1]
        u2 = (Z[None, :, 1] - M[..., 1]) / tau[:, 1:2]
        omr2 = (1 - rho**2)[:, None]
        const = (-_LOG2PI - np.log(tau[:, 0]) - np.log(tau[:, 1]) - 0.5 * np.log(1 - rho**2))
        return const[:, None] - (u1**2 - 2 * rho[:, None] * u1 * u2 + u2**2) / (2 * omr2)

    def _synthesize_one(self, s, rng, include_synthetic_weights):
        prep = self._prep_
        cells = prep["cells"]
        res = self.weighted_fit_
        if prep.get("cluster"):
            cl = prep["cluster"]
            u_star = self._fresh_u(res, s, cl["J"], rng)
            m = self._re_mean(prep, res, slice(s, s + 1), u_star[None])[0]
            ly = m + float(res["tau"][s]) * rng.standard_normal(prep["n"])
            return self._frame(prep, ly, cl["w_release"], None, prep["X_frame"])
        if not prep.get("lw_free", True):
            # no log w column: ly* from the outcome model; the weights are the collected ones,
            # a function of the released predictor cells, rescaled to N (nothing synthesized)
            m = (cells.Xc @ res["b"][s])[cells.codes]
            ly = m + float(res["tau"][s]) * rng.standard_normal(prep["n"])
            w_s = prep["w_raw"] * (prep["N"] / prep["w_raw"].sum())
            return self._frame(prep, ly, w_s, None, prep["X_frame"])
        B, tau, rho = res["B"][s], res["tau"][s], float(res["rho"][s])
        M = (cells.Xc @ B)[cells.codes]  # (n, 2)
        n = prep["n"]
        e1 = rng.standard_normal(n)
        e2 = rng.standard_normal(n)
        ly = M[:, 0] + tau[0] * e1
        lw = M[:, 1] + tau[1] * (rho * e1 + np.sqrt(1 - rho**2) * e2)
        lw_smooth = M[:, 1] + rho * (ly - M[:, 0]) * tau[1] / tau[0]
        w_s = np.exp(lw_smooth - lw_smooth.max())
        w_s *= prep["N"] / w_s.sum()
        w_syn = None
        if include_synthetic_weights:
            w_syn = np.exp(lw)
        return self._frame(prep, ly, w_s, w_syn, prep["X_frame"])


class FBP(_PseudoPosterior):
    """Fully Bayes model for the population (partial synthesis; seed 001 Section 2.2).

    Population y ~ N(x beta, sigma_y) (y = log outcome with log=True), pi | y ~ LN(kappa_y y +
    x kappa_x, sigma_pi), exact sample likelihood (Leon-Novelo & Savitsky 2019) with pi = 1/w
    on the weights' natural scale; priors beta, kappa ~ N(0, 10^2), sigma ~ half-Cauchy(0, 1)
    (seed 000 Appendix D). Synthetic y* ~ N(x beta, sigma_y) (population-corrected); smoothed
    weights: cell means of exp(-kappa_y y* - x kappa_x), rescaled to sum to N (see module
    Decisions). ``smoothed_weights="outcome"`` uses exp(-kappa_y y*) alone, as seed 001
    Section 2.2 writes it ("only the kappa_y y_i component"): it ignores the cell terms of the
    pi model and biases the counts by cell (the paper's field 7 under-coverage); kept to
    reproduce the paper. The weights are post-processing of the released draws (no budget).
    When log w is a function of the predictor cells (weights constant within cells, e.g. strata
    that are predictors) the pi model is dropped (``fbp_nopi.stan``): selection is then not
    informative given x, and the pi model would be degenerate (sigma_pi -> 0); y* comes from
    the population model and the collected weights are released, rescaled to N.

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
    >>> syn = ss.synth.FBP("salary", ["field"], log=True, m=2, chains=4, draws=500,
    ...                    warmup=500, random_state=1, progress=False)
    >>> rel = syn.fit(d).release()
    >>> rel.kind, rel.m
    ('partial', 2)
    """

    name = "FBP"
    kind = "partial"
    program = "fbp"
    re_program = "fbp_re"

    nopi_program = "fbp_nopi"

    def _program_name(self) -> str:
        """``fbp``; ``fbp_re`` (PSU random intercept) for a clustered design; ``fbp_nopi`` for
        an unclustered design whose log w is a function of the predictor cells (no pi model:
        sampling is non-informative given x; docs/pseudo_posterior.md)."""
        prep = getattr(self, "_prep_", None)
        if prep is not None and prep.get("cluster"):
            return self.re_program
        if prep is not None and not prep.get("pi_free", True):
            return self.nopi_program
        return self.program

    def _prepare(self, design: Any) -> dict:
        """The shared preparation plus ``pi_free``: whether log w varies within a predictor
        cell. When it does not (weights constant within cells, e.g. strata that are
        predictors), the pi model is dropped (fbp_nopi.stan), as fbp_re.stan's has_pi = 0:
        pi | x is then a function of x, selection is not informative given x and the sample
        likelihood of y is the population's; a pi model would be degenerate (sigma_pi -> 0;
        measured on apistrat by stype: R-hat 3.87). The released weights are then the
        collected ones (a function of the released predictors), rescaled to N."""
        prep = super()._prepare(design)
        if not prep.get("cluster"):
            cells = prep["cells"]
            prep["pi_free"] = _log_w_beyond_cells(np.log(prep["w_raw"]), cells.codes,
                                                  cells.Xc.shape[0])
        return prep
    description = ("population model of the outcome with an informative-design model of the "
                   "inclusion probabilities (exact sample likelihood); synthetic outcome from "
                   "the population model, smoothed weights, predictors unsynthesized")

    def _lpi(self, prep):
        """log pi_i: pi = 1/w on the weights' natural scale, or with w normalised to sum to n
        (``pi_scale="sample"``). The sample likelihood (seed 001 eq. 6) is not invariant to the
        scale of pi: a shift of log pi moves the kappa_x intercept and, through the
        normalising denominator, every log p_s by minus the shift (see docs/pseudo_posterior.md)."""
        w = prep["cluster"]["w_model"] if prep.get("cluster") else prep["w_raw"]
        if self.pi_scale == "sample":
            w = w * prep["n"] / w.sum()
        return -np.log(w)

    def _centre(self, prep):
        """Centring constant of y in the pi model: a sampling device only (see fbp.stan)."""
        return float(np.round(np.median(prep["y"]), 0))

    def _stan_data(self, prep, alpha, save_log_lik):
        if prep.get("cluster"):
            y, lpi = prep["y"], self._lpi(prep)
            d, (_, means, cross) = self._re_common_data(prep, alpha, save_log_lik, [y, lpi])
            Zpsu = prep["cluster"]["Zpsu"]
            return dict(d, has_pi=int(prep["cluster"]["lw_free"]), centre=self._centre(prep),
                        P=Zpsu.shape[1], Zpsu=Zpsu,
                        ybar=means[0], pbar=means[1], Syy=cross[(0, 0)], Syp=cross[(0, 1)],
                        Spp=cross[(1, 1)], y=y if save_log_lik else np.zeros(0),
                        lpi=lpi if save_log_lik else np.zeros(0))
        cells = prep["cells"]
        y = prep["y"]
        if not prep.get("pi_free", True):   # fbp_nopi.stan: the population model of y alone
            C = cells.Xc.shape[0]
            w, means, cross = cell_moments(cells.codes, C, alpha, [y])
            return dict(
                n=prep["n"], K=cells.Xc.shape[1], C=C, Xc=cells.Xc, w=w, ybar=means[0],
                Syy=cross[(0, 0)], save_log_lik=int(save_log_lik),
                cell=(cells.codes + 1) if save_log_lik else np.zeros(0, dtype=int),
                y=y if save_log_lik else np.zeros(0))
        lpi = self._lpi(prep)
        C = cells.Xc.shape[0]
        w, means, cross = cell_moments(cells.codes, C, alpha, [y, lpi])
        return dict(
            n=prep["n"], K=cells.Xc.shape[1], C=C, Xc=cells.Xc, centre=self._centre(prep), w=w,
            ybar=means[0], pbar=means[1], Syy=cross[(0, 0)], Syp=cross[(0, 1)],
            Spp=cross[(1, 1)], save_log_lik=int(save_log_lik),
            cell=(cells.codes + 1) if save_log_lik else np.zeros(0, dtype=int),
            y=y if save_log_lik else np.zeros(0), lpi=lpi if save_log_lik else np.zeros(0),
        )

    def _inits(self, prep, rng):
        cells = prep["cells"]
        y = prep["y"]
        lpi = self._lpi(prep)
        C, K = cells.Xc.shape
        w, means, cross = cell_moments(cells.codes, C, np.ones(prep["n"]), [y, lpi])
        beta = self._ls_cells(cells.Xc, means[0], w)
        kx = self._ls_cells(cells.Xc, means[1], w)
        sy = max(np.sqrt(cross[(0, 0)].sum() / prep["n"]), 1e-3)
        sp = max(np.sqrt(cross[(1, 1)].sum() / prep["n"]), 1e-3)
        if prep.get("cluster"):
            out = []
            for _ in range(self.chains):
                sw, _, (z, su) = self._re_start(prep, y - (cells.Xc @ beta)[cells.codes],
                                                cells.Xc @ beta, rng)
                d = dict(beta=(beta + 0.01 * rng.standard_normal(K)).tolist(), sigma_y=sw,
                         sigma_u=su, z=z)
                if prep["cluster"]["Zpsu"].shape[1]:
                    d["gamma"] = [0.0] * prep["cluster"]["Zpsu"].shape[1]
                if prep["cluster"]["lw_free"]:
                    d.update(kappa_y=[float(0.1 * rng.standard_normal())],
                             kappa_x_c=(kx + 0.01 * rng.standard_normal(K)).tolist(),
                             sigma_pi=[sp])
                out.append(d)
            return out
        if not prep.get("pi_free", True):
            return [dict(beta=(beta + 0.01 * rng.standard_normal(K)).tolist(),
                         sigma_y=sy * float(np.exp(0.05 * rng.standard_normal())))
                    for _ in range(self.chains)]
        return [dict(beta=(beta + 0.01 * rng.standard_normal(K)).tolist(),
                     kappa_y=float(0.1 * rng.standard_normal()),
                     kappa_x_c=(kx + 0.01 * rng.standard_normal(K)).tolist(),
                     sigma_y=sy, sigma_pi=sp) for _ in range(self.chains)]

    def _record_loglik(self, prep, res, s):
        cells = prep["cells"]
        y = prep["y"]
        lpi = self._lpi(prep)
        centre = self._centre(prep)
        mu = (res["beta"][s] @ cells.Xc.T)[:, cells.codes]  # (S, n)
        cl = prep.get("cluster")
        if cl:
            # D4: the CONDITIONAL density given the PSU's u_j (as fbp_re.stan's log_lik)
            mu = mu + self._psu_level(cl, res, s, res["u"][s])[:, cl["psu"]]
            sy = res["sigma_y"][s][:, None]
            if not cl["lw_free"]:
                return -0.5 * _LOG2PI - np.log(sy) - 0.5 * ((y[None] - mu) / sy) ** 2
            k = (res["kappa_x_c"][s] @ cells.Xc.T)[:, cells.codes]
            ky = res["kappa_y"][s].reshape(-1, 1)
            sp = res["sigma_pi"][s].reshape(-1, 1)
            e = lpi[None] - ky * (y[None] - centre) - k
            return (-_LOG2PI - np.log(sp) - np.log(sy) - 0.5 * (e / sp) ** 2
                    - 0.5 * ((y[None] - mu) / sy) ** 2
                    - (k + 0.5 * sp**2 + ky * (mu - centre) + 0.5 * (ky * sy) ** 2))
        if not prep.get("pi_free", True):   # fbp_nopi.stan's log_lik
            sy = res["sigma_y"][s][:, None]
            return -0.5 * _LOG2PI - np.log(sy) - 0.5 * ((y[None] - mu) / sy) ** 2
        k = (res["kappa_x_c"][s] @ cells.Xc.T)[:, cells.codes]
        ky = res["kappa_y"][s][:, None]
        sy = res["sigma_y"][s][:, None]
        sp = res["sigma_pi"][s][:, None]
        e = lpi[None] - ky * (y[None] - centre) - k
        return (-_LOG2PI - np.log(sp) - np.log(sy) - 0.5 * (e / sp) ** 2
                - 0.5 * ((y[None] - mu) / sy) ** 2
                - (k + 0.5 * sp**2 + ky * (mu - centre) + 0.5 * (ky * sy) ** 2))

    def _synthesize_one(self, s, rng, include_synthetic_weights):
        prep = self._prep_
        cells = prep["cells"]
        res = self.weighted_fit_
        cl = prep.get("cluster")
        if cl:
            # y* from the population model with fresh PSU effects (D3); the weights are the
            # collected ones (constant within PSUs, rescaled to N: D5)
            u_star = self._fresh_u(res, s, cl["J"], rng)
            a = self._psu_level(cl, res, slice(s, s + 1), u_star[None])[0]
            mu = (cells.Xc @ res["beta"][s])[cells.codes] + a[cl["psu"]]
            y_star = mu + float(res["sigma_y"][s]) * rng.standard_normal(prep["n"])
            return self._frame(prep, y_star, cl["w_release"], None, prep["X_frame"])
        if not prep.get("pi_free", True):
            # no pi model: y* from the population model; the weights are the collected ones,
            # a function of the released predictor cells, rescaled to N (nothing synthesized)
            mu = (cells.Xc @ res["beta"][s])[cells.codes]
            y_star = mu + float(res["sigma_y"][s]) * rng.standard_normal(prep["n"])
            w_s = prep["w_raw"] * (prep["N"] / prep["w_raw"].sum())
            return self._frame(prep, y_star, w_s, None, prep["X_frame"])
        centre = self._centre(prep)
        mu = (cells.Xc @ res["beta"][s])[cells.codes]
        k = (cells.Xc @ res["kappa_x_c"][s])[cells.codes]
        ky, sy, sp = (float(res[v][s]) for v in ("kappa_y", "sigma_y", "sigma_pi"))
        n = prep["n"]
        y_star = mu + sy * rng.standard_normal(n)
        lpi_star = ky * (y_star - centre) + k + sp * rng.standard_normal(n)
        # smoothed weights: exp(-kappa_y y*) (seed 001: "only the kappa_y y_i component") or
        # the model's exp(-(kappa_y y* + x kappa_x)) (smoothed_weights="model"), averaged
        # within predictor cells, rescaled to N
        lw = -ky * (y_star - centre)
        if self.smoothed_weights == "model":
            lw = lw - k
        raw = np.exp(lw - lw.max())
        C = cells.Xc.shape[0]
        cnt = np.bincount(cells.codes, minlength=C)
        cell_mean = np.bincount(cells.codes, weights=raw, minlength=C) / np.maximum(cnt, 1)
        w_s = cell_mean[cells.codes]
        w_s *= prep["N"] / w_s.sum()
        w_syn = None
        if include_synthetic_weights:
            w_syn = np.exp(-lpi_star)
        return self._frame(prep, y_star, w_s, w_syn, prep["X_frame"])


class PBP(_PseudoPosterior):
    """Pseudo Bayes model for the population (full synthesis; seed 001 Section 2.3).

    Pseudo likelihood prod_i p(y_i, x_i | theta)^(w_i alpha_i), w normalised to sum to n;
    x ~ Categorical(theta) over predictor cells with a Dirichlet(1) prior, y | x ~ N(x beta,
    sigma), beta ~ N(0, 10^2), sigma ~ half-t(3, 0, 10). Releases n synthetic (x*, y*) records
    with constant weights N/n, no strata (simple random sample formulas); combining rule: full.
    The priors are fixed on the modelled scale: an outcome whose magnitude makes them
    informative (raw api00 ~ 660 with log=False gave synthetic means 12-43) is refused at fit;
    use log=True or a public ``outcome_scale`` (e.g. 100), as for FBS and FBP.

    Clustered designs are refused (issue 36, D6; docs/pseudo_posterior.md, "PBP and clustered
    designs"): a full synthesis draws every record independently given theta and releases no
    cluster ids, so the synthetic designs cannot carry the design effect.

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
    >>> syn = ss.synth.PBP("salary", ["field"], log=True, m=2, chains=4, draws=300,
    ...                    warmup=300, random_state=1, progress=False)
    >>> rel = syn.fit(d).release()
    >>> rel.kind, rel.m
    ('full', 2)
    """

    name = "PBP"
    kind = "full"
    program = "pbp"
    description = ("survey-weighted pseudo likelihood model of (outcome, predictors) for the "
                   "population; all released values synthetic, constant weights N/n")

    def check_design(self, design: Any) -> None:
        """Refuse a design with real clusters (D6; data-free of the outcome, so ``surveysynth
        release --check`` runs it before any MCMC). A ValueError names the reason, the
        measured consequence and the alternatives."""
        from .design_checks import refuse_clustered

        refuse_clustered(
            design, "PBP (full synthesis)",
            "a full synthesis draws every synthetic record independently given the model "
            "parameters and releases no cluster ids, so the within-cluster correlation is lost "
            "and the synthetic designs (simple random sample formulas) understate the variance")

    def _prepare(self, design: Any) -> dict:
        self.check_design(design)
        return super()._prepare(design)

    def _wt(self, prep):
        w = prep["w_raw"]
        return w * prep["n"] / w.sum()

    def _contribution_scale(self, prep):
        return self._wt(prep)

    def _stan_data(self, prep, alpha, save_log_lik):
        cells = prep["cells"]
        C = cells.Xc.shape[0]
        A, means, cross = cell_moments(cells.codes, C, alpha * self._wt(prep), [prep["y"]])
        return dict(
            n=prep["n"], K=cells.Xc.shape[1], C=C, Xc=cells.Xc, A=A, ybar=means[0],
            Syy=cross[(0, 0)], save_log_lik=int(save_log_lik),
            cell=(cells.codes + 1) if save_log_lik else np.zeros(0, dtype=int),
            y=prep["y"] if save_log_lik else np.zeros(0),
        )

    def _inits(self, prep, rng):
        cells = prep["cells"]
        C, K = cells.Xc.shape
        A, means, cross = cell_moments(cells.codes, C, self._wt(prep), [prep["y"]])
        beta = self._ls_cells(cells.Xc, means[0], A)
        sig = max(np.sqrt(cross[(0, 0)].sum() / max(A.sum(), 1)), 1e-3)
        theta = (A + 1.0) / (A + 1.0).sum()
        return [dict(theta=theta.tolist(), beta=(beta + 0.01 * rng.standard_normal(K)).tolist(),
                     sigma=sig) for _ in range(self.chains)]

    def _record_loglik(self, prep, res, s):
        cells = prep["cells"]
        y = prep["y"]
        mu = (res["beta"][s] @ cells.Xc.T)[:, cells.codes]
        sig = res["sigma"][s][:, None]
        lt = np.log(res["theta"][s])[:, cells.codes]
        return lt - 0.5 * _LOG2PI - np.log(sig) - 0.5 * ((y[None] - mu) / sig) ** 2

    def _synthesize_one(self, s, rng, include_synthetic_weights):
        prep = self._prep_
        cells = prep["cells"]
        res = self.weighted_fit_
        theta = res["theta"][s]
        theta = theta / theta.sum()
        n = prep["n"]
        cell_star = rng.choice(len(theta), size=n, p=theta)
        mu = (cells.Xc @ res["beta"][s])[cell_star]
        y_star = mu + float(res["sigma"][s]) * rng.standard_normal(n)
        preds = self._cfg_["predictors"]
        X_frame = cells.table.iloc[cell_star].reset_index(drop=True) if preds else None
        if X_frame is not None:
            for p in preds:  # keep the confidential column dtypes
                X_frame[p] = X_frame[p].astype(prep["X_frame"][p].dtype)
        w_s = np.full(n, prep["N"] / n)
        return self._frame(prep, y_star, w_s, None, X_frame)
