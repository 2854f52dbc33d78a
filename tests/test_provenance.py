"""Rendered vignette outputs say which code produced them: an output whose code changed since
it was rendered must carry the STALE banner (scripts/provenance.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _prov():
    spec = importlib.util.spec_from_file_location("provenance", ROOT / "scripts" / "provenance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_rendered_output_is_current_or_says_it_is_stale():
    prov = _prov()
    idx = prov.load()
    rendered = {str(p.relative_to(ROOT)) for p in (ROOT / "vignettes" / "output").rglob("*.md")}
    assert rendered <= set(idx), f"outputs without provenance: {sorted(rendered - set(idx))}"
    assert prov.check() == [], "outputs older than their code without a STALE banner"


def test_a_code_change_makes_an_output_stale():
    prov = _prov()
    entry = dict(next(iter(prov.load().values())))
    entry["code_sha256"] = prov.code_hash(entry["depends"])
    assert not prov.stale(entry)
    entry["depends"] = entry["depends"] + ["surveysynth/__init__.py"]
    assert prov.stale(entry)
