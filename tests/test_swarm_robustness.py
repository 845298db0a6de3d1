"""Code 6's server against a hostile or broken client (issue 12, items 1-6): bounded
poisoning, no non-finite step, slow clients cut off, a connection cap, the listen
backlog, strict JSON in /status, quiet logs, bounded long polls. Each test ends with a
valid round (test_swarm_http.assert_valid_round): the server is still fine."""

import json
import socket
import threading
import time

import pytest
import torch

from lecture09.compress import compression as c
from lecture09.swarm.swarm_http import RunningServer
from lecture09.swarm.swarm_protocol import ServerConfig
from lecture09.swarm.swarm_worker import http_call
from test_swarm_http import TOKEN, assert_valid_round, payload_for, post, status, weights_finite


def make_server(**changes):
    return RunningServer(ServerConfig(**dict(dict(world_size=2, steps=1000, token=TOKEN), **changes)))


@pytest.fixture
def server():
    running = make_server()
    yield running
    running.close()


def address(server):
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def read_status_line(sock):
    """The status code of the answer on a raw socket (b"" -> None: closed without one)."""
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        data += chunk
    return int(data.split(b" ")[1])


def poisoned(server, value, mode="topk"):
    """A valid payload whose values are all `value` (finite, but absurd)."""
    payload = payload_for(server, mode)
    for key, tensor in payload.items():
        if mode == "none" or key.endswith("::val"):
            tensor.fill_(value)
    return payload


# --- 1. poisoning: bounded influence, never a non-finite step ------------------------

def test_two_uploads_of_3e38_leave_the_weights_finite(server):
    before = [p.detach().clone() for p in server.swarm.params.values()]
    assert post(server, poisoned(server, 3e38), worker="evil-a")[0] == 200
    code, answer = post(server, poisoned(server, 3e38), worker="evil-b")
    assert (code, answer["applied"]) == (200, True)
    assert weights_finite(server) and status(server)["health"] == "ok"
    assert status(server)["counts"]["clipped_uploads"] == 2
    change = max(float((p.detach() - b).abs().max()) for p, b in zip(server.swarm.params.values(), before))
    assert change < 1.0   # one AdamW step of lr <= 3e-3 moves a weight by about lr, not by 3e38
    assert_valid_round(server)


def test_one_upload_of_1e30_does_not_erase_the_honest_ones():
    """With the 1e30 upload clipped, the honest upload still moves the step: the weights
    after (honest + evil) differ from those after (zeros + evil)."""
    results = []
    for honest_scale in (0.01, 0.0):
        running = make_server()
        try:
            assert post(running, poisoned(running, 1e30), worker="evil")[0] == 200
            honest = payload_for(running, seed=3, scale=honest_scale)
            assert post(running, honest, worker="honest")[1]["applied"]
            assert weights_finite(running)
            results.append(torch.cat([p.detach().reshape(-1) for p in running.swarm.params.values()]))
            assert_valid_round(running)
        finally:
            running.close()
    assert not torch.equal(results[0], results[1])


@pytest.mark.parametrize("mode", ["none", "topk", "topk-int8"])
@pytest.mark.parametrize("value", [3e38, -3e38, 1e30, 1e-45, 0.0])
def test_weights_stay_finite_after_any_accepted_upload(mode, value):
    running = make_server(world_size=1)
    try:
        payload = payload_for(running, mode)
        for key, tensor in payload.items():
            if key.endswith("::val") and mode == "topk" or (mode == "none"):
                tensor.fill_(value)
            elif key.endswith("::scale"):
                tensor.fill_(abs(value) or 1.0)   # int8 values (up to 127) times this scale
        code, _ = post(running, payload, mode=mode)
        assert code in (200, 400)   # an int8 scale that overflows when decoded is refused
        assert weights_finite(running)
    finally:
        running.close()


def test_a_step_that_would_make_weights_non_finite_is_not_taken():
    running = make_server(peak_lr=1e39, steps=10)   # AdamW moves a weight by about lr: beyond fp32 range
    try:
        before = [p.detach().clone() for p in running.swarm.params.values()]
        assert post(running, worker="a")[0] == 200
        assert post(running, worker="b")[1]["applied"]
        report = status(running)
        assert report["health"] == "ok" and report["counts"]["skipped_steps"] == 1
        assert "kept the weights of version 0" in report["last_skipped_step"]
        assert all(torch.equal(p, b) for p, b in zip(running.swarm.params.values(), before))
        assert report["version"] == 1   # the workers' uploads were used: the version moves on
    finally:
        running.close()


def state_items(state):
    """(param index, key) -> value of an optimizer's state: comparable across steps."""
    return [((i, k), v) for i, s in enumerate(state.values()) for k, v in s.items()]


def test_weights_that_would_overflow_in_a_later_step_are_kept():
    """lr 3e37: the first step leaves huge but finite weights, a later one would overflow
    them; the server never serves inf."""
    running = make_server(peak_lr=3e37, steps=10)
    try:
        swarm = running.swarm
        for _ in range(4):
            before = {k: v.clone() if torch.is_tensor(v) else v
                      for k, v in state_items(swarm.optimizer.state)}
            skipped = swarm.counts["skipped_steps"]
            assert post(running, worker="a")[0] == 200
            assert post(running, worker="b")[1]["applied"]
            assert weights_finite(running)
            if swarm.counts["skipped_steps"] > skipped and before:   # the optimizer state is put back too
                after = dict(state_items(swarm.optimizer.state))
                assert after.keys() == before.keys()
                assert all(torch.equal(after[k], v) if torch.is_tensor(v) else after[k] == v for k, v in before.items())
        report = status(running)
        assert report["health"] == "ok" and report["counts"]["skipped_steps"] >= 1
    finally:
        running.close()


# --- 3. slow clients: a deadline on the whole request, the token before the body -------

def trickle(sock, data, pause_s=0.01):
    """Send `data` one byte at a time (in a thread) until done or the server closes."""
    def send():
        for byte in data:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return
            time.sleep(pause_s)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_headers_trickled_one_byte_at_a_time_get_408(capfd):
    running = make_server(request_deadline_s=1.0)
    try:
        with socket.create_connection(address(running)) as sock:
            trickle(sock, b"GET /status HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100_000)
            assert read_status_line(sock) == 408   # the server gives up on us, and says so
        assert status(running)["counts"]["rejected_request_timeout"] == 1
        assert_valid_round(running)
    finally:
        running.close()
    assert "Traceback" not in capfd.readouterr().err


def test_a_trickled_body_gets_408():
    running = make_server(request_deadline_s=1.0)
    try:
        body = c.payload_to_bytes(payload_for(running))
        head = (f"POST /gradients HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nX-Worker-Id: slow\r\n"
                f"X-Compression: topk\r\nX-Loss: 3\r\nX-Model-Version: 0\r\nContent-Length: {len(body)}\r\n\r\n")
        with socket.create_connection(address(running)) as sock:
            sock.sendall(head.encode())
            trickle(sock, body)
            assert read_status_line(sock) == 408
        assert status(running)["pending_uploads"] == 0
        assert_valid_round(running)
    finally:
        running.close()


def test_the_token_is_checked_before_a_single_body_byte_is_read(server):
    with socket.create_connection(address(server)) as sock:
        sock.sendall(b"POST /gradients HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer guess\r\n"
                     b"Content-Length: 100000\r\n\r\n")   # the body never comes
        assert read_status_line(sock) == 401
    assert_valid_round(server)


# --- 3/4. a connection cap and a listen backlog -------------------------------------

def test_connections_beyond_the_cap_get_503_at_once():
    running = make_server(max_connections=3, request_deadline_s=600)
    idle = [socket.create_connection(address(running)) for _ in range(3)]
    try:
        for sock in idle:   # each holds a thread, waiting for a request line
            sock.sendall(b"G")
        while True:   # until the three have been accepted (their threads are running)
            with socket.create_connection(address(running)) as extra:
                extra.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
                if read_status_line(extra) == 503:
                    break
            time.sleep(0.05)
        assert running.swarm.counts["rejected_busy"] >= 1
    finally:
        for sock in idle:
            sock.close()
    try:
        while http_call(f"{running.url}/status")[0] == 503:   # the threads notice the closed sockets
            time.sleep(0.05)
        assert_valid_round(running)
    finally:
        running.close()


def test_a_burst_of_50_status_requests_is_answered(server):
    assert server.httpd.request_queue_size == ServerConfig().listen_backlog > 5
    codes = []
    threads = [threading.Thread(target=lambda: codes.append(http_call(f"{server.url}/status")[0]))
               for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert codes == [200] * 50
    assert_valid_round(server)


# --- 5. /status is always valid JSON -----------------------------------------------

def strict_json(body):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(body, parse_constant=refuse)


def test_huge_losses_never_make_status_invalid_json(server):
    assert post(server, worker="a", loss="1.7e308")[0] == 200
    assert post(server, worker="b", loss="1.7e308")[1]["applied"]
    report = strict_json(http_call(f"{server.url}/status")[2])
    assert report["last_loss"] == pytest.approx(1.7e308)
    assert_valid_round(server)


# --- 6. abandoned connections and long polls ----------------------------------------

def test_abandoned_downloads_leave_no_traceback(server, capfd):
    for _ in range(20):
        with socket.create_connection(address(server)) as sock:
            sock.sendall(b"GET /weights HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    assert_valid_round(server)
    assert "Traceback" not in capfd.readouterr().err


def test_long_polls_are_capped_and_end_when_the_client_leaves():
    running = make_server(max_long_polls=1, long_poll_s=600)
    try:
        waiting = socket.create_connection(address(running))
        waiting.sendall(b"GET /weights?after=0 HTTP/1.1\r\nHost: x\r\n\r\n")
        while running.httpd.long_polls._value != 0:   # until the server holds it
            time.sleep(0.05)
        # A second long poll finds no free slot: 503 at once, with Retry-After and no weights.
        code, headers, body = http_call(f"{running.url}/weights?after=0")
        assert (code, headers["Retry-After"], json.loads(body)["code"]) == (503, "1", "busy")
        assert running.swarm.counts["rejected_busy"] == 1
        waiting.close()   # the first client leaves: the server stops waiting for it
        for _ in range(600):
            if running.httpd.long_polls._value == 1:
                break
            time.sleep(0.1)
        assert running.httpd.long_polls._value == 1
        assert_valid_round(running)
    finally:
        running.close()
