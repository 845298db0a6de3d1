"""A link emulator in one process (lecture 9, §5.12): devices are threads, every directed
link (src -> dst) has a latency and a bandwidth, and a message's arrival is

    start   = max(now, the link's last message done serialising[, the sender's uplink free])
    done    = start + 8 * bytes / bandwidth        (serialisation: FIFO, one message at a time)
    arrival = done + latency                       (propagation: messages overlap in flight)

which is the α–β formula of §1 per message (alpha_beta.alpha_beta_time_s), queued. `now`
is the sender's clock (stamped=True, the default): the moment the send's cause happened on
the emulated network (the arrival it waited for, a barrier, or real compute via mark()),
not the moment its thread woke up, so a thread's wake-up lateness (accuracy's table) does
not pile up along a chain of messages: it shows once, when the last device finishes.
(Protocol NanoGPT stamps its messages at the sender the same way.) stamped=False uses the
real clock at every send: the control that shows the pile-up. The
bytes are those of the payload actually sent (bytes, numpy arrays, torch tensors, or a
list or dict of them), never a declared count: `send(..., declared_bytes=n)` is recorded beside
the real count and ignored for the timing.

shared_uplink: with True, a device's outgoing links share one queue (one NIC sends one
message at a time, each at its own link's rate): the terms of Eq. 2 add up, as Yuan et
al.'s cost model assumes. With False every link is its own wire and a device's messages to
different peers overlap. Receiving is not limited (no shared downlink), and there is no
loss, jitter, TCP slow start or congestion control: the emulator is a queue and a clock.

The time scale: a run of the 1.3B job at its true sizes would take minutes per iteration
and gigabytes per message. TimeScale(time, bytes) runs every second of the job as `time`
real seconds and every byte as `bytes` real bytes, so latency x time, bandwidth x bytes /
time, compute x time: every term of the job (latency, serialisation, compute) is multiplied
by the same factor, so their ratios (compute : communication among them) are the job's.
Seconds measured are divided by `time` before they are printed ("scaled back").
"""

import collections
import math
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class TimeScale:
    """One job second runs as `time` real seconds; one job byte is sent as `bytes` bytes."""
    time: float = 5e-3
    bytes: float = 1e-5

    def __post_init__(self):
        for name in ("time", "bytes"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"TimeScale.{name} must be a positive finite number, got {value!r}")

    def real_latency_s(self, latency_s):
        return latency_s * self.time

    def real_bandwidth_bps(self, bandwidth_bps):
        return bandwidth_bps * self.bytes / self.time

    def real_bytes(self, job_bytes):
        """Bytes of the buffer that stands for `job_bytes` (at least 1)."""
        return max(1, round(job_bytes * self.bytes))

    def job_seconds(self, real_s):
        return real_s / self.time


def payload_nbytes(payload):
    """Bytes of what is sent: bytes / bytearray / memoryview, a numpy array, a torch tensor
    (numel x element_size), or a list / tuple of these (summed)."""
    if isinstance(payload, (bytes, bytearray)):
        return len(payload)
    if isinstance(payload, memoryview):
        return payload.nbytes
    if isinstance(payload, (list, tuple)):
        return sum(payload_nbytes(p) for p in payload)
    if isinstance(payload, dict):   # a scheme's encoded parts: name -> tensor
        return sum(payload_nbytes(p) for p in payload.values())
    if hasattr(payload, "element_size") and hasattr(payload, "numel"):   # a torch tensor, duck-typed
        return int(payload.numel()) * int(payload.element_size())
    if hasattr(payload, "nbytes"):   # numpy
        return int(payload.nbytes)
    raise TypeError(f"cannot meter a payload of type {type(payload).__name__}")


def _copied(payload):
    """What the receiver gets: a copy, so no buffer is shared between sender and receiver."""
    if isinstance(payload, (list, tuple)):
        return type(payload)(_copied(p) for p in payload)
    if isinstance(payload, dict):
        return {k: _copied(v) for k, v in payload.items()}
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    if hasattr(payload, "clone"):
        return payload.detach().clone()
    return payload.copy()


@dataclass
class Message:
    src: int
    dst: int
    nbytes: int
    declared_bytes: int | None
    sent_s: float          # clock time of send(), from the emulator's start
    start_s: float         # serialisation began (after the queue)
    model_arrival_s: float
    payload: object = None
    arrival_s: float | None = None   # measured: when recv() handed it over


class LinkEmulator:
    """Directed links between n devices. latency_s[i][j] (s) and bandwidth_bps[i][j]
    (bit/s) are real (already scaled) figures; the diagonal is never used."""

    def __init__(self, latency_s, bandwidth_bps, shared_uplink=True, clock=time.perf_counter, stamped=True):
        n = len(latency_s)
        if n < 1 or len(bandwidth_bps) != n or any(len(row) != n for row in (*latency_s, *bandwidth_bps)):
            raise ValueError("latency_s and bandwidth_bps must both be n x n, n >= 1")
        for i in range(n):
            for j in range(n):
                if i != j and not (latency_s[i][j] >= 0 and bandwidth_bps[i][j] > 0):
                    raise ValueError(f"link {i}->{j}: need latency >= 0 and bandwidth > 0")
        self.n = n
        self.latency_s = [list(map(float, row)) for row in latency_s]
        self.bandwidth_bps = [list(map(float, row)) for row in bandwidth_bps]
        self.shared_uplink = bool(shared_uplink)
        self.stamped = bool(stamped)
        self.device_clock = [0.0] * n   # stamped: when each device's last event happened (s)
        self._clock = clock
        self._lock = threading.Condition()
        self._link_free = collections.defaultdict(float)     # (src, dst) -> s its last message is serialised
        self._uplink_free = [0.0] * n
        self._queues = collections.defaultdict(collections.deque)
        self.messages = []          # every Message, in send order
        self.t0 = clock()

    @classmethod
    def from_network(cls, net, scale, shared_uplink=True, clock=time.perf_counter, stamped=True):
        """Demo 1's Network (schedule.geo_network) at a TimeScale."""
        lat = [[scale.real_latency_s(x) for x in row] for row in net["latency_s"].tolist()]
        bw = [[scale.real_bandwidth_bps(x) for x in row] for row in net["bandwidth_bps"].tolist()]
        return cls(lat, bw, shared_uplink, clock, stamped)

    def now(self):
        return self._clock() - self.t0

    def model_arrival(self, src, dst, nbytes, now):
        """(start, arrival) of a message of nbytes sent at `now` given the queues so far."""
        start = max(now, self._link_free[(src, dst)])
        if self.shared_uplink:
            start = max(start, self._uplink_free[src])
        done = start + 8 * nbytes / self.bandwidth_bps[src][dst]
        return start, done + self.latency_s[src][dst]

    def send(self, src, dst, payload, declared_bytes=None):
        """Queue payload on link src -> dst without waiting; returns its Message (model
        arrival in .model_arrival_s). The charge is the payload's real bytes."""
        if src == dst or not (0 <= src < self.n and 0 <= dst < self.n):
            raise ValueError(f"no link {src}->{dst} among {self.n} devices")
        nbytes = payload_nbytes(payload)
        data = _copied(payload)
        with self._lock:
            now = self.device_clock[src] if self.stamped else self.now()
            start, arrival = self.model_arrival(src, dst, nbytes, now)
            done = arrival - self.latency_s[src][dst]
            self._link_free[(src, dst)] = done
            if self.shared_uplink:
                self._uplink_free[src] = done
            message = Message(src, dst, nbytes, declared_bytes, now, start, arrival, data)
            self.messages.append(message)
            self._queues[(src, dst)].append(message)
            self._lock.notify_all()
        return message

    def send_and_wait(self, src, dst, payload, declared_bytes=None):
        """A synchronous send: returns when the message has arrived (stop-and-wait)."""
        message = self.send(src, dst, payload, declared_bytes)
        self.sleep_until(message.model_arrival_s)
        self.device_clock[src] = max(self.device_clock[src], message.model_arrival_s)
        return message

    def mark(self, device):
        """Stamped mode: the device did something real (compute) until now."""
        self.device_clock[device] = max(self.device_clock[device], self.now())

    def align(self, devices=None):
        """A barrier between `devices` (default all) completes when the last one is there."""
        devices = range(self.n) if devices is None else list(devices)
        latest = max(self.device_clock[d] for d in devices)
        for d in devices:
            self.device_clock[d] = latest

    def sleep_until(self, t):
        while True:
            left = t - self.now()
            if left <= 0:
                return
            time.sleep(left)

    def sleep(self, seconds):
        """Compute for `seconds` real seconds (the device is busy, its links are not)."""
        self.sleep_until(self.now() + seconds)

    def recv(self, dst, src, timeout=None, wait=True):
        """The next message on src -> dst (FIFO), when it arrives; its payload.
        TimeoutError if none is sent within `timeout` real seconds. wait=False: hand it
        over at once and only move dst's stamped clock to its arrival (a caller that runs
        every device in one thread, e.g. compress/slow_network.py)."""
        deadline = None if timeout is None else self.now() + timeout
        with self._lock:
            queue = self._queues[(src, dst)]
            while not queue:
                left = None if deadline is None else deadline - self.now()
                if left is not None and left <= 0:
                    raise TimeoutError(f"nothing on link {src}->{dst} within {timeout} s")
                self._lock.wait(left)
            message = queue.popleft()
        if wait:
            self.sleep_until(message.model_arrival_s)
        message.arrival_s = self.now() if wait else message.model_arrival_s
        self.device_clock[dst] = max(self.device_clock[dst], message.model_arrival_s)
        payload, message.payload = message.payload, None
        return payload

    def bytes_sent(self):
        """{(src, dst): bytes charged}."""
        totals = collections.Counter()
        for m in self.messages:
            totals[(m.src, m.dst)] += m.nbytes
        return dict(totals)

    def total_bytes(self):
        return sum(m.nbytes for m in self.messages)


def run_devices(programs, timeout_s=None):
    """Run one function per device in threads, all at once; returns their results in order.
    The first exception raised by a program is raised here (after every thread ended or
    `timeout_s` passed: a program blocked on recv gets no message then)."""
    results, errors = [None] * len(programs), []

    def run(i, program):
        try:
            results[i] = program()
        except BaseException as error:   # noqa: BLE001  re-raised in the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i, p), daemon=True) for i, p in enumerate(programs)]
    for t in threads:
        t.start()
    deadline = None if timeout_s is None else time.perf_counter() + timeout_s
    for t in threads:
        t.join(None if deadline is None else max(0.0, deadline - time.perf_counter()))
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"devices still running after {timeout_s} s")
    return results
