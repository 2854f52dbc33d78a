"""The confidential part of a release: disclosure-review material written with the
not-for-publication notice on every file.

Here, in the privacy layer, so that every writer of confidential files (a synthetic release,
the Laplace tables, the pipeline) uses one notice and one format; ``surveysynth.release``
re-exports both names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["NOT_FOR_PUBLICATION", "write_confidential"]

NOT_FOR_PUBLICATION = (
    "CONFIDENTIAL - NOT FOR PUBLICATION. Computed from the confidential data for the "
    "disclosure review; never copy this file into a public release."
)


def write_confidential(path: Path, items: dict[str, Any], overwrite: bool = False) -> Path:
    """Write disclosure-review material: DataFrames as CSV (first line the notice), everything
    else in one ``confidential.json`` whose first key is the notice, plus a README."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "README.txt").write_text(NOT_FOR_PUBLICATION + "\n")
    scalars: dict[str, Any] = {"notice": NOT_FOR_PUBLICATION}
    for key, value in items.items():
        if str(key).startswith("_"):  # in-memory only (e.g. row permutations)
            continue
        name = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(key))
        if isinstance(value, pd.DataFrame):
            with open(path / f"{name}.csv", "w") as fh:
                fh.write(f"# {NOT_FOR_PUBLICATION}\n")
                value.to_csv(fh, index=True)
        elif isinstance(value, bytes):
            (path / name).write_bytes(value)
        else:
            scalars[str(key)] = value
    (path / "confidential.json").write_text(json.dumps(scalars, indent=2, default=_jsonable))
    return path


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, Path):
        return str(v)
    return str(v)
