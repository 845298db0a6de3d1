"""The link emulator (lecture09/network/emulator.py, §5.12): one message, FIFO order on a
link, concurrent links, the shared-uplink switch, metering (an under-declared message is
charged its real bytes), the time scale, and the benchmark's observation on each branch.
Arrivals are checked on the emulated clock (exact arithmetic, hand-computed); the wall
clock is only checked never to deliver early (no timing assertion)."""

import threading

import numpy as np
import pytest

from lecture09.network import accuracy
from lecture09.network.emulator import LinkEmulator, TimeScale, payload_nbytes, run_devices

LAT, BW = 0.002, 8e6          # 2 ms; 8 Mbit/s: 1000 bytes take 1 ms


def uniform(n, shared_uplink=True, lat=LAT, bw=BW, stamped=True):
    return LinkEmulator([[lat] * n for _ in range(n)], [[bw] * n for _ in range(n)], shared_uplink,
                        stamped=stamped)


def test_one_message_arrives_after_serialisation_plus_latency_with_its_bytes():
    emu = uniform(2)
    payload = np.arange(250, dtype=np.float32)              # 1000 bytes
    m = emu.send(0, 1, payload)
    assert m.model_arrival_s == pytest.approx(0.001 + LAT, abs=1e-12)
    got = emu.recv(1, 0)
    assert np.array_equal(got, payload) and got is not payload     # a copy, not the sender's buffer
    assert m.arrival_s >= m.model_arrival_s                 # never delivered early
    assert emu.bytes_sent() == {(0, 1): 1000}


@pytest.mark.parametrize("shared", [True, False])
def test_fifo_on_one_link_each_message_waits_for_the_previous_serialisation(shared):
    emu = uniform(2, shared_uplink=shared)
    sizes = (1000, 3000, 500)
    sent = [emu.send(0, 1, bytes([k]) * n) for k, n in enumerate(sizes)]
    done = 0.0
    for m, n in zip(sent, sizes):
        done += n * 8 / BW                                    # 1 ms, then 3 ms, then 0.5 ms
        assert m.start_s == pytest.approx(done - n * 8 / BW, abs=1e-12)
        assert m.model_arrival_s == pytest.approx(done + LAT, abs=1e-12)
    assert [emu.recv(1, 0)[0] for _ in sizes] == [0, 1, 2]   # in the order sent


def test_concurrent_links_from_different_senders_do_not_wait_for_each_other():
    emu = uniform(4)
    a, b = emu.send(0, 1, bytes(1000)), emu.send(2, 3, bytes(1000))
    assert a.model_arrival_s == b.model_arrival_s == pytest.approx(0.001 + LAT, abs=1e-12)
    got = run_devices([lambda: emu.recv(1, 0), lambda: emu.recv(3, 2)], timeout_s=10)
    assert [len(x) for x in got] == [1000, 1000]


@pytest.mark.parametrize("shared,second_start", [(True, 0.001), (False, 0.0)])
def test_shared_uplink_switch(shared, second_start):
    """Device 0 sends to 1 and to 2: one NIC sends them one after the other (Eq. 2 adds
    its terms); separate links send them at once."""
    emu = uniform(3, shared_uplink=shared)
    emu.send(0, 1, bytes(1000))
    m = emu.send(0, 2, bytes(1000))
    assert m.start_s == pytest.approx(second_start, abs=1e-12)
    assert m.model_arrival_s == pytest.approx(second_start + 0.001 + LAT, abs=1e-12)


def test_an_under_declared_message_is_charged_its_real_bytes():
    emu = uniform(2)
    m = emu.send(0, 1, np.zeros(4000, dtype=np.uint8), declared_bytes=10)
    assert m.nbytes == 4000 and m.declared_bytes == 10
    assert m.model_arrival_s == pytest.approx(4000 * 8 / BW + LAT, abs=1e-12)   # timed on 4000, not 10
    assert emu.total_bytes() == 4000


def test_payload_bytes_of_every_kind():
    torch = pytest.importorskip("torch")
    assert payload_nbytes(torch.zeros(10, dtype=torch.float16)) == 20
    assert payload_nbytes(np.zeros((3, 4), dtype=np.float64)) == 96
    assert payload_nbytes([b"abc", bytearray(5), memoryview(b"xy")]) == 10
    with pytest.raises(TypeError):
        payload_nbytes(3.0)


def test_stop_and_wait_and_the_stamped_clock_chain_without_lateness():
    """send_and_wait advances the sender's clock to the arrival: the next send starts there,
    whatever the thread's wake-up lateness."""
    emu = uniform(2)
    first = emu.send_and_wait(0, 1, bytes(1000))
    second = emu.send(0, 1, bytes(1000))
    assert second.start_s == pytest.approx(first.model_arrival_s, abs=1e-12)
    assert emu.device_clock[0] == pytest.approx(0.001 + LAT, abs=1e-12)


def test_the_real_clock_mode_starts_a_send_when_it_is_called():
    emu = uniform(2, stamped=False)
    emu.sleep(0.003)
    m = emu.send(0, 1, bytes(10))
    assert m.start_s >= 0.003


def test_recv_times_out_when_nothing_is_sent_and_bad_links_are_refused():
    emu = uniform(2)
    with pytest.raises(TimeoutError):
        emu.recv(1, 0, timeout=0.01)
    with pytest.raises(ValueError):
        emu.send(0, 0, b"x")
    with pytest.raises(ValueError):
        LinkEmulator([[0, -1], [0, 0]], [[1, 1], [1, 1]])
    with pytest.raises(ValueError):
        LinkEmulator([[0, 0], [0, 0]], [[1, 0], [1, 1]])


def test_a_barrier_completes_when_the_last_device_is_there():
    emu = uniform(3)
    emu.send_and_wait(0, 1, bytes(1000))
    barrier = threading.Barrier(1, action=emu.align)
    barrier.wait()
    assert emu.device_clock == [pytest.approx(0.001 + LAT)] * 3


def test_time_scale_multiplies_every_term_alike():
    scale = TimeScale(time=1e-3, bytes=1e-4)
    job_bytes, job_bw, job_lat = 1e8, 1e9, 0.05
    job_s = job_lat + 8 * job_bytes / job_bw
    real_s = scale.real_latency_s(job_lat) + 8 * scale.real_bytes(job_bytes) / scale.real_bandwidth_bps(job_bw)
    assert scale.job_seconds(real_s) == pytest.approx(job_s)
    assert scale.real_bytes(1) == 1                   # never an empty message
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            TimeScale(time=bad)


def row(case, links, median, transit=7.0):
    return accuracy.AccuracyRow(case, links, 10, transit, median, median, median)


def test_accuracy_observation_reads_its_table_on_each_branch():
    grows = [row("单条 single", 1, 0.1), row("并发 concurrent", 1, 0.2), row("并发 concurrent", 64, 0.7)]
    text = accuracy.accuracy_observation(grows)
    assert "64 条链路的 0.700 ms" in text and "10.0%" in text and "增加到 0.700" in text
    flat = [row("并发 concurrent", 1, 0.3), row("并发 concurrent", 64, 0.2)]
    text = accuracy.accuracy_observation(flat)
    assert "没有增加" in text and "1 条链路的 0.300 ms" in text
    assert "并发链路从" not in accuracy.accuracy_observation([row("单条 single", 1, 0.1)])


def test_the_benchmark_runs_and_its_rows_are_what_its_messages_say():
    rows = accuracy.accuracy_rows(repeats=4, links=(1, 2))
    assert [r.case for r in rows][:2] == ["单条 single", "背靠背 back-to-back"]
    assert [r.links for r in rows[2:]] == [1, 2]
    for r in rows:
        assert r.median_error_ms >= 0 and r.p90_error_ms <= r.max_error_ms   # lateness only, ordered
    assert rows[0].transit_ms == pytest.approx(7.0)          # 10 kB at 40 Mbit/s + 5 ms


def gloo_fifo(rank, world_size, shared):
    """Rank 0 sends 3 tensors of 4000 bytes to rank 1 and one to rank 2 over 8 Mbit/s,
    10 ms links, all four stamped with the same moment t0 (GlooLinks.send's `at`: the model's
    arrivals then do not depend on how fast this process reaches each call, so a busy machine
    cannot move them); the others receive. Returns (arrival − t0 per send, bytes) on rank 0,
    what each receiver saw on the others."""
    import torch
    from lecture09.network.gloo_links import GlooLinks
    n = world_size
    links = GlooLinks(rank, [[0.01] * n for _ in range(n)], [[8e6] * n for _ in range(n)], shared_uplink=shared)
    if rank == 0:
        t0 = links.clock()
        sent = [links.send(torch.full((1000,), float(k)), 1, at=t0) - t0 for k in range(3)]
        sent.append(links.send(torch.full((1000,), 9.0), 2, at=t0) - t0)
        links.flush()
        return sent, dict(links.bytes_sent)
    got = []
    for _ in range(3 if rank == 1 else 1):
        x = torch.zeros(1000)
        arrival, measured = links.recv(x, 0)
        got.append((arrival, measured, float(x[0])))
    return got


@pytest.mark.parametrize("shared", [True, False])
def test_gloo_links_fifo_metering_and_the_uplink_switch(shared):
    from lecture09.ranks.gloo_ranks import run_ranks
    (sent, metered), got1, got2 = run_ranks(gloo_fifo, 3, args=(shared,), timeout_s=120)
    # 4000 bytes at 8 Mbit/s = 4 ms on the wire, then 10 ms of latency; FIFO: each waits for the one
    # before. (1 µs: the clock's seconds are large floats, and t0 is subtracted from each.)
    us = 1e-6
    assert sent[:3] == [pytest.approx(0.014, abs=us), pytest.approx(0.018, abs=us), pytest.approx(0.022, abs=us)]
    # shared uplink: the message to rank 2 waits for the three to rank 1; else it leaves at t0
    assert sent[3] == pytest.approx(0.026 if shared else 0.014, abs=us)
    assert metered == {1: 12000, 2: 4000}                       # the tensors' bytes
    assert [v for _, _, v in got1] == [0.0, 1.0, 2.0] and got2[0][2] == 9.0
    assert all(measured >= arrival for arrival, measured, _ in got1 + got2)
