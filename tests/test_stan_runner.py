"""The shared pystan runner: reproducible by seed, and it cleans up only its own fits.

httpstan stores every seeded fit on disk. The runner passes the seed to ``sample`` (not
``build``), so pystan deletes each fit right after reading it; an earlier version deleted every
file that appeared in the model's fits folder while it sampled, which removed the fits of a
concurrent job sampling the same model (seen here: "Fit ... not found"). Real Stan, no mocks.
"""

from __future__ import annotations

import numpy as np

from surveysynth.synth._stan import run_stan

PROGRAM = """
data { int<lower=1> n; vector[n] y; }
parameters { real mu; real<lower=0> sigma; }
model { mu ~ normal(0, 10); sigma ~ normal(0, 5); y ~ normal(mu, sigma); }
"""


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
