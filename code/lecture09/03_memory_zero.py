"""
第 9 讲 · 代码 3：显存和算力的账，以及 ZeRO
Lecture 9, code 3: the memory and compute of training a foundation model, and ZeRO.

这个文件回答的问题 (the question)
    训练一个 1.3B、7B、175B 的模型，每张 GPU 要放下什么：参数、梯度、Adam 状态、激活各占多少字节？
    一共要多少 FLOPs？为什么一张卡既放不下也算不完？ZeRO 把优化器状态、梯度、参数分片以后，每张卡剩多少，
    又多付多少通信？

    演示 1（demo 1）：三个模型的显存账（混合精度 Adam 每个参数 16 字节）、激活（有无重算 recomputation）、
      每次迭代和整个训练的 FLOPs（6·N·D）。
    演示 2（demo 2）：ZeRO 1–3 阶段在 8、64、1024 张卡上每张卡的字节数（Rajbhandari et al. 2020 的公式），
      论文图 1 的例子（Ψ = 7.5B、64 张卡）由公式算出来，以及每个阶段的通信量。
    演示 3（demo 3）：在第 1 讲的小 GPT 上数真实的字节（参数、.grad、AdamW 走一步以后的状态），和公式对账。
    演示 4（demo 4）：真的 ZeRO-1：2–4 个 gloo 进程分片优化器状态（自己写的 ShardedAdamW，以及 PyTorch 的
      ZeroRedundancyOptimizer），N 步以后的权重和单进程的普通 AdamW 比；每个进程的优化器字节数。

对应讲义 (notes): lectures/lecture09/03_memory_zero.md 第 3 节

运行 (run):
    python3 code/lecture09/03_memory_zero.py              # 全部，时间见 README（2 核机器，中位数）
    python3 code/lecture09/03_memory_zero.py --demo 2 --gpus 16 256     # 换一组卡数
    python3 code/lecture09/03_memory_zero.py --demo 2 --k 8             # 如混合精度的带动量 SGD：fp32 主权重 + 动量
    python3 code/lecture09/03_memory_zero.py --demo 4 --ranks 4 --steps 50   # 4 个进程：PyTorch 的分法分不匀
    python3 code/lecture09/03_memory_zero.py --quick      # 很小的设置（测试用）
    python3 code/lecture09/03_memory_zero.py --help

演示 1–3 是纯算术和计数，在任何机器上逐位相同；演示 4 的"最大差"是浮点舍入，随 CPU 变，但都在容差以内。
GB 指 10^9 字节（ZeRO 论文的用法：7.5B × 16 字节 = 120 GB）。用时（elapsed）打印到 stderr。
需要 (needs): torch、numpy；parallel/ 的 memory_model.py、zero.py、zero_report.py（演示 3、4），ranks/ 的
gloo_ranks.py、alpha_beta.py；
code/lecture01 的 tiny_gpt.py、fm_world.py、console.py、cli_args.py。
"""

import sys
import time
from dataclasses import dataclass, replace

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture09.ranks import alpha_beta
from lecture09.ranks import gloo_ranks  # no torch at import: --help stays fast
from lecture09.parallel import memory_model as mm
from lecture09.parallel.checkpoint_report import CheckpointSetup, demo5_observations, run_demo5
from lecture09.parallel.fsdp_report import demo6_observations, run_demo6
from lecture09.parallel.zero_report import (MAX_RANKS, count_tiny_gpt,  # noqa: F401  (count_tiny_gpt: the tests')
                                           demo4_observations, run_demo3, run_demo4)
from lecture01.cli_args import Parser, add_figures_flag, given_flags, note_quick_overrides, run_main, float_in, int_in, non_negative_int, positive_float, positive_int
from lecture01.console import print_header, print_table, print_wrapped, utf8_output


# =============================================================================
# Settings a student may change (flags below override them)
# =============================================================================

@dataclass(frozen=True)
class MemorySetup:
    """Demos 1-2: pure arithmetic on the three models of memory_model.MODELS."""
    models: tuple = ("1.3B", "7B", "175B")
    zero_gpus: tuple = (8, 64, 1024)      # data-parallel sizes for the ZeRO table
    k: int = mm.ADAM_K                    # optimizer bytes per parameter (12: mixed-precision Adam)
    figure1_params: float = 7.5e9         # the ZeRO paper's Figure 1 example ...
    figure1_gpus: int = 64                # ... on 64 GPUs
    utilisation: float = mm.UTILISATION   # fraction of the A100's peak actually used
    cluster_gpus: int = 1024              # "how long on a cluster of this many"


@dataclass(frozen=True)
class RealSetup:
    """Demos 3-4: the lecture 1 model, counted and trained for real."""
    ranks: int = 2                # gloo processes for ZeRO-1 (each one torch thread; 4 took twice as long)
    steps: int = 20               # AdamW steps compared
    batch_size: int = 16          # sequences per step, split evenly over the ranks
    model_seed: int = 0
    data_seed: int = 1


QUICK_REAL = dict(ranks=2, steps=3, batch_size=4)


def fmt_gb(n_bytes):
    """GB (10^9 bytes) with digits that still say something below 1 GB."""
    gb = n_bytes / mm.GB
    if gb >= 1:
        return f"{gb:.1f}"
    return f"{gb:.2f}" if gb >= 0.01 else f"{gb:.4f}"


def fmt_time(seconds):
    if seconds >= mm.SECONDS_PER_YEAR:
        return f"{seconds / mm.SECONDS_PER_YEAR:.1f} 年"
    if seconds >= mm.SECONDS_PER_DAY:
        return f"{seconds / mm.SECONDS_PER_DAY:.1f} 天"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} 小时"
    return f"{seconds:.1f} 秒"


def fmt_tokens(n_tokens):
    """300e9 -> '300B', 1e12 -> '1T'."""
    return f"{n_tokens / 1e12:g}T" if n_tokens >= 1e12 else f"{n_tokens / 1e9:g}B"


# =============================================================================
# Demo 1: what one GPU would have to hold and compute
# =============================================================================

def optimizer_state_words(k):
    """What the K bytes of optimizer state per parameter are; only K = 12 is Adam's three fp32 copies."""
    if k == 12:
        return "fp32 主权重 master weights、一阶矩 m、二阶矩 v 各 4 字节，K = 12"
    return f"K = {k} 字节/参数；默认的 12 是 fp32 主权重 master weights、一阶矩 m、二阶矩 v 各 4 字节"


def example_name(setup):
    """Demo 2's example: the ZeRO paper's Figure 1 only with its own Ψ and N_d."""
    paper = MemorySetup()
    if (setup.figure1_params, setup.figure1_gpus) == (paper.figure1_params, paper.figure1_gpus):
        return "论文图 1 的例子"
    return "这里的例子（--psi-b、--psi-gpus 改过，不是论文图 1 的）"


def run_demo1(setup, out=print_wrapped):
    models = [mm.MODELS[name] for name in setup.models]
    gpu_bytes = mm.A100_MEMORY_BYTES
    print_header("演示 1：一个基础模型要多少显存、多少计算（每张卡只有 "
                 f"{gpu_bytes / mm.GB:.0f} GB，峰值 {mm.A100_PEAK_FLOPS / 1e12:.0f} TFLOP/s 的 A100）")
    out(f"(a) 模型状态 model states，混合精度 Adam：fp16 参数 2Ψ + fp16 梯度 2Ψ + 优化器状态 KΨ"
        f"（{optimizer_state_words(setup.k)}），GB = 10^9 字节")
    rows, figures = [], {}
    for m in models:
        weights, grads, states = mm.model_state_bytes(m.n_params, setup.k)
        total = weights + grads + states
        figures[m.name] = {"states": total}
        rows.append((m.name, fmt_gb(weights), fmt_gb(grads), fmt_gb(states), fmt_gb(total),
                     f"{int(mm.gpus_to_hold(total, gpu_bytes))}"))
    print_table(["模型", "参数 fp16", "梯度 fp16", f"优化器 K={setup.k}", "合计 GB", "至少几张 80 GB 卡"], rows)

    print()
    out("(b) 激活 activations（16 位，只算 transformer 层；Korthikanti et al. 2022：不重算时每层 sbh(34+5as/h) 字节；"
        f"L 层数，h 隐藏维，a 注意力头数，s = {models[0].seq_len} 序列长度，micro-batch b = 1）：")
    rows = []
    for m in models:
        per_token = {r: mm.activation_bytes_per_token(m, r) for r in mm.RECOMPUTE}
        per_seq = {r: mm.activation_bytes_per_sequence(m, r) for r in mm.RECOMPUTE}
        figures[m.name].update(act_seq=per_seq, act_token=per_token)
        rows.append((f"{m.name}（L{m.n_layers} h{m.hidden} a{m.n_heads}）",
                     f"{per_token['none'] / mm.MB:.2f}", f"{per_token['full'] / mm.MB:.3f}",
                     fmt_gb(per_seq["none"]), fmt_gb(per_seq["selective"]), fmt_gb(per_seq["full"])))
    print_table(["模型", "MB/token 不重算", "MB/token 全重算", "GB/序列 不重算", "选择性重算", "全重算"], rows)
    out("    选择性重算 selective：只重算注意力分数那一块（去掉 5as/h 项）；全重算 full：每层只留输入 2sbh，"
        "反向时把整个前向再算一遍（多 1/3 的计算）。")

    print()
    out(f"(c) 计算 compute：每次迭代 6·N·D FLOPs（N 参数，D 这一步的 token 数）；A100 按峰值的 "
        f"{setup.utilisation:.0%} 算")
    rows = []
    for m in models:
        step_flops = mm.training_flops(m.n_params, m.batch_tokens)
        run_flops = mm.training_flops(m.n_params, m.train_tokens)
        one_s = mm.compute_seconds(run_flops, 1, utilisation=setup.utilisation)
        many_s = mm.compute_seconds(run_flops, setup.cluster_gpus, utilisation=setup.utilisation)
        step_s = mm.compute_seconds(step_flops, 1, utilisation=setup.utilisation)
        figures[m.name].update(step_flops=step_flops, run_flops=run_flops, one_gpu_s=one_s, cluster_s=many_s)
        rows.append((m.name, f"{m.batch_sequences} × {m.seq_len}", f"{step_flops:.2e}", fmt_time(step_s),
                     fmt_tokens(m.train_tokens), f"{run_flops:.2e}", fmt_time(one_s),
                     fmt_time(many_s)))
    header = ["模型", "batch（序列×token）", "FLOPs/迭代", "1 卡/迭代", "训练 token", "训练 FLOPs", "1 张卡",
              f"{setup.cluster_gpus} 张卡"]
    if setup.cluster_gpus == 1:                  # the cluster is the one GPU: one column says it
        header, rows = header[:-1], [row[:-1] for row in rows]
    print_table(header, rows)
    out("    模型来源：" + "；".join(f"{m.name} = {m.source}" for m in models))
    return figures


def demo1_observations(setup, figures, out=print_wrapped):
    gpu = mm.A100_MEMORY_BYTES
    names = list(setup.models)
    biggest = names[-1]
    f = figures[biggest]
    print()
    out("观察 Observations（演示 1）：")
    fitting = [n for n in names if figures[n]["states"] <= gpu]
    out(f" 1. 每个参数 {4 + setup.k} 字节：{'、'.join(n + ' ' + fmt_gb(figures[n]['states']) + ' GB' for n in names)}。"
        + (f"只有 {'、'.join(fitting)} 的模型状态放得进一张 {gpu / mm.GB:.0f} GB 的卡，" if fitting else
           "没有一个放得进一张卡，")
        + f"{biggest} 光模型状态就要 {int(mm.gpus_to_hold(f['states'], gpu))} 张卡——这还没算激活。")
    out(f" 2. 激活和 batch 成正比：{biggest} 一条 {mm.MODELS[biggest].seq_len} token 的序列不重算要 "
        f"{fmt_gb(f['act_seq']['none'])} GB，全重算只要 {fmt_gb(f['act_seq']['full'])} GB"
        f"（{f['act_seq']['none'] / f['act_seq']['full']:.0f} 倍），代价是多一次前向。")
    out(f" 3. {biggest} 训练 {fmt_tokens(mm.MODELS[biggest].train_tokens)} 个 token 要 {f['run_flops']:.2e} FLOPs："
        f"一张 A100 要 {fmt_time(f['one_gpu_s'])}"
        + (f"，{setup.cluster_gpus} 张卡也要 {fmt_time(f['cluster_s'])}。" if setup.cluster_gpus > 1 else "。")
        + "放不下要切模型，算不完要加卡：这就是分布式训练。")


# =============================================================================
# Demo 2: ZeRO
# =============================================================================

def zero_table(n_params, gpu_counts, k):
    """{n_gpus: [bytes per GPU at stage 0..3]}."""
    return {n: [mm.zero_bytes_per_gpu(n_params, n, stage, k) for stage in mm.ZERO_STAGES] for n in gpu_counts}


def zero_comm_time_s(n_params, n_gpus, stage, latency_s=mm.LINK_LATENCY_S, bandwidth=mm.INFINIBAND_BYTES_PER_S):
    """α–β time (alpha_beta, §1) of one step's ZeRO traffic with ring collectives over
    InfiniBand, fp16 values; the vector padded to a multiple of n_gpus."""
    n_bytes = -(-int(n_params * mm.FP16_BYTES) // n_gpus) * n_gpus
    if stage == 0:
        return alpha_beta.ring_all_reduce_time_s(n_bytes, n_gpus, latency_s, bandwidth)
    n_gathers = 2 if stage == 3 else 1
    rs = alpha_beta.collective_time_s("reduce-scatter", "ring", n_bytes, n_gpus, latency_s, bandwidth)
    ag = alpha_beta.collective_time_s("all-gather", "ring", n_bytes, n_gpus, latency_s, bandwidth)
    return rs + n_gathers * ag


def run_demo2(setup, out=print_wrapped):
    print_header("演示 2：ZeRO 把模型状态分到 N_d 张数据并行的卡上（Rajbhandari et al. 2020）")
    k = setup.k
    out(f"每张卡的模型状态（GB）：阶段 0 = (2+2+K)Ψ；1 = 4Ψ + KΨ/N_d；2 = 2Ψ + (2+K)Ψ/N_d；3 = (2+2+K)Ψ/N_d，K = {k}")
    psi, n_fig = setup.figure1_params, setup.figure1_gpus
    fig1_bytes = [mm.zero_bytes_per_gpu(psi, n_fig, stage, k) for stage in mm.ZERO_STAGES]
    out(f"{example_name(setup)} Ψ = {psi / 1e9:g}B、N_d = {n_fig}：" + " → ".join(f"{b / mm.GB:.1f}" for b in fig1_bytes)
        + " GB（数据并行 → ZeRO-1 → ZeRO-2 → ZeRO-3）")
    rows = []
    tables = {}
    for name in setup.models:
        m = mm.MODELS[name]
        table = zero_table(m.n_params, setup.zero_gpus, k)
        tables[name] = table
        for n, per_stage in table.items():
            rows.append((f"{name}，{n} 张卡", *(fmt_gb(b) for b in per_stage),
                         "✓" if per_stage[3] <= mm.A100_MEMORY_BYTES else "✗"))
    print_table(["模型，N_d", "0 数据并行", "1 P_os", "2 P_os+g", "3 P_os+g+p", "ZeRO-3 放得下"], rows)

    print()
    out(f"每一步每张卡的通信（ZeRO 论文 §5；环形 ring 集合通信，fp16；时间按 α–β 模型，"
        f"InfiniBand {mm.INFINIBAND_BYTES_PER_S / 1e9:g} GB/s、α = {mm.LINK_LATENCY_S * 1e6:g} µs），"
        f"Ψ = {psi / 1e9:g}B、N_d = {n_fig}：")
    rows, comm = [], {}
    for stage in mm.ZERO_STAGES:
        elements = mm.zero_comm_elements(psi, stage)
        sent = mm.zero_sent_bytes_per_gpu(psi, n_fig, stage)
        seconds = zero_comm_time_s(psi, n_fig, stage)
        comm[stage] = (elements, sent, seconds)
        rows.append((mm.ZERO_NAMES[stage], mm.zero_collectives(stage), f"{elements / psi:.0f}Ψ",
                     f"{sent / mm.GB:.1f}", f"{seconds:.2f}"))
    print_table(["阶段", "做什么", "元素数", "每卡发送 GB", "秒"], rows)

    print()
    out(f"混合精度的几种记账 mixed-precision accounting（字节/参数；'分优化器'= ZeRO-1 或 Megatron-Core 的分布式优化器，"
        f"d = {n_fig} 个数据并行副本；GB 按 Ψ = {psi / 1e9:g}B）：")
    accounts = precision_accounts(k)
    precision = [(a.name, f"{a.bytes_per_param():g}", f"{a.kept} + {a.sharded}/d", f"{a.bytes_per_param(n_fig):.2f}",
                  f"{a.bytes_per_param(n_fig) * psi / mm.GB:.1f}", a.where) for a in accounts]
    print_table(["记账", "不分", "分优化器", f"d = {n_fig}", "GB", "谁这样用"], precision,
                aligns=["<", ">", "<", ">", ">", "<"])
    out("ZeRO 那一行 = fp16 参数 2 + fp16 梯度 2 + 优化器状态 K（--k；Adam 的 fp32 主权重、m、v 各 4 是 12）；Megatron 的三行取自 Megatron-Core 的分布式"
        "优化器文档（Distributed Optimizer），它和 ZeRO-1 一样只分优化器的状态；bf16 训练在 fp32 的主梯度 main_grad "
        "里累加、求和梯度。")
    return {"figure1_bytes": fig1_bytes, "tables": tables, "comm": comm,   # tables: bytes per GPU
            "accounts": accounts}


def precision_accounts(k):
    """memory_model.PRECISION_ACCOUNTS with ZeRO's row at this --k (12: Adam's fp32 copy, m, v)."""
    zero, *rest = mm.PRECISION_ACCOUNTS
    name = f"ZeRO：fp16，K = {k}"
    return [replace(zero, name=name, sharded=k), *rest]


def demo2_observations(setup, r, out=print_wrapped):
    fig1_bytes, comm = r["figure1_bytes"], r["comm"]
    print()
    out("观察 Observations（演示 2）：")
    out(f" 1. 分得越多，省得越多：{example_name(setup)}从 {fig1_bytes[0] / mm.GB:.1f} GB 降到 {fig1_bytes[1] / mm.GB:.1f}、"
        f"{fig1_bytes[2] / mm.GB:.1f}、{fig1_bytes[3] / mm.GB:.1f} GB。阶段 1、2 留下的 4Ψ、2Ψ 不随卡数减少，"
        f"只有阶段 3 按 1/N_d 一直降下去。")
    out(f" 2. 阶段 1 和 2 不多花通信：普通数据并行的 all-reduce 本来就是 reduce-scatter + all-gather，ZeRO 只是"
        f"在两步之间换成'各自更新自己那一片'。阶段 3 每步多一次参数 all-gather，通信量 "
        f"{comm[3][0] / comm[0][0]:.1f} 倍（{comm[0][1] / mm.GB:.1f} → {comm[3][1] / mm.GB:.1f} GB）。")
    last = setup.models[-1]
    per_stage = r["tables"][last][max(setup.zero_gpus)]
    out(f" 3. {last} 在 {max(setup.zero_gpus)} 张卡上：ZeRO-1 每卡 {fmt_gb(per_stage[1])} GB，"
        f"ZeRO-3 {fmt_gb(per_stage[3])} GB。" + ("模型状态放下了，激活还得另想办法（重算、流水线、张量并行，第 4 节）。"
                                             if per_stage[3] <= mm.A100_MEMORY_BYTES else "仍然放不下。"))
    out(" 4. " + precision_sentence(r["accounts"], setup.figure1_gpus))


def precision_sentence(accounts, d):
    """Demo 2: ZeRO's row against Megatron-Core's bf16 row, unsharded and with d replicas."""
    zero, bf16 = accounts[0], accounts[2]
    return (f"记账不同，字节也不同：bf16 参数加 fp32 主梯度每个参数 {bf16.bytes_per_param():g} 字节，"
            f"ZeRO 的记账 {zero.bytes_per_param():g} 字节；分优化器以后（d = {d}）是 {bf16.bytes_per_param(d):.2f} 对 "
            f"{zero.bytes_per_param(d):.2f}：留在每个副本上不分的，一边是 {bf16.kept} 字节（bf16 参数 2 + fp32 主梯度 4），"
            f"一边是 {zero.kept} 字节（fp16 参数 2 + fp16 梯度 2）。d 越大，差越接近 {bf16.kept - zero.kept} 字节。")


# =============================================================================
# Demo 3: the tiny GPT's real bytes
# =============================================================================


# =============================================================================
# Demo 4: ZeRO-1 on real processes
# =============================================================================


# =============================================================================
# Command line
# =============================================================================

def parse_args(argv=None):
    s, r = MemorySetup(), RealSetup()
    p = Parser(
        description="第 9 讲代码 3：显存、FLOPs 和 ZeRO (lecture 9 code 3: memory, FLOPs and ZeRO)",
        epilog="例 example: --demo 2 --gpus 16 256；--demo 4 --ranks 4 --steps 50")
    p.add_argument("--demo", choices=("1", "2", "3", "4", "5", "6", "all"), default="all", help="跑哪个演示 which demo (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="很小的设置，秒级跑完（冒烟测试 smoke test）")
    add_figures_flag(p)                 # fig09_03_zero_memory.svg (demo 2)
    g1 = p.add_argument_group("演示 1-2 demos 1-2（纯算术 arithmetic）")
    g1.add_argument("--gpus", type=positive_int, nargs="+", default=list(s.zero_gpus), metavar="N",
                    help=f"ZeRO 表里的数据并行卡数 data-parallel sizes (default {' '.join(map(str, s.zero_gpus))})")
    g1.add_argument("--k", type=int_in(0, 64), default=s.k,
                    help="优化器每个参数几字节 optimizer bytes per parameter (default %(default)s: 混合精度 Adam)")
    g1.add_argument("--psi-b", type=positive_float, default=s.figure1_params / 1e9,
                    help="图 1 例子的参数量（十亿）Ψ in billions (default %(default)g)")
    g1.add_argument("--psi-gpus", type=positive_int, default=s.figure1_gpus,
                    help="图 1 例子的卡数 N_d GPUs of the example (default %(default)s)")
    g1.add_argument("--utilisation", type=float_in(0, 1, low_open=True), default=s.utilisation,
                    help="GPU 实际用到峰值的比例 utilisation of peak FLOPs (default %(default)s)")
    g1.add_argument("--cluster-gpus", type=positive_int, default=s.cluster_gpus,
                    help="'要多久'按多少张卡算 GPUs of the cluster (default %(default)s)")
    g2 = p.add_argument_group("演示 3-4 demos 3-4（小 GPT tiny GPT）")
    g2.add_argument("--ranks", type=int_in(2, MAX_RANKS), default=r.ranks,
                    help="ZeRO-1 的进程数 processes (default %(default)s)")
    g2.add_argument("--steps", type=positive_int, default=r.steps, help="比较的训练步数 steps compared (default %(default)s)")
    g2.add_argument("--batch-size", type=positive_int, default=r.batch_size,
                    help="每步的序列数，要能被 --ranks 整除 sequences per step (default %(default)s)")
    g2.add_argument("--model-seed", type=non_negative_int, default=r.model_seed, help="初始权重的种子 model init seed (default %(default)s)")
    g2.add_argument("--data-seed", type=non_negative_int, default=r.data_seed, help="数据顺序的种子 data order seed (default %(default)s)")
    c = CheckpointSetup()
    g5 = p.add_argument_group("演示 5 demo 5（激活重算 activation checkpointing）")
    g5.add_argument("--ckpt-layers", type=int_in(1, 64), default=c.n_layer,
                    help="深一点的模型有几层，1–64 blocks of the deeper model (default %(default)s)")
    g5.add_argument("--ckpt-batch", type=int_in(1, 64), default=c.batch, help="batch（序列数）1–64 (default %(default)s)")
    g5.add_argument("--fsdp-layers", type=int_in(1, 8), default=2,
                    help="演示 6 的 FSDP 模型有几层（也用 --ranks、--steps、--batch-size）FSDP demo blocks (default %(default)s)")
    args = p.parse_args(argv)
    ckpt = replace(c, n_layer=args.ckpt_layers, batch=args.ckpt_batch)
    if args.quick:
        note_quick_overrides([*QUICK_REAL, *(["ckpt_layers"] if args.ckpt_layers > 4 else [])], given_flags(p, argv))
        ckpt = replace(ckpt, n_layer=min(ckpt.n_layer, 4), repeats=0)
    memory = replace(s, zero_gpus=tuple(args.gpus), k=args.k, figure1_params=args.psi_b * 1e9,
                     figure1_gpus=args.psi_gpus, utilisation=args.utilisation, cluster_gpus=args.cluster_gpus)
    real = replace(r, ranks=args.ranks, steps=args.steps, batch_size=args.batch_size,
                   model_seed=args.model_seed, data_seed=args.data_seed)
    if args.quick:
        real = replace(real, **QUICK_REAL)
    if real.batch_size % real.ranks:
        p.error(f"--batch-size {real.batch_size} 不能被 --ranks {real.ranks} 整除 (must be divisible)")
    return args, memory, real, ckpt


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    args, memory, real, ckpt = parse_args(argv)
    started = time.perf_counter()
    results = {}
    if args.demo in ("1", "all"):
        results["demo1"] = run_demo1(memory)
        demo1_observations(memory, results["demo1"])
        print()
    if args.demo in ("2", "all"):
        results["demo2"] = run_demo2(memory)
        demo2_observations(memory, results["demo2"])
        print()
    if args.demo in ("3", "4", "5", "6", "all"):
        from lecture01 import tiny_gpt
        tiny_gpt.use_deterministic_threads()
    if args.demo in ("3", "all"):
        results["demo3"] = run_demo3(real)
        print()
    if args.demo in ("4", "all"):
        results["demo4"] = run_demo4(real)
        demo4_observations(real, results["demo4"])
    if args.demo in ("5", "all"):
        if args.demo == "all":
            print()
        results["demo5"] = run_demo5(ckpt)
        demo5_observations(ckpt, results["demo5"])
    if args.demo in ("6", "all"):
        print()
        results["demo6"] = run_demo6(real, args.fsdp_layers, timed=not args.quick)
        demo6_observations(real, results["demo6"])
    if args.figures:
        from lecture09.parallel.memory_figures import draw   # matplotlib only now
        draw(args.figures, memory, results)
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return results


if __name__ == "__main__":
    run_main(main, failures=gloo_ranks.LAUNCH_FAILURES)
