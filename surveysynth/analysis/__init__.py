"""Design-based analysis: survey-weighted GLMs and tests (R ``svyglm``, ``svychisq``,
``svyttest``, ``svyranktest``), on linearization and replicate designs.

Sits above the estimation core and the combining rules, below privacy and releases
(``SyntheticRelease.glm`` combines :func:`svyglm` over synthetic sets).
"""

from __future__ import annotations

from .design_tests import TestResult, svychisq, svyranktest, svyttest
from .glm import GLMResults, GLMSummary, svyglm

__all__ = ["GLMResults", "GLMSummary", "TestResult", "svychisq", "svyglm", "svyranktest",
           "svyttest"]
