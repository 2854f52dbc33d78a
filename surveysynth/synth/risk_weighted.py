"""Risk-weighted partial synthesis of one outcome: the shared protocol of the mixture and NB
synthesizers (seed 002; METHODS.md sections 6 and 11).

Both synthesizers fit a record-weighted pseudo posterior in Stan,

    xi^alpha(theta | y, X) ∝ prod_i p(y_i | x_i, theta)^{alpha_i} xi(theta),  alpha_i in [0, 1],

and release m partially synthetic data sets: the outcome drawn from the posterior predictive of
m posterior draws, the predictors, known-pattern columns and declared ``release_columns`` as
collected. They follow :class:`surveysynth.synth.base.Synthesizer`:

* ``alpha`` chooses the risk weights: ``None`` (alpha = 1: the unweighted posterior),
  ``"marginal"`` / ``"pairwise"`` (identification-risk weights computed from the confidential
  data with ``known`` and ``r``, adjusted by ``clip(alpha_scale * alpha + alpha_shift, 0, 1)``),
  or an array of per-record alpha supplied by the caller (e.g. Lipschitz weights). ``weights``
  is not a setting: in this package it always means sampling weights.
* The label follows from who chose alpha (:mod:`surveysynth.privacy.guarantees`):
  computed identification-risk weights -> family ``identification_risk``; a caller's array ->
  ``pseudo_posterior`` with ``alpha_source="caller"``, epsilon = 2 Delta_alpha m and
  Delta_alpha = max_{i,s} |alpha_i log p(y_i | theta_s)| over the S posterior draws (labelled
  not differentially private unless the caller's alpha is independent of the data); ``None`` ->
  family ``none``.
* Design and weights (**Decision**, issue 36 D5; docs/identification_risk.md, "Weights and
  strata"): the release keeps the design as collected, as the other partial synthesizers do:
  the strata, the fpc and the sampling weights (rescaled to sum to the public population size
  N, ``population_size``; when it is not given, N is the sum of the confidential weights and
  the public manifest lists it as published without budget). They are design information,
  public like the quantile synthesizer's strata and weights, and are listed with the columns
  released as collected. The outcome is synthesized conditionally on them: with unequal
  weights the standardised log weight is a predictor of the model (a continuous public
  predictor, as in Sequential), unless it adds no rank to the predictors (weights that are a
  function of predictor cells, e.g. apistrat's pw of stype); strata enter through the
  weights or as predictors the user lists. So weighted synthetic means target the population,
  not the sample. (Before issue 36 every synthetic record got the equal weight N/n and the
  weighted means tracked the unweighted sample: apistrat mean api00 653-655 against the
  weighted 662.3.) With equal weights (a DataFrame, or a design without weights) nothing
  changes: log w is constant and the released weights are N/n.
* Clustered designs are refused (**Decision**, issue 36 D6; docs/identification_risk.md,
  "Clustered designs"): the outcome models have no cluster effect, so every synthetic outcome
  is drawn independently of its PSU given the predictors and the design effect is lost
  (measured 0.37-0.44x the confidential SE for such record-by-record synthesis on R's
  clustered api samples). Carrying a PSU random intercept is not cheap here: the mixture's
  components are label-switching (a shared random intercept per PSU makes the component
  assignment and the cluster effect compete), the identification-risk weights would have to be
  recomputed with the cluster effect. Sequential has a negative binomial step
  and carries the design (count outcomes of clustered designs go there).
* The m synthetic outcome vectors are drawn at ``fit`` from m posterior draws spaced evenly over
  the retained draws (``synthetic_``, confidential row order), so the curator's risk assessment
  (:meth:`identification_risk`, :meth:`confidential_summary`) is of exactly the sets that
  :meth:`release` publishes (rows shuffled). A release of another m draws new sets and replaces
  ``synthetic_``.
* Convergence: ``convergence_`` applies the release gates to parameters that are identified
  (see each synthesizer's docstring: for the mixture, lp__ and label-invariant functionals, not
  the component parameters, which label switching leaves unidentified).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..encoding import Factor
from ..privacy.identification import (
    IdentificationRisk,
    check_known,
    check_radius,
    identification_risk,
    known_columns,
    outcome_values,
)
from ..privacy.identification_weights import risk_weights
from ..privacy.randomness import child_seed
from ._stan import StanDraws, convergence_diagnostics, load_program
from .base import Synthesizer, collected_design, convergence_verdict
from .fitting import run_fit, weighted_bound
from .params import MCMC, RELEASE, Columns, Interval, Options

__all__ = ["RiskWeightedSynthesizer", "RISK_WEIGHTED", "even_draws"]


def even_draws(S: int, m: int) -> np.ndarray:  # noqa: N803 - the usual symbol
    """m distinct draw indices spaced evenly over S retained draws (the last one included)."""
    if m > S:
        raise ValueError(f"m={m} synthetic sets need m distinct posterior draws; the fit has {S} "
                         "(chains x draws). Raise draws or lower m.")
    return (np.floor(np.arange(1, m + 1) * S / m) - 1).astype(np.int64)


def _first(mask: np.ndarray, index: pd.Index, k: int = 5) -> list:
    return index[np.flatnonzero(mask)[:k]].tolist()


#: the name of the log-weight column of the model's design matrix (issue 36, D5)
LOG_WEIGHT = "log(weight)"


def with_log_weight(X: np.ndarray, names: list[str], w: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The design matrix with the standardised log sampling weight appended (issue 36, D5):
    the weights are released as collected, so log w is a public continuous predictor and the
    outcome model conditions on it. Not added when the weights are equal (nothing to model) or
    when log w adds no rank to X (its residual on X below 1e-8 of its norm: weights that are a
    function of the predictor cells, which X already carries)."""
    lw = np.log(np.asarray(w, dtype=float))
    sd = float(lw.std())
    if not sd > 1e-12 * max(1.0, float(np.abs(lw).max())):
        return X, names
    z = (lw - lw.mean()) / sd
    coef, *_ = np.linalg.lstsq(X, z, rcond=None)
    if np.linalg.norm(z - X @ coef) <= 1e-8 * np.linalg.norm(z):
        return X, names
    return np.column_stack([X, z]), [*names, LOG_WEIGHT]


#: the settings both synthesizers share (each adds its model's; surveysynth.synth.params)
RISK_WEIGHTED: dict[str, list[Any]] = {
    "outcome": [str],
    "predictors": [None, Columns()],
    "categorical": [None, Columns()],
    "alpha": [None, Options("marginal", "pairwise"), "array-like"],
    "known": [None, Columns()],
    "r": [None, Interval("number", 0, None, closed="neither")],
    "alpha_scale": [Interval("number")],
    "alpha_shift": [Interval("number")],
    "on_singleton": [Options("raise", "marginal")],
    "release_columns": [None, Columns()],
    "log_lik": [bool],
    **MCMC, **RELEASE,
}


class RiskWeightedSynthesizer(Synthesizer):
    """Shared fit / synthesis / privacy facts of :class:`MixtureSynthesizer` and
    :class:`NBSynthesizer`; subclasses define the model (``_check_model``, ``_prepare_y``,
    ``_stan_data``, ``_draw_outcomes``, ``_identified``)."""

    kind = "partial"
    program: ClassVar[str] = ""
    param_names: ClassVar[tuple[str, ...]] = ()
    _parameter_constraints = RISK_WEIGHTED

    # ------------------------------------------------------------------ settings
    def _store_settings(self, settings: dict[str, Any]) -> None:
        """Store every constructor argument unchanged under its own name (the protocol: no
        validation in ``__init__``; ``fit`` validates). Each subclass ``__init__`` keeps its
        explicit signature (``get_params`` reads it) and calls ``self._store_settings(locals())``."""
        for name in self._get_param_names():
            setattr(self, name, settings[name])

    # ------------------------------------------------------------------ validation
    def _check_settings(self) -> None:
        self._settings()

    def _settings(self) -> dict[str, Any]:
        """The cross-setting rules (each setting alone: the constraint table,
        :meth:`check_params`); returns the settings normalised (the attributes stay as given)."""
        if not self.outcome:
            raise ValueError(f"outcome must be one column name (str); got {self.outcome!r}.")
        preds = known_columns(self.predictors, "predictors")
        if self.outcome in preds:
            raise ValueError(f"outcome {self.outcome!r} is also listed in predictors; remove it from predictors.")
        cat = known_columns(self.categorical, "categorical")
        known = known_columns(self.known)
        extra = known_columns(self.release_columns, "release_columns")
        m = self._m(None)
        if m > int(self.chains) * int(self.draws):
            raise ValueError(f"m={m} synthetic sets need at least m posterior draws; chains x draws = "
                             f"{int(self.chains) * int(self.draws)}. Raise draws or lower m.")
        r = None if self.r is None else check_radius(self.r)
        gates = dict(self.convergence or {})
        self._check_model()
        return {"predictors": preds, "categorical": cat, "known": known, "extra": extra, "m": m,
                "r": r, "gates": gates}

    def _check_model(self) -> None:
        """The model's cross-setting rules (its settings alone: the constraint table)."""

    def _alpha(self, frame: pd.DataFrame, s: dict[str, Any]) -> tuple[np.ndarray, str]:
        """(alpha per record, kind): kind is "none", "marginal", "pairwise" or "caller"."""
        n = len(frame)
        a = self.alpha
        if a is None:
            return np.ones(n), "none"
        if isinstance(a, str):
            if a not in ("marginal", "pairwise"):
                raise ValueError(f"alpha={a!r}: choose None, 'marginal', 'pairwise' or an array of "
                                 "per-record risk weights in [0, 1].")
            if s["r"] is None:
                raise ValueError(f"alpha={a!r} needs the ball radius r (e.g. r=0.2) of the "
                                 "identification risk.")
            w = risk_weights(frame, s["known"], self.outcome, r=s["r"], kind=a,
                             scale=float(self.alpha_scale), shift=float(self.alpha_shift),
                             on_singleton=self.on_singleton)
            return w, a
        try:
            arr = np.array(a, dtype=float)  # a copy: the caller's array is never modified
        except (TypeError, ValueError):
            raise ValueError(f"alpha must be None, 'marginal', 'pairwise' or an array of numbers; "
                             f"got {type(a).__name__}.") from None
        if arr.shape != (n,):
            raise ValueError(f"alpha array must have one weight per record, shape ({n},); got {arr.shape}.")
        bad = ~np.isfinite(arr) | (arr < 0) | (arr > 1)
        if bad.any():
            raise ValueError(
                f"alpha must lie in [0, 1]; offending positions {np.flatnonzero(bad)[:5].tolist()} "
                f"(values {arr[bad][:5].tolist()}). Clip or rescale them (alpha = clip(c * a + g, 0, 1))."
            )
        return arr, "caller"

    def _design_matrix(self, frame: pd.DataFrame, preds: list[str], cat: list[str]) -> tuple[np.ndarray, list[str]]:
        """Intercept, standardised numeric predictors, one-hot categorical ones (first level
        dropped; R's names, ``stypeH``). Constant columns are an error (they would duplicate the intercept)."""
        n = len(frame)
        cols, names = [np.ones(n)], ["(Intercept)"]
        for p in preds:
            s = frame[p]
            na = s.isna().to_numpy()
            if na.any():
                raise ValueError(
                    f"predictor {p!r} is missing in rows {_first(na, frame.index)} ({int(na.sum())} in all); "
                    "impute it or recode missing as a category first."
                )
            is_num = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
            if is_num and p not in cat:
                v = s.to_numpy(dtype=float)
                sd = v.std()
                if not sd > 0:
                    raise ValueError(f"predictor {p!r} is constant; drop it from predictors.")
                cols.append((v - v.mean()) / sd)
                names.append(p)
            else:  # R's levels present, treatment contrasts and names (surveysynth.encoding)
                f = Factor.learn(s, name=p, used_only=True)
                if f.n_levels < 2:
                    raise ValueError(f"predictor {p!r} has a single level ({f.levels[0]!r}); drop it from predictors.")
                cols.extend(f.matrix(s).T)
                names.extend(f.names())
        return np.column_stack(cols), names

    # ------------------------------------------------------------------ fit
    def _fit(self, design: Any, rng: np.random.Generator) -> None:
        from ..design import SurveyDesign

        s = self._settings()
        if isinstance(design, pd.DataFrame):
            # a plain table: a design with weights 1 (population size n unless given)
            design = SurveyDesign(design, weights=np.ones(len(design)))
        if not isinstance(getattr(design, "data", None), pd.DataFrame):
            raise ValueError(f"{type(self).__name__}.fit: give a SurveyDesign (or a DataFrame); got "
                             f"{type(design).__name__}.")
        self.check_design(design)
        frame = design.data
        check_known(frame, s["known"], "the design's data")
        for nm, cols in (("predictor", s["predictors"]), ("release_columns", s["extra"])):
            missing = [c for c in cols if c not in frame.columns]
            if missing:
                raise ValueError(f"{nm} column(s) {missing} not in the design's data (columns: "
                                 f"{list(frame.columns)[:30]}).")
        y = outcome_values(frame, self.outcome, "the design's data")
        wname = design.weights_var or "weight"
        coll = collected_design(design)  # D2/D5: strata and fpc released as collected
        design_cols = [c for c in dict.fromkeys(coll["strata"] + coll["fpc"]) if c != self.outcome]
        released = list(dict.fromkeys([*s["predictors"], *s["known"], *s["extra"], *design_cols,
                                       self.outcome]))
        if wname in released:
            raise ValueError(
                f"column {wname!r} is the design's sampling weight: it is released as collected "
                "(rescaled to the population size) and enters the model as log(weight) by itself; "
                "remove it from predictors / known / release_columns."
            )
        N = self._population(design)
        w = np.asarray(design.weights, dtype=float)
        alpha, kind = self._alpha(frame, s)
        X, xnames = self._design_matrix(frame, s["predictors"], s["categorical"])
        X, xnames = with_log_weight(X, xnames, w)
        prep = self._prepare_y(y, frame)
        need_ll = bool(self.log_lik) or kind == "caller"
        # the one engine; no convergence warning here (the gates apply to identified
        # quantities only, :meth:`_convergence`)
        draws = run_fit(
            load_program(self.program), self._stan_data(X, prep, alpha, need_ll),
            label=f"{type(self).__name__} fit", chains=int(self.chains), draws=int(self.draws),
            warmup=int(self.warmup), seed=child_seed(rng), progress=bool(self.progress),
            warn=False, stan_kwargs=self.stan_kwargs,
        )
        self.alpha_ = alpha
        self.alpha_kind_ = kind
        self.known_ = s["known"]
        self.r_ = s["r"]
        self.x_names_ = xnames
        self.draws_ = draws
        self.population_size_ = N
        self._frame_ = frame
        self._X_ = X
        self._prep_ = prep
        self._released_columns_ = [c for c in frame.columns if c in set(released)]
        self._weights_name_ = wname
        # the collected weights scaled to N (equal weights: exactly N/n, as before issue 36)
        self._weights_out_ = (np.full(len(w), N / len(w)) if np.ptp(w) == 0
                              else w * (N / w.sum()))
        self._spec_ = self._design_spec(design, released)
        self._convergence(draws, X, s["gates"])
        self.log_lik_ = draws["log_lik"] if need_ll else None
        self.delta_alpha_ = None
        if self.log_lik_ is not None:
            # alpha_i max_s |log p_i| = max_s |alpha_i log p_i| exactly (alpha_i >= 0; rounding
            # is monotone); alpha_i = 0 contributes 0 even if log p = -inf
            self.delta_alpha_ = weighted_bound(alpha, np.abs(self.log_lik_).max(axis=0))[1]
        self.synthetic_, self.synthesis_draws_ = self._draw_sets(s["m"], rng, len(frame))
        self.n_ = len(frame)  # last: marks the synthesizer as fitted

    def check_data(self, design: Any) -> None:
        """Pre-flight for ``surveysynth release --check`` (no MCMC): the settings, the design
        and the outcome's rules of the model (``_prepare_y``: NB's counts, the mixture's
        log(y + shift)), as fit checks them before its first MCMC run. Keeps nothing."""
        self.check_params()
        if isinstance(design, pd.DataFrame):
            frame = design
        else:
            self.check_design(design)
            frame = design.data
        self._prepare_y(outcome_values(frame, self.outcome, "the design's data"), frame)

    def check_design(self, design: Any) -> None:
        """Refuse a design with real clusters (issue 36, D6; see the module notes). Runs before
        the data are used, and in ``surveysynth release --check``."""
        from .design_checks import refuse_clustered

        refuse_clustered(
            design, f"{type(self).__name__} (risk-weighted partial synthesis)",
            f"its {self.model_label} has no cluster effect: each synthetic outcome is drawn "
            "independently of its PSU given the predictors, so the within-cluster correlation "
            "is lost")

    @staticmethod
    def _design_spec(design: Any, released: list[str]) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        strata = list(design.strata_vars or [])
        if strata and set(strata) <= set(released):
            spec["strata"] = strata
        ids = list(design.ids_vars or [])
        if ids and set(ids) <= set(released):
            spec["ids"] = ids
            spec["nest"] = bool(design.nest)
        return spec

    def _convergence(self, draws: StanDraws, X: np.ndarray, gates: dict[str, float]) -> None:
        """Gate R-hat / ESS on identified quantities only (``_identified``) plus divergences."""
        ident = self._identified(draws, X)
        names = list(ident)
        S = draws.chains * draws.draws_per_chain
        cdp = np.column_stack([np.asarray(ident[k], dtype=float).reshape(S) for k in names])
        gated = convergence_diagnostics(cdp.reshape(draws.chains, draws.draws_per_chain, len(names)), names)
        table = pd.concat([gated.assign(gated=True),
                           draws.diagnostics.drop(index=gated.index, errors="ignore").assign(gated=False)])
        summary = dict(draws.summary)
        summary["max_rhat"] = float(gated["rhat"].max())
        summary["min_ess_bulk"] = float(gated["ess_bulk"].min())
        self.diagnostics_table_ = table
        self.convergence_ = convergence_verdict(summary, gated, gates)

    def _identified(self, draws: StanDraws, X: np.ndarray) -> dict[str, np.ndarray]:
        """Scalar draws (length S) of the quantities the release gates check."""
        raise NotImplementedError  # pragma: no cover

    # ------------------------------------------------------------------ synthesis
    def _posterior_draw(self, s: int) -> dict[str, np.ndarray]:
        return {p: np.asarray(self.draws_[p][s]) for p in self.param_names}

    def _draw_sets(self, m: int, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(m, n) synthetic outcomes (confidential row order) from m evenly spaced draws."""
        S = self.draws_.chains * self.draws_.draws_per_chain
        idx = even_draws(S, m)
        out = np.empty((m, n))
        for k, s in enumerate(idx):  # m sets, each vectorized over records
            out[k] = self._draw_outcomes(self._posterior_draw(int(s)), self._X_, self._prep_, rng)
        return out, idx

    def synthesize(self, m: int | None = None) -> np.ndarray:
        """The (m, n) synthetic outcomes a release of ``m`` sets publishes (confidential row
        order, for the curator's risk assessment): ``synthetic_`` when m is the fitted m, else
        new sets, which replace ``synthetic_`` (and are what the next release publishes)."""
        self._check_fitted()
        m = self._m(m)
        if self.synthetic_.shape[0] != m:
            self.synthetic_, self.synthesis_draws_ = self._draw_sets(m, self._rng_, self.n_)
        return self.synthetic_

    def _release_charges(self, m: int, book: bool) -> list[dict[str, Any]]:
        """A release's charge: 2 Delta_alpha per posterior draw not released before (caller's
        alpha); computed identification-risk weights or none: no guarantee ("none")."""
        S = self.draws_.chains * self.draws_.draws_per_chain
        used = vars(self).setdefault("draws_released_", set())
        new = sorted(set(int(i) for i in even_draws(S, m)) - used)
        if book or not new:
            used.update(new)
            return []
        eps = 2.0 * self.delta_alpha_ * len(new) if self.alpha_kind_ == "caller" else None
        return [{"step": "release", "family": self._family(), "m": m, "new_draws": len(new),
                 "epsilon": eps}]

    def released_as_collected(self) -> list[str]:
        """The released columns that are confidential values as collected: predictors, known
        and declared columns, the design's strata and fpc, and (when they are unequal) the
        sampling weights, rescaled to N (issue 36, D5)."""
        self._check_fitted()
        out = [c for c in self._released_columns_ if c != self.outcome]
        if np.ptp(self._weights_out_) > 0:
            out.append(self._weights_name_)
        return out

    def _synthesize(self, m: int, rng: np.random.Generator) -> tuple[list[pd.DataFrame], dict]:
        ys = self.synthesize(m)
        base = self._frame_[self._released_columns_].reset_index(drop=True)
        w = self._weights_out_
        frames = []
        for k in range(m):
            f = base.copy()
            f[self.outcome] = self._cast_outcome(ys[k])
            f[self._weights_name_] = w
            frames.append(f)
        return frames, {"weights": self._weights_name_, **self._spec_}

    def _cast_outcome(self, v: np.ndarray) -> np.ndarray:
        return v

    # ------------------------------------------------------------------ privacy
    def _family(self) -> str:
        return {"none": "none", "marginal": "identification_risk", "pairwise": "identification_risk",
                "caller": "pseudo_posterior"}[self.alpha_kind_]

    def _privacy_facts(self, m: int) -> dict[str, Any]:
        name = type(self).__name__
        unsyn = self.released_as_collected()
        given = (f" and the standardised {LOG_WEIGHT}" if LOG_WEIGHT in self.x_names_ else "")
        notes = [
            f"partially synthetic: outcome {self.outcome!r} drawn from the posterior predictive of "
            f"{name} ({self.description}) at {m} posterior draws spaced evenly over the retained "
            f"draws, given the predictors{given}",
            f"released unsynthesized (as collected): {unsyn}",
            ("the design is released as collected (strata, fpc and the sampling weights rescaled "
             "to sum to the population size N: design information, public as for the quantile "
             "synthesizer); rows in random order" if np.ptp(self._weights_out_) > 0 else
             "equal sampling weights: every synthetic record has the weight N/n, summing to the "
             "population size N; the strata and fpc as collected; rows in random order"),
        ]
        S = self.draws_.chains * self.draws_.draws_per_chain
        kind = self.alpha_kind_
        if kind in ("marginal", "pairwise"):
            return {
                "family": "identification_risk",
                "mechanism": f"identification-risk weighted {self.model_label} ({kind} weights)",
                "epsilon": None,
                "facts": {"weights": kind, "r": self.r_,
                          "known": ", ".join(self.known_) if self.known_ else "(none: one pattern)",
                          "alpha_scale": float(self.alpha_scale), "alpha_shift": float(self.alpha_shift),
                          "model": name},
                "notes": notes,
            }
        if kind == "caller":
            da = float(self.delta_alpha_)
            return {
                "family": "pseudo_posterior",
                "mechanism": f"risk-weighted pseudo posterior, {self.model_label} (caller-supplied alpha)",
                "epsilon": 2.0 * da * m,
                "delta_alpha": da,
                "facts": {"alpha_source": "caller", "draws": int(S), "bound_draws": "same_fit",
                          "model": name},
                "ledger": [{"step": "synthesis", "mechanism": name, "delta_alpha": da, "m": m,
                            "epsilon": 2.0 * da * m}],
                "published_without_budget": [{
                    "item": "Delta_alpha, the empirical maximum of |alpha_i log p(y_i | theta_s)| "
                            "over the posterior draws",
                    "reason": "the guarantee states epsilon = 2 Delta_alpha m; it is computed from "
                              "the confidential data",
                }],
                "notes": notes + [f"log densities on the modelled scale ({self.loglik_scale})"],
            }
        return {"family": "none", "mechanism": f"unweighted posterior predictive, {self.model_label}",
                "epsilon": None, "facts": {"model": name}, "notes": notes}

    # ------------------------------------------------------------------ curator's material
    def identification_risk(self, threshold: float = 0.5) -> IdentificationRisk:
        """Identification risk (seed 002 eq. 1) of the sets a release publishes
        (``synthetic_``) against the confidential data, with the fit's ``known`` and ``r``.
        Per-record and confidential: for the disclosure review only."""
        self._check_fitted()
        if self.r_ is None:
            raise ValueError("r is needed for the identification risk: set r (e.g. r=0.2) and refit, "
                             "or call surveysynth.privacy.identification_risk(...) with r.")
        return identification_risk(self._frame_, self.synthetic_, self.known_, self.outcome,
                                   r=self.r_, threshold=threshold)

    def summary(self) -> pd.Series:
        """Key numbers of the fit (no per-record values; confidential: for the curator)."""
        self._check_fitted()
        a = self.alpha_
        return pd.Series({
            "synthesizer": type(self).__name__, "n": self.n_, "alpha": self.alpha_kind_,
            "mean_alpha": float(a.mean()), "min_alpha": float(a.min()), "max_alpha": float(a.max()),
            "r": self.r_, "m": int(self.synthetic_.shape[0]), "delta_alpha": self.delta_alpha_,
            "population_size": self.population_size_,
            "population_size_given": bool(getattr(self, "population_size_given_", False)),
            "max_rhat_gated": self.convergence_["max_rhat"],
            "min_ess_bulk_gated": self.convergence_["min_ess_bulk"],
            "divergences": self.convergence_["divergent"],
            "converged": bool(self.convergence_["passed"]),
        })

    def confidential_summary(self) -> dict[str, Any]:
        """Disclosure-review material for ``confidential/`` (never public): fit summary, alpha
        quantiles, the identification-risk summary table of the released sets (when ``r`` is
        set), MCMC diagnostics (gated rows marked) and the convergence verdict."""
        self._check_fitted()
        q = [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0]
        out: dict[str, Any] = {
            "fit_summary": self.summary().to_frame("value"),
            "alpha_quantiles": pd.DataFrame({"quantile": q, "alpha": np.quantile(self.alpha_, q)}),
            "mcmc_diagnostics": self.diagnostics_table_,
            "convergence": {k: v for k, v in self.convergence_.items() if k != "gates"},
            "gates": dict(self.convergence_["gates"]),
            "seeded": bool(self.seeded_),
            "random_state": None if self.random_state is None else str(self.random_state),
        }
        if self.r_ is not None:
            out["identification_risk_summary"] = self.identification_risk().summary()
        return out

    # ------------------------------------------------------------------ model hooks
    description: ClassVar[str] = ""
    model_label: ClassVar[str] = ""
    loglik_scale: ClassVar[str] = ""

    def _prepare_y(self, y: np.ndarray, frame: pd.DataFrame) -> dict[str, Any]:
        raise NotImplementedError  # pragma: no cover

    def _stan_data(self, X: np.ndarray, prep: dict, alpha: np.ndarray, need_ll: bool) -> dict:
        raise NotImplementedError  # pragma: no cover

    def _draw_outcomes(self, d: dict[str, np.ndarray], X: np.ndarray, prep: dict,
                       rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover

