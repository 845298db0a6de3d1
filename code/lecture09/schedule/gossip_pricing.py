"""What one gossip exchange costs on demo 1's network, beside the all-reduce of Eq. 2
(lecture 9, §11.6; code 11, demo 5). Pure arithmetic: no torch.

On demo 1's proven-optimal layout (the one sync_pricing prices), the replicas of each
pipeline stage form a data-parallel group of D devices. In a gossip exchange a random
perfect matching pairs the D replicas of every stage, and each pair swaps its stage's whole
model: one message each way at the same time, so a pair (d, e) takes
latency[d][e] + c / bandwidth[d][e] for c = one stage's parameters in the row's bytes.

    own pair       what one replica waits for its own swap: the mean, over the pairs of its
                   group, is its expected wait (each of the D − 1 peers equally likely)
    round          everyone waits for the slowest pair of the whole matching (a synchronous
                   round); its expectation over uniform, independent matchings per stage is
                   computed exactly, and its worst case is the slowest link inside a group

Asynchronous local SGD (code 11, demo 7; §11.8) is priced on the same links: each stage's
server sits on one replica of its group, and every other replica swaps with it (its
pseudo-gradient up, the stage's model back) and waits for nobody else.
"""

from dataclasses import dataclass

from lecture09.ranks.alpha_beta import alpha_beta_time_s
from lecture09.schedule.layout_optimum import optimal_layout
from lecture09.schedule.schedule_setup import ScheduleSetup, build_networks


def perfect_matchings(items):
    """Every perfect matching of an even-length list: (len − 1)!! of them (105 for 8)."""
    items = list(items)
    if len(items) % 2:
        raise ValueError(f"a perfect matching needs an even number of replicas, got {len(items)}")
    if not items:
        return [[]]
    first, rest = items[0], items[1:]
    out = []
    for i, partner in enumerate(rest):
        for tail in perfect_matchings(rest[:i] + rest[i + 1:]):
            out.append([(first, partner)] + tail)
    return out


def expected_max_of_independent(choices):
    """E[max_s X_s] for independent X_s, each uniform over the list choices[s] (exact)."""
    values = sorted({x for xs in choices for x in xs})
    expected, below = 0.0, 0.0
    for v in values:
        at_most = 1.0
        for xs in choices:
            at_most *= sum(1 for x in xs if x <= v) / len(xs)
        expected += v * (at_most - below)
        below = at_most
    return expected


@dataclass(frozen=True)
class GossipPrice:
    own_mean_s: float     # one replica's expected wait for its own pair
    own_min_s: float      # the fastest pair inside a group
    own_max_s: float      # the slowest pair inside a group (the worst case of a round too)
    round_mean_s: float   # the expected slowest pair of a random matching, all stages
    n_pairs: int          # pairs inside the groups, all stages


def pair_seconds(net, groups, stage_bytes):
    """Per group (a list of devices), the seconds of each pair's swap of stage_bytes."""
    bits = stage_bytes * 8
    return [{(d, e): float(alpha_beta_time_s(bits, net["latency_s"][d][e], net["bandwidth_bps"][d][e]))
             for i, d in enumerate(group) for e in group[i + 1:]} for group in groups]


def price_groups(per_group):
    """A GossipPrice from pair_seconds' output."""
    times = [t for pairs in per_group for t in pairs.values()]
    if not times:
        raise ValueError("no pairs: a gossip exchange needs at least 2 replicas per stage")
    rounds = []
    for pairs in per_group:
        devices = sorted({d for pair in pairs for d in pair})
        rounds.append([max(pairs[tuple(sorted(p))] for p in m) for m in perfect_matchings(devices)])
    # every device of a group pairs with each of the others equally often: its expected wait is
    # the mean over its D − 1 pairs; averaged over the devices that is the mean over all pairs
    return GossipPrice(sum(times) / len(times), min(times), max(times), expected_max_of_independent(rounds),
                       len(times))


def _layout(bytes_per_param, setup):
    """Demo 1's network, proven-optimal layout, the stages' data-parallel groups (devices),
    one stage's bytes, and the layout's cost breakdown."""
    s = setup or ScheduleSetup()
    geo, _ = build_networks(s)
    optimum = optimal_layout(geo, s.n_stages, s.n_replicas, s.stage_param_bytes, s.act_bytes,
                             n_micro_batches=s.n_micro_batches)
    groups = [[optimum.assignment[(stage, r)] for r in range(s.n_replicas)] for stage in range(s.n_stages)]
    stage_bytes = s.n_params * bytes_per_param / s.n_stages
    return s, geo, groups, stage_bytes, s.layout_cost(geo, stage_bytes).breakdown(optimum.assignment)


def price_gossip(bytes_per_param, setup=None):
    """(GossipPrice, all-reduce seconds of the same bytes by Eq. 2, one iteration's seconds
    without a data-parallel exchange (compute + pipeline), setup) on demo 1's network and
    proven-optimal layout."""
    s, geo, groups, stage_bytes, cost = _layout(bytes_per_param, setup)
    return price_groups(pair_seconds(geo, groups, stage_bytes)), cost["dp"], s.compute_s + cost["pp"], s


@dataclass(frozen=True)
class ServerPrice:
    mean_s: float         # a replica's exchange with its stage's server: the mean over the replicas
    min_s: float          # that are not the server (the server's own replica exchanges nothing)
    max_s: float
    n_links: int          # replicas that exchange over a link, all stages


def price_servers(per_group):
    """A ServerPrice from pair_seconds' output: each stage's server sits on the replica of its
    group whose mean exchange time to the others is least (the lower device on a tie)."""
    times = []
    for pairs in per_group:
        devices = sorted({d for pair in pairs for d in pair})
        if len(devices) < 2:
            continue
        links = {h: [pairs[tuple(sorted((h, d)))] for d in devices if d != h] for h in devices}
        times += links[min(devices, key=lambda h: (sum(links[h]) / len(links[h]), h))]
    if not times:
        raise ValueError("no links: an asynchronous exchange needs at least 2 replicas per stage")
    return ServerPrice(sum(times) / len(times), min(times), max(times), len(times))


def price_server(bytes_per_param, setup=None):
    """(ServerPrice, all-reduce seconds of the same bytes by Eq. 2, one iteration's seconds
    without a data-parallel exchange, setup): asynchronous local SGD on demo 1's network, a
    replica sending its stage's pseudo-gradient to the server while the server sends the
    stage's model back, one message each way on one link, as a gossip pair."""
    s, geo, groups, stage_bytes, cost = _layout(bytes_per_param, setup)
    return price_servers(pair_seconds(geo, groups, stage_bytes)), cost["dp"], s.compute_s + cost["pp"], s
