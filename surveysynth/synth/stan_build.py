"""Compile Stan programs into httpstan's cache before they are sampled, robustly.

Why not let ``stan.build`` compile on first use (as pystan does):

* ``stan.build`` asks httpstan to compile over HTTP, and pystan's client gives up after five
  minutes (aiohttp's default total timeout): on a loaded 2-core machine a first build of the
  larger programs takes longer, the caller gets a ``TimeoutError`` while the server keeps
  compiling, and an interrupted build leaves a model folder without its compiler log, which
  httpstan then answers with a server error on every later request.
* httpstan runs ``stanc`` with a one-second timeout, which a loaded machine exceeds now and then.
* setuptools writes its object files to ``build/temp.*`` under the current working directory:
  the user's folder.

:func:`ensure_compiled` checks the cache entry of a program (extension module present, compiler
log and stanc warnings written, the module importable) and, when it is missing or half-written,
removes it and compiles the program in a child process whose working directory is a temporary
folder, with no HTTP timeout, retrying ``stanc`` timeouts. A lock file per program makes
concurrent callers (two pytest workers, two releases) wait for one build instead of racing.
After it, ``stan.build`` finds the module in the cache and only loads it.

``python -m surveysynth.synth.stan_build [--jobs 2] [FILE.stan ...]`` compiles every program
the package ships (and the given files), ``--jobs`` at a time, printing one line per program:
``make setup`` runs it so that no test compiles.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

__all__ = ["cache_status", "ensure_compiled", "package_programs"]

_STANC_TRIES = 5


def _model_name(program_code: str) -> str:
    import httpstan.models

    return httpstan.models.calculate_model_name(program_code)


def _model_dir(program_code: str) -> Path:
    import httpstan.cache

    return Path(httpstan.cache.model_directory(_model_name(program_code)))


def cache_status(program_code: str) -> str:
    """``"ok"``, ``"missing"`` or ``"broken"`` (a folder without its module, compiler log or
    stanc warnings: a build that was interrupted). Importability is checked by the child that
    builds; a present module with both logs is taken as complete (httpstan writes the logs only
    after the module)."""
    from httpstan.models import EXTENSION_SUFFIXES

    d = _model_dir(program_code)
    if not d.exists():
        return "missing"
    has_module = any(p.suffix in EXTENSION_SUFFIXES for p in d.iterdir())
    has_logs = (d / "stderr.log").exists() and (d / "stanc.log").exists()
    return "ok" if has_module and has_logs else "broken"


def _compiler_running_in(folder: Path) -> bool:
    """Whether a process (a C++ compiler or linker) names ``folder`` on its command line: a
    build of that model by a process that does not take this module's lock (pystan called
    directly). Linux's /proc; elsewhere the folder's age decides (:func:`_wait_for_foreign_build`)."""
    needle = str(folder).encode()
    proc = Path("/proc")
    if not proc.is_dir():
        return False
    for p in proc.iterdir():
        if p.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (p / "cmdline").read_bytes():
                    return True
    return False


def _wait_for_foreign_build(program_code: str, quiet_for: float = 600.0,
                            limit: float = 3600.0) -> str:
    """The cache status once no other process is writing the entry. A half-written folder that a
    running compiler names, or (without /proc) that changed in the last ``quiet_for`` seconds, is
    a build in progress elsewhere: wait for it (at most ``limit`` seconds) before calling the
    entry broken and rebuilding it."""
    t0 = time.monotonic()
    while True:
        status = cache_status(program_code)
        if status != "broken" or time.monotonic() - t0 > limit:
            return status
        d = _model_dir(program_code)
        newest = max((p.stat().st_mtime for p in d.rglob("*")), default=d.stat().st_mtime)
        age = time.time() - newest
        if Path("/proc").is_dir():
            # between stanc and the compiler, and between compiling and linking, no compiler
            # names the folder for a moment: quiet for a minute as well
            if age > 60 and not _compiler_running_in(d):
                return status
        elif age > quiet_for:
            return status
        time.sleep(5)


@contextlib.contextmanager
def _lock(program_code: str):
    d = _model_dir(program_code)
    d.parent.mkdir(parents=True, exist_ok=True)
    with open(d.parent / f"{d.name}.surveysynth-lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build_here(program_code: str) -> None:
    """The child's work: stanc (retrying its one-second timeout), the C++ build, both logs."""
    import asyncio

    import httpstan.cache
    import httpstan.compile
    import httpstan.models

    name = _model_name(program_code)
    httpstan.cache.delete_model_directory(name)
    stan_name = f"model_{name.split('/')[1]}"
    for attempt in range(_STANC_TRIES):
        try:
            _, warnings_text = httpstan.compile.compile(program_code, stan_name)
            break
        except subprocess.TimeoutExpired:
            if attempt == _STANC_TRIES - 1:
                raise
            time.sleep(1 + attempt)
    out = asyncio.run(httpstan.models.build_services_extension_module(program_code))
    httpstan.models.import_services_extension_module(name)  # the module loads
    httpstan.cache.dump_stanc_warnings(warnings_text, name)
    httpstan.cache.dump_services_extension_module_compiler_output(out, name)


def ensure_compiled(program_code: str) -> str:
    """Make sure ``program_code`` is compiled in httpstan's cache; return ``"cached"``,
    ``"compiled"`` or ``"repaired"``. Raises ``RuntimeError`` with the compiler's last lines when
    the build fails (the half-written folder is removed)."""
    if cache_status(program_code) == "ok":
        return "cached"
    with _lock(program_code):
        status = _wait_for_foreign_build(program_code)
        if status == "ok":
            return "cached"
        with tempfile.TemporaryDirectory(prefix="surveysynth-stan-") as tmp:
            src = Path(tmp) / "program.stan"
            src.write_text(program_code)
            proc = subprocess.run(
                [sys.executable, "-m", "surveysynth.synth.stan_build", "--child", str(src)],
                cwd=tmp, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if proc.returncode != 0:
            import httpstan.cache

            httpstan.cache.delete_model_directory(_model_name(program_code))
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
            raise RuntimeError(f"Stan program failed to compile:\n{tail}")
    return "repaired" if status == "broken" else "compiled"


def package_programs() -> dict[str, str]:
    """Every Stan program the package ships, by file stem."""
    folder = resources.files("surveysynth.synth").joinpath("stan")
    return {p.name[:-5]: p.read_text() for p in folder.iterdir() if p.name.endswith(".stan")}


def _compile_one(item: tuple[str, str]) -> tuple[str, str, float]:
    name, code = item
    t0 = time.perf_counter()
    return name, ensure_compiled(code), time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m surveysynth.synth.stan_build",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="more .stan files to compile (e.g. the tests')")
    ap.add_argument("--jobs", type=int, default=2, help="programs compiled at once (default 2)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _build_here(Path(a.files[0]).read_text())
        return 0
    programs = package_programs()
    for f in a.files:
        programs[f"{Path(f).parent.name}/{Path(f).stem}"] = Path(f).read_text()
    todo = sorted(programs.items())
    t0 = time.perf_counter()
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        futures = [ex.submit(_compile_one, it) for it in todo]
        for k, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            try:
                name, status, secs = fut.result()
                print(f"stan [{k}/{len(todo)}] {name}: {status} ({secs:.0f} s)", flush=True)
            except RuntimeError as exc:
                failed += 1
                print(f"stan [{k}/{len(todo)}] FAILED: {exc}", flush=True)
    print(f"stan: {len(todo) - failed} of {len(todo)} programs compiled or cached in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
