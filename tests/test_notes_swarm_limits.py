"""§6 §6.4 "服务器检查什么" and §6.5 "失败是常态": the figures in their tables (HTTP statuses,
size limits, seconds, counts, exit statuses) and in the retry paragraph are the swarm's
constants in code/lecture09/swarm/.

Each figure is read from the notes by a pattern around it and compared with the constant
the code uses (swarm_protocol.REFUSALS, ServerConfig, swarm_http, swarm_worker, ...), so
changing either side alone fails. In every row of table 五 (server and worker columns) and
in the status column of table 四, every number must be one some check read: a figure added
to a row without a check here fails until a check (or an exemption with a reason) is added.
"""

import inspect
import re

import pytest

from conftest import ROOT, notes_section, table_cells
from lecture09.swarm import swarm_checkpoint, swarm_http, swarm_protocol, swarm_server, swarm_worker
from lecture09.swarm.swarm_protocol import REFUSALS, ServerConfig, WorkerConfig
from notes_book import LECTURE09_BOOK

pytestmark = pytest.mark.smoke

NOTES = LECTURE09_BOOK
NUMBER = re.compile(r"\d+(?:\.\d+)?")
SERVER, WORKER = ServerConfig(), WorkerConfig()


def status(*codes):
    """The one HTTP status the refusal codes share (a row writes one figure for them)."""
    statuses = {REFUSALS[code][0] for code in codes}
    assert len(statuses) == 1, codes
    return statuses.pop()


def long_poll_check_s():
    """How often a waiting long poll looks whether its client left: a literal in weights_body."""
    source = inspect.getsource(swarm_server.ParameterServer.weights_body)
    return float(re.search(r"changed\.wait\(min\(([\d.]+), left_s\)\)", source).group(1))


# Table 四: order number -> the refusals its status cell gives without naming their codes,
# one group of codes per figure ("411 / 400 / 413"; "409" for all three of check 6).
CHECKS_UNNAMED = {"2": (("length_required",), ("bad_length",), ("too_large",)),
                  "6": (("future_version", "stale_version", "repeat_in_round"),)}
# Table 五: row (start of its first cell) -> [(pattern, what the code says for each group)].
FAILURES = {
    "请求头不合规": [],   # "400 `malformed_header`": read by the backticked-code rule
    "不支持的方法": [(r"(\d+) / (\d+) / (\d+)", lambda: [status(c) for c in (
        "unsupported_method", "bad_request_line", "unsupported_version")])],
    "长轮询名额满了": [(r"(\d+)，`Retry-After: (\d+)`", lambda: [status("busy"), swarm_http.BUSY_RETRY_AFTER_S])],
    "连接数满了": [(r"(\d+)，在接受连接", lambda: [status("busy")])],
    "有人猜 token": [(r"(\d+) s 内 (\d+) 次错误之后，错的 token 一律 (\d+)",
                    lambda: [SERVER.auth_window_s, SERVER.auth_failures, status("too_many_failures")]),
                   (r"(\d+) 是暂时的", lambda: [status("too_many_failures")])],
    "连上了不说话": [(r"截止时间到了回答 (\d+)", lambda: [status("request_timeout")]),
                  (r"([\d.]+) s 内放掉线程", lambda: [long_poll_check_s()])],
    "服务器收到 SIGTERM": [(r"最多再给 (\d+) s", lambda: [swarm_http.STOP_DRAIN_S])],
    "服务器被 `kill -9`": [],
    "检查点被截断或损坏": [(r"退出码 (\d+)", lambda: [swarm_checkpoint.CheckpointError.exit_status])],
    "请求头写了": [],   # "431 `headers_too_large`": the backticked-code rule
    "上传里有线上不用的 dtype": [],
    "旧版本的上传带着乱码": [(r"(\d+)，什么都不变", lambda: [status("stale_version")])],
    "用了稳健聚合时": [],
    "`/weights` 回答 200": [],
    "检查点写不了": [],
    "检查点校验和对": [(r"退出码 (\d+)", lambda: [swarm_checkpoint.CheckpointError.exit_status])],
    "用别的 `--compression`": [(r"退出码 (\d+)", lambda: [swarm_checkpoint.CheckpointError.exit_status])],
    "写检查点的进程死在半路": [],
    "一个工作者崩溃": [],
    "一个新工作者加入": [],
}
# Figures in table 五 no constant holds, each with its reason.
EXEMPT = {("服务器收到 SIGTERM", "0"): "退出码 0: success, the usual exit status (test_swarm_durability checks it)",
          ("`/weights` 回答 200", "1"): "退出码 1: the worker's failure status (test_swarm_issue45 checks it)",
          ("检查点写不了", "1"): "退出码 1: a stop without its checkpoint (test_swarm_checkpoints checks it)"}


def table(heading):
    """[[cell, ...]] of the first table in a section, header and separator left out."""
    lines = [line for line in notes_section(NOTES, heading).splitlines() if line.startswith("|")]
    return [table_cells(line) for line in lines[2:]]


def read(text, pattern, expected):
    """Compare the figures `pattern` reads in `text` with the code's; return their spans."""
    match = re.search(pattern, text)
    assert match, f"pattern {pattern!r} no longer finds its figure in {text!r}"
    written = [float(g) for g in match.groups()]
    assert written == [float(v) for v in expected], (pattern, written, expected)
    return [match.span(i + 1) for i in range(len(written))]


def unread(text, spans):
    return [m.group() for m in NUMBER.finditer(text) if not any(a <= m.start() < b for a, b in spans)]


def backticked_codes(text):
    """Spans of "NNN `code`" pairs (a status with its refusal code), each checked."""
    spans = []
    for m in re.finditer(r"(\d{3}) `([a-z_]+)`", text):
        assert int(m.group(1)) == status(m.group(2)), m.group()
        spans.append(m.span(1))
    return spans


def test_table_4_statuses_are_the_refusal_codes():
    rows = table("### 6.4 服务器检查什么")
    assert [row[0] for row in rows] == [str(n) for n in range(1, len(rows) + 1)]
    for number, _, refusal in rows:
        spans = backticked_codes(refusal)
        if number in CHECKS_UNNAMED:
            groups = CHECKS_UNNAMED[number]
            spans += read(refusal, r"\s*/\s*".join([r"(\d+)"] * len(groups)), [status(*g) for g in groups])
        left = unread(refusal, spans)
        assert left in ([], ["200"]), (number, left)       # 200: the upload passed every check
        assert left == [] or number == str(len(rows)), "only the last check ends in 200"


def test_table_4_limits_are_the_servers():
    rows = {row[0]: row[1] for row in table("### 6.4 服务器检查什么")}
    read(rows["2"], r"(\d+) 字节 × 参数个数 \+ (\d+) KiB",
         [swarm_protocol.BYTES_PER_SPARSE_ENTRY, swarm_protocol.HEADER_ALLOWANCE_BYTES / 1024])
    setting = re.search(r"`(\w+)`，默认 (\d+) 秒", rows["5"])
    assert setting and float(setting.group(2)) == getattr(SERVER, setting.group(1)), rows["5"]
    single = re.findall(r"`([A-Z][\w-]+)`", rows["1"].split("这类只能有一个值")[0].split("没有单独的 CR；")[1])
    assert single and set(single) <= set(swarm_protocol.SINGLE_VALUED), single


def test_table_5_figures_are_the_swarms_constants():
    rows = table("### 6.5 失败是常态")
    assert len(rows) == len(FAILURES)
    for row in rows:
        key = next((k for k in FAILURES if row[0].startswith(k)), None)
        assert key, f"a row not in FAILURES (add its checks): {row[0]}"
        text = row[1] + " | " + row[2]                       # what the server and the worker do
        spans = backticked_codes(text)
        for pattern, expected in FAILURES[key]:
            spans += read(text, pattern, expected())
        left = [n for n in unread(text, spans) if (key, n) not in EXEMPT]
        assert not left, f"{key}: figures no check reads: {left}"
        for name in re.findall(r"test_\w+\.py", row[3]):           # the row's test column
            assert (ROOT / "tests" / name).exists(), name


def test_the_retry_paragraph_is_the_workers_backoff():
    text = notes_section(NOTES, "### 6.5 失败是常态")
    para = text[text.index("**重试 retry**"):text.index("**检查点 checkpoint**")]
    transient = re.search(r"把 (\d+)、(\d+)、(\d+) 和", para)
    assert transient and {int(g) for g in transient.groups()} == set(swarm_protocol.TRANSIENT_STATUSES)
    read(para, r"从 ([\d.]+) s 开始每次翻倍、最多 ([\d.]+) s",
         [swarm_worker.BACKOFF_FIRST_S, swarm_worker.BACKOFF_CAP_S])
    read(para, r"`--retry-budget-s`（默认 (\d+) s）", [WORKER.retry_budget_s])


def test_the_limits_listed_under_table_4_are_the_servers():
    text = notes_section(NOTES, "### 6.4 服务器检查什么")
    low, factor = (int(g) for g in re.search(r"`max_connections`，默认 max\((\d+), (\d+) × 长轮询名额\)", text).groups())
    extra = int(re.search(r"`max_long_polls`，默认工作者数 \+ (\d+)", text).group(1))
    for world_size in (1, 4, 40):
        config = ServerConfig(world_size=world_size)
        assert config.long_poll_slots == world_size + extra
        assert config.connection_slots == max(low, factor * (world_size + extra))
    read(text, r"监听队列（listen backlog）是 (\d+)", [SERVER.listen_backlog])
    read(text, r"同一个客户端地址 (\d+) s 内最多 (\d+) 次错误", [SERVER.auth_window_s, SERVER.auth_failures])
    read(text, r"`Retry-After: (\d+)`", [swarm_http.BUSY_RETRY_AFTER_S])
