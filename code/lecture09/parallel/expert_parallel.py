"""Expert parallelism: a mixture-of-experts (MoE) feed-forward layer at the tiny GPT's width,
routed top-1 or top-2 with a capacity, and the same layer with its experts spread over gloo
ranks, tokens dispatched and combined by all-to-all (lecture 9, code 4, demo 6; notes §4.13).

Introduced in lecture 9, §4.13 (专家并行 expert parallelism); imported by
expert_parallel_report.py and tests/test_expert_parallel.py.

The layer (Shazeer et al. 2017; GShard, Lepikhin et al. 2021; Switch, Fedus et al. 2022):
- E experts, each Linear(C, r·C) → GELU → Linear(r·C, C); a router Linear(C, E) without bias.
- Each token's router probabilities are softmax(router(x)), computed in float64 so that the
  choice does not depend on a CPU's float32 rounding; it goes to its top-k experts.
  The gates are the chosen probabilities, renormalised to sum to 1 when k = 2 (GShard);
  with k = 1 the gate is the probability itself (Switch), so the router still learns.
- Capacity: an expert takes at most ceil(cf · k · n / E) tokens of a group of n tokens
  (cf = capacity factor). The slots fill in priority order: every token's first choice in
  token order, then every second choice. An assignment past the capacity is dropped: it
  adds nothing to the output (in a transformer the residual stream carries the token on).

Groups. Each rank's n tokens are one group with its own capacity, as in GShard. The
single-process reference (`reference`) routes the same groups one by one with the same
capacity, so expert parallelism must equal it up to float rounding.

Expert parallelism on p ranks (E a multiple of p; rank q holds experts q·E/p ... ): each
rank routes its tokens, packs a buffer [E, capacity, C] (empty slots zero), and one
all-to-all sends block q, the slots of rank q's experts, to rank q. Every block has the same
size, so gloo's all_to_all_single takes it. Rank q runs its experts on the p·capacity
slots it received, a second all-to-all sends the outputs back, and each rank combines them
with its gates. Backward runs the same two all-to-alls in reverse (ranks/all_to_all.py's
`AllToAll`: the gradient of an all-to-all with equal blocks is an all-to-all). The router
is replicated, so its gradient is all-reduced.
"""

import math
from dataclasses import dataclass

ALL_TO_ALLS_PER_STEP = 4              # dispatch and combine, forward and backward


@dataclass(frozen=True)
class MoEConfig:
    dim: int = 96                     # C: the tiny GPT's n_embd
    ratio: int = 2                    # r: hidden = r·C, the tiny GPT's mlp_ratio
    n_experts: int = 4                # E
    top_k: int = 2                    # k: 1 (Switch) or 2 (GShard)
    capacity_factor: float = 1.25     # cf
    tokens_per_rank: int = 64         # n: one group per rank
    seed: int = 0


def check_config(cfg, world_size=1):
    if cfg.top_k not in (1, 2):
        raise ValueError(f"top_k must be 1 or 2, got {cfg.top_k}")
    if cfg.top_k > cfg.n_experts:
        raise ValueError(f"top_k = {cfg.top_k} needs at least as many experts, got E = {cfg.n_experts}")
    if cfg.n_experts % world_size:
        raise ValueError(f"the experts E = {cfg.n_experts} must divide over the ranks p = {world_size}")
    if cfg.capacity_factor <= 0 or cfg.tokens_per_rank < 1:
        raise ValueError("capacity factor must be > 0 and tokens per rank >= 1")


def capacity(cfg):
    """Slots per expert per group: ceil(cf · k · n / E)."""
    return math.ceil(cfg.capacity_factor * cfg.top_k * cfg.tokens_per_rank / cfg.n_experts)


def make_params(cfg):
    """Every weight of the layer from cfg.seed: {"router": (E, C), "w1": (E, rC, C),
    "b1": (E, rC), "w2": (E, C, rC), "b2": (E, C)}, float32, init std 0.05 (the tiny GPT's)."""
    import torch

    g = torch.Generator().manual_seed(cfg.seed)
    e, c, h = cfg.n_experts, cfg.dim, cfg.ratio * cfg.dim

    def normal(*shape):
        return torch.randn(*shape, generator=g) * 0.05

    return {"router": normal(e, c), "w1": normal(e, h, c), "b1": normal(e, h), "w2": normal(e, c, h), "b2": normal(e, c)}


def make_inputs(cfg, world_size):
    """The p groups of tokens (p, n, C) and the fixed probe the loss projects onto."""
    import torch

    g = torch.Generator().manual_seed(cfg.seed + 1)
    x = torch.randn(world_size, cfg.tokens_per_rank, cfg.dim, generator=g)
    probe = torch.randn(world_size, cfg.tokens_per_rank, cfg.dim, generator=g)
    return x, probe


def route(x, router, cfg):
    """(expert (n, k), gate (n, k), slot (n, k): the position in the expert's buffer, -1 if dropped)."""
    import torch

    # float64 logits: which expert a token picks must not hinge on a CPU's float32 rounding
    probs = torch.softmax(x.double() @ router.double().t(), dim=-1)     # (n, E)
    top_p, expert = probs.topk(cfg.top_k, dim=-1)                     # (n, k); ties: the lower expert id
    gate = (top_p / top_p.sum(-1, keepdim=True) if cfg.top_k == 2 else top_p).to(x.dtype)
    cap = capacity(cfg)
    filled = torch.zeros(cfg.n_experts, dtype=torch.long)
    slot = torch.empty_like(expert)
    for j in range(cfg.top_k):                                         # first choices first
        onehot = torch.nn.functional.one_hot(expert[:, j], cfg.n_experts)        # (n, E)
        position = (onehot.cumsum(0) - 1 + filled) * onehot                      # each token's place in line
        slot[:, j] = position.sum(-1)
        filled += onehot.sum(0)
    slot = torch.where(slot < cap, slot, torch.full_like(slot, -1))
    return expert, gate, slot


def dispatch(x, expert, slot, cfg):
    """The buffer (E, capacity, C): token t's row in slot `slot` of its expert; empty slots 0."""
    import torch

    cap = capacity(cfg)
    kept = slot >= 0
    tokens = torch.arange(x.shape[0]).unsqueeze(1).expand_as(expert)[kept]
    flat = (expert * cap + slot)[kept]
    buf = x.new_zeros(cfg.n_experts * cap, x.shape[1]).index_add(0, flat, x[tokens])
    return buf.view(cfg.n_experts, cap, x.shape[1])


def run_experts(buf, w1, b1, w2, b2):
    """Expert e on its slots: buf (E', S, C) → (E', S, C)."""
    import torch

    hidden = torch.nn.functional.gelu(torch.bmm(buf, w1.transpose(1, 2)) + b1.unsqueeze(1))
    return torch.bmm(hidden, w2.transpose(1, 2)) + b2.unsqueeze(1)


def combine(out, expert, gate, slot, cfg):
    """y (n, C) = Σ over the kept choices of gate · the expert's output in the token's slot."""
    cap = capacity(cfg)
    kept = (slot >= 0).to(out.dtype)
    rows = out.reshape(cfg.n_experts * cap, -1)[(expert * cap + slot.clamp(min=0)).reshape(-1)]
    rows = rows.view(*expert.shape, -1)                                # (n, k, C)
    return ((gate * kept).unsqueeze(-1) * rows).sum(1)


def dropped(slot):
    """Assignments (token, choice) past their expert's capacity."""
    return int((slot < 0).sum())


def group_forward(x, params, cfg):
    expert, gate, slot = route(x, params["router"], cfg)
    out = run_experts(dispatch(x, expert, slot, cfg), params["w1"], params["b1"], params["w2"], params["b2"])
    return combine(out, expert, gate, slot, cfg), slot


def reference(cfg, world_size):
    """One process, the p groups one by one: {"y": (p, n, C), "grads": {name: grad},
    "x_grad": (p, n, C), "dropped": assignments dropped, "loss": float}. Loss Σ y · probe."""
    import torch

    x, probe = make_inputs(cfg, world_size)
    x = x.clone().requires_grad_()
    params = {k: v.clone().requires_grad_() for k, v in make_params(cfg).items()}
    ys, n_dropped = [], 0
    for q in range(world_size):
        y, slot = group_forward(x[q], params, cfg)
        ys.append(y)
        n_dropped += dropped(slot)
    y = torch.stack(ys)
    loss = (y * probe).sum()
    loss.backward()
    return {"y": y.detach(), "grads": {k: v.grad for k, v in params.items()}, "x_grad": x.grad,
            "dropped": n_dropped, "loss": loss.item()}


# ---------------------------------------------------------------------------
# On real ranks
# ---------------------------------------------------------------------------

def ep_worker(rank, world_size, cfg):
    """Rank body: its group of tokens, E/p experts, the router replicated. Returns {"y": (n, C),
    "x_grad", "grads": {"router": all-reduced, "w1".."b2": this rank's experts}, "dropped",
    "sent_bytes": bytes this rank sent in the 4 all-to-alls}."""
    import torch.distributed as dist

    from lecture09.ranks.all_to_all import AllToAll

    check_config(cfg, world_size)
    all_to_all = AllToAll.apply
    e_local, cap, c = cfg.n_experts // world_size, capacity(cfg), cfg.dim
    full = make_params(cfg)
    mine = slice(rank * e_local, (rank + 1) * e_local)
    params = {"router": full["router"].clone().requires_grad_()}
    params.update({k: full[k][mine].clone().requires_grad_() for k in ("w1", "b1", "w2", "b2")})
    x_all, probe = make_inputs(cfg, world_size)
    x = x_all[rank].clone().requires_grad_()

    expert, gate, slot = route(x, params["router"], cfg)
    buf = dispatch(x, expert, slot, cfg)                               # (E, cap, C): block q = rank q's experts
    received = all_to_all(buf.reshape(world_size, e_local * cap * c))   # block q = rank q's tokens for my experts
    slots = received.view(world_size, e_local, cap, c).transpose(0, 1).reshape(e_local, world_size * cap, c)
    out = run_experts(slots, params["w1"], params["b1"], params["w2"], params["b2"])
    back = out.view(e_local, world_size, cap, c).transpose(0, 1).reshape(world_size, e_local * cap * c)
    mine_out = all_to_all(back).view(cfg.n_experts, cap, c)
    y = combine(mine_out, expert, gate, slot, cfg)
    (y * probe[rank]).sum().backward()
    dist.all_reduce(params["router"].grad)
    block_bytes = e_local * cap * c * 4
    return {"y": y.detach(), "x_grad": x.grad, "grads": {k: v.grad for k, v in params.items()},
            "dropped": dropped(slot), "sent_bytes": ALL_TO_ALLS_PER_STEP * (world_size - 1) * block_bytes}


def assemble(ranks, cfg):
    """The ranks' results in the reference's layout."""
    import torch

    grads = {"router": ranks[0]["grads"]["router"]}
    for k in ("w1", "b1", "w2", "b2"):
        grads[k] = torch.cat([r["grads"][k] for r in ranks])
    routers_agree = all(torch.equal(r["grads"]["router"], grads["router"]) for r in ranks)
    return {"y": torch.stack([r["y"] for r in ranks]), "x_grad": torch.stack([r["x_grad"] for r in ranks]),
            "grads": grads, "dropped": sum(r["dropped"] for r in ranks), "routers_agree": routers_agree,
            "sent_bytes": [r["sent_bytes"] for r in ranks]}


# ---------------------------------------------------------------------------
# Traffic per layer: expert against tensor parallelism
# ---------------------------------------------------------------------------

def ep_bytes_per_rank(tokens_per_rank, dim, n_experts, top_k, capacity_factor, world_size, element_bytes=2):
    """Bytes one rank sends per layer and step: 4 all-to-alls, each sending the (p − 1)/p of its
    (E, capacity, C) buffer that belongs to other ranks' experts."""
    cap = math.ceil(capacity_factor * top_k * tokens_per_rank / n_experts)
    return ALL_TO_ALLS_PER_STEP * (world_size - 1) * (n_experts // world_size) * cap * dim * element_bytes


def tp_bytes_per_rank(tokens, dim, world_size, element_bytes=2):
    """Bytes one rank sends per feed-forward layer and step under Megatron's tensor parallelism:
    one all-reduce of (tokens, C) forward and one backward, a ring sending 2(p − 1)/p of it."""
    n = tokens * dim * element_bytes
    return 2 * 2 * (world_size - 1) * n // world_size
