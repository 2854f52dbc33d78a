"""Write docs/release-config.md: the release configuration reference, generated from the config
schema (surveysynth.release_config.SCHEMA) and every synthesizer's constraint table
(``_parameter_constraints``, surveysynth.synth.params), the same tables that validate a config,
the Python API and the R package's settings.

Run: python scripts/release_config_doc.py [--check]   (--check: exit 1 if the page is stale;
tests/test_release_config.py and tests/test_params.py fail on a stale page too)
"""

from __future__ import annotations

import sys
from pathlib import Path

from surveysynth.release_config import render_markdown

PAGE = Path(__file__).resolve().parents[1] / "docs" / "release-config.md"


def main(argv: list[str]) -> int:
    text = render_markdown() + "\n"
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(f"{PAGE} is stale: run python scripts/release_config_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
