"""FSDP (ZeRO-3) written out on gloo ranks, beside PyTorch's fully_shard (lecture 9, code 3,
demo 6; notes §3.7). Imported by 03_memory_zero.py through fsdp_report.py and by
tests/test_fsdp.py; the rank workers live here for the "spawn" start method.

Units, each sharded as one flat vector (FSDP's "flat parameter"): the embedding, every block,
and the final LayerNorm with the output layer. Rank r keeps shard r of every unit, padded to
equal lengths, and AdamW's moments for it. One step:

  forward   all-gather unit u just before its forward, the all-gather of unit u+1 started
            first (prefetch, async); after the forward, the gathered storage is resized to 0
            ("reshard after forward"): the autograd graph keeps the tensor, not its bytes;
  backward  when the gradient reaches unit u's output (a tensor hook), the storage is gathered
            again (and unit u−1's gather started); once autograd has accumulated unit u's
            gradient (a post-accumulate-grad hook), it is reduce-scattered and the full
            parameters and gradient are freed;
  step      global-norm clipping from the shards' squared norms, AdamW on each shard.

The gathered bytes are written through .data, which shares the storage but not the version
counter, so autograd's saved views read the re-gathered values without seeing an in-place
change. Checked against one process on the whole batch (zero.reference_run) with ZeRO-1's
tolerance (zero.ATOL): the ranks sum the same gradients in another order.
"""

import math
import time

import torch
import torch.distributed as dist
from torch.func import functional_call

from lecture01 import tiny_gpt
from lecture09.parallel import zero


class Unit:
    """One unit's flat parameter: this rank's shard, AdamW's moments, and the gathered tensor
    whose storage exists only while the unit computes."""

    def __init__(self, name, module, names, rank, world_size, train):
        self.name, self.module, self.names = name, module, names
        params = [dict(module.named_parameters())[n] for n in names]
        self.shapes = [p.shape for p in params]
        self.n = sum(p.numel() for p in params)
        self.shard_len = math.ceil(self.n / world_size)
        padded = torch.zeros(self.shard_len * world_size)
        padded[:self.n] = torch.cat([p.detach().reshape(-1) for p in params])
        self.shard = padded[rank * self.shard_len:(rank + 1) * self.shard_len].clone()
        decay = torch.zeros(self.shard_len * world_size)
        decay[:self.n] = torch.cat([torch.full((p.numel(),), train.weight_decay if p.dim() >= 2 else 0.0)
                                    for p in params])
        self.decay = decay[rank * self.shard_len:(rank + 1) * self.shard_len]
        self.exp_avg = torch.zeros(self.shard_len)
        self.exp_avg_sq = torch.zeros(self.shard_len)
        self.full = None              # the gathered flat parameter (a leaf), storage 0 bytes when resharded
        self.work = None              # a pending all-gather: (work, pieces)
        self.grad_shard = None


class OwnFSDP:
    """The mechanism of the docstring on this rank; log: (seconds, event, unit, param bytes held)."""

    def __init__(self, model, rank, world_size, train, prefetch=True):
        self.model, self.rank, self.world_size, self.train = model, rank, world_size, train
        self.prefetch = prefetch
        units = [("embedding", model.tok_emb)] + [(f"block {i}", b) for i, b in enumerate(model.blocks)]
        self.units = [Unit(name, m, [n for n, _ in m.named_parameters()], rank, world_size, train) for name, m in units]
        self.units.append(Unit("head", model, ["ln_f.weight", "ln_f.bias", "head.weight", "head.bias"], rank,
                               world_size, train))
        self.log, self.started = [], time.perf_counter()
        self.gathered_bytes = self.scattered_bytes = 0
        self.n_steps = 0

    def held_bytes(self):
        """Shards, gathered flat parameters, and the buffers of all-gathers still in flight."""
        shards = sum(u.shard.numel() * 4 for u in self.units)
        full = sum(u.full.untyped_storage().nbytes() for u in self.units if u.full is not None)
        flying = sum(self.world_size * u.shard_len * 4 for u in self.units if u.work is not None)
        return shards + full + flying

    def note(self, event, unit):
        self.log.append((time.perf_counter() - self.started, event, unit.name, self.held_bytes()))

    # ----- gather and free ------------------------------------------------------------------
    def start_gather(self, u):
        if u.work is not None or (u.full is not None and u.full.untyped_storage().nbytes()):
            return
        pieces = [torch.empty(u.shard_len) for _ in range(self.world_size)]
        u.work = (dist.all_gather(pieces, u.shard, async_op=True), pieces)
        self.gathered_bytes += (self.world_size - 1) * u.shard_len * 4       # what this rank receives
        self.note("all-gather 开始", u)

    def finish_gather(self, u):
        self.start_gather(u)
        if u.work is None:
            return
        work, pieces = u.work
        work.wait()
        flat = torch.cat(pieces)[:u.n]
        if u.full is None:
            u.full = flat.requires_grad_()
            u.full.register_post_accumulate_grad_hook(lambda t, u=u: self.reduce_scatter(u))
        else:                         # back from 0 bytes: refill the storage autograd's saved views point at
            u.full.data.untyped_storage().resize_(u.n * 4)
            u.full.data.copy_(flat)
        u.work = None
        self.note("all-gather 完成", u)

    def free(self, u, event):
        u.full.data.untyped_storage().resize_(0)
        self.note(event, u)

    def params_of(self, u):
        views, offset = {}, 0
        for name, shape in zip(u.names, u.shapes):
            n = math.prod(shape)
            views[name] = u.full[offset:offset + n].view(shape)
            offset += n
        return views

    # ----- forward and backward -------------------------------------------------------------
    def run_unit(self, index, fn):
        u = self.units[index]
        self.finish_gather(u)
        if self.prefetch and index + 1 < len(self.units):
            self.start_gather(self.units[index + 1])                        # prefetch the next unit
        self.note("前向", u)
        out = fn(self.params_of(u))
        self.free(u, "前向后释放")
        if out.requires_grad:
            out.register_hook(lambda grad, index=index: self.before_backward(index))
        return out

    def before_backward(self, index):
        u = self.units[index]
        self.finish_gather(u)
        if self.prefetch and index > 0:
            self.start_gather(self.units[index - 1])                        # prefetch the previous unit
        self.note("反向", u)

    def reduce_scatter(self, u):
        grad = torch.zeros(u.shard_len * self.world_size)
        grad[:u.n] = u.full.grad
        mine = torch.empty(u.shard_len)
        dist.reduce_scatter_single(mine, grad)                              # the sum of every rank's gradients
        self.scattered_bytes += (self.world_size - 1) * u.shard_len * 4
        u.grad_shard = mine / self.world_size
        u.full.grad = None
        self.free(u, "reduce-scatter 后释放")

    def loss(self, x, y):
        m = self.model
        h = self.run_unit(0, lambda p: functional_call(m.tok_emb, p, (x,)))
        for i, block in enumerate(m.blocks):
            h = self.run_unit(i + 1, lambda p, block=block, h=h: functional_call(block, p, (h,)))

        def head(p):
            z = torch.nn.functional.layer_norm(h, (h.size(-1),), p["ln_f.weight"], p["ln_f.bias"])
            logits = torch.nn.functional.linear(z, p["head.weight"], p["head.bias"])
            return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        return self.run_unit(len(self.units) - 1, head)

    # ----- the sharded optimizer ------------------------------------------------------------
    def step(self, lr, clip_norm):
        norm_sq = sum((u.grad_shard.double() ** 2).sum() for u in self.units).reshape(1)
        dist.all_reduce(norm_sq)
        coef = min(1.0, clip_norm / (math.sqrt(norm_sq.item()) + 1e-6))
        self.n_steps += 1
        b1, b2, eps = self.train.beta1, self.train.beta2, 1e-8
        for u in self.units:
            grad = u.grad_shard * coef
            u.shard.mul_(1 - lr * u.decay)
            u.exp_avg.lerp_(grad, 1 - b1)
            u.exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
            denom = (u.exp_avg_sq.sqrt() / math.sqrt(1 - b2 ** self.n_steps)).add_(eps)
            u.shard.addcdiv_(u.exp_avg, denom, value=-lr / (1 - b1 ** self.n_steps))

    def full_flat(self):
        """Every unit gathered, in the model's parameter order (zero.flat_params's)."""
        by_name = {}
        for u in self.units:
            pieces = [torch.empty(u.shard_len) for _ in range(self.world_size)]
            dist.all_gather(pieces, u.shard)
            flat, offset = torch.cat(pieces)[:u.n], 0
            prefix = "" if u.name == "head" else {"embedding": "tok_emb."}.get(u.name, f"blocks.{u.name[6:]}.")
            for name, shape in zip(u.names, u.shapes):
                n = math.prod(shape)
                by_name[prefix + name] = flat[offset:offset + n]
                offset += n
        return torch.cat([by_name[name] for name, _ in self.model.named_parameters()])


def train_own(run, xs, ys, rank, world_size, prefetch=True):
    """OwnFSDP for run.steps steps: (the instance, wall seconds per step, step 0's log and
    traffic). Each step starts at a barrier, so the ranks' clocks start together."""
    mine = zero._local_slice(run, rank, world_size)
    own = OwnFSDP(tiny_gpt.make_model(run.config, run.model_seed), rank, world_size, run.train, prefetch)
    seconds, first = [], None
    for step in range(run.steps):
        own.log.clear()
        own.gathered_bytes = own.scattered_bytes = 0
        dist.barrier()
        start = time.perf_counter()
        own.loss(xs[step][mine], ys[step][mine]).backward()
        own.step(zero._lr(step, run), run.train.clip_norm)
        seconds.append(time.perf_counter() - start)
        if step == 0:
            first = (list(own.log), (own.gathered_bytes, own.scattered_bytes))
    return own, seconds, first


def fsdp_worker(rank, world_size, run, xs, ys):
    """Rank body: our FSDP with prefetch, the same without (the control), then PyTorch's
    fully_shard, from the same start; final flat weights, step 0's log and traffic, the
    peaks, and the seconds per step of both of ours."""
    own, seconds, (log, traffic) = train_own(run, xs, ys, rank, world_size)
    control, control_seconds, (control_log, _) = train_own(run, xs, ys, rank, world_size, prefetch=False)
    out = {"log": log, "traffic": traffic, "own": own.full_flat(), "own_no_prefetch": control.full_flat(),
           "seconds": seconds, "seconds_no_prefetch": control_seconds,
           "peak_no_prefetch": max(held for *_, held in control_log),
           "shard_bytes": sum(u.shard.numel() * 4 for u in own.units),
           "unit_bytes": [(u.name, u.n * 4, u.shard_len * 4) for u in own.units]}
    out["torch"] = torch_fully_shard_run(run, xs, ys, rank, world_size)
    return out


def torch_fully_shard_run(run, xs, ys, rank, world_size):
    """PyTorch's FSDP2: fully_shard on every block and on the model, AdamW on the DTensors."""
    import warnings
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # the tiny GPT's logits are a view; nothing in lm_loss changes them in place
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")

    mine = zero._local_slice(run, rank, world_size)
    mesh = init_device_mesh("cpu", (world_size,))
    model = tiny_gpt.make_model(run.config, run.model_seed)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = tiny_gpt.make_adamw(model, run.train)
    for step in range(run.steps):
        for group in optimizer.param_groups:
            group["lr"] = zero._lr(step, run)
        optimizer.zero_grad(set_to_none=True)
        tiny_gpt.lm_loss(model, xs[step][mine], ys[step][mine]).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.train.clip_norm)
        optimizer.step()
    return torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])
