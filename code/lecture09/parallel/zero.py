"""ZeRO-1 for real: AdamW whose optimizer states are split across gloo ranks (lecture 9, code 3).

Introduced in lecture 9, section 3 (notes §3, ZeRO); imported by 03_memory_zero.py and
tests/test_memory_zero.py. The rank workers live here, not in the script, because the
"spawn" start method pickles a worker by its module name (gloo_ranks.run_ranks).

ZeRO stage 1 (Rajbhandari et al. 2020, "P_os"): every rank keeps the whole model and
computes a gradient on its own slice of the batch, but the Adam moments of each
parameter live on one rank only. One step:

    1. reduce-scatter the gradients: rank r receives the batch-mean gradient of its shard;
    2. rank r runs AdamW on its shard (its m and v are shard-sized: 1/N_d of the states);
    3. all-gather the updated shards, so every rank has the whole new model again.

`ShardedAdamW` builds this from scratch on one flat vector of all parameters, padded to a
multiple of the world size so that every shard has the same length (all_gather needs
equal pieces). Step 1 is an all-reduce followed by "keep my slice": torch 2.13's gloo
does offer reduce_scatter_tensor, but the all-reduce makes the mechanism one line and
gives the same numbers (it moves twice the bytes a real reduce-scatter would).
`torch_zero_step` does the same with PyTorch's own ZeroRedundancyOptimizer, which
splits whole tensors between ranks rather than one flat vector.

Both are checked against plain AdamW on the whole batch in one process (`reference_run`):
the weights after N steps agree to within rounding (see ATOL, and the key bias below it).
"""

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from lecture09.lecture_model import MODEL_CONFIG
from lecture01 import tiny_gpt

# The parallel runs sum the same per-sequence gradients in another order (each rank
# averages its slice, then the ranks add up; the clipping norm is summed shard by shard),
# so their gradients agree with the reference only to float32 rounding, ~1e-10 absolute
# here. Adam's update m/(sqrt(v) + eps) is insensitive to that for most components, but
# not where |g| is near eps = 1e-8: there g/(|g| + eps) moves at first order with g's
# rounding (one component with g = 9.7e-8 in one summation order and 9.8e-8 in the other
# gets steps that differ by 4e-6 after a single step, measured at batch 4). Worst case
# measured: 4.3e-6 (batch 4, 3 steps), 1.4e-7 (batch 16, 20-50 steps), one process
# summing two halves of the batch differs from the whole batch just as much. ATOL leaves
# a margin of 4; the mistakes ZeRO-1 code can make move weights much further within 3
# steps: a lost update or a shard updated twice by ~lr = 3e-3, a missing weight decay by
# ~lr·0.1·|w| ≈ 1e-4 on the largest weights.
ATOL = 2e-5
# The key bias (the middle third of attn.qkv.bias) is the exception. Adding the same
# number to all of a query's attention scores does not change the softmax, so its exact
# gradient is 0 and what it receives is rounding noise (~1e-9): always in Adam's
# sensitive range, it wanders by ~1e-4 in 20 steps, differently for every summation
# order. It cannot change the output, so it is checked through the logits instead:
# logits of size ~1-10 computed from weights within ATOL of each other (measured 2e-6).
LOGITS_ATOL = 1e-4


@dataclass(frozen=True)
class ZeroRun:
    """One comparison: the tiny GPT trained the same way three times."""
    steps: int = 20
    batch_size: int = 16          # sequences per step, split evenly over the ranks
    model_seed: int = 0
    data_seed: int = 1
    config: tiny_gpt.GPTConfig = MODEL_CONFIG
    train: tiny_gpt.TrainConfig = tiny_gpt.TrainConfig()


def make_batches(run, tokens):
    """(xs, ys), each (steps, B, T): the same batches for every rank and the reference."""
    gen = torch.Generator().manual_seed(run.data_seed)
    pairs = [tiny_gpt.get_batch(tokens, run.batch_size, run.config.block_size, gen) for _ in range(run.steps)]
    return torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def optimizer_state_bytes(optimizer):
    """(moment bytes, step-counter bytes) of a torch optimizer's state after a step.

    torch's AdamW keeps exp_avg and exp_avg_sq per parameter tensor (the formula's 8Ψ
    in fp32) and also a scalar float32 `step` tensor per parameter tensor (4 bytes each,
    which no per-parameter formula counts)."""
    moments = steps = 0
    for state in optimizer.state.values():
        for key, value in state.items():
            if torch.is_tensor(value):
                if key == "step":
                    steps += value.numel() * value.element_size()
                else:
                    moments += value.numel() * value.element_size()
    return moments, steps


def key_bias_mask(model):
    """A bool vector over flat_params(model): True on the key bias of every block."""
    masks = []
    for name, p in model.named_parameters():
        mask = torch.zeros(p.numel(), dtype=torch.bool)
        if name.endswith("attn.qkv.bias"):
            n_embd = p.numel() // 3                  # qkv.bias is (3C,): query, key, value biases
            mask[n_embd:2 * n_embd] = True
        masks.append(mask)
    return torch.cat(masks)


def load_flat(model, flat):
    """Copy a flat weight vector (flat_params order) into model; returns model."""
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(flat[offset:offset + p.numel()].view_as(p))     # (numel,) -> p's shape
            offset += p.numel()
    return model


@dataclass(frozen=True)
class Agreement:
    """How far one parallel run's weights are from the reference's."""
    max_abs_diff: float            # outside the key bias
    key_bias_max_abs_diff: float
    logits_max_abs_diff: float     # on one batch: what the key bias could change, and cannot

    @property
    def ok(self):
        return self.max_abs_diff <= ATOL and self.logits_max_abs_diff <= LOGITS_ATOL


def agreement(run, reference_flat, other_flat, x):
    """Compare two flat weight vectors of run's model; x (B, T) for the logits."""
    model = tiny_gpt.make_model(run.config, run.model_seed)
    keys = key_bias_mask(model)
    diff = (other_flat - reference_flat).abs()
    with torch.no_grad():
        ref_logits = load_flat(model, reference_flat)(x)           # (B, T, vocab)
        other_logits = load_flat(model, other_flat)(x)
    return Agreement(diff[~keys].max().item(), diff[keys].max().item(),
                     (other_logits - ref_logits).abs().max().item())


def _lr(step, run):
    return tiny_gpt.lr_at(step, run.steps, run.train.peak_lr)


def reference_run(run, xs, ys):
    """Plain AdamW in one process on the whole batch: the flat weights after run.steps."""
    model = tiny_gpt.make_model(run.config, run.model_seed)
    optimizer = tiny_gpt.make_adamw(model, run.train)
    for step in range(run.steps):
        for group in optimizer.param_groups:
            group["lr"] = _lr(step, run)
        optimizer.zero_grad(set_to_none=True)
        tiny_gpt.lm_loss(model, xs[step], ys[step]).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.train.clip_norm)
        optimizer.step()
    return flat_params(model), optimizer_state_bytes(optimizer)


def shard_bounds(n_elements, world_size, rank):
    """(start, stop, shard length) of rank's shard of a flat vector padded to world_size equal shards."""
    shard = math.ceil(n_elements / world_size)
    start = min(rank * shard, n_elements)
    return start, min(start + shard, n_elements), shard


class ShardedAdamW:
    """ZeRO-1 from scratch: AdamW (torch's update rule) on this rank's shard of the flat
    parameter vector; the moments exist only for that shard."""

    def __init__(self, model, train, rank, world_size):
        self.params = list(model.parameters())
        self.rank, self.world_size = rank, world_size
        self.n = sum(p.numel() for p in self.params)
        self.start, self.stop, self.shard = shard_bounds(self.n, world_size, rank)
        local = self.stop - self.start
        # make_adamw decays 2-D weights only; here that becomes a per-element rate.
        decay = torch.cat([torch.full((p.numel(),), train.weight_decay if p.dim() >= 2 else 0.0)
                           for p in self.params])
        self.weight_decay = decay[self.start:self.stop]
        self.exp_avg = torch.zeros(local)
        self.exp_avg_sq = torch.zeros(local)
        self.beta1, self.beta2, self.eps = train.beta1, train.beta2, 1e-8     # torch's default eps
        self.n_steps = 0

    def state_bytes(self):
        return tensor_bytes([self.exp_avg, self.exp_avg_sq])

    def _padded(self, flat):
        out = torch.zeros(self.shard * self.world_size)
        out[:self.n] = flat
        return out

    def step(self, lr, clip_norm):
        grads = self._padded(torch.cat([p.grad.reshape(-1) for p in self.params]))   # (shard · world,)
        # 1. reduce-scatter, written as all-reduce + keep my slice (gloo: sum, then divide)
        dist.all_reduce(grads)
        grad = grads[self.start:self.stop] / self.world_size
        # Global-norm clipping needs the norm of the whole gradient; each rank holds one
        # shard, so the squared norms are summed across ranks (one float on the wire).
        norm_sq = (grad.double() ** 2).sum().reshape(1)
        dist.all_reduce(norm_sq)
        coef = min(1.0, clip_norm / (math.sqrt(norm_sq.item()) + 1e-6))     # as clip_grad_norm_
        grad = grad * coef
        # 2. AdamW on my shard, in the order torch.optim.AdamW applies it
        weights = torch.cat([p.detach().reshape(-1) for p in self.params])[self.start:self.stop]
        self.n_steps += 1
        weights.mul_(1 - lr * self.weight_decay)
        self.exp_avg.lerp_(grad, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        step_size = lr / (1 - self.beta1 ** self.n_steps)
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - self.beta2 ** self.n_steps)).add_(self.eps)
        weights.addcdiv_(self.exp_avg, denom, value=-step_size)
        # 3. all-gather the shards (equal lengths: the last one is padded) into the model
        mine = torch.zeros(self.shard)
        mine[:self.stop - self.start] = weights
        pieces = [torch.zeros(self.shard) for _ in range(self.world_size)]
        dist.all_gather(pieces, mine)
        flat = torch.cat(pieces)[:self.n]
        with torch.no_grad():
            offset = 0
            for p in self.params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))  # (numel,) -> p's shape
                offset += p.numel()


def _local_slice(run, rank, world_size):
    per_rank = run.batch_size // world_size
    return slice(rank * per_rank, (rank + 1) * per_rank)


def _average_gradients(model, world_size):
    for p in model.parameters():
        dist.all_reduce(p.grad)          # sum, then divide: as every variant of code 2 does
        p.grad.div_(world_size)


def zero1_worker(rank, world_size, run, xs, ys):
    """Rank body: train with ShardedAdamW, then with ZeroRedundancyOptimizer, from the same
    start; returns both final flat weights and the optimizer bytes this rank held."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    mine = _local_slice(run, rank, world_size)
    out = {}

    model = tiny_gpt.make_model(run.config, run.model_seed)
    sharded = ShardedAdamW(model, run.train, rank, world_size)
    for step in range(run.steps):
        model.zero_grad(set_to_none=True)
        tiny_gpt.lm_loss(model, xs[step][mine], ys[step][mine]).backward()
        sharded.step(_lr(step, run), run.train.clip_norm)
    out["own"] = flat_params(model)
    out["own_state_bytes"] = sharded.state_bytes()
    out["own_shard"] = (sharded.start, sharded.stop)

    model = tiny_gpt.make_model(run.config, run.model_seed)
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": run.train.weight_decay},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    zero = ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, lr=run.train.peak_lr,
                                   betas=(run.train.beta1, run.train.beta2))
    for step in range(run.steps):
        model.zero_grad(set_to_none=True)
        tiny_gpt.lm_loss(model, xs[step][mine], ys[step][mine]).backward()
        _average_gradients(model, world_size)       # ZeroRedundancyOptimizer expects averaged grads (DDP's job)
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.train.clip_norm)
        for group in zero.param_groups:
            group["lr"] = _lr(step, run)
        zero.step()                                  # updates my tensors, then broadcasts them to the others
    out["torch"] = flat_params(model)
    moments, steps = optimizer_state_bytes(zero.optim)
    out["torch_state_bytes"] = moments
    out["torch_step_bytes"] = steps
    out["torch_params_owned"] = sum(p.numel() for group in zero.optim.param_groups for p in group["params"])
    out["torch_tensors_owned"] = sum(len(group["params"]) for group in zero.optim.param_groups)
    names = {id(p): name for name, p in model.named_parameters()}
    out["torch_tensor_names"] = [names[id(p)] for group in zero.optim.param_groups for p in group["params"]]
    return out
