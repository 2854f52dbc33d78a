"""The language boundary: R ``survey``/``sampling`` through rpy2, and an R package (rpkg/).

rpy2 is imported lazily, so ``import surveysynth`` works without R. Every R call goes through
:func:`r_session`, which serializes calls (R is single-threaded) with one process-wide lock and
sets rpy2's conversion rules for the calling thread (rpy2 keeps them in a contextvar, so a
worker thread would otherwise see none).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_LOCK = threading.RLock()
_INSTALL_HINT = (
    "R features need R and rpy2. On Debian/Ubuntu: apt-get install r-base-core r-base-dev "
    "r-cran-survey r-cran-sampling r-cran-mitools r-cran-reticulate, then "
    "pip install 'rpy2>=3.5.17,<3.6' (or: pip install 'surveysynth[r]')."
)


class RNotAvailableError(ImportError):
    """R or rpy2 (or a needed R package) is missing."""


class RError(RuntimeError):
    """An error raised by R; the message is R's own."""


# rpy2 prepends R's library folders to LD_LIBRARY_PATH in os.environ when R starts. The running
# process has already loaded its libraries, so the change only reaches child processes, where it
# breaks other Pythons (their _ssl then binds Debian's OpenSSL: pyarrow and friends fail to
# import). The value from before R started is restored right after.
_LD_LIBRARY_PATH_AT_IMPORT = os.environ.get("LD_LIBRARY_PATH")


def _restore_library_path() -> None:
    if _LD_LIBRARY_PATH_AT_IMPORT is None:
        os.environ.pop("LD_LIBRARY_PATH", None)
    else:
        os.environ["LD_LIBRARY_PATH"] = _LD_LIBRARY_PATH_AT_IMPORT


def _import_rpy2():
    try:
        import rpy2.robjects as ro
        from rpy2.robjects.conversion import localconverter
    except Exception as exc:  # rpy2 missing, or R missing under it
        raise RNotAvailableError(f"{_INSTALL_HINT} (import failed: {exc})") from exc
    finally:
        _restore_library_path()
    _quiet_empty_library_warning()
    return ro, localconverter


def _quiet_empty_library_warning() -> None:
    """Drop R's startup note that an (empty) site library holds no packages.

    Debian's R lists /usr/local/lib/R/site-library, empty on a fresh machine, and R says so on
    every ``library()``; that line is noise to a user. Every other R message still reaches
    rpy2's own console callback.
    """
    from rpy2.rinterface_lib import callbacks

    current = callbacks.consolewrite_warnerror
    if getattr(current, "surveysynth_filter", False):
        return
    pending: list[str] = []

    def filtered(text: str) -> None:
        # R writes the warning in pieces: hold the "In addition"/"Warning message" preamble
        # until we see whether the message is the empty-library note
        if "contains no packages" in text:
            pending.clear()
            return
        if text.strip() in ("", "In addition:", "Warning message:") or text.lstrip().startswith(
            "In (function (package, help"
        ):
            pending.append(text)
            return
        for held in pending:
            current(held)
        pending.clear()
        current(text)

    filtered.surveysynth_filter = True  # type: ignore[attr-defined]
    callbacks.consolewrite_warnerror = filtered


_PACKAGES: dict[str, Any] = {}


@contextmanager
def r_session(*packages: str) -> Iterator[tuple[Any, dict[str, Any]]]:
    """Lock R, set rpy2's default converter for this thread, load R packages.

    Yields ``(robjects, {name: package})``. R errors inside become :class:`RError` with R's
    message.
    """
    ro, localconverter = _import_rpy2()
    from rpy2.rinterface_lib.embedded import RRuntimeError
    from rpy2.robjects.packages import PackageNotInstalledError, importr

    with _LOCK, localconverter(ro.default_converter):
        pk = {}
        for name in packages:
            if name not in _PACKAGES:
                try:
                    _PACKAGES[name] = importr(name)
                except PackageNotInstalledError as exc:
                    raise RNotAvailableError(
                        f"R package {name!r} is not installed. {_INSTALL_HINT}"
                    ) from exc
            pk[name] = _PACKAGES[name]
        try:
            yield ro, pk
        except RRuntimeError as exc:
            raise RError(str(exc).strip()) from exc


def r_available() -> bool:
    """True when rpy2 imports and R runs."""
    try:
        with r_session() as (ro, _):
            ro.r("1")
        return True
    except RNotAvailableError:
        return False


_EXPORTS = {
    "to_r": "r_bridge.designs",
    "from_r": "r_bridge.designs",
    "pandas_to_r": "r_bridge.convert",
    "r_to_pandas": "r_bridge.convert",
    "inclusion_probabilities_r": "r_bridge.sampling",
    "pps_sample_r": "r_bridge.sampling",
}


def __getattr__(name: str) -> Any:
    """Lazy access to the bridge's functions (no rpy2 import until one is called)."""
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'r_bridge' has no attribute {name!r}")
