"""Words for paired differences of bits per char over seeds (lecture 9, §5.7 and the tables
of codes 5, 7, 8 and 11). No torch here: a script can import it before it parses its flags,
so --help stays fast (code 11's demo 6 does)."""

import math

DELTA_TOLERANCE_BPC = 0.01      # |Δ| up to this many bits per char counts as "the same"


def verdict(deltas, tolerance=DELTA_TOLERANCE_BPC):
    """Words for paired differences over one or more seeds (positive = worse).

    "same": every |Δ| <= tolerance; "worse" / "better": every Δ beyond the tolerance on
    the same side; "unclear": the seeds disagree, or a baseline diverged. With one seed
    this is the tolerance test; with more, a claim must hold on every seed."""
    if not deltas or any(math.isnan(d) for d in deltas):
        return "unclear"
    if all(abs(d) <= tolerance for d in deltas):
        return "same"
    if all(d > tolerance for d in deltas):
        return "worse"
    if all(d < -tolerance for d in deltas):
        return "better"
    return "unclear"
