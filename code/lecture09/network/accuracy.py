"""The emulator measured against its own model (lecture 9, §5.12; code 05 --demo emulator).

Three cases, each message's measured arrival (when recv() returned) minus the arrival the
model computed when it was sent: one message on an idle link; back-to-back messages on one
link (FIFO: the k-th waits for k - 1 serialisations); many links at once, one receiving
thread each, to see how the error grows with the number of threads sharing the cores.
The error is lateness only (a sleep never returns early): thread wake-up and the GIL.
"""

import statistics
import threading
from dataclasses import dataclass

from lecture01.console import print_header, print_table, print_wrapped
from lecture09.network.emulator import LinkEmulator

LATENCY_S = 5e-3
BANDWIDTH_BPS = 40e6            # a 10 kB message takes 2 ms to serialise
MESSAGE_BYTES = 10_000
CONCURRENT_LINKS = (1, 4, 16, 64)


@dataclass(frozen=True)
class AccuracyRow:
    case: str
    links: int
    messages: int
    transit_ms: float       # the model's median time from send to arrival
    median_error_ms: float  # median of measured - model arrival
    p90_error_ms: float
    max_error_ms: float

    @property
    def median_error_share(self):
        """Median lateness as a share of the median modelled transit."""
        return self.median_error_ms / self.transit_ms


def _row(case, links, messages):
    errors = sorted((m.arrival_s - m.model_arrival_s) * 1e3 for m in messages)
    transit = statistics.median((m.model_arrival_s - m.sent_s) * 1e3 for m in messages)
    return AccuracyRow(case, links, len(messages), transit, statistics.median(errors),
                       errors[min(len(errors) - 1, int(0.9 * len(errors)))], errors[-1])


def _uniform(n, latency_s=LATENCY_S, bandwidth_bps=BANDWIDTH_BPS):
    return LinkEmulator([[latency_s] * n for _ in range(n)], [[bandwidth_bps] * n for _ in range(n)],
                        shared_uplink=False, stamped=False)   # real senders: the real clock


def single_messages(repeats):
    """One message at a time on an idle link, `repeats` times."""
    emu = _uniform(2)
    for _ in range(repeats):
        emu.send(0, 1, bytes(MESSAGE_BYTES))
        emu.recv(1, 0)
    return _row("单条 single", 1, emu.messages)


def back_to_back(count):
    """`count` messages sent at once on one link, received in order."""
    emu = _uniform(2)
    for _ in range(count):
        emu.send(0, 1, bytes(MESSAGE_BYTES))
    for _ in range(count):
        emu.recv(1, 0)
    return _row("背靠背 back-to-back", 1, emu.messages)


def concurrent_links(n_links, rounds):
    """n_links disjoint links (device 2i -> 2i + 1), each with its own receiving thread;
    every round each sender sends one message and each receiver takes it."""
    emu = _uniform(2 * n_links)
    barrier = threading.Barrier(n_links + 1)

    def receiver(i):
        for _ in range(rounds):
            barrier.wait()
            emu.recv(2 * i + 1, 2 * i)

    threads = [threading.Thread(target=receiver, args=(i,), daemon=True) for i in range(n_links)]
    for t in threads:
        t.start()
    for _ in range(rounds):
        barrier.wait()
        for i in range(n_links):
            emu.send(2 * i, 2 * i + 1, bytes(MESSAGE_BYTES))
        emu.sleep(LATENCY_S + 8 * MESSAGE_BYTES / BANDWIDTH_BPS)
    for t in threads:
        t.join()
    return _row("并发 concurrent", n_links, emu.messages)


def accuracy_rows(repeats=30, links=CONCURRENT_LINKS):
    """The benchmark's table: single, back-to-back, then one row per number of links."""
    rows = [single_messages(repeats), back_to_back(repeats)]
    rows += [concurrent_links(n, max(3, repeats // n)) for n in links]
    return rows


def accuracy_table(rows):
    headers = ["情形 case", "链路 links", "消息 msgs", "模型传输 ms", "迟到中位 ms", "p90 ms", "最大 ms",
               "中位/传输"]
    body = [[r.case, r.links, r.messages, f"{r.transit_ms:.2f}", f"{r.median_error_ms:.3f}",
             f"{r.p90_error_ms:.3f}", f"{r.max_error_ms:.3f}", f"{100 * r.median_error_share:.1f}%"]
            for r in rows]
    return headers, body


def accuracy_observation(rows):
    """One sentence read off the table: the worst median share, and how the concurrent
    rows' medians grow from the fewest links to the most."""
    worst = max(rows, key=lambda r: r.median_error_share)
    conc = [r for r in rows if r.case.startswith("并发")]
    text = (f"最差的中位迟到是 {worst.case} {worst.links} 条链路的 {worst.median_error_ms:.3f} ms，"
            f"占模型传输时间的 {100 * worst.median_error_share:.1f}%")
    if len(conc) >= 2:
        first, last = conc[0], conc[-1]
        verb = "增加到" if last.median_error_ms > first.median_error_ms else "没有增加，是"
        text += (f"；并发链路从 {first.links} 条到 {last.links} 条，中位迟到从 {first.median_error_ms:.3f} ms "
                 f"{verb} {last.median_error_ms:.3f} ms")
    return text + "（实测，随机器负载变）。"


def print_accuracy(repeats=30, links=CONCURRENT_LINKS):
    """Code 5's --demo emulator: the table, its observation; returns the rows."""
    print_header("链路模拟器自己的误差 the emulator against its own model（实测 measured）")
    print_wrapped(f"每条链路：延迟 {LATENCY_S * 1e3:g} ms、带宽 {BANDWIDTH_BPS / 1e6:g} Mbit/s，每条消息 "
                  f"{MESSAGE_BYTES} 字节；迟到 = 实际收到的时刻 − 模型算出的到达时刻（真实秒，未换算）。")
    rows = accuracy_rows(repeats, links)
    print_table(*accuracy_table(rows))
    print_wrapped(accuracy_observation(rows))
    return rows
