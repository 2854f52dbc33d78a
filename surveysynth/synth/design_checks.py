"""Checks of the input design that synthesizers share (issue 36, decisions D6 and D7).

* :func:`clusters_of` says whether a design has real first-stage clusters (D1: the PSU is the
  design's first-stage sampling unit, R's ultimate cluster, as :class:`SurveyDesign` indexes
  it, unique within strata): ids given and at least one PSU holding more than one record.
  ``ids=None`` / ``"~1"`` (one record per PSU) and ids with one record per PSU are not
  clustered.
* :func:`refuse_clustered` raises the D6 ValueError of a synthesizer that cannot carry the
  design effect of clustered data: it names the design's clusters, the reason, the measured
  consequence and the alternatives.

A replicate design (``ReplicateDesign``) carries its clustering in the replicate weights, which
these checks cannot see: it is not refused here (docs/kng.md, "Clustered designs").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Clusters", "DesignRefused", "clusters_of", "refuse_clustered",
           "CLUSTERED_ALTERNATIVES", "MEASURED_SE_RATIO"]

#: the measured consequence of synthesizing clustered data record by record (issue 36): the
#: combined SE of mean api00 relative to the confidential design's
MEASURED_SE_RATIO = (
    "measured on R's clustered api samples (issue 36): synthetic designs whose records are drawn "
    "independently of their clusters gave a combined SE of mean api00 0.37-0.44x the "
    "confidential design's (apiclus1: FBS without clusters 9.84 vs 23.54, Sequential 8.6; "
    "apiclus2: quantile synthesis 11.6-13.1 vs 30.1), i.e. 95% intervals less than half as wide "
    "as they must be")

#: what to use instead (D6)
CLUSTERED_ALTERNATIVES = (
    "FBS or FBP (partial synthesis: the design columns released as collected, a PSU random "
    "intercept drawn afresh for each synthetic set) or Sequential; or, if these ids are not "
    "sampling clusters (e.g. a household or interviewer id that played no part in selection), "
    "declare ids=None (R: ids=~1; release config: drop [design] ids)")


class DesignRefused(ValueError):
    """A synthesizer refuses the input design; ``keys`` are the design arguments (and
    ``[design]`` keys of a release config) the refusal is about, e.g. ``("ids",)``."""

    def __init__(self, message: str, keys: tuple[str, ...]) -> None:
        super().__init__(message)
        self.keys = tuple(keys)


@dataclass(frozen=True)
class Clusters:
    """The first-stage clusters of a design: ``ids`` (column names, every stage), ``n_psu``
    (PSUs, unique within strata), ``largest`` (records in the largest PSU), ``n`` (records)."""

    ids: list[str]
    n_psu: int
    largest: int
    n: int

    def describe(self) -> str:
        return (f"ids {self.ids} give {self.n_psu} first-stage clusters (PSUs) for {self.n} "
                f"records, up to {self.largest} records in one PSU")


def clusters_of(design: Any) -> Clusters | None:
    """The design's real first-stage clusters, or None (no ids, one record per PSU, a
    DataFrame, or a replicate design). Reads the full sample (a domain subset counts its whole
    design: the clustering is the sample's)."""
    ids = [c for c in (getattr(design, "ids_vars", None) or []) if c not in ("1", "~1")]
    stages = getattr(design, "stages", None)
    if not ids or not stages:
        return None
    psu = np.asarray(stages[0].cluster)
    counts = np.bincount(psu)
    counts = counts[counts > 0]
    if counts.size == 0 or int(counts.max()) <= 1:
        return None
    return Clusters(ids=list(ids), n_psu=int(counts.size), largest=int(counts.max()),
                    n=int(psu.size))


def refuse_clustered(design: Any, who: str, reason: str, key: str = "ids") -> None:
    """Raise the D6 ValueError when ``design`` has real clusters (else return).

    ``who`` names the synthesizer, ``reason`` says why it cannot carry the design effect;
    ``key`` is the argument (or release-config key) that declared the clusters.
    """
    cl = clusters_of(design)
    if cl is None:
        return
    raise DesignRefused(
        f"{who} refuses clustered designs: {cl.describe()} ({key}). Reason: {reason}. "
        f"Consequence: {MEASURED_SE_RATIO}. Alternatives: {CLUSTERED_ALTERNATIVES}.",
        keys=(key,))
