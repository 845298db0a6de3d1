"""A small 3D-parallelism planner: data × pipeline × tensor parallel (lecture 9, code 4).

Introduced in lecture 9, section 4.15 (混合并行 hybrid parallelism); imported by
04_pipeline.py and tests/test_pipeline.py. For a model (memory_model.MODELS) and a
cluster of N = DP × PP × TP GPUs it estimates, per GPU and per iteration:

- memory: model states (memory_model.zero_bytes_per_gpu with Ψ/(PP·TP) parameters per
  GPU, ZeRO stage 1 across the DP group by default) plus the activations stage 0 holds
  under 1F1B: min(PP, m) micro-batches of L/PP layers (Korthikanti et al. 2022);
- bubble: (PP − 1)/(m + PP − 1), m = global batch / (DP × micro-batch) (pipeline.py);
- communication, priced with the α–β model (alpha_beta.py, §1):
  TP  4 ring all-reduces of b·s·h fp16 values per layer per micro-batch (2 forward,
      2 backward; 6 with full recomputation, which redoes the forward), over NVLink when
      the TP group fits in one machine, else over InfiniBand;
  PP  2 point-to-point messages of b·s·h fp16 values per micro-batch (activation up,
      gradient down), over NVLink if TP × PP fits in one machine, else InfiniBand;
  DP  one ring all-reduce of the stage's fp16 gradients, 2Ψ/(PP·TP) bytes (ZeRO-1's
      reduce-scatter + all-gather moves the same bytes), over InfiniBand.
- time = compute / (1 − bubble) + TP + PP + DP: compute 6·N·D FLOPs (8·N·D with full
  recomputation) spread over N GPUs at a fixed utilisation, and no overlap of
  communication with compute, so the estimate is pessimistic where real systems overlap
  (DP's all-reduce hides behind the backward; TP's mostly cannot).
"""

import math
from dataclasses import dataclass

from lecture09.ranks import alpha_beta
from lecture09.parallel import memory_model as mm
from lecture09.parallel.pipeline import bubble_fraction


@dataclass(frozen=True)
class Cluster:
    n_gpus: int = 1024
    gpus_per_node: int = 8                      # a DGX A100: 8 GPUs joined by NVLink
    gpu_memory_bytes: float = mm.A100_MEMORY_BYTES
    peak_flops: float = mm.A100_PEAK_FLOPS
    utilisation: float = mm.UTILISATION
    nvlink_bytes_per_s: float = mm.NVLINK_BYTES_PER_S
    infiniband_bytes_per_s: float = mm.INFINIBAND_BYTES_PER_S
    latency_s: float = mm.LINK_LATENCY_S


@dataclass(frozen=True)
class Plan:
    dp: int
    pp: int
    tp: int

    def __str__(self):
        return f"({self.dp}, {self.pp}, {self.tp})"


@dataclass(frozen=True)
class PlanCost:
    plan: Plan
    n_micro: int
    state_bytes: float
    activation_bytes: float
    bubble: float
    compute_s: float
    tp_s: float
    pp_s: float
    dp_s: float
    fits: bool

    @property
    def memory_bytes(self):
        return self.state_bytes + self.activation_bytes

    @property
    def pipeline_s(self):
        return self.compute_s / (1 - self.bubble)

    @property
    def iteration_s(self):
        return self.pipeline_s + self.tp_s + self.pp_s + self.dp_s

    @property
    def iteration_hidden_dp_s(self):
        """The other bound: DP's all-reduce wholly hidden behind the backward (as DDP's
        bucketed all-reduce aims at), TP and PP still not overlapped."""
        return self.pipeline_s + self.tp_s + self.pp_s

    def time_s(self, hide_dp=False):
        return self.iteration_hidden_dp_s if hide_dp else self.iteration_s


def _ring_all_reduce_s(n_bytes, p, latency_s, bandwidth):
    """alpha_beta's ring all-reduce, the vector padded to a multiple of p (as real
    implementations pad to equal chunks)."""
    padded = math.ceil(n_bytes / p) * p
    return alpha_beta.ring_all_reduce_time_s(padded, p, latency_s, bandwidth)


def why_invalid(model, cluster, plan, global_batch, micro_batch=1):
    """None if the plan can run, else the reason in words."""
    if plan.dp * plan.pp * plan.tp != cluster.n_gpus:
        return f"DP × PP × TP = {plan.dp * plan.pp * plan.tp} ≠ {cluster.n_gpus} GPUs"
    if model.n_layers % plan.pp:
        return f"{model.n_layers} 层分不成 {plan.pp} 个阶段"
    if model.n_heads % plan.tp or model.hidden % plan.tp:
        return f"{model.n_heads} 个注意力头分不到 {plan.tp} 张卡上"
    if global_batch % (plan.dp * micro_batch):
        return f"batch {global_batch} 分不成 {plan.dp} 份 × micro-batch {micro_batch}"
    return None


def plan_cost(model, cluster, plan, global_batch, micro_batch=1, zero_stage=1, recompute="selective"):
    """PlanCost of one (DP, PP, TP) choice; raises ValueError if why_invalid says so."""
    reason = why_invalid(model, cluster, plan, global_batch, micro_batch)
    if reason:
        raise ValueError(reason)
    dp, pp, tp = plan.dp, plan.pp, plan.tp
    n_micro = global_batch // (dp * micro_batch)
    layers_per_stage = model.n_layers // pp
    params_per_gpu = model.n_params / (pp * tp)
    state = mm.zero_bytes_per_gpu(params_per_gpu, dp, zero_stage)
    per_layer = mm.activation_bytes_per_layer(model.seq_len, micro_batch, model.hidden, model.n_heads, tp, recompute)
    activations = per_layer * layers_per_stage * min(pp, n_micro)       # stage 0 under 1F1B
    bubble = bubble_fraction(pp, n_micro)
    flops_per_token_param = 8 if recompute == "full" else 6
    tokens = global_batch * model.seq_len
    compute_s = mm.compute_seconds(flops_per_token_param * model.n_params * tokens, cluster.n_gpus,
                                   cluster.peak_flops, cluster.utilisation)
    boundary_bytes = micro_batch * model.seq_len * model.hidden * mm.FP16_BYTES     # one (b, s, h) fp16 tensor
    in_node = cluster.nvlink_bytes_per_s
    across = cluster.infiniband_bytes_per_s
    tp_s = pp_s = dp_s = 0.0
    if tp > 1:
        per_layer_calls = 6 if recompute == "full" else 4
        one = _ring_all_reduce_s(boundary_bytes, tp, cluster.latency_s, in_node if tp <= cluster.gpus_per_node else across)
        tp_s = per_layer_calls * layers_per_stage * n_micro * one
    if pp > 1:
        link = in_node if tp * pp <= cluster.gpus_per_node else across
        pp_s = 2 * n_micro * alpha_beta.alpha_beta_time_s(boundary_bytes, cluster.latency_s, link)
    if dp > 1:
        link = in_node if cluster.n_gpus <= cluster.gpus_per_node else across
        dp_s = _ring_all_reduce_s(mm.FP16_BYTES * params_per_gpu, dp, cluster.latency_s, link)
    memory = state + activations
    return PlanCost(plan, n_micro, state, activations, bubble, compute_s, tp_s, pp_s, dp_s,
                    memory <= cluster.gpu_memory_bytes)


def all_plans(cluster):
    """Every (DP, PP, TP) with DP × PP × TP = N, in a fixed order."""
    n = cluster.n_gpus
    return [Plan(n // (pp * tp), pp, tp) for tp in _divisors(n) for pp in _divisors(n // tp)]


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def best_plan(model, cluster, global_batch, micro_batch=1, zero_stage=1, recompute="selective", max_tp=None,
              hide_dp=False):
    """The valid plan that fits in memory with the smallest estimated iteration time
    (None if nothing fits); max_tp limits the TP size (e.g. to one machine); hide_dp:
    rank by iteration_hidden_dp_s (DP's all-reduce hidden) instead of iteration_s."""
    best = None
    for plan in all_plans(cluster):
        if max_tp is not None and plan.tp > max_tp:
            continue
        if why_invalid(model, cluster, plan, global_batch, micro_batch):
            continue
        cost = plan_cost(model, cluster, plan, global_batch, micro_batch, zero_stage, recompute)
        if cost.fits and (best is None or cost.time_s(hide_dp) < best.time_s(hide_dp)):
            best = cost
    return best


# ---------------------------------------------------------------------------
# A published run to hold the planner against
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PublishedRun:
    """A run someone measured: its layout, batch, recomputation and throughput per GPU."""
    model: str
    plan: Plan
    micro_batch: int
    global_batch: int
    recompute: str
    tflops_per_gpu: float        # achieved, by the paper's own FLOP count (recomputation included)
    vocab: int
    source: str


MEGATRON_175B = PublishedRun(
    "175B", Plan(8, 16, 8), 1, 1536, "full", 140.0, 51200,
    "Narayanan et al. 2021 (SC21), Table 1: GPT-3 175B on 1024 A100s, TP 8, PP 16, batch 1536, "
    "140 TFLOP/s per GPU; full activation recomputation (their Section 5.1 FLOP count)")


def megatron_flops_per_iteration(model, global_batch, vocab):
    """Narayanan et al. 2021's count for one iteration with full recomputation:
    96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (forward, backward, and the forward again)."""
    b, s, l, h = global_batch, model.seq_len, model.n_layers, model.hidden
    return 96 * b * s * l * h * h * (1 + s / (6 * h) + vocab / (16 * l * h))


def published_figures(run, model, n_gpus, peak_flops=mm.A100_PEAK_FLOPS):
    """(seconds per iteration, days for the model's training tokens, model FLOPs utilisation
    6·N·tokens / (n · peak · t)) implied by a published throughput."""
    flops = megatron_flops_per_iteration(model, run.global_batch, run.vocab)
    seconds = flops / (n_gpus * run.tflops_per_gpu * 1e12)
    tokens = run.global_batch * model.seq_len
    days = model.train_tokens / tokens * seconds / mm.SECONDS_PER_DAY
    mfu = 6 * model.n_params * tokens / (n_gpus * peak_flops * seconds)
    return seconds, days, mfu
