"""Robust aggregators: how a receiver turns n workers' gradients into one, when up to f of
the workers may lie (lecture 9, notes §8; code 08 runs them, code 6's server too).

One class each, one registry row each, like the compression schemes. An aggregator is
called on a list of n flat float32 vectors (d,) and returns one (d,) vector:

    mean           (x_1 + ... + x_n) / n: today's rule; one liar moves it anywhere
    median         per coordinate, the middle value (the mean of the two middle ones for
                   even n). Yin et al., ICML 2018
    trimmed-mean   per coordinate, drop the f largest and the f smallest, average the
                   other n - 2f. Yin et al., ICML 2018 (needs n > 2f)
    krum           the one vector whose n - f - 2 nearest others are closest (sum of
                   squared distances). Blanchard et al., NeurIPS 2017 (needs n > 2f + 2)
    multi-krum     the mean of the m = n - f vectors with the best Krum scores
    centered-clip  start at the last round's aggregate v; v += mean_i clip(x_i - v, tau),
                   L times. Karimireddy, He & Jaggi, ICML 2021 (the center is its momentum)

Bucketing (Karimireddy, He & Jaggi, ICLR 2022) is a step before any of them: shuffle the
n vectors, average them in buckets of s, aggregate the ceil(n / s) bucket means
(`Bucketing`, or `make(..., bucket=s)`).

Checked in tests/test_aggregators.py against hand-computed cases, and against ByzFL
(EPFL's library) wherever it can be imported; the one place the conventions differ is
Krum's neighbour count (ByzFL takes n - f - 1), which is a parameter here.
"""

import math

import torch

from lecture09.robust.aggregator_rules import AggregatorError, check_settings  # noqa: F401  (torch-free; re-exported)


def stacked(vectors):
    """(n, d) float32 from a list of n (d,) vectors."""
    if not vectors:
        raise AggregatorError("no vectors to aggregate")
    return torch.stack([v.reshape(-1).float() for v in vectors])


def squared_distances(x):
    """(n, n) float64 squared L2 distances between the rows of x, each pair summed directly
    (no |a|^2 + |b|^2 - 2ab, which cancels badly when two vectors are close)."""
    n = x.size(0)
    xd = x.double()
    out = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = (xd[i] - xd[j]).square().sum()
    return out


class Mean:
    name = "mean"

    def __init__(self, f=0):
        self.f = f

    def __call__(self, vectors):
        return stacked(vectors).mean(dim=0)


class Median:
    name = "median"

    def __init__(self, f=0):
        self.f = f

    def __call__(self, vectors):
        x = stacked(vectors).sort(dim=0).values
        n = x.size(0)
        if n % 2:
            return x[n // 2].clone()
        return (x[n // 2 - 1] + x[n // 2]) / 2


class TrimmedMean:
    name = "trimmed-mean"

    def __init__(self, f=1):
        self.f = f

    def __call__(self, vectors):
        x = stacked(vectors)
        n = x.size(0)
        if 2 * self.f >= n:
            raise AggregatorError(f"trimmed-mean needs n > 2f: n = {n}, f = {self.f}")
        if self.f == 0:
            return x.mean(dim=0)
        return x.sort(dim=0).values[self.f:n - self.f].mean(dim=0)


def krum_scores(x, f, neighbours=None):
    """(n,) float64: each row's sum of squared distances to its `neighbours` nearest other
    rows (Blanchard et al.: n - f - 2)."""
    n = x.size(0)
    if neighbours is None and n <= 2 * f + 2:
        raise AggregatorError(f"krum needs n > 2f + 2 (Blanchard et al.): n = {n}, f = {f}")
    k = n - f - 2 if neighbours is None else neighbours
    if not 1 <= k <= n - 1:
        raise AggregatorError(f"krum: {k} neighbours of {n} vectors")
    d2 = squared_distances(x)
    d2.fill_diagonal_(math.inf)                     # a vector is not its own neighbour
    return d2.sort(dim=1).values[:, :k].sum(dim=1)


class Krum:
    name = "krum"

    def __init__(self, f=1, neighbours=None):
        self.f, self.neighbours = f, neighbours
        self.chosen = None          # the index picked last time (the demo prints it)

    def __call__(self, vectors):
        x = stacked(vectors)
        scores = krum_scores(x, self.f, self.neighbours)
        self.chosen = [int(scores.argmin())]       # ties: the lowest index
        return x[self.chosen[0]].clone()


class MultiKrum:
    name = "multi-krum"

    def __init__(self, f=1, m=None, neighbours=None):
        self.f, self.m, self.neighbours = f, m, neighbours
        self.chosen = None

    def __call__(self, vectors):
        x = stacked(vectors)
        n = x.size(0)
        m = n - self.f if self.m is None else self.m
        scores = krum_scores(x, self.f, self.neighbours)
        order = sorted(range(n), key=lambda i: (float(scores[i]), i))
        self.chosen = sorted(order[:m])
        return x[self.chosen].mean(dim=0)


class CenteredClip:
    """Stateful: the center is the previous call's result (zeros before the first)."""
    name = "centered-clip"

    def __init__(self, f=0, tau=1.0, iterations=1):
        if not tau > 0:
            raise AggregatorError(f"centered-clip needs tau > 0, got {tau}")
        self.f, self.tau, self.iterations = f, tau, iterations
        self.center = None

    def __call__(self, vectors):
        x = stacked(vectors)
        v = torch.zeros(x.size(1)) if self.center is None else self.center
        for _ in range(self.iterations):
            diff = x - v                                                   # (n, d)
            norms = diff.double().square().sum(dim=1).sqrt()               # (n,) float64
            scale = torch.clamp(self.tau / norms, max=1.0).float()         # 1/0 = inf -> 1
            v = v + (diff * scale[:, None]).mean(dim=0)
        self.center = v.clone()
        return v

    def state_dict(self):
        """The center: what a restarted server needs to go on as if it had never stopped."""
        return {"center": None if self.center is None else self.center.clone()}

    def load_state_dict(self, state):
        self.center = None if state["center"] is None else state["center"].clone()


class Bucketing:
    """Shuffle, average in buckets of s (the last bucket may be smaller), then aggregate
    the bucket means with `inner`. The shuffle uses its own generator: seeded, so a run
    repeats."""

    def __init__(self, inner, s=2, seed=0):
        if s < 1:
            raise AggregatorError(f"bucket size must be >= 1, got {s}")
        self.inner, self.s = inner, s
        self.name = f"{inner.name}+bucket{s}"
        self.generator = torch.Generator().manual_seed(seed)

    def buckets(self, vectors):
        order = torch.randperm(len(vectors), generator=self.generator).tolist()
        return [stacked([vectors[i] for i in order[k:k + self.s]]).mean(dim=0)
                for k in range(0, len(order), self.s)]

    def __call__(self, vectors):
        return self.inner(self.buckets(vectors))

    def state_dict(self):
        return {"generator": self.generator.get_state(), "inner": state_of(self.inner)}

    def load_state_dict(self, state):
        self.generator.set_state(state["generator"])
        load_state(self.inner, state["inner"])


def clip_update(before, after, cap):
    """The weights after a step whose change after - before (flat (d,) vectors) is cut to L2
    norm `cap` if it is longer (the norm in float64): a bound on how far one step moves the
    weights, whatever the optimizer did with the gradient. It bounds the size, not the
    direction; code 8's table (1) measures what that leaves a liar (notes §8)."""
    delta = after - before
    norm = float(delta.double().norm())
    return before + delta * (cap / norm) if norm > cap else after


def state_of(aggregator):
    """What an aggregator carries from one call to the next ({} for the stateless ones)."""
    return aggregator.state_dict() if hasattr(aggregator, "state_dict") else {}


def load_state(aggregator, state):
    if hasattr(aggregator, "load_state_dict"):
        aggregator.load_state_dict(state)


AGGREGATORS = {cls.name: cls for cls in (Mean, Median, TrimmedMean, Krum, MultiKrum, CenteredClip)}


def make(name, f=1, bucket=0, seed=0, tau=1.0):
    """The aggregator `name` for at most f liars; bucket = s > 1 puts Bucketing(s) before it."""
    if name not in AGGREGATORS:
        raise AggregatorError(f"unknown aggregator {name!r}; expected one of {tuple(AGGREGATORS)}")
    cls = AGGREGATORS[name]
    aggregator = cls(f=f, tau=tau) if cls is CenteredClip else cls(f=f)
    return Bucketing(aggregator, bucket, seed) if bucket > 1 else aggregator
