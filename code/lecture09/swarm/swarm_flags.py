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
