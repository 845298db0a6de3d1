"""PowerSGD (Vogels et al. 2019): each gradient matrix M is sent as two thin factors P, Q.

Introduced in lecture 9 (notes: lectures/lecture09/07_compression_beyond.md §7.2).
A collective scheme: the workers' factors are summed (all-reduce) between the two halves
of one power-iteration step, so it cannot be one encode per worker; it is registered in
compressed_dp.COLLECTIVE_SCHEMES. It follows PyTorch's DDP hook
torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook step for step (a test runs
that hook on 2 real gloo ranks and compares), with error feedback and warm start:

    per worker w:  C_w = G_w + E_w                      (error feedback; E_w starts at 0)
    matrices M_w = C_w viewed as (rows, -1), compressed when (rows + cols) r * 2 < rows cols;
    the rest (vectors, small matrices) is averaged uncompressed.
    Q: the first time standard normal (seeded like the hook), later the last step's Q
       (warm start); orthogonalized.
    P = sum_w M_w Q;  orthogonalize P;  Q = sum_w M_w^T P / W;  approximation A = P Q^T
    E_w = C_w - A      (the average approximation; for uncompressed parts C_w - average)

The first START_STEP steps are plain all-reduce (the hook needs at least 2 before it
compresses with error feedback). What travels per worker and step: P_w, Q_w and the
uncompressed entries, fp32; wire bytes are counted from those tensors.
"""

import numpy as np
import torch

from lecture09.compress.compression import parts_bytes

START_STEP = 2          # the hook's smallest start_powerSGD_iter with error feedback / warm start
MIN_COMPRESSION_RATE = 2   # the hook's default: compress a matrix only if that saves 2x or more
HOOK_RANDOM_SEED = 0       # PowerSGDState's default random_seed


def should_compress(rows, cols, rank, min_rate=MIN_COMPRESSION_RATE):
    return (rows + cols) * rank * min_rate < rows * cols


def orthogonalize(matrix):
    """Orthonormal columns of a (1, n, r) batch, in place: Gram-Schmidt for r <= 2, QR
    beyond (the hook's choice: Gram-Schmidt with no epsilon equals QR for small r)."""
    rank = matrix.shape[2]
    if rank > 2:
        q, _ = torch.linalg.qr(matrix)
        matrix.copy_(q)
        return matrix
    for i in range(rank):
        col = matrix[:, :, i:i + 1]
        col /= torch.norm(col, dim=1, keepdim=True)
        if i + 1 < rank:
            rest = matrix[:, :, i + 1:]
            rest -= torch.sum(col * rest, dim=1, keepdim=True) * col
    return matrix


def draw_order(compressed):
    """The order in which the first random Qs are drawn: the hook groups the matrices to
    compress by shape (rows, cols), each shape where it first appears in the bucket, and
    fills the Qs group by group from one seeded generator. Two matrices of one shape that
    are apart in the bucket (the GPT's head and tok_emb, both 44 x 96) thus draw their Qs
    one after the other."""
    groups = {}
    for entry in compressed:
        shape = entry[2]
        groups.setdefault((shape[0], shape.numel() // shape[0]), []).append(entry)
    return [entry for group in groups.values() for entry in group]


class PowerSGD:
    """PowerSGD over W simulated workers' flat gradients (the .average interface of
    compressed_dp). `order` lists the parameter indices in the hook's bucket order (only
    the first random Q depends on it); by default the reverse of the model's order, as
    DDP fills its bucket (checked against the hook in tests/test_powersgd.py)."""

    def __init__(self, rank=1, error_feedback=True, start_step=START_STEP, order=None,
                 random_seed=HOOK_RANDOM_SEED):
        self.rank, self.error_feedback, self.start_step, self.order = rank, error_feedback, start_step, order
        self.rng = np.random.RandomState(random_seed)
        self.errors = None      # one (n,) per worker
        self.qs = None          # {param index: (1, cols, r)}, kept across steps (warm start)
        self.step = 0

    def _layout(self, shapes):
        """[(param index, offset, shape)] in bucket order."""
        offsets, offset = [], 0
        for shape in shapes:
            offsets.append(offset)
            offset += shape.numel()
        order = self.order if self.order is not None else list(reversed(range(len(shapes))))
        return [(i, offsets[i], shapes[i]) for i in order]

    def average(self, grads, shapes):
        n_workers = len(grads)
        step, self.step = self.step, self.step + 1
        if step < self.start_step:          # plain all-reduce, no error feedback yet
            total = grads[0].clone()
            for g in grads[1:]:
                total.add_(g)
            return total / n_workers, parts_bytes({"": grads[0]}), None
        if self.error_feedback and self.errors is None:
            self.errors = [torch.zeros_like(g) for g in grads]
        corrected = [g + e for g, e in zip(grads, self.errors)] if self.error_feedback else list(grads)
        result = torch.empty_like(grads[0])
        compressed, plain = [], []
        for index, offset, shape in self._layout(shapes):
            rows = shape[0]
            cols = shape.numel() // rows
            rank = min(rows, cols, self.rank)
            (compressed if should_compress(rows, cols, rank) else plain).append((index, offset, shape, rank))
        sent = {}
        for index, offset, shape, _ in plain:                 # averaged as they are
            part = [c[offset:offset + shape.numel()] for c in corrected]
            total = part[0].clone()
            for x in part[1:]:
                total.add_(x)
            result[offset:offset + shape.numel()] = total / n_workers
            sent[f"{index}"] = part[0]
        if self.qs is None:                  # first time: random Q, seeded as the hook seeds it
            generator = torch.Generator().manual_seed(int(self.rng.randint(1_000_000_000)))
            self.qs = {}
            for index, _, shape, rank in draw_order(compressed):
                q = torch.randn(1, shape.numel() // shape[0], rank, generator=generator)
                self.qs[index] = orthogonalize(q)
        else:
            for q in self.qs.values():
                orthogonalize(q)
        for index, offset, shape, rank in compressed:
            rows = shape[0]
            ms = [c[offset:offset + shape.numel()].view(1, rows, -1) for c in corrected]   # (1, rows, cols)
            q = self.qs[index]
            ps = [torch.bmm(m, q) for m in ms]                 # (1, rows, r) per worker
            p = ps[0].clone()
            for x in ps[1:]:
                p.add_(x)
            orthogonalize(p)
            qs = [torch.bmm(m.transpose(1, 2), p) for m in ms]   # (1, cols, r) per worker
            q = qs[0].clone()
            for x in qs[1:]:
                q.add_(x)
            q.div_(n_workers)
            self.qs[index] = q
            result[offset:offset + shape.numel()] = torch.bmm(p, q.transpose(1, 2)).reshape(-1)
            sent[f"{index}::P"], sent[f"{index}::Q"] = ps[0], qs[0]
        if self.error_feedback:
            self.errors = [c - result for c in corrected]
        return result, parts_bytes(sent), None


# ---------------------------------------------------------------------------
# The reference: PyTorch's own hook on real ranks (tests/test_powersgd.py)
# ---------------------------------------------------------------------------

def reference_model(seed=0):
    """A small model with what the GPT has: matrices worth compressing at rank 2 and one
    that is not, vectors, and two matrices of one shape (12 x 16) apart in the bucket with
    another shape between them, as the GPT's head and tok_emb are (draw_order)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.Tanh(), torch.nn.Linear(12, 16),
                               torch.nn.Tanh(), torch.nn.Linear(16, 12), torch.nn.Tanh(),
                               torch.nn.Linear(12, 4))


def reference_batch(step, rank, batch=8):
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(batch, 16, generator=gen), torch.randn(batch, 4, generator=gen)


def hook_worker(rank, world_size, steps, approx_rank, lr):
    """One gloo rank: DDP with powerSGD_hook (error feedback, warm start), plain SGD.
    Returns [averaged flat gradient per step]."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as hook
    from torch.nn.parallel import DistributedDataParallel

    model = reference_model()
    params = list(model.parameters())
    ddp = DistributedDataParallel(model)
    state = hook.PowerSGDState(process_group=dist.group.WORLD, matrix_approximation_rank=approx_rank,
                               start_powerSGD_iter=START_STEP, min_compression_rate=MIN_COMPRESSION_RATE,
                               use_error_feedback=True, warm_start=True, random_seed=HOOK_RANDOM_SEED)
    ddp.register_comm_hook(state, hook.powerSGD_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    averaged = []
    for step in range(steps):
        x, y = reference_batch(step, rank)
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        averaged.append(torch.cat([p.grad.reshape(-1) for p in params]).clone())
        optimizer.step()
    return averaged


def simulate_reference(world_size, steps, approx_rank, lr, order=None):
    """The same run as hook_worker's, in one process through PowerSGD.average."""
    model = reference_model()
    params = list(model.parameters())
    shapes = [p.shape for p in params]
    compressor = PowerSGD(rank=approx_rank, order=order)
    optimizer = torch.optim.SGD(params, lr=lr)
    averaged = []
    for step in range(steps):
        grads = []
        for rank in range(world_size):
            x, y = reference_batch(step, rank)
            for p in params:
                p.grad = None
            torch.nn.functional.mse_loss(model(x), y).backward()
            grads.append(torch.cat([p.grad.reshape(-1) for p in params]))
        average, _, _ = compressor.average(grads, shapes)
        offset = 0
        for p in params:
            p.grad = average[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        averaged.append(average.clone())
        optimizer.step()
    return averaged
