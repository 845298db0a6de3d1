"""Gradient compression: what a worker sends instead of its full fp32 gradient.

Introduced in lecture 9 (notes: lectures/lecture09_distributed_training.md, section 7).
Two scripts import it:
- 05_decentralized.py (demo 2) compresses one flat gradient vector per worker with
  `compress_vector` / `ErrorFeedback` and counts the bytes it would cost;
- 06_swarm_http.py sends real payloads over HTTP with `encode_payload` /
  `decode_payload` / `payload_to_bytes` / `payload_from_bytes` and `PayloadErrorFeedback`.

Part A, flat vectors (the receiver's view and the exact payload size):

    scheme  what travels                                     wire bytes for n elements
    none    n fp32 values                                    4n
    fp16    n fp16 values                                    2n
    int8    n int8 values + one fp32 absmax scale            n + 4
    topk    k (fp32 value, int32 index) pairs, k = max(1, int(ratio * n))   8k
    sign    n bits + one fp32 scale (mean |g|)               ceil(n / 8) + 4

An int32 index addresses any vector shorter than 2^31 elements, enough for one worker's
flat gradient here (~100k). The HTTP swarm's wire convention (part B) uses int64 indices,
so its top-k entries cost 12 bytes, not 8.

Sign compression sends one bit per element, so an element has to be +1 or -1: a zero is
sent as +1. With signs s in {-1, +1}^n, the scale a that minimises ||g - a s||_2 is
(s . g) / n = mean |g| (Karimireddy et al. 2019, EF-SignSGD); the receiver rebuilds
a * s. (torch.sign would give 0 for a zero, which one bit cannot say.)

Error feedback (Seide et al. 2014; Lin et al. 2018, Deep Gradient Compression;
Karimireddy et al. 2019): a worker keeps what compression dropped, the residual
e = (g + e_old) - C(g + e_old), and adds it to its next gradient, so dropped mass is
delayed, never lost. The invariant, checked in tests:
    sent + new residual == gradient + old residual.
Both error-feedback classes split a send into propose() and commit() / rollback(): if
the receiver refuses the upload, nothing was sent, so the residual must not move.

Part B, the swarm's wire convention (one entry per parameter tensor, a flat
{key: tensor} map serialised with safetensors):
    mode "none":       key `name`        float32, the parameter's exact shape
    mode "topk":       key `name::idx`   int64, 1-D, distinct, in [0, numel) (sent sorted)
                       key `name::val`   float32, 1-D, same length
    mode "topk-int8":  `name::idx` as above, `name::val` int8 (1-D),
                       key `name::scale` float32 of shape (1,), finite and > 0;
                       value = int8 * scale.
Shapes never travel: the receiver rebuilds dense tensors from its own model's shapes and
checks every key, dtype, length, index and value (`decode_payload`), raising
`PayloadError` (a ValueError) with a message that says what was wrong.
"""

import math

import torch

# ---------------------------------------------------------------------------
# Part A: flat vectors (05_decentralized.py demo 2)
# ---------------------------------------------------------------------------

SCHEMES = ("none", "fp16", "int8", "topk", "sign")

FP32_BYTES = 4
FP16_BYTES = 2
INT8_BYTES = 1
INT32_BYTES = 4   # the index width of part A's top-k (any n < 2^31)
INT8_LEVELS = 127  # symmetric range -127..127, so +x and -x quantise alike


def topk_count(n, ratio):
    """How many of n entries top-k keeps: max(1, int(ratio * n)), never more than n."""
    if not 0 < ratio <= 1:
        raise ValueError(f"top-k ratio must be in (0, 1], got {ratio!r}")
    if n < 1:
        raise ValueError(f"cannot keep entries of an empty tensor (n = {n})")
    return min(n, max(1, int(ratio * n)))


def compress_vector(g, scheme, topk_ratio=0.01):
    """Compress a 1-D float32 gradient and decode it as the receiver would.

    Returns (decoded, wire_bytes): decoded is a new float32 tensor of g's shape (n,);
    wire_bytes is the exact payload size in bytes (table in the module docstring).
    An all-zero vector decodes to zeros under int8 and sign (no division by zero).
    Unknown scheme -> ValueError. Vectorised (torch.topk, no Python loops): demo 2 calls
    this thousands of times on ~100k elements.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown compression scheme {scheme!r}; expected one of {SCHEMES}")
    if g.dim() != 1:
        raise ValueError(f"compress_vector takes a 1-D tensor, got shape {tuple(g.shape)}")
    g = g.detach().to(torch.float32)
    n = g.numel()
    if scheme == "none":
        return g.clone(), FP32_BYTES * n
    if scheme == "fp16":
        # Values beyond fp16's range (65504) would become inf; gradients here are far smaller.
        return g.half().float(), FP16_BYTES * n
    if scheme == "int8":
        absmax = g.abs().max() if n else torch.tensor(0.0)
        if absmax == 0:
            return torch.zeros_like(g), INT8_BYTES * n + FP32_BYTES
        scale = absmax / INT8_LEVELS
        q = torch.round(g / scale).clamp_(-INT8_LEVELS, INT8_LEVELS)
        return q * scale, INT8_BYTES * n + FP32_BYTES
    if scheme == "topk":
        k = topk_count(n, topk_ratio)
        idx = torch.topk(g.abs(), k, sorted=False).indices
        decoded = torch.zeros_like(g)
        decoded[idx] = g[idx]
        return decoded, k * (FP32_BYTES + INT32_BYTES)
    # sign: one bit per element; a zero travels as +1 (see the module docstring).
    signs = torch.where(g >= 0, 1.0, -1.0)
    scale = g.abs().mean() if n else torch.tensor(0.0)
    return signs * scale, math.ceil(n / 8) + FP32_BYTES


class _ProposeCommit:
    """The two-phase send both error-feedback classes share: propose() holds the new
    residual aside, commit() keeps it (the send went through), rollback() drops it (the
    send was refused, so nothing left the worker and the old residual must stay)."""

    _pending = None

    def _hold(self, pending):
        if self._pending is not None:
            raise RuntimeError("the previous proposal was neither committed nor rolled back")
        self._pending = pending

    def _keep(self, pending):   # store a committed residual; each subclass knows where
        raise NotImplementedError

    def commit(self):
        """The proposed send went through: keep what it left behind."""
        if self._pending is None:
            raise RuntimeError("nothing to commit: call propose() first")
        pending, self._pending = self._pending, None
        self._keep(pending)

    def rollback(self):
        """The proposed send was refused: forget it; the residual is unchanged."""
        if self._pending is None:
            raise RuntimeError("nothing to roll back: call propose() first")
        self._pending = None


class ErrorFeedback(_ProposeCommit):
    """One worker's error-feedback memory for flat gradients (part A).

    compress(g, ...) = propose(g, ...) then commit(). propose() compresses g + residual
    and holds the new residual aside; commit() keeps it (the send went through),
    rollback() drops it (the send was refused: the residual stays as it was).
    The residual starts as zeros of g's shape on first use.
    """

    def __init__(self):
        self.residual = None   # (n,) float32, or None before the first commit

    def _keep(self, pending):
        self.residual = pending

    def propose(self, g, scheme, topk_ratio=0.01):
        """Compress g + residual; return (decoded, wire_bytes) without committing."""
        g = g.detach().to(torch.float32)
        corrected = g if self.residual is None else g + self.residual
        decoded, wire_bytes = compress_vector(corrected, scheme, topk_ratio)
        self._hold(corrected - decoded)
        return decoded, wire_bytes

    def compress(self, g, scheme, topk_ratio=0.01):
        """Compress with error feedback and commit at once; returns (decoded, wire_bytes)."""
        decoded, wire_bytes = self.propose(g, scheme, topk_ratio)
        self.commit()
        return decoded, wire_bytes


# ---------------------------------------------------------------------------
# Part B: the swarm's wire payloads (06_swarm_http.py)
# ---------------------------------------------------------------------------

WIRE_MODES = ("none", "topk", "topk-int8")   # values of the X-Compression header
IDX_SUFFIX = "::idx"
VAL_SUFFIX = "::val"
SCALE_SUFFIX = "::scale"


class PayloadError(ValueError):
    """A payload that does not follow the wire convention; the message says why."""


def expected_keys(shapes, mode):
    """The exact key set a valid payload for these parameter names has in `mode`."""
    if mode not in WIRE_MODES:
        raise PayloadError(f"unknown compression mode {mode!r}; expected one of {WIRE_MODES}")
    if mode == "none":
        return set(shapes)
    suffixes = (IDX_SUFFIX, VAL_SUFFIX) + ((SCALE_SUFFIX,) if mode == "topk-int8" else ())
    return {name + suffix for name in shapes for suffix in suffixes}


def encode_payload(named_grads, mode, ratio=0.01, residuals=None):
    """Encode {name: gradient} as a wire payload {key: tensor} (convention above).

    residuals (error feedback), if given, maps some names to tensors of the same shape
    that are added before compressing; they are only read, never changed
    (PayloadErrorFeedback decides whether to keep the new residual).
    Top-k keeps max(1, int(ratio * numel)) entries per tensor, indices sorted ascending.
    """
    if mode not in WIRE_MODES:
        raise PayloadError(f"unknown compression mode {mode!r}; expected one of {WIRE_MODES}")
    payload = {}
    for name, grad in named_grads.items():
        if "::" in name:
            raise ValueError(f"parameter name {name!r} contains '::', which the wire format reserves")
        g = grad.detach().to(torch.float32)
        if residuals is not None and name in residuals:
            g = g + residuals[name]
        if mode == "none":
            payload[name] = g.contiguous().clone()
            continue
        flat = g.reshape(-1)                                        # (numel,)
        k = topk_count(flat.numel(), ratio)
        idx = torch.topk(flat.abs(), k, sorted=False).indices
        idx, _ = torch.sort(idx)  # a canonical order: the same gradient gives the same bytes
        val = flat[idx]
        payload[name + IDX_SUFFIX] = idx.to(torch.int64)
        if mode == "topk":
            payload[name + VAL_SUFFIX] = val
            continue
        absmax = val.abs().max()
        # scale must be > 0 on the wire; an all-zero selection sends zeros with scale 1.
        scale = absmax / INT8_LEVELS if absmax > 0 else torch.tensor(1.0)
        q = torch.round(val / scale).clamp_(-INT8_LEVELS, INT8_LEVELS)
        payload[name + VAL_SUFFIX] = q.to(torch.int8)
        payload[name + SCALE_SUFFIX] = scale.reshape(1).to(torch.float32)
    return payload


def _check_dtype(key, tensor, dtype):
    if tensor.dtype != dtype:
        raise PayloadError(f"{key}: dtype {tensor.dtype}, expected {dtype}")


def _check_finite(key, tensor):
    if not bool(torch.isfinite(tensor).all()):
        raise PayloadError(f"{key}: contains NaN or infinity")


def _describe_keys(keys, limit=4):
    keys = sorted(keys)
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def decode_payload(payload, shapes, mode):
    """Rebuild {name: dense float32 tensor of shapes[name]} from a payload, checking it all.

    shapes: {name: torch.Size} from the receiver's own model (shapes never travel).
    Raises PayloadError for: an unknown mode; missing or extra keys; a wrong dtype; a
    dense tensor not exactly shapes[name]; idx or val not 1-D, of different lengths, or
    longer than numel; an index outside [0, numel) (a negative index is refused, never
    wrapped around); a repeated index (it would make the result depend on which write
    wins, and would let one upload count an entry twice); NaN or inf in values or scale;
    a scale that is not > 0 or not of shape (1,); decoded values that overflow to inf.
    Nothing is returned unless everything passed.
    """
    keys = set(payload)
    wanted = expected_keys(shapes, mode)
    missing, extra = wanted - keys, keys - wanted
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing keys: {_describe_keys(missing)}")
        if extra:
            parts.append(f"unexpected keys: {_describe_keys(extra)}")
        raise PayloadError("; ".join(parts))
    dense = {}
    for name, shape in shapes.items():
        shape = torch.Size(shape)
        if mode == "none":
            tensor = payload[name]
            _check_dtype(name, tensor, torch.float32)
            if tensor.shape != shape:
                raise PayloadError(f"{name}: shape {tuple(tensor.shape)}, expected {tuple(shape)}")
            _check_finite(name, tensor)
            dense[name] = tensor.to(torch.float32).clone()
            continue
        numel = shape.numel()
        idx_key, val_key = name + IDX_SUFFIX, name + VAL_SUFFIX
        idx, val = payload[idx_key], payload[val_key]
        _check_dtype(idx_key, idx, torch.int64)
        _check_dtype(val_key, val, torch.float32 if mode == "topk" else torch.int8)
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
        if mode == "topk":
            _check_finite(val_key, val)
        else:
            scale_key = name + SCALE_SUFFIX
            scale = payload[scale_key]
            _check_dtype(scale_key, scale, torch.float32)
            if scale.shape != torch.Size([1]):
                raise PayloadError(f"{scale_key}: shape {tuple(scale.shape)}, expected (1,)")
            _check_finite(scale_key, scale)
            if not float(scale[0]) > 0:
                raise PayloadError(f"{scale_key}: scale {float(scale[0])} must be > 0")
        dense[name] = _densify(payload, name, shape, mode)
        _check_finite(f"{name} (decoded)", dense[name])   # int8 * a huge scale can overflow
    return dense


def _densify(payload, name, shape, mode):
    """The dense tensor a (valid) sparse entry stands for; no checks."""
    idx, val = payload[name + IDX_SUFFIX], payload[name + VAL_SUFFIX]
    values = val if mode == "topk" else val.to(torch.float32) * payload[name + SCALE_SUFFIX]
    flat = torch.zeros(shape.numel(), dtype=torch.float32)
    flat[idx] = values
    return flat.view(shape)


def payload_tensor_bytes(payload):
    """Bytes of tensor data in a payload (safetensors adds a JSON header on top)."""
    return sum(t.numel() * t.element_size() for t in payload.values())


def payload_to_bytes(payload):
    """Serialise a payload with safetensors (the HTTP body)."""
    from safetensors.torch import save  # imported here: part A needs only torch

    return save({key: t.contiguous() for key, t in payload.items()})


def payload_from_bytes(body):
    """Parse a safetensors body; anything unreadable raises PayloadError, never another type."""
    from safetensors.torch import load

    try:
        return load(bytes(body))
    except Exception as error:  # safetensors raises its own SafetensorError and others
        raise PayloadError(f"body is not safetensors ({type(error).__name__}: {error})") from None


class PayloadErrorFeedback(_ProposeCommit):
    """One worker's error-feedback memory for named tensors (part B, the HTTP swarm).

    propose(named_grads, mode, ratio) returns the payload to upload; commit() after a
    200 keeps the new residuals; rollback() after a refusal (400/401/409/413) keeps the
    old ones, because nothing reached the server. The new residual is exactly what the
    server will not see: (gradient + old residual) - decode(payload). With mode "none"
    it is zero.
    """

    def __init__(self):
        self.residuals = {}    # name -> tensor shaped like the parameter

    def _keep(self, pending):
        self.residuals = pending

    def propose(self, named_grads, mode, ratio=0.01):
        if self._pending is not None:   # refuse before encoding anything
            raise RuntimeError("the previous proposal was neither committed nor rolled back")
        payload = encode_payload(named_grads, mode, ratio, residuals=self.residuals)
        pending = {}
        for name, grad in named_grads.items():
            corrected = grad.detach().to(torch.float32)
            if name in self.residuals:
                corrected = corrected + self.residuals[name]
            # Our own payload is valid by construction, so it is rebuilt without the checks.
            sent = payload[name] if mode == "none" else _densify(payload, name, grad.shape, mode)
            pending[name] = corrected - sent
        self._hold(pending)
        return payload
