"""Finite mixture of normal regressions, risk-weighted (seed 002's CE synthesizer; seed 003).

``t(y_i) | x_i ~ sum_k theta_k N(x_i' beta_k, sigma_k^2)``, ``theta ~ Dirichlet(gamma/K)``
(truncated Dirichlet process), components marginalised with ``log_sum_exp`` in
``stan/mixture.stan``, the likelihood contribution of record i raised to alpha_i. The protocol
(settings, fit, release, labels, released weights) is
:class:`~surveysynth.synth.risk_weighted.RiskWeightedSynthesizer`'s; the negative binomial
synthesizer lives in :mod:`surveysynth.synth.negbin`.

Decisions (where seed 002 is silent; docs/identification_risk.md):

* Priors on the standardised transformed outcome: ``beta_k ~ N(0, 1)``,
  ``sigma_k ~ half-N(0, 0.5^2)``, ``gamma = 1``, K = 6; numeric predictors standardised,
  categorical predictors one-hot with the first level as reference, intercept included. Wider
  priors (N(0, 2.5^2), half-N(0, 1)) let components that the risk weights starve of data, or
  empty Dirichlet-process components, sit far in the tails; back-transformed with exp they
  produced synthetic means several times the data mean in our CE-like runs.
* Convergence gates on identified quantities only: the component labels of a mixture are
  exchangeable, so theta_k, beta_k, sigma_k switch labels between (and within) chains and their
  R-hat says nothing about the predictive, which is label-invariant. The gates check lp__ and
  label-invariant functionals: the mixture mean of the standardised outcome at the mean
  predictor row, ``mean_z = sum_k theta_k xbar' beta_k``, its standard deviation over records
  ``sd_z`` (from ``sum_k theta_k (sigma_k^2 + beta_k' (X'X/n) beta_k) - mean_z^2``), and the
  mixture-averaged coefficients ``coef_mean[j] = sum_k theta_k beta_jk``. The component
  parameters are in ``diagnostics_table_`` with ``gated = False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from ._stan import StanDraws
from .params import Interval, Options, ParameterError
from .risk_weighted import RISK_WEIGHTED, RiskWeightedSynthesizer

__all__ = ["MixtureSynthesizer"]

_TRANSFORMS = ("log", "asinh", "none")


class MixtureSynthesizer(RiskWeightedSynthesizer):
    """Truncated-Dirichlet-process mixture of K normal regressions (seed 002 CE synthesizer).

    ``t`` is ``transform``: "log" (default), ``t = log(y + shift)`` with a public,
    data-independent ``shift >= 0`` (0 by default: the outcome must be > 0; for incomes with
    losses pass e.g. ``shift=10000``, so synthetic values stay above -shift); "asinh" (defined
    for all values, but a normal component spanning both signs back-transforms to extreme
    values: prefer a shifted log) or "none". The model is fitted to the standardised ``t(y)``;
    synthetic values are back-transformed, so risk and utility are on the original scale.

    Settings (stored unchanged; validated by ``fit``):

    * model: ``outcome``, ``predictors``, ``categorical`` (numeric predictors to treat as
      categorical), ``K``, ``gamma``, ``transform``, ``shift``, ``beta_scale``, ``sigma_scale``;
    * risk weights: ``alpha`` (None, "marginal", "pairwise" or a caller's array), ``known``,
      ``r``, ``alpha_scale``, ``alpha_shift`` (alpha = clip(alpha_scale * alpha +
      alpha_shift, 0, 1) for computed weights), ``on_singleton``;
    * release: ``release_columns`` (further public columns released as collected), ``m``
      (default 5), ``population_size`` (public N the released weights sum to);
    * MCMC: ``chains``, ``draws``, ``warmup``, ``stan_kwargs``, ``log_lik`` (keep per-record
      log-likelihood draws, e.g. for Lipschitz weights), ``convergence`` (gate overrides),
      ``allow_unconverged``;
    * ``random_state`` (None: secret OS entropy), ``progress``;
    * ``max_epsilon``: the declared total of the budget account (a privacy filter): a release
      that would take it above this, or one without a guarantee (computed identification-risk
      weights, no weights), is refused (BudgetExceededError). None: no limit.

    Fitted: ``alpha_``, ``alpha_kind_``, ``synthetic_`` (m, n), ``synthesis_draws_``,
    ``draws_`` (StanDraws), ``log_lik_``, ``delta_alpha_``, ``convergence_``,
    ``diagnostics_table_``, ``population_size_``, ``n_``, ``ledger_``.

    Example (short chains to run quickly; a release keeps the default chains and draws):

    >>> import numpy as np
    >>> import pandas as pd
    >>> import surveysynth as ss
    >>> rng = np.random.default_rng(1)
    >>> df = pd.DataFrame({"field": rng.choice(["a", "b"], 60),
    ...                    "salary": rng.lognormal(rng.choice([10.3, 11.7], 60), 0.2).round(),
    ...                    "visits": rng.poisson(3, 60),
    ...                    "w": rng.uniform(50, 150, 60).round(1)})
    >>> d = ss.SurveyDesign(df, weights="w")
    >>> syn = ss.synth.MixtureSynthesizer("salary", ["field"], K=2, m=2, chains=4, draws=500,
    ...                                   warmup=500, random_state=1, progress=False)
    >>> rel = syn.fit(d).release()
    >>> rel.kind, rel.m
    ('partial', 2)
    """

    program = "mixture"
    param_names = ("theta", "beta", "sigma")
    description = "finite mixture of normal regressions on the transformed outcome"
    model_label = "finite mixture of normal regressions"
    loglik_scale = "the transformed outcome t(y), e.g. log(y + shift)"
    _parameter_constraints = {
        **RISK_WEIGHTED,
        "K": [Interval("integer", 1, None)],
        "gamma": [Interval("number", 0, None, closed="neither")],
        "transform": [Options(*_TRANSFORMS)],
        "shift": [Interval("number", 0, None)],
        "beta_scale": [Interval("number", 0, None, closed="neither")],
        "sigma_scale": [Interval("number", 0, None, closed="neither")],
    }

    def __init__(
        self,
        outcome: str = "",
        predictors: Sequence[str] | str | None = None,
        categorical: Sequence[str] | None = None,
        K: int = 6,  # noqa: N803 - the paper's symbol
        gamma: float = 1.0,
        transform: Literal["log", "asinh", "none"] = "log",
        shift: float = 0.0,
        beta_scale: float = 1.0,
        sigma_scale: float = 0.5,
        alpha: None | str | np.ndarray | Sequence[float] = None,
        known: Sequence[str] | str | None = None,
        r: float | None = None,
        alpha_scale: float = 1.0,
        alpha_shift: float = 0.0,
        on_singleton: Literal["raise", "marginal"] = "raise",
        release_columns: Sequence[str] | None = None,
        m: int = 5,
        chains: int = 4,
        draws: int = 1000,
        warmup: int = 1000,
        log_lik: bool = False,
        stan_kwargs: dict | None = None,
        convergence: dict | None = None,
        allow_unconverged: bool = False,
        population_size: float | None = None,
        random_state: Any = None,
        progress: bool = True,
        max_epsilon: float | None = None,
    ) -> None:
        self._store_settings(locals())

    def _check_model(self) -> None:
        if self.shift and self.transform != "log":
            raise ValueError("shift is used only with transform='log' (t = log(y + shift)).")

    def _prepare_y(self, y: np.ndarray, frame: pd.DataFrame) -> dict[str, Any]:
        shift = float(self.shift)
        if self.transform == "log":
            bad = y + shift <= 0
            if bad.any():
                raise ParameterError(
                    f"outcome {self.outcome!r} has {int(bad.sum())} values <= {0.0 - shift + 0.0:g} (rows "
                    f"{frame.index[bad][:5].tolist()}, first shown) and transform='log' models log(y + shift) "
                    f"with shift = {shift:g}. Fix: a public shift larger than the largest loss (e.g. "
                    "shift=10000 for incomes down to -10K), or transform='asinh' / 'none'.",
                    "shift")
            t = np.log(y + shift)
        elif self.transform == "asinh":
            t = np.arcsinh(y)
        else:
            t = y.astype(float)
        loc, sd = float(t.mean()), float(t.std())
        if not sd > 0:
            raise ValueError(f"outcome {self.outcome!r} is constant; nothing to synthesize.")
        return {"z": (t - loc) / sd, "loc": loc, "sd": sd}

    def _stan_data(self, X: np.ndarray, prep: dict, alpha: np.ndarray, need_ll: bool) -> dict:
        return {
            "N": X.shape[0], "P": X.shape[1], "K": int(self.K), "X": X, "z": prep["z"],
            "alpha": alpha, "gamma": float(self.gamma), "beta_scale": float(self.beta_scale),
            "sigma_scale": float(self.sigma_scale), "log_jacobian": -np.log(prep["sd"]),
            "save_log_lik": int(need_ll),
        }

    def _identified(self, draws: StanDraws, X: np.ndarray) -> dict[str, np.ndarray]:
        theta = np.asarray(draws["theta"], dtype=float)            # (S, K)
        beta = np.asarray(draws["beta"], dtype=float)              # (S, P, K)
        sigma = np.asarray(draws["sigma"], dtype=float)            # (S, K)
        xbar = X.mean(axis=0)
        gram = X.T @ X / X.shape[0]
        mu_bar = np.einsum("p,spk->sk", xbar, beta)
        mean_z = (theta * mu_bar).sum(axis=1)
        second = (theta * (sigma**2 + np.einsum("spk,pq,sqk->sk", beta, gram, beta))).sum(axis=1)
        out = {"lp__": draws.sampler["lp__"], "mean_z": mean_z,
               "sd_z": np.sqrt(np.maximum(second - mean_z**2, 0.0))}
        coef = np.einsum("sk,spk->sp", theta, beta)
        for j, nm in enumerate(self.x_names_):
            out[f"coef_mean[{nm}]"] = coef[:, j]
        return out

    def _draw_outcomes(self, d: dict[str, np.ndarray], X: np.ndarray, prep: dict,
                       rng: np.random.Generator) -> np.ndarray:
        """One synthetic outcome vector from one posterior draw: each record's component from
        theta, then t = loc + sd * N(x_i' beta_k, sigma_k) with ITS component's sigma_k."""
        K = int(self.K)
        theta = np.asarray(d["theta"], dtype=float).reshape(-1)
        beta = np.asarray(d["beta"], dtype=float).reshape(X.shape[1], K)
        sigma = np.asarray(d["sigma"], dtype=float).reshape(-1)
        n = X.shape[0]
        cdf = np.cumsum(theta)
        comp = np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(n), side="right"), K - 1)
        mu = np.take_along_axis(X @ beta, comp[:, None], axis=1)[:, 0]
        z = mu + sigma[comp] * rng.standard_normal(n)
        t = prep["loc"] + prep["sd"] * z
        if self.transform == "log":
            return np.exp(np.minimum(t, 700.0)) - float(self.shift)
        if self.transform == "asinh":
            return np.sinh(np.clip(t, -700.0, 700.0))
        return t
