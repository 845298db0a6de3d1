"""Code 6's checkpoints when things go wrong (issue 45, items 4, 5, 6 and 9): a write that
fails is answered, counted, shown and logged, leaves no temporary file, and a stop that
cannot write its checkpoint says so in one line; a checkpoint with a valid checksum but
the wrong contents is refused in one line with exit status 2; the wire format and the
top-k ratio cannot change across a resume; names sort by version, not as text."""

import errno
import json
import os
import signal
import sys

import pytest
import torch

from conftest import SWEEP_TIER, start_in_own_group
from lecture01.console import display_width
from lecture09.swarm import swarm_checkpoint
from lecture09.swarm.swarm_http import RunningServer
from lecture09.swarm.swarm_protocol import ServerConfig
from lecture09.swarm.swarm_server import ParameterServer
from lecture09.swarm.swarm_worker import http_call
from test_swarm_durability import SCRIPT, STEPS, TOKEN, WORKERS, post, shapes, start_server, status, stop  # noqa: F401

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")


# --- item 4: a checkpoint that cannot be written ------------------------------------------

def test_a_failed_periodic_checkpoint_is_answered_counted_logged_and_leaves_no_temp_file(tmp_path, shapes,
                                                                                          monkeypatch, capfd):
    """A full disk while the step to version 1 writes its checkpoint: the upload that made
    the step still gets its 200 (today: no answer at all), /status counts the failure and
    says why, stderr has one line, and the partial temporary file is gone."""
    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    running = RunningServer(ServerConfig(world_size=WORKERS, steps=STEPS, token=TOKEN, compression="topk",
                                         checkpoint_dir=str(tmp_path), checkpoint_every=1))
    try:
        monkeypatch.setattr(swarm_checkpoint.os, "fsync", full_disk)
        assert post(running.url, shapes, 0, 0)[0] == 200
        code, answer = post(running.url, shapes, 0, 1)
        assert code == 200 and answer["applied"] is True and answer["version"] == 1
        report = status(running.url)
        assert report["counts"]["checkpoint_failures"] == 1 and "checkpoints" not in report["counts"]
        assert report["last_checkpoint_error"] == "version 1: No space left on device"
        assert os.listdir(tmp_path) == []          # neither a checkpoint nor a partial temporary file
        monkeypatch.undo()
        for worker in range(WORKERS):               # the next write works again
            assert post(running.url, shapes, 1, worker)[0] == 200
        assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-000002.pt"]
    finally:
        running.close()
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("检查点没写成 checkpoint failed at version 1: No space")


def test_a_serve_whose_checkpoints_cannot_be_written_answers_and_stops_in_one_line(tmp_path, shapes):
    """A real --serve with --checkpoint-dir naming a file (no folder can be made there):
    every upload is answered, /status counts the failures, and SIGTERM ends with one line
    and exit status 1 (today: no answer to the stepping upload; a traceback, exit 1)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    proc = start_in_own_group(SCRIPT, "--serve", "--workers", str(WORKERS), "--steps", str(STEPS), "--token", TOKEN,
                              "--checkpoint-dir", str(blocker / "sub"), "--checkpoint-every", "1", cwd=tmp_path)
    try:
        import re
        url = None
        while url is None:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            found = re.search(r"http://127\.0\.0\.1:\d+", line)
            url = found.group(0) if found else None
        for version in range(2):
            for worker in range(WORKERS):
                assert post(url, shapes, version, worker)[0] == 200
        report = status(url)
        assert report["version"] == 2 and report["counts"]["checkpoint_failures"] == 2
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
    lines = [line for line in err.splitlines() if line]   # the stop line starts on a new line, after ^C
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert [line.split(":")[0] for line in lines] == ["检查点没写成 checkpoint failed at version 1",
                                                       "检查点没写成 checkpoint failed at version 2",
                                                       "已停止 stopped (SIGTERM), 检查点没写成 checkpoint failed at version 2"]
    assert lines[2].endswith("version 2: Not a directory")
    assert all(display_width(line) <= 100 for line in lines)


# --- item 5: a checkpoint with a valid checksum and the wrong contents ---------------------

def refused_or_stopped(proc, timeout_s=60):
    """(out, err) of a --serve expected to refuse at once; one that serves instead (the bug)
    is stopped here, so no test leaves a server behind."""
    import subprocess
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise AssertionError("the server did not refuse the checkpoint: it is serving") from None

def one_step_state(tmp_path, shapes, **settings):
    """The state a server writes after one step (with an upload of round 1 in its round)."""
    running = RunningServer(ServerConfig(world_size=WORKERS, steps=STEPS, token=TOKEN, compression="topk",
                                         **settings))
    try:
        for worker in range(WORKERS):
            assert post(running.url, shapes, 0, worker)[0] == 200
        assert post(running.url, shapes, 1, 0)[0] == 200
        with running.swarm.lock:
            return running.swarm.state()
    finally:
        running.close()


class NotWeights:
    """What weights_only=True refuses to unpickle."""


def _wider(state):
    state["weights"]["tok_emb.weight"] = torch.zeros(state["weights"]["tok_emb.weight"].shape[0],
                                                     state["weights"]["tok_emb.weight"].shape[1] + 16)


def _adam(state, key, value):
    state["optimizer"]["state"][0][key] = value


MALFORMED = {   # case: (how to spoil a good state, words of the one-line refusal)
    "wider model": (_wider, "weight tok_emb.weight: shape (44, 112), want (44, 96)"),
    "older format without seen": (lambda s: s.pop("seen"), "lacks seen (another format)"),
    "(1,) LayerNorm gain": (lambda s: s["weights"].__setitem__("ln_f.weight", torch.ones(1)),
                            "weight ln_f.weight: shape (1,), want (96,)"),
    "float64 weight": (lambda s: s["weights"].__setitem__("ln_f.bias", torch.zeros(96, dtype=torch.float64)),
                       "weight ln_f.bias: float64, want float32"),
    "NaN weight": (lambda s: s["weights"]["ln_f.bias"].fill_(float("nan")), "weight ln_f.bias: non-finite values"),
    "wrong-shaped exp_avg": (lambda s: _adam(s, "exp_avg", torch.zeros(3)), "exp_avg tok_emb.weight: shape (3,), want (44, 96)"),
    "exp_avg_sq as float16": (lambda s: _adam(s, "exp_avg_sq", s["optimizer"]["state"][0]["exp_avg_sq"].half()),
                              "exp_avg_sq tok_emb.weight: float16, want float32"),
    "AdamW step missing": (lambda s: s["optimizer"]["state"][0].pop("step"), "AdamW tok_emb.weight: not step, exp_avg, exp_avg_sq"),
    "AdamW state of a 99th parameter": (lambda s: s["optimizer"]["state"].__setitem__(99, {}),
                                        "AdamW state for another model"),
    "an upload of another shape": (lambda s: s["round"]["w0"]["grads"].__setitem__("ln_f.bias", torch.zeros(5)),
                                   "w0's upload ln_f.bias: shape (5,), want (96,)"),
    "a version beyond the run": (lambda s: s.__setitem__("version", 10 ** 6), "beyond this run's 8 steps"),
    "a negative count": (lambda s: s["counts"].__setitem__("accepted", -1), "counts is int -1"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_checkpoint_is_refused_before_anything_changes(tmp_path, shapes, case):
    """Each spoiled state, written with a valid checksum, is refused by restore() with one
    line naming the file, and the server is left as it was (today: a crash, or a (1,) gain
    broadcast over 96, or AdamW state that makes every later step fail)."""
    state = one_step_state(tmp_path, shapes)
    spoil, words = MALFORMED[case]
    spoil(state)
    path, _, _ = swarm_checkpoint.save(state, tmp_path)
    server = ParameterServer(ServerConfig(world_size=WORKERS, steps=STEPS, token=TOKEN, compression="topk"))
    before = {name: p.detach().clone() for name, p in server.params.items()}
    with pytest.raises(swarm_checkpoint.CheckpointError) as refused:
        server.restore(path)
    message = str(refused.value)
    assert message.startswith(f"{path.name}: ") and words in message and "\n" not in message, message
    assert display_width(f"无法继续 cannot resume: {message}") <= 100
    assert server.version == 0 and all(torch.equal(p, before[name]) for name, p in server.params.items())


def test_a_good_checkpoint_passes_the_contents_check(tmp_path, shapes):
    """The check must not refuse what the server itself writes (with centered clipping's center too)."""
    for aggregator, workers in (("mean", WORKERS), ("centered-clip", 3)):
        running = RunningServer(ServerConfig(world_size=workers, steps=STEPS, token=TOKEN, aggregator=aggregator,
                                             checkpoint_dir=str(tmp_path / aggregator)))
        try:
            for worker in range(workers):
                assert post(running.url, shapes, 0, worker)[0] == 200
            path = running.swarm.checkpoint()[0]
        finally:
            running.close()
        server = ParameterServer(ServerConfig(world_size=workers, steps=STEPS, token=TOKEN, aggregator=aggregator))
        server.restore(path)
        assert server.version == 1


@pytest.mark.parametrize("case", ["(1,) LayerNorm gain", pytest.param("older format without seen", marks=SWEEP_TIER),
                                  pytest.param("wrong-shaped exp_avg", marks=SWEEP_TIER), "pickle"])
def test_serve_resume_of_a_malformed_checkpoint_is_one_line_and_exit_2(tmp_path, shapes, case):
    if case == "pickle":   # a valid checksum over a pickle that weights_only refuses (today: 6 lines)
        import io
        buffer = io.BytesIO()
        torch.save({"version": 1, "x": NotWeights()}, buffer)
        payload = buffer.getvalue()
        import hashlib
        data = swarm_checkpoint.MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
        path = tmp_path / "checkpoint-000001.pt"
        path.write_bytes(data)
        words = "cannot be read: UnpicklingError"
    else:
        state = one_step_state(tmp_path, shapes)
        spoil, words = MALFORMED[case]
        spoil(state)
        path, _, _ = swarm_checkpoint.save(state, tmp_path)
    proc = start_in_own_group(SCRIPT, "--serve", "--workers", str(WORKERS), "--steps", str(STEPS), "--token", TOKEN,
                              "--resume", str(path), cwd=tmp_path)
    out, err = refused_or_stopped(proc)
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("无法继续 cannot resume: ") and words in err and display_width(err.strip()) <= 100, err


# --- item 6: the wire format and the top-k ratio are fixed by the checkpoint -------------------

@pytest.mark.parametrize("flags,words", [(("--compression", "topk-int8"), "--compression topk, not topk-int8"),
                                         (("--topk-ratio", "0.05"), "--topk-ratio 0.01, not 0.05")])
def test_resuming_with_another_wire_format_or_ratio_is_refused_in_one_line(tmp_path, shapes, flags, words):
    """Today a topk-int8 swarm resumed without its flag serves, and then refuses every
    worker's upload (400 wrong_compression); another ratio silently changes check 8's bound."""
    state = one_step_state(tmp_path, shapes, topk_ratio=0.01)
    swarm_checkpoint.save(state, tmp_path)
    proc = start_in_own_group(SCRIPT, "--serve", "--workers", str(WORKERS), "--steps", str(STEPS), "--token", TOKEN,
                              "--resume", str(tmp_path), *flags, cwd=tmp_path)
    out, err = refused_or_stopped(proc)
    assert proc.returncode == 2 and err.strip() == (f"无法继续 cannot resume: the checkpoint was made with {words}"), err
    assert display_width(err.strip()) <= 100


def test_a_checkpoint_without_the_wire_settings_still_resumes():
    """A checkpoint written before issue 45 has no compression or topk_ratio: not checked."""
    config = ServerConfig(compression="topk-int8", topk_ratio=0.05)
    settings = {name: getattr(config, name) for name in swarm_checkpoint.FIXED_SETTINGS
                if name not in swarm_checkpoint.SAVED_SINCE_ISSUE_45}
    swarm_checkpoint.check_settings({"settings": settings}, config)
    with pytest.raises(swarm_checkpoint.CheckpointError, match="--compression topk, not topk-int8"):
        swarm_checkpoint.check_settings({"settings": dict(settings, compression="topk")}, config)


# --- item 9: dead writers' temporary files; versions past 999,999 ---------------------------

def test_checkpoints_sort_by_version_past_a_million(tmp_path):
    """Today the names sorted as text: retention deleted checkpoint-1000000.pt (the newest)
    and --resume loaded checkpoint-999999.pt."""
    for version in (999_998, 999_999, 1_000_000):
        swarm_checkpoint.save({"version": version}, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1000000.pt", "checkpoint-999999.pt"]
    state, path = swarm_checkpoint.load(tmp_path)
    assert state["version"] == 1_000_000 and path.name == "checkpoint-1000000.pt"


def test_a_dead_writers_temporary_file_is_removed_and_a_live_ones_kept(tmp_path):
    import subprocess
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    (tmp_path / f".checkpoint-000003.pt.{dead_pid}.tmp").write_bytes(b"half a checkpoint")
    live = tmp_path / f".checkpoint-000003.pt.{os.getppid()}.tmp"   # our parent: running
    live.write_bytes(b"being written")
    swarm_checkpoint.save({"version": 4}, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"checkpoint-000004.pt", live.name}
