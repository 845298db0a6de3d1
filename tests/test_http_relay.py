"""The loopback HTTP relay (lecture09/network/http_relay.py, §5.11): a request and its
answer cross the emulated link (each direction's bytes metered from the socket, its
arrival no earlier than the model's), the server sees the request unchanged, bad
requests get a 4xx with a code, and only 127.0.0.1 is used."""

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lecture09.network.http_relay import HOST, Relay


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        data = json.dumps({"path": self.path, "n": len(body), "x": self.headers.get("X-Test")}).encode()
        self.send_response(201)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer((HOST, 0), Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def post(url, body, headers=None):
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/upload?w=1", body=body, headers=headers or {})
    r = conn.getresponse()
    out = (r.status, r.read())
    conn.close()
    return out


def test_a_request_crosses_both_ways_metered_and_never_early(server):
    with Relay(server, latency_s=0.02, up_bytes_per_s=100_000, down_bytes_per_s=1_000_000) as relay:
        assert relay.url.startswith("http://127.0.0.1:")
        started = time.perf_counter()
        status, answer = post(relay.url, b"z" * 10_000, {"X-Test": "kept"})
        took = time.perf_counter() - started
        assert status == 201 and json.loads(answer) == {"path": "/upload?w=1", "n": 10_000, "x": "kept"}
        up, down = relay.emulator.messages
        assert (up.src, up.dst, down.src, down.dst) == (0, 1, 1, 0)
        assert up.nbytes > 10_000 and down.nbytes > len(answer)      # request line + headers counted
        assert up.model_arrival_s - up.sent_s == pytest.approx(0.02 + up.nbytes / 100_000)
        assert up.arrival_s >= up.model_arrival_s and down.arrival_s >= down.model_arrival_s
        assert took >= 0.04 + 10_000 / 100_000                        # both latencies and the upload


@pytest.mark.parametrize("headers,code", [({"Content-Length": "-5"}, 413), ({"Content-Length": "x"}, 400),
                                          ({"Transfer-Encoding": "chunked"}, 411)])
def test_bad_requests_get_a_4xx_with_a_code(server, headers, code):
    with Relay(server, latency_s=0.0, up_bytes_per_s=1e9) as relay:
        port = int(relay.url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
        conn.putrequest("POST", "/upload", skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        r = conn.getresponse()
        assert r.status == code and r.read().startswith(b"relay: ")
        conn.close()
        assert relay.emulator.messages == []          # nothing crossed the link


def test_bad_links_are_refused():
    for kwargs in (dict(latency_s=-1, up_bytes_per_s=1), dict(latency_s=0, up_bytes_per_s=0)):
        with pytest.raises(ValueError):
            Relay(1, **kwargs)
