"""Robust aggregators and attacks (robust/aggregators.py, robust/attacks.py): hand-computed
cases for each, invariants, and ByzFL (EPFL's library) as the reference where it imports.

ByzFL 0.0.11 requires torchvision, which would replace the pinned CPU torch, so it is not
in requirements.txt; `pip install --no-deps byzfl scipy` beside the pins runs the reference
tests (its top-level package imports torchvision, so they load its two modules directly)."""

import importlib.util
import math
import sys
import types

import pytest
import torch

from lecture09.robust import aggregators as agg
from lecture09.robust import attacks


def vecs(*rows):
    return [torch.tensor(r, dtype=torch.float32) for r in rows]


# --- hand-computed cases ----------------------------------------------------------------

def test_mean_and_median_by_hand():
    x = vecs([1, 10], [2, -4], [30, 0], [4, 2])
    assert torch.equal(agg.make("mean")(x), torch.tensor([37 / 4, 2.0]))
    # even n: the mean of the two middle values per coordinate: (2 + 4) / 2, (0 + 2) / 2
    assert torch.equal(agg.make("median")(x), torch.tensor([3.0, 1.0]))
    assert torch.equal(agg.make("median")(x[:3]), torch.tensor([2.0, 0.0]))   # odd n: the middle


def test_trimmed_mean_drops_f_from_each_end_per_coordinate():
    x = vecs([1, 10], [2, -4], [30, 0], [4, 2], [5, 100])
    # coordinate 0 sorted 1 2 4 5 30 -> drop 1 and 30 -> (2 + 4 + 5) / 3; coordinate 1: -4 0 2 10 100 -> (0 + 2 + 10) / 3
    assert torch.allclose(agg.make("trimmed-mean", f=1)(x), torch.tensor([11 / 3, 4.0]))
    assert torch.equal(agg.make("trimmed-mean", f=2)(x), torch.tensor([4.0, 2.0]))   # f = 2 of 5: the median
    with pytest.raises(agg.AggregatorError, match="n > 2f"):
        agg.make("trimmed-mean", f=2)(x[:4])


def test_krum_picks_the_vector_closest_to_its_neighbours():
    # n = 5, f = 1: n - f - 2 = 2 neighbours. Four points near the origin, one far away.
    x = vecs([0, 0], [1, 0], [0, 1], [1, 1], [10, 10])
    scores = agg.krum_scores(agg.stacked(x), f=1)
    # squared distances: (0,0)->(1,0) 1, ->(0,1) 1: score 2; (1,0): 1 + 1 = 2; (0,1): 2; (1,1): 2;
    # (10,10): nearest (1,1) 162, then (1,0)/(0,1) 181: 343
    assert scores.tolist() == [2.0, 2.0, 2.0, 2.0, 343.0]
    krum = agg.make("krum", f=1)
    assert torch.equal(krum(x), torch.tensor([0.0, 0.0])) and krum.chosen == [0]   # tie: lowest index
    multi = agg.make("multi-krum", f=1)                                            # m = n - f = 4
    assert torch.equal(multi(x), torch.tensor([0.5, 0.5])) and multi.chosen == [0, 1, 2, 3]
    with pytest.raises(agg.AggregatorError, match=r"n > 2f \+ 2"):
        agg.make("krum", f=1)(x[:4])


# Points on a line where Blanchard et al.'s n - f - 2 neighbours and ByzFL's n - f - 1 pick
# different vectors (Krum) and different sets (multi-Krum): the count decides the answer.
# (n, f, points, Krum's pick, multi-Krum's set, the scores with n - f - 2, with n - f - 1)
NEIGHBOUR_COUNT_CASES = [
    # n = 5, f = 1: 2 neighbours vs 3. With 2: 8 has 7 (1) and 14 (36): 37, the lowest;
    # 19 is worst (25 + 121). With 3: 7 has 8, 0, 14: 1 + 49 + 49 = 99 < 8's 1 + 36 + 64 = 101;
    # 0 is worst (49 + 64 + 196).
    (5, 1, [0, 7, 8, 14, 19], 2, [0, 1, 2, 3], [113, 50, 37, 61, 146], [309, 99, 101, 110, 290]),
    # n = 7, f = 2: 3 neighbours vs 4. With 3: 8 scores 1 + 9 + 16 = 26; 17 and 19 are worst.
    # With 4: 7 scores 1 + 4 + 25 + 36 = 66 < 8's 75; 1 and 19 are worst.
    (7, 2, [1, 5, 7, 8, 12, 17, 19], 3, [0, 1, 2, 3, 4],
     [101, 29, 30, 26, 66, 110, 174], [222, 78, 66, 75, 115, 210, 318]),
]


@pytest.mark.parametrize("n,f,points,pick,chosen,scores,byzfl_scores", NEIGHBOUR_COUNT_CASES)
def test_krum_counts_n_minus_f_minus_2_neighbours_where_the_count_decides(n, f, points, pick, chosen,
                                                                        scores, byzfl_scores):
    x = [torch.tensor([float(v)]) for v in points]
    assert agg.krum_scores(agg.stacked(x), f=f).tolist() == scores
    assert agg.krum_scores(agg.stacked(x), f=f, neighbours=n - f - 1).tolist() == byzfl_scores
    krum, multi = agg.make("krum", f=f), agg.make("multi-krum", f=f)
    assert krum(x).item() == points[pick] and krum.chosen == [pick]
    assert multi(x).item() == pytest.approx(sum(points[i] for i in chosen) / len(chosen))
    assert multi.chosen == chosen
    # ByzFL's count picks another vector and another set here (what the parameter is for)
    other, other_multi = agg.Krum(f=f, neighbours=n - f - 1), agg.MultiKrum(f=f, neighbours=n - f - 1)
    other(x), other_multi(x)
    assert other.chosen != [pick] and other_multi.chosen != chosen


def _krum_by_definition(x, f):
    """Krum and multi-Krum's choices written out from Blanchard et al.'s definition, pair by
    pair in float64: score(i) = the sum of the n - f - 2 smallest |x_i - x_j|², j ≠ i."""
    n = len(x)
    rows = [v.double() for v in x]
    score = [sum(sorted(float((rows[i] - rows[j]).square().sum()) for j in range(n) if j != i)[:n - f - 2])
             for i in range(n)]
    order = sorted(range(n), key=lambda i: (score[i], i))
    return order[0], sorted(order[:n - f])


@pytest.mark.parametrize("n,f", [(5, 1), (7, 2), (8, 2), (9, 3)])
def test_krum_on_random_inputs_equals_its_definition_where_the_neighbour_count_matters(n, f):
    g = torch.Generator().manual_seed(100 + n * 10 + f)
    decided = 0
    for _ in range(60):
        x = [torch.randn(3, generator=g) * (1 + 4 * (i < f)) for i in range(n)]
        pick, chosen = _krum_by_definition(x, f)
        krum, multi = agg.make("krum", f=f), agg.make("multi-krum", f=f)
        krum(x), multi(x)
        assert krum.chosen == [pick] and multi.chosen == chosen
        other, other_multi = agg.Krum(f=f, neighbours=n - f - 1), agg.MultiKrum(f=f, neighbours=n - f - 1)
        other(x), other_multi(x)
        decided += other.chosen != [pick] or other_multi.chosen != chosen
    assert decided >= 10, f"only {decided} of 60 draws where n - f - 1 neighbours would pick otherwise"


def test_centered_clip_moves_from_its_last_center_by_clipped_steps():
    cc = agg.make("centered-clip", tau=1.0)
    x = vecs([3, 4], [0, 0.5])
    # center 0: (3,4) has norm 5 -> clipped to (0.6, 0.8); (0, 0.5) stays; mean = (0.3, 0.65)
    first = cc(x)
    assert torch.allclose(first, torch.tensor([0.3, 0.65]))
    # the next call starts from (0.3, 0.65): differences (-0.3, -0.65), norm 0.716 < 1, twice -> mean -0.3, -0.65
    assert torch.allclose(cc(vecs([0, 0], [0, 0])), torch.tensor([0.0, 0.0]), atol=1e-7)


def test_bucketing_averages_in_buckets_then_aggregates():
    x = vecs([1], [2], [3], [4], [5])
    b = agg.Bucketing(agg.Mean(), s=2, seed=0)
    buckets = b.buckets(x)
    assert len(buckets) == 3                                      # ceil(5 / 2), the last has one
    flat = sorted(float(v) for v in torch.cat(buckets))
    # the input at index i is i + 1; the buckets take the shuffled indices two at a time
    order = torch.randperm(5, generator=torch.Generator().manual_seed(0)).tolist()
    expected = sorted([(order[0] + order[1] + 2) / 2, (order[2] + order[3] + 2) / 2, order[4] + 1.0])
    assert flat == expected
    assert agg.make("median", bucket=2).name == "median+bucket2"


def test_check_settings_refuses_what_cannot_run():
    agg.check_settings("krum", 8, 2)
    with pytest.raises(agg.AggregatorError, match="more than 2f \\+ 2 = 6"):
        agg.check_settings("krum", 8, 2, bucket=2)                # 4 bucket means
    with pytest.raises(agg.AggregatorError, match="f must be in 0..3"):
        agg.check_settings("mean", 4, 4)
    with pytest.raises(agg.AggregatorError, match="unknown aggregator"):
        agg.check_settings("average", 4, 1)


# --- invariants -------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(agg.AGGREGATORS))
def test_every_aggregator_returns_v_when_all_agree(name):
    v = torch.randn(50, generator=torch.Generator().manual_seed(3))
    out = agg.make(name, f=1, tau=1e9)(vecs(*[v.tolist()] * 7))
    assert torch.allclose(out, v, atol=1e-6)


@pytest.mark.parametrize("name", ["median", "trimmed-mean", "krum", "multi-krum"])
def test_one_huge_liar_cannot_move_a_robust_aggregate_outside_the_honest_range(name):
    g = torch.Generator().manual_seed(4)
    honest = [torch.randn(20, generator=g) for _ in range(7)]
    out = agg.make(name, f=1)(honest + [torch.full((20,), 1e6)])
    lo = torch.stack(honest).min(dim=0).values
    hi = torch.stack(honest).max(dim=0).values
    assert bool(((out >= lo - 1e-6) & (out <= hi + 1e-6)).all())
    assert not bool(((agg.make("mean")(honest + [torch.full((20,), 1e6)])) <= hi).all())   # the mean is moved


# --- attacks ----------------------------------------------------------------------------

def test_attacks_by_hand():
    own = vecs([1, -2])
    honest = vecs([1, 2], [3, 6])
    assert torch.equal(attacks.make("sign-flip")(own, honest)[0], torch.tensor([-1.0, 2.0]))
    assert torch.allclose(attacks.make("ipm")(own, honest)[0], torch.tensor([-0.2, -0.4]))
    # mean (2, 4); sample std (ddof 1) sqrt(2), sqrt(8): mean + 1.5 std
    assert torch.allclose(attacks.make("alie")(own, honest)[0],
                          torch.tensor([2 + 1.5 * math.sqrt(2), 4 + 1.5 * math.sqrt(8)]))
    tiny = attacks.make("tiny-dense")(vecs([0.0] * 1000), honest)[0]
    assert set(tiny.abs().tolist()) == {torch.tensor(attacks.TINY).item()} and 400 < int((tiny > 0).sum()) < 600
    fixed = attacks.make("tiny-dense-fixed")
    assert torch.equal(fixed(vecs([0.0] * 50), honest)[0], fixed(vecs([0.0] * 50), honest)[0])   # same signs
    loose = attacks.make("tiny-dense")
    assert not torch.equal(loose(vecs([0.0] * 50), honest)[0], loose(vecs([0.0] * 50), honest)[0])
    replay = attacks.make("replay")
    assert torch.equal(replay(own, honest)[0], own[0])            # round 1: nothing to replay
    assert torch.equal(replay(own, vecs([9, 9], [0, 0]))[0], honest[0])   # round 2: round 1's honest[0]
    assert torch.equal(attacks.make("none")(own, honest)[0], own[0])


# --- ByzFL as the reference -------------------------------------------------------------

def load_byzfl():
    """ByzFL's aggregators and attacks modules, without its top-level package (which imports
    torchvision); None if byzfl (and scipy, which it needs) is not installed."""
    spec = importlib.util.find_spec("byzfl")
    if spec is None or importlib.util.find_spec("scipy") is None:
        return None
    root = spec.submodule_search_locations[0]
    package = types.ModuleType("byzfl")
    package.__path__ = [root]
    saved = sys.modules.get("byzfl")
    sys.modules["byzfl"] = package
    try:
        aggregators = importlib.import_module("byzfl.aggregators")
        attacks_mod = importlib.import_module("byzfl.attacks.attacks")
    finally:
        if saved is not None:
            sys.modules["byzfl"] = saved
    return aggregators, attacks_mod


BYZFL = load_byzfl()
needs_byzfl = pytest.mark.skipif(BYZFL is None, reason="byzfl is not installed: it requires torchvision, which "
                                 "would replace the pinned CPU torch (pip install --no-deps byzfl scipy)")


@needs_byzfl
@pytest.mark.parametrize("n,f", [(8, 1), (8, 2), (7, 2), (5, 1)])
def test_aggregators_equal_byzfl_on_random_inputs(n, f):
    ref, _ = BYZFL
    g = torch.Generator().manual_seed(n * 10 + f)
    for trial in range(5):
        x = [torch.randn(300, generator=g) * (1 + 5 * (i == 0)) for i in range(n)]
        X = torch.stack(x)
        pairs = [(agg.make("mean")(x), ref.Average()(X)),
                 (agg.make("median")(x), ref.Median()(X)),
                 (agg.make("trimmed-mean", f=f)(x), ref.TrMean(f=f)(X)),
                 (agg.Krum(f=f, neighbours=n - f - 1)(x), ref.Krum(f=f)(X)),         # ByzFL's neighbour count
                 (agg.MultiKrum(f=f, neighbours=n - f - 1)(x), ref.MultiKrum(f=f)(X))]
        cc = agg.CenteredClip(tau=2.0)
        ref_cc = ref.CenteredClipping(tau=2.0)
        pairs += [(cc(x), ref_cc(X)), (cc(x), ref_cc(X))]                            # two rounds: the center moves
        for ours, theirs in pairs:
            assert torch.allclose(ours, torch.as_tensor(theirs, dtype=torch.float32), atol=1e-6, rtol=0)


@needs_byzfl
def test_attacks_equal_byzfl():
    _, ref = BYZFL
    g = torch.Generator().manual_seed(5)
    honest = [torch.randn(200, generator=g) for _ in range(6)]
    X = torch.stack(honest)
    assert torch.allclose(attacks.make("alie")(honest[:1], honest)[0], ref.ALittleIsEnough(tau=1.5)(X), atol=1e-6)
    assert torch.allclose(attacks.make("ipm")(honest[:1], honest)[0],
                          ref.InnerProductManipulation(tau=0.1)(X), atol=1e-6)


@pytest.mark.parametrize("bucket", [0, 2])
def test_a_stateful_aggregator_saved_and_loaded_goes_on_exactly(bucket):
    """What code 6's checkpoint relies on: centered clipping (and bucketing's shuffle)
    restored from state_of() continue as if never stopped; a fresh one does not."""
    from lecture09.robust import aggregators as ag
    gen = torch.Generator().manual_seed(0)
    rounds = [[torch.randn(5, generator=gen) for _ in range(4)] for _ in range(4)]
    a = ag.make("centered-clip", f=1, bucket=bucket, tau=0.5)
    for vectors in rounds[:2]:
        a(vectors)
    b, fresh = ag.make("centered-clip", f=1, bucket=bucket, tau=0.5), ag.make("centered-clip", f=1, bucket=bucket,
                                                                             tau=0.5)
    ag.load_state(b, ag.state_of(a))
    for vectors in rounds[2:]:
        out_a, out_b, out_fresh = a(vectors), b(vectors), fresh(vectors)
        assert torch.equal(out_a, out_b)
    assert not torch.equal(out_a, out_fresh)
    assert ag.state_of(ag.make("median", f=1)) == {}


def test_clip_update_by_hand():
    from lecture09.robust.aggregators import clip_update
    before = torch.tensor([1.0, 1.0])
    after = torch.tensor([4.0, 5.0])                       # the change (3, 4) has norm 5
    assert torch.allclose(clip_update(before, after, 2.5), torch.tensor([2.5, 3.0]))
    assert torch.equal(clip_update(before, after, 5.0), after) and torch.equal(clip_update(before, after, 9.0), after)
    assert torch.equal(clip_update(before, before.clone(), 1.0), before)    # no change: nothing to cut
