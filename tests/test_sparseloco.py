"""SparseLoCo (compress/sparseloco.py): the 2-bit code and the bytes by hand, error feedback
step by step, and a reference: sending every entry in fp32 with α = 1 and no momentum is
local SGD, so it must equal DiLoCo run with outer lr 1 and no momentum, bit for bit."""

from dataclasses import replace

import pytest
import torch

from lecture09.compress import compressed_dp as cdp
from lecture09.compress import sparseloco as sl


def test_quantize_2bit_by_hand():
    values = torch.tensor([-3.0, -1.0, 0.5, 2.0])          # rms = sqrt(14.25 / 4) = 1.8875
    codes, lookup = sl.quantize_2bit(values)
    assert codes.tolist() == [1, 0, 2, 3]                    # 2 x (v >= 0) + (|v| >= rms)
    assert lookup.tolist() == [-1.0, -3.0, 0.5, 2.0]         # one value per code: exact
    codes, lookup = sl.quantize_2bit(torch.tensor([1.0, 3.0, 4.0, -2.0]))   # rms = sqrt(7.5) = 2.74
    assert codes.tolist() == [2, 3, 3, 0]
    assert lookup.tolist() == [-2.0, 0.0, 1.0, 3.5]         # code 3 decodes to the mean of 3 and 4; 1 unused
    assert sl.dequantize_2bit(codes, lookup).tolist() == [1.0, 3.5, 3.5, -2.0]


def test_sent_bytes_by_hand():
    # (6,) at chunk 4: chunks of 3, two of them; k = 2 keeps 4 entries
    assert sl.sent_bytes([(6,)], 2, 4, 2) == 4 * 2 + 1 + 16        # int16 indices, 8 bits packed, lookup
    assert sl.sent_bytes([(6,)], 2, 4, 32) == 4 * 2 + 4 * 4         # fp32 values, no lookup
    assert sl.sent_bytes([(256, 256)], 1, 256, 2) == 4 + 1 + 16     # 65,536 per chunk: an int32 index
    with pytest.raises(ValueError):
        sl.SparseExchange([(4,)], 1, 1, 4, 3, 0.9)
    with pytest.raises(ValueError):
        sl.SparseExchange([(4,)], 1, 1, 4, 2, 1.5)


def test_error_feedback_sends_the_rest_later_and_decays():
    ex = sl.SparseExchange([(4,)], 1, topk=1, chunk=4, bits=32, decay=1.0)
    mean, sent = ex([torch.tensor([1.0, -4.0, 2.0, 0.5])])
    assert mean.tolist() == [0.0, -4.0, 0.0, 0.0] and sent == 1 * 2 + 4
    mean, _ = ex([torch.zeros(4)])                               # nothing new: the next largest
    assert mean.tolist() == [0.0, 0.0, 2.0, 0.0]
    assert ex.errors[0][0].tolist() == [1.0, 0.0, 0.0, 0.5]
    half = sl.SparseExchange([(4,)], 1, topk=1, chunk=4, bits=32, decay=0.5)
    half([torch.tensor([1.0, -4.0, 2.0, 0.5])])
    mean, _ = half([torch.zeros(4)])
    assert mean.tolist() == [0.0, 0.0, 1.0, 0.0]                 # the buffer decayed by β first


def test_the_mean_is_over_all_workers_not_over_the_senders():
    ex = sl.SparseExchange([(2,)], 2, topk=1, chunk=2, bits=32, decay=1.0)
    mean, _ = ex([torch.tensor([3.0, 0.0]), torch.tensor([0.0, -1.0])])
    assert mean.tolist() == [1.5, -0.5]                          # (1/W) Σ s_w, as the paper's step


def test_sending_everything_in_fp32_is_diloco_with_outer_lr_1_and_no_momentum():
    setup = replace(cdp.TrainSetup().with_steps(6), sparseloco_lr=1.0, sparseloco_decay=0.95,
                    outer_lr=1.0, outer_momentum=0.0, precision="fp32")
    seeds = cdp.Seeds(0, 1)
    ours = cdp.train_run(cdp.Run("SL", "sparseloco", "none", param=(3, 10 ** 6, 64, 32)), seeds, setup)
    plain = cdp.train_run(cdp.Run("DiLoCo", "diloco", "none", param=3), seeds, setup)
    assert ours.losses == plain.losses and ours.bpc == plain.bpc
    # and the 2-bit values change the training (the test can fail)
    coarse = cdp.train_run(cdp.Run("SL", "sparseloco", "none", param=(3, 32, 64, 2)), seeds, setup)
    assert coarse.bpc != plain.bpc


def test_bytes_per_step_are_one_outer_step_over_h():
    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    setup = replace(cdp.TrainSetup().with_steps(6), precision="fp32")
    result = cdp.train_run(cdp.Run("SL", "sparseloco", "none", param=(3, 32, 64, 2)), cdp.Seeds(0, 1), setup)
    model = tiny_gpt.make_model(MODEL_CONFIG)
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert result.bytes_per_element == pytest.approx(sl.sent_bytes(shapes, 32, 64, 2) * 2 / 6 / model.n_params(),
                                                      rel=1e-12)
