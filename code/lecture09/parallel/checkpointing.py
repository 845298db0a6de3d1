"""Activation checkpointing measured on the tiny GPT (lecture 9, code 3, demo 5; notes §3.2).

Autograd's saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks) see every tensor
an op keeps for the backward pass. SavedBytes counts the distinct storages among them, so
two views of one tensor count once and a tensor that is alive only because a view of it
was saved counts whole, as memory sees it; parameters are not activations and are left
out, and a buffer (the ALiBi bias) would be counted apart (none is saved). The model runs through block_forward, which is tiny_gpt.Block.forward with the
attention's core (q·kᵀ, softmax, ·v) split out so that it can be recomputed alone:

  none       nothing recomputed;
  selective  the attention core checkpointed (Korthikanti et al. 2022's selective recomputation);
  full       every k consecutive blocks checkpointed as one segment (torch.utils.checkpoint,
             non-reentrant): the forward keeps only each segment's input.

Korthikanti's per-layer count is for fp16 with dropout and a 4h-wide MLP; elements_formula
gives it for the toy's shape without dropout, in elements of s·b·h (fp32 here: 4 bytes each).
"""

import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

MODES = ("none", "selective", "full")


class SavedBytes:
    """Pack hook that records each distinct non-parameter storage saved for backward, under
    the region (block) running when it was first saved."""

    def __init__(self, model):
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.buffers = {b.untyped_storage().data_ptr() for b in model.buffers()}
        self.storages = {}          # data_ptr -> (region, nbytes, shape of the first tensor saved)
        self.buffers_saved = set()  # buffers (the ALiBi bias) some op kept: none, measured
        self.region = None

    def pack(self, t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in self.buffers:
            self.buffers_saved.add(ptr)
        elif ptr not in self.params and ptr not in self.storages:
            self.storages[ptr] = (self.region, storage.nbytes(), tuple(t.shape))
        return t

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    def bytes_of(self, region=None):
        return sum(n for r, n, _ in self.storages.values() if region is None or r == region)

    def shapes_of(self, region):
        return [(shape, n) for r, n, shape in self.storages.values() if r == region]


def attention_core(q, k, v, bias, head_size):
    att = (q * (1.0 / math.sqrt(head_size))) @ k.transpose(-2, -1)
    att = F.softmax(att + bias, dim=-1)
    return att @ v


def attention(attn, x, selective):
    """tiny_gpt.SelfAttention.forward, its core checkpointed when selective."""
    B, T, C = x.shape
    q, k, v = attn.qkv(x).split(C, dim=2)
    hs = C // attn.n_head
    q, k, v = (t.view(B, T, attn.n_head, hs).transpose(1, 2) for t in (q, k, v))
    args = (q, k, v, attn.bias[:, :T, :T], hs)
    y = checkpoint(attention_core, *args, use_reentrant=False) if selective else attention_core(*args)
    return attn.proj(y.transpose(1, 2).reshape(B, T, C))


def block_forward(block, x, selective=False):
    x = x + attention(block.attn, block.ln1(x), selective)
    return x + block.mlp(block.ln2(x))


def segment_forward(blocks, x):
    for block in blocks:
        x = block_forward(block, x)
    return x


def loss_of(model, x, y, mode="none", every=1, counter=None):
    """Cross-entropy of the model on (x, y) with the given recomputation; counter, if given,
    records what is saved, region "block i" (for full: "block i" = the segment starting at i)."""
    def region(name):
        if counter is not None:
            counter.region = name

    region("embedding")
    h = model.tok_emb(x)
    blocks = list(model.blocks)
    if mode == "full":
        for i in range(0, len(blocks), every):
            region(f"block {i}")
            h = checkpoint(segment_forward, blocks[i:i + every], h, use_reentrant=False)
    else:
        for i, block in enumerate(blocks):
            region(f"block {i}")
            h = block_forward(block, h, selective=mode == "selective")
    region("head")
    logits = model.head(model.ln_f(h))
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))


def measure(model, x, y, mode="none", every=1):
    """(SavedBytes after the forward, gradients) of one forward and backward."""
    counter = SavedBytes(model)
    model.zero_grad(set_to_none=True)
    with counter.hooks():
        loss = loss_of(model, x, y, mode, every, counter)
    loss.backward()
    return counter, [p.grad.clone() for p in model.parameters()]


def step_seconds(model, x, y, mode="none", every=1, repeats=5):
    """Median wall time of forward + backward (machine-dependent: printed, never tested)."""
    times = []
    for _ in range(repeats + 1):                    # the first run warms up and is dropped
        start = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss_of(model, x, y, mode, every).backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def elements_formula(config, seq_len, mode, dropout=False, mlp_ratio=None):
    """Korthikanti et al. 2022's activations per layer, in elements of s·b·h (their bytes
    over 2, fp16; masks are 1 byte, half an element), plus the scores term in elements of
    s·b·h as (a·s/h) multiples. Returns (sbh multiple, scores multiple of a·s·s·b / (s·b·h)).

    Without dropout, mlp ratio r: attention 5 (x, Q, K, V, y), MLP 1 + 2r, two LayerNorm
    inputs 2; scores 1 (the softmax output). Dropout adds 1 (two 1-byte masks) and 1.5 to the
    scores (its mask and output): r = 4 gives their 17 and 2.5 (34·sbh + 5·a·s²·b bytes)."""
    r = config.mlp_ratio if mlp_ratio is None else mlp_ratio
    if mode == "full":
        return 1.0, 0.0
    sbh = 5 + 1 + 2 * r + 2 + (1 if dropout else 0)
    scores = 0.0 if mode == "selective" else (2.5 if dropout else 1.0)
    return float(sbh), scores


def formula_bytes(config, batch, seq_len, mode, element_bytes=4):
    """elements_formula in bytes for the toy's shape (fp32 elements unless told)."""
    sbh_mult, scores_mult = elements_formula(config, seq_len, mode)
    sbh = seq_len * batch * config.n_embd
    return element_bytes * (sbh_mult * sbh + scores_mult * config.n_head * seq_len * seq_len * batch)
