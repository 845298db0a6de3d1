"""
第 9 讲 · 代码 4：流水线并行、张量并行，以及三者怎样组合
Lecture 9, code 4: pipeline parallelism, tensor parallelism, and how they combine with data
parallelism (3D parallelism).

这个文件回答的问题 (the question)
    模型放不进一张卡，就把它切开：按层切成几个阶段（流水线并行 pipeline parallelism），或者把一层里的矩阵
    切开（张量并行 tensor parallelism）。切开以后卡会空等多少（气泡 bubble）？要多存多少激活？要传多少数据？
    数据并行、流水线并行、张量并行怎样搭配？

    演示 1（demo 1）：p 个阶段 × m 个 micro-batch 的两种调度——GPipe（全前向-全反向 AFAB）和 1F1B
      （热身 warm-up / 稳定 steady state / 收尾 cooldown）：时间线、气泡 (p−1)/(m+p−1)、每个阶段最多存几个
      micro-batch 的激活。
    演示 2（demo 2）：第 1 讲的小 GPT 真的切成 2–4 个阶段，每个阶段一个 gloo 进程，用阻塞的 send/recv
      传激活和梯度；两种调度算出的梯度和不切开的模型比。
    演示 3（demo 3）：张量并行：按列切、按行切的线性层（Megatron-LM）在 2 个 gloo 进程上和 nn.Linear 比
      （输出、输入梯度、权重梯度、偏置梯度）；每层要传多少、为什么张量并行只放在一台机器里。
    演示 4（demo 4）：3D 并行的小规划器：给定模型和集群，几种 (DP, PP, TP) 组合的每卡显存、气泡、
      每次迭代的通信（α–β 模型）和时间。
    演示 5（demo 5）：比 1F1B 更少的气泡：交错 1F1B（每张卡 v 段，Narayanan et al. 2021）和零气泡 ZB-H1
      （反向拆成 B 和 W，Qi et al. 2024）：时间线、气泡和激活对论文的公式，再在真实 gloo 进程上和不切开的模型比。
    演示 6（demo 6）：专家并行 expert parallelism：MoE 层的专家分到 2–4 个 gloo 进程，token 用 all-to-all 发出去、
      收回来，和一个进程比；容量因子在丢掉的 token 和字节之间的取舍；每层的通信对张量并行。
    演示 7（demo 7）：上下文并行 context parallelism：序列分到 2–4 个 gloo 进程，环形注意力（ring attention）和
      Ulysses 都和整个序列的注意力比；因果掩码下每个进程的工作量（连续切对之字形切）；每层的字节。

对应讲义 (notes): lectures/lecture09/04_pipeline.md 第 4 节

运行 (run):
    python3 code/lecture09/04_pipeline.py                 # 全部，时间见 README（2 核机器，中位数）
    python3 code/lecture09/04_pipeline.py --demo 1 --stages 4 --micro-batches 4 --t-backward 2
    python3 code/lecture09/04_pipeline.py --demo 2 --pipe-ranks 2
    python3 code/lecture09/04_pipeline.py --demo 4 --plan-model 7B --plan-gpus 64 --global-batch 512
    python3 code/lecture09/04_pipeline.py --demo 5 --virtual-stages 4
    python3 code/lecture09/04_pipeline.py --demo 6 --top-k 1 --capacity-factor 1
    python3 code/lecture09/04_pipeline.py --demo 7 --cp-ranks 3 --seq-len 192
    python3 code/lecture09/04_pipeline.py --quick         # 很小的设置（测试用）
    python3 code/lecture09/04_pipeline.py --help

演示 1、3 的流量表、4 是纯算术，在任何机器上逐位相同；演示 2、3 的"最大差"是浮点舍入，随 CPU 变，都在容差以内。
GB 指 10^9 字节。用时（elapsed）打印到 stderr。
需要 (needs): torch、numpy；parallel/ 的 pipeline_report.py（演示 1-3）、plan_report.py（演示 4）、
pipeline_beyond_report.py（演示 5）、expert_parallel_report.py（演示 6）、pipeline.py、pipeline_schedules.py、
context_parallel_report.py（演示 7）、pipeline_real.py、expert_parallel.py、context_parallel.py、tensor_parallel.py、parallel_plan.py、memory_model.py，ranks/ 的 alpha_beta.py、gloo_ranks.py；code/lecture01 的
tiny_gpt.py、fm_world.py、console.py、cli_args.py。
"""

import sys
import time
from dataclasses import dataclass, replace

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture09.ranks import gloo_ranks  # no torch at import: --help stays fast
from lecture09.parallel.parallel_plan import PLAN_MODELS
from lecture09.parallel.pipeline_report import (  # noqa: F401  (no torch at import; the tests reach some here)
    GRAD_ATOL, TP_ATOL, demo1_observations, demo2_observations, demo3_observations,
    run_demo1, run_demo2, run_demo3, tp_traffic)
from lecture09.parallel.plan_report import demo4_observations, run_demo4
from lecture09.parallel.pipeline_beyond_report import demo5_observations, run_demo5
from lecture09.parallel.expert_parallel import MoEConfig
from lecture09.parallel.expert_parallel_report import demo6_observations, run_demo6
from lecture09.parallel.context_parallel import CPCase
from lecture09.parallel.context_parallel_report import demo7_observations, run_demo7
from lecture01.cli_args import Parser, add_figures_flag, given_flags, note_quick_overrides, run_main, float_in, int_in, non_negative_int, positive_int
from lecture01.console import utf8_output


# =============================================================================
# Settings a student may change (flags below override them)
# =============================================================================

@dataclass(frozen=True)
class ScheduleSetup:
    """Demo 1: schedules on paper."""
    n_stages: int = 4                  # p of the timeline
    n_micro: int = 8                   # m of the timeline
    t_forward: int = 1                 # time units of one forward of one micro-batch on one stage
    t_backward: int = 1                # ... of one backward (about 2 in practice: try --t-backward 2)
    table_stages: tuple = (1, 2, 4, 8)
    table_micro: tuple = (1, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class RealSetup:
    """Demos 2-3: real ranks on this machine."""
    pipe_ranks: int = 4                # pipeline stages = gloo processes
    pipe_micro: int = 8                # micro-batches per batch
    batch_size: int = 16               # sequences in the batch (split into the micro-batches)
    n_layer: int = 2                   # the lecture 1 model with 2 blocks: embedding, block, block, head = 4 pieces
    model_seed: int = 0
    data_seed: int = 1
    tp_ranks: int = 2                  # tensor-parallel processes
    tp_size: int = 8                   # TP size of the traffic table (one 8-GPU machine)


@dataclass(frozen=True)
class PlanSetup:
    """Demo 4: the planner."""
    model: str = "175B"
    n_gpus: int = 1024
    global_batch: int = 1536           # sequences per iteration (GPT-3's 3.2M tokens = 1536 x 2048)
    micro_batch: int = 1
    zero_stage: int = 1                # ZeRO stage across each data-parallel group
    recompute: str = "selective"       # Korthikanti et al. 2022's recommendation
    seq_len: int = None                # None: the model's own
    candidates: tuple = ((1, 1), (1, 8), (2, 8), (8, 8), (16, 8), (32, 1), (8, 16))   # (PP, TP) pairs to show


@dataclass(frozen=True)
class BeyondSetup:
    """Demo 5: interleaved 1F1B and ZB-H1 (p and m are demo 1's --stages, --micro-batches)."""
    n_stages: int = 4
    n_micro: int = 8
    n_virtual: int = 2                 # v: model chunks per rank in interleaved 1F1B
    t_forward: int = 1                 # T_F, T_B, T_W: the zero-bubble paper's setting T_F = T_B = T_W
    t_b: int = 1
    t_w: int = 1
    table_stages: tuple = (2, 4, 8)
    table_micro: tuple = (8, 16, 32, 64)   # multiples of every p: interleaving needs m divisible by p
    max_blocks: int = 3                # a timeline folded into more blocks than this is not drawn


@dataclass(frozen=True)
class ExpertSetup:
    """Demo 6: a mixture-of-experts layer over real ranks."""
    ep_ranks: int = 4                  # gloo processes; each holds n_experts / ep_ranks experts
    moe: MoEConfig = MoEConfig(n_experts=8, top_k=2, capacity_factor=1.25, tokens_per_rank=64)


@dataclass(frozen=True)
class ContextSetup:
    """Demo 7: the sequence over real ranks."""
    cp_ranks: int = 4
    case: CPCase = CPCase(seq_len=96, batch=2, n_embd=96, n_head=4)


QUICK_EXPERT = dict(ep_ranks=2)
QUICK_CONTEXT = dict(cp_ranks=2)
QUICK_BEYOND = dict(table_stages=(2, 4), table_micro=(4, 8))
QUICK_REAL = dict(pipe_ranks=2, pipe_micro=4, batch_size=4)   # m > p: GPipe and 1F1B hold different counts
QUICK_SCHEDULE = dict(table_stages=(1, 2, 4), table_micro=(1, 4, 8))
MAX_PIPE_RANKS = 4                     # 2 shared cores; and the 2-block model has 4 pieces to cut


# =============================================================================
# Demo 1: schedules, bubble, activation memory
# =============================================================================


# =============================================================================
# Demo 2: a real pipeline of the tiny GPT
# =============================================================================


# =============================================================================
# Demo 3: tensor parallelism
# =============================================================================


# =============================================================================
# Demo 4: 3D parallelism planner
# =============================================================================


# =============================================================================
# Command line
# =============================================================================

def parse_args(argv=None):
    s, r, pl = ScheduleSetup(), RealSetup(), PlanSetup()
    p = Parser(
        description="第 9 讲代码 4：流水线并行、张量并行、3D 并行 (lecture 9 code 4: pipeline, tensor, 3D parallelism)",
        epilog="例 example: --demo 1 --stages 4 --micro-batches 4 --t-backward 2；--demo 4 --plan-model 7B --plan-gpus 64")
    p.add_argument("--demo", choices=("1", "2", "3", "4", "5", "6", "7", "all"), default="all", help="跑哪个演示 which demo (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="很小的设置，秒级跑完（冒烟测试 smoke test）")
    add_figures_flag(p)                # fig09_04_*.svg: the schedules and the bubble (demo 1 or 5)
    g1 = p.add_argument_group("演示 1 demo 1")
    g1.add_argument("--stages", type=int_in(1, 16), default=s.n_stages, help="时间线的阶段数 p pipeline stages (default %(default)s)")
    g1.add_argument("--micro-batches", type=int_in(1, 64), default=s.n_micro,
                    help="时间线的 micro-batch 数 m (default %(default)s)")
    g1.add_argument("--t-backward", type=int_in(1, 4), default=s.t_backward,
                    help="一次反向是几个时间单位，1–4（前向是 1）backward time units, 1-4 (default %(default)s)")
    g2 = p.add_argument_group("演示 2-3 demos 2-3（真实进程 real ranks）")
    g2.add_argument("--pipe-ranks", type=int_in(2, MAX_PIPE_RANKS), default=r.pipe_ranks,
                    help="流水线阶段数 = 进程数 stages = processes (default %(default)s)")
    g2.add_argument("--pipe-micro-batches", type=positive_int, default=r.pipe_micro,
                    help="真实流水线的 micro-batch 数，要能整除 --batch-size (default %(default)s)")
    g2.add_argument("--batch-size", type=positive_int, default=r.batch_size, help="真实流水线的 batch（序列数）(default %(default)s)")
    g2.add_argument("--model-seed", type=non_negative_int, default=r.model_seed, help="初始权重的种子 model init seed (default %(default)s)")
    g2.add_argument("--data-seed", type=non_negative_int, default=r.data_seed, help="数据的种子 data seed (default %(default)s)")
    g2.add_argument("--tp-ranks", type=int_in(2, 4), default=r.tp_ranks, help="张量并行的进程数 tensor-parallel processes (default %(default)s)")
    g2.add_argument("--tp-size", type=int_in(2, 64), default=r.tp_size, help="流量表的 TP 大小 TP size of the traffic table (default %(default)s)")
    g4 = p.add_argument_group("演示 4 demo 4")
    g4.add_argument("--plan-model", choices=tuple(PLAN_MODELS), default=pl.model,
                    help="模型 model；8x7B 是混合专家 MoE (default %(default)s)")
    g4.add_argument("--plan-seq-len", type=int_in(128, 1048576), default=pl.seq_len,
                    help="序列长度，128–1048576 sequence length (default: 模型自己的 the model's)")
    g4.add_argument("--plan-gpus", type=int_in(1, 65536), default=pl.n_gpus, help="集群的卡数 GPUs in the cluster (default %(default)s)")
    g4.add_argument("--global-batch", type=positive_int, default=pl.global_batch,
                    help="每次迭代的序列数 sequences per iteration (default %(default)s)")
    g4.add_argument("--recompute", choices=("none", "selective", "full"), default=pl.recompute,
                    help="激活重算 activation recomputation (default %(default)s)")
    g4.add_argument("--zero-stage", type=int_in(0, 3), default=pl.zero_stage,
                    help="数据并行组里的 ZeRO 阶段 (default %(default)s)")
    g5 = p.add_argument_group("演示 5 demo 5（也用 --stages、--micro-batches 和演示 2 的真实进程参数）")
    g5.add_argument("--virtual-stages", type=int_in(1, 4), default=BeyondSetup.n_virtual,
                    help="交错 1F1B 每张卡放几段 v, 1-4 model chunks per rank (default %(default)s)")
    x, moe = ExpertSetup(), ExpertSetup.moe
    g6 = p.add_argument_group("演示 6 demo 6")
    g6.add_argument("--ep-ranks", type=int_in(2, 4), default=x.ep_ranks, help="专家并行的进程数 processes (default %(default)s)")
    g6.add_argument("--experts", type=int_in(1, 16), default=moe.n_experts,
                    help="专家数 E，要能被 --ep-ranks 整除 experts (default %(default)s)")
    g6.add_argument("--top-k", type=int, choices=(1, 2), default=moe.top_k, help="每个 token 去几个专家 (default %(default)s)")
    g6.add_argument("--capacity-factor", type=float_in(0, 8, low_open=True), default=moe.capacity_factor,
                    help="容量因子 cf，0–8 capacity factor (default %(default)s)")
    g6.add_argument("--tokens", type=int_in(1, 1024), default=moe.tokens_per_rank,
                    help="每个进程的 token 数 n tokens per rank (default %(default)s)")
    cx = ContextSetup()
    g7 = p.add_argument_group("演示 7 demo 7")
    g7.add_argument("--cp-ranks", type=int_in(2, 4), default=cx.cp_ranks, help="上下文并行的进程数 processes (default %(default)s)")
    g7.add_argument("--seq-len", type=int_in(8, 768), default=cx.case.seq_len,
                    help="序列长度，要能被 2·--cp-ranks 整除 sequence length (default %(default)s)")
    g7.add_argument("--cp-heads", type=int, choices=(1, 2, 3, 4, 6, 8), default=cx.case.n_head,
                    help="注意力头数（C = 96 要能整除）heads (default %(default)s)")
    args = p.parse_args(argv)
    schedule = replace(s, n_stages=args.stages, n_micro=args.micro_batches, t_backward=args.t_backward)
    real = replace(r, pipe_ranks=args.pipe_ranks, pipe_micro=args.pipe_micro_batches, batch_size=args.batch_size,
                   model_seed=args.model_seed, data_seed=args.data_seed, tp_ranks=args.tp_ranks, tp_size=args.tp_size)
    plan = replace(pl, model=args.plan_model, n_gpus=args.plan_gpus, global_batch=args.global_batch,
                   recompute=args.recompute, zero_stage=args.zero_stage, seq_len=args.plan_seq_len)
    beyond = BeyondSetup(n_stages=args.stages, n_micro=args.micro_batches, n_virtual=args.virtual_stages)
    expert = ExpertSetup(args.ep_ranks, replace(moe, n_experts=args.experts, top_k=args.top_k,
                                                capacity_factor=args.capacity_factor, tokens_per_rank=args.tokens))
    context = ContextSetup(args.cp_ranks, replace(cx.case, seq_len=args.seq_len, n_head=args.cp_heads))
    if args.quick:
        note_quick_overrides((*QUICK_EXPERT, *QUICK_CONTEXT, "pipe_ranks", "pipe_micro_batches", "batch_size"),
                             given_flags(p, argv))
        expert = replace(expert, **QUICK_EXPERT)
        context = replace(context, **QUICK_CONTEXT)
        real = replace(real, **QUICK_REAL)
        schedule = replace(schedule, **QUICK_SCHEDULE)
        beyond = replace(beyond, **QUICK_BEYOND)
    if real.batch_size % real.pipe_micro:
        p.error(f"--batch-size {real.batch_size} 不能被 --pipe-micro-batches {real.pipe_micro} 整除 (must be divisible)")
    if expert.moe.n_experts % expert.ep_ranks:
        p.error(f"--experts {expert.moe.n_experts} 不能被 --ep-ranks {expert.ep_ranks} 整除 (must be divisible)")
    if expert.moe.top_k > expert.moe.n_experts:
        p.error(f"--top-k {expert.moe.top_k} 比 --experts {expert.moe.n_experts} 多 (top-k needs that many experts)")
    if context.case.seq_len % (2 * context.cp_ranks):
        p.error(f"--seq-len {context.case.seq_len} 不能被 2 × --cp-ranks = {2 * context.cp_ranks} 整除"
                "（之字形切成 2p 块）(must be divisible)")
    return args, schedule, real, plan, beyond, expert, context


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    args, schedule, real, plan, beyond, expert, context = parse_args(argv)
    started = time.perf_counter()
    results = {}
    if args.demo in ("1", "all"):
        results["demo1"] = run_demo1(schedule)
        demo1_observations(schedule, results["demo1"])
        print()
    if args.demo in ("2", "3", "5", "6", "7", "all"):
        from lecture01 import tiny_gpt
        tiny_gpt.use_deterministic_threads()
    if args.demo in ("2", "all"):
        results["demo2"] = run_demo2(real)
        demo2_observations(real, results["demo2"])
        print()
    if args.demo in ("3", "all"):
        results["demo3"] = run_demo3(real)
        demo3_observations(real, results["demo3"])
        print()
    if args.demo in ("4", "all"):
        results["demo4"] = run_demo4(plan)
        demo4_observations(plan, results["demo4"])
        print()
    if args.demo in ("5", "all"):
        results["demo5"] = run_demo5(beyond, real)
        demo5_observations(beyond, real, results["demo5"])
        print()
    if args.demo in ("6", "all"):
        results["demo6"] = run_demo6(expert.moe, expert.ep_ranks)
        demo6_observations(expert.moe, expert.ep_ranks, results["demo6"])
        print()
    if args.demo in ("7", "all"):
        results["demo7"] = run_demo7(context.case, context.cp_ranks)
        demo7_observations(context.case, context.cp_ranks, results["demo7"])
    if args.figures:
        from lecture09.parallel.pipeline_figures import draw   # matplotlib only now
        draw(args.figures, beyond, results)
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return results


if __name__ == "__main__":
    run_main(main, failures=gloo_ranks.LAUNCH_FAILURES)
