"""Code 6's server survives stops and crashes (issue 22, item 8 and "durability"): SIGTERM
answers what is in flight, writes a checkpoint and exits 0; a server killed with SIGKILL
and resumed ends bit-identical to one never stopped; a damaged checkpoint is refused with
one line and the one before it is kept. Every process a test starts, it stops."""

import json
import os
import subprocess
import re
import signal
import socket
import sys
import threading
from pathlib import Path

import pytest
import torch

from conftest import SWEEP_TIER, start_in_own_group
from lecture09.compress import compression as c
from lecture09.swarm import swarm_checkpoint
from lecture09.swarm.swarm_http import RunningServer
from lecture09.swarm.swarm_protocol import ServerConfig
from lecture09.swarm.swarm_worker import http_call

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and process groups are POSIX")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "code" / "lecture09" / "06_swarm_http.py"
TOKEN = "durable"
STEPS, WORKERS = 8, 2


def upload_body(shapes, version, worker):
    """The upload of `worker` for `version`: the same bytes in every run of a test."""
    gen = torch.Generator().manual_seed(1000 * version + worker)
    grads = {name: 0.01 * torch.randn(shape, generator=gen) for name, shape in shapes.items()}
    return c.payload_to_bytes(c.encode_payload(grads, "topk", ratio=0.01))   # --serve's own top-k ratio


def post(url, shapes, version, worker):
    headers = {"X-Worker-Id": f"w{worker}", "X-Compression": "topk", "X-Loss": f"{3 + version / 10:.8e}",
               "X-Model-Version": str(version), "Authorization": f"Bearer {TOKEN}"}
    code, _, answer = http_call(f"{url}/gradients", upload_body(shapes, version, worker), headers)
    return code, json.loads(answer)


def status(url):
    return json.loads(http_call(f"{url}/status")[2])


@pytest.fixture(scope="module")
def shapes():
    running = RunningServer(ServerConfig(world_size=WORKERS, steps=STEPS, token=TOKEN))
    try:
        return dict(running.swarm.shapes)
    finally:
        running.close()


def uninterrupted_weights(shapes, aggregator="mean", workers=WORKERS):
    running = RunningServer(ServerConfig(world_size=workers, steps=STEPS, token=TOKEN, aggregator=aggregator))
    try:
        for version in range(STEPS):
            for worker in range(workers):
                assert post(running.url, shapes, version, worker)[0] == 200
        return http_call(f"{running.url}/weights")[2]
    finally:
        running.close()


def start_server(folder, *extra, workers=WORKERS):
    proc = start_in_own_group(SCRIPT, "--serve", "--workers", str(workers), "--steps", str(STEPS), "--token", TOKEN,
                              "--checkpoint-dir", str(folder), *extra, cwd=folder)
    lines = []
    while True:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the server stopped: {''.join(lines)} {proc.stderr.read()}")
        lines.append(line)
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        if found:
            return proc, found.group(0), lines


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


@pytest.mark.parametrize("mid_round,aggregator", [pytest.param(False, "mean", marks=SWEEP_TIER), (True, "mean"),
                                                  pytest.param(False, "centered-clip", marks=SWEEP_TIER)],
                         ids=["after-a-step", "mid-round", "centered-clip"])
def test_sigkill_then_resume_is_bit_identical(tmp_path, shapes, mid_round, aggregator):
    """SIGKILL right after the step to version 5 (or with one upload of round 5 in): the
    resumed server, fed the same uploads, ends with the same bytes as one never stopped.
    Mid-round, the upload that arrived after the last checkpoint is lost and sent again.
    Centered clipping carries its center from round to round: the checkpoint holds it
    (without it, the resumed server would clip around 0 and end with other weights)."""
    kill_at = 5
    flags = ("--aggregator", aggregator) if aggregator != "mean" else ()
    n = WORKERS if aggregator == "mean" else 3          # a robust aggregator needs n > 2f = 2
    proc, url, _ = start_server(tmp_path, "--checkpoint-every", "1", *flags, workers=n)
    try:
        for version in range(kill_at):
            for worker in range(n):
                assert post(url, shapes, version, worker)[0] == 200
        if mid_round:
            assert post(url, shapes, kill_at, 0)[1]["applied"] is False
        assert status(url)["version"] == kill_at
    finally:
        stop(proc)   # SIGKILL: no handler runs, nothing is flushed
    proc, url, lines = start_server(tmp_path, "--resume", str(tmp_path), *flags, workers=n)
    try:
        assert f"at version {kill_at} (0 uploads in the round)" in "".join(lines)
        assert status(url)["version"] == kill_at and status(url)["pending_uploads"] == 0   # at most the round lost
        for version in range(kill_at, STEPS):
            for worker in range(n):
                assert post(url, shapes, version, worker)[0] == 200
        resumed = http_call(f"{url}/weights")[2]
    finally:
        stop(proc)
    assert resumed == uninterrupted_weights(shapes, aggregator, n)


def test_sigterm_answers_the_upload_in_flight_then_checkpoints_and_exits_0(tmp_path, shapes):
    proc, url, _ = start_server(tmp_path, "--workers", "3", "--checkpoint-every", "0")
    try:
        assert post(url, shapes, 0, 0)[1]["applied"] is False
        body = upload_body(shapes, 0, 1)
        head = (f"POST /gradients HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nX-Worker-Id: w1\r\n"
                f"X-Compression: topk\r\nX-Loss: 3\r\nX-Model-Version: 0\r\nContent-Length: {len(body)}\r\n\r\n")
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head.encode() + body[: len(body) // 2])   # mid-upload when SIGTERM arrives
            threading.Event().wait(0.3)
            os.killpg(proc.pid, signal.SIGTERM)
            threading.Event().wait(0.3)
            sock.sendall(body[len(body) // 2:])
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.0 200 "), answer[:100]   # answered, not reset
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        last = out.strip().splitlines()[-1]
        assert last.startswith("已停止 stopped (SIGTERM) at version 0: checkpoint") and "--resume" in last
    finally:
        stop(proc)
    state, path = swarm_checkpoint.load(tmp_path)
    assert state["version"] == 0 and sorted(state["round"]) == ["w0", "w1"]   # the round in progress is kept
    proc, url, lines = start_server(tmp_path, "--workers", "3", "--resume", str(path))
    try:
        assert status(url)["pending_uploads"] == 2
        assert post(url, shapes, 0, 2)[1]["applied"] is True
    finally:
        stop(proc)


def test_a_damaged_checkpoint_is_refused_with_one_line_and_the_previous_one_kept(tmp_path, shapes):
    proc, url, _ = start_server(tmp_path, "--checkpoint-every", "1")
    try:
        for version in range(2):
            for worker in range(WORKERS):
                post(url, shapes, version, worker)
    finally:
        stop(proc)
    newest, previous = swarm_checkpoint.checkpoints_in(tmp_path)[-1], swarm_checkpoint.checkpoints_in(tmp_path)[-2]
    good = previous.read_bytes()
    newest.write_bytes(newest.read_bytes()[:-1000])   # truncated
    errors = []
    for where in (tmp_path, newest):
        proc = start_in_own_group(SCRIPT, "--serve", "--workers", str(WORKERS), "--steps", str(STEPS),
                                  "--resume", str(where), cwd=tmp_path)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
        assert "truncated or damaged" in err
        errors.append(err)
    assert f"the previous one is kept: --resume {previous}" in errors[0]   # a folder: it names the one before
    assert previous.read_bytes() == good   # the good one is untouched
    proc, url, lines = start_server(tmp_path, "--resume", str(previous))
    try:
        assert status(url)["version"] == 1
    finally:
        stop(proc)


@pytest.mark.slow
@pytest.mark.sweep                  # bad --resume: further cases
def test_resuming_with_other_settings_is_refused_with_one_line(tmp_path, shapes):
    proc, url, _ = start_server(tmp_path, "--checkpoint-every", "1")
    try:
        post(url, shapes, 0, 0), post(url, shapes, 0, 1)
    finally:
        stop(proc)
    proc = start_in_own_group(SCRIPT, "--serve", "--workers", "3", "--steps", str(STEPS), "--resume",
                              str(tmp_path), cwd=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.strip() == ("无法继续 cannot resume: the checkpoint was made with --workers 2, "
                                                    "not 3")


def test_a_checkpoint_round_trips_by_hand(tmp_path):
    state = {"version": 3, "weights": {"a": torch.arange(4.0)}}
    path, n_bytes, _ = swarm_checkpoint.save(state, tmp_path)
    assert path.name == "checkpoint-000003.pt" and n_bytes == path.stat().st_size
    loaded, where = swarm_checkpoint.load(tmp_path)
    assert where == path and torch.equal(loaded["weights"]["a"], state["weights"]["a"])
    for version in (4, 5):
        swarm_checkpoint.save(dict(state, version=version), tmp_path)
    assert [p.name for p in swarm_checkpoint.checkpoints_in(tmp_path)] == ["checkpoint-000004.pt",
                                                                           "checkpoint-000005.pt"]
    assert not list(tmp_path.glob(".*.tmp"))   # no temporary file left behind
    (tmp_path / "checkpoint-000009.pt").write_bytes(b"hello")
    with pytest.raises(swarm_checkpoint.CheckpointError, match="not a swarm checkpoint.*--resume .*000005"):
        swarm_checkpoint.load(tmp_path)


@pytest.mark.slow
@pytest.mark.sweep                  # bad --resume: further cases
def test_resuming_with_another_aggregator_is_refused_in_one_line(tmp_path, shapes):
    proc, url, _ = start_server(tmp_path, "--checkpoint-every", "1", "--aggregator", "centered-clip", workers=3)
    try:
        for worker in range(3):
            assert post(url, shapes, 0, worker)[0] == 200
    finally:
        stop(proc)
    done = subprocess.run([sys.executable, str(SCRIPT), "--serve", "--workers", "3", "--steps", str(STEPS),
                           "--token", TOKEN, "--checkpoint-dir", str(tmp_path), "--resume", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--aggregator centered-clip, not mean" in done.stderr, done.stderr


def test_a_checkpoint_after_one_step_is_the_size_the_notes_quote(tmp_path, shapes):
    """§6: 1,021,040 bytes (torch 2.13.0) with the mean: three copies of the 333,872
    weight bytes (weights, exp_avg, exp_avg_sq) and ~19 KB of the rest; centered clipping
    adds one more copy, its center."""
    sizes = {}
    for aggregator in ("mean", "centered-clip"):
        running = RunningServer(ServerConfig(world_size=4, steps=STEPS, token=TOKEN, aggregator=aggregator,
                                             checkpoint_dir=str(tmp_path / aggregator)))
        try:
            for worker in range(4):
                assert post(running.url, shapes, 0, worker)[0] == 200
            sizes[aggregator] = running.swarm.checkpoint()[1]
        finally:
            running.close()
    assert sizes["mean"] == 1_021_040 and 3 * 333_872 < sizes["mean"] < 3 * 333_872 + 20_000
    assert 333_872 < sizes["centered-clip"] - sizes["mean"] < 333_872 + 1024

