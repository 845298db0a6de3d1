"""第 9 讲 代码 6：HTTP 上真实的训练群 a real training swarm over HTTP——参数服务器、工作者进程、
压缩上传，以及一个检查收到的每一样东西、限制每个客户端能做什么的服务器。

问题：代码 5 在一个进程里模拟了带梯度压缩的数据并行。如果工作者（worker）是独立的进程，
通过 HTTP 和参数服务器（parameter server）通信，像互联网上的志愿者训练群（volunteer swarm）
那样，会有什么变化？服务器可以信任什么，又必须检查什么？线上一共走了多少字节、多少次往返？
讲义 Notes: lectures/lecture09_distributed_training.md 第 7.11 节（从模拟到真实的训练群）。

默认运行（2 核机器上约 30 秒；4 个工作者进程，60 步）：
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

代码在哪里 Where the code is（都在 code/lecture09/）：swarm_protocol.py（设置、拒绝码、按顺序的
全部检查）、swarm_server.py（参数服务器的逻辑）、swarm_http.py（HTTP 层：截止时间、连接上限、
字节计数）、swarm_worker.py（工作者和进程池）、swarm_bad_uploads.py（坏上传的那一张表，表 (2)
和测试共用）。这个脚本只有设置、演示的表、观察和 main()。

选择 Choices：优化器是第 1 讲的（tiny_gpt.make_adamw：AdamW，矩阵 weight decay 0.1，betas
0.9/0.95；tiny_gpt.lr_at 预热 + 余弦，峰值 3e-3），平均之后做全局裁剪 1.0。同一轮里已有上传的
工作者再传一份，拒绝（409）而不是替换。客户端是带 TCP_NODELAY 的 urllib（否则每个请求的 body
要等约 40 ms 的延迟 ACK）；服务器是 http.server 的 ThreadingHTTPServer。Ctrl-C 在任何模式下
都只打印一行并以状态 130 退出，不留下进程。

运行 Run（在仓库根目录 from the repository root）：
  python3 code/lecture09/06_swarm_http.py                          # 默认：(1) 和 (2)
  python3 code/lecture09/06_swarm_http.py --steps 40 --modes topk  # 更短，只一种压缩
  python3 code/lecture09/06_swarm_http.py --update async           # 每份上传走一步，学习率乘 1/(1+age)
  分开跑，每个一个终端 by parts, one terminal each:
  python3 code/lecture09/06_swarm_http.py --serve --port 8000 --token secret --workers 2
  python3 code/lecture09/06_swarm_http.py --worker http://127.0.0.1:8000 --worker-id 0 --token secret
  python3 code/lecture09/06_swarm_http.py --worker http://127.0.0.1:8000 --worker-id 1 --token secret
  python3 code/lecture09/06_swarm_http.py --help                   # 所有参数 every flag

需要 torch、safetensors 和标准库（http.server、urllib）：没有 web 框架。
来源 Sources：线上约定和参数服务器不能有的缺陷，来自课程参考资料里描述的一个志愿者训练系统；
误差反馈：Seide et al. 2014；Lin et al. 2018（Deep Gradient Compression）。
"""

import argparse
import json
import os
import re
import secrets
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import (Parser,   # noqa: E402
    run_main, float_in, int_in, non_negative_int, positive_float, positive_int, ratio,
)
from lecture01.console import LINE_WIDTH, display_width, format_table, print_header, print_wrapped, wrap  # noqa: E402
from lecture09.swarm.swarm_protocol import HOST, ServerConfig, WorkerConfig  # noqa: E402  (no torch in it)

# torch (about 1.5 s to import) and the modules built on it are imported inside the
# functions that need them, after the flags are parsed: --help and a flag error answer at once.

# ---------------------------------------------------------------------------
# Settings a student may change (each is also a flag)
# ---------------------------------------------------------------------------

SERVER = ServerConfig()              # world size 4, sync, 60 steps, clip 1.0, ... (swarm_protocol.py)
WORKER = WorkerConfig()              # top-k 1%, batch 8, data seed 1, ...
DEFAULT_MODES = "all"                # every mode of compression.WIRE_MODES: none, topk, topk-int8
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



def run_swarm(pool, server_config, worker_config, val_tokens):
    """Train once with one server and len(pool) worker processes; returns a SwarmResult."""
    from lecture01.tiny_gpt import bits_per_char
    from lecture09.swarm.swarm_http import RunningServer
    from lecture09.swarm.swarm_worker import read_result

    start_s = time.perf_counter()
    server = RunningServer(server_config)
    try:
        for worker_id, process in enumerate(pool):
            job = {"url": server.url, "config": asdict(replace(worker_config, worker_id=worker_id))}
            process.stdin.write(json.dumps(job) + "\n")
            process.stdin.flush()
        stats = [read_result(process) for process in pool]
    finally:
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
            diff = r.val_bpc - dense.val_bpc
            word = "差 worse" if diff > 0.005 else "好 better" if diff < -0.005 else "几乎一样 about the same"
            verdicts.append(f"{r.compression} {r.val_bpc:.4f}（{word}，{diff:+.4f}）")
        how_often = (f"平均只把每个参数发出 {sends:.2f} 次" if sends < 1 else f"平均把每个参数发出 {sends:.2f} 次")
        notes.append(f"{first.steps} 步后验证 bpc：none {dense.val_bpc:.4f}，" + "，".join(verdicts) + "。"
                     f"一个工作者在整个训练里{how_often}（{first.entries_per_upload:,.0f} 个数 x "
                     f"{first.accepted_per_worker:.0f} 次上传 "
                     f"/ {n_params:,} 个参数）；误差反馈 error feedback 把没发的部分留在残差里晚一点再发，不会丢，"
                     f"但发出去时已经是旧的梯度了。")
    if topk is not None and topk_int8 is not None:
        diff = topk_int8.val_bpc - topk.val_bpc
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


def print_timing(results, link, file):
    """Measured times vary from run to run, so they go to `file` (stderr), apart from the tables."""
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


# ---------------------------------------------------------------------------
# What the server checks: every row of swarm_bad_uploads.BAD_UPLOADS, then a valid round
# ---------------------------------------------------------------------------

def demo_server_checks(token="demo-token"):
    """Send a fresh server each bad upload of the one table (its rows with in_demo); after
    each, record its answer, health and round buffer; finish with a valid round."""
    from lecture09.swarm.swarm_bad_uploads import BAD_UPLOADS, Target, run_case, send, upload
    from lecture09.swarm.swarm_http import RunningServer

    server = RunningServer(ServerConfig(world_size=2, steps=10, token=token))
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
        second, answer = send(server.url, upload(target, "topk-int8", worker="b"))
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
    print_wrapped(f"之后一轮有效上传 then a valid round（topk + topk-int8）：{first}, {second}，"
                  f"版本 version {before} -> {after}，health {health}：{outcome}。")


def server_config_from(args, token):
    return replace(SERVER, world_size=args.workers, update=args.update, steps=args.steps,
                   round_deadline_s=args.round_deadline_s, max_staleness=args.max_staleness,
                   max_body_bytes=args.max_body_bytes, model_seed=args.seed, token=token)


def run_default(args):
    import torch
    from lecture01.tiny_gpt import load_world_tokens, make_model
    from lecture09.lecture_model import MODEL_CONFIG
    from lecture09.swarm.swarm_worker import start_worker_pool, stop_worker_pool, wait_until_ready

    torch.set_num_threads(1)
    # First: the workers' start-up (torch, the data) overlaps ours.
    pool = start_worker_pool([sys.executable, str(Path(__file__).resolve()), "--worker-pool"], args.workers)
    finished = False
    try:
        _, val_tokens = load_world_tokens()
        model = make_model(MODEL_CONFIG, seed=args.seed)
        n_params, n_tensors = model.n_params(), len(list(model.parameters()))
        server_config = server_config_from(args, args.token or secrets.token_urlsafe(16))
        print_header(f"代码 6：HTTP 上的训练群 a training swarm over HTTP（{args.workers} 个工作者 workers，"
                     f"{args.update}，{server_config.total_updates} 步，每个 batch {args.batch_size}）")
        if args.update == "async":
            print_wrapped(f"async：每份上传走一步，{args.steps} 轮的数据 = {server_config.total_updates} 步，"
                          f"和 sync 的 {args.steps} 步看到同样多的 batch（like for like）。")
        sys.stdout.flush()   # progress lines go to stderr while the swarms train
        wait_until_ready(pool)
        results = []
        for mode in args.modes:
            worker_config = replace(WORKER, compression=mode, topk_ratio=args.topk_ratio,
                                    batch_size=args.batch_size, data_seed=args.data_seed, token=server_config.token)
            result = run_swarm(pool, server_config, worker_config, val_tokens)
            print(f"  {mode}: {result.steps} 步 steps, {result.wall_s:.1f} s", file=sys.stderr, flush=True)
            results.append(result)
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

    print("\n观察 Observations:")
    notes = (traffic_observations(results, n_params, n_tensors, args.topk_ratio)
             + wire_observations(results, link, n_params, bf16_weights_bytes(model)))
    for i, text in enumerate(notes, 1):
        print_wrapped(f" {i}. {text}")
    sys.stdout.flush()
    print_timing(results, link, sys.stderr)
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
    """The parameter server alone; Ctrl-C (KeyboardInterrupt) stops it, after closing the server."""
    import torch
    from lecture01.tiny_gpt import bits_per_char, load_world_tokens
    from lecture09.swarm.swarm_http import RunningServer

    torch.set_num_threads(1)
    config = server_config_from(args, args.token)
    try:
        server = RunningServer(config, port=args.port, verbose=args.verbose)
    except OSError as error:   # e.g. the port is taken
        print(f"无法监听 cannot listen on {HOST}:{args.port}: {error}", file=sys.stderr)
        return 1
    try:
        print(f"参数服务器 parameter server: {server.url}  ({config.update}, world_size {config.world_size}, "
              f"{config.total_updates} 步 steps, token {'on' if config.token else 'off'})", flush=True)
        print(f"每个工作者一个终端 one terminal per worker, N = 0 .. {config.world_size - 1}:", flush=True)
        print(f"  python3 {script_path()} --worker {server.url} --worker-id N"
              + (" --token ..." if config.token else ""), flush=True)
        _, val_tokens = load_world_tokens()
        swarm = server.swarm
        shown = 0
        while not swarm.done:
            with swarm.changed:
                swarm.changed.wait_for(lambda: swarm.version > shown, timeout=1.0)
                version, loss = swarm.version, swarm.last_loss
            if version > shown and (version % 10 == 0 or version == config.total_updates):
                print(f"  步 step {version}/{config.total_updates}  平均损失 mean loss {loss:.4f}", flush=True)
            shown = version
        with swarm.lock:
            bpc = bits_per_char(swarm.model, val_tokens)
        print(f"训练完成 done: 验证 bpc {bpc:.4f}; /status 仍可查询, Ctrl-C 退出 to quit", flush=True)
        while True:
            time.sleep(3600)
    finally:
        server.close()


def run_worker_cli(args):
    import urllib.error

    import torch
    from lecture09.swarm.swarm_worker import Worker

    torch.set_num_threads(1)
    config = replace(WORKER, worker_id=args.worker_id, compression=args.compression, topk_ratio=args.topk_ratio,
                     batch_size=args.batch_size, data_seed=args.data_seed, token=args.token)
    url = args.worker.rstrip("/")
    print(f"工作者 worker {config.worker_id} -> {url} ({config.compression})", flush=True)
    try:
        stats = Worker(url, config).run()
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

non_negative_float = float_in(0, None)
PORT = int_in(0, 65535)            # 0: let the OS pick a free port
WORKER_ID = int_in(0, 99_999)      # seeds the batch generator as data_seed * 100_000 + id
WORKER_COUNT = int_in(1, 64)       # each worker is a process


def token(text):
    if not re.fullmatch(r"[A-Za-z0-9._~+/=-]{1,256}", text):
        raise argparse.ArgumentTypeError("token 只能是 1-256 个 A-Z a-z 0-9 . _ ~ + / = - 字符 "
                                         "(a token is 1-256 of these characters)")
    return text


def server_url(text):
    parts = urlsplit(text)
    try:
        port = parts.port   # raises ValueError for a port that is not a number
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise argparse.ArgumentTypeError(f"需要服务器地址 (expected a server URL like http://127.0.0.1:8000), "
                                         f"got {text!r}")
    return text


def wire_mode(text):
    """One of compression.WIRE_MODES (read when a value is parsed, so --help needs no torch)."""
    from lecture09.compress.compression import WIRE_MODES
    if text not in WIRE_MODES:
        raise argparse.ArgumentTypeError(f"需要压缩方式 (expected one of {', '.join(WIRE_MODES)}), got {text!r}")
    return text


def mode_list(text):
    """"all" or a comma list of distinct modes of compression.WIRE_MODES."""
    from lecture09.compress.compression import WIRE_MODES
    modes = list(WIRE_MODES) if text.strip() == "all" else [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in WIRE_MODES]
    if not modes or bad or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"需要 all 或不重复的压缩方式 (all, or a comma list of distinct modes "
                                         f"from {','.join(WIRE_MODES)}), got {text!r}")
    return modes


# Which flags each mode reads; any other flag given is refused (exit 2), never silently ignored.
ROLE_FLAGS = {
    "default": {"workers", "steps", "modes", "update", "round_deadline_s", "max_staleness", "max_body_bytes",
                "uplink_mbyte_per_s", "downlink_mbyte_per_s", "rtt_ms", "token", "topk_ratio", "batch_size", "seed", "data_seed"},
    "serve": {"serve", "workers", "steps", "update", "round_deadline_s", "max_staleness", "max_body_bytes",
              "port", "token", "seed", "verbose"},
    "worker": {"worker", "token", "worker_id", "compression", "topk_ratio", "batch_size", "data_seed"},
    "worker_pool": {"worker_pool"},
}
ROLE_NAMES = {"default": "默认运行 the default run (no --serve / --worker)", "serve": "--serve",
              "worker": "--worker", "worker_pool": "--worker-pool"}


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
    role.add_argument("--worker-pool", action="store_true",
                      help="内部用 internal (the default run's worker processes read JSON jobs from stdin)")
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
    parser.add_argument("--port", type=PORT, default=0,
                        help="--serve：端口 port; 0 = 系统挑一个空闲的 a free one (default %(default)s)")
    parser.add_argument("--token", type=token, default=None,
                        help="上传用的共享 bearer token shared secret; 不给 none: 默认运行随机生成一个, "
                             "--serve 不检查 (default %(default)s)")
    parser.add_argument("--worker-id", type=WORKER_ID, default=worker_defaults.worker_id,
                        help="--worker：这个工作者的编号，每个不同，决定它的 batch worker id "
                             "(default %(default)s)")
    parser.add_argument("--compression", type=wire_mode, metavar="MODE", default=worker_defaults.compression,
                        help="--worker：上传格式，compression.WIRE_MODES 之一 upload format (default %(default)s)")
    parser.add_argument("--topk-ratio", type=ratio, default=worker_defaults.topk_ratio,
                        help="top-k 上传保留的每个张量元素比例 fraction of entries kept (default %(default)s)")
    parser.add_argument("--batch-size", type=positive_int, default=worker_defaults.batch_size,
                        help="每个工作者每步的序列数 sequences per worker per step (default %(default)s)")
    parser.add_argument("--seed", type=non_negative_int, default=server_defaults.model_seed,
                        help="初始权重的种子 seed of the starting weights (default %(default)s)")
    parser.add_argument("--data-seed", type=non_negative_int, default=worker_defaults.data_seed,
                        help="工作者抽 batch 的种子（和编号一起）seed of the batch generators "
                             "(default %(default)s)")
    parser.add_argument("--verbose", action="store_true",
                        help="--serve：记录每个 HTTP 请求 log every request (default %(default)s)")
    return parser


def parse_args(argv=None):
    """Parse the flags; refuse (exit 2) a flag the chosen mode would not read."""
    parser = build_parser()
    args = parser.parse_args(argv)
    probe, not_given = build_parser(), object()   # every default replaced by a marker
    probe.set_defaults(**{name: not_given for name in vars(args)})
    given = {name for name, value in vars(probe.parse_args(argv)).items() if value is not not_given}
    role = ("serve" if args.serve else "worker" if args.worker else
            "worker_pool" if args.worker_pool else "default")
    unused = sorted(given - ROLE_FLAGS[role])
    if unused:
        flags = ", ".join("--" + name.replace("_", "-") for name in unused)
        parser.error(f"{flags} 在{ROLE_NAMES[role]}里不起作用 (not used in this mode)")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.serve:
        return run_serve(args)
    if args.worker:
        return run_worker_cli(args)
    if args.worker_pool:
        from lecture09.swarm.swarm_worker import worker_pool_loop
        return worker_pool_loop(sys.stdin, sys.stdout)
    try:
        run_default(args)
    except RuntimeError as error:   # e.g. every upload refused because --max-body-bytes is tiny
        print(f"训练失败 training failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run_main(main)
