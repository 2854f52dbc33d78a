"""Seed 004's heavy-tailed simulation design (Section 4.1)."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["kng_simulation"]


def kng_simulation(n: int = 5000, seed: int | np.random.Generator | None = None) -> pd.DataFrame:
    """Simulate X1 ~ Exp(rate 0.1); X2 = 4 + 3 X1 + Exp(0.1); X3 = 3 + 2 X1 + X2 + Exp(0.1).

    Exp(0.1) has rate 0.1 (mean 10), as R's ``rexp(n, 0.1)`` in the authors' code. The paper
    draws independent training and test sets of n = 5000 each: call twice with different seeds.
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"n must be a positive integer; got {n}.")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    e = rng.exponential(10.0, size=(3, n))
    x1 = e[0]
    x2 = 4.0 + 3.0 * x1 + e[1]
    x3 = 3.0 + 2.0 * x1 + x2 + e[2]
    return pd.DataFrame({"X1": x1, "X2": x2, "X3": x3})
