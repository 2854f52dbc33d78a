"""The shared pystan runner: reproducible by seed, and it cleans up only its own fits.

httpstan stores every seeded fit on disk. The runner passes the seed to ``sample`` (not
``build``), so pystan deletes each fit right after reading it; an earlier version deleted every
file that appeared in the model's fits folder while it sampled, which removed the fits of a
concurrent job sampling the same model (seen here: "Fit ... not found"). Real Stan, no mocks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from surveysynth.synth._stan import run_stan

# test-only programs: compiled by set-up (make setup), like the package's
STAN = Path(__file__).resolve().parent / "stan"

PROGRAM = (STAN / "normal.stan").read_text()


def _fits_dir():
    import httpstan.cache
    import httpstan.models

    name = httpstan.models.calculate_model_name(PROGRAM)
    return httpstan.cache.model_directory(name) / "fits"


def test_same_seed_same_draws_and_no_fit_left_on_disk():
    data = {"n": 5, "y": [0.3, -1.2, 0.8, 2.0, 0.1]}
    a = run_stan(PROGRAM, data, chains=2, draws=200, warmup=200, seed=7, progress=False)
    fits = _fits_dir()
    before = set(fits.glob("*")) if fits.exists() else set()
    # a file another job's fit would have in the same folder must survive our sampling
    fits.mkdir(parents=True, exist_ok=True)
    other = fits / "someone-elses-fit.jsonlines.gz"
    other.write_bytes(b"not ours")
    try:
        b = run_stan(PROGRAM, data, chains=2, draws=200, warmup=200, seed=7, progress=False)
        c = run_stan(PROGRAM, data, chains=2, draws=200, warmup=200, seed=8, progress=False)
        after = set(fits.glob("*"))
        assert other.exists(), "the runner deleted a fit that was not its own"
        assert after - before == {other}, f"fit files left behind: {sorted(after - before - {other})}"
    finally:
        other.unlink(missing_ok=True)
    np.testing.assert_array_equal(a["mu"], b["mu"])
    assert not np.array_equal(a["mu"], c["mu"])


@pytest.mark.slow  # compiles; default tier: tests/test_stan_build.py
def test_first_build_keeps_the_compiler_quiet():
    """A model's first build runs g++, which writes hundreds of warning lines to file descriptor
    2 (past sys.stderr); none of them reach the console, with or without progress (a fresh
    machine's demo console must stay short). A unique program forces a real compilation."""
    import subprocess
    import sys
    import uuid

    code = (
        "from surveysynth.synth._stan import run_stan\n"
        f"prog = 'parameters {{ real y; }} model {{ y ~ normal(0, 1); }} // {uuid.uuid4().hex}'\n"
        "r = run_stan(prog, {}, chains=1, draws=20, warmup=20, seed=1, progress=True, "
        "warn=False)\n"
        "print('draws', r['y'].shape[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "draws 20" in out.stdout
    assert "In file included" not in out.stderr and "warning:" not in out.stderr, out.stderr[-2000:]


LAYOUT = (STAN / "layout.stan").read_text()


def test_draws_are_chain_major_as_stan_draws_says():
    """pystan's ``fit[name]`` interleaves the chains (chain varying fastest); ``StanDraws``
    promises chain 0's draws first. ``fixed_param`` keeps every chain at its own init, so each
    block of ``draws`` rows must be one chain's init, for scalars, vectors and matrices (column-
    major in Stan, row-major here). Kills: reading the interleaved axis as chain-major (the old
    ``_extract``), which puts every chain in every block."""
    import io
    from contextlib import redirect_stderr

    import stan

    from surveysynth.synth._stan import _extract  # noqa: PLC2701 - the layout under test

    chains, draws = 3, 5
    inits = [{"y": 10.0 * (c + 1), "v": [c + 0.1, c + 0.2],
              "M": (np.arange(6.0).reshape(2, 3) + 100 * c).tolist()} for c in range(chains)]
    with redirect_stderr(io.StringIO()):
        post = stan.build(LAYOUT, data={}, random_seed=1)
        fit = post.fixed_param(num_chains=chains, num_samples=draws, init=inits)
    out, _, sampler = _extract(fit, chains, draws, ())
    assert out["y"].shape == (chains * draws,)
    assert out["M"].shape == (chains * draws, 2, 3)
    for c in range(chains):
        block = slice(c * draws, (c + 1) * draws)
        np.testing.assert_array_equal(out["y"][block], inits[c]["y"])
        np.testing.assert_array_equal(out["v"][block], np.tile(inits[c]["v"], (draws, 1)))
        np.testing.assert_array_equal(out["M"][block],
                                      np.tile(np.asarray(inits[c]["M"]), (draws, 1, 1)))
        assert np.all(sampler["lp__"][block] == sampler["lp__"][block][0])


BIMODAL = (STAN / "bimodal.stan").read_text()


def test_rhat_sees_a_chain_stuck_in_another_mode():
    """Two chains start in each of two modes 60 SDs apart (no chain crosses): the draws are
    a fine sample of neither mode alone, and R-hat over the real chains is far above 1.01,
    while each chain is a good sample of its mode. Kills an R-hat computed over blocks of
    interleaved chains (each block holds both modes: R-hat ~ 1, the gate blind)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_stan(BIMODAL, {}, chains=4, draws=200, warmup=200, seed=11, progress=False,
                       init=[{"y": -30.0}, {"y": -30.0}, {"y": 30.0}, {"y": 30.0}], warn=False)
    y = res["y"].reshape(4, 200)
    np.testing.assert_array_less(y[:2].max(axis=1), 0.0)     # chain-major: modes per chain
    assert (y[2:].min(axis=1) > 0.0).all()
    assert res.summary["max_rhat"] > 1.5
    # the last draw of each chain warm-starts that chain's refit (its own mode)
    assert [np.sign(d["y"]) for d in res.last_inits()] == [-1, -1, 1, 1]


def test_stan_runner_fix_texts_name_pystans_arguments():
    """The Stan runner's convergence warning and the stan_kwargs check give pystan 3's name
    (delta), and refuse Stan's (adapt_delta) before any compile."""
    from surveysynth.synth._stan import WARNING_FIX, check_stan_kwargs

    assert "delta=0.95" in WARNING_FIX and "adapt_delta=" not in WARNING_FIX
    check_stan_kwargs({"delta": 0.95, "max_depth": 12})  # applied in tests/test_examples.py
    with pytest.raises(ValueError, match="'adapt_delta' is 'delta' in pystan 3"):
        check_stan_kwargs({"adapt_delta": 0.95})
    with pytest.raises(ValueError, match="'max_treedepth' is 'max_depth'"):  # before compiling
        run_stan("parameters { real x; } model { x ~ normal(0, 1); }", {}, max_treedepth=12)


def test_pystan_import_notices_do_not_reach_the_console():
    """pystan's first sample imports pkg_resources, whose deprecation notice setuptools
    prints; the runner imports it first with the notice off (the console showed it)."""
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('default')\n"
            "from surveysynth.synth._stan import _require_stan\n"
            "_require_stan()\n"
            "import stan.plugins; list(stan.plugins.get_plugins())\n")
    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pkg_resources" not in out.stderr and "Deprecat" not in out.stderr, out.stderr
