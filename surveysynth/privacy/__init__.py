"""Privacy: risk weights, identification risk, the Laplace baseline and guarantee labels."""

from __future__ import annotations

from .._lazy import lazy_getattr
from .guarantees import GUARANTEES

_EXPORTS = {
    "identification_risk": ".identification",
    "risk_weights": ".identification",
    "data_risk": ".identification",
    "whack_a_mole": ".identification",
    "plot_whack_a_mole": ".identification",
    "plot_risk_violins": ".identification",
    "bootstrap_estimates": ".identification",
    "record_bounds": ".lipschitz",
    "lipschitz_bound": ".lipschitz",
    "LaplaceTables": ".laplace",
    "budget_split": ".laplace",
    "lipschitz_weights": ".lipschitz",
    "laplace_tables": ".laplace",
}
__all__ = sorted(_EXPORTS) + ["GUARANTEES"]
__getattr__ = lazy_getattr(__name__, _EXPORTS)
