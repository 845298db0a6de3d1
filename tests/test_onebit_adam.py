"""1-bit Adam against plain references: its warm-up is torch's AdamW, and its compressed
phase equals a direct transcription of Tang et al.'s algorithm, step by step."""

import pytest
import torch

from lecture09.compress import onebit_adam as ob
from lecture09.compress.compression import compress_vector

SHAPES = [torch.Size([3, 4]), torch.Size([4])]
DECAY = torch.cat([torch.ones(12), torch.zeros(4)])


def grads_at(step, n_workers=2):
    gen = torch.Generator().manual_seed(step)
    return [torch.randn(16, generator=gen) for _ in range(n_workers)]


def test_warm_up_is_torch_adamw():
    params = [torch.nn.Parameter(torch.randn(s, generator=torch.Generator().manual_seed(9))) for s in SHAPES]
    adamw = torch.optim.AdamW([{"params": [params[0]], "weight_decay": 0.1}, {"params": [params[1]], "weight_decay": 0.0}],
                              lr=0.01, betas=(0.9, 0.95))
    opt = ob.OneBitAdam(SHAPES, DECAY, 2, warmup=100, beta1=0.9, beta2=0.95, weight_decay=0.1, clip_norm=1.0)
    theta = torch.nn.utils.parameters_to_vector(params).detach().clone()
    for step in range(8):
        grads = grads_at(step)
        average = (grads[0] + grads[1]) / 2
        offset = 0
        for p in params:
            p.grad = average[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        adamw.step()
        theta, sent = opt.step(theta, grads, 0.01)
        assert sent == 16 * 4
        assert torch.allclose(theta, torch.nn.utils.parameters_to_vector(params).detach(), atol=1e-6)


def reference(steps, warmup, lr=0.01, b1=0.9, b2=0.95, wd=0.1, clip=1.0, compress=True):
    """The algorithm written out per tensor, without the class."""
    def sign(x):                     # per tensor: scaled sign, ||x|| / sqrt(d)
        out, offset = [], 0
        for s in SHAPES:
            part = x[offset:offset + s.numel()]
            out.append(torch.where(part >= 0, 1.0, -1.0) * part.norm() / part.numel() ** 0.5)
            offset += s.numel()
        return torch.cat(out)

    def clipped(g):
        return g * min(1.0, clip / (float(g.norm()) + 1e-6))

    theta = torch.zeros(16)
    m, v = torch.zeros(16), torch.zeros(16)
    errors, server = [torch.zeros(16), torch.zeros(16)], torch.zeros(16)
    for t in range(1, steps + 1):
        grads = grads_at(t - 1)
        if t <= warmup:
            g = clipped((grads[0] + grads[1]) / 2)
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            denom = (v / (1 - b2 ** t)).sqrt() + 1e-8
        else:
            denom = (v / (1 - b2 ** warmup)).sqrt() + 1e-8
            local = [b1 * m + (1 - b1) * clipped(g) for g in grads]
            if compress:
                sent = []
                for w in range(2):
                    sent.append(sign(local[w] + errors[w]))
                    errors[w] = local[w] + errors[w] - sent[w]
                avg = (sent[0] + sent[1]) / 2
                m = sign(avg + server)
                server = avg + server - m
            else:
                m = (local[0] + local[1]) / 2
        theta = theta * (1 - lr * wd * DECAY) - lr / (1 - b1 ** t) * m / denom
    return theta


def test_compressed_phase_equals_the_written_out_algorithm():
    for compress in (True, False):
        opt = ob.OneBitAdam(SHAPES, DECAY, 2, warmup=3, beta1=0.9, beta2=0.95, weight_decay=0.1, clip_norm=1.0,
                            compress=compress)
        theta = torch.zeros(16)
        for step in range(10):
            theta, sent = opt.step(theta, grads_at(step), 0.01)
        assert torch.allclose(theta, reference(10, 3, compress=compress), atol=1e-6), compress
        assert sent == (16 * 4 if not compress else (2 + 4) + (1 + 4))   # two tensors: ceil(12/8)+4, ceil(4/8)+4


def test_sign_scheme_is_the_registry_row():
    x = torch.tensor([3.0, -4.0])
    assert torch.allclose(compress_vector(x, "sign-l2")[0], torch.tensor([1.0, -1.0]) * 5 / 2 ** 0.5)


def test_frozen_variance_clipping_the_average_is_adamw_with_v_frozen():
    """The control row of code 7: after warm-up, v stays at its warm-up value and the
    averaged gradient is clipped, as every-step AdamW clips it; written out by hand."""
    b1, b2, lr, wd, warmup = 0.9, 0.95, 0.01, 0.1, 3
    opt = ob.OneBitAdam(SHAPES, DECAY, 2, warmup=warmup, beta1=b1, beta2=b2, weight_decay=wd, clip_norm=1.0,
                        compress=False, clip_average=True)
    theta = torch.zeros(16)
    m, v, ref = torch.zeros(16), torch.zeros(16), torch.zeros(16)
    frozen = None
    for step in range(1, 8):
        grads = grads_at(step)
        g = ob.clip_flat((grads[0] + grads[1]) / 2, 1.0)
        m = b1 * m + (1 - b1) * g
        if step <= warmup:
            v = b2 * v + (1 - b2) * g * g
            denominator = (v / (1 - b2 ** step)).sqrt() + ob.EPS
        else:
            frozen = (v / (1 - b2 ** warmup)).sqrt() + ob.EPS if frozen is None else frozen
            denominator = frozen
        ref = ref * (1 - lr * wd * DECAY) - (lr / (1 - b1 ** step)) * m / denominator
        theta, _ = opt.step(theta, grads, lr)
        assert torch.allclose(theta, ref, atol=1e-7), step
    with pytest.raises(ValueError, match="compresses before any average"):
        ob.OneBitAdam(SHAPES, DECAY, 2, 3, b1, b2, wd, 1.0, compress=True, clip_average=True)
