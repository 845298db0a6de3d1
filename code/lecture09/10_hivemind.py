"""
第 9 讲 · 代码 10：没有中心的训练群——hivemind 的 DHT、平均小组、同伴的进出
Lecture 9, code 10: a swarm with no centre — hivemind's DHT, averaging groups, and peers
that come and go.

这个文件回答的问题 (the question)
    代码 6 的训练群有一个中心：参数服务器。志愿者训练 (volunteer training) 用的 hivemind（DeDLOC、
    SWARM、Petals、OpenDiLoCo 背后的库）没有中心：同伴 (peer) 在一个分布式哈希表 (DHT) 里互相找到，
    每一轮凑成一个平均小组 (averaging group)，用蝶形全归约 (butterfly all-reduce) 求平均。

    (a)：4 个同伴，每个一个进程，按 OpenDiLoCo 的做法训练：H 个内层 AdamW 步，然后用 hivemind 的
         DecentralizedAverager 平均伪梯度，外层 SGD（Nesterov）。每一轮：谁和谁平均，发出多少字节。
    (b)：同样的训练，但同伴 3 晚来（从一个同伴那里下载状态）、引导节点 (bootstrap) 中途死掉、
         同伴 1 中途被 SIGKILL（不告别，像合上的笔记本）。
    (c)：两遍放在一起；(d)：(a) 和我们自己的模拟 compress/local_sgd.py 比较；
    (e)：hivemind 的压缩对应我们登记表 (registry) 里的哪一行；(f)：和代码 6 的中心服务器比较。

对应讲义 (notes): lectures/lecture09/10_hivemind.md §10

运行 (run):
    python3 code/lecture09/10_hivemind.py                       # (a)–(f)；用时见 README 的表（中位数）
    python3 code/lecture09/10_hivemind.py --part-kb 512         # hivemind 默认的块大小
    python3 code/lecture09/10_hivemind.py --compression float16 --matchmaking-s 2
    python3 code/lecture09/10_hivemind.py --quick               # 很小的设置（测试用）
需要 (needs): Linux 或 macOS 上的 hivemind 1.1.12（requirements.txt 装好）；本目录的 engines/。
只用 127.0.0.1。用时打印到 stderr。
"""

import sys
import time

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import Parser, add_figures_flag, apply_quick, float_in, given_flags, int_in, run_main  # noqa: E402
from lecture01.console import format_table, print_header, print_wrapped, utf8_output  # noqa: E402

COMPRESSIONS = ("none", "float16", "meanstd_16bit", "uniform_8bit", "quantile_8bit")  # hivemind_peer's (tested)
DEFAULTS = dict(peers=4, rounds=12, inner_steps=10, compression="none", matchmaking_s=1.0, part_kb=16,
                timeout=10.0, model_seed=0, data_seed=1, check=True)
QUICK = dict(rounds=6, inner_steps=4)
SIM_TOLERANCE = 1e-5      # measured here: see the notes, §10; the same arithmetic in another order
UNAVAILABLE = ("hivemind 的 libp2p 守护进程没有 Windows 版，代码 10 请在 WSL 里运行 "
               "(hivemind: Linux/macOS only)")
OUR_ROWS = {"none": "none", "float16": "fp16", "meanstd_16bit": "—", "uniform_8bit": "int8（最近的）",
            "quantile_8bit": "—"}


def build_parser():
    p = Parser(description="第 9 讲 代码 10：hivemind 上没有中心的训练群（DHT、平均小组、同伴进出）。")
    p.add_argument("--peers", type=int_in(3, 6), default=DEFAULTS["peers"],
                   help="同伴 peers 的个数（每个一个进程）；至少 3：一个晚来、一个离开")
    p.add_argument("--rounds", type=int_in(4, 200), default=DEFAULTS["rounds"], help="外层步数 rounds（每轮平均一次）")
    p.add_argument("--inner-steps", type=int_in(1, 100), default=DEFAULTS["inner_steps"],
                   help="H：每轮的内层步数 inner steps per round")
    p.add_argument("--compression", choices=COMPRESSIONS, default=DEFAULTS["compression"], metavar="NAME",
                   help="hivemind 的压缩 compression：" + "、".join(COMPRESSIONS) + "（全归约里每一块 part 都这样压缩）")
    p.add_argument("--join-at", type=int_in(1, None), default=None,
                   help="最后一个同伴从这一轮开始加入 joins late（默认 轮数/4）")
    p.add_argument("--leave-at", type=int_in(1, None), default=None,
                   help="同伴 1 在这一轮开始时被 SIGKILL、离开 leaves（默认 轮数×2/3）")
    p.add_argument("--bootstrap-dies-at", type=int_in(1, None), default=None,
                   help="引导节点 bootstrap 在这一轮开始时被 SIGKILL（默认 轮数/2）")
    p.add_argument("--no-churn", action="store_true", help="只跑 (a)：没有进出 (no churn)")
    p.add_argument("--matchmaking-s", type=float_in(0.2, 30), default=DEFAULTS["matchmaking_s"],
                   help="凑不满一组时最多等多少秒，传给 hivemind 的 min_matchmaking_time（hivemind 1.1.12 自己默认 5.0）；"
                        "找组请求的时限 request_timeout 取它的一半（hivemind 默认 3.0），3 倍还没组就算错过")
    p.add_argument("--part-kb", type=int_in(1, 1024), default=DEFAULTS["part_kb"],
                   help="全归约的块大小 part size，KiB（hivemind 默认 512）")
    p.add_argument("--timeout", type=float_in(2, 120), default=DEFAULTS["timeout"],
                   help="全归约、下载状态最多等多少秒 (all-reduce timeout；hivemind 默认不设上限)；一个同伴沉默它的 1/5 "
                        "就不再等")
    p.add_argument("--model-seed", type=int_in(0, None), default=DEFAULTS["model_seed"],
                   help="模型初始化的种子 model init seed（每个同伴同一个）")
    p.add_argument("--data-seed", type=int_in(0, None), default=DEFAULTS["data_seed"],
                   help="数据顺序的种子 data order seed（抽整个 batch 的生成器）")
    p.add_argument("--no-check", dest="check", action="store_false", help="跳过 (d)：和我们的模拟比较 (skip the simulation check)")
    p.add_argument("--quick", action="store_true", help="很小的设置，给测试用 (tiny settings for tests)")
    add_figures_flag(p)                # fig09_10_membership.svg: who averaged with whom, against time
    return p


class UsageError(Exception):
    exit_status = 2


def fill_churn(args):
    """The churn rounds: defaults from --rounds, and every one inside the run."""
    args.join_at = args.join_at or max(1, round(args.rounds / 4))
    args.bootstrap_dies_at = args.bootstrap_dies_at or max(1, round(args.rounds / 2))
    args.leave_at = args.leave_at or max(1, round(2 * args.rounds / 3))
    for flag in ("join_at", "leave_at", "bootstrap_dies_at"):
        if getattr(args, flag) >= args.rounds:
            raise UsageError(f"--{flag.replace('_', '-')} {getattr(args, flag)} 必须小于 --rounds {args.rounds} "
                             "(must be a round inside the run)")


def settings_of(args):
    from lecture09.engines.hivemind_peer import PeerSettings

    return PeerSettings(n_peers=args.peers, rounds=args.rounds, inner_steps=args.inner_steps,
                        compression=args.compression, matchmaking_s=args.matchmaking_s,
                        chunk_s=args.timeout / 5, round_s=args.timeout, part_bytes=args.part_kb * 1024,
                        model_seed=args.model_seed, data_seed=args.data_seed)


def progress(label):
    started = time.perf_counter()

    def on_round(report):
        if sys.stderr.isatty():
            print(f"\r  {label}：第 {report.round} 轮 round", end="", file=sys.stderr, flush=True)
    return on_round, started


def finished(label, started):
    print(f"\r  {label}：{time.perf_counter() - started:.1f} s" + " " * 24, file=sys.stderr)


def pseudo_gradient(s):
    """θ − θ after H inner steps of peer 0 from the start: the tensor (e) compresses."""
    import torch

    from lecture01 import tiny_gpt
    from lecture09.engines.torchft_replica import prepare
    from lecture09.lecture_model import MODEL_CONFIG

    train_data, _ = prepare(s.world_seed)
    model = tiny_gpt.make_model(MODEL_CONFIG, seed=s.model_seed)
    start = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    recipe = tiny_gpt.TrainConfig(steps=s.total_inner_steps, batch_size=s.batch_per_peer * s.n_peers,
                                  peak_lr=s.peak_lr)
    optimizer, gen = tiny_gpt.make_adamw(model, recipe), torch.Generator().manual_seed(s.data_seed)
    for step in range(s.inner_steps):
        for group in optimizer.param_groups:
            group["lr"] = tiny_gpt.lr_at(step, recipe.steps, recipe.peak_lr)
        x, y = tiny_gpt.get_batch(train_data, recipe.batch_size, MODEL_CONFIG.block_size, gen)
        optimizer.zero_grad(set_to_none=True)
        tiny_gpt.lm_loss(model, x[:s.batch_per_peer], y[:s.batch_per_peer]).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip_norm)
        optimizer.step()
    return start - torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def wire_rows(x):
    """Table (e): each hivemind compression and our nearest registry row on the tensor x."""
    from hivemind.compression import CompressionInfo

    from lecture09.compress.compression_schemes import SCHEMES, Options, parts_bytes
    from lecture09.engines.hivemind_peer import compression_of

    def rel(y):
        return float((y - x).norm() / x.norm())

    rows = []
    for name in COMPRESSIONS:
        c = compression_of(name)
        wire = c.compress(x, CompressionInfo.from_tensor(x))
        cells = [name, OUR_ROWS[name], f"{len(wire.buffer) / x.numel():.3f}", f"{rel(c.extract(wire)):.2e}"]
        ours = OUR_ROWS[name].split("（")[0]
        if ours in SCHEMES:
            parts = SCHEMES[ours].encode(x, Options())
            cells += [f"{parts_bytes(parts) / x.numel():.3f}", f"{rel(SCHEMES[ours].decode(parts, x.shape, Options())):.2e}"]
        else:
            cells += ["—", "—"]
        rows.append(cells)
    return rows


def server_rows(n_peers, inner_steps, undisturbed, record, tensor_bytes, late=None):
    """Table (f): code 6's server against this run, per worker per sync (bytes exact for code 6);
    late: hivemind_report.late_rounds of the churned run (None: no row for a late peer)."""
    from lecture01 import tiny_gpt
    from lecture09.engines.hivemind_report import butterfly_bytes, late_cell
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture09.swarm.swarm_server import safetensors_bytes

    model = tiny_gpt.make_model(MODEL_CONFIG)
    body = len(safetensors_bytes({n: p.detach() for n, p in model.named_parameters()}))
    full = [x for x in record.rounds if len(x.members) == n_peers]
    survived = [len(max(groups, key=len)) for r, groups in undisturbed.items()]
    if full:
        sent = sum(x.sent for x in full) / len(full)
        sent_cell = f"{sent:,.0f}（= 2(g-1)/g·S = {butterfly_bytes(n_peers, tensor_bytes):,.0f}）"
        received_cell = f"{sent:,.0f}（同上）"
        busiest_cell = f"{max(x.sent + x.received for x in full):,}（一个同伴）"
    else:                       # a short --matchmaking-s on a busy machine: no round gathered everyone
        sent_cell = received_cell = busiest_cell = "—（(a) 没有一轮是满组）"
    rows = [["每个工作者发出 sent", f"{body:,}（上传梯度 body）", sent_cell],
            ["每个工作者收到 received", f"{body:,}（下载权重 body）", received_cell],
            ["最忙的节点 busiest node", f"{2 * n_peers * body:,}（服务器）", busiest_cell],
            ["多少训练步同步一次", "1", f"{inner_steps}（H）"],
            ["每轮的请求 requests", "2 个 HTTP（拉权重、传梯度）", f"找组的 RPC + {2 * (n_peers - 1)} 个张量流"],
            ["中心死了 the centre dies", "停下，等它从检查点重启", "引导节点死后各轮小组：" + " ".join(map(str, survived))]]
    if late is not None:
        rows.append(["晚来的同伴 the late peer", "拉一次权重（没有组要凑）", late_cell(late)])
    return rows


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        apply_quick(args, QUICK, given_flags(parser, argv if argv is not None else sys.argv[1:]))
    fill_churn(args)
    if args.leave_at == args.join_at:
        raise UsageError("--leave-at 和 --join-at 不能是同一轮 (a round cannot both gain and lose a peer here)")
    import os

    os.environ.setdefault("HIVEMIND_LOGLEVEL", "ERROR")
    from lecture09.engines import unavailable

    why = unavailable("hivemind", sys.platform != "win32", UNAVAILABLE)
    if why:
        print(why, file=sys.stderr)
        return 2
    from lecture09.engines import hivemind_report as report
    from lecture09.engines import hivemind_run, reference
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture01 import tiny_gpt

    started = time.perf_counter()
    s = settings_of(args)
    tensor_bytes = 4 * tiny_gpt.make_model(MODEL_CONFIG).n_params()
    print_header("第 9 讲 · 代码 10：hivemind 上没有中心的训练群 a swarm with no centre")
    print_wrapped(f"{args.peers} 个同伴 peers，各自一个进程、一个 DHT 节点；一个引导节点 bootstrap（每个同伴先认识它）；"
                  f"全在 127.0.0.1。每轮 H = {args.inner_steps} 个内层步，然后平均伪梯度 (pseudo-gradient，"
                  f"S = {tensor_bytes:,} 字节的一个张量，压缩 {args.compression})。找组时凑满 {args.peers} 个就开始，"
                  f"凑不满最多等 {args.matchmaking_s:g} s、至少 2 个才成组，找组的每个请求限 {s.request_s:g} s"
                  f"（它的一半；hivemind 1.1.12 自己的默认是 5 s 和 3 s）；{s.find_s:g} s 还没找到组就算错过了这一轮。块 part {args.part_kb} KiB；全归约最多 "
                  f"{args.timeout:g} s，其中一个同伴 {s.chunk_s:g} s 没有动静就不再等它。")
    on_round, t = progress("(a) 不受打扰")
    plain = hivemind_run.run(s, None, on_round=on_round)
    finished("(a) 不受打扰", t)
    print()
    print_header("(a) 不受打扰 undisturbed：每一轮谁和谁平均，每个同伴发出多少字节", "-")
    for line in report.round_lines(plain, tensor_bytes):
        print_wrapped(line)
    print_wrapped("发出/同伴 = 这一轮各同伴发出的张量字节的平均（序列化后的 buffer，不含 protobuf 和 libp2p "
                  "的开销；数到它下一轮开始：归约者自己的一轮返回以后，还在把平均好的块发回去）；收到的一样多。2(g-1)/g·S：g 个同伴的蝶形全归约里一个同伴平均发出的。等待 = "
                  "最慢的同伴从开始找组到平均完的秒数 [实测]。损失 = 各同伴最后一个内层步的平均。")
    summaries = [report.summarize("(a) 不受打扰", plain, reference.bpc_of(plain.finals[min(plain.finals)]))]
    churned = None
    if not args.no_churn:
        churn = hivemind_run.Churn(join=(args.peers - 1, args.join_at), leave=(1, args.leave_at),
                                   bootstrap_dies=args.bootstrap_dies_at)
        on_round, t = progress("(b) 有进有出")
        churned = hivemind_run.run(s, churn, on_round=on_round)
        finished("(b) 有进有出", t)
        print()
        print_header(f"(b) 有进有出 churn：同伴 {args.peers - 1} 第 {args.join_at} 轮加入，引导节点第 "
                     f"{args.bootstrap_dies_at} 轮死掉，同伴 1 第 {args.leave_at} 轮离开", "-")
        for line in report.round_lines(churned, tensor_bytes):
            print_wrapped(line)
        print_wrapped(f"同伴 {args.peers - 1} 到第 {args.join_at} 轮才启动它的 DHT 节点（初始同伴 initial peers：引导节点和"
                      "还活着的同伴），先用 hivemind 的 load_state_from_peers 从一个同伴那里下载 θ_global、外层动量、"
                      "AdamW 的状态和数据生成器的位置。找组的键里带着轮数，所以只有同一轮的同伴能凑成一组。")
        summaries.append(report.summarize("(b) 有进有出", churned,
                                          reference.bpc_of(churned.finals[min(churned.finals)])))
    print()
    print_header("(c) 放在一起 side by side", "-")
    for line in report.summary_lines(summaries):
        print_wrapped(line)
    print_wrapped("各同伴平均的轮数 = 同伴:它在 2 个以上的小组里平均的轮数；不满的轮 = 最大的组不到 "
                  f"{args.peers} 个的轮；最慢等待 = 一轮里最慢的同伴的等待，取中位数 [实测]；终态差 = 结束时各同伴"
                  "的 θ_global 和编号最小的同伴的最大差；bpc 是编号最小的同伴的 θ_global 的。")
    print_wrapped("· " + report.share_observation(summaries[0], args.part_kb))
    print_wrapped("· " + ("每一轮，同伴发出字节的平均正好等于 2(g-1)/g·S。" if report.formula_holds(plain, tensor_bytes)
                          else "有的轮里同伴发出字节的平均不等于 2(g-1)/g·S：见上表。"))
    if churned is not None:
        late = report.late_observation(churned, args.matchmaking_s)
        if late:
            print_wrapped("· " + late)
        for line in report.summary_observations(summaries[0], summaries[1], args.matchmaking_s, args.peers):
            print_wrapped("· " + line)
    if args.check and args.compression == "none":
        result = reference.diloco_simulation(s.n_peers, s.rounds, s.inner_steps, s.batch_per_peer, s.peak_lr,
                                             s.outer_lr, s.outer_momentum, s.model_seed, s.data_seed)
        losses = [sum(x.loss for x in plain.of_round(r)) / len(plain.of_round(r)) for r in range(s.rounds)]
        check = reference.sim_check(losses, s.inner_steps, plain.finals[min(plain.finals)], result)
        print()
        print_header(f"(d) 不受打扰的一遍和我们的模拟 compress/local_sgd.py（同样的种子、H = {s.inner_steps}、"
                     f"{s.n_peers} 个工作者）", "-")
        for line in reference.sim_check_lines(check, SIM_TOLERANCE, "hivemind", report.not_everyone(plain)):
            print_wrapped(line)
    elif args.check:
        print()
        print_wrapped(f"(d) 跳过 skipped：和我们的模拟逐位比较要 --compression none（现在是 {args.compression}；"
                      "我们的模拟不压缩）。")
    print()
    print_header("(e) hivemind 的压缩和我们的登记表 compression_schemes.SCHEMES（同一个伪梯度）", "-")
    for line in format_table(["hivemind", "我们的行 ours", "字节/参数", "相对误差", "我们的 字节/参数", "相对误差"],
                             wire_rows(pseudo_gradient(s))):
        print_wrapped(line)
    print_wrapped("伪梯度 = 同伴 0 从头走 H 个内层步的 θ − θ'；相对误差 = ‖解码 − 原值‖ / ‖原值‖；字节按整个张量压缩一次"
                  f"（全归约里每块 {args.part_kb} KiB 各压缩一次，8 位的码本每块 1 KiB）。hivemind 的 BLOCKWISE_8BIT "
                  "要 bitsandbytes（没装），对应我们的 int8-block。")
    if churned is not None:
        after = {r: report.groups_of(churned.of_round(r)) for r in range(args.bootstrap_dies_at, s.rounds)}
        print()
        print_header("(f) 中心服务器（代码 6）和没有中心的 DHT（代码 10）：每个工作者、每次同步", "-")
        for line in format_table(["", "代码 6 服务器 server", "代码 10 hivemind"],
                                 server_rows(args.peers, s.inner_steps, after, plain, tensor_bytes,
                                             report.late_rounds(churned)), aligns=["<", "<", "<"]):
            print_wrapped(line)
        sizes = [len(groups[0]) for groups in after.values() if groups]
        print_wrapped("· " + report.centre_observation(sizes, report.late_rounds(churned), args.bootstrap_dies_at,
                                                       args.join_at))
        print_wrapped("代码 6 的字节是它的 safetensors body，精确；代码 10 的是 (a) 里满组的轮实测的平均（没有满组的轮就是 —）。代码 6 每一步同步，"
                      f"代码 10 每 H = {s.inner_steps} 步：按训练步算还要再除以 H。")
    if args.figures:
        from lecture09.engines.engine_figures import draw_hivemind   # matplotlib only now
        draw_hivemind(args.figures, [("(a) 不受打扰 undisturbed", plain)] + [("(b) 有进有出 churn", churned)] * bool(churned), args)
    print(f"用时 elapsed: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from lecture09.engines.torchft_run import EngineFailed

    run_main(main, failures=(EngineFailed, UsageError))
