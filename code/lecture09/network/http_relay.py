"""A loopback HTTP relay that puts a slow link between a client and a server (lecture 9,
§5.12 and §6; code 6's workers can be pointed at it instead of the server).

One relay stands for one worker's link: it listens on 127.0.0.1, reads each request
whole, holds it in a delay queue until it would have crossed the uplink (emulator.Link-
Emulator: FIFO serialisation at the uplink's rate, a token bucket of depth one message,
then the latency), forwards it to the server on 127.0.0.1, and holds the answer the same
way on the downlink. Bytes are the request's and answer's bytes on the socket (request
line, headers and body). Only 127.0.0.1 is ever connected to: the target is a port, not
a host. What is not modelled: the TCP handshake to the relay (on loopback, ~0), slow
start, loss, jitter.
"""

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lecture09.network.emulator import LinkEmulator

HOST = "127.0.0.1"
MAX_BODY_BYTES = 64 * 2**20
CLIENT, SERVER = 0, 1
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


class Relay:
    """relay = Relay(target_port, latency_s, up_bytes_per_s, down_bytes_per_s); relay.url;
    relay.close(). relay.emulator.messages lists every crossing (bytes, model arrival)."""

    def __init__(self, target_port, latency_s, up_bytes_per_s, down_bytes_per_s=None, port=0):
        if not (latency_s >= 0 and up_bytes_per_s > 0 and (down_bytes_per_s or up_bytes_per_s) > 0):
            raise ValueError("need latency >= 0 and bandwidths > 0")
        down = down_bytes_per_s or up_bytes_per_s
        self.target_port = int(target_port)
        self.emulator = LinkEmulator([[0.0, latency_s], [latency_s, 0.0]],
                                     [[1.0, 8 * up_bytes_per_s], [8 * down, 1.0]],
                                     shared_uplink=True, stamped=False)
        self._lock = threading.Lock()      # one request crosses at a time: the FIFO pairs each with its answer
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):   # quiet: the swarm prints its own tables
                pass

            def _relay(self):
                length = self.headers.get("Content-Length")
                if self.headers.get("Transfer-Encoding"):
                    return self._refuse(411, "length required: no chunked bodies")
                try:
                    n = int(length or 0)
                except ValueError:
                    return self._refuse(400, "bad Content-Length")
                if n < 0 or n > MAX_BODY_BYTES:
                    return self._refuse(413, "body too large")
                body = self.rfile.read(n)
                head = f"{self.requestline}\r\n{self.headers}".encode("latin-1")
                status, reason, headers, answer = relay.cross(self.command, self.path, self.headers, head, body)
                self.send_response(status, reason)
                for name, value in headers:
                    if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(answer)
                self.close_connection = True

            def _refuse(self, code, text):
                data = f"relay: {text}\n".encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _relay

        self.httpd = ThreadingHTTPServer((HOST, port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://{HOST}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def cross(self, method, path, headers, head, body):
        """Send one request over the uplink, to the server, and its answer back over the
        downlink; (status, reason, headers, answer body)."""
        with self._lock:
            emu = self.emulator
            emu.send(CLIENT, SERVER, head + body)
            emu.recv(SERVER, CLIENT)
            conn = http.client.HTTPConnection(HOST, self.target_port, timeout=120)
            try:
                forward = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
                conn.request(method, path, body=body, headers=forward)
                response = conn.getresponse()
                answer = response.read()
                status, reason, out_headers = response.status, response.reason, response.getheaders()
            finally:
                conn.close()
            status_line = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in out_headers)
            emu.send(SERVER, CLIENT, status_line.encode("latin-1") + b"\r\n" + answer)
            emu.recv(CLIENT, SERVER)
            return status, reason, out_headers, answer

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
