"""Estimation engines, found through a registry: the estimation core never imports an engine.

* :data:`ENGINES` is the internal registry ``{name: (required_module, EngineClass)}``. The
  native engine registers itself here; :func:`register_engine` adds one at run time.
* Optional engines register through the entry-point group ``surveysynth.engines``: this
  distribution declares ``samplics`` (:mod:`surveysynth.engines.samplics_engine`), ``dask``
  (:mod:`surveysynth.engines.dask_engine`) and ``r`` (:mod:`r_bridge.engine`) in
  pyproject.toml, and any other package may declare its own.
* :func:`list_engines` (cached) gives the installed engines; :func:`refresh_engines` clears
  the cache (after installing one, or after :func:`register_engine`).
* :func:`get_engine` gives an engine for ``engine="..."``: an unknown name is a ValueError
  listing the installed engines; a known engine whose dependency is missing is an
  :class:`EngineNotAvailableError` naming what to install.
"""

from __future__ import annotations

import warnings
from functools import cache, lru_cache
from importlib.metadata import entry_points
from typing import Any

from .base import Engine, module_available
from .native import NativeEngine

ENTRY_POINT_GROUP = "surveysynth.engines"

#: name -> (required module, engine class); built-in engines register themselves here
ENGINES: dict[str, tuple[str | None, type[Engine]]] = {
    NativeEngine.name: (NativeEngine.required_module, NativeEngine),
}

#: first-party optional engines: name -> (required module, what to install); used for the
#: "known but not installed" message when the engine's entry point cannot load
KNOWN_OPTIONAL: dict[str, tuple[str, str]] = {
    "samplics": ("samplics", "pip install 'samplics==0.6.1' (a dependency of surveysynth)"),
    "r": ("rpy2", "pip install 'surveysynth[r]' and R with the survey package "
                  "(scripts/setup.sh installs both)"),
    "dask": ("distributed", "pip install 'surveysynth[dask]' (dask[dataframe,distributed])"),
}


class EngineNotAvailableError(ImportError):
    """A known engine whose required module is not installed."""


def register_engine(engine: type[Engine]) -> type[Engine]:
    """Add an engine class to the internal registry (usable as a class decorator)."""
    if not (isinstance(engine, type) and issubclass(engine, Engine)) or not engine.name:
        raise TypeError(f"register_engine: {engine!r} is not an Engine subclass with a name.")
    ENGINES[engine.name] = (engine.required_module, engine)
    refresh_engines()
    return engine


def _from_entry_points() -> tuple[dict[str, type[Engine]], dict[str, str]]:
    """Engines declared in the entry-point group; (loaded, {name: why it failed})."""
    loaded: dict[str, type[Engine]] = {}
    failed: dict[str, str] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in ENGINES or ep.name in loaded:
            if ep.name in loaded:
                warnings.warn(f"surveysynth engine {ep.name!r} is declared twice; the first is "
                              "used.", RuntimeWarning, stacklevel=3)
            continue
        try:
            cls = ep.load()
        except ImportError as exc:
            failed[ep.name] = str(exc)
            continue
        except Exception as exc:  # a broken plugin must not break estimation
            warnings.warn(f"surveysynth engine {ep.name!r} failed to load ({exc!r}); it is "
                          "ignored.", RuntimeWarning, stacklevel=3)
            failed[ep.name] = repr(exc)
            continue
        if not (isinstance(cls, type) and issubclass(cls, Engine)):
            warnings.warn(f"surveysynth engine {ep.name!r} points at {cls!r}, not an Engine "
                          "subclass; it is ignored.", RuntimeWarning, stacklevel=3)
            continue
        loaded[ep.name] = cls
    return loaded, failed


@lru_cache(maxsize=1)
def _all_engines() -> tuple[dict[str, type[Engine]], dict[str, str]]:
    classes = {name: cls for name, (_, cls) in ENGINES.items()}
    loaded, failed = _from_entry_points()
    classes.update(loaded)
    return classes, failed


def list_engines() -> dict[str, type[Engine]]:
    """The installed engines, ``{name: EngineClass}`` (cached; see :func:`refresh_engines`)."""
    classes, _ = _all_engines()
    return {name: cls for name, cls in classes.items() if cls.available}


def refresh_engines() -> None:
    """Forget the cached engine list (after installing an engine or registering one)."""
    _all_engines.cache_clear()
    _instance.cache_clear()


@cache
def _instance(cls: type[Engine]) -> Engine:
    return cls()


def get_engine(name: str | Engine | type[Engine], kind: str | None = None) -> Engine:
    """The engine for ``engine=name`` (a name, an Engine class or instance).

    ``kind`` (``"taylor"`` or ``"replicate"``) checks that the engine estimates that design
    kind. Raises ValueError for an unknown name or an unsupported design kind, and
    :class:`EngineNotAvailableError` for a known engine that is not installed.
    """
    if isinstance(name, Engine):
        engine = name
    elif isinstance(name, type) and issubclass(name, Engine):
        engine = _instance(name)
    else:
        engine = _instance(_engine_class(name))
    if kind is not None and kind not in engine.design_kinds:
        supporting = sorted(n for n, c in list_engines().items() if kind in c.design_kinds)
        raise ValueError(
            f"engine={engine.name!r} does not estimate {kind} designs: use engine= one of "
            f"{supporting}."
        )
    return engine


def _engine_class(name: Any) -> type[Engine]:
    if name in ENGINES:  # built-in: no entry point is read
        cls = ENGINES[name][1]
        if cls.available:
            return cls
        raise EngineNotAvailableError(
            f"engine={name!r} needs {cls.required_module!r}, which is not installed: "
            f"{cls.install_hint or 'install it'}."
        )
    classes, failed = _all_engines()
    if name in classes and classes[name].available:
        return classes[name]
    if name in classes or name in failed or name in KNOWN_OPTIONAL:
        module, hint = KNOWN_OPTIONAL.get(name, (None, None))
        cls = classes.get(name)
        if cls is not None:
            module, hint = cls.required_module, cls.install_hint or hint
        why = f" ({failed[name]})" if name in failed else ""
        raise EngineNotAvailableError(
            f"engine={name!r} is known but not installed: it needs {module!r}{why}. "
            f"Fix: {hint or 'install it'}."
        )
    raise ValueError(
        f"engine={name!r} is unknown: choose one of {sorted(list_engines())} (engines register "
        f"through the {ENTRY_POINT_GROUP!r} entry-point group)."
    )


__all__ = [
    "ENGINES",
    "ENTRY_POINT_GROUP",
    "Engine",
    "EngineNotAvailableError",
    "NativeEngine",
    "get_engine",
    "list_engines",
    "module_available",
    "refresh_engines",
    "register_engine",
]
