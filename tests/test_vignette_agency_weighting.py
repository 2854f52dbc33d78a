"""The agency weighting vignette runs (fast mode): two-stage PPS base weights, SDR replicates,
nonresponse adjustment, raking with trimmed g-weights; every final estimate and SE equals R
survey's (live, same inputs) to 1e-8, or the script exits non-zero."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_agency_weighting_vignette_fast(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "vignettes" / "agency_weighting.py"),
                          "--fast", "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = (tmp_path / "agency_weighting.md").read_text()
    worst = float(re.search(r"Largest relative difference from R survey: (\S+) ", text)[1])
    assert worst < 1e-8
    assert "api00 [stype=H]" in text and "raked + trimmed g" in text
    # trimming did something: some g-weights sit at a bound
    assert int(re.search(r"(\d+) at a bound", text)[1]) > 0
