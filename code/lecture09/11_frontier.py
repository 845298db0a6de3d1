"""
第 9 讲 · 代码 11：少通信训练的前沿——先从演示 1 最大的那一项说起：压缩流水线的激活
Lecture 9, code 11: the frontier of low-communication training — starting with the
largest term of demo 1's table: compressing the pipeline's activations.

这个文件回答的问题 (the question)
    代码 5、7 只压缩梯度。可是演示 1 里一张中间阶段的卡每次迭代发出的激活（前向）和激活的梯度
    （反向）比它的数据并行梯度还多。把激活也压缩（AQ-SGD，Wang、Yuan 等 2022）能省多少？
    演示 1 证明过的最优分配会不会因此改变？

    演示 1（demo 1）：
      表 (a)：小 GPT 的真实激活经过编码登记表（fp16、int8、4 bit），字节/值 从编码后的张量数出来；
        直接发激活和发"这次与上次见到同一批序列时的变化量"（AQ-SGD 的做法）各差多少。
      表 (b)：演示 1 的 1.3B 任务，流水线的字节按表 (a) 的 字节/值 缩小，重新求最优分配（分支定界），
        并把 fp16 时的最优分配按同样的字节再算一遍：分配变没变、每次迭代快多少。

对应讲义 (notes): lectures/lecture09_distributed_training.md 第 11 节

运行 (run):
    python3 code/lecture09/11_frontier.py                    # 几秒钟
    python3 code/lecture09/11_frontier.py --global-batch 512 --second-batch 0
    python3 code/lecture09/11_frontier.py --gap-steps 1      # 两次见到同一批序列之间只隔 1 步
    python3 code/lecture09/11_frontier.py --quick            # 更少的训练步（测试用）
需要 (needs): torch（表 (a) 训练小 GPT）；表 (b) 是纯算术，在任何机器上逐位相同（schedule/）。
表 (a) 的误差来自一次训练，随 CPU 和种子有小的变化；字节/值 只取决于形状和块大小。用时打印到 stderr。
"""

import sys
import time

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import Parser, apply_quick, given_flags, float_in, int_in, non_negative_int, run_main  # noqa: E402
from lecture01.console import print_header, print_wrapped  # noqa: E402
from lecture09.schedule.geo_network import PRESETS  # noqa: E402
from lecture09.schedule.schedule_setup import ScheduleSetup  # noqa: E402

GBPS = float_in(1e-2, 1e5)               # as code 5: 10 Mbit/s .. 100 Tbit/s
MAX_GLOBAL_BATCH = 100_000
MAX_MICRO_BATCHES = 64
# Table (a)'s training, written out so that --help needs no torch.
DEFAULTS = dict(warm_steps=60, gap_steps=10, block_size=256, model_seed=0, data_seed=1)
QUICK = dict(warm_steps=4, gap_steps=2)


def parse_args(argv=None):
    s = ScheduleSetup()
    p = Parser(description="第 9 讲代码 11：少通信训练的前沿 (lecture 9 code 11: the frontier)",
               epilog="例 example: --global-batch 512；--gap-steps 1；--network aws-world")
    p.add_argument("--quick", action="store_true", help="更少的训练步，几秒钟（冒烟测试 smoke test）")
    ga = p.add_argument_group("表 (a) 小 GPT 的激活 table (a)")
    ga.add_argument("--warm-steps", type=non_negative_int, default=DEFAULTS["warm_steps"],
                    help="训练多少步时第一次见到这批序列 steps before the earlier visit (default %(default)s)")
    ga.add_argument("--gap-steps", type=int_in(1, 10_000), default=DEFAULTS["gap_steps"],
                    help="再过多少步又见到它们 steps between the two visits (default %(default)s)")
    ga.add_argument("--block-size", type=int_in(1, 1 << 20), default=DEFAULTS["block_size"],
                    help="int8 / 4 bit 每块几个值共用一个缩放因子 values per scale (default %(default)s)")
    ga.add_argument("--model-seed", type=non_negative_int, default=DEFAULTS["model_seed"],
                    help="模型初始化的种子 model init seed (default %(default)s)")
    ga.add_argument("--data-seed", type=non_negative_int, default=DEFAULTS["data_seed"],
                    help="数据顺序的种子 data order seed (default %(default)s)")
    gb = p.add_argument_group("表 (b) 演示 1 的任务 table (b): demo 1's job")
    gb.add_argument("--network", choices=("random",) + tuple(PRESETS), default=s.network,
                    help="random: 演示 1 的随机 4 地区网络；aws-*: Yuan et al. 实测的 AWS 链路 (default %(default)s)")
    gb.add_argument("--net-seed", type=non_negative_int, default=s.net_seed,
                    help="随机网络的种子 seed of the random network (default %(default)s)")
    gb.add_argument("--intra-gbps", type=GBPS, default=s.intra_gbps, help="地区内带宽 Gbit/s (default %(default)s)")
    gb.add_argument("--global-batch", type=int_in(1, MAX_GLOBAL_BATCH), default=s.global_batch,
                    help="全局 batch（序列数），决定激活流量 (default %(default)s)")
    gb.add_argument("--second-batch", type=int_in(0, MAX_GLOBAL_BATCH), default=s.second_batch,
                    help="第二个 batch，0 = 不算 second batch, 0 = none (default %(default)s)")
    gb.add_argument("--micro-batches", type=int_in(1, MAX_MICRO_BATCHES), default=s.n_micro_batches,
                    help="每个副本的微批次数 M (default %(default)s)")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(args, QUICK, given_flags(p, argv))
    if args.global_batch < s.n_replicas or (args.second_batch and args.second_batch < s.n_replicas):
        p.error(f"a global batch must give each of the {s.n_replicas} replicas at least one sequence")
    setup = ScheduleSetup(network=args.network, net_seed=args.net_seed, intra_gbps=args.intra_gbps,
                          global_batch=args.global_batch, second_batch=args.second_batch,
                          n_micro_batches=args.micro_batches)
    return args, setup


def main(argv=None):
    args, setup = parse_args(argv)
    started = time.perf_counter()
    from lecture01.tiny_gpt import TrainConfig
    from lecture09.compress import activation_codes
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture09.schedule import activation_pricing
    from lecture09.schedule.schedule_setup import build_networks

    print_header("演示 1：压缩流水线的激活（AQ-SGD）——演示 1 的最优分配会变吗？")
    print(f"训练小 GPT {args.warm_steps + args.gap_steps} 步……", file=sys.stderr, flush=True)
    study = activation_codes.study(MODEL_CONFIG, TrainConfig(), model_seed=args.model_seed, data_seed=args.data_seed,
                                   warm_steps=args.warm_steps, gap_steps=args.gap_steps, block_size=args.block_size)
    activation_codes.print_study(study, args.block_size, print_wrapped)
    print()
    geo, _ = build_networks(setup)
    batches = [setup.global_batch] + ([setup.second_batch] if setup.second_batch else [])
    encodings = {activation_codes.label(c.scheme, args.block_size): c.bytes_per_value for c in study.codes}
    rows = activation_pricing.price_encodings(setup, geo, encodings, batches)
    activation_pricing.print_pricing(setup, rows, print_wrapped)
    print("\n观察 observations：")
    observations = (activation_codes.study_observations(study, args.block_size)
                    + activation_pricing.pricing_observations(setup, rows))
    for i, text in enumerate(observations, 1):
        print_wrapped(f"  {i}. {text}。" if not text.endswith("。") else f"  {i}. {text}", indent="     ")
    print(f"（总用时 total {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return {"study": study, "rows": rows, "observations": observations}


if __name__ == "__main__":
    run_main(main)
