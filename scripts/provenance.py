"""Provenance of rendered vignette outputs: which commit and which code produced them.

vignettes/output/PROVENANCE.json maps each rendered Markdown output to the script that writes
it, the package modules its numbers depend on, the commit it was rendered at and a SHA-256 of
those files at that time. ``tests/test_provenance.py`` recomputes the hash: an output whose code
changed since it was rendered must begin with a STALE banner (``mark-stale``), so no reader takes
old numbers for the current code's.

    python scripts/provenance.py record OUTPUT.md      # after rendering (entry must exist)
    python scripts/provenance.py mark-stale            # banner on every output whose code changed
    python scripts/provenance.py check                 # exit 1 if an output is stale, unmarked
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "vignettes" / "output" / "PROVENANCE.json"
BANNER = "> **STALE**"


def code_hash(files: list[str]) -> str:
    """SHA-256 over the named files (path and content, in the given order)."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode() + b"\0")
        h.update((ROOT / f).read_bytes())
    return h.hexdigest()


def load() -> dict:
    return json.loads(INDEX.read_text())


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True)
    return out.stdout.strip() or "unknown"


def stale(entry: dict) -> bool:
    return code_hash(entry["depends"]) != entry["code_sha256"]


def banner(entry: dict) -> str:
    return (f"{BANNER}: rendered at commit {entry['commit']}; the code it depends on "
            f"({', '.join(entry['depends'])}) has changed since. The numbers below are those of "
            f"that commit; rerun `{entry['command']}` for the current code.\n\n")


def record(output: str) -> None:
    idx = load()
    entry = idx[output]
    entry["commit"] = _commit()
    entry["code_sha256"] = code_hash(entry["depends"])
    path = ROOT / output
    text = path.read_text()
    if text.startswith(BANNER):
        text = text.split("\n\n", 1)[1]
        path.write_text(text)
    INDEX.write_text(json.dumps(idx, indent=2) + "\n")


def mark_stale() -> list[str]:
    marked = []
    for output, entry in load().items():
        path = ROOT / output
        text = path.read_text()
        if stale(entry) and not text.startswith(BANNER):
            path.write_text(banner(entry) + text)
            marked.append(output)
    return marked


def check() -> list[str]:
    """Outputs whose code changed and that do not say so."""
    return [o for o, e in load().items()
            if stale(e) and not (ROOT / o).read_text().startswith(BANNER)]


def main(argv: list[str]) -> int:
    if argv[:1] == ["record"]:
        record(argv[1])
        return 0
    if argv[:1] == ["mark-stale"]:
        print("\n".join(mark_stale()))
        return 0
    bad = check()
    print("\n".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
