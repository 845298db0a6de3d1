"""DeMo (compress/decoupled_momentum.py): the chunked DCT by hand, top-k per chunk, the mean
over the workers that sent a coefficient, the bytes, what stays in the momentum, and the
limit where every coefficient is sent (exactly sign-SGD on the mean gradient); and, where
DEMO_REFERENCE points to the authors' demo.py (bloc97/DeMo), step by step against it."""

import importlib.util
import math
import os
import threading

import pytest
import torch

from lecture09.compress import decoupled_momentum as dm


def test_chunk_side_is_the_largest_divisor_under_the_target():
    assert dm.chunk_side(96, 64) == 48
    assert dm.chunk_side(44, 64) == 44
    assert dm.chunk_side(192, 64) == 64
    assert dm.chunk_side(97, 64) == 1            # a prime: chunks of one value
    assert dm.chunk_side(7, 1) == 1
    with pytest.raises(ValueError):
        dm.chunk_side(0, 4)


def test_dct_by_hand():
    d = dm.dct_matrix(4, torch.float64)
    assert torch.allclose(d @ d.T, torch.eye(4, dtype=torch.float64), atol=1e-12)
    # a constant vector has only the zero frequency: C0 = sqrt(n) * c
    c = d @ torch.full((4,), 3.0, dtype=torch.float64)
    assert c[0].item() == pytest.approx(6.0) and torch.allclose(c[1:], torch.zeros(3, dtype=torch.float64), atol=1e-12)
    # D[1, 0] = sqrt(2 / n) cos(pi / 2n)
    assert d[1, 0].item() == pytest.approx(math.sqrt(0.5) * math.cos(math.pi / 8))


def test_chunked_dct_is_the_dct_of_each_block_and_undoes_itself():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, generator=g, dtype=torch.float64)
    t = dm.ChunkedDCT((6, 8), 4, torch.float64)
    assert t.sides == (3, 4) and t.n_chunks == 4 and t.per_chunk == 12
    coefs = t.encode(x)
    d1, d2 = dm.dct_matrix(3, torch.float64), dm.dct_matrix(4, torch.float64)
    block = x[3:6, 0:4]                          # chunk (1, 0): the third row of coefs
    assert torch.allclose(coefs[2], (d1 @ block @ d2.T).reshape(-1), atol=1e-12)
    assert torch.allclose(t.decode(coefs), x, atol=1e-12)
    v = torch.randn(10, generator=g, dtype=torch.float64)
    tv = dm.ChunkedDCT((10,), 4, torch.float64)
    assert tv.sides == (2,) and torch.allclose(tv.decode(tv.encode(v)), v, atol=1e-12)
    with pytest.raises(ValueError):
        dm.ChunkedDCT((2, 2, 2), 4)


def test_top_per_chunk_and_the_mean_over_senders():
    coefs = torch.tensor([[0.1, -3.0, 2.0, 0.5], [4.0, 0.0, -1.0, 0.2]])
    idx, val = dm.top_per_chunk(coefs, 2)
    assert [sorted(r) for r in idx.tolist()] == [[1, 2], [0, 2]]
    assert torch.equal(val, torch.gather(coefs, 1, idx))
    assert dm.top_per_chunk(coefs, 99)[0].shape == (2, 4)          # clamped to the chunk
    # worker A sends (0: 2, 1: 4), worker B (1: 6, 3: -1): positions 0 and 3 have one sender
    mean = dm.scatter_mean((1, 4), [torch.tensor([[0, 1]]), torch.tensor([[1, 3]])],
                           [torch.tensor([[2.0, 4.0]]), torch.tensor([[6.0, -1.0]])])
    assert mean.tolist() == [[2.0, 5.0, 0.0, -1.0]]


def test_bytes_by_hand():
    w = torch.zeros(96, 96)
    b = torch.zeros(96)
    demo = dm.DeMo([w, b], n_workers=4, topk=32, chunk=64)
    # (96, 96) in 48 x 48 chunks: 4 chunks x 32 kept; (96,) in 2 chunks of 48 x 32 kept; 2 + 4 bytes each
    assert demo.sent_bytes == (4 * 32 + 2 * 32) * 6
    assert demo.sent_fraction == pytest.approx((4 * 32 + 2 * 32) / (96 * 96 + 96))
    assert dm.index_bytes(1 << 15) == 2 and dm.index_bytes((1 << 15) + 1) == 4


def test_what_is_not_sent_stays_in_the_momentum():
    # one vector of 2 values, one chunk of 2, k = 1: only the larger DCT coefficient leaves
    p = torch.zeros(2, dtype=torch.float64)
    demo = dm.DeMo([p], n_workers=1, topk=1, chunk=2, decay=0.5)
    g = torch.tensor([3.0, 1.0], dtype=torch.float64)
    demo.step([[g]], lr=0.1)
    d = dm.dct_matrix(2, torch.float64)
    c = d @ (0.1 * g)                            # (0.4/√2, 0.2/√2): the first is sent
    kept = d.T @ torch.tensor([0.0, c[1].item()], dtype=torch.float64)
    assert torch.allclose(demo.momenta[0][0], kept, atol=1e-12)
    sent = d.T @ torch.tensor([c[0].item(), 0.0], dtype=torch.float64)   # (0.2, 0.2)
    assert torch.allclose(p, -0.1 * torch.sign(sent), atol=1e-12)
    demo.step([[torch.zeros(2, dtype=torch.float64)]], lr=0.1)
    assert torch.allclose(demo.momenta[0][0], torch.zeros(2, dtype=torch.float64), atol=1e-12)  # 0.5 x kept was sent


def test_the_momentum_sums_lr_times_gradient_so_a_changing_lr_reweights_the_steps():
    """By hand, with a different lr at each step (as in training, lecture 1's schedule): the
    momentum is β m + lr g, so an early gradient at a small lr weighs less than a later one.
    At a constant lr, dropping lr from the momentum only rescales it and sign() hides that;
    here the weights themselves move the other way. One worker, one vector of 2, k = 1."""
    p = torch.zeros(2, dtype=torch.float64)
    demo = dm.DeMo([p], n_workers=1, topk=1, chunk=2, decay=0.5)
    # step 1, lr 0.1, g (3, 1): m = (0.3, 0.1); its DCT (0.4/√2, 0.2/√2) sends the first,
    # (0.2, 0.2), and keeps (0.1, -0.1); p = -0.1 × sign(0.2, 0.2) = (-0.1, -0.1)
    demo.step([[torch.tensor([3.0, 1.0], dtype=torch.float64)]], lr=0.1)
    assert torch.allclose(p, torch.tensor([-0.1, -0.1], dtype=torch.float64), atol=1e-12)
    # step 2, lr 1.0, g (-0.2, 0.2): m = 0.5 (0.1, -0.1) + 1.0 (-0.2, 0.2) = (-0.15, 0.15), all
    # in the second coefficient, which is sent: p -= 1.0 × sign(-0.15, 0.15) -> (0.9, -1.1).
    # (Without lr in the momentum: m = 0.5 (1, -1) + (-0.2, 0.2) = (0.3, -0.3), p -> (-1.1, 0.9).)
    demo.step([[torch.tensor([-0.2, 0.2], dtype=torch.float64)]], lr=1.0)
    assert torch.allclose(p, torch.tensor([0.9, -1.1], dtype=torch.float64), atol=1e-12)


def test_sending_every_coefficient_is_sign_sgd_on_the_mean_gradient():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(6, 4, generator=g, dtype=torch.float64)
    start = w.clone()
    demo = dm.DeMo([w], n_workers=3, topk=1000, chunk=64, decay=0.9, weight_decay=0.1)
    total = torch.zeros_like(w)
    for step in range(4):
        grads = [torch.randn(6, 4, generator=g, dtype=torch.float64) for _ in range(3)]
        expected = start * (1 - 0.05 * 0.1) - 0.05 * torch.sign(sum(grads) / 3)
        demo.step([[x] for x in grads], lr=0.05)
        assert torch.allclose(w, expected, atol=1e-12)
        assert all(torch.allclose(m[0], total, atol=1e-12) for m in demo.momenta)   # nothing is kept
        start = w.clone()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        dm.DeMo([torch.zeros(4)], 2, topk=0)
    with pytest.raises(ValueError):
        dm.DeMo([torch.zeros(4)], 2, decay=1.0)


def test_a_short_run_trains_and_counts_what_one_worker_sends():
    from lecture09.compress.compressed_dp import Run, Seeds, TrainSetup, train_run
    setup = TrainSetup().with_steps(6)
    result = train_run(Run("DeMo", "demo", "none", param=(32, 64)), Seeds(0, 1), setup)
    assert result.steps_done == 6 and not result.diverged and math.isfinite(result.bpc)
    from lecture01 import tiny_gpt
    model = tiny_gpt.make_model(setup.model, 0)
    assert result.bytes_per_element == dm.DeMo(model.parameters(), 4).sent_bytes / model.n_params()


# --- against the authors' demo.py -------------------------------------------------------

REFERENCE = os.environ.get("DEMO_REFERENCE")


def _load_reference():
    if not REFERENCE:
        pytest.skip("set DEMO_REFERENCE to a copy of bloc97/DeMo's demo.py to compare with the authors' code")
    pytest.importorskip("einops", reason="the authors' demo.py needs einops (not in requirements.txt)")
    spec = importlib.util.spec_from_file_location("demo_reference", REFERENCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _LockstepGather:
    """An all-gather among threads: each worker's turn waits until all have given theirs."""

    def __init__(self, n):
        self.barrier, self.slots = threading.Barrier(n), [None] * n

    def __call__(self, rank, idx, val):
        self.slots[rank] = (idx.clone(), val.clone())
        self.barrier.wait()
        gathered = list(self.slots)
        self.barrier.wait()
        return [i for i, _ in gathered], [v for _, v in gathered]


def test_equals_the_authors_demo_py_step_by_step():
    reference = _load_reference()
    # a different lr at every step, as in training: at a constant lr the momentum's scale
    # (lr × gradient or the gradient alone) would not change which coefficients leave or
    # their signs, so this comparison could not see it
    n_workers, lrs = 3, [0.01, 0.03, 0.002, 0.02, 0.005, 0.015]
    steps = len(lrs)
    g = torch.Generator().manual_seed(5)
    shapes = [(96, 96), (44, 96), (96,), (288,)]
    start = [torch.randn(s, generator=g) for s in shapes]
    grads = [[[torch.randn(s, generator=g) for s in shapes] for _ in range(n_workers)] for _ in range(steps)]

    ours = [x.clone() for x in start]
    demo = dm.DeMo(ours, n_workers, topk=32, chunk=64, decay=0.999, weight_decay=0.01)
    for step in range(steps):
        demo.step(grads[step], lrs[step])

    gather = _LockstepGather(n_workers)
    theirs = [[torch.nn.Parameter(x.clone()) for x in start] for _ in range(n_workers)]

    def worker(rank):
        opt = reference.DeMo(theirs[rank], lr=lrs[0], compression_decay=0.999, compression_topk=32,
                             compression_chunk=64, weight_decay=0.01)
        opt._demo_all_gather = lambda idx, val: gather(rank, idx, val)
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = lrs[step]                  # what a scheduler does between steps
            for p, grad in zip(theirs[rank], grads[step][rank]):
                p.grad = grad.clone()
            opt.step()

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for rank in range(n_workers):
        for a, b in zip(ours, theirs[rank]):
            assert torch.allclose(a, b.detach(), atol=1e-6), rank
