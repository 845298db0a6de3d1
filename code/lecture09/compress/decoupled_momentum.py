"""DeMo, decoupled momentum (Peng, Quesnelle & Kingma 2024, arXiv 2411.19870): each worker
keeps its own momentum and sends only its fast-moving part, the largest coefficients of a
chunked DCT; what it does not send stays in its momentum (lecture 9, §11.4; code 11, demo 3).

One step, per tensor, at every worker w (the authors' demo.py, bloc97/DeMo, class DeMo):

  m_w ← β m_w + lr g_w                         (the local momentum, β = compression decay)
  C_w = DCT(m_w)   over chunks of s1 × s2      (orthonormal DCT-II in both directions;
                                                s = the largest divisor of a side ≤ chunk)
  keep the k largest |C_w| of every chunk; q_w = IDCT(those k, zeros elsewhere)
  m_w ← m_w − q_w                               (what was sent leaves the momentum)
  all-gather every worker's (index, value) pairs
  Q = IDCT(the mean, per coefficient, over the workers that sent it)
  θ ← θ (1 − lr λ) − lr sign(Q)                 (sign-SGD; λ = DeMo's weight decay)

The pairs cannot be summed on the way like a ring all-reduce (each worker keeps different
coefficients), so every worker receives the others' pairs: (W − 1) × what it sends.
No gradient clipping (demo.py has none). Bytes on the wire: a kept coefficient is an index
(int16 while a chunk has at most 32,768 coefficients, else int32; demo.py sends int64,
topk's own type) and an fp32 value.

The workers are simulated in one process as in training.py: one model, W gradients of W
slices of the batch; the weights stay identical at every worker because every worker
applies the same sign(Q). tests/test_decoupled_momentum.py checks this module against
demo.py itself, step by step, when DEMO_REFERENCE points to a copy of it.
"""

import math
import time

import torch

from lecture09.compress import run_progress
from lecture09.compress import training as engine


def chunk_side(n, target):
    """The largest divisor of n that is at most target (demo.py's rule): 1 for a prime side
    longer than the target."""
    if n < 1 or target < 1:
        raise ValueError(f"need a side and a chunk of at least 1, got {n} and {target}")
    return max(d for d in range(1, min(n, target) + 1) if n % d == 0)


def dct_matrix(n, dtype=torch.float32):
    """The orthonormal DCT-II matrix D (n, n): C = D x; D Dᵀ = I, so x = Dᵀ C."""
    k = torch.arange(n, dtype=torch.float64)[:, None]
    i = torch.arange(n, dtype=torch.float64)[None, :]
    d = torch.cos(math.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2.0 / n)
    d[0] /= math.sqrt(2.0)
    return d.to(dtype)


class ChunkedDCT:
    """A tensor's chunked DCT: a matrix (r, c) in chunks of (s1, s2), a vector (n,) in chunks
    of s; encode gives (chunks, coefficients per chunk), decode undoes it exactly."""

    def __init__(self, shape, target_chunk, dtype=torch.float32, dct=True):
        if len(shape) not in (1, 2):
            raise ValueError(f"DeMo here handles vectors and matrices, not shape {tuple(shape)}")
        self.shape = tuple(shape)
        self.sides = tuple(chunk_side(n, target_chunk) for n in self.shape)
        # dct=False: the same chunks, the identity instead of the DCT (SparseLoCo's chunks)
        self.bases = [dct_matrix(s, dtype) if dct else torch.eye(s, dtype=dtype) for s in self.sides]

    @property
    def per_chunk(self):
        return math.prod(self.sides)

    @property
    def n_chunks(self):
        return math.prod(n // s for n, s in zip(self.shape, self.sides))

    def encode(self, x):
        """x (shape) -> coefficients (n_chunks, per_chunk)."""
        if len(self.shape) == 1:
            (s,), (d,) = self.sides, self.bases
            return x.reshape(-1, s) @ d.T                       # (chunks, s): each row D x
        (s1, s2), (d1, d2) = self.sides, self.bases
        r, c = self.shape
        blocks = x.reshape(r // s1, s1, c // s2, s2).permute(0, 2, 1, 3)   # (y, x, s1, s2)
        return (d1 @ blocks @ d2.T).reshape(-1, s1 * s2)            # D1 X D2ᵀ, row-major

    def decode(self, coefs):
        """coefficients (n_chunks, per_chunk) -> x (shape)."""
        if len(self.shape) == 1:
            (d,) = self.bases
            return (coefs @ d).reshape(self.shape)
        (s1, s2), (d1, d2) = self.sides, self.bases
        r, c = self.shape
        blocks = coefs.reshape(r // s1, c // s2, s1, s2)
        return (d1.T @ blocks @ d2).permute(0, 2, 1, 3).reshape(r, c)


def top_per_chunk(coefs, k):
    """(indices, values) of the k largest |coefficient| in every chunk (row); k is clamped to
    1..per_chunk as demo.py clamps it."""
    k = max(1, min(k, coefs.shape[-1]))
    idx = torch.topk(coefs.abs(), k, dim=-1, sorted=False).indices
    return idx, torch.gather(coefs, -1, idx)


def scatter_mean(shape, indices, values):
    """(chunks, per_chunk) zeros, with every position that some worker sent set to the mean
    of the values sent for it (positions nobody sent stay 0): demo.py's scatter_reduce
    "mean" without self. indices, values: lists, one (chunks, k) per worker."""
    idx, val = torch.cat(indices, dim=-1), torch.cat(values, dim=-1)
    total = torch.zeros(shape, dtype=val.dtype).scatter_add_(-1, idx, val)
    count = torch.zeros(shape, dtype=val.dtype).scatter_add_(-1, idx, torch.ones_like(val))
    return torch.where(count > 0, total / count.clamp(min=1), total)


def index_bytes(per_chunk):
    """Bytes of one coefficient's index: int16 while it fits, else int32."""
    return 2 if per_chunk <= 1 << 15 else 4


class DeMo:
    """The DeMo step for n_workers simulated workers over the tensors `params` (in order).
    step(grads, lr) takes one gradient list per worker and updates the parameters in place;
    sent_bytes is what one worker sends per step (the same every step)."""

    def __init__(self, params, n_workers, topk=32, chunk=64, decay=0.999, weight_decay=0.0):
        if topk < 1 or chunk < 1:
            raise ValueError(f"top-k {topk} and chunk {chunk} must be positive")
        if not 0 <= decay < 1:
            raise ValueError(f"the momentum decay must be in [0, 1), got {decay}")
        self.params, self.n_workers = list(params), n_workers
        self.topk, self.decay, self.weight_decay = topk, decay, weight_decay
        self.transforms = [ChunkedDCT(p.shape, chunk, p.dtype) for p in self.params]
        self.momenta = [[torch.zeros_like(p) for p in self.params] for _ in range(n_workers)]
        self.sent_bytes = sum(t.n_chunks * min(topk, t.per_chunk) * (index_bytes(t.per_chunk) + 4)
                              for t in self.transforms)

    @property
    def sent_fraction(self):
        """Coefficients sent per parameter."""
        kept = sum(t.n_chunks * min(self.topk, t.per_chunk) for t in self.transforms)
        return kept / sum(p.numel() for p in self.params)

    @torch.no_grad()
    def step(self, grads, lr):
        """grads[w][i]: worker w's gradient of params[i]."""
        for i, (p, t) in enumerate(zip(self.params, self.transforms)):
            indices, values = [], []
            for w in range(self.n_workers):
                m = self.momenta[w][i]
                m.mul_(self.decay).add_(grads[w][i], alpha=lr)
                coefs = t.encode(m)
                idx, val = top_per_chunk(coefs, self.topk)
                sent = torch.zeros_like(coefs).scatter_(-1, idx, val)
                m.sub_(t.decode(sent))
                indices.append(idx)
                values.append(val)
            update = t.decode(scatter_mean((t.n_chunks, t.per_chunk), indices, values))
            if self.weight_decay:
                p.mul_(1.0 - lr * self.weight_decay)
            p.add_(torch.sign(update), alpha=-lr)


def train(run, seeds, setup):
    """Train setup.model with DeMo, run.param = (top-k per chunk, chunk), lr
    setup.demo_lr on lecture 1's schedule; a RunResult (bytes: what one worker sends)."""
    from lecture01 import tiny_gpt

    topk, chunk = run.param
    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    train_data, val_data = engine.world_tokens(setup.world_seed)
    r, n_workers = setup.recipe, setup.n_workers
    model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    params = list(model.parameters())
    demo = DeMo(params, n_workers, topk=topk, chunk=chunk, decay=setup.demo_decay,
                weight_decay=setup.demo_weight_decay)
    gen = torch.Generator().manual_seed(seeds.data)
    losses, diverged = [], False
    for step in range(r.steps):
        lr = tiny_gpt.lr_at(step, r.steps, setup.demo_lr)
        x, y = tiny_gpt.get_batch(train_data, r.batch_size, model.config.block_size, gen)
        model.train()
        flat, loss_sum = engine.worker_gradients(model, x, y, n_workers, bf16=setup.precision == "bf16")
        if not math.isfinite(loss_sum):
            diverged = True
            break
        grads = [list(torch.split(g, [p.numel() for p in params])) for g in flat]
        demo.step([[g.view_as(p) for g, p in zip(gs, params)] for gs in grads], lr)
        losses.append(loss_sum / n_workers)
        run_progress.step_done(step + 1)
    for p in params:
        p.grad = None
    return engine.finish_run(run, seeds, model, val_data, started, diverged, demo.sent_bytes,
                             len(losses), losses=losses)
