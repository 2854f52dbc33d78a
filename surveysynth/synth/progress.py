"""Progress of long fits as events, for whoever shows them.

The fitting code reports what it does to the current *listener*: the Stan runner
(:func:`surveysynth.synth._stan.run_stan`) when a run starts, how far its sampling is, how its
program was found (cached or compiled) and when it ends with its convergence gates; the KNG
quantile regressions each regression done; and any line of pystan's output that is neither
progress nor one of Stan's known notes (a real error). The console of ``surveysynth release``
(``pipeline.Console``) is such a listener: it turns the events into its step lines, so it
never reads the fit's printed output (issue 38). Without a listener nothing is reported; a
synthesizer's own ``progress=True`` output (pystan's and tqdm's bars) is separate from this.

A listener implements :class:`ProgressListener` (every method; ``NullListener`` is a base
with no-ops). :func:`listening` installs one for a block (a context variable: threads started
through ``contextvars.copy_context`` see it, other concurrent jobs do not).

Changes when what the fitting code reports changes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

__all__ = ["NullListener", "ProgressListener", "emit", "listening", "progress_bar"]


class ProgressListener(Protocol):
    """What a listener is told. ``label`` names the unit of work (a Stan run's label, a bar's
    description); counts are iterations or units done so far and their total."""

    def on_fit_start(self, label: str) -> None:
        """A Stan run starts (before its program is looked up or compiled)."""

    def on_compile(self, label: str, status: str, seconds: float) -> None:
        """The run's program is ready: ``status`` "cached", "compiled" or "repaired"."""

    def on_fit_progress(self, label: str, done: int, total: int) -> None:
        """Sampling iterations done so far, over all chains (pystan's count)."""

    def on_fit_end(self, label: str, gates: Mapping[str, Any]) -> None:
        """A Stan run ended; ``gates``: its summary (max_rhat, min_ess_bulk, divergences,
        problems, seconds_build, seconds_sample, ...)."""

    def on_step(self, label: str, done: int, total: int) -> None:
        """A unit of work that is not a Stan run (one KNG quantile regression) is done."""

    def on_message(self, text: str) -> None:
        """A line of the sampler's output that is neither progress nor a known note."""


class NullListener:
    """A listener that ignores every event (a base for listeners of a few events)."""

    def on_fit_start(self, label: str) -> None:
        return None

    def on_compile(self, label: str, status: str, seconds: float) -> None:
        return None

    def on_fit_progress(self, label: str, done: int, total: int) -> None:
        return None

    def on_fit_end(self, label: str, gates: Mapping[str, Any]) -> None:
        return None

    def on_step(self, label: str, done: int, total: int) -> None:
        return None

    def on_message(self, text: str) -> None:
        return None


_LISTENER: contextvars.ContextVar[ProgressListener | None] = contextvars.ContextVar(
    "surveysynth_progress_listener", default=None)


@contextlib.contextmanager
def listening(listener: ProgressListener | None) -> Iterator[None]:
    """Report the fits run inside the block to ``listener`` (None: to nobody)."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def active() -> bool:
    """Whether a listener is installed (emitters may skip work done only for it)."""
    return _LISTENER.get() is not None


def emit(event: str, *args: Any) -> None:
    """Call ``listener.<event>(*args)`` on the current listener, if any."""
    listener = _LISTENER.get()
    if listener is not None:
        getattr(listener, event)(*args)


def progress_bar(*, total: int, desc: str, disable: bool) -> Any:
    """A tqdm bar (shown unless ``disable``) whose ``update`` also reports
    ``on_step(desc, done, total)`` to the current listener (``done`` 0 when it is made)."""
    from tqdm.auto import tqdm

    class _Reporting(tqdm):  # type: ignore[misc, valid-type]
        done = 0  # counted here: a disabled tqdm bar does not count

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            self.done += 1 if n is None else int(n)
            emit("on_step", desc, self.done, int(total))
            return shown

    bar = _Reporting(total=total, desc=desc, disable=disable)
    emit("on_step", desc, 0, int(total))  # the work starts (the listener's clock for an ETA)
    return bar
