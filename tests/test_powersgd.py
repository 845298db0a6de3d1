"""PowerSGD: the simulation against PyTorch's own powerSGD_hook on 2 real gloo ranks, and
the algebra by hand (orthogonal factors, exact rank-1 recovery, error feedback)."""

import pytest
import torch

from lecture09.compress import powersgd
from lecture09.ranks.gloo_ranks import run_ranks


@pytest.mark.parametrize("approx_rank", [1, 2])
def test_simulation_equals_torch_hook_on_two_gloo_ranks(approx_rank):
    steps, lr = 6, 0.1
    results = run_ranks(powersgd.hook_worker, 2, args=(steps, approx_rank, lr), timeout_s=120)
    hook_grads = results[0]
    assert results[1][-1].allclose(hook_grads[-1])                  # the ranks agree
    simulated = powersgd.simulate_reference(2, steps, approx_rank, lr)
    for step, (h, s) in enumerate(zip(hook_grads, simulated)):
        assert torch.allclose(h, s, atol=1e-6, rtol=1e-5), step
    # after the plain steps the gradient really is compressed: not the exact average
    assert not torch.allclose(hook_grads[-1], _exact_average(steps - 1, lr, hook_grads), atol=1e-6)


def _exact_average(step, lr, hook_grads):
    """The uncompressed average gradient at `step` of the hook's own trajectory."""
    model = powersgd.reference_model()
    params = list(model.parameters())
    with torch.no_grad():
        for g in hook_grads[:step]:
            offset = 0
            for p in params:
                p -= lr * g[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
    total = 0
    for rank in range(2):
        x, y = powersgd.reference_batch(step, rank)
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        total = total + torch.cat([p.grad.reshape(-1) for p in params])
    return total / 2


def test_the_first_qs_are_drawn_shape_group_by_shape_group():
    """As the hook's shape_to_tensors: each (rows, cols) where it first appears in the
    bucket, its matrices together. The GPT's bucket order, by hand."""
    shapes = {"head": (44, 96), "mlp.2": (96, 192), "mlp.0": (192, 96), "proj": (96, 96),
              "qkv": (288, 96), "tok_emb": (44, 96)}
    bucket = [(name, 0, torch.Size(shape), 1) for name, shape in shapes.items()]
    drawn = [entry[0] for entry in powersgd.draw_order(bucket)]
    assert drawn == ["head", "tok_emb", "mlp.2", "mlp.0", "proj", "qkv"]
    assert powersgd.draw_order(bucket[1:5]) == bucket[1:5]      # all shapes differ: bucket order


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_orthogonalize_gives_orthonormal_columns(rank):
    m = torch.randn(1, 10, rank, generator=torch.Generator().manual_seed(rank))
    q = powersgd.orthogonalize(m.clone())
    assert torch.allclose(q[0].T @ q[0], torch.eye(rank), atol=1e-5)


def test_a_rank_one_gradient_is_recovered_after_warm_start():
    u, v = torch.randn(8, 1), torch.randn(1, 6)
    g = (u @ v).reshape(-1)                                   # every worker: the same rank-1 matrix
    compressor = powersgd.PowerSGD(rank=1, error_feedback=False, start_step=0)
    average, wire_bytes, _ = compressor.average([g, g.clone()], [torch.Size([8, 6])])
    assert torch.allclose(average, g, atol=1e-5)              # one power step finds a rank-1 matrix exactly
    assert wire_bytes == (8 + 6) * 4                          # P (8 x 1) and Q (6 x 1), fp32


def test_vectors_travel_uncompressed_and_error_feedback_conserves_mass():
    shapes = [torch.Size([12, 10]), torch.Size([10])]
    grads = [torch.randn(130, generator=torch.Generator().manual_seed(w)) for w in range(3)]
    compressor = powersgd.PowerSGD(rank=1, start_step=0)
    average, wire_bytes, _ = compressor.average(grads, shapes)
    assert torch.allclose(average[120:], sum(g[120:] for g in grads) / 3)
    assert wire_bytes == (12 + 10 + 10) * 4
    # what every worker kept back sums to what the average left out
    kept = sum(compressor.errors)
    assert torch.allclose(kept + 3 * average, sum(grads), atol=1e-5)
