"""Randomness behind a privacy guarantee: secret by default, reproducible only for the seed holder.

Every synthesizer and noise mechanism gets its generator from :func:`secret_rng`. Without a
seed the generator is seeded from the operating system's entropy (``numpy.random.SeedSequence()``
draws 128 bits from ``secrets``), so nobody, including the curator, can replay the noise or the
posterior draws from anything written to a release. A seed (int, SeedSequence or Generator) may
be passed for tests, debugging and internal reruns: the output is then a deterministic function
of the data and the seed, so the seed is a secret key. It is never written to a public file; a
seeded release says in its public manifest that it is reproducible by whoever holds the seed.

This is the one place that turns ``random_state`` into a generator (it replaces the copies of
an ``_rng`` helper the modules used to carry).
"""

from __future__ import annotations

from typing import Any

import numpy as np

RandomState = int | np.random.Generator | np.random.SeedSequence | None


def is_seeded(random_state: Any) -> bool:
    """True when ``random_state`` fixes the output (anything but None)."""
    return random_state is not None


def secret_rng(random_state: RandomState = None) -> np.random.Generator:
    """A numpy Generator: from OS entropy when ``random_state`` is None, else from the seed.

    A Generator passed in is used as it is (shared state, as numpy's own convention).
    """
    if random_state is None:
        return np.random.default_rng(np.random.SeedSequence())
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.SeedSequence):
        return np.random.default_rng(random_state)
    if isinstance(random_state, (bool, np.bool_)) or not isinstance(random_state, (int, np.integer)):
        raise ValueError(
            f"random_state={random_state!r}: give None (secret randomness from the operating "
            "system, the default for releases), an int seed, a numpy SeedSequence or a Generator."
        )
    if int(random_state) < 0:
        raise ValueError(f"random_state={random_state!r}: a seed must be >= 0.")
    return np.random.default_rng(int(random_state))


def child_seed(rng: np.random.Generator) -> int:
    """A 31-bit seed for a library that takes an int (Stan), drawn from ``rng``."""
    return int(rng.integers(1, 2**31 - 1))
