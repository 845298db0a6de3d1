"""Code 6's default run, measured and printed: one swarm per compression mode (run_swarm),
the traffic and wire tables, a modelled step over a home link, the server's refusals of
bad and hostile requests, and observations worded from those numbers (lecture 9, §6).

torch and the modules built on it are imported inside the functions that need them, so
importing this module (what the script's --help does) loads no torch.
"""

import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace

from lecture01.console import LINE_WIDTH, display_width, format_table, print_wrapped, printed_difference, wrap
from lecture09.swarm.swarm_protocol import ServerConfig, token_for

DEFAULT_UPLINK_MBYTE_PER_S = 10.0    # a home uplink of 10 MB/s (1 MB = 10^6 bytes), i.e. 80 Mbit/s
DEFAULT_DOWNLINK_MBYTE_PER_S = 25.0  # its downlink, 200 Mbit/s
DEFAULT_RTT_MS = 50.0                # round-trip time between a volunteer and the server, within a continent


ROUND_TRIPS_PER_REQUEST = 2          # urllib opens a connection per request: TCP handshake, then request/answer


ENDPOINTS = ("GET /weights", "POST /gradients")   # what a worker's step sends and receives


HEADER_SHARE_SIGNIFICANT = 0.10      # above this share of the body, the safetensors header is called significant


# ---------------------------------------------------------------------------
# The default run: one swarm per compression mode
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SwarmResult:
    compression: str
    steps: int
    uploads: int
    body_bytes_per_upload: float   # HTTP body bytes the workers sent, per upload
    body_bytes_per_step: float     # all workers' body bytes / optimizer steps
    tensor_bytes_per_upload: float # of which tensor data (the rest is the safetensors header)
    entries_per_upload: float      # gradient entries a worker sends per upload
    val_bpc: float
    first_loss: float              # mean worker loss of the first and the last step
    last_loss: float
    compute_s_per_step: float      # median over all workers' steps (process CPU time)
    encode_s_per_step: float
    wall_s: float
    rejected: dict
    # Both directions, counted by the server on its socket (HTTP request and status lines,
    # headers and bodies; TCP/IP overhead not included), per accepted upload:
    up_bytes_per_upload: float = 0.0      # POST /gradients and GET /weights requests
    up_header_bytes_per_upload: float = 0.0  # of which not body: request lines and HTTP headers
    down_bytes_per_upload: float = 0.0    # their answers: the weights, the JSON
    requests_per_upload: float = 0.0      # pulls + uploads per accepted upload (about 2)
    accepted_per_worker: float = 0.0      # accepted uploads per worker over the run
    changed_entries_per_step: float = 0.0 # weights an optimizer step changes (median)
    clipped_uploads: int = 0              # uploads the server clipped to upload_clip_norm

    @property
    def wire_bytes_per_step(self):
        """All workers' bytes, both directions, per optimizer step."""
        return (self.up_bytes_per_upload + self.down_bytes_per_upload) * self.accepted_uploads / self.steps

    @property
    def accepted_uploads(self):
        return self.accepted_per_worker * self.workers

    workers: int = 1
    round_s: float = None          # measured: from the jobs sent to the last worker done, per step


def run_swarm(pool, server_config, worker_config, val_tokens, liar_attack="none", relay_link=None):
    """Train once with one server and len(pool) worker processes; returns a SwarmResult.
    liar_attack: what the last worker sends instead of its gradient (WIRE_ATTACKS; §8).
    relay_link: a Link, or one per worker; each worker then talks to the server through its own relay
    (network/http_relay.py: RTT / 2 each way, the link's up- and downlink rates; §5.12)."""
    from lecture01.tiny_gpt import bits_per_char
    from lecture09.swarm.swarm_http import RunningServer
    start_s = time.perf_counter()
    server = RunningServer(server_config)
    relays = []
    try:
        if relay_link is not None:
            from lecture09.network.http_relay import Relay
            port = int(server.url.rsplit(":", 1)[1])
            links = relay_link if isinstance(relay_link, (list, tuple)) else [relay_link] * len(pool)
            relays = [Relay(port, link.rtt_ms / 2e3, link.uplink_mbyte_per_s * 1e6,
                            link.downlink_mbyte_per_s * 1e6) for link in links]
        sent_s = time.perf_counter()
        for worker_id, process in enumerate(pool):
            attack = liar_attack if worker_id == len(pool) - 1 else worker_config.attack
            own = replace(worker_config, worker_id=worker_id, attack=attack, token=token_for(server_config, worker_id))
            job = {"url": relays[worker_id].url if relays else server.url, "config": asdict(own)}
            process.send(job)
        stats = [process.result() for process in pool]
        rounds_s = time.perf_counter() - sent_s
    finally:
        for relay in relays:
            relay.close()
        server.close()
    traffic = server.traffic
    errors = [s["error"] for s in stats if s["error"]]
    if errors:
        raise RuntimeError(f"worker failed: {errors[0]}")
    swarm = server.swarm
    uploads = sum(s["uploads"] for s in stats)
    accepted = sum(s["accepted"] for s in stats)
    rejected = Counter()
    for s in stats:
        rejected.update(s["rejected"])
    return SwarmResult(
        compression=worker_config.compression,
        steps=swarm.version,
        uploads=uploads,
        body_bytes_per_upload=sum(s["body_bytes_sent"] for s in stats) / uploads,
        body_bytes_per_step=sum(s["body_bytes_sent"] for s in stats) / swarm.version,
        tensor_bytes_per_upload=sum(s["tensor_bytes_sent"] for s in stats) / uploads,
        entries_per_upload=sum(s["entries_sent"] for s in stats) / uploads,
        val_bpc=bits_per_char(swarm.model, val_tokens),
        first_loss=swarm.step_losses[0],
        last_loss=swarm.step_losses[-1],
        compute_s_per_step=statistics.median(t for s in stats for t in s["compute_s"]),
        encode_s_per_step=statistics.median(t for s in stats for t in s["encode_s"]),
        wall_s=time.perf_counter() - start_s,
        rejected=dict(rejected),
        up_bytes_per_upload=sum(traffic.get(f"{e} bytes in", 0) for e in ENDPOINTS) / accepted,
        down_bytes_per_upload=sum(traffic.get(f"{e} bytes out", 0) for e in ENDPOINTS) / accepted,
        up_header_bytes_per_upload=(sum(traffic.get(f"{e} bytes in", 0) for e in ENDPOINTS)
                                    - sum(s["body_bytes_sent"] for s in stats)) / accepted,
        requests_per_upload=sum(traffic.get(f"{e} requests", 0) for e in ENDPOINTS) / accepted,
        accepted_per_worker=accepted / len(stats),
        changed_entries_per_step=statistics.median(swarm.changed_entries),
        workers=len(stats),
        clipped_uploads=swarm.counts["clipped_uploads"],
        round_s=rounds_s / max(1, swarm.version),
    )


def format_two_line_table(top, bottom, rows, aligns=None):
    """format_table with a two-line header: `top` (Chinese) above `bottom` (English), then the rule."""
    lines = format_table(top, [bottom] + rows, aligns)
    return [lines[0], lines[2], lines[1]] + lines[3:]


def bf16_weights_bytes(model):
    """The body of a GET /weights if the server sent bf16 weights (exact: serialised)."""
    import torch
    from safetensors.torch import save
    return len(save({name: p.detach().to(torch.bfloat16) for name, p in model.named_parameters()}))


def print_traffic_table(results, n_workers, link, n_params):
    """Table (1): bytes on the wire, modeled upload time, loss and bpc per compression mode.

    The last cell of each row is the validation bpc with 4 decimals (tests parse it)."""
    dense = next((r for r in results if r.compression == "none"), None)
    rows = []
    for r in results:
        ratio = f"{dense.body_bytes_per_upload / r.body_bytes_per_upload:.1f}x" if dense else "-"
        rows.append([r.compression, f"{r.body_bytes_per_upload:,.0f}", f"{r.tensor_bytes_per_upload:,.0f}",
                     f"{r.body_bytes_per_upload - r.tensor_bytes_per_upload:,.0f}",
                     f"{r.body_bytes_per_step:,.0f}", ratio,
                     f"{1e3 * link.upload_s(r.body_bytes_per_upload):.2f}",
                     f"{r.first_loss:.3f} -> {r.last_loss:.3f}", f"{r.val_bpc:.4f}"])
    for line in format_two_line_table(
            ["压缩", "每次上传", "其中张量", "st 头部", "每步", "比 none 小", "上传 ms", "训练损失", "验证"],
            ["compression", "body", "tensors", "st header", "per step", "vs none", "upload", "loss", "val bpc"],
            rows):
        print(line)
    print_wrapped(f"字节 bytes：工作者发出的 HTTP body（safetensors，不含 HTTP 头）；每次上传 = 平均一次，每步 = 所有 "
                  f"{n_workers} 个工作者的 / 步数；st 头部 = safetensors 头部（8 字节长度 + JSON）= body - 张量数据。"
                  f"上传 ms = body 在 {link.uplink_mbyte_per_s:g} MB/s 的上行带宽下（1 MB = 10^6 字节）。训练损失 = 第一步 -> 最后一步"
                  f"（工作者报告的平均）。模型 model：{n_params:,} 个参数 parameters。")


@dataclass(frozen=True)
class Link:
    """The modeled network between one worker and the server."""
    uplink_mbyte_per_s: float = DEFAULT_UPLINK_MBYTE_PER_S
    downlink_mbyte_per_s: float = DEFAULT_DOWNLINK_MBYTE_PER_S
    rtt_ms: float = DEFAULT_RTT_MS

    def upload_s(self, n_bytes):
        return n_bytes / (self.uplink_mbyte_per_s * 1e6)

    def download_s(self, n_bytes):
        return n_bytes / (self.downlink_mbyte_per_s * 1e6)

    def latency_s(self, r):
        """Waiting on round trips per worker step: every request costs ROUND_TRIPS_PER_REQUEST."""
        return r.requests_per_upload * ROUND_TRIPS_PER_REQUEST * self.rtt_ms / 1e3

    def comm_s(self, r):
        """One worker step's communication: its round trips plus both directions' bytes."""
        return self.latency_s(r) + self.upload_s(r.up_bytes_per_upload) + self.download_s(r.down_bytes_per_upload)


def print_wire_table(results, link):
    """Table (1b): every byte both ways (HTTP headers included) and the modeled step time."""
    rows = []
    for r in results:
        rows.append([r.compression, f"{r.up_bytes_per_upload:,.0f}",
                     f"{r.up_header_bytes_per_upload:,.0f}", f"{r.down_bytes_per_upload:,.0f}",
                     f"{r.wire_bytes_per_step:,.0f}", f"{r.requests_per_upload:.2f}",
                     f"{1e3 * link.latency_s(r):.0f}",
                     f"{1e3 * (link.comm_s(r) - link.latency_s(r)):.2f}", f"{1e3 * link.comm_s(r):.1f}"])
    for line in format_two_line_table(
            ["压缩", "上行", "其中 HTTP 头", "下行", "每步两个方向", "请求", "往返 ms", "传输 ms", "通信 ms"],
            ["compression", "up", "HTTP headers", "down", "both, per step", "requests", "RTTs", "transfer", "comm"],
            rows):
        print(line)
    print_wrapped(f"服务器在 socket 上数的字节（请求行、HTTP 头和 body；不含 TCP/IP 开销），按每次被接受的上传平均："
                  f"上行 up = 上传 + 拉取权重的请求，下行 down = 权重 + 回答；每步两个方向 = 所有工作者 / 步数。"
                  f"通信 = 请求数 x {ROUND_TRIPS_PER_REQUEST} 次往返 x RTT {link.rtt_ms:g} ms（每个请求新开一个连接："
                  f"TCP 握手 + 请求/回答）+ 上行 / {link.uplink_mbyte_per_s:g} MB/s + 下行 / "
                  f"{link.downlink_mbyte_per_s:g} MB/s。")


def wire_observations(results, link, n_params, bf16_weights_bytes):
    """Observations on table (1b): the download, the round trips (all computed)."""
    by_mode = {r.compression: r for r in results}
    notes = []
    sparse = by_mode.get("topk") or by_mode.get("topk-int8")
    first = results[0]
    down_ms = 1e3 * link.download_s(first.down_bytes_per_upload)
    line = (f"下载 download：每一步每个工作者都拉一次全部 fp32 权重，每次上传对应下行 "
            f"{first.down_bytes_per_upload:,.0f} 字节，在 {link.downlink_mbyte_per_s:g} MB/s 下 {down_ms:.1f} ms，"
            f"在哪种压缩下都一样")
    if sparse is not None:
        up_ms = 1e3 * link.upload_s(sparse.up_bytes_per_upload)
        relation = (f"下行的时间是上行的 {down_ms / up_ms:.1f} 倍" if down_ms > up_ms else
                    f"下行的时间只有上行的 {down_ms / up_ms:.2f}")
        line += f"；{sparse.compression} 的上行只要 {up_ms:.2f} ms，压缩只管了上行这一半的路，{relation}"
    changed = first.changed_entries_per_step
    line += (f"。只发变化的权重（delta download）省不了：AdamW 的动量和 weight decay 让每步有 {changed:,.0f} / "
             f"{n_params:,} 个权重改变；权重用 bf16 下发，body 是 {bf16_weights_bytes:,} 字节（fp32 的 "
             f"{100 * bf16_weights_bytes / first.down_bytes_per_upload:.0f}%），代价是工作者算梯度用的权重有舍入误差。")
    notes.append(line)
    latency_ms = 1e3 * link.latency_s(first)
    line = (f"往返 round trips：每次上传大约 {first.requests_per_upload:.2f} 个请求（拉取 + 上传），urllib 每个请求新开一个"
            f"连接，各要 {ROUND_TRIPS_PER_REQUEST} 次往返：RTT {link.rtt_ms:g} ms 时每步等 {latency_ms:.0f} ms")
    if sparse is not None:
        transfer_ms = 1e3 * (link.comm_s(sparse) - link.latency_s(sparse))
        word = "远大于" if latency_ms > 3 * transfer_ms else "大于" if latency_ms > transfer_ms else "小于"
        line += f"，{word} {sparse.compression} 的全部传输时间 {transfer_ms:.1f} ms"
    line += ("。保持连接（HTTP keep-alive）能省掉握手，把请求合并（上传的回答里带上新权重）能再省一次往返；"
             "带宽之外，延迟也要算。")
    notes.append(line)
    return notes


def traffic_observations(results, n_params, n_tensors, topk_ratio):
    """Observation sentences computed from the results (timings excluded): every judgement
    word ("only", "more", "fewer", "significant") is chosen from the numbers it is about."""
    by_mode = {r.compression: r for r in results}
    dense, topk, topk_int8 = by_mode.get("none"), by_mode.get("topk"), by_mode.get("topk-int8")
    notes = []
    if dense is not None:
        notes.append(f"不压缩 none：每次上传 {dense.body_bytes_per_upload:,.0f} 字节 = {n_params:,} 个参数 x 4 字节 "
                     f"(fp32) = {4 * n_params:,} 字节的张量，加 "
                     f"{dense.body_bytes_per_upload - dense.tensor_bytes_per_upload:,.0f} 字节的 safetensors "
                     f"头部 header。")
    if topk is not None:
        share = 1 - topk.tensor_bytes_per_upload / topk.body_bytes_per_upload
        significant = share > HEADER_SHARE_SIGNIFICANT
        line = (f"top-k：每个张量留 {100 * topk_ratio:g}%，至少 1 个，一共 {topk.entries_per_upload:,.0f} 个数；"
                f"每个数 12 字节（int64 下标 index + fp32 值 value），张量数据 {topk.tensor_bytes_per_upload:,.0f} "
                f"字节。{n_tensors} 个张量各有 2 个键（::idx、::val），safetensors 头部占 body 的 {100 * share:.0f}%")
        if dense is not None:
            body_x = dense.body_bytes_per_upload / topk.body_bytes_per_upload
            tensor_x = dense.tensor_bytes_per_upload / topk.tensor_bytes_per_upload
            if significant:
                line += f"，所以 body 只比 none 小 {body_x:.1f} 倍（只看张量是 {tensor_x:.1f} 倍）"
            else:
                line += f"，body 比 none 小 {body_x:.1f} 倍，和只看张量的 {tensor_x:.1f} 倍相差不多"
        if significant:
            line += (f"。头部超过 body 的 {100 * HEADER_SHARE_SIGNIFICANT:.0f}%：载荷很小时，格式的固定开销"
                     f"不能忽略（它可以事先算出：8 字节 + 写着每个键的 dtype、形状、偏移的 JSON）。")
        else:
            line += (f"。头部不到 body 的 {100 * HEADER_SHARE_SIGNIFICANT:.0f}%：载荷这么大时，格式的固定开销"
                     f"很小。")
        notes.append(line)
    if topk is not None and topk_int8 is not None:
        change = topk_int8.body_bytes_per_upload / topk.body_bytes_per_upload - 1
        header_growth = ((topk_int8.body_bytes_per_upload - topk_int8.tensor_bytes_per_upload)
                         - (topk.body_bytes_per_upload - topk.tensor_bytes_per_upload))
        line = (f"topk-int8 把值压到 1 字节（每个张量多一个 fp32 缩放因子 ::scale）：张量数据 "
                f"{topk.tensor_bytes_per_upload:,.0f} -> {topk_int8.tensor_bytes_per_upload:,.0f} 字节，头部多了 "
                f"{header_growth:,.0f} 字节（{n_tensors} 个 ::scale 键）")
        if change > 0:
            line += (f"，body 反而多了 {100 * change:.0f}%：留下的数太少，省下的值字节比不上多出来的键。"
                     f"这么小的载荷，int8 只有坏处。")
        else:
            word = "只少了" if -change < 0.5 else "少了"
            line += (f"，body {word} {100 * -change:.0f}%：8 字节的下标没变。要再省，先省下标"
                     f"（int32 或差分编码 delta encoding）和头部。")
        notes.append(line)
    sparse = [r for r in (topk, topk_int8) if r is not None]
    if dense is not None and sparse:
        first = sparse[0]
        sends = first.entries_per_upload * first.accepted_per_worker / n_params
        verdicts = []
        for r in sparse:
            diff = printed_difference(r.val_bpc, dense.val_bpc)     # of the two bpc printed here
            word = "差 worse" if diff > 0.005 else "好 better" if diff < -0.005 else "几乎一样 about the same"
            verdicts.append(f"{r.compression} {r.val_bpc:.4f}（{word}，{diff:+.4f}）")
        how_often = (f"平均只把每个参数发出 {sends:.2f} 次" if sends < 1 else f"平均把每个参数发出 {sends:.2f} 次")
        notes.append(f"{first.steps} 步后验证 bpc：none {dense.val_bpc:.4f}，" + "，".join(verdicts) + "。"
                     f"一个工作者在整个训练里{how_often}（{first.entries_per_upload:,.0f} 个数 x "
                     f"{first.accepted_per_worker:.0f} 次上传 "
                     f"/ {n_params:,} 个参数）；误差反馈 error feedback 把没发的部分留在残差里晚一点再发，不会丢，"
                     f"但发出去时已经是旧的梯度了。")
    if topk is not None and topk_int8 is not None:
        diff = printed_difference(topk_int8.val_bpc, topk.val_bpc)
        verdict = ("几乎没有影响 hardly matters" if abs(diff) <= 0.01 else
                   "有可见的代价 visibly costs" if diff > 0 else "反而略好 is slightly better")
        notes.append(f"在 top-k 之上再做 int8 量化：bpc {topk.val_bpc:.4f} -> {topk_int8.val_bpc:.4f}，{verdict}；"
                     f"量化误差也进了误差反馈的残差。")
    for r in results:
        if r.rejected:
            notes.append(f"{r.compression}：服务器拒绝了 {sum(r.rejected.values())} 次上传 {r.rejected}。")
        if r.clipped_uploads:
            notes.append(f"{r.compression}：服务器把 {r.clipped_uploads} 份上传裁剪到了每份的范数上限"
                         f"（world_size x clip_norm），它们对这一步的影响变小了。")
    return notes


def print_timing(results, link, file, relay=None):
    """Measured times vary from run to run, so they go to `file` (stderr), apart from the tables.
    relay: (args, server config, worker config, val tokens) for code 6's --relay, run after
    (swarm_relay.relay_demo: its table (1c) goes to stdout)."""
    print("\n计时 Timing（本机测得，每次运行都会变 measured here, varies run to run）：", file=file)
    rows = []
    for r in results:
        comm_s = link.comm_s(r)
        idle = comm_s / (comm_s + r.compute_s_per_step)
        rows.append([r.compression, f"{1e3 * r.compute_s_per_step:.1f}", f"{1e3 * r.encode_s_per_step:.1f}",
                     f"{1e3 * link.upload_s(r.body_bytes_per_upload):.2f}", f"{1e3 * comm_s:.1f}",
                     f"{100 * idle:.0f}%", f"{r.wall_s:.1f}"])
    for line in format_two_line_table(["压缩", "计算 ms/步", "压缩+序列化 ms", "上传 ms", "通信 ms", "空闲", "用时 s"],
                                      ["compression", "compute", "encode", "upload", "comm", "idle", "wall"], rows):
        print(line, file=file)
    lines = [f" 计算 = 一个工作者一步前向+反向的 CPU 时间（中位数）；上传 = body 在 {link.uplink_mbyte_per_s:g} MB/s "
             f"时；通信 = 表 (1b) 的模型（RTT {link.rtt_ms:g} ms，两个方向）；空闲 idle = 通信 / (通信 + 计算)。"]
    dense = next((r for r in results if r.compression == "none"), None)
    if dense is not None:
        upload_s, comm_s = link.upload_s(dense.body_bytes_per_upload), link.comm_s(dense)
        idle = upload_s / (upload_s + dense.compute_s_per_step)
        lines.append(f" 不压缩时：算一步 {1e3 * dense.compute_s_per_step:.1f} ms，只算上传是 {1e3 * upload_s:.1f} ms"
                     f"（工作者 {100 * idle:.0f}% 的时间在等），算上往返和下载是 {1e3 * comm_s:.1f} ms。模型大 1000 倍"
                     f"时，计算和传输大约都乘 1000，往返不变；换成更快的 GPU，计算变短，等网络的比例只会更高。")
    for text in lines:
        for line in wrap(text):
            print(line, file=file)
    file.flush()
    if relay is not None:
        from lecture09.swarm.swarm_relay import relay_demo
        relay_demo(run_swarm, ROUND_TRIPS_PER_REQUEST, *relay, results, link)


def demo_server_checks(token="demo-token"):
    """Send a fresh server each bad upload of the one table (its rows with in_demo); after
    each, record its answer, health and round buffer; finish with a valid round."""
    from lecture09.swarm.swarm_bad_uploads import BAD_UPLOADS, Target, run_case, send, upload
    from lecture09.swarm.swarm_http import RunningServer

    server = RunningServer(ServerConfig(world_size=2, steps=10, token=token, compression="topk"))
    try:
        swarm = server.swarm
        target = Target(swarm.shapes, token)
        rows = []
        for case in (c for c in BAD_UPLOADS if c.in_demo):
            status, answer = run_case(server, case, target)
            report = swarm.status()
            rows.append([case.label, status, answer.get("error", ""), report["health"], report["pending_uploads"]])
        before = target.version = swarm.version
        first, _ = send(server.url, upload(target, worker="a"))
        second, answer = send(server.url, upload(target, worker="b"))
        valid = (first, second, answer.get("applied"), before, swarm.version, swarm.status()["health"])
        return rows, valid
    finally:
        server.close()


def shorten(text, width):
    """`text` cut to at most `width` display columns at a word boundary, marked with "..."."""
    if display_width(text) <= width:
        return text
    cut = text[:max(1, width - 3)]
    while display_width(cut) > width - 3:
        cut = cut[:-1]
    if " " in cut[width // 2:]:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,:;(") + "..."


def print_server_checks(rows, valid):
    """Table (2); the server's reason is shortened so that every line fits LINE_WIDTH."""
    top = ["上传", "状态", "服务器的回答", "健康", "待处理"]
    bottom = ["upload", "status", "the server's reason", "health", "pending"]
    fixed = [max(display_width(str(row[i])) for row in rows + [top, bottom]) for i in (0, 1, 3, 4)]
    room = max(20, LINE_WIDTH - sum(fixed) - 2 * (len(top) - 1))
    cells = [[label, status, shorten(reason, room), health, pending] for label, status, reason, health, pending in rows]
    for line in format_two_line_table(top, bottom, cells, aligns=["<", ">", "<", "<", ">"]):
        print(line)
    first, second, applied, before, after, health = valid
    outcome = "成功 succeeded" if (first, second, applied) == (200, 200, True) and after == before + 1 else "失败 FAILED"
    print_wrapped(f"之后一轮有效上传 then a valid round（两份 topk two topk uploads）：{first}, {second}，"
                  f"版本 version {before} -> {after}，health {health}：{outcome}。")
