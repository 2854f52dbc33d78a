"""Set-up's Stan compiler (surveysynth.synth.stan_build): a cache entry is recognised as
complete, missing or half-written, and a half-written one is rebuilt, not served.

The fast tests plant folders in httpstan's cache for programs that are never compiled (a unique
comment makes a unique program), so they compile nothing; the repair itself compiles a program
and is in the slow tier."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from surveysynth.synth import stan_build

STAN = Path(__file__).resolve().parent / "stan"


def _unique_program() -> str:
    return f"parameters {{ real y; }} model {{ y ~ normal(0, 1); }} // {uuid.uuid4().hex}\n"


def _model_dir(code: str) -> Path:
    import httpstan.cache
    import httpstan.models

    return Path(httpstan.cache.model_directory(httpstan.models.calculate_model_name(code)))


def test_every_program_is_compiled_by_setup():
    """After set-up (make setup, or the suite's own start) every shipped and test program is
    complete in the cache: no test compiles. Kills a set-up that skips a program folder."""
    codes = list(stan_build.package_programs().values())
    codes += [p.read_text() for p in sorted(STAN.glob("*.stan"))]
    assert len(codes) >= 15
    assert [stan_build.cache_status(c) for c in codes] == ["ok"] * len(codes)


def test_half_written_entry_is_broken_and_not_waited_for_when_idle():
    """A folder with the generated C++ but no module or logs (a build killed by a client
    timeout) is 'broken'; with no compiler naming it and nothing written for a minute it is
    rebuilt at once, not waited for. Kills a status that trusts the folder's existence (httpstan
    then answers every request with a server error)."""
    code = _unique_program()
    d = _model_dir(code)
    assert stan_build.cache_status(code) == "missing"
    d.mkdir(parents=True)
    try:
        (d / "model_x.cpp").write_text("// half written\n")
        old = time.time() - 3600
        os.utime(d / "model_x.cpp", (old, old))
        assert stan_build.cache_status(code) == "broken"
        t0 = time.monotonic()
        assert stan_build._wait_for_foreign_build(code) == "broken"  # noqa: SLF001
        assert time.monotonic() - t0 < 5
        # a module without the compiler's log is still half-written
        (d / "stan_services_model_x.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
        assert stan_build.cache_status(code) == "broken"
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_half_written_entry_is_repaired_and_samples():
    """The repair end to end: plant a half-written entry, ensure_compiled rebuilds it (in a
    temporary working directory: nothing written to ours), and run_stan samples from it."""
    from surveysynth.synth._stan import run_stan  # noqa: PLC2701 - the runner under test

    code = _unique_program()
    d = _model_dir(code)
    d.mkdir(parents=True)
    (d / "model_x.cpp").write_text("// half written\n")
    old = time.time() - 3600
    os.utime(d / "model_x.cpp", (old, old))
    before = set(Path.cwd().iterdir())
    try:
        assert stan_build.ensure_compiled(code) == "repaired"
        assert stan_build.cache_status(code) == "ok"
        assert set(Path.cwd().iterdir()) == before
        res = run_stan(code, {}, chains=1, draws=20, warmup=20, seed=1, progress=False,
                       warn=False)
        assert res["y"].shape == (20,)
    finally:
        shutil.rmtree(d, ignore_errors=True)
