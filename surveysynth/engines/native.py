"""``engine="native"``: the design's own vectorized numpy estimators (the default).

Registers itself with the core's registry; the estimators call the design's
``domain_ratios`` hook directly when this engine is chosen.
"""

from __future__ import annotations

from .base import Engine


class NativeEngine(Engine):
    """The vectorized numpy/scipy implementation, tested against R ``survey``."""

    name = "native"
    description = "vectorized numpy/scipy (Taylor linearization and replicate weights)"
    native = True
