"""The value types of code 6's flags (lecture 9, §6): each refuses a bad value at parse
time with one line (argparse turns the ArgumentTypeError into exit status 2). No torch at
import nor when a value is parsed: --help and a refusal answer at once.
"""

import argparse
from urllib.parse import urlsplit

from lecture01.cli_args import float_in, int_in
from lecture09.swarm.swarm_protocol import TOKEN_PATTERN, WORKER_ID_PATTERN

non_negative_float = float_in(0, None)
PORT = int_in(0, 65535)            # 0: let the OS pick a free port
WORKER_ID = int_in(0, 99_999)      # seeds the batch generator as data_seed * 100_000 + id
WORKER_COUNT = int_in(1, 64)       # each worker is a process
# compression.WIRE_MODES, written out: that module imports torch, and a refused --modes or
# --compression must answer before torch is imported (tests/test_refusals.py checks they agree)
WIRE_MODES = ("none", "topk", "topk-int8")


def token(text):
    if not TOKEN_PATTERN.fullmatch(text):
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
    """One of compression.WIRE_MODES (written out above, so a flag error needs no torch)."""
    if text not in WIRE_MODES:
        raise argparse.ArgumentTypeError(f"需要压缩方式 (expected one of {', '.join(WIRE_MODES)}), got {text!r}")
    return text


def mode_list(text):
    """"all" or a comma list of distinct modes of compression.WIRE_MODES."""
    modes = list(WIRE_MODES) if text.strip() == "all" else [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in WIRE_MODES]
    if not modes or bad or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"要 all 或不重复的 {','.join(WIRE_MODES)} (comma list), got {text!r}")
    return modes


def read_token_file(path):
    """((worker id, token), ...) from a file of lines `worker_id token` (# starts a comment).
    ValueError, naming the line, for a malformed line, a repeated id or a repeated token."""
    import os
    name = os.path.basename(path)          # the message names the file, not its whole path: one line
    pairs, ids, secrets_seen = [], set(), set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            parts = text.split()
            if (len(parts) != 2 or not WORKER_ID_PATTERN.fullmatch(parts[0])
                    or not TOKEN_PATTERN.fullmatch(parts[1])):
                raise ValueError(f"{name}:{number}: expected `worker_id token` "
                                 "(id: A-Z a-z 0-9 _ . -; token: A-Z a-z 0-9 . _ ~ + / = -)")
            if parts[0] in ids or parts[1] in secrets_seen:
                raise ValueError(f"{name}:{number}: worker id or token repeated")
            ids.add(parts[0])
            secrets_seen.add(parts[1])
            pairs.append((parts[0], parts[1]))
    if not pairs:
        raise ValueError(f"{name}: no `worker_id token` lines")
    return tuple(pairs)


RELAY_LINKS_HELP = ("每个工作者自己的中继链路，逗号隔开，一个工作者一个 RTT_MS:MB_S[:DOWN_MB_S]（RTT 0-60000 ms，"
                    "MB/s > 0；不给 DOWN 时下行 = 上行；隐含 --relay）per-worker relay links, e.g. 50:10,400:1 "
                    "(default: none)")
MAX_RTT_MS = 60_000.0


def relay_links(text):
    """--relay-links "RTT_MS:MB_S[:DOWN_MB_S],...": ((rtt ms, up MB/s, down MB/s), ...), one per
    worker; MB = 10^6 bytes. Refused (one line) unless 0 <= RTT <= 60 s and every rate > 0."""
    import math
    links = []
    for part in text.split(","):
        try:
            values = [float(field) for field in part.strip().split(":")]
        except ValueError:
            values = []
        if (len(values) not in (2, 3) or not all(math.isfinite(v) for v in values)
                or not 0 <= values[0] <= MAX_RTT_MS or min(values[1:]) <= 0):
            shown = part.strip() if len(part.strip()) <= 12 else part.strip()[:9] + "..."
            raise argparse.ArgumentTypeError(f"要 RTT_MS:MB_S[:DOWN_MB_S], got {shown!r}")
        links.append((values[0], values[1], values[-1]))
    return tuple(links)


def add_relay_flags(parser):
    """Code 6's --relay and --relay-links (the script is at its line limit: they live here)."""
    parser.add_argument("--relay", action="store_true",
                        help="再训练一次，每个工作者经过本机中继 relay（§5.12）(default %(default)s)")
    parser.add_argument("--relay-links", type=relay_links, metavar="LINKS", help=RELAY_LINKS_HELP)


def check_relay_links(parser, args):
    """After --quick: one link per worker (or refuse, exit 2); --relay-links implies --relay. Returns args."""
    if getattr(args, "relay_links", None):
        if len(args.relay_links) != args.workers:
            parser.error(f"--relay-links 给了 {len(args.relay_links)} 条链路，--workers 是 {args.workers} "
                         f"(one link per worker)")
        args.relay = True
    return args
