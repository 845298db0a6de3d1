"""第 9 讲 代码 6：HTTP 上真实的训练群 a real training swarm over HTTP——参数服务器、工作者进程、
压缩上传，以及一个检查收到的每一样东西、限制每个客户端能做什么的服务器。

问题：代码 5 在一个进程里模拟了带梯度压缩的数据并行。如果工作者（worker）是独立的进程，
通过 HTTP 和参数服务器（parameter server）通信，像互联网上的志愿者训练群（volunteer swarm）
那样，会有什么变化？服务器可以信任什么，又必须检查什么？线上一共走了多少字节、多少次往返？
讲义 Notes: lectures/lecture09/06_swarm_http.md 第 6 节（从模拟到真实的训练群）。

默认运行（用时见 README：2 核机器上的中位数；4 个工作者进程，60 步）：
  (1) 每种压缩方式 compression mode（none、topk、topk-int8）训练一次：127.0.0.1 上（一个空闲
      端口）的 HTTP 服务器持有小 GPT（lecture_model.MODEL_CONFIG）和它的优化器；4 个工作者进程循环
      GET /weights -> 在本地一批 8 条序列上算梯度 -> 带误差反馈 error feedback 的压缩 ->
      POST /gradients；服务器每轮收齐 4 个工作者各一份上传，求平均，走一步优化器（同步 sync）。
      打印：每次上传的 HTTP body 字节及其中的 safetensors 头部、模型化上行带宽下的上传时间、
      训练损失和验证 bits per char。stderr 上（和表分开）：测得的每步计算时间和空闲比例。
  (1b) 两个方向的全部字节（服务器在 socket 上数，含 HTTP 头部和每步的权重下载）、每次上传的请求数，
      和模型化的一步通信时间：往返（RTT 50 ms，--rtt-ms；每个请求 2 次往返）+ 上行 + 下行。
  (2) 每种坏上传各发一次给一个新服务器：它回答的状态码和原因、每次之后的健康状况，最后一轮有效上传。
  同一条命令，同样的 stdout：同步轮按工作者编号顺序求和，每个工作者用自己的带种子的生成器抽
  batch，权重按位精确地传输。

端点 Endpoints:
  GET  /weights[?after=V]  参数的 safetensors body；响应头 X-Model-Version（= 已走的优化器步数）
                           和 X-Training-Done；带 after 时等待（long poll，最多 long_poll_s）直到
                           版本比 V 新。
  POST /gradients          compression.py 线上约定的载荷 payload，请求头 X-Model-Version、
                           X-Worker-Id、X-Loss、X-Compression（compression.WIRE_MODES 之一），服务器
                           有 token 时还要 Authorization: Bearer <token>。回答 200 JSON {accepted,
                           applied, version}；拒绝时是 JSON {accepted: false, code, error}，code 是
                           swarm_protocol.REFUSALS 里的一个（工作者按 code 决定重新拉取、等待还是停下）。
  GET  /status             JSON：版本、步数、待处理上传、最近的损失、health、各种计数。
  读取是公开的，只有上传要 token。服务器信任 token 持有者自报的工作者编号和损失（损失只用于
  显示）；凡是会进入模型的东西，都按服务器自己的参数形状检查，每份上传先裁剪到一个范数上限。

代码在哪里 Where the code is（都在 code/lecture09/swarm/）：swarm_protocol.py（设置、拒绝码、按顺序的
全部检查）、swarm_server.py（参数服务器的逻辑）、swarm_http.py（HTTP 层：截止时间、连接上限、
字节计数）、swarm_worker.py（工作者和进程池）、swarm_bad_uploads.py（坏上传的那一张表，表 (2)
和测试共用）、swarm_report.py（默认运行：训练群、表和观察）。这个脚本只有设置、参数和 main()。

选择 Choices：优化器是第 1 讲的（tiny_gpt.make_adamw：AdamW，矩阵 weight decay 0.1，betas
0.9/0.95；tiny_gpt.lr_at 预热 + 余弦，峰值 3e-3），平均之后做全局裁剪 1.0。同一轮里已有上传的
工作者再传一份，拒绝（409）而不是替换。客户端是带 TCP_NODELAY 的 urllib（否则每个请求的 body
要等约 40 ms 的延迟 ACK）；服务器是 http.server 的 ThreadingHTTPServer。Ctrl-C 在任何模式下
都只打印一行并以状态 130 退出，不留下进程。

运行 Run（在仓库根目录 from the repository root）：
  python3 code/lecture09/06_swarm_http.py                          # 默认：(1) 和 (2)，时间见 README
  python3 code/lecture09/06_swarm_http.py --steps 40 --modes topk  # 更短，只一种压缩
  python3 code/lecture09/06_swarm_http.py --update async           # 每份上传走一步，学习率乘 1/(1+age)
  python3 code/lecture09/06_swarm_http.py --aggregator median --attack tiny-dense   # 第 8 节
  分开跑，每个一个终端 by parts, one terminal each:
  python3 code/lecture09/06_swarm_http.py --serve --port 8000 --token secret --workers 2
  python3 code/lecture09/06_swarm_http.py --worker http://127.0.0.1:8000 --worker-id 0 --token secret
  python3 code/lecture09/06_swarm_http.py --worker http://127.0.0.1:8000 --worker-id 1 --token secret
  每个工作者自己的 token：--serve --token-file tokens.txt（每行 `worker_id token`）；
  工作者照旧用 --token 给出自己那一个，用别人的编号上传得到 403 wrong_worker。
  python3 code/lecture09/06_swarm_http.py --help                   # 所有参数 every flag

需要 torch、safetensors 和标准库（http.server、urllib）：没有 web 框架。
来源 Sources：线上约定和参数服务器不能有的缺陷，来自课程参考资料里描述的一个志愿者训练系统；
误差反馈：Seide et al. 2014；Lin et al. 2018（Deep Gradient Compression）。
"""

import os
import sys
import time
from dataclasses import replace
from pathlib import Path

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import (Parser, add_figures_flag, apply_quick, given_flags,   # noqa: E402
    run_main, int_in, non_negative_int, positive_float, positive_int, ratio)
from lecture01.console import print_header, print_wrapped, utf8_output  # noqa: E402
from lecture09.swarm.swarm_flags import (PORT, WORKER_COUNT, WORKER_ID, mode_list,  # noqa: E402  (no torch)
    add_relay_flags, check_relay_links, non_negative_float, read_token_file, server_url, token, wire_mode)
from lecture09.swarm.swarm_protocol import (WIRE_ATTACKS, ServerConfig,  # noqa: E402  (no torch)
                                            WorkerConfig, new_worker_tokens)

# robust.aggregators.AGGREGATORS, written out so that --help needs no torch (a test checks they agree)
AGGREGATOR_NAMES = ("mean", "median", "trimmed-mean", "krum", "multi-krum", "centered-clip")
from lecture09.swarm.swarm_report import (  # noqa: E402,F401  (no torch in it; the tests reach some here)
    DEFAULT_DOWNLINK_MBYTE_PER_S, DEFAULT_RTT_MS, DEFAULT_UPLINK_MBYTE_PER_S, HEADER_SHARE_SIGNIFICANT, Link,
    SwarmResult, bf16_weights_bytes, demo_server_checks, print_server_checks, print_timing, print_traffic_table,
    print_wire_table, run_swarm, traffic_observations, wire_observations)

# torch (about 1.5 s to import) and the modules built on it are imported inside the
# functions that need them, after the flags are parsed: --help and a flag error answer at once.
# ---------------------------------------------------------------------------
# Settings a student may change (each is also a flag)
# ---------------------------------------------------------------------------

QUICK = {"steps": 6, "workers": 2}     # --quick: what the golden test runs
QUICK_TEXT = "--steps 6 --workers 2"
SERVER = ServerConfig()              # world size 4, sync, 60 steps, clip 1.0, ... (swarm_protocol.py)
WORKER = WorkerConfig()              # top-k 1%, batch 8, data seed 1, ...
DEFAULT_MODES = "all"                # every mode of compression.WIRE_MODES: none, topk, topk-int8


# ---------------------------------------------------------------------------
# What the server checks: every row of swarm_bad_uploads.BAD_UPLOADS, then a valid round
# ---------------------------------------------------------------------------


def server_config_from(args, token):
    return replace(SERVER, world_size=args.workers, update=args.update, steps=args.steps,
                   round_deadline_s=args.round_deadline_s, min_workers=args.min_workers,
                   max_staleness=args.max_staleness,
                   max_body_bytes=args.max_body_bytes, model_seed=args.seed, token=token,
                   aggregator=args.aggregator, byzantine=args.byzantine, update_clip=args.update_clip,
                   worker_tokens=getattr(args, "worker_tokens", ()), compression=args.compression, topk_ratio=args.topk_ratio)


def run_default(args):
    import torch
    from lecture01.tiny_gpt import load_world_tokens, make_model
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture09.swarm.swarm_membership import (churn_deadline_s, churn_plan, print_churn, print_no_churn,
                                                  run_churn)
    from lecture09.swarm.swarm_pool import start_worker_pool, stop_worker_pool, wait_until_ready
    import lecture09.swarm.swarm_worker  # noqa: F401  (imported before the pool forks: the workers have it)

    torch.set_num_threads(1)
    # Table (3) kills one worker: with a robust aggregator the rest must still fill a round
    floor = server_config_from(args, None).round_floor
    plan = churn_plan(args.steps, args.workers) if args.update == "sync" and floor <= args.workers - 1 else None
    # First, while this process has one thread: on Linux the pool forks (swarm_pool.py), and
    # the workers share our copy of the data. One spare process joins in table (3).
    train_tokens, val_tokens = load_world_tokens()
    pool = start_worker_pool(args.workers + (plan is not None), train_tokens=train_tokens)
    workers = pool[:args.workers]
    finished, churn = False, None
    try:
        model = make_model(MODEL_CONFIG, seed=args.seed)
        n_params, n_tensors = model.n_params(), len(list(model.parameters()))
        if args.token is None:    # per-worker tokens (the joiner of table (3) too): none uploads as another
            args.worker_tokens = new_worker_tokens(args.workers + 1)
        server_config = server_config_from(args, args.token)
        print_header(f"代码 6：HTTP 上的训练群 a training swarm over HTTP（{args.workers} 个工作者 workers，"
                     f"{args.update}，{server_config.total_updates} 步，每个 batch {args.batch_size}）")
        if args.aggregator != "mean" or args.attack != "none" or args.update_clip:
            capped = f"；每步 |Δw| ≤ {args.update_clip:g}" if args.update_clip else ""
            print_wrapped(f"聚合器 aggregator：{args.aggregator}（f = {args.byzantine}）{capped}；最后一个工作者发："
                          f"{args.attack}（{WIRE_ATTACKS[args.attack]}）。第 8 节。")
        if args.update == "async":
            print_wrapped(f"async：每份上传走一步，{args.steps} 轮的数据 = {server_config.total_updates} 步，"
                          f"和 sync 的 {args.steps} 步看到同样多的 batch（like for like）。")
        sys.stdout.flush()   # progress lines go to stderr while the swarms train
        wait_until_ready(pool)
        results = []
        for mode in args.modes:
            worker_config = replace(WORKER, compression=mode, topk_ratio=args.topk_ratio, batch_size=args.batch_size,
                                    data_seed=args.data_seed, token=server_config.token,
                                    retry_budget_s=args.retry_budget_s)
            result = run_swarm(workers, replace(server_config, compression=mode), worker_config, val_tokens, args.attack)
            print(f"  {mode}: {result.steps} 步 steps, {result.wall_s:.1f} s", file=sys.stderr, flush=True)
            results.append(result)
        if plan is not None:   # last: it kills one of the pool's processes
            churn_mode = "topk" if "topk" in args.modes else args.modes[0]
            start_s = time.perf_counter()
            deadline_s = churn_deadline_s(results[args.modes.index(churn_mode)])
            churn = run_churn(workers, pool[-1], replace(server_config, compression=churn_mode),
                              replace(worker_config, compression=churn_mode), val_tokens, plan, deadline_s)
            print(f"  churn ({churn_mode}): {time.perf_counter() - start_s:.1f} s", file=sys.stderr, flush=True)
        finished = True
    finally:
        stop_worker_pool(pool, at_once=not finished)

    link = Link(args.uplink_mbyte_per_s, args.downlink_mbyte_per_s, args.rtt_ms)
    print("\n(1) 每种压缩训练一次 one training run per compression mode")
    print_traffic_table(results, args.workers, link, n_params)
    print("\n(1b) 两个方向的全部字节和模型化的通信时间 every byte both ways, and a modeled step")
    print_wire_table(results, link)
    print("\n(2) 服务器检查什么 what the server checks：每种坏上传发一次，之后看它是否健康")
    print_server_checks(*demo_server_checks())
    if churn is not None:
        print_churn(churn, results[args.modes.index(churn_mode)], churn_mode, args.figures)
    else:
        if args.update == "async":
            why = "--update async 没有轮次 no rounds"
        elif floor > args.workers - 1:
            why = (f"--aggregator {args.aggregator} 一轮要至少 {floor} 份上传，掉线一个以后只剩 {args.workers - 1} 个 "
                   f"(needs --workers >= {floor + 1})")
        else:
            why = "要 needs --workers >= 2, --steps >= 3"
        print_no_churn(why)

    print("\n观察 Observations:")
    notes = (traffic_observations(results, n_params, n_tensors, args.topk_ratio)
             + wire_observations(results, link, n_params, bf16_weights_bytes(model)))
    for i, text in enumerate(notes, 1):
        print_wrapped(f" {i}. {text}")
    sys.stdout.flush()
    print_timing(results, link, sys.stderr, relay=(args, server_config, worker_config, val_tokens) if args.relay else None)
    return results


# ---------------------------------------------------------------------------
# Running by parts: --serve and --worker
# ---------------------------------------------------------------------------

def script_path():
    """This script's path as the user can type it from the current directory."""
    path = Path(__file__).resolve()
    try:
        return os.path.relpath(path)
    except ValueError:   # another drive (Windows)
        return str(path)


def run_serve(args):
    """The parameter server alone (swarm/swarm_serve.py): until SIGTERM or Ctrl-C, then a
    checkpoint and status 0."""
    from lecture09.swarm.swarm_serve import serve
    config = replace(server_config_from(args, args.token), checkpoint_dir=args.checkpoint_dir or None,
                     checkpoint_every=args.checkpoint_every)
    return serve(config, args.port, args.verbose, args.resume, script_path())


def run_worker_cli(args):
    import urllib.error

    import torch
    from lecture09.swarm.swarm_worker import Worker

    torch.set_num_threads(1)
    config = replace(WORKER, worker_id=args.worker_id, compression=args.compression, topk_ratio=args.topk_ratio,
                     batch_size=args.batch_size, data_seed=args.data_seed, token=args.token,
                     retry_budget_s=args.retry_budget_s, attack=args.attack)
    url = args.worker.rstrip("/")
    print(f"工作者 worker {config.worker_id} -> {url} ({config.compression})", flush=True)
    try:
        stats = Worker(url, config, log=lambda line: print(line, flush=True)).run()
    except (urllib.error.URLError, ConnectionError, TimeoutError, RuntimeError) as error:
        print(f"工作者停止 worker stopped: {error}", file=sys.stderr)
        return 1
    print(f"上传 uploads {stats['uploads']}, 接受 accepted {stats['accepted']}, "
          f"发送 sent {stats['body_bytes_sent']:,} 字节 bytes, 拒绝 rejected {stats['rejected'] or 0}", flush=True)
    if stats["error"]:
        print(stats["error"], file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

# Which flags each mode reads; any other flag given is refused (exit 2), never silently ignored.
ROLE_FLAGS = {
    "default": {"quick", "workers", "steps", "modes", "update", "round_deadline_s", "min_workers", "max_staleness",
                "relay", "relay_links", "max_body_bytes", "uplink_mbyte_per_s", "downlink_mbyte_per_s", "rtt_ms", "token", "topk_ratio",
                "figures", "batch_size", "seed", "data_seed", "retry_budget_s", "aggregator", "byzantine", "attack", "update_clip"},
    "serve": {"serve", "workers", "steps", "update", "round_deadline_s", "min_workers", "max_staleness",
              "max_body_bytes", "port", "token", "seed", "verbose", "checkpoint_dir", "checkpoint_every", "resume",
              "aggregator", "byzantine", "token_file", "update_clip", "compression", "topk_ratio"},
    "worker": {"worker", "token", "worker_id", "compression", "topk_ratio", "batch_size", "data_seed",
               "retry_budget_s", "attack"},
}
ROLE_NAMES = {"default": "默认运行", "serve": " --serve ",
              "worker": " --worker "}


def build_parser():
    server_defaults, worker_defaults = SERVER, WORKER
    parser = Parser(
        description="一群工作者进程通过 HTTP 训练一个小 GPT（第 9 讲 代码 6）。A tiny GPT trained by a swarm of "
                    "worker processes over HTTP (lecture 9, code 6). 不带 --serve / --worker：默认运行 the default "
                    "run, tables (1), (1b) and (2).")
    role = parser.add_mutually_exclusive_group()
    role.add_argument("--serve", action="store_true",
                      help="只跑参数服务器，打印它的 URL (run only the parameter server)")
    role.add_argument("--worker", type=server_url, metavar="URL",
                      help="跑一个工作者，连到 URL 的服务器 (run one worker against the server at URL)")
    parser.add_argument("--quick", action="store_true",
                        help=f"很小的设置，冒烟测试用：{QUICK_TEXT}（覆盖这两个参数）tiny settings for a smoke test")
    add_figures_flag(parser)              # fig09_06_membership.svg: table (3), default run only
    parser.add_argument("--workers", type=WORKER_COUNT, default=server_defaults.world_size,
                        help="默认运行的工作者数；--serve 时是一轮的工作者数 world size "
                             "(default %(default)s)")
    parser.add_argument("--steps", type=positive_int, default=server_defaults.steps,
                        help="每次训练的轮数：sync 走这么多步，async 走 workers 倍的单份步，看到同样多的数据 "
                             "rounds of data per run (default %(default)s)")
    parser.add_argument("--modes", type=mode_list, default=DEFAULT_MODES,
                        help="默认运行比较的压缩方式，all = compression.WIRE_MODES 全部 compression modes to "
                             "compare (default %(default)s)")
    parser.add_argument("--update", choices=("sync", "async"), default=server_defaults.update,
                        help="sync：每个工作者一份求平均再走一步；async：每份上传走一步 "
                             "(default %(default)s)")
    parser.add_argument("--round-deadline-s", type=positive_float, default=server_defaults.round_deadline_s,
                        help="sync：一轮等这么多秒还没收齐，就用已到的走一步 round deadline (default %(default)s)")
    parser.add_argument("--min-workers", type=positive_int, default=server_defaults.min_workers,
                        help="sync：截止时间到了，至少有这么多份上传才走一步，不够就再等一个截止时间 "
                             "quorum at the deadline (default %(default)s)")
    parser.add_argument("--max-staleness", type=non_negative_int, default=server_defaults.max_staleness,
                        help="async：最多接受旧几个版本的上传 largest accepted age (default %(default)s)")
    parser.add_argument("--max-body-bytes", type=positive_int, default=server_defaults.max_body_bytes,
                        help="服务器读的最大上传 body，超过就 413 upload size cap; 不给时由模型算出 "
                             "(default: derived from the model, 12 bytes x parameters + 65,536)")
    parser.add_argument("--uplink-mbyte-per-s", type=positive_float, default=DEFAULT_UPLINK_MBYTE_PER_S,
                        help="模型化的工作者上行带宽 modeled uplink, MB/s (1 MB = 10^6 bytes) "
                             "(default %(default)s)")
    parser.add_argument("--downlink-mbyte-per-s", type=positive_float, default=DEFAULT_DOWNLINK_MBYTE_PER_S,
                        help="模型化的工作者下行带宽 modeled downlink, MB/s (default %(default)s)")
    parser.add_argument("--rtt-ms", type=non_negative_float, default=DEFAULT_RTT_MS,
                        help="模型化的往返时间 modeled round-trip time between worker and server, ms "
                             "(default %(default)s)")
    add_relay_flags(parser)               # --relay, --relay-links (swarm_flags.py)
    parser.add_argument("--port", type=PORT, default=0,
                        help="--serve：端口 port; 0 = 系统挑一个空闲的 a free one (default %(default)s)")
    parser.add_argument("--token", type=token, default=None,
                        help="上传用的共享 bearer token shared secret; 不给 none: 默认运行随机生成一个, "
                             "--serve 不检查 (default %(default)s)")
    parser.add_argument("--worker-id", type=WORKER_ID, default=worker_defaults.worker_id,
                        help="--worker：这个工作者的编号，每个不同，决定它的 batch worker id "
                             "(default %(default)s)")
    parser.add_argument("--compression", type=wire_mode, metavar="MODE", default=worker_defaults.compression,
                        help="上传格式，compression.WIRE_MODES 之一；--serve 只收这一种 upload format; a server "
                             "refuses any other (default %(default)s)")
    parser.add_argument("--topk-ratio", type=ratio, default=worker_defaults.topk_ratio,
                        help="top-k 上传保留的每个张量元素比例；服务器拒绝更多的 fraction of entries kept; a "
                             "server refuses more (default %(default)s)")
    parser.add_argument("--batch-size", type=positive_int, default=worker_defaults.batch_size,
                        help="每个工作者每步的序列数 sequences per worker per step (default %(default)s)")
    parser.add_argument("--seed", type=non_negative_int, default=server_defaults.model_seed,
                        help="初始权重的种子 seed of the starting weights (default %(default)s)")
    parser.add_argument("--data-seed", type=non_negative_int, default=worker_defaults.data_seed,
                        help="工作者抽 batch 的种子（和编号一起）seed of the batch generators "
                             "(default %(default)s)")
    parser.add_argument("--checkpoint-dir", default="swarm_checkpoint", metavar="DIR",
                        help="--serve：检查点写到这个文件夹（停下时一定写；'' = 不写）checkpoint folder "
                             "(default %(default)s)")
    parser.add_argument("--checkpoint-every", type=non_negative_int, default=10, metavar="N",
                        help="--serve：每走 N 步写一个检查点，0 = 只在停下时写 checkpoint every N versions "
                             "(default %(default)s)")
    parser.add_argument("--resume", metavar="PATH",
                        help="--serve：从检查点文件，或文件夹里最新的检查点继续 resume from a checkpoint "
                             "(default: start from scratch)")
    parser.add_argument("--retry-budget-s", type=non_negative_float, default=worker_defaults.retry_budget_s,
                        help="工作者遇到暂时的失败（503、429、408、连不上）时，同一个请求最多重试这么多秒，"
                             "之后停下 retry budget per request (default %(default)s)")
    parser.add_argument("--aggregator", choices=AGGREGATOR_NAMES, default=server_defaults.aggregator, metavar="NAME",
                        help="一轮的上传怎样合成一份（§8）how a round's uploads combine: "
                             + ", ".join(AGGREGATOR_NAMES) + " (default %(default)s)")
    parser.add_argument("--byzantine", type=int_in(1, 31), default=server_defaults.byzantine, metavar="F",
                        help="聚合器假设最多几个说谎的工作者 f the aggregator is built for (default %(default)s)")
    parser.add_argument("--update-clip", type=non_negative_float, default=server_defaults.update_clip, metavar="X",
                        help="每一步走完后把 |Δw| 裁到 X（0 = 不裁）cap each step's weight change (§8; default %(default)s)")
    parser.add_argument("--attack", choices=tuple(WIRE_ATTACKS), default="none", metavar="NAME",
                        help="默认运行：最后一个工作者发这个，不发梯度；--worker：这个工作者发它 "
                             "what the (last) worker sends instead of its gradient: " + ", ".join(WIRE_ATTACKS)
                             + " (default %(default)s)")
    parser.add_argument("--token-file", metavar="PATH",
                        help="--serve：每行 `worker_id token`，每个工作者自己的 token，只能用自己的编号上传"
                             "（代替 --token）per-worker tokens (default: none)")
    parser.add_argument("--verbose", action="store_true",
                        help="--serve：记录每个 HTTP 请求 log every request (default %(default)s)")
    return parser


def parse_args(argv=None):
    """Parse the flags; refuse (exit 2) a flag the chosen mode would not read."""
    parser = build_parser()
    args = parser.parse_args(argv)
    given = given_flags(parser, argv)
    role = "serve" if args.serve else "worker" if args.worker else "default"
    unused = sorted(given - ROLE_FLAGS[role])
    if unused:
        flags = ", ".join("--" + name.replace("_", "-") for name in unused)
        parser.error(f"{flags} 在{ROLE_NAMES[role]}里不起作用 (not used in this mode)")
    need = 1
    if args.aggregator != "mean":
        floor = replace(SERVER, aggregator=args.aggregator, byzantine=args.byzantine).round_floor
        need = max(floor, 2 * args.byzantine + 1)
    if args.quick:
        quick = dict(QUICK, workers=max(QUICK["workers"], need))
        apply_quick(args, quick, given)
        if quick["workers"] > QUICK["workers"]:
            print(f"注意 note: --aggregator {args.aggregator} 要至少 {need} 个工作者，--quick 用 {need} 个 "
                  f"(--quick uses {need} workers)", file=sys.stderr)
    if args.min_workers > args.workers and role in ("default", "serve"):
        parser.error(f"--min-workers {args.min_workers} 大于 --workers {args.workers}：一轮凑不齐 (no quorum)")
    if role in ("default", "serve") and args.aggregator != "mean":
        if args.update != "sync":
            parser.error(f"--aggregator {args.aggregator} 要 --update sync：async 每步只有一份上传 (needs a round)")
        if need > args.workers:
            parser.error(f"--aggregator {args.aggregator} --byzantine {args.byzantine} 要至少 {need} 个工作者 "
                         f"(needs --workers >= {need})")
    if args.resume and not os.path.exists(args.resume):      # before torch: a typo answers at once
        parser.error("--resume：没有这个文件或文件夹 (no such checkpoint file or folder)")
    if args.token_file:
        if args.token:
            parser.error("--token-file 和 --token 只能给一个 (per-worker tokens replace the shared one)")
        try:
            args.worker_tokens = read_token_file(args.token_file)
        except (OSError, ValueError) as error:     # OSError: strerror alone, its path can fill a line
            parser.error(f"--token-file: {getattr(error, 'strerror', None) or error}")
    return check_relay_links(parser, args)


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    args = parse_args(argv)
    if args.serve:
        return run_serve(args)
    if args.worker:
        return run_worker_cli(args)
    try:
        run_default(args)
    except RuntimeError as error:   # e.g. every upload refused because --max-body-bytes is tiny
        print(f"训练失败 training failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run_main(main)
