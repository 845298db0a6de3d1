"""Context parallelism: the tiny GPT's causal ALiBi attention with the sequence split over
gloo ranks, two ways: ring attention and Ulysses (lecture 9, code 4, demo 7; notes §4.14).

Introduced in lecture 9, §4.14 (上下文并行 context parallelism); imported by
context_parallel_report.py and tests/test_context_parallel.py.

Every rank holds some positions of the sequence (its `positions`) for all the batch, and a
replica of the attention layer (lecture 1's SelfAttention: qkv, then per head softmax(q·kᵀ/√d
+ ALiBi bias + causal mask)·v, then proj). qkv and proj act on each position alone; only
the attention core needs the other positions' keys and values.

- Layouts. "contiguous": rank r holds block r of p equal blocks. "zigzag" (the load-balanced
  split of Megatron-LM's context parallelism): the sequence is cut into 2p chunks and rank r
  holds chunks r and 2p − 1 − r, so every rank has as many early positions (little to
  attend to) as late ones (much to attend to).
- Ring attention (Liu, Zaharia & Abbeel 2023): the ranks' keys and values go around the ring
  p − 1 times (`RingShift`: isend to the next rank, recv from the previous). At each step a
  rank scores its queries against the block it holds, with the ALiBi bias and causal mask of
  the block's true positions, and folds it into an online softmax (a running maximum, sum
  and weighted sum, as in FlashAttention). A block entirely in the future of every query is
  skipped. Backward is autograd's: each shift's gradient is the reverse shift, so the key
  and value gradients travel back around the ring. (This keeps every block for backward;
  FlashAttention-style kernels recompute each block instead.)
- Ulysses (Jacobs et al. 2023, DeepSpeed-Ulysses): an all-to-all turns "my positions, all
  heads" into "all positions, my n_head / p heads"; each rank runs ordinary attention on
  its heads; a second all-to-all turns it back. It needs n_head divisible by p.

The reference is the layer on the whole sequence in one process: outputs and every
gradient (input, qkv, proj) must match; a rank's weight gradients are summed over ranks.
"""

import math
from dataclasses import dataclass

LAYOUTS = ("contiguous", "zigzag")
METHODS = ("ring", "ulysses")
MASKED = -1e30                      # a finite "−inf": an all-masked row of one block stays NaN-free


@dataclass(frozen=True)
class CPCase:
    seq_len: int = 96               # the tiny GPT's block_size
    batch: int = 2
    n_embd: int = 96
    n_head: int = 4
    seed: int = 0


def check_case(case, world_size, layout="contiguous", method="ring"):
    pieces = 2 * world_size if layout == "zigzag" else world_size
    if case.seq_len % pieces:
        raise ValueError(f"the sequence of {case.seq_len} must split into {pieces} equal pieces ({layout}, p = {world_size})")
    if method == "ulysses" and case.n_head % world_size:
        raise ValueError(f"Ulysses needs the heads n_head = {case.n_head} divisible by p = {world_size}")


def positions(layout, rank, world_size, seq_len):
    """The positions rank `rank` holds, in increasing order."""
    if layout == "contiguous":
        b = seq_len // world_size
        return list(range(rank * b, (rank + 1) * b))
    c = seq_len // (2 * world_size)
    return list(range(rank * c, (rank + 1) * c)) + list(range((2 * world_size - 1 - rank) * c,
                                                              (2 * world_size - rank) * c))


# ---------------------------------------------------------------------------
# Work per rank under the causal mask
# ---------------------------------------------------------------------------

def tiles(layout, rank, world_size):
    """(query tile, key tile) pairs rank `rank` must compute, in tiles of seq_len / (2p)
    positions: a pair is needed unless every key is after every query."""
    if layout == "contiguous":
        mine = [2 * rank, 2 * rank + 1]
    else:
        mine = [rank, 2 * world_size - 1 - rank]
    return sum(q + 1 for q in mine)          # tile q attends to tiles 0..q


def unmasked_pairs(layout, rank, world_size, seq_len):
    """(query, key) position pairs rank `rank` scores that the causal mask keeps."""
    return sum(i + 1 for i in positions(layout, rank, world_size, seq_len))


# ---------------------------------------------------------------------------
# Bytes per rank
# ---------------------------------------------------------------------------

def ring_bytes_per_rank(seq_len, n_embd, world_size, element_bytes=2):
    """Forward and backward of one attention layer: p − 1 shifts of (K, V) for its T/p positions
    forward, and p − 1 shifts of their gradients back."""
    return 2 * (world_size - 1) * 2 * (seq_len // world_size) * n_embd * element_bytes


def ulysses_bytes_per_rank(seq_len, n_embd, world_size, element_bytes=2):
    """Forward and backward: 4 all-to-alls (q, k, v in, the output back) each way, each sending
    (p − 1)/p of a (T/p, C) tensor."""
    return 2 * 4 * (world_size - 1) * (seq_len // world_size) * n_embd * element_bytes // world_size


# ---------------------------------------------------------------------------
# The computation
# ---------------------------------------------------------------------------

def make_layer_and_inputs(case):
    """Lecture 1's SelfAttention for this case (seeded), the input (B, T, C) and a probe for
    the loss Σ y · probe."""
    import torch

    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    from dataclasses import replace

    config = replace(MODEL_CONFIG, block_size=case.seq_len, n_embd=case.n_embd, n_head=case.n_head)
    torch.manual_seed(case.seed)
    layer = tiny_gpt.SelfAttention(config)
    g = torch.Generator().manual_seed(case.seed + 1)
    x = torch.randn(case.batch, case.seq_len, case.n_embd, generator=g)
    probe = torch.randn(case.batch, case.seq_len, case.n_embd, generator=g)
    return layer, x, probe


def reference(case):
    """The layer on the whole sequence: (y, x.grad, {name: grad})."""
    layer, x, probe = make_layer_and_inputs(case)
    x = x.clone().requires_grad_()
    y = layer(x)
    (y * probe).sum().backward()
    return y.detach(), x.grad, {n: p.grad for n, p in layer.named_parameters()}


def _bias(slopes, q_pos, k_pos):
    """(nh, Tq, Tk): ALiBi's −slope·(i − j) where j <= i, MASKED where j > i."""
    import torch

    distance = (q_pos[:, None] - k_pos[None, :]).float()
    bias = -slopes[:, None, None] * distance
    return torch.where(distance < 0, torch.full_like(bias, MASKED), bias)


def _heads(t, n_head):
    b, n, c = t.shape
    return t.view(b, n, n_head, c // n_head).transpose(1, 2)           # (B, nh, n, hs)


def _ring_shift_function():
    import torch
    import torch.distributed as dist

    class RingShift(torch.autograd.Function):
        """Send to rank + 1, receive from rank − 1; backward: the reverse."""

        @staticmethod
        def forward(ctx, t):
            return _shift(t, +1)

        @staticmethod
        def backward(ctx, grad):
            return _shift(grad, -1)

    def _shift(t, step):
        rank, p = dist.get_rank(), dist.get_world_size()
        out = torch.empty_like(t)
        work = dist.isend(t.contiguous(), (rank + step) % p)
        dist.recv(out, (rank - step) % p)
        work.wait()
        return out

    return RingShift.apply


def cp_worker(rank, world_size, case, layout, method):
    """Rank body: the layer on this rank's positions. Returns {"y", "x_grad" (B, n, C),
    "grads" (summed over ranks), "positions", "blocks": key blocks scored, "skipped"}."""
    import torch
    import torch.distributed as dist

    from lecture09.ranks.all_to_all import AllToAll

    check_case(case, world_size, layout, method)
    layer, x_full, probe = make_layer_and_inputs(case)
    pos = torch.tensor(positions(layout, rank, world_size, case.seq_len))
    x = x_full[:, pos].clone().requires_grad_()
    nh, c = case.n_head, case.n_embd
    hs = c // nh
    slopes = layer.bias.new_tensor([2.0 ** -h for h in range(nh)])   # tiny_gpt.alibi_slopes
    q, k, v = layer.qkv(x).split(c, dim=2)
    q = q * (1.0 / math.sqrt(hs))
    blocks = skipped = 0
    if method == "ring":
        shift = _ring_shift_function()
        qh, kh, vh = _heads(q, nh), _heads(k, nh), _heads(v, nh)       # (B, nh, n, hs)
        kv, k_pos = torch.stack([kh, vh]), pos
        m = l = acc = None
        for step in range(world_size):
            if step:
                kv = shift(kv)
                k_pos = torch.tensor(positions(layout, (rank - step) % world_size, world_size, case.seq_len))
            if int(k_pos.min()) > int(pos.max()):                      # all in the future: nothing to add
                skipped += 1
                continue
            blocks += 1
            scores = qh @ kv[0].transpose(-2, -1) + _bias(slopes, pos, k_pos)     # (B, nh, n, n_k)
            block_max = scores.amax(-1, keepdim=True)
            if m is None:
                m = block_max
                e = torch.exp(scores - m)
                l, acc = e.sum(-1, keepdim=True), e @ kv[1]
            else:
                new = torch.maximum(m, block_max)
                e, fade = torch.exp(scores - new), torch.exp(m - new)
                l, acc, m = l * fade + e.sum(-1, keepdim=True), acc * fade + e @ kv[1], new
        # Every rank must run the reverse of every shift in backward, also where the last
        # block it received was skipped: a zero term keeps that block in the graph.
        y = (acc / l).transpose(1, 2).reshape(x.shape) + 0.0 * kv.sum()
    else:
        n, b, hp = x.shape[1], x.shape[0], nh // world_size

        def scatter_heads(t):            # (B, n, C) → (B, nh/p, T, hs) in the sequence's order
            blocks_ = t.view(b, n, world_size, hp, hs).permute(2, 0, 3, 1, 4).contiguous()   # (p, B, hp, n, hs)
            got = AllToAll.apply(blocks_)                                  # block j: rank j's positions, my heads
            return got.permute(1, 2, 0, 3, 4).reshape(b, hp, world_size * n, hs)

        everyone = torch.cat([torch.tensor(positions(layout, j, world_size, case.seq_len)) for j in range(world_size)])
        qh, kh, vh = scatter_heads(q), scatter_heads(k), scatter_heads(v)
        my_slopes = slopes[rank * hp:(rank + 1) * hp]
        att = torch.softmax(qh @ kh.transpose(-2, -1) + _bias(my_slopes, everyone, everyone), dim=-1)
        out = att @ vh                                                     # (B, hp, T, hs)
        back = out.view(b, hp, world_size, n, hs).permute(2, 0, 3, 1, 4).contiguous()    # block j: rank j's positions
        mine = AllToAll.apply(back)                                        # (p, B, n, hp, hs): every rank's heads
        y = mine.permute(1, 2, 0, 3, 4).reshape(b, n, c)
        blocks = world_size
    y = layer.proj(y)
    (y * probe[:, pos]).sum().backward()
    grads = {}
    for name, p in layer.named_parameters():
        dist.all_reduce(p.grad)
        grads[name] = p.grad
    return {"y": y.detach(), "x_grad": x.grad, "grads": grads, "positions": pos.tolist(),
            "blocks": blocks, "skipped": skipped}


def cp_runs_worker(rank, world_size, case, runs):
    """Rank body for several (method, layout) runs in one launch: {run: cp_worker's result}."""
    return {run: cp_worker(rank, world_size, case, run[1], run[0]) for run in runs}


def assemble(ranks, case):
    """The ranks' outputs and input gradients put back in sequence order."""
    import torch

    y = torch.empty(case.batch, case.seq_len, case.n_embd)
    x_grad = torch.empty_like(y)
    for r in ranks:
        y[:, r["positions"]] = r["y"]
        x_grad[:, r["positions"]] = r["x_grad"]
    same = all(torch.equal(r["grads"][n], ranks[0]["grads"][n]) for r in ranks for n in r["grads"])
    return {"y": y, "x_grad": x_grad, "grads": ranks[0]["grads"], "grads_agree": same}
