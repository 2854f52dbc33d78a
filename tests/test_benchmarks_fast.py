"""The benchmark scripts run (fast mode, no timing asserted, docs not rewritten)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_taylor_benchmark_fast_mode_runs_and_checks_agreement():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "taylor.py"), "--fast"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| mean |" in out.stdout and "| total |" in out.stdout
