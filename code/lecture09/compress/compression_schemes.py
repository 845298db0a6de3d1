"""The compression schemes: one class each, one registry row each.

Introduced in lecture 9 (notes: lectures/lecture09/05_decentralized.md §5.6, §7.1).
compression.py builds both of its paths on these classes: flat gradient vectors (code 5,
demo 2) and the swarm's wire payloads (code 6). A scheme says three things:

    encode(x, opts)            -> {suffix: tensor}, exactly the tensors that travel
    decode(parts, shape, opts) -> the float32 tensor the receiver rebuilds (no checks)
    check(name, parts, shape)  -> raise PayloadError if received parts break the convention
                                  (only schemes on the wire need it)

Its bytes are never written as a formula in code: they are counted from what encode
returned (`parts_bytes`). The formulas are the check, in the tests and the notes:

    scheme      what travels for n elements                              bytes
    none        n fp32 values                                            4n
    fp16        n fp16 values                                            2n
    int8        n int8 + one fp32 absmax scale                           n + 4
    int8-block  n int8 + one fp32 absmax scale per block of B            n + 4 ceil(n / B)
    int4-block  n 4-bit codes, two per byte, + one fp32 scale per block  ceil(n / 2) + 4 ceil(n / B)
    topk        k (value, index) pairs, k = max(1, int(ratio n))         8k (int32 index)
    topk-int8   k int8 values + k indices + one fp32 scale               5k + 4 (int32 index)
    sign        n bits + one fp32 scale (mean |x|)                       ceil(n / 8) + 4
    sign-l2     n bits + one fp32 scale (||x||_2 / sqrt(n), 1-bit Adam)  ceil(n / 8) + 4

Index width is an option, not a scheme: a flat vector here is shorter than 2^31 so int32
is enough; the swarm's wire convention says int64 (12 bytes per top-k entry).

One zero handling everywhere: a scale is absmax / 127 if absmax > 0, else 1.0 (so an
all-zero tensor encodes as zeros with a finite, positive scale and decodes to zeros); a
sign's zero travels as +1 (one bit cannot say 0), and its scale of an all-zero tensor is 0.

To add a compressor: write one class below (name, encode, decode) and add one row to
SCHEMES. Put `on_wire = True` (and a `check`) only if the swarm should accept it.
"""

import math
from dataclasses import dataclass

import torch

INT8_LEVELS = 127       # symmetric range -127..127, so +x and -x quantise alike
INT4_LEVELS = 7         # symmetric range -7..7 (15 of a nibble's 16 codes), the same rule
IDX_SUFFIX = "::idx"
VAL_SUFFIX = "::val"
SCALE_SUFFIX = "::scale"
DENSE_SUFFIX = ""       # a dense tensor travels under the parameter's own name


class PayloadError(ValueError):
    """A payload that does not follow the wire convention; the message says why."""


@dataclass(frozen=True)
class Options:
    """What a scheme's encoding depends on besides the tensor."""
    topk_ratio: float = 0.01
    block_size: int = 256               # int8-block, int4-block: entries per absmax scale
    index_dtype: torch.dtype = torch.int32   # flat vectors; the wire uses int64


def parts_bytes(parts):
    """Bytes of tensor data in encoded parts: what the scheme costs, measured."""
    return sum(t.numel() * t.element_size() for t in parts.values())


def topk_count(n, ratio):
    """How many of n entries top-k keeps: max(1, int(ratio * n)), never more than n."""
    if not 0 < ratio <= 1:
        raise ValueError(f"top-k ratio must be in (0, 1], got {ratio!r}")
    if n < 1:
        raise ValueError(f"cannot keep entries of an empty tensor (n = {n})")
    return min(n, max(1, int(ratio * n)))


def absmax_scale(x):
    """The int8 step for x: absmax / 127, or 1.0 when x is all zeros (one zero rule)."""
    absmax = x.abs().max() if x.numel() else torch.tensor(0.0)
    return torch.where(absmax > 0, absmax / INT8_LEVELS, torch.ones_like(absmax))


def quantize_int8(x, scale):
    return torch.round(x / scale).clamp_(-INT8_LEVELS, INT8_LEVELS).to(torch.int8)


# ---------------------------------------------------------------------------
# Wire checks (only for the schemes the swarm accepts)
# ---------------------------------------------------------------------------

def check_dtype(key, tensor, dtype):
    if tensor.dtype != dtype:
        raise PayloadError(f"{key}: dtype {tensor.dtype}, expected {dtype}")


def check_finite(key, tensor):
    if not bool(torch.isfinite(tensor).all()):
        raise PayloadError(f"{key}: contains NaN or infinity")


class Scheme:
    """The base class: a name, the tensors that travel, and how the receiver reads them."""
    name = ""
    suffixes = (DENSE_SUFFIX,)   # the keys encode returns, in order
    on_wire = False              # the swarm (06_swarm_http.py) accepts it as X-Compression

    def encode(self, x, opts):   # x: float32, any shape
        raise NotImplementedError

    def decode(self, parts, shape, opts):
        raise NotImplementedError

    def check(self, name, parts, shape, finite=False):
        """Refuse (PayloadError) parts that are not what encode makes; finite=True: the
        caller has already found every value finite."""
        raise PayloadError(f"compression mode {self.name!r} does not travel on the wire")


class Dense(Scheme):
    """fp32 as it is: the uncompressed baseline."""
    name, on_wire = "none", True

    def encode(self, x, opts):
        return {DENSE_SUFFIX: x.contiguous().clone()}

    def decode(self, parts, shape, opts):
        return parts[DENSE_SUFFIX].to(torch.float32).reshape(shape).clone()

    def check(self, name, parts, shape, finite=False):
        tensor = parts[DENSE_SUFFIX]
        check_dtype(name, tensor, torch.float32)
        if tensor.shape != shape:
            raise PayloadError(f"{name}: shape {tuple(tensor.shape)}, expected {tuple(shape)}")
        if not finite:
            check_finite(name, tensor)


class Fp16(Scheme):
    """Half precision; values beyond fp16's 65504 would become inf (gradients here are far smaller)."""
    name = "fp16"

    def encode(self, x, opts):
        return {DENSE_SUFFIX: x.half()}

    def decode(self, parts, shape, opts):
        return parts[DENSE_SUFFIX].float().reshape(shape)


class Int8(Scheme):
    """One absmax scale for the whole tensor: the largest entry sets the step for all."""
    name = "int8"
    suffixes = (VAL_SUFFIX, SCALE_SUFFIX)

    def encode(self, x, opts):
        scale = absmax_scale(x)
        return {VAL_SUFFIX: quantize_int8(x, scale).reshape(-1), SCALE_SUFFIX: scale.reshape(1)}

    def decode(self, parts, shape, opts):
        return (parts[VAL_SUFFIX].float() * parts[SCALE_SUFFIX]).reshape(shape)


class BlockInt8(Scheme):
    """One absmax scale per block of opts.block_size entries (the last block may be shorter):
    a large entry only coarsens its own block (bitsandbytes' block-wise quantization)."""
    name = "int8-block"
    suffixes = (VAL_SUFFIX, SCALE_SUFFIX)

    def _blocks(self, flat, block):
        pad = (-flat.numel()) % block
        return torch.cat([flat, flat.new_zeros(pad)]).view(-1, block)        # (n_blocks, block)

    def encode(self, x, opts):
        flat = x.reshape(-1)
        blocks = self._blocks(flat, opts.block_size)
        absmax = blocks.abs().amax(dim=1, keepdim=True)                      # (n_blocks, 1)
        scale = torch.where(absmax > 0, absmax / INT8_LEVELS, torch.ones_like(absmax))
        q = quantize_int8(blocks, scale).reshape(-1)[:flat.numel()]
        return {VAL_SUFFIX: q, SCALE_SUFFIX: scale.reshape(-1)}

    def decode(self, parts, shape, opts):
        q = parts[VAL_SUFFIX]
        blocks = self._blocks(q.float(), opts.block_size)
        return (blocks * parts[SCALE_SUFFIX].view(-1, 1)).reshape(-1)[:q.numel()].reshape(shape)


class BlockInt4(BlockInt8):
    """int8-block's rule at 4 bits: one absmax scale per block, steps of absmax / 7, two
    codes per byte (code + 8 in each nibble, the first entry in the high one). Streaming
    DiLoCo sends its outer gradients at 4 bits, AQ-SGD its activations at 2-4 bits."""
    name = "int4-block"

    def encode(self, x, opts):
        flat = x.reshape(-1)
        blocks = self._blocks(flat, opts.block_size)
        absmax = blocks.abs().amax(dim=1, keepdim=True)                      # (n_blocks, 1)
        scale = torch.where(absmax > 0, absmax / INT4_LEVELS, torch.ones_like(absmax))
        codes = (torch.round(blocks / scale).clamp_(-INT4_LEVELS, INT4_LEVELS) + 8).to(torch.uint8)
        codes = codes.reshape(-1)[:flat.numel()]
        if codes.numel() % 2:
            codes = torch.cat([codes, codes.new_full((1,), 8)])               # a zero code pads the last byte
        pairs = codes.view(-1, 2)
        return {VAL_SUFFIX: (pairs[:, 0] << 4) | pairs[:, 1], SCALE_SUFFIX: scale.reshape(-1)}

    def decode(self, parts, shape, opts):
        packed = parts[VAL_SUFFIX]
        n = math.prod(shape)
        codes = torch.stack([packed >> 4, packed & 0x0F], dim=1).reshape(-1)[:n]
        values = codes.to(torch.float32) - 8
        blocks = self._blocks(values, opts.block_size)
        return (blocks * parts[SCALE_SUFFIX].view(-1, 1)).reshape(-1)[:n].reshape(shape)


class TopK(Scheme):
    """The k largest entries by magnitude as (index, value) pairs, indices sorted ascending
    (a canonical order: the same gradient gives the same bytes); with quantize, the values
    as int8 with one absmax scale."""
    on_wire = True

    def __init__(self, quantize=False):
        self.quantize = quantize
        self.name = "topk-int8" if quantize else "topk"
        self.suffixes = (IDX_SUFFIX, VAL_SUFFIX) + ((SCALE_SUFFIX,) if quantize else ())

    def encode(self, x, opts):
        flat = x.reshape(-1)                                                 # (numel,)
        k = topk_count(flat.numel(), opts.topk_ratio)
        idx, _ = torch.sort(torch.topk(flat.abs(), k, sorted=False).indices)
        val = flat[idx]
        parts = {IDX_SUFFIX: idx.to(opts.index_dtype)}
        if not self.quantize:
            parts[VAL_SUFFIX] = val
            return parts
        scale = absmax_scale(val)
        parts[VAL_SUFFIX] = quantize_int8(val, scale)
        parts[SCALE_SUFFIX] = scale.reshape(1).to(torch.float32)
        return parts

    def decode(self, parts, shape, opts):
        val = parts[VAL_SUFFIX]
        values = val.to(torch.float32) * parts[SCALE_SUFFIX] if self.quantize else val
        flat = torch.zeros(shape.numel(), dtype=torch.float32)
        flat[parts[IDX_SUFFIX].long()] = values
        return flat.view(shape)

    def check(self, name, parts, shape, finite=False):
        numel = shape.numel()
        idx_key, val_key = name + IDX_SUFFIX, name + VAL_SUFFIX
        idx, val = parts[IDX_SUFFIX], parts[VAL_SUFFIX]
        check_dtype(idx_key, idx, torch.int64)
        check_dtype(val_key, val, torch.int8 if self.quantize else torch.float32)
        for key, tensor in ((idx_key, idx), (val_key, val)):
            if tensor.dim() != 1:
                raise PayloadError(f"{key}: must be 1-D, got shape {tuple(tensor.shape)}")
        if idx.numel() != val.numel():
            raise PayloadError(f"{name}: {idx.numel()} indices but {val.numel()} values")
        if idx.numel() > numel:
            raise PayloadError(f"{name}: {idx.numel()} entries for a tensor of {numel} elements")
        if idx.numel():
            low, high = int(idx.min()), int(idx.max())
            if low < 0 or high >= numel:
                bad = low if low < 0 else high
                raise PayloadError(f"{idx_key}: index {bad} outside [0, {numel})")
            if torch.unique(idx).numel() != idx.numel():
                raise PayloadError(f"{idx_key}: repeated indices")
        if not self.quantize:
            if not finite:
                check_finite(val_key, val)
            return
        scale_key = name + SCALE_SUFFIX
        scale = parts[SCALE_SUFFIX]
        check_dtype(scale_key, scale, torch.float32)
        if scale.shape != torch.Size([1]):
            raise PayloadError(f"{scale_key}: shape {tuple(scale.shape)}, expected (1,)")
        if not finite:
            check_finite(scale_key, scale)
        if not float(scale[0]) > 0:
            raise PayloadError(f"{scale_key}: scale {float(scale[0])} must be > 0")


BIT_WEIGHTS = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)


def pack_bits(bits):
    """A bool vector (n,) as ceil(n / 8) bytes, first entry in the high bit."""
    pad = (-bits.numel()) % 8
    padded = torch.cat([bits, bits.new_zeros(pad)]).view(-1, 8).to(torch.uint8)   # (n/8, 8)
    return (padded * BIT_WEIGHTS).sum(dim=1, dtype=torch.uint8)


def unpack_bits(packed, n):
    return ((packed.view(-1, 1) & BIT_WEIGHTS) != 0).view(-1)[:n]


class Sign(Scheme):
    """One bit per entry (a zero travels as +1) and one scale. With scale "mean-abs" the
    scale is mean |x|, which minimises ||x - a s||_2 over a (EF-SignSGD, Karimireddy et al.
    2019); with "l2" it is ||x||_2 / sqrt(n), which keeps the norm (1-bit Adam)."""
    suffixes = (VAL_SUFFIX, SCALE_SUFFIX)

    def __init__(self, scale="mean-abs"):
        self.scale_rule = scale
        self.name = "sign" if scale == "mean-abs" else "sign-l2"

    def encode(self, x, opts):
        flat = x.reshape(-1)
        if not flat.numel():
            scale = torch.tensor(0.0)
        elif self.scale_rule == "mean-abs":
            scale = flat.abs().mean()
        else:
            scale = torch.linalg.vector_norm(flat) / math.sqrt(flat.numel())
        return {VAL_SUFFIX: pack_bits(flat >= 0), SCALE_SUFFIX: scale.reshape(1)}

    def decode(self, parts, shape, opts):
        bits = unpack_bits(parts[VAL_SUFFIX], shape.numel())
        signs = torch.where(bits, 1.0, -1.0)
        return (signs * parts[SCALE_SUFFIX]).reshape(shape)


# The registry: one row per scheme, in the order tables list them. The first three
# entries on the wire are the real swarm's modes (none, topk, topk-int8).
SCHEMES = {s.name: s for s in (Dense(), Fp16(), Int8(), BlockInt8(), BlockInt4(), TopK(), TopK(quantize=True),
                               Sign(), Sign(scale="l2"))}
