"""SparseLoCo (Sarfi, Thérien, Lidin & Belilovsky 2025, arXiv 2508.15706): DiLoCo's H inner
steps, then each worker sends a top-k of its pseudo-gradient per chunk, its values in
2 bits, and keeps what it did not send in an error-feedback buffer that decays; the outer
step has no momentum (lecture 9, §11.5; code 11, demo 4).

One outer step, per tensor, at every worker w (Δ_w = θ_global − θ_w after H AdamW steps):

  e_w ← β e_w + Δ_w                     (error feedback with decay β; it stands in for
                                         DiLoCo's outer momentum)
  in every chunk of e_w (the chunks of decoupled_momentum, without the DCT) keep the
  k largest |entries|; their values in 2 bits (quantize_2bit); s_w = what was kept, decoded
  e_w ← e_w − s_w
  θ_global ← θ_global − α · (1/W) Σ_w s_w   (no momentum; α = 1 by default)

The paper's own quantizer is not reproduced here (the authors' code was not available to
check against); quantize_2bit is this suite's: one bit for the sign, one for "larger than
the root mean square of the kept values", each of the 4 codes decoded as the mean of the
values that fell in it (4 fp32 numbers per tensor sent along). Bytes per kept entry: an
int16 index (int32 past 32,768 entries per chunk) and 2 bits; per tensor 16 more.
"""

import math

import torch

from lecture09.compress import local_sgd
from lecture09.compress.decoupled_momentum import ChunkedDCT, index_bytes, top_per_chunk

LOOKUP_BYTES = 4 * 4           # quantize_2bit's 4 fp32 code values, per tensor


def quantize_2bit(values):
    """(codes 0..3, lookup of 4 values) for a 1-D tensor: code = 2 × (v ≥ 0) + (|v| ≥ rms);
    lookup[c] = the mean of the values with code c (0 where none has it)."""
    rms = values.pow(2).mean().sqrt() if values.numel() else values.new_zeros(())
    codes = 2 * (values >= 0).long() + (values.abs() >= rms).long()
    total = torch.zeros(4, dtype=values.dtype).scatter_add_(0, codes, values)
    count = torch.zeros(4, dtype=values.dtype).scatter_add_(0, codes, torch.ones_like(values))
    return codes, torch.where(count > 0, total / count.clamp(min=1), total)


def dequantize_2bit(codes, lookup):
    return lookup[codes]


def pack_2bit(codes):
    """Codes 0..3 packed 4 to a byte (uint8, ceil(n / 4) bytes): what goes on the wire."""
    c = torch.nn.functional.pad(codes.to(torch.uint8), (0, -codes.numel() % 4))
    return c[0::4] | c[1::4] << 2 | c[2::4] << 4 | c[3::4] << 6


def sent_bytes(shapes, topk, chunk, bits):
    """Bytes one worker sends per outer step for tensors of `shapes`: per tensor, every
    chunk's min(k, entries) pairs of (index, value of `bits` bits), packed, plus the lookup
    when bits = 2 (bits = 32: fp32 values, no lookup)."""
    total = 0
    for shape in shapes:
        t = ChunkedDCT(shape, chunk, dct=False)
        kept = t.n_chunks * min(topk, t.per_chunk)
        total += kept * index_bytes(t.per_chunk) + math.ceil(kept * bits / 8) + (LOOKUP_BYTES if bits == 2 else 0)
    return total


class SparseExchange:
    """The exchange for local_sgd.train: __call__(deltas) -> (the mean of what every worker
    sent, decoded; bytes one worker sent)."""

    def __init__(self, shapes, n_workers, topk, chunk, bits, decay):
        if bits not in (2, 32):
            raise ValueError(f"values are sent in 2 or 32 bits, not {bits}")
        if not 0 <= decay <= 1:
            raise ValueError(f"the error-feedback decay must be in [0, 1], got {decay}")
        self.shapes, self.topk, self.bits, self.decay = [tuple(s) for s in shapes], topk, bits, decay
        self.transforms = [ChunkedDCT(s, chunk, dct=False) for s in self.shapes]
        self.sizes = [math.prod(s) for s in self.shapes]
        self.errors = [[torch.zeros(s) for s in self.shapes] for _ in range(n_workers)]
        self.bytes = sent_bytes(self.shapes, topk, chunk, bits)

    def encode(self, e, t):
        """What one worker sends of its buffer e (one tensor): (it decoded, the tensors on the
        wire: the indices as int16 / int32, the values packed 4 codes a byte with their lookup,
        or in fp32 when bits = 32; their bytes are sent_bytes's)."""
        coefs = t.encode(e)
        idx, val = top_per_chunk(coefs, self.topk)
        wire = {"index": idx.to(torch.int16 if index_bytes(t.per_chunk) == 2 else torch.int32)}
        if self.bits == 2:
            codes, lookup = quantize_2bit(val.reshape(-1))
            val = dequantize_2bit(codes, lookup).view_as(val)
            wire.update(codes=pack_2bit(codes), lookup=lookup.float())
        else:
            wire["values"] = val.float()
        return t.decode(torch.zeros_like(coefs).scatter_(-1, idx, val)), wire

    @torch.no_grad()
    def __call__(self, deltas):
        total = torch.zeros_like(deltas[0])
        self.wire = [{} for _ in deltas]          # what each worker sent: tensor i -> its wire tensors
        for w, delta in enumerate(deltas):
            for i, part in enumerate(torch.split(delta, self.sizes)):
                e = self.errors[w][i]
                e.mul_(self.decay).add_(part.view(self.shapes[i]))
                sent, wire = self.encode(e, self.transforms[i])
                self.wire[w].update({f"{i}.{name}": x for name, x in wire.items()})
                e.sub_(sent)
                offset = sum(self.sizes[:i])
                total[offset:offset + self.sizes[i]] += sent.reshape(-1)
        return total / len(deltas), self.bytes


def train(run, seeds, setup):
    """Train setup.model with SparseLoCo, run.param = (H, top-k per chunk, chunk, bits);
    a RunResult (bytes per step: one worker's bytes per outer step / H, as DiLoCo's)."""
    return local_sgd.train(run, seeds, setup, **outer_loop(run, seeds, setup))


def outer_loop(run, seeds, setup):
    """SparseLoCo as DiLoCo's loop with its own exchange and outer step: local_sgd.train's
    keyword arguments (also compress/slow_network.train_timed_diloco's)."""
    from lecture01 import tiny_gpt

    h, topk, chunk, bits = run.param
    shapes = [tuple(p.shape) for p in tiny_gpt.make_model(setup.model, seed=seeds.model).parameters()]
    exchange = SparseExchange(shapes, setup.n_workers, topk, chunk, bits, setup.sparseloco_decay)
    return dict(exchange=exchange, outer_lr=setup.sparseloco_lr, outer_momentum=0.0, inner_steps=h)
