"""Versions of the package and of the libraries a release depends on (for manifests)."""

from __future__ import annotations

import sys
from importlib import metadata

_PACKAGES = ("numpy", "scipy", "pandas", "pyarrow", "pystan", "httpstan", "opendp", "arviz",
             "matplotlib")


def versions() -> dict[str, str]:
    """``{"surveysynth": ..., "python": ..., <library>: version or "not installed"}``."""
    from . import __version__

    out = {"surveysynth": __version__, "python": sys.version.split()[0]}
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out
