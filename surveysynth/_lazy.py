"""Lazy attribute loading for subpackages.

Subpackages map public names to the module that defines them, so that importing
``surveysynth`` stays cheap (no Stan, no R) and heavy modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any


def lazy_getattr(package: str, mapping: dict[str, str]):
    """Return a module-level ``__getattr__`` resolving ``mapping[name]`` (a module path)."""

    def __getattr__(name: str) -> Any:
        try:
            module = mapping[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(module, package), name)

    return __getattr__
