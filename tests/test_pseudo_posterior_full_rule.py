"""Issue 36: PBP's weighted mean on apistrat within 2 combined SEs of the confidential one.

The cause of the misses (seed 2: z = 3.64) was the full-synthesis rule: T_f = (1+1/m) b - ubar
rests on b with m - 1 = 4 df and went down to SE 3.1-5.1 (confidential 9.41); the rule now
floors it at T_s = ubar (n_syn/n + (1 + n_syn/n)/m) (Raab, Nowok & Dibben 2016; combine.py,
docs/tables.md "Which rule and which df"). These tests run the issue's exact fits (seeds 1-3,
2-10 s each); tests/test_combine.py checks the rule on their recorded per-set numbers, with the
former rule (and Reiter's T_f* as the floor) as the mutants.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import surveysynth as ss
from surveysynth.datasets import load_api

CONF_MEAN, CONF_SE = 662.2873631593208, 9.408940802784581   # R svymean on dstrat


@pytest.fixture(scope="module")
def apistrat_design():
    return ss.SurveyDesign(load_api("apistrat"), strata="stype", weights="pw", fpc="fpc")


def _release(design, seed: int, chains: int = 4, draws: int = 500, **kw):
    syn = ss.synth.PBP("api00", ["stype"], log=True, m=5, chains=chains, draws=draws,
                       warmup=draws, random_state=seed, progress=False, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return syn.fit(design).release()


def _check(rel) -> tuple[float, float]:
    """z of the combined mean; the release's SE is at least the floor computed by hand from
    the per-set estimates (kills a release that skips the floor)."""
    est = rel.mean("api00").iloc[0]
    u = np.array([d.mean("api00")["se"].iloc[0] ** 2 for d in rel.designs])
    q = np.array([d.mean("api00")["estimate"].iloc[0] for d in rel.designs])
    m = len(u)
    floor = u.mean() * (1 + 2 / m)          # n_syn = n (n_original not published)
    assert est["estimate"] == pytest.approx(q.mean(), rel=1e-12)
    assert est["variance"] == pytest.approx(max(1.2 * q.var(ddof=1) - u.mean(), floor),
                                            rel=1e-12)
    return (est["estimate"] - CONF_MEAN) / est["se"], est["se"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pbp_apistrat_weighted_mean(apistrat_design, seed):
    """The issue's fits: |z| < 2 on seeds 1-3 (measured 0.47 / 1.81 / 1.16; before the floor
    1.47 / 3.64 / 1.16 with SEs 3.14 / 5.06 / 10.02)."""
    z, se = _check(_release(apistrat_design, seed))
    assert abs(z) < 2, (seed, z, se)
    assert se > 0.9 * CONF_SE, (seed, se)

