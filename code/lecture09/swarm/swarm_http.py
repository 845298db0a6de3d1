"""The swarm's HTTP layer (lecture 9, code 6): bytes on the socket <-> ParameterServer.

Introduced in lecture 9, §6. The handler makes the checks swarm_protocol.py lists, in
its order, and bounds what one client can hold: a deadline on the whole request (408),
a cap on open connections (503) and on waiting long polls, a listen backlog of
config.listen_backlog. It counts every byte it reads and writes, HTTP headers included,
per endpoint (RunningServer.traffic), so the tables can show both directions.
"""

import io
import json
import math
import re
import select
import socket
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from http.client import HTTPMessage

from lecture09.swarm.swarm_checkpoint import fitted
from lecture09.swarm.swarm_head import read_head
from lecture09.swarm.swarm_protocol import (HOST, REFUSALS, WORKER_ID_PATTERN, AuthThrottle, Rejection,
                                            ServerConfig, check_framing, check_upload_request)
from lecture09.swarm.swarm_server import ParameterServer

WRITE_TIMEOUT_S = 30.0   # a client that stops reading our answer frees its thread after this
DRAIN_LIMIT_S = 2.0      # after refusing a body unread, how long we discard what still arrives
BUSY_RETRY_AFTER_S = 1   # what a 503 (no free connection or long-poll slot) asks a client to wait


class RequestDeadline(TimeoutError):
    """The whole request (line, headers, body) did not arrive within the deadline."""


class _DeadlineReader(io.RawIOBase):
    """The socket's read side with one deadline for a whole request: every recv may wait
    only for what is left of it, so a client trickling one byte a second cannot hold a
    thread longer than the deadline. Counts the bytes it hands out."""

    def __init__(self, sock):
        self.sock = sock
        self.deadline = math.inf
        self.bytes_read = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        remaining_s = self.deadline - time.monotonic()
        if remaining_s <= 0:
            raise RequestDeadline("request deadline passed")
        self.sock.settimeout(remaining_s)
        try:
            n = self.sock.recv_into(buffer)
        except TimeoutError:
            raise RequestDeadline("request deadline passed") from None
        self.bytes_read += n
        return n


class _CountingWriter(io.RawIOBase):
    """The socket's write side: a bounded wait per write, and a count of bytes written."""

    def __init__(self, sock):
        self.sock = sock
        self.bytes_written = 0

    def writable(self):
        return True

    def write(self, data):
        self.sock.settimeout(WRITE_TIMEOUT_S)
        self.sock.sendall(data)
        self.bytes_written += len(data)
        return len(data)


def _endpoint(command, path):
    route = urlsplit(path).path
    return f"{command} {route}" if route in ("/weights", "/gradients", "/status") else "other"


def _json_bytes(answer):
    """JSON that every parser reads: allow_nan=False turns a stray inf into an error here,
    not invalid JSON on the wire."""
    return json.dumps(answer, allow_nan=False).encode()


class SwarmHandler(BaseHTTPRequestHandler):
    server_version = "TinySwarm/1.0"
    # Headers and body leave in separate writes; with Nagle's algorithm on, the body would
    # wait for the client's delayed ACK (~40 ms on Linux) on every request.
    disable_nagle_algorithm = True

    def setup(self):
        super().setup()
        # Our own reader and writer replace the socket files; closing those releases
        # their hold on the socket, so it really closes when the request is done.
        self.rfile.close()
        self.wfile.close()
        self.reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self.reader)
        self.writer = _CountingWriter(self.connection)
        self.wfile = self.writer
        self.raw_header_lines = []
        self.answered = False

    def version_string(self):
        return self.server_version   # not the Python version: the same header bytes on every machine

    def log_message(self, format, *args):   # noqa: A002 - the base class's signature
        if self.server.verbose:
            super().log_message(format, *args)

    # --- one request: read, check, answer; a slow or vanished client ends quietly ---

    def handle_one_request(self):
        swarm = self.server.swarm
        self.reader.deadline = time.monotonic() + swarm.config.request_deadline_s
        self.answered = False
        read_before, written_before = self.reader.bytes_read, self.writer.bytes_written
        # What send_response and log_request read, set before anything can fail: an answer
        # to a request that never arrived (408) still has a status line.
        self.command, self.path, self.request_version, self.requestline = None, "", "HTTP/1.1", ""
        try:
            head = read_head(self.rfile.readline)
            if head is None:
                self.close_connection = True
                return
            self._adopt(head)
            getattr(self, "do_" + head.method)()
        except Rejection as rejection:   # check 0: the request line or a header line
            self.close_connection = True
            self._try(self._refuse, rejection)
            self._drain_unread()
        except RequestDeadline:
            self.close_connection = True
            if not self.answered:
                self._try(self._refuse, Rejection("request_timeout", "the request did not arrive within "
                                                  f"{swarm.config.request_deadline_s:g} s"))
                self._drain_unread()
        except (ConnectionError, TimeoutError, OSError):
            self.close_connection = True   # the client went away: nothing to say, nothing to log
        finally:
            self.server.count_traffic(_endpoint(self.command, self.path) if self.command else "other",
                                      self.reader.bytes_read - read_before,
                                      self.writer.bytes_written - written_before)

    def _adopt(self, head):
        """The parsed head as http.server's attributes; whether the connection stays open."""
        self.command, self.path, self.request_version = head.method, head.target, head.version
        self.requestline = f"{head.method} {head.target} {head.version}"
        self.headers = HTTPMessage()
        for name, value in head.headers:
            self.headers[name] = value   # appends: a repeated header stays visible to check_framing
        self.raw_header_lines = head.raw_lines
        # One request per connection, as http.server does for its protocol_version HTTP/1.0
        # (urllib opens a connection per request anyway): no idle keep-alive holds a thread.
        self.close_connection = True
        expect = self.headers.get("Expect")
        if expect is not None:
            if expect.lower() != "100-continue":
                raise Rejection("expectation_failed", f"Expect: {expect} is not supported")
            self.send_response_only(100)
            self.end_headers()

    def _try(self, action, *args):
        try:
            action(*args)
        except OSError:
            pass

    def send_response(self, code, message=None):
        self.answered = True
        super().send_response(code, message)

    def _reply(self, status, body, content_type="application/json", headers=None):
        if isinstance(body, dict):
            body = _json_bytes(body)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, rejection, headers=None):
        """The one error writer: every refusal is JSON with a code from REFUSALS."""
        swarm = self.server.swarm
        swarm.count_rejection(rejection.code)
        headers = dict(headers or {})
        if rejection.code == "unauthorized":
            headers["WWW-Authenticate"] = "Bearer"
        if rejection.retry_after_s is not None:
            headers["Retry-After"] = str(max(1, math.ceil(rejection.retry_after_s)))
        self._reply(rejection.status, {"accepted": False, "applied": False, "code": rejection.code,
                                       "error": rejection.reason, "version": swarm.version}, headers=headers)

    def _client_gone(self):
        """Whether the client closed its end (readable with nothing to read)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # --- endpoints -------------------------------------------------------

    def do_GET(self):
        swarm = self.server.swarm
        try:
            check_framing(self.raw_header_lines, self.headers)
        except Rejection as rejection:
            self.close_connection = True
            return self._refuse(rejection)
        parts = urlsplit(self.path)
        if parts.path == "/status":
            return self._reply(200, swarm.status())
        if parts.path != "/weights":
            return self._refuse(Rejection("not_found", f"no such endpoint {parts.path}"))
        after = parse_qs(parts.query).get("after", [None])[0]
        if after is not None and not re.fullmatch(r"-?[0-9]{1,18}", after):
            return self._refuse(Rejection("bad_header", "after must be an integer"))
        after = None if after is None else int(after)
        if after is not None and not self.server.long_polls.acquire(blocking=False):
            # Every slot holds a waiting client: a full answer now would send the whole body
            # to a client that asked to wait, and it would ask again at once (a spin).
            return self._refuse(Rejection("busy", f"all {swarm.config.long_poll_slots} long-poll slots are "
                                                  "taken; try again", retry_after_s=BUSY_RETRY_AFTER_S))
        worker = self.headers.get("X-Worker-Id")
        worker = worker if worker and WORKER_ID_PATTERN.fullmatch(worker) else None
        try:
            body, version, done, in_round, epoch = swarm.weights_body(after, self._client_gone, worker)
        finally:
            if after is not None:
                self.server.long_polls.release()
        headers = {"X-Model-Version": str(version), "X-Training-Done": "1" if done else "0", **epoch}
        if worker is not None:   # whether this worker's upload is in the current round
            headers["X-In-Round"] = "1" if in_round else "0"
        self._reply(200, body, "application/octet-stream", headers)

    def do_POST(self):
        swarm = self.server.swarm
        address = self.client_address[0]
        try:
            try:
                n_bytes, upload = check_upload_request(self.raw_header_lines, self.headers, urlsplit(self.path).path,
                                                       swarm.max_body_bytes, swarm.config.token,
                                                       swarm.config.worker_tokens)
            except Rejection as rejection:
                if rejection.code == "unauthorized":
                    # a wrong token: 429 once this address has failed too often lately (a valid
                    # token is never throttled: the classroom's workers share 127.0.0.1)
                    self.server.auth_throttle.check(address)
                    self.server.auth_throttle.failed(address)
                raise
        except Rejection as rejection:
            # The body is never read: close after answering, and discard (for a moment)
            # what the client still sends, so its kernel does not reset our answer away.
            self.close_connection = True
            self._refuse(rejection)
            self._drain_unread()
            return
        body = self.rfile.read(n_bytes)   # bounded by the cap and by the request deadline
        if len(body) != n_bytes:
            self.close_connection = True
            return self._refuse(Rejection("incomplete_body", f"body ended after {len(body)} of {n_bytes} bytes"))
        try:
            answer = swarm.submit(upload, body)
        except Rejection as rejection:
            return self._refuse(rejection)
        except Exception as error:   # a check we lack: still an answer, with a code, and one log line
            first = (str(error).splitlines() or [""])[0]
            print(fitted(f"服务器内部错误 internal error on an upload: {type(error).__name__}: {first}", 100),
                  file=sys.stderr, flush=True)
            return self._refuse(Rejection("internal_error", f"the server failed on this upload ({type(error).__name__})"))
        self._reply(200, answer)

    def _drain_unread(self):
        """After answering without reading what the client sent: stop writing, then discard
        what arrives for at most DRAIN_LIMIT_S. Closing with unread bytes would make the
        kernel reset the connection, and the client could lose our answer."""
        self.reader.deadline = time.monotonic() + DRAIN_LIMIT_S
        _drain(self.connection, self.rfile.read1)


def _drain(sock, read):
    try:
        sock.shutdown(socket.SHUT_WR)
        while read(65536):
            pass
    except OSError:   # includes RequestDeadline: we stop listening either way
        pass


class SwarmHTTPServer(ThreadingHTTPServer):
    daemon_threads = True   # a long-polling handler must not keep the process alive

    def __init__(self, address, swarm, verbose=False):
        self.request_queue_size = swarm.config.listen_backlog   # read by server_activate's listen()
        super().__init__(address, SwarmHandler)
        self.swarm = swarm
        self.verbose = verbose
        self.connections = threading.BoundedSemaphore(swarm.config.connection_slots)
        self.long_polls = threading.BoundedSemaphore(swarm.config.long_poll_slots)
        self.auth_throttle = AuthThrottle(swarm.config.auth_failures, swarm.config.auth_window_s)
        self.traffic = Counter()   # "<endpoint> requests" / "bytes in" / "bytes out"
        self.traffic_lock = threading.Lock()

    def count_traffic(self, endpoint, bytes_in, bytes_out):
        with self.traffic_lock:
            self.traffic[f"{endpoint} requests"] += 1
            self.traffic[f"{endpoint} bytes in"] += bytes_in
            self.traffic[f"{endpoint} bytes out"] += bytes_out

    def process_request(self, request, client_address):
        if not self.connections.acquire(blocking=False):
            self._answer_busy(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.connections.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def _answer_busy(self, request):
        """503 from the accepting thread itself, without reading anything: it must stay quick."""
        code = "busy"
        body = _json_bytes({"accepted": False, "applied": False, "code": code,
                            "error": "too many open connections; try again", "version": self.swarm.version})
        head = (f"HTTP/1.1 {REFUSALS[code][0]} Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: {BUSY_RETRY_AFTER_S}\r\n\r\n").encode()
        self.swarm.count_rejection(code)

        def answer():   # a short-lived thread outside the cap: at most DRAIN_LIMIT_S + 0.5 s
            try:
                request.settimeout(0.5)
                request.sendall(head + body)
                end_s = time.monotonic() + DRAIN_LIMIT_S
                request.settimeout(DRAIN_LIMIT_S)
                _drain(request, lambda n: request.recv(n) if time.monotonic() < end_s else b"")
            except OSError:
                pass
            finally:
                request.close()

        threading.Thread(target=answer, daemon=True).start()

    def handle_error(self, request, client_address):
        """A client that vanished is not an error of ours: no traceback in the log."""
        import sys
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            return
        super().handle_error(request, client_address)


POLL_INTERVAL_S = 0.05
STOP_DRAIN_S = 5.0   # on stop, how long requests in flight may take to finish before the checkpoint


class RunningServer:
    """A ParameterServer behind HTTP on 127.0.0.1, serving from a background thread;
    resume: a checkpoint file or folder to go on from (swarm_checkpoint.py)."""

    def __init__(self, config=ServerConfig(), port=0, verbose=False, resume=None):
        self.swarm = ParameterServer(config)
        if resume is not None:
            self.swarm.restore(resume)
        self.httpd = SwarmHTTPServer((HOST, port), self.swarm, verbose)   # port 0: the OS picks a free one
        self.url = f"http://{HOST}:{self.httpd.server_address[1]}"
        # serve_forever checks for shutdown() every poll interval: 0.05 s, not the default
        # 0.5 s that every close would wait (the default run closes five servers).
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S},
                                       daemon=True)
        self.thread.start()

    @property
    def traffic(self):
        with self.httpd.traffic_lock:
            return dict(self.httpd.traffic)

    def close(self):
        self.swarm.close()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def stop(self):
        """A graceful stop (SIGTERM, Ctrl-C): accept nothing new, let what is in flight finish
        (waiting long polls answer at once; at most STOP_DRAIN_S), then write a checkpoint
        of everything, the round in progress included. Returns (path, bytes, seconds) or None
        without a checkpoint folder; swarm_checkpoint.CheckpointWriteError if it cannot be
        written. In-flight requests still running after the drain time
        are cut off (an upload not yet in the round is lost, as if it never arrived)."""
        self.swarm.close()            # long polls return now; a round deadline no longer fires
        self.httpd.shutdown()         # serve_forever returns: no new connection is accepted
        self.thread.join()
        end_s = time.monotonic() + STOP_DRAIN_S
        slots = self.swarm.config.connection_slots
        while self.httpd.connections._value < slots and time.monotonic() < end_s:
            time.sleep(0.02)
        try:
            return self.swarm.checkpoint() if self.swarm.config.checkpoint_dir else None
        finally:
            self.httpd.server_close()
