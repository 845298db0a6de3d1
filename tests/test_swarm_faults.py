"""Code 6 against sloppy or hostile HTTP and a full server (issue 22, items 1-7): a strict
request line and header block, one JSON error writer, no spin when the long-poll slots
are full, workers that retry what is transient, throttled token guessing, and handlers
that end cleanly. Each server test ends with a valid round (assert_valid_round)."""

import json
import re
import socket
import threading
import time

import pytest

from lecture01.tiny_gpt import load_world_tokens
from lecture09.compress import compression as c
from lecture09.swarm import swarm_protocol
from lecture09.swarm.swarm_head import read_head
from lecture09.swarm.swarm_protocol import AuthThrottle, Rejection, ServerConfig, WorkerConfig
from lecture09.swarm.swarm_worker import GaveUp, Worker, call_with_retry, http_call
from test_swarm_http import TOKEN, assert_valid_round, payload_for, post
from test_swarm_robustness import address, make_server


@pytest.fixture
def server():
    running = make_server()
    yield running
    running.close()


def raw_answer(server, data, timeout_s=10.0):
    """Send raw bytes; (status, headers text, JSON body) of the answer, read to its end."""
    with socket.create_connection(address(server), timeout=timeout_s) as sock:
        sock.sendall(data)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
            head, _, body = received.partition(b"\r\n\r\n")
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                break
    head, _, body = received.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n")[0].decode()
    assert re.fullmatch(r"HTTP/1\.[01] [0-9]{3} .*", status_line), received[:200]   # always a status line
    return int(status_line.split()[1]), head.decode("latin-1"), json.loads(body)


# --- 1-3. the request line and the header block, strictly; every refusal is JSON ------

REQUEST_LINES = [
    (b"HEAD /status HTTP/1.1", 501, "unsupported_method"),
    (b"OPTIONS /status HTTP/1.1", 501, "unsupported_method"),
    (b"PUT /gradients HTTP/1.1", 501, "unsupported_method"),
    (b"DELETE /status HTTP/1.1", 501, "unsupported_method"),
    (b"TRACE /status HTTP/1.1", 501, "unsupported_method"),
    (b"CONNECT 127.0.0.1:80 HTTP/1.1", 501, "unsupported_method"),
    (b"get /status HTTP/1.1", 501, "unsupported_method"),
    (b"GET /status HTTP/1.1.1", 400, "bad_request_line"),
    (b"GET /status HTTP/2.0", 505, "unsupported_version"),
    (b"GET  /status HTTP/1.1", 400, "bad_request_line"),
    (b"GET /status", 400, "bad_request_line"),
    (b"GET status HTTP/1.1", 400, "bad_request_line"),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1", 414, "uri_too_long"),
]


@pytest.mark.parametrize("line, code, name", REQUEST_LINES, ids=lambda v: v[:24] if isinstance(v, bytes) else v)
def test_each_bad_request_line_gets_its_json_refusal(server, line, code, name):
    got, head, answer = raw_answer(server, line + b"\r\nHost: x\r\n\r\n")
    assert (got, answer["code"]) == (code, name), answer
    assert swarm_protocol.REFUSALS[name][0] == code and "application/json" in head
    assert "<html" not in json.dumps(answer).lower()
    assert_valid_round(server)


@pytest.mark.parametrize("lines, code, name", [
    ([b"Host : x"], 400, "malformed_header"),
    ([b"Host: x", b"no colon"], 400, "malformed_header"),
    ([b"Host: x", b" folded"], 400, "malformed_header"),
    ([b"Host: x", b"X-Note: a\x01b"], 400, "malformed_header"),
    ([b"Host: x", b"X-Note: a\rb"], 400, "ambiguous_request"),
    ([b"Host: x"] + [b"X-Pad: %d" % i for i in range(100)], 431, "headers_too_large"),
    ([b"Host: x", b"X-Long: " + b"a" * 70_000], 431, "headers_too_large"),
])
def test_a_get_with_a_malformed_header_block_is_refused(server, lines, code, name):
    got, _, answer = raw_answer(server, b"GET /status HTTP/1.1\r\n" + b"\r\n".join(lines) + b"\r\n\r\n")
    assert (got, answer["code"]) == (code, name), answer
    assert_valid_round(server)


def test_read_head_by_hand():
    lines = iter([b"POST /gradients HTTP/1.1\r\n", b"Content-Length: \t12 \r\n", b"X-A:b\r\n", b"\r\n"])
    head = read_head(lambda limit: next(lines))
    assert (head.method, head.target, head.version) == ("POST", "/gradients", "HTTP/1.1")
    assert head.headers == [("Content-Length", "12"), ("X-A", "b")]   # OWS is SP and HTAB, dropped
    assert read_head(lambda limit: b"") is None   # closed before a request
    lines = iter([b"GET / HTTP/1.1\r\n", b"X: a\n"])   # a header line must end in CRLF
    with pytest.raises(Rejection) as refused:
        read_head(lambda limit: next(lines))
    assert refused.value.code == "malformed_header"


def test_content_length_with_sp_and_htab_around_it_is_accepted(server):
    body = c.payload_to_bytes(payload_for(server))
    head = (f"POST /gradients HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nX-Worker-Id: ows\r\n"
            f"X-Compression: topk\r\nX-Loss: 3\r\nX-Model-Version: 0\r\nContent-Length: \t{len(body)} \r\n\r\n")
    got, _, answer = raw_answer(server, head.encode() + body)
    assert (got, answer["accepted"]) == (200, True)


# --- 4. full long-poll slots: 503 with Retry-After, and a worker that does not spin ----

def test_the_long_poll_slots_fit_the_worker_count():
    for world in (1, 4, 17, 64):
        config = ServerConfig(world_size=world)
        assert config.long_poll_slots >= world + 16
        assert config.connection_slots >= config.long_poll_slots + world   # polls never fill the connections


def test_a_client_facing_full_slots_backs_off_instead_of_spinning():
    running = make_server(max_long_polls=1, long_poll_s=600)
    holder = socket.create_connection(address(running))
    try:
        holder.sendall(b"GET /weights?after=0 HTTP/1.1\r\nHost: x\r\n\r\n")
        while running.httpd.long_polls._value != 0:
            time.sleep(0.05)
        requests_before = running.traffic.get("GET /weights requests", 0)
        with pytest.raises(GaveUp):
            call_with_retry(lambda: http_call(f"{running.url}/weights?after=0"), 2.5, __import__("random").Random(0))
        asked = running.traffic["GET /weights requests"] - requests_before
        # Retry-After: 1 is a floor on every wait: at most 4 tries in 2.5 s (it was ~2,000 before).
        assert 2 <= asked <= 4, asked
        assert running.traffic["GET /weights bytes out"] < 10_000   # no 335 KB weights in any answer
    finally:
        holder.close()
        running.close()


# --- 5. workers retry what is transient, with a budget; stop on what cannot succeed ------

class FakeClock:
    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class Headers(dict):
    pass


def test_call_with_retry_by_hand():
    import random
    answers = iter([(503, Headers({"Retry-After": "2"}), b""), ConnectionRefusedError("down"), (200, {}, b"ok")])

    def call():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer
    clock, retries = FakeClock(), []
    answer = call_with_retry(call, 60, random.Random(0), clock.sleep, lambda: clock.now, lambda: retries.append(1))
    assert answer == (200, {}, b"ok") and len(retries) == 2
    assert clock.sleeps[0] >= 2.0                 # Retry-After is a floor
    assert 0 <= clock.sleeps[1] <= 0.2            # then full jitter under the doubled backoff
    # 401 cannot succeed on retry: returned at once
    assert call_with_retry(lambda: (401, {}, b""), 60, random.Random(0), clock.sleep, lambda: clock.now,
                           lambda: retries.append(1))[0] == 401 and len(retries) == 2
    # always 503: waits until the budget, then GaveUp; backoff never above the cap
    clock = FakeClock()
    with pytest.raises(GaveUp, match="--retry-budget-s"):
        call_with_retry(lambda: (503, Headers(), b""), 30, random.Random(0), clock.sleep, lambda: clock.now)
    assert clock.now <= 30 and max(clock.sleeps) <= 5.0 and len(clock.sleeps) >= 8


@pytest.fixture(scope="module")
def train_tokens():
    return load_world_tokens()[0]


def test_a_worker_outlasts_a_full_server(train_tokens):
    running = make_server(max_connections=3, request_deadline_s=600)
    idle = [socket.create_connection(address(running)) for _ in range(3)]
    for sock in idle:
        sock.sendall(b"G")
    result = {}
    worker = Worker(running.url, WorkerConfig(worker_id=7, token=TOKEN, retry_budget_s=60), train_tokens)
    thread = threading.Thread(target=lambda: result.update(worker.run(max_uploads=1)))
    try:
        thread.start()
        while running.swarm.counts["rejected_busy"] < 2:   # the worker has met the full server
            time.sleep(0.05)
        for sock in idle:
            sock.close()
        thread.join(120)
        assert not thread.is_alive()
        assert result["error"] is None and result["accepted"] == 1 and result["retries"] >= 2
        assert post(running, worker="other")[1]["applied"]   # completes the worker's round
        assert_valid_round(running)
    finally:
        for sock in idle:
            sock.close()
        running.close()


def test_a_worker_with_no_server_gives_up_after_its_budget(train_tokens):
    with socket.socket() as sock:   # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    worker = Worker(f"http://127.0.0.1:{port}", WorkerConfig(retry_budget_s=0.5), train_tokens)
    with pytest.raises(GaveUp, match="no connection"):
        worker.pull()
    assert worker.stats["retries"] >= 1


def test_a_wrong_token_stops_a_worker_without_retrying(server, train_tokens):
    worker = Worker(server.url, WorkerConfig(token="wrong"), train_tokens)
    stats = worker.run()
    assert "401" in stats["error"] and stats["retries"] == 0 and stats["uploads"] == 1


# --- 6. token guessing is throttled per client address, in bounded memory --------------

def test_auth_throttle_by_hand():
    clock = FakeClock()
    throttle = AuthThrottle(allowed=3, window_s=10, max_addresses=2, clock=lambda: clock.now)
    for _ in range(3):
        throttle.check("a")
        throttle.failed("a")
        clock.now += 1
    with pytest.raises(Rejection) as refused:   # now 3.0: the oldest failure (0.0) expires at 10.0
        throttle.check("a")
    assert (refused.value.status, refused.value.retry_after_s) == (429, pytest.approx(7.0))
    throttle.check("b")   # another address is not affected
    clock.now = 10.0
    throttle.check("a")   # one failure has aged out
    for address_ in ("b", "c", "d"):
        throttle.failed(address_)
    assert len(throttle.failures) == 2 and "a" not in throttle.failures   # bounded: the oldest forgotten


def test_wrong_tokens_get_429_then_the_swarm_goes_on():
    running = make_server(auth_failures=3, auth_window_s=1.0)
    try:
        codes = [post(running, token="guess")[0] for _ in range(6)]
        assert codes == [401, 401, 401, 429, 429, 429]
        code, _, body = http_call(f"{running.url}/gradients", b"x", {"Authorization": "Bearer guess"})
        assert code == 429 and json.loads(body)["code"] == "too_many_failures"
        assert post(running)[0] == 200   # the right token passes: a guesser cannot stop honest workers
        assert post(running)[0] == 409   # repeat_in_round: w0 got in once
        assert running.swarm.counts["rejected_too_many_failures"] >= 4
    finally:
        running.close()


# --- 7. a connection that ends before its request line; abandoned long polls -----------

def test_an_idle_connection_gets_408_with_a_status_line_and_no_traceback(capfd):
    running = make_server(request_deadline_s=0.5)
    try:
        with socket.create_connection(address(running)) as sock:
            sock.settimeout(10)
            data = b""
            while b'"request_timeout"' not in data:   # head and body may arrive in separate reads
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        assert data.startswith(b"HTTP/1.0 408 ") and b'"request_timeout"' in data
        assert_valid_round(running)
    finally:
        running.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "AttributeError" not in err


def test_a_hundred_abandoned_long_polls_free_their_threads():
    running = make_server(long_poll_s=600)
    baseline = threading.active_count()
    sockets = []
    try:
        for _ in range(100):
            sock = socket.create_connection(address(running))
            sock.sendall(b"GET /weights?after=0 HTTP/1.1\r\nHost: x\r\n\r\n")
            sockets.append(sock)
        slots = running.swarm.config.long_poll_slots
        while running.httpd.long_polls._value != 0 or running.swarm.counts["rejected_busy"] < 100 - slots:
            time.sleep(0.05)   # every slot holds a poll; every other client has its 503
    finally:
        for sock in sockets:
            sock.close()
    try:
        # A waiting poll looks every 0.5 s whether its client is still there (swarm_server).
        for _ in range(100):
            if threading.active_count() <= baseline + 2 and running.httpd.long_polls._value == slots:
                break
            time.sleep(0.1)
        assert running.httpd.long_polls._value == slots
        assert threading.active_count() <= baseline + 2
        assert_valid_round(running)
    finally:
        running.close()
