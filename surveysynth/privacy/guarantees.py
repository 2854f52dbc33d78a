"""The exact wording of every privacy guarantee the package can attach to a release.

A release manifest names one of these keys and carries its text verbatim, so that no
release ever claims more than its mechanism delivers.
"""

from __future__ import annotations

GUARANTEES: dict[str, str] = {
    "pseudo_posterior": (
        "asymptotic, database-local (epsilon, delta)-probabilistic differential privacy: each "
        "draw from the risk-weighted pseudo posterior satisfies 2*Delta_alpha-DP asymptotically, "
        "for the confidential database at hand (Savitsky, Williams & Hu); m draws compose to "
        "epsilon = 2*Delta_alpha*m. Not a worst-case (global) epsilon-DP guarantee."
    ),
    "kng": (
        "pure epsilon-differential privacy under exact sampling from the K-norm gradient "
        "mechanism (Reimherr & Awan); the release draws by MCMC, so the guarantee holds only to "
        "the extent the chain has converged to the KNG density."
    ),
    "laplace_local": (
        "Laplace mechanism calibrated to local (data-dependent) sensitivity over the published "
        "cells, as in Hu, Savitsky & Williams' baseline; local sensitivity does not give a formal "
        "worst-case epsilon-DP guarantee."
    ),
    "identification_risk": (
        "no formal differential privacy guarantee: likelihood contributions are downweighted by "
        "identification risk (Hu, Savitsky & Williams); disclosure risk is measured, not bounded."
    ),
    "none": "no privacy protection: synthetic data from the unweighted model.",
}
