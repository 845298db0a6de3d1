"""Which aggregator can run with n uploads and f liars (lecture 9, §8), without torch: the
scripts check their flags with it before torch is imported, so a refused --liars answers at
once (issue 43). aggregators.py, which does the arithmetic, re-exports both names.
"""

import math

# aggregators.AGGREGATORS' names, in its order (tests/test_aggregators.py checks they agree)
AGGREGATOR_NAMES = ("mean", "median", "trimmed-mean", "krum", "multi-krum", "centered-clip")


class AggregatorError(ValueError):
    """Settings an aggregator cannot work with (e.g. f too large for n); the message says why."""


def check_settings(name, n, f, bucket=0):
    """Raise AggregatorError (one line) if `name` cannot run with n vectors and f liars:
    what the script checks before any training starts."""
    if name not in AGGREGATOR_NAMES:
        raise AggregatorError(f"unknown aggregator {name!r}; expected one of {AGGREGATOR_NAMES}")
    if f < 0 or f >= n:
        raise AggregatorError(f"f must be in 0..{n - 1} for {n} workers, got {f}")
    m = math.ceil(n / bucket) if bucket > 1 else n       # what the aggregator itself sees
    if name == "trimmed-mean" and 2 * f >= m:
        raise AggregatorError(f"trimmed-mean needs more than 2f = {2 * f} inputs; it gets {m}")
    if name in ("krum", "multi-krum") and m <= 2 * f + 2:
        raise AggregatorError(f"{name} needs more than 2f + 2 = {2 * f + 2} inputs "
                              f"(Blanchard et al.); it gets {m}")
