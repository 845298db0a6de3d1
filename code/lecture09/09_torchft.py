"""
第 9 讲 · 代码 9：在真正的引擎上容错——torchft 的法定人数、杀进程和现场恢复
Lecture 9, code 9: fault tolerance on a real engine — torchft's quorum, a killed replica,
and live recovery from a peer.

这个文件回答的问题 (the question)
    代码 6 的训练群是我们自己写的服务器。业界的容错训练用什么？torchft（Meta，和 torchtitan
    一起用）：一个 Lighthouse 每一步召集一次法定人数 (quorum)，每个副本组 (replica group) 一个
    Manager；一个副本死了，其余的照常提交；它重启以后从健康的同伴 (peer) 那里下载状态，接着训练。

    (a)(b)(c)：三种训练方式各跑一遍——容错 DDP（每步一次法定人数）、DiLoCo（每 H 步同步一次）、
               流式 DiLoCo（模型切成几段，轮流同步）。每遍都在训练到 30% 时 SIGKILL 副本 2，
               到 50% 时重启它。时间线：每次法定人数里有谁，哪一步被丢弃，谁从同伴恢复、下载多少字节。
    (d)：三遍放在一起，以及结束时副本之间的最大差。
    (e)：不杀进程时，torchft 的 DiLoCo 和我们自己的模拟 (compress/local_sgd.py) 逐次同步比较。

对应讲义 (notes): lectures/lecture09/09_torchft.md §9

运行 (run):
    python3 code/lecture09/09_torchft.py                        # (a)–(e)；用时见 README 的表（中位数）
    python3 code/lecture09/09_torchft.py --modes diloco --inner-steps 20
    python3 code/lecture09/09_torchft.py --kill-at 0.2 --restart-at 0.8
    python3 code/lecture09/09_torchft.py --no-restart           # 副本 2 不回来
    python3 code/lecture09/09_torchft.py --quick                # 很小的设置（测试用）
需要 (needs): Linux 上的 torchft 0.2.0（requirements.txt 装好）；本目录的 engines/。只用 127.0.0.1。
用时打印到 stderr。
"""

import sys
import time

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import Parser, add_figures_flag, apply_quick, float_in, given_flags, int_in, run_main  # noqa: E402
from lecture01.console import print_header, print_wrapped, utf8_output  # noqa: E402

MODES = ("ddp", "diloco", "streaming")          # engines.torchft_replica.MODES (a test checks)
DEFAULTS = dict(modes=MODES, replicas=3, ddp_steps=100, outer_steps=12, inner_steps=10, fragments=2,
                sync_delay=1, kill_at=0.3, restart_at=0.5, timeout=10.0, check=True, heartbeat_ms=1500, join_ms=2000,
                model_seed=0, data_seed=1)
QUICK = dict(ddp_steps=60, outer_steps=6, inner_steps=4)
SIM_TOLERANCE = 1e-5      # measured here: 1.6e-7 (losses), 1.4e-8 (bpc); the same arithmetic in a
#                           different order, so anything near 1e-3 would be a real difference
UNAVAILABLE = "torchft 只有 Linux 的 wheel，代码 9 请在 Linux 或 WSL 里运行 (torchft ships Linux wheels only)"


def build_parser():
    p = Parser(description="第 9 讲 代码 9：torchft 上的容错训练（Lighthouse、法定人数、杀进程、现场恢复）。")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(DEFAULTS["modes"]), metavar="MODE",
                   help="训练方式 modes（可多选）：ddp（每步同步 every step）、diloco（每 H 步）、streaming（分段轮流 fragments in turn）")
    p.add_argument("--replicas", type=int_in(3, 4), default=DEFAULTS["replicas"],
                   help="副本组 replica groups 的个数（每组 1 个 gloo rank）；至少 3：杀掉一个还剩法定的 2 个 (quorum of 2)")
    p.add_argument("--ddp-steps", type=int_in(10, 2000), default=DEFAULTS["ddp_steps"], help="DDP 的训练步数 training steps")
    p.add_argument("--outer-steps", type=int_in(4, 200), default=DEFAULTS["outer_steps"],
                   help="DiLoCo 的外层步数 outer steps（流式：每段各这么多次同步 syncs per fragment）")
    p.add_argument("--inner-steps", type=int_in(2, 100), default=DEFAULTS["inner_steps"], help="H：每次同步之间的内层步数 inner steps per sync")
    p.add_argument("--fragments", type=int_in(2, 3), default=DEFAULTS["fragments"], help="流式 DiLoCo 的段数 fragments")
    p.add_argument("--sync-delay", type=int_in(0, 99), default=DEFAULTS["sync_delay"],
                   help="流式 DiLoCo 的 τ：一段的全归约和之后几个内层步重叠 overlap（< H / 段数）")
    p.add_argument("--kill-at", type=float_in(0, 1, low_open=True, high_open=True), default=DEFAULTS["kill_at"],
                   help="训练进行到这个比例 fraction 时 SIGKILL 副本 2（按 torchft 的步数 steps）")
    p.add_argument("--restart-at", type=float_in(0, 1, low_open=True, high_open=True),
                   default=DEFAULTS["restart_at"], help="进行到这个比例时重启 restart 它（须大于 --kill-at）")
    p.add_argument("--no-restart", action="store_true", help="被杀的副本不再回来 (no restart)")
    p.add_argument("--no-failure", action="store_true", help="不杀任何进程（对照 control run, no failure）")
    p.add_argument("--kill-lighthouse", action="store_true",
                   help="再跑一遍 (f)：不杀副本，在 --kill-at 时停掉 Lighthouse (stop the Lighthouse)，看训练怎样停下")
    p.add_argument("--heartbeat-ms", type=int_in(200, 10000), default=DEFAULTS["heartbeat_ms"],
                   help="Lighthouse 把多久没有心跳 heartbeat 的副本当作死了，毫秒")
    p.add_argument("--join-ms", type=int_in(100, 30000), default=DEFAULTS["join_ms"],
                   help="法定人数最多等一个有心跳、还没报名的副本多久 (join timeout)，毫秒")
    p.add_argument("--no-check", dest="check", action="store_false", help="跳过 (e)：和我们的模拟比较 (skip the simulation check)")
    p.add_argument("--model-seed", type=int_in(0, None), default=DEFAULTS["model_seed"],
                   help="模型初始化的种子 model init seed（每个副本同一个）")
    p.add_argument("--data-seed", type=int_in(0, None), default=DEFAULTS["data_seed"],
                   help="数据顺序的种子 data order seed（抽整个 batch 的生成器）")
    p.add_argument("--timeout", type=float_in(1, 120), default=DEFAULTS["timeout"],
                   help="每次全归约和状态下载的时限 timeout，秒；法定人数等它的 2 倍（gloo 默认 1800 s，这里从不用它）")
    p.add_argument("--quick", action="store_true", help="很小的设置，给测试用 (tiny settings for tests)")
    add_figures_flag(p)                # fig09_09_membership.svg: who was in each quorum, against time
    return p


class UsageError(Exception):
    exit_status = 2


def settings_for(args, mode):
    from lecture09.engines.torchft_replica import ReplicaSettings

    steps = args.ddp_steps if mode == "ddp" else args.outer_steps * (args.fragments if mode == "streaming" else 1)
    return ReplicaSettings(mode=mode, n_replicas=args.replicas, outer_steps=steps,
                           inner_steps=1 if mode == "ddp" else args.inner_steps,
                           fragments=args.fragments, sync_delay=args.sync_delay, timeout_s=args.timeout,
                           model_seed=args.model_seed, data_seed=args.data_seed)


def failure_for(args, steps):
    from lecture09.engines.torchft_run import Failure

    if args.no_failure:
        return None
    kill = max(1, round(args.kill_at * steps))
    restart = None if args.no_restart else max(kill + 1, round(args.restart_at * steps))
    return Failure(replica=2, kill_at=kill, restart_at=restart)


def check_args(args):
    if args.restart_at <= args.kill_at and not args.no_restart:
        raise UsageError("--restart-at 必须大于 --kill-at (must be later than --kill-at)")
    if "streaming" in args.modes:
        per_fragment = args.inner_steps // args.fragments
        if args.inner_steps % args.fragments:
            raise UsageError(f"--inner-steps {args.inner_steps} 不能被 --fragments {args.fragments} 整除 "
                             "(torchft needs H divisible by the fragments)")
        if args.sync_delay >= per_fragment:
            raise UsageError(f"--sync-delay 必须小于 H / 段数 = {per_fragment} (torchft: τ < H / fragments)")


def fragment_sizes(n):
    from lecture01 import tiny_gpt
    from lecture09.engines.torchft_replica import fragments_of
    from lecture09.lecture_model import MODEL_CONFIG

    return [sum(p.numel() for p in f.parameters()) for f in fragments_of(tiny_gpt.make_model(MODEL_CONFIG), n)]


def progress(label):
    started = time.perf_counter()

    def on_event(event):
        if event.replica == 0 and sys.stderr.isatty():
            print(f"\r  {label}：torchft 第 {event.step} 步 step", end="", file=sys.stderr, flush=True)
    return on_event, started


def finished(label, started):
    """One stderr line per run (over the progress line, on a terminal)."""
    print(f"\r  {label}：{time.perf_counter() - started:.1f} s" + " " * 24, file=sys.stderr)


def sim_check(args):
    from lecture09.engines import reference, torchft_run

    s = settings_for(args, "diloco")
    on_event, started = progress("(e) 不杀进程的 DiLoCo")
    record = torchft_run.run(s, None, on_event=on_event)
    finished("(e) 不杀进程的 DiLoCo", started)
    result = reference.diloco_simulation(s.n_replicas, s.outer_steps, s.inner_steps, s.batch_per_replica,
                                         s.peak_lr, s.outer_lr, s.outer_momentum, s.model_seed, s.data_seed)
    losses = []
    for k in range(1, s.outer_steps + 1):
        at_sync = [e.loss for e in record.events if e.step == k and e.committed]
        losses.append(sum(at_sync) / len(at_sync))
    return reference.sim_check(losses, s.inner_steps, record.finals[0], result)


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        apply_quick(args, QUICK, given_flags(parser, argv if argv is not None else sys.argv[1:]))
    check_args(args)
    import os

    os.environ.setdefault("RUST_LOG", "error")   # torchft's Rust servers: errors only (read at import)
    from lecture09.engines import unavailable

    why = unavailable("torchft", sys.platform.startswith("linux"), UNAVAILABLE)
    if why:
        print(why, file=sys.stderr)
        return 2
    from lecture09.engines import reference
    from lecture09.engines import torchft_report as report
    from lecture09.engines import torchft_run
    from lecture09.engines.torchft_replica import QUORUM_WAITS
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture01 import tiny_gpt

    started = time.perf_counter()
    print_header("第 9 讲 · 代码 9：torchft 上的容错训练 fault tolerance on a real engine")
    print_wrapped(f"{args.replicas} 个副本组 replica groups，各 1 个 gloo rank、各自一个进程；一个 Lighthouse；"
                  f"全在 127.0.0.1。法定人数至少 {torchft_run.MIN_REPLICAS} 个副本 "
                  f"(min_replicas = {torchft_run.MIN_REPLICAS})。每次全归约和状态下载的时限 "
                  f"{args.timeout:g} s，一次法定人数的 {QUORUM_WAITS * args.timeout:g} s；Lighthouse 把 "
                  f"{args.heartbeat_ms} ms 没有心跳的副本当作死了，凑法定人数时最多等一个有心跳、还没报名的副本 "
                  f"{args.join_ms} ms (join timeout)。")
    if not args.no_failure:
        print_wrapped(f"故障 failure：训练到 {args.kill_at:.0%} 时 SIGKILL 副本 2（不让它清理，像断电）"
                      + ("。" if args.no_restart else f"；到 {args.restart_at:.0%} 时重启它：一个已经 import 好 "
                         "torch 的备用进程，从零状态加入，从同伴那里恢复。"))
    summaries, records = [], []
    for letter, mode in zip("abc", args.modes):
        s = settings_for(args, mode)
        failure = failure_for(args, s.outer_steps)
        on_event, t = progress(f"({letter}) {mode}")
        record = torchft_run.run(s, failure, on_event=on_event, heartbeat_timeout_ms=args.heartbeat_ms,
                                 join_timeout_ms=args.join_ms)
        finished(f"({letter}) {mode}", t)
        what = ("每步一次法定人数、一次梯度全归约" if mode == "ddp" else
                f"每 {s.inner_steps} 个内层步同步一次伪梯度，外层 SGD（Nesterov）" if mode == "diloco" else
                f"{s.fragments} 段轮流，每 {s.inner_steps // s.fragments} 个内层步同步一段，"
                f"重叠 τ = {s.sync_delay} 步")
        print()
        print_header(f"({letter}) {report.MODE_WORDS[mode]}：{what}", "-")
        if mode == "streaming":
            print_wrapped("  段的大小 fragment sizes：" + " + ".join(f"{n:,}" for n in fragment_sizes(s.fragments))
                          + " 个参数（嵌入、各个变换器块、最后的 LayerNorm 和输出层，按顺序连成几段）")
        report.print_lines(report.timeline_lines(record))
        summaries.append(report.summarize(record, reference.bpc_of(record.finals[0])))
        records.append((mode, record))
    print()
    print_header("(d) 放在一起：提交、丢弃、缺席（被杀的副本不在其中的已提交步）的步数，单位是各自的 torchft 步", "-")
    report.print_lines(report.summary_lines(summaries))
    print_wrapped("空窗 = 从杀进程到幸存者下一次提交的秒数，恢复 s = 重启的副本那次法定人数（含下载）的秒数："
                  "都是这台机器上的实测 [实测]。终态 = 每个副本结束时的 θ_global 和副本 0 的最大差。")
    param_bytes = 4 * tiny_gpt.make_model(MODEL_CONFIG).n_params()
    waits = (args.heartbeat_ms / 1000, args.join_ms / 1000)
    for line in report.summary_observations(summaries, param_bytes, victim=2, waits_s=waits):
        print_wrapped("· " + line)
    if args.check:
        check = sim_check(args)
        print()
        print_header(f"(e) 不杀进程：torchft 的 DiLoCo 和我们的模拟 compress/local_sgd.py（同样的种子、H = "
                     f"{args.inner_steps}、{args.replicas} 个工作者）", "-")
        report.print_lines(reference.sim_check_lines(check, SIM_TOLERANCE))
    if args.kill_lighthouse:
        s = settings_for(args, args.modes[0])
        failure = torchft_run.Failure(kill_at=max(1, round(args.kill_at * s.outer_steps)), restart_at=None,
                                      lighthouse=True)
        on_event, t = progress("(f) 停掉 Lighthouse")
        record = torchft_run.run(s, failure, on_event=on_event, heartbeat_timeout_ms=args.heartbeat_ms,
                                 join_timeout_ms=args.join_ms)
        finished("(f) 停掉 Lighthouse", t)
        print()
        print_header(f"(f) {report.MODE_WORDS[s.mode]}，在第 {failure.kill_at} 步停掉 Lighthouse（不杀副本）", "-")
        report.print_lines(report.timeline_lines(record))
        report.print_lines(report.lighthouse_lines(record, s.quorum_timeout_s))
    if args.figures:
        from lecture09.engines.engine_figures import draw_torchft   # matplotlib only now
        draw_torchft(args.figures, records)
    print(f"用时 elapsed: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from lecture09.engines.torchft_run import EngineFailed

    run_main(main, failures=(EngineFailed, UsageError))
