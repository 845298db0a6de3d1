"""Tests for code/lecture09/compression.py: byte counts by hand, decoding, error feedback,
and the wire payload's validation (every malformed payload is refused with PayloadError)."""

import math

import pytest
import torch

from lecture09.compress import compression as c


def ramp(n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=gen)


# ---------------------------------------------------------------------------
# Part A: flat vectors
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("scheme, expected_bytes", [
    ("none", 4000),           # 1000 fp32
    ("fp16", 2000),           # 1000 fp16
    ("int8", 1004),           # 1000 int8 + one fp32 scale
    ("topk", 80),             # k = 10 pairs of (fp32 value, int32 index)
    ("sign", 129),            # ceil(1000 / 8) = 125 bytes of bits + 4-byte scale
])
def test_wire_bytes_by_hand(scheme, expected_bytes):
    decoded, wire_bytes = c.compress_vector(ramp(1000), scheme, topk_ratio=0.01)
    assert wire_bytes == expected_bytes
    assert decoded.shape == (1000,) and decoded.dtype == torch.float32


def test_sign_bytes_round_up_and_topk_keeps_at_least_one():
    assert c.compress_vector(ramp(1001), "sign")[1] == 126 + 4
    assert c.compress_vector(ramp(50), "topk", topk_ratio=0.01)[1] == 8   # int(0.5) -> 1 entry
    assert c.topk_count(1000, 0.01) == 10
    assert c.topk_count(5, 1.0) == 5


def test_unknown_scheme_and_bad_ratio_raise():
    with pytest.raises(ValueError):
        c.compress_vector(ramp(10), "int4")
    with pytest.raises(ValueError):
        c.compress_vector(ramp(10), "topk", topk_ratio=0.0)
    with pytest.raises(ValueError):
        c.compress_vector(ramp(10).view(2, 5), "none")


def test_decoded_values_by_hand():
    g = torch.tensor([0.5, -2.0, 0.0, 1.0])
    topk, _ = c.compress_vector(g, "topk", topk_ratio=0.5)          # keeps |-2| and |1|
    assert torch.equal(topk, torch.tensor([0.0, -2.0, 0.0, 1.0]))
    sign, _ = c.compress_vector(g, "sign")                            # mean |g| = 0.875; 0 -> +1
    assert torch.allclose(sign, torch.tensor([0.875, -0.875, 0.875, 0.875]))
    int8, _ = c.compress_vector(g, "int8")                            # scale = 2 / 127
    assert torch.allclose(int8, torch.round(g / (2 / 127)) * (2 / 127))
    assert torch.equal(c.compress_vector(g, "fp16")[0], g)            # all exact in fp16


def test_zero_vector_gives_zeros_without_nan():
    zeros = torch.zeros(100)
    for scheme in c.SCHEMES:
        decoded, _ = c.compress_vector(zeros, scheme)
        assert torch.equal(decoded, zeros), scheme


def test_sign_scale_minimises_l2_error():
    g = ramp(2000, seed=3)
    decoded, _ = c.compress_vector(g, "sign")
    scale = float(decoded.abs()[0])
    signs = decoded / scale

    def err(a):
        return float(torch.linalg.vector_norm(g - a * signs))

    assert err(scale) < err(scale * 1.01) and err(scale) < err(scale * 0.99)


def test_int8_error_is_at_most_half_a_step():
    g = ramp(5000, seed=4)
    decoded, _ = c.compress_vector(g, "int8")
    step = float(g.abs().max()) / 127
    assert float((g - decoded).abs().max()) <= step / 2 + 1e-7


@pytest.mark.parametrize("scheme", c.SCHEMES)
def test_error_feedback_conserves_mass(scheme):
    ef = c.ErrorFeedback()
    for step in range(5):
        g = ramp(3000, seed=10 + step)
        old = torch.zeros(3000) if ef.residual is None else ef.residual.clone()
        sent, _ = ef.compress(g, scheme, topk_ratio=0.01)
        assert torch.allclose(sent + ef.residual, g + old, atol=1e-6)


def test_error_feedback_topk_eventually_sends_a_small_constant_direction():
    # Entry 0 is always the smallest, so plain top-k would never send it; with error
    # feedback its residual grows until it wins a slot.
    ef = c.ErrorFeedback()
    g = torch.tensor([0.1, 1.0, -1.0, 0.9])
    sent_total = torch.zeros(4)
    for _ in range(30):
        sent, _ = ef.compress(g, "topk", topk_ratio=0.25)
        sent_total += sent
    assert sent_total[0] > 0


def test_error_feedback_rollback_keeps_residual():
    ef = c.ErrorFeedback()
    ef.compress(ramp(500, seed=1), "topk", topk_ratio=0.1)
    before = ef.residual.clone()
    ef.propose(ramp(500, seed=2), "topk", topk_ratio=0.1)
    ef.rollback()
    assert torch.equal(ef.residual, before)
    with pytest.raises(RuntimeError):
        ef.commit()   # nothing pending any more


# ---------------------------------------------------------------------------
# Part B: wire payloads
# ---------------------------------------------------------------------------

SHAPES = {"w": torch.Size([20, 10]), "b": torch.Size([10])}


def grads(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=gen) for name, shape in SHAPES.items()}


def test_payload_keys_dtypes_and_sizes():
    p = c.encode_payload(grads(), "topk-int8", ratio=0.05)
    assert set(p) == {"w::idx", "w::val", "w::scale", "b::idx", "b::val", "b::scale"}
    assert p["w::idx"].dtype == torch.int64 and p["w::val"].dtype == torch.int8
    assert p["w::scale"].shape == (1,) and p["w::scale"].dtype == torch.float32
    assert p["w::idx"].numel() == 10 and p["b::idx"].numel() == 1   # int(0.05 * 10) = 0 -> 1
    # 11 entries x (8-byte index + 1-byte value) + 2 scales x 4 bytes
    assert c.payload_tensor_bytes(p) == 11 * 9 + 8
    p = c.encode_payload(grads(), "topk", ratio=0.05)
    assert c.payload_tensor_bytes(p) == 11 * 12


@pytest.mark.parametrize("mode", c.WIRE_MODES)
def test_payload_bytes_are_what_safetensors_torch_writes(mode):
    """payload_to_bytes goes through numpy for speed: byte for byte torch's own save."""
    from safetensors.torch import save
    payload = c.encode_payload(grads(2), mode, ratio=0.1)
    assert c.payload_to_bytes(payload) == save(payload)
    weights = {"w": torch.randn(5, 7), "step": torch.tensor(3, dtype=torch.int64), "t": torch.randn(4, 3).t()}
    assert c.safetensors_bytes(weights) == save({k: v.contiguous() for k, v in weights.items()})
    half = {"w": torch.randn(5, 7).to(torch.bfloat16), "b": torch.randn(3)}   # numpy has no bf16: torch's path
    assert c.safetensors_bytes(half) == save(half)


@pytest.mark.parametrize("mode", c.WIRE_MODES)
def test_round_trip_through_bytes(mode):
    g = grads(1)
    payload = c.encode_payload(g, mode, ratio=0.1)
    dense = c.decode_payload(c.payload_from_bytes(c.payload_to_bytes(payload)), SHAPES, mode)
    for name, tensor in g.items():
        assert dense[name].shape == tensor.shape
        kept = dense[name] != 0
        if mode == "none":
            assert torch.equal(dense[name], tensor)
        elif mode == "topk":
            assert torch.equal(dense[name][kept], tensor[kept])
            # the kept entries are the largest in magnitude
            assert tensor[kept].abs().min() >= tensor[~kept].abs().max()
        else:
            step = float(tensor[kept].abs().max()) / 127
            assert float((dense[name][kept] - tensor[kept]).abs().max()) <= step / 2 + 1e-7


def test_payload_error_feedback_invariant_and_rollback():
    ef = c.PayloadErrorFeedback()
    g0 = grads(2)
    p0 = ef.propose(g0, "topk", ratio=0.1)
    ef.commit()
    sent0 = c.decode_payload(p0, SHAPES, "topk")
    for name in SHAPES:
        assert torch.allclose(sent0[name] + ef.residuals[name], g0[name])
    kept = {k: v.clone() for k, v in ef.residuals.items()}
    ef.propose(grads(3), "topk", ratio=0.1)
    ef.rollback()
    for name in SHAPES:
        assert torch.equal(ef.residuals[name], kept[name])


def valid(mode="topk"):
    return c.encode_payload(grads(), mode, ratio=0.1)


def refuse(payload, mode="topk", match=None):
    with pytest.raises(c.PayloadError, match=match):
        c.decode_payload(payload, SHAPES, mode)


def test_refuses_missing_and_extra_keys():
    p = valid()
    del p["w::val"]
    refuse(p, match="missing")
    p = valid()
    p["evil::idx"] = torch.zeros(1, dtype=torch.int64)
    refuse(p, match="unexpected")


def test_refuses_unknown_mode():
    refuse(valid(), mode="zip", match="unknown compression")


def test_refuses_wrong_dtypes():
    p = valid()
    p["w::idx"] = p["w::idx"].to(torch.int32)
    refuse(p, match="dtype")
    p = valid()
    p["w::val"] = p["w::val"].double()
    refuse(p, match="dtype")
    p = valid("none")
    p["b"] = p["b"].half()
    refuse(p, "none", match="dtype")


def test_refuses_wrong_shapes():
    p = valid("none")
    p["w"] = torch.zeros(10, 20)
    refuse(p, "none", match="shape")
    p = valid()
    p["w::val"] = p["w::val"][:-1]
    refuse(p, match="indices but")
    p = valid()
    p["w::idx"] = p["w::idx"].view(-1, 1)
    refuse(p, match="1-D")
    p = valid()
    p["b::idx"], p["b::val"] = torch.arange(11), torch.ones(11)
    refuse(p, match="entries for a tensor")


@pytest.mark.parametrize("bad_index", [200, -1])
def test_refuses_out_of_range_and_negative_indices(bad_index):
    p = valid()
    p["w::idx"][0] = bad_index
    refuse(p, match="outside")


def test_refuses_repeated_indices():
    p = valid()
    p["w::idx"][1] = p["w::idx"][0]
    refuse(p, match="repeated")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_refuses_non_finite_values(bad):
    p = valid()
    p["w::val"][0] = bad
    refuse(p, match="NaN or infinity")
    p = valid("topk-int8")
    p["b::scale"][0] = bad
    refuse(p, "topk-int8", match="NaN or infinity|> 0")


def test_refuses_bad_scale():
    p = valid("topk-int8")
    p["w::scale"][0] = 0.0
    refuse(p, "topk-int8", match="> 0")
    p = valid("topk-int8")
    p["w::scale"] = torch.ones(2)
    refuse(p, "topk-int8", match=r"\(1,\)")
    p = valid("topk-int8")
    p["w::scale"][0] = 3e38            # int8 * scale overflows float32
    p["w::val"][0] = 127
    refuse(p, "topk-int8", match="NaN or infinity")


def test_garbage_bytes_raise_payload_error():
    for body in (b"", b"garbage", b"\xff" * 64, (10**6).to_bytes(8, "little") + b"{}"):
        with pytest.raises(c.PayloadError):
            c.payload_from_bytes(body)
