"""SDR-like population and stratified PPS samples (seed 001 Section 3.1; METHODS section 10).

The population has N = 100,000 units in 8 fields x 2 genders with the exact cell counts of the
Survey of Doctorate Recipients public use file as used in seed 001, lognormal salaries with the
paper's cell means, and a size measure informative of salary (log size = log salary + noise).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..sampling import inclusion_probabilities, pps_systematic, proportional_allocation

__all__ = ["sdr_population", "sdr_sample", "SDR_COUNTS", "SDR_MEANS"]

_FIELDS = np.arange(1, 9)
#: exact population cell counts (rows: gender, columns: field 1..8), METHODS section 10
SDR_COUNTS = pd.DataFrame(
    {
        "male": [14599, 1951, 2918, 12381, 3861, 6433, 14358, 2033],
        "female": [13364, 783, 1117, 5728, 7336, 6409, 3773, 2956],
    },
    index=pd.Index(_FIELDS, name="field"),
).T.rename_axis("gender")
#: target cell mean salaries (seed 001 Table 4, "Pop." column)
SDR_MEANS = pd.DataFrame(
    {
        "male": [121125, 146916, 118338, 122601, 120531, 122676, 136370, 137349],
        "female": [99226, 125358, 105081, 100618, 98060, 97595, 116566, 106388],
    },
    index=pd.Index(_FIELDS, name="field"),
).T.rename_axis("gender").astype(float)

_SDLOG = 0.4
_NOISE_SD = 0.4


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def sdr_population(
    seed: int | np.random.Generator | None = None,
    sdlog: float = _SDLOG,
    noise_sd: float = _NOISE_SD,
    exact_means: bool = True,
) -> pd.DataFrame:
    """Simulate the SDR-like population of seed 001 Section 3.1.

    Columns: ``field`` (int 1-8), ``gender`` ("male"/"female"), ``salary`` and ``size`` (the
    PPS size measure). Salary in cell (f, g) is LN(mu_fg, sdlog) with
    mu_fg = log(target mean_fg) - sdlog^2 / 2; log size = log salary + e, e ~ N(0, noise_sd^2).
    Rows are ordered by field, then gender (male first), then at random.

    Decision (``exact_means=True``): the salaries of each cell are multiplied by one constant so
    that the finite-population cell mean equals the paper's target exactly (seed 001's "Pop."
    column equals the targets to the dollar). A common factor per cell leaves the log-scale
    spread (sdlog) and the lognormal shape untouched; it moves mu_fg by the sampling error of
    the cell mean (below 1.5% even in the smallest cell). The size is drawn after rescaling.
    """
    rng = _rng(seed)
    counts = SDR_COUNTS.stack().rename("N")  # index (gender, field), male rows first
    field = np.repeat(counts.index.get_level_values("field").to_numpy(), counts.to_numpy())
    gender = np.repeat(counts.index.get_level_values("gender").to_numpy(), counts.to_numpy())
    target = np.repeat(SDR_MEANS.stack().reindex(counts.index).to_numpy(), counts.to_numpy())
    N = int(counts.sum())
    mu = np.log(target) - sdlog**2 / 2
    salary = np.exp(mu + sdlog * rng.standard_normal(N))
    cell = np.repeat(np.arange(counts.size), counts.to_numpy())
    if exact_means:
        cell_mean = np.bincount(cell, weights=salary) / counts.to_numpy()
        salary = salary * (target / cell_mean[cell])
    size = np.exp(np.log(salary) + noise_sd * rng.standard_normal(N))
    pop = pd.DataFrame(
        {
            "field": field.astype(np.int64),
            "gender": gender.astype(object),
            "salary": salary,
            "size": size,
        }
    )
    order = np.lexsort((rng.permutation(N), pop["gender"] != "male", pop["field"]))
    return pop.iloc[order].reset_index(drop=True)


def sdr_sample(
    population: pd.DataFrame,
    n: int = 1000,
    seed: int | np.random.Generator | None = None,
    shuffle: bool = True,
    return_data: bool = False,
) -> Any:
    """Stratified PPS sample of ``population`` as in seed 001 Section 3.1.

    Strata are fields; n is allocated proportionally to the field sizes (largest remainders);
    within a field pi_i = inclusion_probabilities(size, n_h) and the units are drawn by
    systematic PPS in random order (``shuffle=True``), so the per-field sample sizes are exact.
    Returns a ``SurveyDesign(data, strata="field", weights="weight")`` whose data hold
    ``field, gender, salary, weight`` (w = 1/pi) (``return_data=True`` returns the DataFrame
    alone). No fpc is given: the variance is the with-replacement (PPS) approximation used in
    the papers.
    """
    required = {"field", "gender", "salary", "size"}
    missing = required - set(population.columns)
    if missing:
        raise ValueError(
            f"population lacks columns {sorted(missing)}; build it with sdr_population()."
        )
    rng = _rng(seed)
    alloc = proportional_allocation(population["field"].to_numpy(), n)
    pik = inclusion_probabilities(
        population["size"].to_numpy(), alloc, strata=population["field"].to_numpy()
    )
    mask = pps_systematic(pik, strata=population["field"].to_numpy(), seed=rng, shuffle=shuffle)
    data = population.loc[mask, ["field", "gender", "salary"]].reset_index(drop=True)
    data["weight"] = 1.0 / pik[mask]
    if return_data:
        return data
    from ..design import SurveyDesign

    return SurveyDesign(data, strata="field", weights="weight")
