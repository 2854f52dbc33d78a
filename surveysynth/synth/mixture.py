"""Risk-weighted partially synthetic data: finite mixture of regressions and negative binomial.

Two Stan synthesizers for one sensitive outcome given unsynthesized predictors, each fitted
with a record-weighted pseudo likelihood (seed 002 eq. 4, METHODS.md sections 6 and 11):

    xi^alpha(theta | y, X) ∝ prod_i p(y_i | x_i, theta)^{alpha_i} xi(theta),  alpha_i in [0, 1].

* :class:`MixtureSynthesizer` — the CE synthesizer of seed 002 / slides seed 003: a truncated
  Dirichlet process mixture of K normal regressions on a transformed outcome (log by default),
  ``t(y_i) | x_i ~ sum_k theta_k N(x_i' beta_k, sigma_k^2)``, ``theta ~ Dirichlet(gamma/K)``,
  components marginalised with ``log_sum_exp`` in Stan (``stan/mixture.stan``).
* :class:`NBSynthesizer` — negative binomial (NB2, log link) for counts, seed 002's simulation
  synthesizer (``stan/nb.stan``).

Both accept any weights: ``weights=None`` (unweighted), ``"marginal"`` / ``"pairwise"``
identification-risk weights computed from the data (:func:`surveysynth.privacy.risk_weights`), or
an alpha array from anywhere (e.g. Lipschitz weights from
``surveysynth.privacy.lipschitz_weights``). ``fit`` returns a fit object holding the per-record
alpha (never released) and m synthetic outcome vectors; ``fit.release()`` builds a partially
synthetic :class:`~surveysynth.release.SyntheticRelease`.

Decisions (where seed 002 is silent; see docs/identification_risk.md):

* Mixture priors, on the standardised transformed outcome: ``beta_k ~ N(0, 1)``,
  ``sigma_k ~ half-N(0, 0.5^2)``, ``gamma = 1``, K = 6; numeric predictors standardised, categorical
  predictors one-hot with the first level as reference, intercept included. Wider priors
  (N(0, 2.5^2), half-N(0, 1)) let components that the risk weights starve of data, or empty
  Dirichlet-process components, sit far in the tails; back-transformed with exp they produced
  synthetic means several times the data mean in our CE-like runs.
* NB priors: ``beta ~ N(0, 10^2)`` on the log mean, centred at the log of the sample mean;
  ``phi ~ half-Cauchy(0, 10)`` ("relatively weakly informative", seed 002 Section 2.4.2).
* Synthetic sets use m posterior draws spaced evenly over the retained draws (METHODS.md 6,
  step 6); each record's outcome is drawn from the posterior predictive given its own x_i.
* The released data hold the synthetic outcome, the predictors and the known-pattern columns
  (released unsynthesized), plus any ``release_columns`` the caller declares public; nothing
  else. Designs are released with equal weights: the confidential survey weights are not
  released (DESIGN.md); ``keep_design=True`` carries the strata / cluster columns.
* Privacy record: guarantee ``"identification_risk"`` for identification-risk weights, ``"none"``
  unweighted, and ``"pseudo_posterior"`` (with ``epsilon = 2 Delta_alpha m`` from the per-record
  log likelihoods) for a caller-supplied alpha array.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from ..privacy.identification import (
    IdentificationRisk,
    _check_known_present,
    _check_r,
    _frame,
    _known_list,
    _outcome_values,
    identification_risk,
    risk_weights,
)

__all__ = ["MixtureSynthesizer", "NBSynthesizer", "RiskWeightedFit"]

_STAN_DIR = Path(__file__).resolve().parent / "stan"

Weights = None | Literal["marginal", "pairwise"] | np.ndarray | Sequence[float]


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _stan_code(name: str) -> str:
    return (_STAN_DIR / f"{name}.stan").read_text()


def _run_stan(
    code: str, data: dict, seed: int, chains: int, draws: int, warmup: int, progress: bool
) -> Any:
    """Build (cached by httpstan) and sample; pystan's console output only when ``progress``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "pystan cannot run inside a running asyncio event loop (e.g. a Jupyter cell); run the "
            "fit from a script, or first `import nest_asyncio; nest_asyncio.apply()`."
        )
    import stan  # heavy import, deferred

    from ._stan import sample_and_forget

    sink = io.StringIO()
    with contextlib.ExitStack() as stack:
        if not progress:
            stack.enter_context(contextlib.redirect_stderr(sink))
            stack.enter_context(contextlib.redirect_stdout(sink))
        posterior = stan.build(code, data=data, random_seed=int(seed))
        kw = dict(num_chains=int(chains), num_samples=int(draws), num_warmup=int(warmup))
        fit = sample_and_forget(posterior, kw)
    return fit


def _split_rhat(x: np.ndarray, chains: int) -> float:
    """Split-R-hat (Gelman et al. BDA3) of one scalar quantity; draws ordered chain by chain."""
    x = np.asarray(x, dtype=float).reshape(chains, -1)
    half = x.shape[1] // 2
    if half < 2:
        return float("nan")
    parts = np.concatenate([x[:, :half], x[:, half : 2 * half]], axis=0)
    n = parts.shape[1]
    w = parts.var(axis=1, ddof=1).mean()
    b = n * parts.mean(axis=1).var(ddof=1)
    if w <= 0:
        return float("nan")
    return float(np.sqrt(((n - 1) / n * w + b / n) / w))


def _draws(fit: Any, name: str) -> np.ndarray:
    """Draws of ``name`` with the draw index FIRST (pystan puts it last)."""
    a = np.asarray(fit[name])
    return np.moveaxis(a, -1, 0)


# --------------------------------------------------------------------------------------------
# fit object
# --------------------------------------------------------------------------------------------


@dataclass
class RiskWeightedFit:
    """Result of :meth:`MixtureSynthesizer.fit` / :meth:`NBSynthesizer.fit`.

    Attributes (trailing underscore: fitted state)
    ----------------------------------------------
    alpha_ : per-record weights used in the pseudo likelihood. Confidential-data derived:
        never released.
    weights_kind_ : "none", "marginal", "pairwise" or "custom".
    synthetic_ : (m, n) synthetic outcomes on the original scale (record order of the input).
    draws_ : dict of posterior draws (draw index first).
    log_lik_ : (S, n) per-record log likelihood draws (full normalised densities, modelled scale)
        when requested or needed, else None.
    delta_alpha_ : max_i max_s |alpha_i log p(y_i | theta_s)| when ``log_lik_`` is available.
    diagnostics_ : R-hat of lp__, divergent transitions, chains, draws.
    """

    synthesizer: Any
    alpha_: np.ndarray
    weights_kind_: str
    synthetic_: np.ndarray
    draws_: dict[str, np.ndarray]
    log_lik_: np.ndarray | None
    delta_alpha_: float | None
    diagnostics_: dict[str, float]
    r_: float | None
    known_: list[str]
    seed_: Any
    m_: int
    _frame: pd.DataFrame = field(repr=False)
    _design: Any = field(repr=False, default=None)
    _columns: list[str] = field(repr=False, default_factory=list)

    @property
    def outcome(self) -> str:
        return self.synthesizer.outcome

    # -- synthetic data -------------------------------------------------------------------
    def synthetic_data(self, keep_design: bool = False) -> list[pd.DataFrame]:
        """The m released data frames: synthetic outcome, predictors, known columns (and declared
        public columns); with ``keep_design`` also the input design's strata and cluster columns.
        New frames; the input data are never modified."""
        cols = list(self._columns)
        if keep_design and self._design is not None:
            for c in list(getattr(self._design, "strata_vars", None) or []) + list(
                getattr(self._design, "ids_vars", None) or []
            ):
                if c not in cols:
                    cols.append(c)
        cols = [c for c in self._frame.columns if c in set(cols)]
        base = self._frame[cols].reset_index(drop=True)
        out = []
        for k in range(self.synthetic_.shape[0]):
            f = base.copy()
            f[self.outcome] = self.synthesizer._cast_outcome(self.synthetic_[k])
            out.append(f)
        return out

    def identification_risk(
        self, known: Sequence[str] | str | None = None, r: float | None = None, threshold: float = 0.5
    ) -> IdentificationRisk:
        """Identification risk of these synthetic sets against the confidential data
        (defaults: the ``known`` and ``r`` given to ``fit``)."""
        known_l = self.known_ if known is None else _known_list(known)
        rr = self.r_ if r is None else r
        if rr is None:
            raise ValueError("r is needed: this fit was not given r; pass r=... (e.g. 0.2).")
        return identification_risk(
            self._frame, self.synthetic_, known_l, self.outcome, r=rr, threshold=threshold
        )

    def privacy(self) -> dict[str, Any]:
        """The privacy record for the release (no per-record quantity)."""
        m = int(self.synthetic_.shape[0])
        notes = [
            f"partially synthetic: outcome {self.outcome!r} synthesized by {type(self.synthesizer).__name__}",
            f"unsynthesized released columns: {[c for c in self._columns if c != self.outcome]}",
            "confidential survey weights are not released; designs carry equal weights",
        ]
        if self.weights_kind_ in ("marginal", "pairwise"):
            guarantee, mech = "identification_risk", f"risk-weighted pseudo posterior ({self.weights_kind_} identification-risk weights)"
            notes.append(f"identification-risk weights: {self.weights_kind_}, r = {self.r_}, known = {self.known_}")
            eps = None
        elif self.weights_kind_ == "custom":
            guarantee, mech = "pseudo_posterior", "risk-weighted pseudo posterior (caller-supplied weights)"
            eps = None if self.delta_alpha_ is None else 2.0 * self.delta_alpha_ * m
            notes.append("epsilon = 2 * Delta_alpha * m with Delta_alpha measured on the weighted posterior draws")
        else:
            guarantee, mech, eps = "none", "unweighted posterior predictive", None
        return {
            "mechanism": mech,
            "guarantee": guarantee,
            "epsilon": eps,
            "delta_alpha": self.delta_alpha_ if self.weights_kind_ == "custom" else None,
            "m": m,
            "seed": self.seed_ if isinstance(self.seed_, (int, np.integer)) or self.seed_ is None else str(self.seed_),
            "notes": notes,
        }

    def release(self, keep_design: bool = False) -> Any:
        """A partially synthetic ``SyntheticRelease`` of the m synthetic data sets."""
        from ..design import SurveyDesign
        from ..release import SyntheticRelease

        designs = []
        for f in self.synthetic_data(keep_design=keep_design):
            kw: dict[str, Any] = {"weights": np.ones(len(f))}
            if keep_design and self._design is not None:
                if getattr(self._design, "strata_vars", None):
                    kw["strata"] = list(self._design.strata_vars)
                if getattr(self._design, "ids_vars", None):
                    kw["ids"] = list(self._design.ids_vars)
                kw["nest"] = bool(getattr(self._design, "nest", False))
            designs.append(SurveyDesign(f, **kw))
        return SyntheticRelease(designs, kind="partial", privacy=self.privacy())

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {type(self.synthesizer).__name__} weights={self.weights_kind_} "
            f"n={self.alpha_.size} m={self.synthetic_.shape[0]} mean alpha={self.alpha_.mean():.3f}>"
        )


# --------------------------------------------------------------------------------------------
# shared synthesizer machinery
# --------------------------------------------------------------------------------------------


class _RiskWeightedSynthesizer:
    _stan_name: str = ""

    def __init__(
        self,
        outcome: str,
        predictors: Sequence[str] | str | None = None,
        categorical: Sequence[str] | None = None,
        chains: int = 4,
        draws: int = 1000,
        warmup: int = 1000,
        log_lik: bool = False,
        progress: bool = True,
    ) -> None:
        if not isinstance(outcome, str):
            raise ValueError(f"outcome must be one column name (str); got {outcome!r}.")
        self.outcome = outcome
        self.predictors = _known_list(predictors)
        if outcome in self.predictors:
            raise ValueError(f"outcome {outcome!r} is also listed in predictors; remove it from predictors.")
        self.categorical = _known_list(categorical)
        for name, v in (("chains", chains), ("draws", draws), ("warmup", warmup)):
            if int(v) < 1:
                raise ValueError(f"{name} must be a positive integer; got {v!r}.")
        self.chains, self.draws, self.warmup = int(chains), int(draws), int(warmup)
        self.log_lik = bool(log_lik)
        self.progress = bool(progress)

    # subclasses: _prepare_y, _stan_data, _synthesize_one, _cast_outcome, _param_names
    def _design_matrix(self, frame: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
        """Intercept, standardised numeric predictors, one-hot categorical ones (first level
        dropped). Constant columns are an error (they would duplicate the intercept)."""
        n = len(frame)
        cols, names = [np.ones(n)], ["(Intercept)"]
        for p in self.predictors:
            s = frame[p]
            na = s.isna().to_numpy()
            if na.any():
                raise ValueError(
                    f"predictor {p!r} is missing in rows {frame.index[na][:5].tolist()} ({int(na.sum())} in all); "
                    "impute it or recode missing as a category first."
                )
            is_num = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
            if is_num and p not in self.categorical:
                v = s.to_numpy(dtype=float)
                sd = v.std()
                if not sd > 0:
                    raise ValueError(f"predictor {p!r} is constant; drop it from predictors.")
                cols.append((v - v.mean()) / sd)
                names.append(p)
            else:
                codes, levels = pd.factorize(s, sort=True)
                if len(levels) < 2:
                    raise ValueError(f"predictor {p!r} has a single level ({levels[0]!r}); drop it from predictors.")
                for j in range(1, len(levels)):
                    cols.append((codes == j).astype(float))
                    names.append(f"{p}[{levels[j]}]")
        return np.column_stack(cols), names

    def _alpha(self, frame, weights, known, r, scale, shift, on_singleton) -> tuple[np.ndarray, str]:
        n = len(frame)
        if weights is None:
            return np.ones(n), "none"
        if isinstance(weights, str):
            if weights not in ("marginal", "pairwise"):
                raise ValueError(
                    f"weights must be None, 'marginal', 'pairwise' or an array of per-record alpha; got {weights!r}."
                )
            if r is None:
                raise ValueError(f"weights={weights!r} needs the ball radius r (e.g. r=0.2).")
            a = risk_weights(
                frame, known, self.outcome, r=r, kind=weights, scale=scale, shift=shift, on_singleton=on_singleton
            )
            return a, weights
        a = np.asarray(weights, dtype=float)
        if a.shape != (n,):
            raise ValueError(f"weights array must have one alpha per record, shape ({n},); got {a.shape}.")
        bad = ~np.isfinite(a) | (a < 0) | (a > 1)
        if bad.any():
            raise ValueError(
                f"weights must lie in [0, 1]; offending positions {np.flatnonzero(bad)[:5].tolist()} "
                f"(values {a[bad][:5].tolist()}). Clip or rescale them (alpha = clip(c * a + g, 0, 1))."
            )
        return a, "custom"

    def fit(
        self,
        data: Any,
        weights: Weights = None,
        known: Sequence[str] | str | None = None,
        r: float | None = None,
        seed: int | np.random.Generator | None = None,
        m: int = 20,
        scale: float = 1.0,
        shift: float = 0.0,
        on_singleton: Literal["raise", "marginal"] = "raise",
        release_columns: Sequence[str] | None = None,
    ) -> RiskWeightedFit:
        """Fit the (risk-weighted) pseudo posterior and draw m synthetic outcome vectors.

        Parameters
        ----------
        data : SurveyDesign or DataFrame with the outcome and predictors; never modified.
        weights : None (alpha = 1), "marginal" / "pairwise" (identification-risk weights from
            ``known`` and ``r``, adjusted by ``scale`` / ``shift``), or an array of alpha in [0, 1].
        known : intruder-known pattern columns (for identification-risk weights and later risk
            evaluation); released unsynthesized.
        r : ball radius (fraction of |y|) for identification-risk weights.
        seed : int or Generator: Stan's seed and the synthesis draws derive from it.
        m : number of synthetic data sets.
        release_columns : further columns the caller declares public, released unsynthesized.
        """
        frame = _frame(data, "data")
        design = None if isinstance(data, pd.DataFrame) else data
        known_l = _known_list(known)
        _check_known_present(frame, known_l, "data")
        missing = [p for p in self.predictors if p not in frame.columns]
        if missing:
            raise ValueError(f"predictor column(s) {missing} not in data (columns: {list(frame.columns)[:30]}).")
        extra = _known_list(release_columns)
        miss_extra = [c for c in extra if c not in frame.columns]
        if miss_extra:
            raise ValueError(f"release_columns {miss_extra} not in data.")
        if r is not None:
            r = _check_r(r)
        if int(m) < 1:
            raise ValueError(f"m must be a positive integer; got {m!r}.")
        m = int(m)
        y = _outcome_values(frame, self.outcome, "data")
        alpha, kind = self._alpha(frame, weights, known_l, r, scale, shift, on_singleton)
        X, xnames = self._design_matrix(frame)
        rng = _rng(seed)
        stan_seed = int(rng.integers(1, 2**31 - 1))
        prep = self._prepare_y(y, frame)
        need_ll = self.log_lik or kind == "custom"
        data_dict = self._stan_data(X, prep, alpha, need_ll)
        fit = _run_stan(
            _stan_code(self._stan_name), data_dict, stan_seed, self.chains, self.draws, self.warmup, self.progress
        )
        draws = {p: _draws(fit, p) for p in self._param_names}
        log_lik = _draws(fit, "log_lik") if need_ll else None
        delta = None
        if log_lik is not None:
            with np.errstate(invalid="ignore"):  # alpha_i = 0 contributes 0 even if log p = -inf
                contrib = np.where(alpha[None, :] > 0, np.abs(alpha[None, :] * log_lik), 0.0)
            delta = float(np.max(contrib))
        lp = np.asarray(fit["lp__"]).ravel()
        div = np.asarray(fit["divergent__"]).ravel()
        diag = {
            "rhat_lp": _split_rhat(lp, self.chains),
            "divergent": int(div.sum()),
            "chains": self.chains,
            "draws": self.draws,
            "warmup": self.warmup,
        }
        if div.sum() > 0.01 * div.size:
            warnings.warn(
                f"{int(div.sum())} of {div.size} post-warm-up transitions diverged; consider more warm-up "
                "or fewer mixture components.",
                RuntimeWarning,
                stacklevel=2,
            )
        if np.isfinite(diag["rhat_lp"]) and diag["rhat_lp"] > 1.1:
            warnings.warn(
                f"R-hat of lp__ is {diag['rhat_lp']:.3f} (> 1.1): chains disagree; run more draws.",
                RuntimeWarning,
                stacklevel=2,
            )
        n_draws = lp.size
        idx = np.unique(np.linspace(0, n_draws - 1, m).round().astype(int))
        if idx.size < m:
            raise ValueError(f"m = {m} synthetic sets need at least m posterior draws; got {n_draws}.")
        syn = np.empty((m, y.size))
        from tqdm.auto import tqdm

        for k, s in enumerate(tqdm(idx, desc="synthesize", disable=not self.progress, leave=False)):
            syn[k] = self._synthesize_one({p: v[s] for p, v in draws.items()}, X, prep, rng)
        cols = list(dict.fromkeys([*self.predictors, *known_l, *extra, self.outcome]))
        return RiskWeightedFit(
            synthesizer=self,
            alpha_=alpha,
            weights_kind_=kind,
            synthetic_=syn,
            draws_=draws,
            log_lik_=log_lik,
            delta_alpha_=delta,
            diagnostics_=diag,
            r_=r,
            known_=known_l,
            seed_=seed,
            m_=m,
            _frame=frame,
            _design=design,
            _columns=cols,
        )


# --------------------------------------------------------------------------------------------
# finite mixture of regressions
# --------------------------------------------------------------------------------------------

_TRANSFORMS = ("log", "asinh", "none")


class MixtureSynthesizer(_RiskWeightedSynthesizer):
    """Truncated-Dirichlet-process mixture of K normal regressions (seed 002 CE synthesizer).

    ``t(y_i) | x_i ~ sum_k theta_k N(x_i' beta_k, sigma_k^2)``, ``theta ~ Dirichlet(gamma/K, ...)``;
    the likelihood contribution of record i is raised to alpha_i. ``t`` is ``transform``: "log"
    (default), ``t = log(y + shift)`` with a public, data-independent ``shift >= 0`` (0 by default:
    the outcome must be > 0; for incomes with losses pass e.g. ``shift=10000``, so synthetic values
    stay above -shift); "asinh" (defined for all values, but a normal component spanning both signs
    back-transforms to extreme values: prefer a shifted log) or "none". The model is fitted to the standardised
    ``t(y)``; synthetic values are back-transformed, so risk and utility are on the original scale.

    Parameters
    ----------
    outcome, predictors : the synthesized column and the unsynthesized predictors.
    categorical : numeric predictors to treat as categorical (non-numeric ones always are).
    K : number of mixture components (truncation level).
    gamma : Dirichlet-process concentration; the weights' prior is Dirichlet(gamma/K).
    beta_scale, sigma_scale : prior scales (standardised outcome scale).
    chains, draws, warmup : NUTS settings (draws per chain after warm-up).
    log_lik : keep per-record log-likelihood draws (needed for Lipschitz bounds).
    progress : show pystan and tqdm progress.
    """

    _stan_name = "mixture"
    _param_names = ("theta", "beta", "sigma")

    def __init__(
        self,
        outcome: str,
        predictors: Sequence[str] | str | None = None,
        K: int = 6,  # noqa: N803 - the paper's symbol
        gamma: float = 1.0,
        transform: Literal["log", "asinh", "none"] = "log",
        shift: float = 0.0,
        categorical: Sequence[str] | None = None,
        beta_scale: float = 1.0,
        sigma_scale: float = 0.5,
        chains: int = 4,
        draws: int = 1000,
        warmup: int = 1000,
        log_lik: bool = False,
        progress: bool = True,
    ) -> None:
        super().__init__(outcome, predictors, categorical, chains, draws, warmup, log_lik, progress)
        if int(K) < 1:
            raise ValueError(f"K must be a positive integer; got {K!r}.")
        if transform not in _TRANSFORMS:
            raise ValueError(f"transform must be one of {_TRANSFORMS}; got {transform!r}.")
        for name, v in (("gamma", gamma), ("beta_scale", beta_scale), ("sigma_scale", sigma_scale)):
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be positive; got {v!r}.")
        if not np.isfinite(shift) or shift < 0:
            raise ValueError(f"shift must be a finite number >= 0; got {shift!r}.")
        if shift and transform != "log":
            raise ValueError("shift is used only with transform='log' (t = log(y + shift)).")
        self.K, self.gamma, self.transform, self.shift = int(K), float(gamma), transform, float(shift)
        self.beta_scale, self.sigma_scale = float(beta_scale), float(sigma_scale)

    def _prepare_y(self, y: np.ndarray, frame: pd.DataFrame) -> dict[str, Any]:
        if self.transform == "log":
            bad = y + self.shift <= 0
            if bad.any():
                raise ValueError(
                    f"outcome {self.outcome!r} has {int(bad.sum())} values <= {0.0 - self.shift + 0.0:g} (rows "
                    f"{frame.index[bad][:5].tolist()}, first shown) and transform='log' models log(y + shift) "
                    f"with shift = {self.shift:g}; pass a public shift larger than the largest loss (e.g. "
                    "shift=10000 for incomes down to -10K), or transform='asinh' / 'none'."
                )
            t = np.log(y + self.shift)
        elif self.transform == "asinh":
            t = np.arcsinh(y)
        else:
            t = y.astype(float)
        loc, sd = float(t.mean()), float(t.std())
        if not sd > 0:
            raise ValueError(f"outcome {self.outcome!r} is constant; nothing to synthesize.")
        return {"z": (t - loc) / sd, "loc": loc, "sd": sd}

    def _stan_data(self, X, prep, alpha, need_ll) -> dict[str, Any]:
        return {
            "N": X.shape[0],
            "P": X.shape[1],
            "K": self.K,
            "X": X,
            "z": prep["z"],
            "alpha": alpha,
            "gamma": self.gamma,
            "beta_scale": self.beta_scale,
            "sigma_scale": self.sigma_scale,
            "log_jacobian": -np.log(prep["sd"]),
            "save_log_lik": int(need_ll),
        }

    def _synthesize_one(self, d: dict[str, np.ndarray], X, prep, rng: np.random.Generator) -> np.ndarray:
        theta = np.asarray(d["theta"], dtype=float).reshape(-1)
        beta = np.asarray(d["beta"], dtype=float).reshape(X.shape[1], self.K)
        sigma = np.asarray(d["sigma"], dtype=float).reshape(-1)
        n = X.shape[0]
        cdf = np.cumsum(theta)
        comp = np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(n), side="right"), self.K - 1)
        mu = np.take_along_axis(X @ beta, comp[:, None], axis=1)[:, 0]
        z = mu + sigma[comp] * rng.standard_normal(n)
        t = prep["loc"] + prep["sd"] * z
        if self.transform == "log":
            return np.exp(np.minimum(t, 700.0)) - self.shift
        if self.transform == "asinh":
            return np.sinh(np.clip(t, -700.0, 700.0))
        return t

    def _cast_outcome(self, v: np.ndarray) -> np.ndarray:
        return v


# --------------------------------------------------------------------------------------------
# negative binomial
# --------------------------------------------------------------------------------------------


class NBSynthesizer(_RiskWeightedSynthesizer):
    """Negative binomial (NB2) regression synthesizer for a count outcome (seed 002 Section 2.4).

    ``y_i ~ NB(mu_i, phi)``, ``log mu_i = log(ybar) + x_i' beta`` (mean mu, variance
    mu + mu^2/phi); the likelihood contribution of record i is raised to alpha_i. With no
    predictors this is seed 002's single-NB synthesizer for the two-component NB mixture data.

    Parameters
    ----------
    outcome, predictors, categorical : as in :class:`MixtureSynthesizer`.
    beta_scale : prior sd of the log-mean coefficients (centred at log of the sample mean).
    phi_scale : half-Cauchy scale of the dispersion phi.
    chains, draws, warmup, log_lik, progress : as in :class:`MixtureSynthesizer`.
    """

    _stan_name = "nb"
    _param_names = ("beta", "phi")

    def __init__(
        self,
        outcome: str,
        predictors: Sequence[str] | str | None = None,
        categorical: Sequence[str] | None = None,
        beta_scale: float = 10.0,
        phi_scale: float = 10.0,
        chains: int = 4,
        draws: int = 1000,
        warmup: int = 1000,
        log_lik: bool = False,
        progress: bool = True,
    ) -> None:
        super().__init__(outcome, predictors, categorical, chains, draws, warmup, log_lik, progress)
        for name, v in (("beta_scale", beta_scale), ("phi_scale", phi_scale)):
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be positive; got {v!r}.")
        self.beta_scale, self.phi_scale = float(beta_scale), float(phi_scale)

    def _prepare_y(self, y: np.ndarray, frame: pd.DataFrame) -> dict[str, Any]:
        bad = (y < 0) | (y != np.round(y))
        if bad.any():
            raise ValueError(
                f"outcome {self.outcome!r} must be non-negative integer counts for NBSynthesizer; rows "
                f"{frame.index[bad][:5].tolist()} (first shown, {int(bad.sum())} in all) are not. "
                "Use MixtureSynthesizer for continuous outcomes."
            )
        ybar = float(y.mean())
        return {"y": y.astype(np.int64), "eta0": float(np.log(ybar)) if ybar > 0 else 0.0}

    def _stan_data(self, X, prep, alpha, need_ll) -> dict[str, Any]:
        return {
            "N": X.shape[0],
            "P": X.shape[1],
            "X": X,
            "y": prep["y"],
            "alpha": alpha,
            "beta_scale": self.beta_scale,
            "phi_scale": self.phi_scale,
            "eta0": prep["eta0"],
            "save_log_lik": int(need_ll),
        }

    def _synthesize_one(self, d: dict[str, np.ndarray], X, prep, rng: np.random.Generator) -> np.ndarray:
        beta = np.asarray(d["beta"], dtype=float).reshape(-1)
        phi = float(np.asarray(d["phi"]).reshape(-1)[0])
        mu = np.exp(prep["eta0"] + X @ beta)
        return rng.negative_binomial(phi, phi / (phi + mu)).astype(float)

    def _cast_outcome(self, v: np.ndarray) -> np.ndarray:
        return v.astype(np.int64)
