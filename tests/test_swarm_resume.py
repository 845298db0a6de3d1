"""Code 6's swarm after a resume to an older checkpoint (issue 45, item 1): a worker whose
`after` is ahead of the restarted server is answered at once, learns from the server's
epoch what the new server holds, rolls back its error feedback to that, and rejoins; the
swarm finishes with every round holding each worker once (no upload counted twice or lost).

The in-process tests use the real Worker and ParameterServer classes over real HTTP; the
server is "killed" by closing it without a checkpoint, so only the periodic checkpoints
survive, as after SIGKILL. test_sigkill_* does the same with a real --serve and real
--worker processes."""

import json
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from conftest import SWEEP_TIER, start_in_own_group
from lecture01.tiny_gpt import load_world_tokens
from lecture09.swarm.swarm_http import RunningServer
from lecture09.swarm.swarm_protocol import ServerConfig, WorkerConfig
from lecture09.swarm.swarm_worker import Worker, http_call

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "code" / "lecture09" / "06_swarm_http.py"
STEPS, EVERY = 10, 4


@pytest.fixture(scope="module")
def tokens():
    return load_world_tokens()[0]


def status(url):
    return json.loads(http_call(f"{url}/status")[2])


def wait_until(predicate, limit_s=60):
    end_s = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < end_s, "waited too long"
        time.sleep(0.005)


def same(a, b):
    return set(a) == set(b) and all(torch.equal(a[name], b[name]) for name in a)


def config(folder):
    return ServerConfig(world_size=2, min_workers=2, steps=STEPS, compression="topk", checkpoint_dir=str(folder),
                        checkpoint_every=EVERY)


@pytest.mark.parametrize("kill_at", [4, pytest.param(5, marks=SWEEP_TIER), 6, pytest.param(7, marks=SWEEP_TIER)])
def test_a_resume_to_an_older_checkpoint_rejoins_and_rolls_error_feedback_back(tmp_path, tokens, kill_at):
    """Worker a runs its own loop; worker b is driven by hand so that the server dies with
    a's upload for `kill_at` in the round (a long-polls `after=kill_at`). The server
    resumes at 4 (checkpoint every 4). Today's server answered `after=6` only once it
    passed 6: never, since b alone cannot make a round of min_workers 2."""
    running = RunningServer(config(tmp_path))
    port = int(running.url.rsplit(":", 1)[1])
    a = Worker(running.url, WorkerConfig(worker_id=0, batch_size=4), tokens)
    b = Worker(running.url, WorkerConfig(worker_id=1, batch_size=4), tokens)
    at_rejoin = {}
    a.log = lambda line: at_rejoin.setdefault("a", a.feedback.residuals)
    b.log = lambda line: at_rejoin.setdefault("b", b.feedback.residuals)
    results = {}
    thread_a = threading.Thread(target=lambda: results.setdefault("a", a.run()), daemon=True)
    thread_a.start()
    after = -1
    try:
        for version in range(kill_at):
            version, _, _ = b.pull(after)
            assert b.upload(version)[0] == 200
            after = version
        wait_until(lambda: running.swarm.version == kill_at and len(running.swarm.round) == 1)
        assert sorted(running.swarm.round) == ["0"]
        # what the checkpoint at 4 holds of each worker: its uploads for versions 0-3
        expected = {name: next((before for v, _, before in w.history if v == 4), w.feedback.residuals)
                    for name, w in (("a", a), ("b", b))}
    finally:
        running.close()   # no checkpoint on the way out: only the one at 4 survives
    resumed = RunningServer(config(tmp_path), port=port, resume=str(tmp_path))
    try:
        assert resumed.swarm.version == 4
        thread_b = threading.Thread(target=lambda: results.setdefault("b", b.run()), daemon=True)
        thread_b.start()
        thread_a.join(120)
        thread_b.join(120)
        assert not thread_a.is_alive() and not thread_b.is_alive(), f"stuck at {status(resumed.url)}"
        final = status(resumed.url)
    finally:
        resumed.close()
    assert final["done"] and final["version"] == STEPS
    # every round held each worker's upload once: none counted twice, none lost
    assert final["counts"]["accepted"] == 2 * STEPS and final["counts"].get("deadline_steps", 0) == 0
    assert all(entry["workers"] == ["0", "1"] for entry in resumed.swarm.timeline)
    assert [entry["version"] for entry in resumed.swarm.timeline] == list(range(4, STEPS))
    # the error feedback of the lost uploads was rolled back to what the checkpoint holds
    assert [r[2:] for r in a.rejoins] == [(4, kill_at - 4 + 1)] and [r[2:] for r in b.rejoins] == [(4, kill_at - 4)]
    assert same(at_rejoin["a"], expected["a"]) and same(at_rejoin["b"], expected["b"])
    assert results["a"]["error"] is None and results["b"]["error"] is None


def test_a_poll_ahead_of_the_server_is_answered_at_once(tmp_path):
    """Directly: after a resume from 5 to 4, GET /weights?after=5 is answered at once with
    version 4 and the new epoch (today it waited long_poll_s)."""
    running = RunningServer(ServerConfig(world_size=1, steps=STEPS, long_poll_s=600, checkpoint_dir=str(tmp_path),
                                         checkpoint_every=EVERY))
    try:
        running.swarm.version = 4
        running.swarm.checkpoint()
        running.swarm.version = 5
        old_epoch = http_call(f"{running.url}/weights")[1]["X-Server-Epoch"]
    finally:
        running.close()
    resumed = RunningServer(ServerConfig(world_size=1, steps=STEPS, long_poll_s=600), resume=str(tmp_path))
    try:
        answer = {}
        thread = threading.Thread(target=lambda: answer.setdefault(
            "got", http_call(f"{resumed.url}/weights?after=5", headers={"X-Worker-Id": "w"})), daemon=True)
        thread.start()
        thread.join(30)
        assert not thread.is_alive(), "the poll ahead of the server was not answered"
        code, headers, _ = answer["got"]
        assert code == 200 and headers["X-Model-Version"] == "4" and headers["X-Epoch-Start"] == "4"
        assert headers["X-Server-Epoch"] != old_epoch and headers["X-Epoch-Start-In-Round"] == "0"
    finally:
        resumed.close()


def test_rejoin_arithmetic_by_hand():
    """_rejoin on hand-made residuals: a pull rolls back to the residual before the first
    lost upload; an upload accepted by the new server keeps its own change on top."""
    worker = Worker.__new__(Worker)
    from lecture09.compress.compression import PayloadErrorFeedback
    worker.feedback = PayloadErrorFeedback()
    worker.history, worker.trimmed_through, worker.rejoins, worker.log, worker.epoch = [], -1, [], None, "old"
    r = [{"x": torch.tensor([float(i)])} for i in range(5)]   # the residual before uploads 0..4
    worker.history = [(v, "old", r[v]) for v in range(4)]
    worker.feedback.residuals = r[4]
    # the new server started at 2 with our upload for 2 in its round: 3 is lost
    assert worker._see_epoch("new", "2", True, "0") == (True, {"x": torch.tensor([1.0])})
    assert same(worker.feedback.residuals, r[3]) and [v for v, _, _ in worker.history] == [0, 1, 2]
    # not in its round: 2 is lost too
    worker.epoch, worker.feedback.residuals = "new", r[3]
    worker._see_epoch("newer", "2", False, "0")
    assert same(worker.feedback.residuals, r[2]) and [v for v, _, _ in worker.history] == [0, 1]
    # an upload (residual before it 10, after it 11) accepted by a server started at 0: uploads
    # 0 and 1 are lost (residual change 2 - 0 = 2), the accepted one keeps its +1
    worker.feedback._pending = {"x": torch.tensor([11.0])}
    _, span = worker._see_epoch("newest", "0", False, None, accepted_now={"x": torch.tensor([10.0])})
    assert same(span, {"x": torch.tensor([10.0])}) and same(worker.feedback._pending, {"x": torch.tensor([1.0])})
    # history trimmed past the start: nothing to go back to but zero
    worker.history, worker.trimmed_through = [(5, "newest", {"x": torch.tensor([7.0])})], 4
    worker.feedback.residuals = {"x": torch.tensor([9.0])}
    worker._see_epoch("last", "3", False, None)
    assert worker.feedback.residuals == {}   # residuals start (and restart) at zero


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_serve(folder, port, *extra):
    proc = start_in_own_group(SCRIPT, "--serve", "--workers", "2", "--min-workers", "2", "--steps", "24",
                              "--port", str(port), *extra, cwd=folder)
    lines = []
    while True:
        line = proc.stdout.readline()
        assert line, f"the server stopped: {''.join(lines)} {proc.stderr.read()}"
        lines.append(line)
        if re.search(r"http://127\.0\.0\.1:\d+", line):
            return proc, lines


def kill(proc, sig=signal.SIGKILL):
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    return proc.communicate(timeout=60)


@pytest.mark.slow
@pytest.mark.sweep               # a real --serve and a real --worker: ~20 s
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and process groups are POSIX")
def test_sigkill_of_a_real_serve_then_resume_to_an_older_checkpoint_finishes(tmp_path, tokens):
    """The issue's case with the defaults: --checkpoint-every 10, --min-workers 2. SIGKILL
    with worker 0's upload for 16 in the round; --resume goes back to 10; worker 0 (a real
    --worker process) is answered at once, rolls back 7 uploads and rejoins; the swarm
    finishes with 2 uploads in each of the 24 rounds."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server, _ = start_serve(tmp_path, port)
    worker = start_in_own_group(SCRIPT, "--worker", url, "--worker-id", "0", "--batch-size", "4", cwd=tmp_path)
    b = Worker(url, WorkerConfig(worker_id=1, batch_size=4), tokens)
    try:
        after = -1
        for version in range(16):
            version, _, _ = b.pull(after)
            assert b.upload(version)[0] == 200
            after = version
        wait_until(lambda: (lambda s: s["version"] == 16 and s["membership"]["in_round"] == ["0"])(status(url)))
        kill(server)
        server, lines = start_serve(tmp_path, port, "--resume", "swarm_checkpoint")
        assert "at version 10 (0 uploads in the round)" in "".join(lines)
        b.run()
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        assert re.search(r"restarted at version 10: 撤回 rolled back 7 lost uploads'", out), out
        final = status(url)
        assert final["done"] and final["counts"]["accepted"] == 48 and final["counts"].get("deadline_steps", 0) == 0
        out, err = kill(server, signal.SIGTERM)
        assert server.returncode == 0 and "Traceback" not in err
    finally:
        kill(worker)
        kill(server)
