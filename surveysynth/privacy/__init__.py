"""Privacy: risk weights, identification risk, the Laplace baseline and guarantee labels."""

from __future__ import annotations

from .._lazy import lazy_getattr

_EXPORTS = {
    "identification_risk": ".identification",
    "risk_weights": ".identification_weights",
    "data_risk": ".identification",
    "whack_a_mole": ".identification_report",
    "plot_whack_a_mole": ".identification_report",
    "plot_risk_violins": ".identification_report",
    "bootstrap_estimates": ".identification_report",
    "record_bounds": ".lipschitz",
    "lipschitz_bound": ".lipschitz",
    "LaplaceTables": ".laplace",
    "budget_split": ".laplace",
    "lipschitz_weights": ".lipschitz",
    "laplace_tables": ".laplace",
    "PrivacyRecord": ".record",
    "build_record": ".record",
    "secret_rng": ".randomness",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
