"""The result of a design-based test (R's ``htest``): statistic, reference distribution, p.

Shared by the tests of :mod:`.design_tests` (``svychisq``, ``svyttest``, ``svyranktest``) and
:mod:`.regtest` (``regTermTest``, ``anova``), below both so that neither imports the other
for it. ``surveysynth.analysis.TestResult`` is the public name. Changes when what a test
result reports changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["TestResult"]


@dataclass(frozen=True)
class TestResult:
    """A design-based test: statistic, its reference distribution's parameters, p value.

    ``parameter`` holds the df (``{"df": ...}`` or ``{"ndf": ..., "ddf": ...}``); ``estimate``
    and ``conf_int`` are set by the t-type tests; ``details`` keeps intermediate quantities
    (Pearson X^2, Delta's eigenvalues, ...).
    """

    __test__ = False  # not a pytest class

    method: str
    statistic: float
    statistic_name: str
    parameter: dict[str, float]
    p_value: float
    estimate: float | None = None
    conf_int: tuple[float, float] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        par = ", ".join(f"{k} = {v:.6g}" for k, v in self.parameter.items())
        lines = [self.method, f"{self.statistic_name} = {self.statistic:.6g}, {par}, "
                 f"p-value = {self.p_value:.6g}"]
        if self.estimate is not None:
            lines.append(f"estimate: {self.estimate:.6g}")
        if self.conf_int is not None:
            lines.append(f"95 percent confidence interval: {self.conf_int[0]:.6g} "
                         f"{self.conf_int[1]:.6g}")
        return "\n".join(lines)
