"""Negative binomial (NB2) regression synthesizer for counts, risk-weighted (seed 002 Section 2.4).

``y_i ~ NB(mu_i, phi)``, ``log mu_i = log(ybar) + x_i' beta`` (mean mu, variance mu + mu^2/phi),
the likelihood contribution of record i raised to alpha_i (``stan/nb.stan``). With no
predictors this is seed 002's single-NB synthesizer for its two-component NB mixture data.

Decisions: ``beta ~ N(0, 10^2)`` on the log mean, centred at the log of the sample mean (a mild
data-dependent prior location); ``phi ~ half-Cauchy(0, 10)`` ("relatively weakly informative",
seed 002 Section 2.4.2). Every parameter is identified, so the release gates check all of them
(beta, phi) and lp__.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from ._stan import StanDraws
from .params import Interval, ParameterError
from .risk_weighted import RISK_WEIGHTED, RiskWeightedSynthesizer

__all__ = ["NBSynthesizer"]


class NBSynthesizer(RiskWeightedSynthesizer):
    """Negative binomial (NB2, log link) regression synthesizer for a count outcome.

    Settings as :class:`~surveysynth.synth.mixture.MixtureSynthesizer` (risk weights, release,
    MCMC, randomness), with the model settings ``outcome``, ``predictors``, ``categorical``,
    ``beta_scale`` (prior sd of the log-mean coefficients, centred at log of the sample mean)
    and ``phi_scale`` (half-Cauchy scale of the dispersion phi). Released outcome: int64 counts.

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
    >>> syn = ss.synth.NBSynthesizer("visits", m=2, chains=4, draws=300,
    ...                    warmup=300, random_state=1, progress=False)
    >>> rel = syn.fit(d).release()
    >>> rel.kind, rel.m
    ('partial', 2)
    """

    program = "nb"
    param_names = ("beta", "phi")
    description = "negative binomial (NB2) regression with log link"
    model_label = "negative binomial regression"
    loglik_scale = "the count scale (NB probability mass)"
    _parameter_constraints = {
        **RISK_WEIGHTED,
        "beta_scale": [Interval("number", 0, None, closed="neither")],
        "phi_scale": [Interval("number", 0, None, closed="neither")],
    }

    def __init__(
        self,
        outcome: str = "",
        predictors: Sequence[str] | str | None = None,
        categorical: Sequence[str] | None = None,
        beta_scale: float = 10.0,
        phi_scale: float = 10.0,
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

    def _prepare_y(self, y: np.ndarray, frame: pd.DataFrame) -> dict[str, Any]:
        bad = (y < 0) | (y != np.round(y))
        if bad.any():
            raise ParameterError(
                f"outcome {self.outcome!r} must be non-negative integer counts for NBSynthesizer; rows "
                f"{frame.index[bad][:5].tolist()} (first shown, {int(bad.sum())} in all) are not. "
                "Use MixtureSynthesizer for continuous outcomes.", "outcome")
        ybar = float(y.mean())
        return {"y": y.astype(np.int64), "eta0": float(np.log(ybar)) if ybar > 0 else 0.0}

    def _stan_data(self, X: np.ndarray, prep: dict, alpha: np.ndarray, need_ll: bool) -> dict:
        return {
            "N": X.shape[0], "P": X.shape[1], "X": X, "y": prep["y"], "alpha": alpha,
            "beta_scale": float(self.beta_scale), "phi_scale": float(self.phi_scale),
            "eta0": prep["eta0"], "save_log_lik": int(need_ll),
        }

    def _identified(self, draws: StanDraws, X: np.ndarray) -> dict[str, np.ndarray]:
        out = {"lp__": draws.sampler["lp__"], "phi": np.asarray(draws["phi"]).reshape(-1)}
        beta = np.asarray(draws["beta"], dtype=float).reshape(len(out["phi"]), -1)
        for j, nm in enumerate(self.x_names_):
            out[f"beta[{nm}]"] = beta[:, j]
        return out

    def _draw_outcomes(self, d: dict[str, np.ndarray], X: np.ndarray, prep: dict,
                       rng: np.random.Generator) -> np.ndarray:
        beta = np.asarray(d["beta"], dtype=float).reshape(-1)
        phi = float(np.asarray(d["phi"]).reshape(-1)[0])
        mu = np.exp(prep["eta0"] + X @ beta)
        return rng.negative_binomial(phi, phi / (phi + mu)).astype(float)

    def _cast_outcome(self, v: np.ndarray) -> np.ndarray:
        return v.astype(np.int64)
