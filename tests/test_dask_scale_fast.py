"""benchmarks/dask_scale.py --fast runs end to end (no timings asserted): it generates a
chunked Parquet dataset, estimates means by a 200-level domain natively and on a LocalCluster
of worker processes with a memory limit (Dask equal to native to 1e-12, checked inside the
script, which raises otherwise), tabulates a second dataset with a progress bar and checks the
table against per-domain sums kept by the generator. Here: the generator's chunks agree with
one another and the report carries the numbers it claims."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import dask_scale  # noqa: E402


def test_chunked_generation_writes_what_its_check_sums_describe(tmp_path):
    """The generator's per-domain sums (the big run's check) are those of the rows it wrote,
    whatever the chunking; the design layout (PSU order, all strata, PSUs and domains) does
    not depend on the chunk size."""
    import pandas as pd

    a = dask_scale.generate(tmp_path / "a", 30_000, rows_per_file=10_000)
    b = dask_scale.generate(tmp_path / "b", 30_000, rows_per_file=30_000)
    fa = pd.read_parquet(tmp_path / "a")
    fb = pd.read_parquet(tmp_path / "b")
    assert len(list((tmp_path / "a").iterdir())) == 3
    pd.testing.assert_frame_equal(fa[["stratum", "psu"]], fb[["stratum", "psu"]])
    assert fa.psu.is_monotonic_increasing and fa.psu.nunique() == dask_scale.H * dask_scale.PER
    assert fa.domain.nunique() == dask_scale.DOMAINS
    for part, sums in ((fa, a), (fb, b)):
        sw = np.bincount(part.domain, weights=part.w, minlength=dask_scale.DOMAINS)
        swy = np.bincount(part.domain, weights=part.w * part.y1, minlength=dask_scale.DOMAINS)
        np.testing.assert_allclose(sums["sw"], sw, rtol=1e-12)
        np.testing.assert_allclose(sums["swy"], swy, rtol=1e-12)


def test_fast_mode_runs_and_checks_itself():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dask_scale.py"),
                           "--fast", "--memory-limit", "1GiB"], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "100% Completed" in out  # the table run showed its progress bar
    diffs = [float(x) for x in re.findall(r"\| (\d\.\de[-+]\d+) \|", out)]
    assert len(diffs) == 1 and diffs[0] <= 1e-12  # Dask vs native, measured in the run
    m = re.search(r"generator to (\S+) \(relative\)", out)
    assert m and float(m.group(1)) <= 1e-9
    assert "memory_limit='1GiB'" in out
