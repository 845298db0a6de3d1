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
