"""Simulated data for identification-risk weighting (seed 002).

* :func:`nb_mixture` — the count data of seed 002 Section 2.4.1: a 2-component negative binomial
  mixture, ``0.7 NB(mu=100, phi=20) + 0.3 NB(mu=100, phi=5)``, one known pattern.
* :func:`ce_like` — a stand-in for the confidential Consumer Expenditure Surveys sample of seed 002
  Section 1.1: ten categorical, unsynthesized variables (the Table 1 list) and a highly skewed family
  income with a few losses. {gender, age, region} cross to 40 known patterns, as in the paper. The
  numbers are invented to have the published shape (mean about 72K, median about 50K, 97.5th
  percentile about 270K, range about (-7K, 1.8M)); they are not CE data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..privacy.randomness import secret_rng

__all__ = ["nb_mixture", "ce_like", "CE_KNOWN"]

#: The intruder-known pattern variables of seed 002 Section 2.3 (40 patterns).
CE_KNOWN = ["gender", "age", "region"]


def nb_mixture(
    n: int = 1000,
    seed: int | np.random.Generator | None = None,
    weights: tuple[float, float] = (0.7, 0.3),
    mu: tuple[float, float] = (100.0, 100.0),
    phi: tuple[float, float] = (20.0, 5.0),
) -> pd.DataFrame:
    """Seed 002's simulated counts: ``y ~ sum_k w_k NB(mu_k, phi_k)`` (NB2: mean mu, variance
    mu + mu^2/phi), n records, one known pattern.

    Returns a DataFrame with columns ``y`` (int64 count) and ``component`` (1 or 2, the latent
    mixture label, for diagnostics only). Use ``known=[]`` for the single pattern.
    """
    n = int(n)
    if n < 2:
        raise ValueError(f"n must be at least 2; got {n}.")
    w = np.asarray(weights, dtype=float)
    if w.shape != (2,) or (w < 0).any() or not np.isclose(w.sum(), 1.0):
        raise ValueError(f"weights must be two non-negative numbers summing to 1; got {weights}.")
    rng = secret_rng(seed)
    comp = np.where(rng.random(n) < w[0], 0, 1)
    mu_i = np.asarray(mu, dtype=float)[comp]
    phi_i = np.asarray(phi, dtype=float)[comp]
    # numpy's negative_binomial(n, p) counts failures before n successes: mean n(1-p)/p, so
    # n = phi, p = phi / (phi + mu) gives mean mu and variance mu + mu^2 / phi.
    y = rng.negative_binomial(phi_i, phi_i / (phi_i + mu_i))
    return pd.DataFrame({"y": y.astype(np.int64), "component": comp + 1})


def ce_like(
    n: int = 6208,
    seed: int | np.random.Generator | None = None,
    loss_share: float = 0.01,
) -> pd.DataFrame:
    """A CE-like sample: ten categorical predictors and a skewed ``income`` (dollars).

    Columns: gender (2), age (5), education (8), region (4), urban (2), marital (5), urban_type
    (3), cbsa (3), family_size (1-11), earner (1 = earner, 2 = not an earner) as in seed 002 Table 1,
    and income. log income is linear in education, age, earner, family size, region and urban
    status, with normal noise; 3% of records get an extra heavy (exponential) right tail on the log
    scale, and ``loss_share`` of records have a small loss or near-zero income, uniform on
    (-7000, 2000) dollars, as the CE's business and investment losses. Known patterns:
    ``CE_KNOWN = ["gender", "age", "region"]`` (40 patterns).
    """
    n = int(n)
    if n < 50:
        raise ValueError(f"n must be at least 50 for 40 known patterns to be populated; got {n}.")
    if not 0 <= loss_share < 0.5:
        raise ValueError(f"loss_share must be in [0, 0.5); got {loss_share}.")
    rng = secret_rng(seed)

    def cat(levels, p):
        p = np.asarray(p, dtype=float)
        return rng.choice(np.asarray(levels, dtype=object), size=n, p=p / p.sum())

    gender = cat(["male", "female"], [0.47, 0.53])
    age_levels = ["<30", "30-44", "45-54", "55-64", "65+"]
    age_idx = rng.choice(5, size=n, p=[0.17, 0.26, 0.18, 0.18, 0.21])
    educ = rng.choice(np.arange(1, 9), size=n, p=[0.04, 0.08, 0.26, 0.20, 0.10, 0.19, 0.09, 0.04])
    region = cat(["Northeast", "Midwest", "South", "West"], [0.18, 0.22, 0.37, 0.23])
    urban = cat(["urban", "rural"], [0.93, 0.07])
    marital = cat(["married", "widowed", "divorced", "separated", "never married"], [0.48, 0.10, 0.15, 0.03, 0.24])
    urban_type = cat(["central city", "other urban", "rural"], [0.35, 0.55, 0.10])
    cbsa = cat(["metro", "micro", "none"], [0.84, 0.09, 0.07])
    family_size = np.minimum(1 + rng.geometric(0.42, size=n) - 1 + (rng.random(n) < 0.5), 11)
    p_not_earner = np.array([0.08, 0.07, 0.10, 0.22, 0.70])[age_idx]
    earner = np.where(rng.random(n) < p_not_earner, 2, 1)

    age_eff = np.array([-0.45, 0.0, 0.12, 0.05, -0.15])[age_idx]
    region_eff = pd.Series({"Northeast": 0.08, "Midwest": 0.0, "South": -0.06, "West": 0.07})[region].to_numpy()
    log_y = (
        10.94
        + 0.16 * (educ - 4)
        + age_eff
        - 0.80 * (earner == 2)
        + 0.07 * (np.minimum(family_size, 5) - 2)
        + region_eff
        - 0.12 * (urban == "rural")
        + rng.normal(0.0, 0.72, size=n)
    )
    tail = rng.random(n) < 0.03
    log_y = log_y + tail * rng.exponential(0.9, size=n)
    income = np.round(np.exp(log_y), -1)
    loss = rng.random(n) < loss_share
    income = np.where(loss, np.round(rng.uniform(-7000.0, 2000.0, size=n), -1), income)
    income = np.minimum(income, 1_800_000.0)
    return pd.DataFrame(
        {
            "gender": pd.Categorical(gender, categories=["male", "female"]),
            "age": pd.Categorical(np.asarray(age_levels, dtype=object)[age_idx], categories=age_levels, ordered=True),
            "education": educ.astype(np.int64),
            "region": pd.Categorical(region, categories=["Northeast", "Midwest", "South", "West"]),
            "urban": pd.Categorical(urban, categories=["urban", "rural"]),
            "marital": pd.Categorical(marital),
            "urban_type": pd.Categorical(urban_type),
            "cbsa": pd.Categorical(cbsa),
            "family_size": family_size.astype(np.int64),
            "earner": earner.astype(np.int64),
            "income": income,
        }
    )
