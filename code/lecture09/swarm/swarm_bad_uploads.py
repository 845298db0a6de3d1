"""The one table of bad uploads (lecture 9, code 6): each a request a broken or hostile
client might send, the refusal code the server must answer with, and how to send it.

Introduced in lecture 9, §6. 06_swarm_http.py's table (2) sends every row to a fresh
server; tests/test_swarm_http.py sends each to its own server and then checks a valid
round. To add a check to the server: a function in swarm_protocol.py, a code in its
REFUSALS, and one row here (the demo and the tests then cover it).

Requests go out over a plain socket, byte for byte as written here, so that a row can
say what a well-behaved client library never would (a repeated header, a bare CR).
"""

import http.client
import json
import socket
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

import torch

from lecture09.compress.compression import encode_payload, payload_to_bytes


@dataclass
class Target:
    """What a row needs to build its request: the server's shapes, a valid gradient, the token."""
    shapes: dict
    token: str
    version: int = 0
    grads: dict = field(default_factory=dict)

    def __post_init__(self):
        gen = torch.Generator().manual_seed(0)
        self.grads = {name: 0.01 * torch.randn(shape, generator=gen) for name, shape in self.shapes.items()}
        # Targets for the bad edits: the last matrix and the last vector (the output head's).
        self.matrix = [name for name, shape in self.shapes.items() if len(shape) == 2][-1]
        self.vector = [name for name, shape in self.shapes.items() if len(shape) == 1][-1]

    def body(self, mode="topk", edit=None, ratio=0.01):
        tensors = encode_payload(self.grads, mode, ratio)   # 0.01: ServerConfig's top-k ratio
        if edit is not None:
            edit(tensors)
        return payload_to_bytes(tensors)

    def headers(self, body, mode="topk", worker="demo", version=None, auth="token"):
        """The header lines of a valid upload of `body`, as (name, value) pairs in order."""
        lines = [("X-Worker-Id", worker), ("X-Compression", mode), ("X-Loss", "3.0"),
                 ("X-Model-Version", str(self.version if version is None else version))]
        if auth is not None:
            lines.append(("Authorization", f"Bearer {self.token}" if auth == "token" else auth))
        return lines + [("Content-Length", str(len(body)))]


@dataclass(frozen=True)
class Request:
    headers: list               # (name, value) pairs, sent in this order, repeats allowed;
                                # (text, None) sends `text` as the whole line (a malformed one)
    body: bytes = b""
    send_body: bool = True      # False: the body is announced by Content-Length, never sent


def upload(target, mode="topk", edit=None, ratio=0.01, **header_args):
    body = target.body(mode, edit, ratio)
    return Request(target.headers(body, mode, **header_args), body)


def with_headers(target, change, mode="topk"):
    """A valid upload whose header list is rewritten by change(list) -> list."""
    body = target.body(mode)
    return Request(change(target.headers(body, mode)), body)


def replaced(lines, name, value):
    return [(n, value if n == name else v) for n, v in lines]


def doubled(lines, name, second):
    """The header `name` kept, and a second copy with value `second` right after it."""
    out = []
    for n, v in lines:
        out.append((n, v))
        if n == name:
            out.append((n, second))
    return out


def after(lines, name, *extra):
    """The header list with `extra` (name, value) lines inserted right after `name`."""
    out = []
    for n, v in lines:
        out.append((n, v))
        if n == name:
            out.extend(extra)
    return out


def set_item(key, position, value):
    return lambda tensors: tensors[key].__setitem__(position, value)


@dataclass(frozen=True)
class BadUpload:
    label: str                  # the demo table's row: Chinese, then English
    code: str                   # the refusal code expected (swarm_protocol.REFUSALS gives the status)
    build: Callable             # Target -> Request
    prepare: str = ""           # "in_round": one valid upload by worker "demo" first;
                                # "next_version": finish the current round first (the bad one is then stale)
    in_demo: bool = True        # False: a near-repeat of a row above, tested but not shown


BAD_UPLOADS = (
    BadUpload("乱码 garbage bytes", "bad_payload", lambda t: Request(
        t.headers(b"\x00\x01 not safetensors"), b"\x00\x01 not safetensors")),
    BadUpload("未知压缩 unknown X-Compression", "bad_header",
              lambda t: with_headers(t, lambda h: replaced(h, "X-Compression", "zip"))),
    BadUpload("少一个键 missing key", "bad_payload", lambda t: upload(t, edit=lambda p: p.pop(t.matrix + "::val"))),
    BadUpload("多一个键 extra key", "bad_payload", lambda t: upload(t, edit=lambda p: p.update(
        {"backdoor::idx": torch.zeros(1, dtype=torch.int64)}))),
    BadUpload("形状不对 wrong shape", "bad_payload", lambda t: upload(t, edit=lambda p: p.update(
        {t.matrix + "::val": p[t.matrix + "::val"].reshape(1, -1)}))),
    BadUpload("类型不对 wrong dtype", "bad_payload", lambda t: upload(t, edit=lambda p: p.update(
        {t.vector + "::idx": p[t.vector + "::idx"].to(torch.int32)}))),
    BadUpload("下标越界 index out of range", "bad_payload", lambda t: upload(
        t, edit=set_item(t.vector + "::idx", 0, t.shapes[t.vector].numel()))),
    BadUpload("负下标 negative index", "bad_payload", lambda t: upload(t, edit=set_item(t.vector + "::idx", 0, -1))),
    BadUpload("稠密的上传 dense to a top-k swarm", "wrong_compression", lambda t: upload(t, "none")),
    BadUpload("比 top-k 多一倍 twice top-k's entries", "too_many_entries", lambda t: upload(t, ratio=0.02)),
    BadUpload("NaN", "bad_payload", lambda t: upload(t, edit=set_item(t.matrix + "::val", 0, float("nan")))),
    BadUpload("无穷大 inf", "bad_payload", lambda t: upload(t, edit=set_item(t.matrix + "::val", 0, float("inf")))),
    BadUpload("X-Worker-Id 为空 empty", "bad_header", lambda t: upload(t, worker="")),
    BadUpload("X-Model-Version 为负 negative", "bad_header", lambda t: upload(t, version="-1"), in_demo=False),
    BadUpload("X-Loss 是 NaN", "bad_header",
              lambda t: with_headers(t, lambda h: replaced(h, "X-Loss", "nan")), in_demo=False),
    BadUpload("没有 token missing token", "unauthorized", lambda t: upload(t, auth=None)),
    BadUpload("token 错 wrong token", "unauthorized", lambda t: upload(t, auth="Bearer guess")),
    BadUpload("未来的版本 future version", "future_version", lambda t: upload(t, version=t.version + 5)),
    BadUpload("同一轮重复 repeat in a round", "repeat_in_round", lambda t: upload(t), prepare="in_round"),
    BadUpload("旧版本 stale version", "stale_version", lambda t: upload(t, version=t.version - 1),
              prepare="next_version"),
    BadUpload("没有 Content-Length", "length_required", lambda t: with_headers(
        t, lambda h: [(n, v) for n, v in h if n != "Content-Length"])),
    BadUpload("Content-Length 不是整数 12abc", "bad_length",
              lambda t: with_headers(t, lambda h: replaced(h, "Content-Length", "12abc"))),
    BadUpload("Content-Length 为负 -5", "bad_length",
              lambda t: with_headers(t, lambda h: replaced(h, "Content-Length", "-5")), in_demo=False),
    BadUpload("太大 Content-Length 10^9", "too_large", lambda t: Request(
        replaced(t.headers(b""), "Content-Length", str(10**9)), send_body=False)),
    # Ambiguous framing (issue 12): each is a request two parsers could read two ways.
    BadUpload("两个 Content-Length two lengths", "ambiguous_request", lambda t: with_headers(
        t, lambda h: doubled(h, "Content-Length", "5"))),
    BadUpload("Transfer-Encoding 加长度 and a length", "ambiguous_request", lambda t: with_headers(
        t, lambda h: h + [("Transfer-Encoding", "chunked")])),
    BadUpload("裸 CR bare CR in a header", "ambiguous_request", lambda t: with_headers(
        t, lambda h: replaced(h, "X-Loss", "3.0\rX-Worker-Id: eve"))),
    BadUpload("两个 Authorization（先对后错）", "ambiguous_request", lambda t: with_headers(
        t, lambda h: doubled(h, "Authorization", "Bearer guess"))),
    BadUpload("两个 Authorization（先错后对）", "ambiguous_request", lambda t: with_headers(
        t, lambda h: [("Authorization", "Bearer guess")] + h), in_demo=False),
    BadUpload("两个 X-Worker-Id", "ambiguous_request", lambda t: with_headers(
        t, lambda h: doubled(h, "X-Worker-Id", "eve"))),
    BadUpload("两个 X-Compression", "ambiguous_request", lambda t: with_headers(
        t, lambda h: doubled(h, "X-Compression", "none")), in_demo=False),
    # Header lines that are not `token ":" OWS value OWS` (issue 22; RFC 9112 §5.1): a lenient
    # parser stops at the first one and never sees the header that follows it.
    BadUpload("冒号前有空格 'Transfer-Encoding : chunked'", "malformed_header", lambda t: with_headers(
        t, lambda h: h + [("Transfer-Encoding : chunked", None)]), in_demo=False),
    BadUpload("冒号前有空格 'Content-Length : 0'", "malformed_header", lambda t: with_headers(
        t, lambda h: h + [("Content-Length : 0", None)]), in_demo=False),
    BadUpload("没有冒号的行，再 Transfer-Encoding", "malformed_header", lambda t: with_headers(
        t, lambda h: h + [("no colon here", None), ("Transfer-Encoding", "chunked")]), in_demo=False),
    BadUpload("没有冒号的行，再一个 Authorization", "malformed_header", lambda t: with_headers(
        t, lambda h: h + [("no colon here", None), ("Authorization", "Bearer guess")]), in_demo=False),
    BadUpload("NUL 开头的行，再一个 X-Worker-Id", "malformed_header", lambda t: with_headers(
        t, lambda h: h + [("\x00X-Note: hi", None), ("X-Worker-Id", "eve")]), in_demo=False),
    BadUpload("续行 obs-fold", "malformed_header", lambda t: with_headers(
        t, lambda h: after(h, "X-Loss", (" 4.0", None))), in_demo=False),
    BadUpload("Content-Length 后跟 \\x0b", "malformed_header", lambda t: with_headers(
        t, lambda h: [(n, v + "\x0b" if n == "Content-Length" else v) for n, v in h]), in_demo=False),
    BadUpload("Content-Length 前有 \\xa0", "bad_length", lambda t: with_headers(
        t, lambda h: [(n, "\xa0" + v if n == "Content-Length" else v) for n, v in h]), in_demo=False),
    BadUpload("101 行请求头 101 header lines", "headers_too_large", lambda t: with_headers(
        t, lambda h: h + [(f"X-Pad-{i}", "x") for i in range(101 - len(h))]), in_demo=False),
    BadUpload("Expect: 未知 unknown expectation", "expectation_failed", lambda t: with_headers(
        t, lambda h: h + [("Expect", "teapot")]), in_demo=False),
)


def send(url, request, timeout_s=10.0):
    """Send `request` as raw bytes to url's /gradients; (status, answer dict)."""
    parts = urlsplit(url)
    head = "POST /gradients HTTP/1.1\r\n" + f"Host: {parts.hostname}:{parts.port}\r\n"
    head += "".join(f"{name}\r\n" if value is None else f"{name}: {value}\r\n"
                    for name, value in request.headers) + "\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as sock:
        try:
            sock.sendall(head.encode("latin-1") + (request.body if request.send_body else b""))
        except OSError:   # the server may answer and close before taking a refused body
            pass
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, json.loads(response.read() or b"{}")


def valid_upload(url, target, worker):
    """One valid upload at the target's version; (status, answer)."""
    return send(url, upload(target, worker=worker))


def run_case(running, case, target):
    """Prepare the server's state as the row asks, then send the bad upload; (status, answer)."""
    swarm = running.swarm
    target.version = swarm.version
    if case.prepare == "in_round":
        valid_upload(running.url, target, "demo")
    elif case.prepare == "next_version":
        start, filler = swarm.version, 0
        while swarm.version == start:   # workers not yet in this round complete it
            valid_upload(running.url, target, f"fill-{filler}")
            filler += 1
        target.version = swarm.version
    return send(running.url, case.build(target))
