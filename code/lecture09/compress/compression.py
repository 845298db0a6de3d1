"""Gradient compression: what a worker sends instead of its full fp32 gradient.

Introduced in lecture 9 (notes: lectures/lecture09/05_decentralized.md, section 5).
The schemes themselves (one class each, one registry row each) live in
compression_schemes.py; this module builds the two ways the scripts use them, on the same
classes, with error feedback written once:
- 05_decentralized.py (demo 2) compresses one flat gradient vector per worker with
  `compress_vector` / `ErrorFeedback` and counts the bytes it would cost;
- 06_swarm_http.py sends real payloads over HTTP with `encode_payload` /
  `decode_payload` / `payload_to_bytes` / `payload_from_bytes` and `PayloadErrorFeedback`.

Bytes are counted from the tensors a scheme's encode returns (compression_schemes'
table gives the formulas they must equal).

Error feedback (Seide et al. 2014; Lin et al. 2018, Deep Gradient Compression;
Karimireddy et al. 2019): a worker keeps what compression dropped, the residual
e = (g + e_old) - C(g + e_old), and adds it to its next gradient, so dropped mass is
delayed, never lost. The invariant, checked in tests:
    sent + new residual == gradient + old residual.
`Residuals` holds it for named tensors and splits a send into propose() and commit() /
rollback(): if the receiver refuses the upload, nothing was sent, so the residual must
not move. A flat vector is the one-tensor case.

The swarm's wire convention (one entry per parameter tensor, a flat {key: tensor} map
serialised with safetensors); the modes are the registry's schemes with on_wire:
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

import torch

from lecture09.compress.compression_schemes import (  # noqa: F401  (re-exported: one import for the scripts)
    IDX_SUFFIX, INT8_LEVELS, SCALE_SUFFIX, SCHEMES, VAL_SUFFIX, Options, PayloadError, check_finite,
    parts_bytes, topk_count)

WIRE_MODES = tuple(name for name, scheme in SCHEMES.items() if scheme.on_wire)   # X-Compression values
WIRE_OPTIONS = Options(index_dtype=torch.int64)   # the swarm's convention: int64 indices
WIRE_DTYPES = (torch.float32, torch.int64, torch.int8)   # every dtype a payload may carry
FLAT_KEY = ""            # the one name a flat vector goes by in a Residuals memory


def scheme_named(name, known=SCHEMES, error=ValueError, what="compression scheme"):
    if name not in known:
        raise error(f"unknown {what} {name!r}; expected one of {tuple(known)}")
    return SCHEMES[name]


def round_trip(x, scheme, opts):
    """(decoded, wire_bytes): what the receiver rebuilds from x, and what travelled."""
    parts = scheme.encode(x, opts)
    return scheme.decode(parts, x.shape, opts), parts_bytes(parts)


# ---------------------------------------------------------------------------
# Flat vectors (05_decentralized.py demo 2)
# ---------------------------------------------------------------------------

def compress_vector(g, scheme, topk_ratio=0.01, block_size=Options.block_size):
    """Compress a 1-D float32 gradient and decode it as the receiver would.

    Returns (decoded, wire_bytes): decoded is a new float32 tensor of g's shape (n,);
    wire_bytes is the size of the tensors that travel (int32 top-k indices).
    An all-zero vector decodes to zeros (no division by zero). Unknown scheme ->
    ValueError. Vectorised: demo 2 calls this thousands of times on ~100k elements.
    """
    codec = scheme_named(scheme)
    if g.dim() != 1:
        raise ValueError(f"compress_vector takes a 1-D tensor, got shape {tuple(g.shape)}")
    return round_trip(g.detach().to(torch.float32), codec, Options(topk_ratio, block_size))


class Residuals:
    """Error feedback for named tensors, in one place: corrected = gradient + residual;
    what is sent is compressed from `corrected`; the new residual is corrected - decoded.

    propose(named_grads, scheme, opts) returns ({name: parts}, {name: decoded}) and holds
    the new residuals aside; commit() keeps them (the send went through), rollback()
    drops them (it was refused: the residuals stay as they were). Residuals start at zero.
    """

    def __init__(self):
        self.residuals = {}      # name -> tensor shaped like the gradient
        self._pending = None

    def corrected(self, name, grad):
        g = grad.detach().to(torch.float32)
        return g + self.residuals[name] if name in self.residuals else g

    def propose(self, named_grads, scheme, opts):
        if self._pending is not None:   # refuse before encoding anything
            raise RuntimeError("the previous proposal was neither committed nor rolled back")
        encoded, decoded, pending = {}, {}, {}
        for name, grad in named_grads.items():
            corrected = self.corrected(name, grad)
            encoded[name] = scheme.encode(corrected, opts)
            decoded[name] = scheme.decode(encoded[name], corrected.shape, opts)
            pending[name] = corrected - decoded[name]
        self._pending = pending
        return encoded, decoded

    def commit(self):
        """The proposed send went through: keep what it left behind."""
        if self._pending is None:
            raise RuntimeError("nothing to commit: call propose() first")
        self.residuals, self._pending = self._pending, None

    def rollback(self):
        """The proposed send was refused: forget it; the residuals are unchanged."""
        if self._pending is None:
            raise RuntimeError("nothing to roll back: call propose() first")
        self._pending = None


class ErrorFeedback(Residuals):
    """One worker's error-feedback memory for one flat gradient (demo 2)."""

    @property
    def residual(self):
        """(n,) float32, or None before the first commit."""
        return self.residuals.get(FLAT_KEY)

    def propose(self, g, scheme, topk_ratio=0.01, block_size=Options.block_size):
        """Compress g + residual; return (decoded, wire_bytes) without committing."""
        codec = scheme_named(scheme)
        encoded, decoded = super().propose({FLAT_KEY: g}, codec, Options(topk_ratio, block_size))
        return decoded[FLAT_KEY], parts_bytes(encoded[FLAT_KEY])

    def compress(self, g, scheme, topk_ratio=0.01, block_size=Options.block_size):
        """Compress with error feedback and commit at once; returns (decoded, wire_bytes)."""
        decoded, wire_bytes = self.propose(g, scheme, topk_ratio, block_size)
        self.commit()
        return decoded, wire_bytes


# ---------------------------------------------------------------------------
# The swarm's wire payloads (06_swarm_http.py)
# ---------------------------------------------------------------------------

def wire_scheme(mode):
    return scheme_named(mode, WIRE_MODES, PayloadError, "compression mode")


def expected_keys(shapes, mode):
    """The exact key set a valid payload for these parameter names has in `mode`."""
    suffixes = wire_scheme(mode).suffixes
    return {name + suffix for name in shapes for suffix in suffixes}


def _flatten(named_parts):
    """{name: {suffix: tensor}} -> the wire's flat {name + suffix: tensor}."""
    return {name + suffix: t for name, parts in named_parts.items() for suffix, t in parts.items()}


def _check_names(named):
    for name in named:
        if "::" in name:
            raise ValueError(f"parameter name {name!r} contains '::', which the wire format reserves")


def encode_payload(named_grads, mode, ratio=0.01, residuals=None):
    """Encode {name: gradient} as a wire payload {key: tensor} (convention above).

    residuals (error feedback), if given, maps some names to tensors of the same shape
    that are added before compressing; they are only read, never changed
    (PayloadErrorFeedback decides whether to keep the new residual).
    Top-k keeps max(1, int(ratio * numel)) entries per tensor, indices sorted ascending.
    """
    scheme = wire_scheme(mode)
    _check_names(named_grads)
    memory = Residuals()
    memory.residuals = residuals or {}
    opts = Options(topk_ratio=ratio, index_dtype=WIRE_OPTIONS.index_dtype)
    return _flatten({name: scheme.encode(memory.corrected(name, grad), opts)
                     for name, grad in named_grads.items()})


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
    scheme = wire_scheme(mode)
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
    # No floating dtype but float32, before any arithmetic: torch.cat of float32 with a
    # float8 tensor raises, and with float16 promotes (issue 45, item 12). Integer dtypes
    # are each scheme's check, which names the one expected.
    for key, tensor in payload.items():
        if tensor.is_floating_point() and tensor.dtype not in WIRE_DTYPES:
            raise PayloadError(f"{key}: dtype {str(tensor.dtype).removeprefix('torch.')} is not one the wire uses "
                               f"({', '.join(str(d).removeprefix('torch.') for d in WIRE_DTYPES)})")
    # One finiteness test for the whole payload (the usual case); only if it fails does
    # each tensor's check look for the first key at fault, for the message.
    floats = [t.reshape(-1) for t in payload.values() if t.is_floating_point()]
    finite = not floats or bool(torch.isfinite(torch.cat(floats)).all())
    dense = {}
    for name, shape in shapes.items():
        shape = torch.Size(shape)
        parts = {suffix: payload[name + suffix] for suffix in scheme.suffixes}
        scheme.check(name, parts, shape, finite=finite)
        dense[name] = scheme.decode(parts, shape, WIRE_OPTIONS)
    # int8 x a huge scale can overflow: the decoded tensors are checked too, all at once
    if not bool(torch.isfinite(torch.cat([d.reshape(-1) for d in dense.values()])).all()):
        for name, tensor in dense.items():
            check_finite(f"{name} (decoded)", tensor)
    return dense


def payload_tensor_bytes(payload):
    """Bytes of tensor data in a payload (safetensors adds a JSON header on top)."""
    return parts_bytes(payload)


def safetensors_bytes(tensors):
    """{name: CPU tensor} as safetensors bytes. The same bytes as safetensors.torch.save;
    through numpy when every dtype has a numpy twin, because torch.save's per-tensor
    bookkeeping costs ~0.1 ms a tensor here (3.7 ms for a 34-key payload, numpy 0.3 ms).
    bf16, which numpy lacks, goes through torch. tests/test_compression_payload.py checks
    that both give the same bytes."""
    import torch

    if any(t.dtype == torch.bfloat16 for t in tensors.values()):
        from safetensors.torch import save
        return save({key: t.detach().contiguous() for key, t in tensors.items()})
    from safetensors.numpy import save
    return save({key: t.detach().contiguous().numpy() for key, t in tensors.items()})


def payload_to_bytes(payload):
    """Serialise a payload with safetensors (the HTTP body)."""
    return safetensors_bytes(payload)


def payload_from_bytes(body):
    """Parse a safetensors body; anything unreadable raises PayloadError, never another type."""
    from safetensors.torch import load

    try:
        return load(bytes(body))
    except Exception as error:  # safetensors raises its own SafetensorError and others
        raise PayloadError(f"body is not safetensors ({type(error).__name__}: {error})") from None


class PayloadErrorFeedback(Residuals):
    """One worker's error-feedback memory for named tensors (the HTTP swarm).

    propose(named_grads, mode, ratio) returns the payload to upload; commit() after a
    200 keeps the new residuals; rollback() after a refusal (400/401/409/413) keeps the
    old ones, because nothing reached the server. The new residual is exactly what the
    server will not see: (gradient + old residual) - decode(payload). With mode "none"
    it is zero.
    """

    def propose(self, named_grads, mode, ratio=0.01):
        scheme = wire_scheme(mode)
        _check_names(named_grads)
        opts = Options(topk_ratio=ratio, index_dtype=WIRE_OPTIONS.index_dtype)
        encoded, _ = super().propose(named_grads, scheme, opts)
        return _flatten(encoded)
