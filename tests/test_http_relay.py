"""The loopback HTTP relay (lecture09/network/http_relay.py, §5.12): a request and its
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


def test_the_relay_observation_reads_its_table_on_each_branch():
    from lecture09.swarm.swarm_relay import relay_observation
    near_control = [("none", 0.15, 0.31, 0.16, 0.27, 0.16), ("topk", 0.15, 0.30, 0.15, 0.23, 0.14)]
    assert "每一种都离 1 次往返的对照更近" in relay_observation(near_control)
    assert "none 实测 0.160、模型 0.270、对照 0.160" in relay_observation(near_control)
    near_model = [("none", 0.15, 0.42, 0.27, 0.27, 0.16)]
    assert "每一种都离模型更近" in relay_observation(near_model)
    noisy = [("none", 0.5, 0.4, -0.1, 0.27, 0.16)]
    assert "读不出结论" in relay_observation(noisy + near_control)
    mixed = near_control[:1] + near_model
    assert "none 离 1 次往返的对照更近，其余离模型更近" in relay_observation(mixed)


def test_modelled_comm_counts_round_trips_per_request():
    from types import SimpleNamespace
    from lecture09.swarm.swarm_relay import modelled_comm_s
    from lecture09.swarm.swarm_report import Link
    r = SimpleNamespace(requests_per_upload=2.0, up_bytes_per_upload=1e6, down_bytes_per_upload=5e6)
    link = Link(10.0, 25.0, 50.0)
    assert modelled_comm_s(r, link, 2) == pytest.approx(2 * 2 * 0.05 + 0.1 + 0.2)
    assert modelled_comm_s(r, link, 1) == pytest.approx(2 * 0.05 + 0.1 + 0.2)


def test_a_link_too_slow_for_the_budget_is_one_line_and_no_run(capsys):
    from types import SimpleNamespace
    from lecture09.swarm import swarm_relay
    from lecture09.swarm.swarm_report import Link
    r = SimpleNamespace(requests_per_upload=2.0, up_bytes_per_upload=3e5, down_bytes_per_upload=4e5, steps=60)
    slow = Link(0.01, 0.01, 50.0)
    assert swarm_relay.relay_budget_s([r], slow, 2) == pytest.approx(60 * (0.2 + 30 + 40))
    assert swarm_relay.relay_demo(None, 2, None, None, None, None, [r], slow) == []
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "too slow" in out[0]


SWARM_RELAY_ARGV = [["--modes", "none", "--rtt-ms", "0"],
                    ["--modes", "topk", "--uplink-mbyte-per-s", "1000000", "--downlink-mbyte-per-s", "1000000"],
                    ["--modes", "none", "--uplink-mbyte-per-s", "0.01"]]


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize("argv", SWARM_RELAY_ARGV)
def test_code6_relay_extremes_run_and_fit(argv):
    from conftest import LECTURE09, load_script, main_quietly
    from lecture01.console import display_width
    code6 = load_script(LECTURE09 / "06_swarm_http.py")
    _, out = main_quietly(code6.main, ["--quick", "--relay", *argv])
    assert "(1c)" in out
    assert not [line for line in out.splitlines() if display_width(line) > 100]
