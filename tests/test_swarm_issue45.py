"""Code 6 under the faults of issue 45 that are not about checkpoints: a stale upload with
a garbage body changes nothing (item 7); a worker meets a 200 it cannot use with one line
(item 8); an unknown dtype is a 400 with a code, a valid token passes the wrong-token
throttle, an abandoned long poll is released (item 12); unfinished requests are bounded
(item 11); identical uploads cannot make Krum pick a liar (item 3)."""

import json
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

from conftest import ROOT, SWEEP_TIER
from lecture01.console import display_width

from lecture09.compress import compression as c
from lecture09.swarm.swarm_http import RunningServer
from lecture09.swarm.swarm_protocol import Rejection, ServerConfig, Upload
from lecture09.swarm.swarm_server import ParameterServer
from lecture09.swarm.swarm_worker import http_call

SCRIPT = ROOT / "code" / "lecture09" / "06_swarm_http.py"


def body_for(server, seed=0):
    gen = torch.Generator().manual_seed(seed)
    grads = {name: 0.01 * torch.randn(shape, generator=gen) for name, shape in server.shapes.items()}
    return c.payload_to_bytes(c.encode_payload(grads, "topk", ratio=0.01))


def up(server, worker, version=None, body=None):
    version = server.version if version is None else version
    body = body_for(server, hash(worker) % 1000) if body is None else body
    return server.submit(Upload(worker, version, "topk", 3.0), body)


# --- item 7 ---------------------------------------------------------------------------------

def test_a_stale_upload_with_a_garbage_body_does_not_make_the_round_wait():
    """world_size 4, three workers: round 1 expects a, b, c and steps as soon as they are in.
    A token holder's stale upload with a garbage body is refused (409) and changes nothing:
    today it marked the id as seen, and every round waited the deadline for it."""
    server = ParameterServer(ServerConfig(world_size=4, steps=100, round_deadline_s=0.3, compression="topk"))
    try:
        for worker in "abc":
            up(server, worker)
        end_s = time.monotonic() + 30
        while server.version == 0 and time.monotonic() < end_s:
            time.sleep(0.01)
        assert server.version == 1
        with pytest.raises(Rejection) as refused:
            up(server, "mallory", version=0, body=b"garbage")
        assert refused.value.code == "stale_version"
        assert server.expected() == {"a", "b", "c"}
        up(server, "a"), up(server, "b")
        assert up(server, "c")["applied"] is True and server.timeline[-1]["by"] == "expected"
        # a stale upload that is an upload still makes its worker expected (late, not gone)
        with pytest.raises(Rejection):
            up(server, "d", version=0)
        assert "d" in server.expected()
    finally:
        server.close()


# --- item 8 ---------------------------------------------------------------------------------

class _Fake:
    """A server that answers every GET /weights with one fixed 200 (status, headers, body)."""

    def __init__(self, headers, body):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                for key, value in fake.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(fake.body)))
                self.end_headers()
                self.wfile.write(fake.body)

            def log_message(self, *args):
                pass

        self.headers, self.body = headers, body
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def real_weights():
    server = ParameterServer(ServerConfig(world_size=1, steps=2))
    return server.weights_body()[0]


@pytest.mark.parametrize("case", ["html page", "no X-Model-Version",
                                  pytest.param("X-Model-Version not a number", marks=SWEEP_TIER),
                                  pytest.param("safetensors of another model", marks=SWEEP_TIER)])
def test_a_worker_meets_a_200_it_cannot_use_with_one_line(case):
    """Today: a traceback (SafetensorError on the HTML page, KeyError without the header)."""
    weights = real_weights()
    headers, body = {
        "html page": ({"Content-Type": "text/html", "X-Model-Version": "1"}, b"<html><body>captive portal</body></html>"),
        "no X-Model-Version": ({}, weights),
        "X-Model-Version not a number": ({"X-Model-Version": "soon"}, weights),
        "safetensors of another model": ({"X-Model-Version": "1"},
                                         c.safetensors_bytes({"w": torch.zeros(3)})),
    }[case]
    fake = _Fake(headers, body)
    try:
        done = subprocess.run([sys.executable, str(SCRIPT), "--worker", fake.url, "--worker-id", "0"],
                              capture_output=True, text=True, timeout=120)
    finally:
        fake.close()
    err = done.stderr.strip()
    assert done.returncode == 1 and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("工作者停止 worker stopped: ") and display_width(err) <= 100, err
