"""A small parallelism planner: data × pipeline × tensor parallel, and context and expert
parallelism where they fit (lecture 9, code 4).

Introduced in lecture 9, sections 4.15-4.18 (混合并行 hybrid parallelism); imported by
04_pipeline.py and tests/test_pipeline.py. For a model (memory_model.MODELS, or an MoE of
MOE_MODELS) and a cluster of N = DP × PP × TP × CP GPUs (EP carved out of DP) it
estimates, per GPU and per iteration:

- memory: model states (memory_model.zero_bytes_per_gpu with Ψ/(PP·TP) parameters per
  GPU, ZeRO stage 1 by default across the DP·CP ranks that hold the same weights; an MoE's
  expert weights Ψ_e/(PP·TP·EP), sharded across DP·CP/EP) plus the activations stage 0
  holds under 1F1B: min(PP, m) micro-batches of L/PP layers of s/CP positions
  (Korthikanti et al. 2022; an MoE's MLP share scaled to k experts of width f);
- bubble: (PP − 1)/(m + PP − 1), m = global batch / (DP × micro-batch) (pipeline.py);
- communication, priced with the α–β model (alpha_beta.py, §1):
  TP  4 ring all-reduces of b·(s/CP)·h fp16 values per layer per micro-batch (2 forward,
      2 backward; 6 with full recomputation, which redoes the forward), over NVLink when
      the TP group fits in one machine, else over InfiniBand;
  CP  ring attention without keeping the passed blocks: CP − 1 shifts of (K, V) of s/CP
      positions forward, and in backward K, V again and their gradients: 3 ring passes
      per layer per micro-batch (4 with full recomputation); NVLink if TP·CP fits in one
      machine;
  EP  4 pairwise all-to-alls per MoE layer per micro-batch (dispatch and combine, forward
      and backward; 6 with full recomputation) of k·cf·b·(s/CP)·h fp16 values; NVLink if
      TP·CP·EP fits in one machine;
  PP  2 point-to-point messages of b·(s/CP)·h fp16 values per micro-batch (activation
      up, gradient down), over NVLink if TP × PP fits in one machine, else InfiniBand;
  DP  one ring all-reduce of the stage's fp16 gradients over the DP·CP ranks, 2Ψ/(PP·TP)
      bytes (an MoE's expert gradients over DP·CP/EP ranks; ZeRO-1's reduce-scatter +
      all-gather moves the same bytes), over InfiniBand.
- time = compute / (1 − bubble) + TP + CP + EP + PP + DP: compute 6·N·D·(1 + s/(6h))
  FLOPs (8 with full recomputation; N the parameters a token uses; s/(6h) the attention's
  QKᵀ and AV, memory_model.layer_flops) spread over N GPUs at a fixed utilisation, causal
  attention balanced across CP ranks (the zig-zag split of §4.14), and no overlap of
  communication with compute, so the estimate is pessimistic where real systems overlap
  (DP's all-reduce hides behind the backward, ring attention's shifts behind the block's
  attention; TP's mostly cannot).
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
class MoEShape:
    """A mixture-of-experts transformer as the planner sees it: every layer's MLP is
    n_experts SwiGLU experts of width ffn (three h × ffn matrices), top_k of them per token;
    attention with grouped-query K and V (n_kv_heads). Parameter counts follow from the shape."""
    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    ffn: int
    n_experts: int
    top_k: int
    vocab: int
    seq_len: int
    batch_sequences: int      # ours: the paper gives none
    capacity_factor: float    # ours (as demo 6): slots per expert = cf · k · tokens / E
    source: str

    @property
    def kv_dim(self):
        return self.n_kv_heads * (self.hidden // self.n_heads)

    @property
    def attention_params_per_layer(self):
        return 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_dim

    @property
    def expert_params_per_layer(self):
        return 3 * self.hidden * self.ffn

    @property
    def n_expert_params(self):
        return self.n_layers * self.n_experts * self.expert_params_per_layer

    @property
    def n_params(self):
        """Attention, experts, router and two RMSNorms per layer; embedding, output layer and
        the last norm."""
        per_layer = (self.attention_params_per_layer + self.n_experts * self.expert_params_per_layer
                     + self.hidden * self.n_experts + 2 * self.hidden)
        return self.n_layers * per_layer + 2 * self.vocab * self.hidden + self.hidden

    @property
    def n_active_params(self):
        """The parameters one token uses: all but the n_experts − top_k experts it skips."""
        return self.n_params - self.n_layers * (self.n_experts - self.top_k) * self.expert_params_per_layer


MOE_MODELS = {
    "8x7B": MoEShape("8x7B", 32, 4096, 32, 8, 14336, 8, 2, 32000, 4096, 1024, 1.25,
                     "Mixtral 8x7B (Jiang et al. 2024, Table 1): 32 layers, h 4096, 32 heads (8 K/V), "
                     "experts of width 14336, 8 experts, top-2; 47B parameters, 13B active. The batch "
                     "(1024 x 4096 tokens) and the capacity factor are ours: the paper gives neither"),
}
PLAN_MODELS = {**mm.MODELS, **MOE_MODELS}


def expert_params(model):
    return getattr(model, "n_expert_params", 0)


def active_params(model):
    return getattr(model, "n_active_params", model.n_params)


def is_moe(model):
    return hasattr(model, "n_experts")


@dataclass(frozen=True)
class Plan:
    dp: int
    pp: int
    tp: int
    cp: int = 1               # context parallel: the sequence split across cp ranks
    ep: int = 1               # expert parallel: carved out of the dp ranks (ep divides dp)

    def __str__(self):
        extra = (f" CP {self.cp}" if self.cp > 1 else "") + (f" EP {self.ep}" if self.ep > 1 else "")
        return f"({self.dp}, {self.pp}, {self.tp})" + extra


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
    cp_s: float = 0.0
    ep_s: float = 0.0

    @property
    def memory_bytes(self):
        return self.state_bytes + self.activation_bytes

    @property
    def pipeline_s(self):
        return self.compute_s / (1 - self.bubble)

    @property
    def iteration_s(self):
        return self.pipeline_s + self.tp_s + self.cp_s + self.ep_s + self.pp_s + self.dp_s

    @property
    def iteration_hidden_dp_s(self):
        """The other bound: DP's all-reduce wholly hidden behind the backward (as DDP's
        bucketed all-reduce aims at), TP, CP, EP and PP still not overlapped."""
        return self.pipeline_s + self.tp_s + self.cp_s + self.ep_s + self.pp_s

    def time_s(self, hide_dp=False):
        return self.iteration_hidden_dp_s if hide_dp else self.iteration_s


def _ring_all_reduce_s(n_bytes, p, latency_s, bandwidth):
    """alpha_beta's ring all-reduce, the vector padded to a multiple of p (as real
    implementations pad to equal chunks)."""
    padded = math.ceil(n_bytes / p) * p
    return alpha_beta.ring_all_reduce_time_s(padded, p, latency_s, bandwidth)


def why_invalid(model, cluster, plan, global_batch, micro_batch=1):
    """None if the plan can run, else the reason in words."""
    dp, pp, tp, cp, ep = plan.dp, plan.pp, plan.tp, plan.cp, plan.ep
    if dp * pp * tp * cp != cluster.n_gpus:
        if cp == 1:
            return f"DP × PP × TP = {dp * pp * tp} ≠ {cluster.n_gpus} GPUs"
        return f"DP × PP × TP × CP = {dp * pp * tp * cp} ≠ {cluster.n_gpus} GPUs"
    if model.n_layers % pp:
        return f"{model.n_layers} 层分不成 {pp} 个阶段"
    if model.n_heads % tp or model.hidden % tp or getattr(model, "n_kv_heads", tp) % tp:
        return f"{model.n_heads} 个注意力头分不到 {tp} 张卡上"
    if cp > 1 and model.seq_len % (2 * cp):
        return f"序列 {model.seq_len} 切不成 2 × CP = {2 * cp} 块（之字形）"
    if ep > 1 and not is_moe(model):
        return "稠密模型没有专家，EP 无从分"
    if ep > 1 and (dp % ep or model.n_experts % ep):
        return f"EP {ep} 要整除 DP {dp} 和专家数 {model.n_experts}"
    if global_batch % (dp * micro_batch):
        return f"batch {global_batch} 分不成 {dp} 份 × micro-batch {micro_batch}"
    return None


def _pairwise_all_to_all_s(n_bytes, p, latency_s, bandwidth):
    """ranks/all_to_all.time_s("pairwise", ...) without importing torch: p − 1 rounds, each
    sending one n/p block, (p − 1)·α + (p − 1)/p · n/β."""
    return (p - 1) * latency_s + (p - 1) * (n_bytes / p) / bandwidth


def _padded(n_bytes, p):
    return math.ceil(n_bytes / p) * p


def plan_cost(model, cluster, plan, global_batch, micro_batch=1, zero_stage=1, recompute="selective"):
    """PlanCost of one (DP, PP, TP, CP, EP) choice; raises ValueError if why_invalid says so."""
    reason = why_invalid(model, cluster, plan, global_batch, micro_batch)
    if reason:
        raise ValueError(reason)
    dp, pp, tp, cp, ep = plan.dp, plan.pp, plan.tp, plan.cp, plan.ep
    n_micro = global_batch // (dp * micro_batch)
    layers_per_stage = model.n_layers // pp
    experts = expert_params(model)
    dense_per_gpu, expert_per_gpu = (model.n_params - experts) / (pp * tp), experts / (pp * tp * ep)
    state = mm.zero_bytes_per_gpu(dense_per_gpu, dp * cp, zero_stage)
    if experts:
        state += mm.zero_bytes_per_gpu(expert_per_gpu, dp * cp // ep, zero_stage)
    per_layer = mm.activation_bytes_per_layer(model.seq_len, micro_batch, model.hidden, model.n_heads, tp, recompute,
                                              cp)
    local_sbh = micro_batch * (model.seq_len // cp) * model.hidden
    if is_moe(model) and recompute != "full":    # the 16·sbh/t of a 4h-wide MLP → k experts of width f
        per_layer += (model.top_k * model.ffn / (4 * model.hidden) - 1) * 16 * local_sbh / tp
    activations = per_layer * layers_per_stage * min(pp, n_micro)       # stage 0 under 1F1B
    bubble = bubble_fraction(pp, n_micro)
    flops_per_token_param = 8 if recompute == "full" else 6
    tokens = global_batch * model.seq_len
    attention = 1 + model.seq_len / (6 * model.hidden)
    compute_s = mm.compute_seconds(flops_per_token_param * active_params(model) * tokens * attention,
                                   cluster.n_gpus, cluster.peak_flops, cluster.utilisation)
    boundary_bytes = local_sbh * mm.FP16_BYTES     # one (b, s/CP, h) fp16 tensor

    def link(group):
        return cluster.nvlink_bytes_per_s if group <= cluster.gpus_per_node else cluster.infiniband_bytes_per_s

    tp_s = cp_s = ep_s = pp_s = dp_s = 0.0
    if tp > 1:
        per_layer_calls = 6 if recompute == "full" else 4
        one = _ring_all_reduce_s(boundary_bytes, tp, cluster.latency_s, link(tp))
        tp_s = per_layer_calls * layers_per_stage * n_micro * one
    if cp > 1:
        kv_width = getattr(model, "kv_dim", model.hidden) // tp
        kv_bytes = 2 * micro_batch * (model.seq_len // cp) * kv_width * mm.FP16_BYTES
        passes = 4 if recompute == "full" else 3
        shift = alpha_beta.alpha_beta_time_s(kv_bytes, cluster.latency_s, link(tp * cp))
        cp_s = passes * (cp - 1) * layers_per_stage * n_micro * shift
    if ep > 1:
        buffer = _padded(model.capacity_factor * model.top_k * boundary_bytes, ep)
        calls = 6 if recompute == "full" else 4
        one = _pairwise_all_to_all_s(buffer, ep, cluster.latency_s, link(tp * cp * ep))
        ep_s = calls * layers_per_stage * n_micro * one
    if pp > 1:
        pp_s = 2 * n_micro * alpha_beta.alpha_beta_time_s(boundary_bytes, cluster.latency_s, link(tp * pp))
    if dp * cp > 1:
        dp_s = _ring_all_reduce_s(mm.FP16_BYTES * dense_per_gpu, dp * cp, cluster.latency_s, link(cluster.n_gpus))
    if experts and dp * cp // ep > 1:
        dp_s += _ring_all_reduce_s(mm.FP16_BYTES * expert_per_gpu, dp * cp // ep, cluster.latency_s,
                                   link(cluster.n_gpus))
    memory = state + activations
    return PlanCost(plan, n_micro, state, activations, bubble, compute_s, tp_s, pp_s, dp_s,
                    memory <= cluster.gpu_memory_bytes, cp_s, ep_s)


def all_plans(cluster, model=None, with_cp=False, with_ep=False):
    """Every (DP, PP, TP) with DP × PP × TP = N, in a fixed order; with_cp: also every CP
    (DP × PP × TP × CP = N); with_ep: also every EP that divides DP and the model's experts."""
    n = cluster.n_gpus
    plans = []
    for cp in (_divisors(n) if with_cp else [1]):
        for tp in _divisors(n // cp):
            for pp in _divisors(n // (cp * tp)):
                dp = n // (cp * tp * pp)
                for ep in (_divisors(dp) if with_ep and model is not None and is_moe(model) else [1]):
                    if ep == 1 or model.n_experts % ep == 0:
                        plans.append(Plan(dp, pp, tp, cp, ep))
    return plans


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def best_plan(model, cluster, global_batch, micro_batch=1, zero_stage=1, recompute="selective", max_tp=None,
              hide_dp=False, plans=None):
    """The valid plan that fits in memory with the smallest estimated iteration time
    (None if nothing fits); max_tp limits the TP size (e.g. to one machine); hide_dp:
    rank by iteration_hidden_dp_s (DP's all-reduce hidden) instead of iteration_s;
    plans: where to look (default all_plans(cluster), the 3D ones)."""
    best = None
    for plan in all_plans(cluster) if plans is None else plans:
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
