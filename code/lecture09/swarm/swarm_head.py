"""Check 0 of the swarm's protocol (lecture 9, code 6; swarm_protocol.py lists them all):
the request line and the header block, read strictly as RFC 9112 asks, before anything
else looks at a request. No torch here.
"""

import re
from dataclasses import dataclass

from lecture09.swarm.swarm_protocol import Rejection

MAX_LINE_BYTES = 65_536     # longest request line or header line
MAX_HEADER_LINES = 100
# The header lines together (issue 45, item 11): with only the two limits above, one
# unfinished head could hold 100 x 64 KiB = 6.5 MB, about twice that once parsed, and 50
# such clients grew the server by 604 MB. With this one a head holds at most 64 KiB + the
# request line, so the connection slots (ServerConfig.connection_slots) bound what all
# unfinished heads hold: 64 slots x (2 x 64 KiB, parsed) x 2 = 16 MiB at most.
MAX_HEADER_BYTES = 65_536
METHODS = ("GET", "POST")
TCHAR = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]"
REQUEST_LINE = re.compile(rb"(" + TCHAR + rb"+) (\S+) (HTTP/[0-9]\.[0-9])\r\n")
HEADER_LINE = re.compile(rb"(" + TCHAR + rb"+):[ \t]*(.*?)[ \t]*\r\n", re.DOTALL)
CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")   # all but HTAB; obs-text (0x80-0xFF) is allowed


@dataclass(frozen=True)
class Head:
    method: str
    target: str
    version: str
    headers: list       # (name, value) pairs in order, as latin-1 text
    raw_lines: list     # the header lines as bytes, as they came off the socket


def read_head(readline):
    """0. The request line and the header block, read with readline(limit) -> bytes.

    Strict, as RFC 9112 asks of a server that must not be read two ways: every line ends
    in CRLF; the request line is `method SP target SP HTTP/x.y`; every header line is
    `token ":" OWS value OWS` (OWS = SP / HTAB only), so a space before the colon, a line
    with no colon, a continuation line (obs-fold) or a control byte is refused, not skipped.
    Returns a Head, or None when the client closed before sending anything."""
    line = readline(MAX_LINE_BYTES + 1)
    if not line:
        return None
    if len(line) > MAX_LINE_BYTES:
        raise Rejection("uri_too_long", f"request line longer than {MAX_LINE_BYTES} bytes")
    match = REQUEST_LINE.fullmatch(line)
    if not match:
        raise Rejection("bad_request_line", "request line must be 'METHOD /path HTTP/1.1' ending in CRLF")
    method, target, version = (part.decode("latin-1") for part in match.groups())
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        if version[5] == "1" or version[5] == "0":
            raise Rejection("bad_request_line", f"unknown HTTP version {version}")
        raise Rejection("unsupported_version", f"{version} is not supported: use HTTP/1.1")
    headers, raw_lines, header_bytes = [], [], 0
    while True:
        line = readline(min(MAX_LINE_BYTES, MAX_HEADER_BYTES - header_bytes) + 1)
        if line in (b"\r\n", b""):
            if not line:
                raise Rejection("malformed_header", "the connection closed inside the header block")
            break
        header_bytes += len(line)
        if header_bytes > MAX_HEADER_BYTES or len(raw_lines) >= MAX_HEADER_LINES:
            raise Rejection("headers_too_large", f"at most {MAX_HEADER_LINES} header lines and "
                                                 f"{MAX_HEADER_BYTES} bytes of them")
        raw_lines.append(line)
        if b"\r" in line[:-2]:
            # http.client splits lines on LF only, and email's parser then also on a lone
            # CR, so "X-Loss: 1\rX-Worker-Id: eve" would smuggle a header past a proxy.
            raise Rejection("ambiguous_request", "a header line contains a bare CR")
        match = HEADER_LINE.fullmatch(line)
        if not match or CONTROL_BYTES.search(match.group(2)):
            shown = line[:40].decode("latin-1").encode("unicode_escape").decode()
            raise Rejection("malformed_header", f"header line {len(raw_lines)} is not 'Name: value' "
                                                f"(RFC 9112 §5.1): {shown!r}")
        headers.append(tuple(part.decode("latin-1") for part in match.groups()))
    if method not in METHODS:   # methods are case-sensitive: "get" is not GET
        raise Rejection("unsupported_method", f"method {method} is not supported: only {' and '.join(METHODS)}")
    if not target.startswith("/"):
        raise Rejection("bad_request_line", "the request target must be a path starting with /")
    return Head(method, target, version, headers, raw_lines)
