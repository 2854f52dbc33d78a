"""Shared Stan runner: build through pystan (compiled once, cached by httpstan), sample, and check
convergence (rank-normalised split R-hat and bulk ESS, Vehtari et al. 2021).

Used by the pseudo posterior synthesizers (FBS, FBP, PBP) and available to other synthesizers:
``run_stan(program_code, data, chains, draws, warmup, seed, progress, init=None)``.
Draws come back with the DRAW axis FIRST (shape ``(chains * draws, *dims)``, chain-major), the
opposite of pystan's own convention.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import io
import json
import re
import shutil
import sys
import time
import warnings
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from . import progress as _progress
from .stan_build import ensure_compiled

__all__ = [
    "ConvergenceWarning",
    "StanDraws",
    "StanMessageFilter",
    "StanUnavailableError",
    "check_stan_kwargs",
    "convergence_diagnostics",
    "ess_bulk",
    "load_program",
    "release_sampler_pool",
    "rhat",
    "run_stan",
]


class ConvergenceWarning(UserWarning):
    """MCMC diagnostics (R-hat, ESS, divergences) indicate an unreliable posterior sample."""


class StanUnavailableError(RuntimeError):
    """pystan / the C++ toolchain needed to compile a Stan program is not available."""


def load_program(name: str) -> str:
    """Text of ``surveysynth/synth/stan/<name>.stan`` (identical text => httpstan cache hit)."""
    return resources.files("surveysynth.synth").joinpath("stan", f"{name}.stan").read_text()


# --------------------------------------------------------------------------------------------
# diagnostics: ArviZ (rank-normalised split R-hat and bulk ESS, Vehtari et al. 2021)


def _arviz():
    import warnings as _w

    with _w.catch_warnings():
        _w.simplefilter("ignore", FutureWarning)  # ArviZ's refactor notice on import
        import arviz

    return arviz


def _as_cdp(x: np.ndarray) -> tuple[np.ndarray, bool]:
    x = np.asarray(x, dtype=float)
    squeeze = x.ndim == 2
    return (x[..., None] if squeeze else x), squeeze


def rhat(x: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat (max of bulk and folded), by ArviZ (``method="rank"``).

    ``x``: (chains, draws) or (chains, draws, P).
    """
    x, squeeze = _as_cdp(x)
    out = np.asarray(_arviz().rhat(_arviz().convert_to_dataset({"x": x}), method="rank")["x"])
    return out[0] if squeeze else out


def ess_bulk(x: np.ndarray) -> np.ndarray:
    """Bulk effective sample size by ArviZ (``method="bulk"``). ``x``: (chains, draws[, P])."""
    x, squeeze = _as_cdp(x)
    out = np.asarray(_arviz().ess(_arviz().convert_to_dataset({"x": x}), method="bulk")["x"])
    return out[0] if squeeze else out


def convergence_diagnostics(chains_draws: np.ndarray, names: list[str]) -> pd.DataFrame:
    """R-hat and bulk ESS for a (chains, draws, P) array; one row per parameter name."""
    return pd.DataFrame(
        {"rhat": rhat(chains_draws), "ess_bulk": ess_bulk(chains_draws)},
        index=pd.Index(names, name="parameter"),
    )


# --------------------------------------------------------------------------------------------
# running pystan


@dataclasses.dataclass
class StanDraws:
    """Posterior draws (draw axis first) with sampler diagnostics.

    ``draws[name]`` has shape ``(chains * draws, *dims)``, chain-major (chain 0 first).
    ``diagnostics`` has R-hat and bulk ESS per scalar parameter (excluding ``skip_diagnostics``),
    ``summary`` the worst values, divergences, maximum tree depth hits, and timings.
    """

    draws: dict[str, np.ndarray]
    chains: int
    draws_per_chain: int
    diagnostics: pd.DataFrame
    summary: dict[str, Any]
    param_names: tuple[str, ...]
    sampler: dict[str, np.ndarray]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.draws[name]

    def __contains__(self, name: object) -> bool:
        return name in self.draws

    def keys(self):
        return self.draws.keys()

    def last_inits(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """The last draw of each chain as a pystan ``init`` list (warm starts for refits)."""
        names = list(self.param_names if names is None else names)
        out = []
        for c in range(self.chains):
            i = (c + 1) * self.draws_per_chain - 1
            out.append({k: self.draws[k][i].tolist() for k in names})
        return out


def _in_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _require_stan():
    try:
        with warnings.catch_warnings():
            # pystan imports pkg_resources (stan/plugins.py) on its first sample, and
            # setuptools warns that pkg_resources is deprecated: a library's notice about
            # pystan, not about the user's run. Imported here, once, with that warning off, so
            # it never reaches the console (sys.modules holds it for pystan's own import).
            warnings.filterwarnings("ignore", message=".*pkg_resources.*")
            warnings.simplefilter("ignore", DeprecationWarning)
            with contextlib.suppress(ImportError):
                import pkg_resources  # noqa: F401
        import stan  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the environment
        raise StanUnavailableError(
            "pystan is not importable; install it with `pip install pystan==3.10.0` "
            f"(Linux/macOS, needs a C++ compiler). Original error: {exc}"
        ) from exc
    if shutil.which("g++") is None and shutil.which("clang++") is None:  # pragma: no cover
        raise StanUnavailableError(
            "no C++ compiler (g++ or clang++) on PATH: Stan programs cannot be compiled. "
            "Install build-essential (Debian/Ubuntu) or Xcode command line tools (macOS)."
        )
    return stan


def release_sampler_pool() -> None:
    """Shut down httpstan's pool of sampling processes and leave a fresh, empty one in its place.

    Why: httpstan samples in a module-level ``ProcessPoolExecutor`` whose processes are forked
    on the first sample and live as long as the interpreter. A process that must exit when its
    work is done (a worker of Sequential's parallel step fits, a Dask worker task) otherwise
    hangs at exit: multiprocessing joins its children before the pool is told to stop
    (measured: the step fits' results came back and the pool's shutdown waited forever). The
    new pool starts no process until the next sample, so the caller can exit at once or keep
    sampling. Call it only where no sampling is running in this process.
    """
    import multiprocessing

    import httpstan.services_stub as stub

    old = stub.executor
    stub.executor = concurrent.futures.ProcessPoolExecutor(
        mp_context=multiprocessing.get_context("fork"), initializer=stub.init_worker)
    old.shutdown(wait=True)


def _delete_own_fits(post: Any, kw: dict[str, Any]) -> None:
    """Delete the fit files httpstan wrote to its disk cache for THIS sampling call.

    httpstan keeps every seeded fit on disk (~/.cache/httpstan/.../fits) so that an identical
    request is answered from cache; a tuning loop refits many times and the cache grew by
    gigabytes in a day of tests. The draws are in memory once ``sample`` returns. Each fit's
    file name is the hash httpstan computes from the request (``calculate_fit_name``), so the
    requests pystan sent are rebuilt here exactly as pystan builds them and their names
    computed with httpstan's own functions (in-process server, same interpreter): only our
    fits are removed, never those of a concurrent job sampling the same model (an earlier
    version removed every file that appeared during sampling, and broke such a job).
    tests/test_stan_runner.py checks that nothing of ours is left and others' files survive.
    """
    try:
        import httpstan.cache
        import httpstan.fits
        import httpstan.schemas
        from stan.model import DataJSONEncoder

        function = "stan::services::sample::hmc_nuts_diag_e_adapt"
        kwargs = dict(kw)
        chains = int(kwargs.pop("num_chains"))
        kwargs = json.loads(DataJSONEncoder().encode(kwargs))
        inits = kwargs.pop("init", [{} for _ in range(chains)])
        for chain in range(1, chains + 1):
            payload = dict(kwargs)
            payload["function"] = function
            payload["chain"] = chain
            payload["data"] = post.data
            payload["init"] = inits[chain - 1]
            payload["random_seed"] = post.random_seed
            args = httpstan.schemas.CreateFitRequest().load(json.loads(json.dumps(payload)))
            fn = args.pop("function")
            name = httpstan.fits.calculate_fit_name(fn, post.model_name, args)
            with contextlib.suppress(OSError, KeyError):
                httpstan.cache.delete_fit(name)
    except Exception:  # never fail a fit over cache housekeeping
        return


def sample_and_forget(post: Any, kw: dict[str, Any]) -> Any:
    """``post.sample(**kw)``, then remove this call's fit files from httpstan's disk cache.

    pystan catches Ctrl-C (KeyboardInterrupt) during sampling and returns None; that is
    raised again here as KeyboardInterrupt (the caller would otherwise fail later on the
    missing fit with an AttributeError and a traceback)."""
    try:
        fit = post.sample(**kw)
    finally:
        _delete_own_fits(post, kw)
    if fit is None:
        raise KeyboardInterrupt
    return fit


class StanMessageFilter(io.TextIOBase):
    """A text stream that passes pystan's output on to ``target`` line by line, without Stan's
    informational messages about our own models: the "Informational Message: The current
    Metropolis proposal is about to be rejected ..." blocks (early warmup rejections, e.g. at
    lkj_corr_cholesky_lpdf), stanc's "has N priors" notes (the models put two priors on a
    parameter on purpose), the gradient-timing lines and the headers these leave empty. Every
    other line (real errors included) is passed through. Lines end at ``\\n`` or ``\\r``.

    ``target=None`` passes nothing on. With a ``label``, the lines also become events for the
    progress listener (:mod:`surveysynth.synth.progress`): pystan's "Sampling: p% (done/total)"
    lines ``on_fit_progress(label, done, total)``, every other kept line except pystan's build
    lines ``on_message(line)``. Reading pystan's progress text is pystan's quirk, kept here."""

    _DROP = re.compile(
        r"has \d+ priors|Gradient evaluation took|transitions using \d+ leapfrog|"
        r"Adjust your expectations|Messages received during sampling|Messages from stanc|"
        r"^\s*$")
    _BLOCK_START = re.compile(r"Informational Message")
    _PROGRESS = re.compile(r"Sampling:\s+\d+%(?: \((\d+)/(\d+)\))?")
    _BLOCK_END = re.compile(r"misspecified\.?\s*$")

    def __init__(self, target: Any, label: str | None = None) -> None:
        super().__init__()
        self._target = target
        self._label = label
        self._buf = ""
        self._in_block = False

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:  # no ANSI cursor codes: one line per message
        return False

    def write(self, s: str) -> int:
        self._buf += s
        *lines, self._buf = re.split(r"\r\n|\r|\n", self._buf)
        for line in lines:
            if self._in_block or self._BLOCK_START.search(line):
                self._in_block = not self._BLOCK_END.search(line)
                continue
            if self._DROP.search(line):
                continue
            if self._label is not None:
                self._report(line)
            if self._target is not None:
                self._target.write(line + "\n")
        return len(s)

    def _report(self, line: str) -> None:
        m = self._PROGRESS.search(line)
        if m:
            if m.group(1):
                _progress.emit("on_fit_progress", self._label, int(m.group(1)), int(m.group(2)))
        elif "Building" not in line:  # the runner reports the build itself (on_compile)
            _progress.emit("on_message", line)

    def flush(self) -> None:
        if self._target is not None:
            self._target.flush()


class _CompilerLog:
    def __init__(self) -> None:
        self.path: str | None = None

    def tail(self, lines: int = 40) -> str:
        """The last lines of the compiler's output, and the file removed."""
        if self.path is None:
            return ""
        try:
            with open(self.path, errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""
        finally:
            self.remove()

    def remove(self) -> None:
        if self.path is not None:
            import os

            with contextlib.suppress(OSError):
                os.unlink(self.path)
            self.path = None


@contextlib.contextmanager
def _compiler_output(shown: bool):
    """The C++ compiler that builds a Stan model writes to file descriptor 2 directly, past
    Python's sys.stderr (hundreds of g++ warning lines on a first build). Unless ``shown``, send
    fd 2 to a temporary file for the build; a failed build's error carries the file's tail."""
    log = _CompilerLog()
    if shown:
        yield log
        return
    import os
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    fh = tempfile.NamedTemporaryFile(prefix="surveysynth-stan-build-", suffix=".log",
                                     delete=False)
    log.path = fh.name
    try:
        os.dup2(fh.fileno(), 2)
        yield log
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        fh.close()


def _run(program_code, data, chains, draws, warmup, seed, progress, init, sample_kwargs,
         label="Stan"):
    stan = _require_stan()
    listened = _progress.active()
    sink = contextlib.redirect_stderr(
        StanMessageFilter(sys.stderr if progress else None, label if listened else None)
        if progress or listened else io.StringIO())
    t0 = time.perf_counter()
    with sink, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*pkg_resources.*")
        warnings.filterwarnings("ignore", message=".*AppKey.*")
        try:
            # the compiler's own output is never progress: kept in a log whose tail a failed
            # build's error carries (also at verbose, where pystan's progress is shown)
            with _compiler_output(shown=False) as compiler_log:
                # compiled (or repaired) outside pystan's HTTP client first: no client timeout
                # on a slow machine, no build/ folder in the working directory (stan_build)
                status = ensure_compiled(program_code)
                _progress.emit("on_compile", label, status, time.perf_counter() - t0)
                post = stan.build(program_code, data=data, random_seed=int(seed))
            compiler_log.remove()
            if post is None:  # pystan returns None when Ctrl-C interrupts its build
                raise KeyboardInterrupt
        except Exception as exc:
            msg = f"{exc}\n{compiler_log.tail()}"
            if "compil" in msg.lower() or "g++" in msg or "error" in msg.lower():
                raise StanUnavailableError(
                    f"Stan program failed to build (compiler missing or program error): {msg}"
                ) from exc
            raise
        t1 = time.perf_counter()
        kw = dict(num_chains=chains, num_samples=draws, num_warmup=warmup, **sample_kwargs)
        if init is not None:
            kw["init"] = init
        try:
            fit = sample_and_forget(post, kw)
        except RuntimeError as exc:
            if init is not None and "Initialization" in str(exc):
                kw.pop("init")
                fit = sample_and_forget(post, kw)
            else:
                raise
    t2 = time.perf_counter()
    return post, fit, t1 - t0, t2 - t1


def _chain_major(arr: np.ndarray, chains: int, draws: int) -> np.ndarray:
    """pystan's ``fit[name]`` (shape ``(*dims, draws * chains)``) as ``(chains * draws, *dims)``
    with chain 0's draws first.

    pystan 3 stores draws as (param, draw, chain) and flattens the last two axes with the
    CHAIN varying fastest: ``fit[name][..., k]`` is draw ``k // chains`` of chain
    ``k % chains`` (interleaved; checked against ``fixed_param`` fits in
    tests/test_stan_runner.py). Taking that axis as chain-major, as this module did before,
    split the draws into consecutive blocks of the interleaved sequence: every block mixed all
    chains, so R-hat could not see a chain that disagreed with the others and bulk ESS read
    independent chains as one."""
    dims = arr.shape[:-1]
    arr = arr.reshape((*dims, draws, chains))           # C order: the chain is the last axis
    arr = np.moveaxis(arr, (-1, -2), (0, 1))            # (chains, draws, *dims)
    return arr.reshape((chains * draws, *dims))


def _extract(fit: Any, chains: int, draws: int, skip_diagnostics: tuple[str, ...]):
    """pystan's draws with the draw axis first (chain-major: :func:`_chain_major`), R-hat /
    bulk ESS per scalar entry over the real chains (constant entries such as the fixed 1s of a
    Cholesky factor left out), and the sampler's columns (chain-major too)."""
    out: dict[str, np.ndarray] = {}
    flat_for_diag = []
    diag_names: list[str] = []
    for name, dims in zip(fit.param_names, fit.dims, strict=False):
        arr = np.asarray(fit[name])  # (*dims, draws * chains), chains interleaved
        if arr.size == 0:  # zero-size quantity (e.g. log_lik switched off)
            arr = np.zeros((chains * draws, *tuple(dims)))
        else:
            arr = _chain_major(arr.reshape((*tuple(dims), -1)), chains, draws)
        out[name] = arr
        if name in skip_diagnostics:
            continue
        flat = arr.reshape(arr.shape[0], -1)
        flat_for_diag.append(flat)
        if flat.shape[1] == 1:
            diag_names.append(name)
        else:
            idx = np.ndindex(*arr.shape[1:])
            diag_names.extend(f"{name}[{','.join(str(i + 1) for i in ix)}]" for ix in idx)
    sampler = {}
    for name in ("lp__", "divergent__", "treedepth__", "stepsize__", "n_leapfrog__"):
        if name in fit.sample_and_sampler_param_names:
            sampler[name] = _chain_major(np.asarray(fit[name]).reshape(-1), chains, draws)
    if flat_for_diag:
        allp = np.concatenate(flat_for_diag, axis=1)
        cd = allp.reshape(chains, draws, allp.shape[1])
        keep = np.ptp(allp, axis=0) > 0
        diag = convergence_diagnostics(cd[:, :, keep],
                                       [n for n, k in zip(diag_names, keep, strict=False) if k])
    else:
        diag = pd.DataFrame(columns=["rhat", "ess_bulk"])
    return out, diag, sampler


#: pystan 3's sampler arguments that ``stan_kwargs`` may set (httpstan's CreateFitRequest
#: fields, less those run_stan sets itself); Stan's adapt_delta is ``delta`` here
SAMPLE_KWARGS = ("delta", "gamma", "init_buffer", "init_radius", "kappa", "max_depth",
                 "num_thin", "refresh", "save_warmup", "stepsize", "stepsize_jitter", "t0",
                 "term_buffer", "window")
_STAN_NAMES = {"adapt_delta": "delta", "adapt_gamma": "gamma", "adapt_kappa": "kappa",
               "adapt_t0": "t0", "adapt_init_buffer": "init_buffer",
               "adapt_term_buffer": "term_buffer", "adapt_window": "window",
               "max_treedepth": "max_depth", "thin": "num_thin"}


#: the fix the convergence warning states (run_stan's keyword arguments go to pystan)
WARNING_FIX = ("Fix: more warm-up and draws (warmup=, draws=); against divergences a higher "
               "target acceptance rate, delta=0.95 (pystan's name for Stan's adapt_delta).")


def check_stan_kwargs(kwargs: dict[str, Any] | None, key: str = "stan_kwargs") -> None:
    """Refuse sampler arguments pystan 3 does not know, before any compile or MCMC (pystan
    would refuse them only when sampling starts: "{'json': {'adapt_delta': ['Unknown
    field.']}}"), naming pystan's spelling of CmdStan / rstan names (adapt_delta -> delta)."""
    if kwargs is None:
        return
    if not isinstance(kwargs, dict):
        raise ValueError(f"{key} must be a dict of pystan sample() arguments, e.g. "
                         f"{{'delta': 0.95}}; got {kwargs!r}.")
    bad = [k for k in kwargs if k not in SAMPLE_KWARGS]
    if bad:
        renames = {k: _STAN_NAMES[k] for k in bad if k in _STAN_NAMES}
        hint = ("; ".join(f"{k!r} is {v!r} in pystan 3" for k, v in renames.items())
                + ". " if renames else "")
        raise ValueError(f"{key}: unknown sampler argument(s) {bad}. {hint}Fix: use pystan 3's "
                         f"names: {', '.join(SAMPLE_KWARGS)} (e.g. {{'delta': 0.95}}).")


def run_stan(
    program_code: str,
    data: dict[str, Any],
    chains: int = 4,
    draws: int = 1000,
    warmup: int = 1000,
    seed: int | np.random.Generator | None = 0,
    progress: bool = True,
    init: list[dict[str, Any]] | None = None,
    skip_diagnostics: tuple[str, ...] = ("log_lik",),
    rhat_max: float = 1.01,
    ess_min: float | None = None,
    warn: bool = True,
    label: str = "Stan",
    **sample_kwargs: Any,
) -> StanDraws:
    """Compile (cached) and sample a Stan program with NUTS; return draws and diagnostics.

    ``seed`` (int or Generator) fixes Stan's random seed, so the same seed and inputs give the
    same draws. ``progress=False`` silences pystan's sampling progress. ``init`` is a list with
    one dict per chain (e.g. ``previous.last_inits()`` to warm-start a refit); if Stan cannot
    initialise from it, random inits are used. Extra keyword arguments go to pystan's
    ``sample`` (e.g. ``delta``, ``max_depth``, ``stepsize``).

    A ``ConvergenceWarning`` is issued when the largest R-hat exceeds ``rhat_max``, the
    smallest bulk ESS is below ``ess_min`` (default 100 per chain), or there are divergences.
    Runs in a worker thread when called from inside a running asyncio loop (e.g. Jupyter),
    where pystan cannot run. The run is reported to the progress listener, if one is installed
    (:mod:`surveysynth.synth.progress`), under ``label``: its start, build, sampling progress
    and end with its gates (the ``summary``).
    """
    check_stan_kwargs(sample_kwargs, "sampler arguments")
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(0, 2**31 - 1))
    if seed is None:
        seed = int(np.random.default_rng().integers(0, 2**31 - 1))
    args = (program_code, data, int(chains), int(draws), int(warmup), int(seed), progress, init,
            sample_kwargs, label)
    _progress.emit("on_fit_start", label)
    if _in_running_loop():
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as ex:
            # the worker thread sees this thread's progress listener
            post, fit, t_build, t_sample = ex.submit(
                contextvars.copy_context().run, _run, *args).result()
    else:
        post, fit, t_build, t_sample = _run(*args)

    t0 = time.perf_counter()
    out, diag, sampler = _extract(fit, chains, draws, skip_diagnostics)
    divergences = int(sampler.get("divergent__", np.zeros(1)).sum())
    max_depth = sample_kwargs.get("max_depth", 10)
    summary = {
        "max_rhat": float(diag["rhat"].max()) if len(diag) else float("nan"),
        "min_ess_bulk": float(diag["ess_bulk"].min()) if len(diag) else float("nan"),
        "divergences": divergences,
        "transitions": int(chains) * int(draws),
        "treedepth_hits": int((sampler.get("treedepth__", np.zeros(1)) >= max_depth).sum()),
        "mean_stepsize": float(np.mean(sampler["stepsize__"])) if "stepsize__" in sampler else None,
        "mean_leapfrog": (float(np.mean(sampler["n_leapfrog__"])) if "n_leapfrog__" in sampler
                          else None),
        "seconds_build": t_build,
        "seconds_sample": t_sample,
        "seconds_extract": time.perf_counter() - t0,
        "chains": chains,
        "draws": draws,
        "warmup": warmup,
        "seed": seed,
    }
    if ess_min is None:
        ess_min = 100.0 * chains
    problems = []
    if summary["max_rhat"] > rhat_max:
        worst = diag["rhat"].idxmax()
        problems.append(f"max R-hat {summary['max_rhat']:.3f} > {rhat_max} ({worst})")
    if summary["min_ess_bulk"] < ess_min:
        worst = diag["ess_bulk"].idxmin()
        problems.append(f"min bulk ESS {summary['min_ess_bulk']:.0f} < {ess_min:.0f} ({worst})")
    if divergences:
        problems.append(f"{divergences} divergent transitions")
    summary["problems"] = problems
    _progress.emit("on_fit_end", label, summary)
    if problems and warn:
        warnings.warn(
            "Stan sampling may be unreliable: " + "; ".join(problems)
            + ". " + WARNING_FIX,
            ConvergenceWarning,
            stacklevel=2,
        )
    param_only = tuple(
        n for n in fit.param_names if n in _declared_parameters(program_code)
    )
    return StanDraws(
        draws=out,
        chains=int(chains),
        draws_per_chain=int(draws),
        diagnostics=diag,
        summary=summary,
        param_names=param_only,
        sampler=sampler,
    )


@lru_cache(maxsize=64)
def _declared_parameters(program_code: str) -> frozenset[str]:
    """Names declared in the ``parameters`` block (used to build warm-start inits)."""
    import re

    code = re.sub(r"//[^\n]*", "", program_code)
    for m in re.finditer(r"(?<!transformed )\bparameters\s*\{", code):
        depth, start = 1, m.end()
        i = start
        while depth and i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        return frozenset(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*;", code[start : i - 1]))
    return frozenset()
