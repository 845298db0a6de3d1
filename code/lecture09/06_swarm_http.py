"""第 9 讲 代码 6：HTTP 上真实的训练群 a real training swarm over HTTP——参数服务器、工作者进程、
压缩上传，以及一个检查收到的每一样东西的服务器。

问题：代码 5 在一个进程里模拟了带梯度压缩的数据并行。如果工作者（worker）是独立的进程，
通过 HTTP 和参数服务器（parameter server）通信，像互联网上的志愿者训练群（volunteer swarm）
那样，会有什么变化？服务器可以信任什么，又必须检查什么？
讲义 Notes: lectures/lecture09_distributed_training.md 第 7.11 节（从模拟到真实的训练群）。

默认运行（2 核机器上约 20 秒；4 个工作者进程，60 步）：
  (1) 每种压缩方式 compression mode（none、topk、topk-int8）训练一次：127.0.0.1 上（一个空闲
      端口）的 HTTP 服务器持有小 GPT（tiny_gpt.BASE_CONFIG）和它的优化器；4 个工作者进程循环
      GET /weights -> 在本地一批 8 条序列上算梯度 -> 带误差反馈 error feedback 的压缩 ->
      POST /gradients；服务器每轮收齐 4 个工作者各一份上传，求平均，走一步优化器（同步 sync）。
      打印：线上数出来的每次上传字节数（工作者发出的 HTTP body 字节）及其中的 safetensors 头部
      header、模型化上行带宽下的上传时间（10 MB/s，--uplink-mbyte-per-s）、训练损失和验证
      bits per char。stderr 上（和表分开）：测得的每步计算时间和空闲比例 upload / (upload + compute)。
  (2) 每种坏上传各发一次给一个新服务器：它回答的状态码和原因、每次之后的健康状况，最后一轮有效上传。
  同一条命令，同样的 stdout：同步轮按工作者编号顺序求和，每个工作者用自己的带种子的生成器抽
  batch，权重按位精确地传输。

端点 Endpoints:
  GET  /weights[?after=V]  参数的 safetensors body；响应头 X-Model-Version（= 已走的优化器步数）
                           和 X-Training-Done；带 after 时等待（long poll）直到版本比 V 新。
  POST /gradients          compression.py 线上约定的载荷 payload，请求头 X-Model-Version、
                           X-Worker-Id、X-Loss、X-Compression（none | topk | topk-int8），服务器有
                           token 时还要 Authorization: Bearer <token>。回答 200 JSON {accepted,
                           applied, version}；400 格式错误（字节、请求头、键、dtype、形状、下标、
                           NaN/inf）；401 token；409 旧版本、未来版本或同一轮重复；411 没有
                           Content-Length；413 Content-Length 超过上限（读 body 之前就拒绝）。
  GET  /status             JSON：版本、步数、待处理上传、最近的损失、health、各种计数。
  读取是公开的，只有上传要 token。服务器信任 token 持有者自报的工作者编号和损失（损失只用于
  显示）；凡是会进入模型的东西，都按服务器自己的参数形状检查。

选择 Choices：优化器是第 1 讲的（tiny_gpt.make_adamw：AdamW，矩阵 weight decay 0.1，betas
0.9/0.95；tiny_gpt.lr_at 预热 + 余弦，峰值 3e-3），平均之后做全局裁剪 1.0。同一轮里已有上传的
工作者再传一份，拒绝（409）而不是替换。客户端是带 TCP_NODELAY 的 urllib（否则每个请求的 body
要等约 40 ms 的延迟 ACK）；服务器是 http.server 的 ThreadingHTTPServer。Ctrl-C 在任何模式下
都只打印一行并以状态 130 退出，不留下进程。

运行 Run（在仓库根目录 from the repository root）：
  python3 code/lecture09/06_swarm_http.py                          # 默认：(1) 和 (2)
  python3 code/lecture09/06_swarm_http.py --steps 40 --modes topk  # 更短，只一种压缩
  python3 code/lecture09/06_swarm_http.py --update async           # 每份上传走一步，乘 1/(1+age)
  分开跑，每个一个终端 by parts, one terminal each:
  python3 code/lecture09/06_swarm_http.py --serve --port 8000 --token secret --workers 2
  python3 code/lecture09/06_swarm_http.py --worker http://127.0.0.1:8000 --worker-id 0 --token secret
  python3 code/lecture09/06_swarm_http.py --worker http://127.0.0.1:8000 --worker-id 1 --token secret
  python3 code/lecture09/06_swarm_http.py --help                   # 所有参数 every flag

需要 torch、safetensors 和标准库（http.server、urllib）：没有 web 框架，服务器做的每一项检查
都在这个文件里看得到。
来源 Sources：线上约定和参数服务器不能有的缺陷，来自课程参考资料里描述的一个志愿者训练系统；
误差反馈：Seide et al. 2014；Lin et al. 2018（Deep Gradient Compression）。
"""

import argparse
import hmac
import http.client
import json
import math
import re
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

try:
    import lecture09  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:  # a clone without that install: the toolkit is the folder above this one
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from safetensors.torch import load as safetensors_load  # noqa: E402
from safetensors.torch import save as safetensors_save  # noqa: E402

from lecture09.compression import (
    WIRE_MODES, PayloadError, PayloadErrorFeedback, decode_payload, encode_payload, payload_from_bytes,
    payload_tensor_bytes, payload_to_bytes,
)
from lecture01.cli_args import run_main, int_in, non_negative_int, positive_float, positive_int, ratio
from lecture01.console import LINE_WIDTH, display_width, format_table, print_header, print_wrapped, wrap
from lecture01.tiny_gpt import (
    BASE_CONFIG, TrainConfig, bits_per_char, get_batch, load_world_tokens, lm_loss, lr_at,
    make_adamw, make_model,
)

# ---------------------------------------------------------------------------
# Settings a student may change (each is also a flag)
# ---------------------------------------------------------------------------

HOST = "127.0.0.1"   # loopback only: this server has no TLS, so it must not face a network


@dataclass(frozen=True)
class ServerConfig:
    world_size: int = 4              # distinct workers averaged per synchronous round
    update: str = "sync"             # "sync": average a round, then step; "async": step per upload
    steps: int = 60                  # optimizer steps; the learning-rate schedule spans them
    peak_lr: float = 3e-3            # lecture 1's AdamW recipe (tiny_gpt.TrainConfig)
    clip_norm: float = 1.0           # global clipping after averaging, as in lecture 1
    round_deadline_s: float = 30.0   # a round that waits this long steps with what arrived
    max_staleness: int = 4           # async: accept uploads at most this many versions old
    max_body_bytes: int = 2_000_000  # a few times a dense fp32 upload of BASE_CONFIG (4 bytes x ~100k)
    long_poll_s: float = 20.0        # longest a GET /weights?after=V waits for a new version
    model_seed: int = 0              # tiny_gpt.make_model's seed: the starting weights
    token: str | None = None         # shared secret for POST /gradients; None: no check


@dataclass(frozen=True)
class WorkerConfig:
    worker_id: int = 0
    compression: str = "topk"        # one of compression.WIRE_MODES
    topk_ratio: float = 0.01         # fraction of each tensor's entries a top-k upload keeps
    batch_size: int = 8              # sequences per worker per step: 4 workers x 8 = lecture 1's 32
    data_seed: int = 1               # with worker_id, seeds this worker's batch generator
    token: str | None = None
    timeout_s: float = 60.0          # HTTP timeout; a long poll waits at most long_poll_s


DEFAULT_MODES = WIRE_MODES           # none, topk, topk-int8
DEFAULT_UPLINK_MBYTE_PER_S = 10.0    # a home uplink of 10 MB/s (1 MB = 10^6 bytes), i.e. 80 Mbit/s
WORKER_ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
VERSION_PATTERN = re.compile(r"[0-9]{1,18}")
LENGTH_PATTERN = re.compile(r"[0-9]{1,18}")


# ---------------------------------------------------------------------------
# The parameter server's logic (no HTTP here, so tests can call it directly)
# ---------------------------------------------------------------------------

class Rejection(Exception):
    """An upload the server refuses: an HTTP status and a reason for the JSON answer."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Upload:
    worker_id: str
    version: int
    compression: str
    loss: float


def parse_upload_headers(headers):
    """Read the upload's headers (a Mapping with .get); raise Rejection(400) if malformed."""
    compression = headers.get("X-Compression")
    if compression not in WIRE_MODES:
        raise Rejection(400, f"X-Compression must be one of {list(WIRE_MODES)}, got {compression!r}")
    worker_id = headers.get("X-Worker-Id") or ""
    if not WORKER_ID_PATTERN.fullmatch(worker_id):
        raise Rejection(400, "X-Worker-Id must be 1-64 characters of A-Z a-z 0-9 _ . -")
    version = headers.get("X-Model-Version") or ""
    if not VERSION_PATTERN.fullmatch(version):
        raise Rejection(400, f"X-Model-Version must be a non-negative integer, got {version!r}")
    try:
        loss = float(headers.get("X-Loss") or "")
    except ValueError:
        raise Rejection(400, "X-Loss must be a number") from None
    if not math.isfinite(loss):
        raise Rejection(400, "X-Loss must be finite")
    return Upload(worker_id, int(version), compression, loss)


class ParameterServer:
    """Holds the model, the optimizer and the round buffer; decides every upload's fate.

    version = optimizer steps taken so far; a worker's upload names the version its
    gradient was computed on. Sync: a round collects one upload per distinct worker id
    at the current version (a repeat from the same worker is refused with 409, so one
    fast worker cannot fill a round); with world_size of them, or when the round
    deadline passes with at least one, the server averages them summed in worker-id
    order (arrival order cannot change the result), clips and steps. Async: an upload
    computed age = version_now - version steps ago (0 <= age <= max_staleness) is applied
    at once, scaled by 1 / (1 + age). An upload is decoded and checked completely before
    it touches the round buffer, so a rejected upload changes nothing.
    """

    def __init__(self, config=ServerConfig()):
        self.config = config
        self.model = make_model(BASE_CONFIG, seed=config.model_seed)
        self.model.train()
        self.params = dict(self.model.named_parameters())
        self.shapes = {name: p.shape for name, p in self.params.items()}   # never from the wire
        self.optimizer = make_adamw(self.model, TrainConfig(steps=config.steps, peak_lr=config.peak_lr,
                                                            clip_norm=config.clip_norm))
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)   # long polls wait on it
        self.version = 0
        self.round = {}            # worker id -> (dense gradients, loss), current version only
        self.round_timer = None
        self.last_loss = None
        self.step_losses = []      # mean worker loss of every step, in step order
        self.counts = Counter()    # "accepted", "deadline_steps", "rejected_<status>"
        self.accepted_body_bytes = 0
        self.closing = False
        self._weights_cache = (None, b"")

    @property
    def done(self):
        return self.version >= self.config.steps

    # --- reading ---------------------------------------------------------

    def weights_body(self, after=None):
        """(safetensors bytes, version, done); with `after`, wait for a newer version first."""
        with self.changed:
            if after is not None:
                self.changed.wait_for(lambda: self.version > after or self.done or self.closing,
                                      timeout=self.config.long_poll_s)
            version, done = self.version, self.done
            if self._weights_cache[0] != version:
                tensors = {name: p.detach().clone() for name, p in self.params.items()}
                self._weights_cache = (version, safetensors_save(tensors))
            return self._weights_cache[1], version, done

    def status(self):
        with self.lock:
            finite = all(bool(torch.isfinite(p).all()) for p in self.params.values())
            return {
                "version": self.version,
                "step": self.version,
                "total_steps": self.config.steps,
                "update": self.config.update,
                "world_size": self.config.world_size,
                "pending_uploads": len(self.round),
                "last_loss": self.last_loss,
                "health": "ok" if finite else "non-finite weights",
                "done": self.done,
                "counts": dict(self.counts),
            }

    # --- writing ---------------------------------------------------------

    def submit(self, upload, body):
        """Decide one upload; returns the 200 answer or raises Rejection (nothing changed)."""
        with self.lock:
            self._admit(upload)
        try:
            # Decoding is the slow part; it runs outside the lock, on a private copy.
            dense = decode_payload(payload_from_bytes(body), self.shapes, upload.compression)
        except PayloadError as error:
            raise Rejection(400, str(error)) from None
        with self.changed:
            self._admit(upload)   # again: the version may have moved while we decoded
            self.counts["accepted"] += 1
            self.accepted_body_bytes += len(body)
            if self.config.update == "async":
                age = self.version - upload.version
                self._step([dense], [upload.loss], scale=1.0 / (1 + age))
                return {"accepted": True, "applied": True, "version": self.version}
            self.round[upload.worker_id] = (dense, upload.loss)
            if len(self.round) == 1:
                self._start_deadline(self.version)
            applied = len(self.round) >= self.config.world_size
            if applied:
                self._step_round()
            return {"accepted": True, "applied": applied, "version": self.version}

    def _admit(self, upload):
        """Version and round checks (lock held); raise Rejection(409) if they fail."""
        if self.done:
            raise Rejection(409, f"training finished at version {self.version}")
        if upload.version > self.version:
            raise Rejection(409, f"future version {upload.version}: the server is at {self.version}")
        age = self.version - upload.version
        if self.config.update == "sync":
            if age > 0:
                raise Rejection(409, f"stale version {upload.version}: the round is for {self.version}")
            if upload.worker_id in self.round:
                raise Rejection(409, f"repeat: worker {upload.worker_id} is already in this round")
        elif age > self.config.max_staleness:
            raise Rejection(409, f"stale version {upload.version}: {age} steps old, "
                                 f"tolerance {self.config.max_staleness}")

    def _start_deadline(self, version):
        timer = threading.Timer(self.config.round_deadline_s, self._deadline, args=(version,))
        timer.daemon = True
        self.round_timer = timer
        timer.start()

    def _deadline(self, version):
        with self.changed:
            if self.version == version and self.round and not self.closing:
                self.counts["deadline_steps"] += 1
                self._step_round()

    def _step_round(self):
        ordered = [self.round[w] for w in sorted(self.round)]   # worker-id order, not arrival order
        self.round = {}
        if self.round_timer is not None:
            self.round_timer.cancel()
            self.round_timer = None
        self._step([d for d, _ in ordered], [loss for _, loss in ordered], scale=1.0 / len(ordered))

    def _step(self, dense_list, losses, scale):
        """p.grad = scale * sum(dense_list); clip; AdamW step at lr_at(version); version + 1."""
        for name, p in self.params.items():
            total = dense_list[0][name].clone()
            for dense in dense_list[1:]:
                total += dense[name]
            p.grad = total.mul_(scale)
        torch.nn.utils.clip_grad_norm_(list(self.params.values()), self.config.clip_norm)
        lr = lr_at(self.version, self.config.steps, self.config.peak_lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.last_loss = sum(losses) / len(losses)
        self.step_losses.append(self.last_loss)
        self.version += 1
        self.changed.notify_all()

    def count_rejection(self, status):
        with self.lock:
            self.counts[f"rejected_{status}"] += 1

    def close(self):
        with self.changed:
            self.closing = True
            if self.round_timer is not None:
                self.round_timer.cancel()
            self.changed.notify_all()


# ---------------------------------------------------------------------------
# HTTP: the handler only translates between bytes on the socket and ParameterServer
# ---------------------------------------------------------------------------

class SwarmHandler(BaseHTTPRequestHandler):
    server_version = "TinySwarm/1.0"
    # Headers and body leave in separate writes; with Nagle's algorithm on, the body would
    # wait for the client's delayed ACK (~40 ms on Linux) on every request.
    disable_nagle_algorithm = True
    timeout = 30   # seconds a client may take to send its request; a stuck one frees its thread

    def log_message(self, format, *args):   # noqa: A002 - the base class's signature
        if self.server.verbose:
            super().log_message(format, *args)

    def _reply(self, status, body, content_type="application/json", headers=None):
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, status, reason, headers=None):
        self.server.swarm.count_rejection(status)
        self._reply(status, {"accepted": False, "applied": False, "error": reason,
                             "version": self.server.swarm.version}, headers=headers)

    def do_GET(self):
        swarm = self.server.swarm
        parts = urlsplit(self.path)
        if parts.path == "/status":
            return self._reply(200, swarm.status())
        if parts.path != "/weights":
            return self._reply(404, {"error": f"no such endpoint {parts.path}"})
        after = parse_qs(parts.query).get("after", [None])[0]
        if after is not None and not re.fullmatch(r"-?[0-9]{1,18}", after):
            return self._reply(400, {"error": "after must be an integer"})
        body, version, done = swarm.weights_body(None if after is None else int(after))
        self._reply(200, body, "application/octet-stream",
                    {"X-Model-Version": str(version), "X-Training-Done": "1" if done else "0"})

    def do_POST(self):
        swarm = self.server.swarm
        if urlsplit(self.path).path != "/gradients":
            self.close_connection = True
            return self._reply(404, {"error": f"no such endpoint {self.path}"})
        # The size is judged from the header alone: an oversized or unsized body is
        # refused before a single byte of it is read (and the connection is closed).
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            return self._refuse(411, "Content-Length is required")
        if not LENGTH_PATTERN.fullmatch(length.strip()):
            self.close_connection = True
            return self._refuse(400, f"Content-Length must be a non-negative integer, got {length!r}")
        n_bytes = int(length)
        if n_bytes > swarm.config.max_body_bytes:
            self.close_connection = True
            return self._refuse(413, f"body of {n_bytes} bytes exceeds the cap of "
                                     f"{swarm.config.max_body_bytes} bytes")
        # The token is checked after this bounded read, so even a client that has already
        # pushed its body reads a clean 401 instead of a reset connection.
        body = self.rfile.read(n_bytes)   # bounded by the cap just checked
        if len(body) != n_bytes:
            self.close_connection = True
            return self._refuse(400, f"body ended after {len(body)} of {n_bytes} bytes")
        if swarm.config.token is not None:
            given = (self.headers.get("Authorization") or "").encode("latin-1")
            expected = f"Bearer {swarm.config.token}".encode("latin-1")
            # compare_digest does not stop at the first wrong byte, so the answer's timing
            # does not tell an attacker how much of a guess was right.
            if not hmac.compare_digest(given, expected):
                return self._refuse(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        try:
            upload = parse_upload_headers(self.headers)
            answer = swarm.submit(upload, body)
        except Rejection as rejection:
            return self._refuse(rejection.status, rejection.reason)
        self._reply(200, answer)


class SwarmHTTPServer(ThreadingHTTPServer):
    daemon_threads = True   # a long-polling handler must not keep the process alive

    def __init__(self, address, swarm, verbose=False):
        super().__init__(address, SwarmHandler)
        self.swarm = swarm
        self.verbose = verbose


class RunningServer:
    """A ParameterServer behind HTTP on 127.0.0.1, serving from a background thread."""

    def __init__(self, config=ServerConfig(), port=0, verbose=False):
        self.swarm = ParameterServer(config)
        self.httpd = SwarmHTTPServer((HOST, port), self.swarm, verbose)   # port 0: the OS picks a free one
        self.url = f"http://{HOST}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.swarm.close()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


# ---------------------------------------------------------------------------
# The worker
# ---------------------------------------------------------------------------

class _NoDelayConnection(http.client.HTTPConnection):
    """urllib's connection with Nagle's algorithm off: a request's headers and body leave
    in two writes, and the body must not wait ~40 ms for the server's delayed ACK."""

    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _NoDelayHandler(urllib.request.HTTPHandler):
    def http_open(self, request):
        return self.do_open(_NoDelayConnection, request)


# A swarm talks straight to its server: never through an http_proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoDelayHandler())


def http_call(url, body=None, headers=None, timeout_s=60.0):
    """(status, headers, body) of one request; 4xx/5xx answers are returned, not raised."""
    request = urllib.request.Request(url, data=body, headers=headers or {},
                                     method="GET" if body is None else "POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def load_weights(model, body):
    """Copy a GET /weights body into the model, after checking its names and shapes."""
    tensors = safetensors_load(body)
    params = dict(model.named_parameters())
    if set(tensors) != set(params):
        raise RuntimeError("the server's parameters do not match this worker's model")
    with torch.no_grad():
        for name, p in params.items():
            if tensors[name].shape != p.shape or tensors[name].dtype != p.dtype:
                raise RuntimeError(f"weights for {name} have the wrong shape or dtype")
            p.copy_(tensors[name])


class Worker:
    """One swarm worker: pull weights, compute a gradient, upload it with error feedback.

    pull(after) fetches the weights (waiting for a version newer than `after`) into the
    local model; upload(version) computes the gradient of one local batch, proposes a
    payload to the error-feedback memory and POSTs it. On 200 the new residual is
    committed; on any refusal it is rolled back, because nothing reached the server.
    Batches come from this worker's own generator, seeded by (data_seed, worker_id).
    Compute time is process CPU time of forward + backward, so workers that share
    cores do not inflate each other's figure.
    """

    def __init__(self, url, config=WorkerConfig(), train_tokens=None):
        if train_tokens is None:
            train_tokens, _ = load_world_tokens()
        self.url = url.rstrip("/")
        self.config = config
        self.train_tokens = train_tokens
        self.model = make_model(BASE_CONFIG, seed=0)   # architecture only: weights come from the server
        self.model.train()
        self.gen = torch.Generator().manual_seed(config.data_seed * 100_000 + config.worker_id)
        self.feedback = PayloadErrorFeedback()
        self.headers = {"X-Worker-Id": str(config.worker_id), "X-Compression": config.compression,
                        "Content-Type": "application/octet-stream"}
        if config.token is not None:
            self.headers["Authorization"] = f"Bearer {config.token}"
        self.stats = {"worker_id": config.worker_id, "compression": config.compression, "uploads": 0,
                      "accepted": 0, "body_bytes_sent": 0, "tensor_bytes_sent": 0, "entries_sent": 0, "compute_s": [],
                      "encode_s": [], "rejected": {}, "error": None}

    def pull(self, after=-1):
        """GET /weights?after=...; load them; return (version, done)."""
        status, headers, body = http_call(f"{self.url}/weights?after={after}", timeout_s=self.config.timeout_s)
        if status != 200:
            raise RuntimeError(f"GET /weights answered {status}")
        version, done = int(headers["X-Model-Version"]), headers.get("X-Training-Done") == "1"
        if not done and version > after:
            load_weights(self.model, body)
        return version, done

    def upload(self, version):
        """Gradient on one batch at the loaded weights (= `version`), compressed, POSTed.

        Returns (status, answer dict)."""
        stats = self.stats
        x, y = get_batch(self.train_tokens, self.config.batch_size, BASE_CONFIG.block_size, self.gen)   # (B, T)
        start_s = time.process_time()
        self.model.zero_grad(set_to_none=True)
        loss = lm_loss(self.model, x, y)
        loss.backward()
        stats["compute_s"].append(time.process_time() - start_s)
        start_s = time.process_time()
        grads = {name: p.grad for name, p in self.model.named_parameters()}
        payload = self.feedback.propose(grads, self.config.compression, self.config.topk_ratio)
        body = payload_to_bytes(payload)
        stats["encode_s"].append(time.process_time() - start_s)
        headers = dict(self.headers, **{"X-Model-Version": str(version), "X-Loss": repr(loss.item())})
        try:
            status, _, answer = http_call(f"{self.url}/gradients", body, headers, timeout_s=self.config.timeout_s)
        except (urllib.error.URLError, ConnectionError):
            self.feedback.rollback()   # e.g. a 413 whose connection closed under us: nothing was kept
            raise
        stats["uploads"] += 1
        stats["body_bytes_sent"] += len(body)
        stats["tensor_bytes_sent"] += payload_tensor_bytes(payload)
        stats["entries_sent"] += sum(t.numel() for key, t in payload.items() if not key.endswith(("::idx", "::scale")))
        if status == 200:
            self.feedback.commit()
            stats["accepted"] += 1
        else:
            self.feedback.rollback()   # the server kept nothing, so the residual must not move
            stats["rejected"][str(status)] = stats["rejected"].get(str(status), 0) + 1
        try:
            reply = json.loads(answer or b"{}")
        except ValueError:
            reply = {}
        return status, reply

    def run(self, max_uploads=None):
        """Loop until the server reports training done; returns the stats dict.

        409 stale/future: pull again at once; 409 repeat: wait for the next round;
        400/401/413: stop (resending the same thing cannot help)."""
        after = -1
        while max_uploads is None or self.stats["uploads"] < max_uploads:
            version, done = self.pull(after)
            if done:
                break
            if version <= after:
                continue   # the long poll timed out with nothing new: ask again
            status, reply = self.upload(version)
            if status == 200:
                after = version
            elif status == 409:
                after = version if reply.get("error", "").startswith("repeat") else -1
            else:
                self.stats["error"] = f"POST /gradients answered {status}: {reply.get('error', '')}"
                break
        return self.stats


def worker_pool_loop(stdin, stdout):
    """The default run's worker processes: one JSON job per input line, one JSON result per job.

    Keeping the processes across the three compression modes saves starting twelve
    Python + torch processes; each job is exactly `Worker(...).run()`.
    """
    torch.set_num_threads(1)
    train_tokens, _ = load_world_tokens()
    print(json.dumps({"ready": True}), file=stdout, flush=True)
    for line in stdin:
        job = json.loads(line)
        worker = Worker(job["url"], WorkerConfig(**job["config"]), train_tokens)
        try:
            stats = worker.run()
        except Exception as error:   # reported to the parent, which stops with this message
            stats = dict(worker.stats, error=f"{type(error).__name__}: {error}")
        print(json.dumps(stats), file=stdout, flush=True)


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


def _read_result(process):
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"worker process {process.pid} exited (status {process.poll()}) without a result")
    return json.loads(line)


def start_worker_pool(n_workers):
    """Launch the worker processes (`--worker-pool`); they load torch and the data meanwhile.

    Ctrl-C reaches the whole process group, but only this process should answer it (one
    line, then it stops the pool); a child would print a traceback. SIGINT is ignored
    while the children are spawned, and an ignored signal stays ignored across exec."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker-pool"]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for _ in range(n_workers)]
    finally:
        signal.signal(signal.SIGINT, previous)


def wait_until_ready(pool):
    for process in pool:
        if not _read_result(process).get("ready"):
            raise RuntimeError(f"worker process {process.pid} failed to start")


def stop_worker_pool(pool, at_once=False):
    """End the worker processes: after a finished run, close their stdin and let them exit;
    at_once (Ctrl-C or an error), terminate them. Only our own children, by handle."""
    for process in pool:
        if at_once and process.poll() is None:
            process.terminate()
        if process.stdin and not process.stdin.closed:
            try:
                process.stdin.close()
            except OSError:   # the pipe of a terminated child
                pass
    for process in pool:
        try:
            process.wait(timeout=5 if at_once else 30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_swarm(pool, server_config, worker_config, val_tokens):
    """Train once with one server and len(pool) worker processes; returns a SwarmResult."""
    start_s = time.perf_counter()
    server = RunningServer(server_config)
    try:
        for worker_id, process in enumerate(pool):
            job = {"url": server.url, "config": asdict(replace(worker_config, worker_id=worker_id))}
            process.stdin.write(json.dumps(job) + "\n")
            process.stdin.flush()
        stats = [_read_result(process) for process in pool]
    finally:
        server.close()
    errors = [s["error"] for s in stats if s["error"]]
    if errors:
        raise RuntimeError(f"worker failed: {errors[0]}")
    swarm = server.swarm
    uploads = sum(s["uploads"] for s in stats)
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
    )


def format_two_line_table(top, bottom, rows, aligns=None):
    """format_table with a two-line header: `top` (Chinese) above `bottom` (English), then the rule."""
    lines = format_table(top, [bottom] + rows, aligns)
    return [lines[0], lines[2], lines[1]] + lines[3:]


def print_traffic_table(results, n_workers, uplink_mbyte_per_s, n_params):
    """Table (1): bytes on the wire, modeled upload time, loss and bpc per compression mode.

    The last cell of each row is the validation bpc with 4 decimals (tests parse it)."""
    uplink_bytes_per_s = uplink_mbyte_per_s * 1e6
    dense = next((r for r in results if r.compression == "none"), None)
    rows = []
    for r in results:
        ratio = f"{dense.body_bytes_per_upload / r.body_bytes_per_upload:.1f}x" if dense else "-"
        rows.append([r.compression, f"{r.body_bytes_per_upload:,.0f}", f"{r.tensor_bytes_per_upload:,.0f}",
                     f"{r.body_bytes_per_upload - r.tensor_bytes_per_upload:,.0f}",
                     f"{r.body_bytes_per_step:,.0f}", ratio,
                     f"{1e3 * r.body_bytes_per_upload / uplink_bytes_per_s:.2f}",
                     f"{r.first_loss:.3f} -> {r.last_loss:.3f}", f"{r.val_bpc:.4f}"])
    for line in format_two_line_table(
            ["压缩", "每次上传", "其中张量", "其中头部", "每步", "比 none 小", "上传 ms", "训练损失", "验证"],
            ["compression", "body", "tensors", "header", "per step", "vs none", "upload", "loss", "val bpc"],
            rows):
        print(line)
    print_wrapped(f"字节 bytes：工作者真正发出的 HTTP body（safetensors）；每次上传 = 平均一次，每步 = 所有 "
                  f"{n_workers} 个工作者的 / 步数；头部 header = body - 张量数据。上传 ms = 在 "
                  f"{uplink_mbyte_per_s:g} MB/s 的上行带宽下（1 MB = 10^6 字节）。训练损失 = 第一步 -> 最后一步"
                  f"（工作者报告的平均）。模型 model：{n_params:,} 个参数 parameters。")


HEADER_SHARE_SIGNIFICANT = 0.10   # above this share of the body, the header is called significant


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
                f"字节。{n_tensors} 个张量各有 2 个键（::idx、::val），JSON 头部占 body 的 {100 * share:.0f}%")
        if dense is not None:
            body_x = dense.body_bytes_per_upload / topk.body_bytes_per_upload
            tensor_x = dense.tensor_bytes_per_upload / topk.tensor_bytes_per_upload
            if significant:
                line += f"，所以 body 只比 none 小 {body_x:.1f} 倍（只看张量是 {tensor_x:.1f} 倍）"
            else:
                line += f"，body 比 none 小 {body_x:.1f} 倍，和只看张量的 {tensor_x:.1f} 倍相差不多"
        if significant:
            line += (f"。头部超过 body 的 {100 * HEADER_SHARE_SIGNIFICANT:.0f}%：载荷很小时，格式的固定开销"
                     f"不能忽略。")
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
        sends = first.entries_per_upload * first.steps / n_params
        verdicts = []
        for r in sparse:
            diff = r.val_bpc - dense.val_bpc
            word = "差 worse" if diff > 0.005 else "好 better" if diff < -0.005 else "几乎一样 about the same"
            verdicts.append(f"{r.compression} {r.val_bpc:.4f}（{word}，{diff:+.4f}）")
        how_often = (f"平均只把每个参数发出 {sends:.2f} 次" if sends < 1 else f"平均把每个参数发出 {sends:.2f} 次")
        notes.append(f"{first.steps} 步后验证 bpc：none {dense.val_bpc:.4f}，" + "，".join(verdicts) + "。"
                     f"一个工作者在整个训练里{how_often}（{first.entries_per_upload:,.0f} 个数 x {first.steps} 步 "
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
    return notes


def print_timing(results, uplink_mbyte_per_s, file):
    """Measured times vary from run to run, so they go to `file` (stderr), apart from the tables."""
    uplink_bytes_per_s = uplink_mbyte_per_s * 1e6
    print("\n计时 Timing（本机测得，每次运行都会变 measured here, varies run to run）：", file=file)
    rows = []
    for r in results:
        upload_s = r.body_bytes_per_upload / uplink_bytes_per_s
        idle = upload_s / (upload_s + r.compute_s_per_step)
        rows.append([r.compression, f"{1e3 * r.compute_s_per_step:.1f}", f"{1e3 * r.encode_s_per_step:.1f}",
                     f"{1e3 * upload_s:.2f}", f"{100 * idle:.0f}%", f"{r.wall_s:.1f}"])
    for line in format_two_line_table(["压缩", "计算 ms/步", "压缩+序列化 ms", "上传 ms", "空闲", "用时 s"],
                                      ["compression", "compute", "encode", "upload", "idle", "wall"], rows):
        print(line, file=file)
    lines = [f" 计算 = 一个工作者一步前向+反向的 CPU 时间（中位数）；上传 = 在 {uplink_mbyte_per_s:g} MB/s 时；"
             f"空闲 idle = 上传 / (上传 + 计算) upload / (upload + compute)。"]
    dense = next((r for r in results if r.compression == "none"), None)
    if dense is not None:
        upload_s = dense.body_bytes_per_upload / uplink_bytes_per_s
        idle = upload_s / (upload_s + dense.compute_s_per_step)
        lines.append(f" 不压缩时：算一步 {1e3 * dense.compute_s_per_step:.1f} ms，上传 {1e3 * upload_s:.1f} ms，"
                     f"工作者 {100 * idle:.0f}% 的时间在等网络。模型大 1000 倍时，两者大约都乘 1000，比例差不多；"
                     f"换成更快的 GPU，计算变短，比例只会更高。")
    for text in lines:
        for line in wrap(text):
            print(line, file=file)
    file.flush()


# ---------------------------------------------------------------------------
# What the server checks: one bad upload of each kind, then a valid round
# ---------------------------------------------------------------------------

def _post_announced_only(url, headers):
    """POST with headers only (the body is announced by Content-Length, never sent); the status."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.putrequest("POST", "/gradients")
        for key, value in headers.items():
            conn.putheader(key, value)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def demo_server_checks(token="demo-token"):
    """Send a fresh server one malformed upload of each kind; after each, check that it is
    healthy and its round buffer empty; finish with a valid round. Returns the rows."""
    server = RunningServer(ServerConfig(world_size=2, steps=10, token=token))
    try:
        swarm = server.swarm
        gen = torch.Generator().manual_seed(0)
        grads = {name: 0.01 * torch.randn(shape, generator=gen) for name, shape in swarm.shapes.items()}
        # Targets for the bad edits: the last matrix and the last vector (the output head's).
        matrix = [name for name, shape in swarm.shapes.items() if len(shape) == 2][-1]
        vector = [name for name, shape in swarm.shapes.items() if len(shape) == 1][-1]
        n_rows, n_cols = swarm.shapes[matrix]
        vector_numel = swarm.shapes[vector].numel()

        def payload(mode="topk", edit=None):
            tensors = encode_payload(grads, mode, 0.01)
            if edit is not None:
                edit(tensors)
            return payload_to_bytes(tensors)

        def post(body, mode="topk", version=0, auth=f"Bearer {token}", worker="demo"):
            headers = {"X-Worker-Id": worker, "X-Compression": mode, "X-Loss": "3.0",
                       "X-Model-Version": str(version)}
            if auth is not None:
                headers["Authorization"] = auth
            status, _, answer = http_call(f"{server.url}/gradients", body, headers)
            return status, json.loads(answer)

        def set_item(key, position, value):
            return lambda t: t[key].__setitem__(position, value)

        cases = [
            ("乱码 garbage bytes", lambda: post(b"\x00\x01 not safetensors")),
            ("未知压缩 unknown X-Compression", lambda: post(payload(), mode="zip")),
            ("少一个键 missing key", lambda: post(payload(edit=lambda t: t.pop(matrix + "::val")))),
            ("多一个键 extra key", lambda: post(payload(edit=lambda t: t.update(
                {"backdoor::idx": torch.zeros(1, dtype=torch.int64)})))),
            ("形状不对 wrong shape", lambda: post(payload("none", lambda t: t.update(
                {matrix: torch.zeros(n_rows + 1, n_cols)})), mode="none")),
            ("类型不对 wrong dtype", lambda: post(payload(edit=lambda t: t.update(
                {vector + "::idx": t[vector + "::idx"].to(torch.int32)})))),
            ("下标越界 index out of range", lambda: post(payload(edit=set_item(vector + "::idx", 0, vector_numel)))),
            ("负下标 negative index", lambda: post(payload(edit=set_item(vector + "::idx", 0, -1)))),
            ("NaN", lambda: post(payload(edit=set_item(matrix + "::val", 0, float("nan"))))),
            ("无穷大 inf", lambda: post(payload(edit=set_item(matrix + "::val", 0, float("inf"))))),
            ("没有 token missing token", lambda: post(payload(), auth=None)),
            ("token 错 wrong token", lambda: post(payload(), auth="Bearer guess")),
            ("未来的版本 future version", lambda: post(payload(), version=5)),
            ("同一轮重复 repeat in a round", None),   # filled in below: needs one accepted upload first
            ("旧版本 stale version", None),
            ("太大 Content-Length 10^9", lambda: _post_announced_only(
                server.url, {"Content-Length": str(10**9), "Authorization": f"Bearer {token}"})),
        ]
        rows = []
        for label, send in cases:
            if label.startswith("同一轮"):
                post(payload(), worker="early")                       # accepted: the round has 1 of 2
                status, answer = post(payload(), worker="early")
            elif label.startswith("旧版本"):
                post(payload(), worker="late")                        # completes the round: version 1
                status, answer = post(payload(), version=0)
            else:
                status, answer = send()
            report = swarm.status()
            reason = answer.get("error", "")
            rows.append([label, status, reason, report["health"], report["pending_uploads"]])
        before = swarm.version
        first, _ = post(payload(), worker="a", version=before)
        second, answer = post(payload("topk-int8"), mode="topk-int8", worker="b", version=before)
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


def run_default(args):
    torch.set_num_threads(1)
    pool = start_worker_pool(args.workers)   # first: their start-up overlaps ours
    finished = False
    try:
        _, val_tokens = load_world_tokens()
        model = make_model(BASE_CONFIG, seed=args.seed)
        n_params, n_tensors = model.n_params(), len(list(model.parameters()))
        print_header(f"代码 6：HTTP 上的训练群 a training swarm over HTTP（{args.workers} 个工作者 workers，"
                     f"{args.update}，{args.steps} 步，每个 batch {args.batch_size}）")
        sys.stdout.flush()   # progress lines go to stderr while the swarms train
        server_config = ServerConfig(world_size=args.workers, update=args.update, steps=args.steps,
                                     round_deadline_s=args.round_deadline_s, max_staleness=args.max_staleness,
                                     max_body_bytes=args.max_body_bytes, model_seed=args.seed,
                                     token=args.token or secrets.token_urlsafe(16))
        wait_until_ready(pool)
        results = []
        for mode in args.modes:
            worker_config = WorkerConfig(compression=mode, topk_ratio=args.topk_ratio, batch_size=args.batch_size,
                                         data_seed=args.data_seed, token=server_config.token)
            result = run_swarm(pool, server_config, worker_config, val_tokens)
            print(f"  {mode}: {result.steps} 步 steps, {result.wall_s:.1f} s", file=sys.stderr, flush=True)
            results.append(result)
        finished = True
    finally:
        stop_worker_pool(pool, at_once=not finished)

    print("\n(1) 每种压缩训练一次 one training run per compression mode")
    print_traffic_table(results, args.workers, args.uplink_mbyte_per_s, n_params)
    print("\n(2) 服务器检查什么 what the server checks：每种坏上传发一次，之后看它是否健康")
    print_server_checks(*demo_server_checks())

    print("\n观察 Observations:")
    for i, text in enumerate(traffic_observations(results, n_params, n_tensors, args.topk_ratio), 1):
        print_wrapped(f" {i}. {text}")
    sys.stdout.flush()
    print_timing(results, args.uplink_mbyte_per_s, sys.stderr)
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
    torch.set_num_threads(1)
    config = ServerConfig(world_size=args.workers, update=args.update, steps=args.steps,
                          round_deadline_s=args.round_deadline_s, max_staleness=args.max_staleness,
                          max_body_bytes=args.max_body_bytes, model_seed=args.seed, token=args.token)
    try:
        server = RunningServer(config, port=args.port, verbose=args.verbose)
    except OSError as error:   # e.g. the port is taken
        print(f"无法监听 cannot listen on {HOST}:{args.port}: {error}", file=sys.stderr)
        return 1
    try:
        print(f"参数服务器 parameter server: {server.url}  ({config.update}, world_size {config.world_size}, "
              f"{config.steps} 步 steps, token {'on' if config.token else 'off'})", flush=True)
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
            if version > shown and (version % 10 == 0 or version == config.steps):
                print(f"  步 step {version}/{config.steps}  平均损失 mean loss {loss:.4f}", flush=True)
            shown = version
        with swarm.lock:
            bpc = bits_per_char(swarm.model, val_tokens)
        print(f"训练完成 done: 验证 bpc {bpc:.4f}; /status 仍可查询, Ctrl-C 退出 to quit", flush=True)
        while True:
            time.sleep(3600)
    finally:
        server.close()


def run_worker_cli(args):
    torch.set_num_threads(1)
    config = WorkerConfig(worker_id=args.worker_id, compression=args.compression, topk_ratio=args.topk_ratio,
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


def mode_list(text):
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in WIRE_MODES]
    if not modes or bad or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"需要不重复的压缩方式 (a comma list of distinct modes from "
                                         f"{','.join(WIRE_MODES)}), got {text!r}")
    return modes


# Which flags each mode reads; any other flag given is refused (exit 2), never silently ignored.
ROLE_FLAGS = {
    "default": {"workers", "steps", "modes", "update", "round_deadline_s", "max_staleness", "max_body_bytes",
                "uplink_mbyte_per_s", "token", "topk_ratio", "batch_size", "seed", "data_seed"},
    "serve": {"serve", "workers", "steps", "update", "round_deadline_s", "max_staleness", "max_body_bytes",
              "port", "token", "seed", "verbose"},
    "worker": {"worker", "token", "worker_id", "compression", "topk_ratio", "batch_size", "data_seed"},
    "worker_pool": {"worker_pool"},
}
ROLE_NAMES = {"default": "默认运行 the default run (no --serve / --worker)", "serve": "--serve",
              "worker": "--worker", "worker_pool": "--worker-pool"}


def build_parser():
    server_defaults, worker_defaults = ServerConfig(), WorkerConfig()
    parser = argparse.ArgumentParser(
        description="一群工作者进程通过 HTTP 训练一个小 GPT（第 9 讲 代码 6）。A tiny GPT trained by a swarm of "
                    "worker processes over HTTP (lecture 9, code 6). 不带 --serve / --worker：默认运行 the default "
                    "run, tables (1) and (2).")
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
                        help="每次训练的优化器步数 optimizer steps per training run (default %(default)s)")
    parser.add_argument("--modes", type=mode_list, default=",".join(DEFAULT_MODES),
                        help="默认运行比较的压缩方式 compression modes to compare (default %(default)s)")
    parser.add_argument("--update", choices=("sync", "async"), default=server_defaults.update,
                        help="sync：每个工作者一份求平均再走一步；async：每份上传走一步 "
                             "(default %(default)s)")
    parser.add_argument("--round-deadline-s", type=positive_float, default=server_defaults.round_deadline_s,
                        help="sync：一轮等这么多秒还没收齐，就用已到的走一步 round deadline (default %(default)s)")
    parser.add_argument("--max-staleness", type=non_negative_int, default=server_defaults.max_staleness,
                        help="async：最多接受旧几个版本的上传 largest accepted age (default %(default)s)")
    parser.add_argument("--max-body-bytes", type=positive_int, default=server_defaults.max_body_bytes,
                        help="服务器读的最大上传 body，超过就 413 upload size cap (default %(default)s)")
    parser.add_argument("--uplink-mbyte-per-s", type=positive_float, default=DEFAULT_UPLINK_MBYTE_PER_S,
                        help="模型化的工作者上行带宽 modeled uplink, MB/s (1 MB = 10^6 bytes) "
                             "(default %(default)s)")
    parser.add_argument("--port", type=PORT, default=0,
                        help="--serve：端口 port; 0 = 系统挑一个空闲的 a free one (default %(default)s)")
    parser.add_argument("--token", type=token, default=None,
                        help="上传用的共享 bearer token shared secret; 不给 none: 默认运行随机生成一个, "
                             "--serve 不检查 (default %(default)s)")
    parser.add_argument("--worker-id", type=WORKER_ID, default=worker_defaults.worker_id,
                        help="--worker：这个工作者的编号，每个不同，决定它的 batch worker id "
                             "(default %(default)s)")
    parser.add_argument("--compression", choices=WIRE_MODES, default=worker_defaults.compression,
                        help="--worker：上传格式 upload format (default %(default)s)")
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
        return worker_pool_loop(sys.stdin, sys.stdout)
    try:
        run_default(args)
    except RuntimeError as error:   # e.g. every upload refused because --max-body-bytes is tiny
        print(f"训练失败 training failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run_main(main)
