"""The scheme registry: every row's measured bytes equal its formula, by hand; per-block
int8 and the norm-keeping sign by hand; adding a scheme needs only the registry."""

import math

import pytest
import torch

from lecture09.compress import compression as c
from lecture09.compress.compression_schemes import SCHEMES, BlockInt8, Options, pack_bits, unpack_bits

pytestmark = pytest.mark.smoke


def ramp(n, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def formula_bytes(name, n, opts):
    k = c.topk_count(n, opts.topk_ratio)
    return {"none": 4 * n, "fp16": 2 * n, "int8": n + 4, "int8-block": n + 4 * math.ceil(n / opts.block_size),
            "int4-block": math.ceil(n / 2) + 4 * math.ceil(n / opts.block_size), "topk": 8 * k, "topk-int8": 5 * k + 4, "sign": math.ceil(n / 8) + 4, "sign-l2": math.ceil(n / 8) + 4}[name]


@pytest.mark.parametrize("name", list(SCHEMES))
@pytest.mark.parametrize("n", [1, 7, 1000, 1001])
def test_measured_bytes_equal_the_formula(name, n):
    opts = Options(topk_ratio=0.01, block_size=256)
    _, wire_bytes = c.compress_vector(ramp(n), name, 0.01, 256)
    assert wire_bytes == formula_bytes(name, n, opts)


def test_every_scheme_in_the_table_of_the_module_docstring():
    import lecture09.compress.compression_schemes as module
    for name in SCHEMES:
        assert f"\n    {name} " in module.__doc__, name


def test_block_int8_by_hand():
    g = torch.tensor([1.0, 0.01, -0.5, 100.0, 2.0])          # blocks of 2: [1, .01] [-.5, 100] [2]
    decoded, wire_bytes = c.compress_vector(g, "int8-block", block_size=2)
    assert wire_bytes == 5 + 3 * 4
    scales = torch.tensor([1.0, 100.0, 2.0]) / 127
    expected = torch.round(g / scales.repeat_interleave(2)[:5]) * scales.repeat_interleave(2)[:5]
    assert torch.allclose(decoded, expected)
    assert decoded[1] != 0                                    # one scale for all would round 0.01 to 0
    assert c.compress_vector(g, "int8")[0][1] == 0


def test_block_int8_rounds_fewer_entries_to_zero_than_one_scale():
    g = ramp(4096, seed=5) * torch.logspace(-3, 0, 4096)      # magnitudes over three decades
    one, _ = c.compress_vector(g, "int8")
    block, _ = c.compress_vector(g, "int8-block", block_size=256)
    assert int((block == 0).sum()) < int((one == 0).sum())
    step = (g.view(-1, 256).abs().amax(1) / 127).repeat_interleave(256)
    assert bool(((g - block).abs() <= step / 2 + 1e-7).all())


def test_block_int4_by_hand():
    g = torch.tensor([1.0, 0.2, -0.5, 70.0, 3.0])            # blocks of 2: [1, .2] [-.5, 70] [3]
    parts = SCHEMES["int4-block"].encode(g, Options(block_size=2))
    scales = torch.tensor([1.0, 70.0, 3.0]) / 7
    assert torch.allclose(parts["::scale"], scales)
    # codes round(g / scale) + 8: [15, 9], [8, 15], [15] and a zero code (8) pads the last byte
    assert parts["::val"].tolist() == [15 * 16 + 9, 8 * 16 + 15, 15 * 16 + 8]
    decoded = SCHEMES["int4-block"].decode(parts, g.shape, Options(block_size=2))
    assert torch.allclose(decoded, torch.tensor([1.0, 1 / 7, 0.0, 70.0, 3.0]))


def test_block_int4_error_is_at_most_half_a_step_and_zeros_stay_zero():
    g = ramp(1001, seed=3)
    opts = Options(block_size=256)
    decoded = SCHEMES["int4-block"].decode(SCHEMES["int4-block"].encode(g, opts), g.shape, opts)
    padded = torch.cat([g, g.new_zeros(23)]).view(-1, 256)
    step = (padded.abs().amax(1) / 7).repeat_interleave(256)[:1001]
    assert bool(((g - decoded).abs() <= step / 2 + 1e-6).all())
    zeros = torch.zeros(5)
    assert torch.equal(SCHEMES["int4-block"].decode(SCHEMES["int4-block"].encode(zeros, opts), zeros.shape, opts), zeros)


def test_sign_l2_keeps_the_norm_and_zero_is_plus():
    g = torch.tensor([3.0, -4.0, 0.0, 0.0])
    decoded, _ = c.compress_vector(g, "sign-l2")
    assert torch.allclose(decoded, torch.tensor([2.5, -2.5, 2.5, 2.5]))     # ||g|| / sqrt(4) = 2.5
    assert torch.isclose(decoded.norm(), g.norm())


def test_bits_pack_first_entry_high():
    bits = torch.tensor([True, False, False, False, False, False, False, True, True])
    packed = pack_bits(bits)
    assert packed.tolist() == [129, 128] and torch.equal(unpack_bits(packed, 9), bits)


def test_wire_modes_are_the_registry_rows_on_the_wire():
    assert c.WIRE_MODES == ("none", "topk", "topk-int8")
    assert all(SCHEMES[m].on_wire for m in c.WIRE_MODES)


def test_a_new_scheme_needs_only_a_class_and_a_registry_row(monkeypatch):
    class Block64(BlockInt8):
        name = "int8-block64"

        def encode(self, x, opts):
            return super().encode(x, Options(block_size=64))

        def decode(self, parts, shape, opts):
            return super().decode(parts, shape, Options(block_size=64))

    monkeypatch.setitem(SCHEMES, "int8-block64", Block64())
    decoded, wire_bytes = c.compress_vector(ramp(200), "int8-block64")
    assert wire_bytes == 200 + 4 * 4
    ef = c.ErrorFeedback()
    sent, _ = ef.compress(ramp(200), "int8-block64")
    assert torch.allclose(sent + ef.residual, ramp(200), atol=1e-6)
