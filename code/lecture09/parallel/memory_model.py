"""How much memory and how many FLOPs training a transformer takes (lecture 9, code 3).

Introduced in lecture 9, section 3 (为什么要分布式训练 why distributed training) and
imported by 03_memory_zero.py, 04_pipeline.py and parallel_plan.py. Pure arithmetic:
every figure is the same on every machine.

Formulas and where they come from:

- Model states in mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", §3.1): fp16
  weights 2Ψ and gradients 2Ψ bytes, plus K·Ψ bytes of optimizer state, K = 12 (fp32
  master weights, first and second moment, 4 bytes each): (2 + 2 + K)·Ψ = 16Ψ bytes.
- ZeRO on N_d data-parallel GPUs (same paper, Figure 1 and §1):
      stage 0 (plain DP)            (2 + 2 + K)·Ψ
      stage 1, P_os  (optimizer)     2Ψ + 2Ψ + K·Ψ / N_d
      stage 2, P_os+g (+ gradients)  2Ψ + (2 + K)·Ψ / N_d
      stage 3, P_os+g+p (+ weights)  (2 + 2 + K)·Ψ / N_d
  Communication per GPU per step (§5): stages 0-2 move 2Ψ elements (a reduce-scatter and
  an all-gather of Ψ each, i.e. what one all-reduce moves); stage 3 moves 3Ψ (the
  weights are all-gathered once for the forward and once more for the backward).
- Activations of one transformer layer, 16-bit, micro-batch b, sequence s, hidden h,
  a heads, tensor-parallel size t (Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", Eq. 1-2 and §1):
      no recomputation            s·b·h·(34 + 5·a·s/h)              bytes  (t = 1)
                                  s·b·h·(10 + 24/t + 5·a·s/(h·t))    bytes  (tensor parallel)
      selective recomputation     s·b·h·(10 + 24/t)                 (recompute the attention
                                                                      scores: the 5as/h term)
      full recomputation          2·s·b·h                          (keep only each layer's input)
  Transformer layers only: embeddings, the final LayerNorm and the logits are left out.
- FLOPs of one iteration: 6·N·D (Kaplan et al. 2020): N parameters, D tokens; 2 per
  parameter and token for the forward pass, 4 for the backward.
"""

from dataclasses import dataclass

from lecture09.schedule.network_figures import Figure

GB = 1e9          # the ZeRO paper's GB: 7.5e9 parameters x 16 bytes = "120 GB" (Figure 1)
MB = 1e6

ADAM_K = 12                   # fp32 master weights + m + v: 4 + 4 + 4 bytes per parameter
FP16_BYTES = 2
FP32_BYTES = 4

# Hardware figures with their sources (STYLE habit 7). They could join network_figures.FIGURES.
HARDWARE = {
    "a100_bf16_peak_tflops": Figure(312.0, "TFLOP/s", "NVIDIA A100 datasheet: dense fp16/bf16 tensor cores"),
    "a100_memory_gb": Figure(80.0, "GB", "NVIDIA A100 80GB datasheet"),
    "nvlink_gbyte_per_s": Figure(300.0, "GB/s", "NVIDIA A100: NVLink 3, 600 GB/s per GPU both ways "
                                 "together, 300 GB/s each way"),
    "infiniband_gbit_per_s": Figure(200.0, "Gbit/s", "InfiniBand HDR, one 200 Gbit/s adapter per GPU "
                                    "(NVIDIA DGX A100)"),
    "link_latency_us": Figure(5.0, "us", "our choice: a few microseconds per message, in a machine and "
                              "across InfiniBand alike"),
    "utilisation": Figure(0.4, "", "our choice: a typical fraction of peak for large-model training"),
}
A100_PEAK_FLOPS = HARDWARE["a100_bf16_peak_tflops"].value * 1e12
A100_MEMORY_BYTES = HARDWARE["a100_memory_gb"].value * GB
NVLINK_BYTES_PER_S = HARDWARE["nvlink_gbyte_per_s"].value * 1e9
INFINIBAND_BYTES_PER_S = HARDWARE["infiniband_gbit_per_s"].value * 1e9 / 8     # 200 Gbit/s = 25 GB/s
LINK_LATENCY_S = HARDWARE["link_latency_us"].value * 1e-6
UTILISATION = HARDWARE["utilisation"].value
SECONDS_PER_DAY = 86_400
SECONDS_PER_YEAR = 365 * SECONDS_PER_DAY


@dataclass(frozen=True)
class ModelShape:
    """A transformer as the formulas see it."""
    name: str
    n_params: float          # Ψ
    n_layers: int
    hidden: int              # h
    n_heads: int             # a
    seq_len: int             # s
    batch_sequences: int     # global batch per iteration, in sequences of seq_len tokens
    train_tokens: float      # tokens of the whole training run
    source: str

    @property
    def batch_tokens(self):
        return self.batch_sequences * self.seq_len


# Batches in whole sequences: GPT-3's "1M" and "3.2M" tokens are 512 and 1536 sequences of
# 2048 (1,048,576 and 3,145,728 tokens), LLaMA's "4M" is 2048 x 2048.
MODELS = {
    "1.3B": ModelShape("1.3B", 1.3e9, 24, 2048, 24, 2048, 512, 300e9,
                       "GPT-3 XL (Brown et al. 2020, Table 2.1): batch 1M tokens, 300B tokens"),
    "7B": ModelShape("7B", 7e9, 32, 4096, 32, 2048, 2048, 1e12,
                     "LLaMA-7B (Touvron et al. 2023, Table 2): batch 4M tokens, 1T tokens"),
    "175B": ModelShape("175B", 175e9, 96, 12288, 96, 2048, 1536, 300e9,
                       "GPT-3 (Brown et al. 2020, Table 2.1): batch 3.2M tokens, 300B tokens"),
}


# ---------------------------------------------------------------------------
# Model states and ZeRO
# ---------------------------------------------------------------------------

def model_state_bytes(n_params, k=ADAM_K):
    """(weights, gradients, optimizer states) in bytes for mixed-precision Adam: 2Ψ, 2Ψ, KΨ."""
    return FP16_BYTES * n_params, FP16_BYTES * n_params, k * n_params


ZERO_STAGES = (0, 1, 2, 3)
ZERO_NAMES = {0: "数据并行 DP（不分片）", 1: "ZeRO-1 分片优化器状态 P_os",
              2: "ZeRO-2 + 梯度 P_os+g", 3: "ZeRO-3 + 参数 P_os+g+p"}


def zero_bytes_per_gpu(n_params, n_gpus, stage, k=ADAM_K):
    """Model-state bytes on each of n_gpus data-parallel GPUs at ZeRO stage 0-3 (Figure 1)."""
    if stage not in ZERO_STAGES:
        raise ValueError(f"ZeRO stage must be one of {ZERO_STAGES}, got {stage!r}")
    if n_gpus < 1:
        raise ValueError(f"n_gpus must be at least 1, got {n_gpus}")
    weights, grads, states = model_state_bytes(n_params, k)
    sharded = {0: 0.0, 1: states, 2: states + grads, 3: states + grads + weights}[stage]
    return weights + grads + states - sharded + sharded / n_gpus


def zero_comm_elements(n_params, stage):
    """Elements each GPU moves per step (ZeRO §5): 2Ψ for stages 0-2, 3Ψ for stage 3."""
    if stage not in ZERO_STAGES:
        raise ValueError(f"ZeRO stage must be one of {ZERO_STAGES}, got {stage!r}")
    return (3 if stage == 3 else 2) * n_params


@dataclass(frozen=True)
class PrecisionAccount:
    """Bytes per parameter of one mixed-precision recipe: kept bytes stay on every
    data-parallel replica, sharded bytes (the optimizer's) are split d ways."""
    name: str
    kept: int
    sharded: int
    where: str

    def bytes_per_param(self, d=1):
        return self.kept + self.sharded / d


# ZeRO's accounting (Rajbhandari et al. 2020, §3.1) and the three rows of Megatron-Core's
# distributed-optimizer table (its "Distributed Optimizer" guide: 20 / 4 + 16/d, 18 / 6 + 12/d,
# 16 / 8 + 8/d). The distributed optimizer shards what ZeRO-1 shards: the optimizer's state.
PRECISION_ACCOUNTS = (
    PrecisionAccount("ZeRO：fp16，K = 12", 4, 12, "ZeRO 论文、DeepSpeed"),
    PrecisionAccount("Megatron：fp16 参数、fp16 梯度", 4, 16, "Megatron 的 fp16 训练"),
    PrecisionAccount("Megatron：bf16 参数、fp32 主梯度", 6, 12, "Megatron 的 bf16 训练"),
    PrecisionAccount("Megatron：fp32 参数、fp32 梯度", 8, 8, "全 fp32，没有主权重"),
)


def zero_collectives(stage):
    """What each stage sends per step, in words."""
    return {0: "all-reduce 梯度", 1: "reduce-scatter 梯度 + all-gather 参数",
            2: "reduce-scatter 梯度 + all-gather 参数", 3: "all-gather 参数 ×2 + reduce-scatter 梯度"}[stage]


def zero_sent_bytes_per_gpu(n_params, n_gpus, stage, bytes_per_element=FP16_BYTES):
    """Bytes each GPU sends per step with ring collectives: every Ψ-sized reduce-scatter or
    all-gather sends (N_d - 1)/N_d of it (a ring step passes on one shard per neighbour)."""
    return zero_comm_elements(n_params, stage) * (n_gpus - 1) / n_gpus * bytes_per_element


# ---------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------

RECOMPUTE = ("none", "selective", "full")


def activation_bytes_per_layer(seq_len, micro_batch, hidden, n_heads, tp=1, recompute="none", cp=1):
    """Bytes one transformer layer keeps for the backward pass (Korthikanti et al. 2022).

    cp: context parallelism splits the sequence into cp parts, so each rank keeps the
    activations of seq_len/cp positions; its queries still see all seq_len keys, so the
    attention scores (recompute "none") are (seq_len/cp) × seq_len per head."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    sbh = seq_len // cp * micro_batch * hidden
    if recompute == "full":
        return 2 * sbh                                  # the layer's fp16 input, nothing else
    per_element = 10 + 24 / tp
    if recompute == "none":
        per_element += 5 * n_heads * seq_len / (hidden * tp)    # attention scores, softmax, dropout mask
    return sbh * per_element


def activation_bytes_per_token(model, recompute="none", tp=1):
    """All layers' activation bytes for one token of a full-length sequence."""
    return model.n_layers * activation_bytes_per_layer(model.seq_len, 1, model.hidden, model.n_heads,
                                                       tp, recompute) / model.seq_len


def activation_bytes_per_sequence(model, recompute="none", tp=1):
    return activation_bytes_per_token(model, recompute, tp) * model.seq_len


# ---------------------------------------------------------------------------
# FLOPs and time
# ---------------------------------------------------------------------------

def training_flops(n_params, n_tokens):
    """6·N·D: forward 2 FLOPs per parameter per token, backward 4."""
    return 6 * n_params * n_tokens


def layer_flops(seq_len, micro_batch, hidden):
    """Forward + backward FLOPs of one transformer layer for one micro-batch, no
    recomputation: 72·b·s·h²·(1 + s/(6h)). Narayanan et al. 2021 count
    96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration with full recomputation (a second
    forward: 4 passes of 24·B·s·l·h²); without it that is 3 passes, and one layer without
    the logits (V) term is this. The s/(6h) is the attention's QKᵀ and AV products."""
    return 72 * micro_batch * seq_len * hidden ** 2 * (1 + seq_len / (6 * hidden))


def compute_seconds(flops, n_gpus=1, peak_flops=A100_PEAK_FLOPS, utilisation=UTILISATION):
    return flops / (n_gpus * peak_flops * utilisation)


def gpus_to_hold(n_bytes, gpu_bytes=A100_MEMORY_BYTES):
    """How many GPUs of gpu_bytes the bytes need at the least (ceil)."""
    return -(-n_bytes // gpu_bytes)
