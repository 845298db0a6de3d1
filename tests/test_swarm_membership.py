"""Code 6's rounds when peers come and go (issue 22, "membership"): the quorum adapts, a
crashed worker costs one deadline, a late or new worker is expected from its first try
on, min_workers holds a round back, and a worker whose upload was lost is told so."""

import sys
import time

import pytest
import torch

from lecture09.compress import compression as c
from lecture09.swarm.swarm_http import RunningServer
from lecture09.swarm.swarm_protocol import Rejection, ServerConfig, Upload
from lecture09.swarm.swarm_server import ParameterServer
from lecture09.swarm.swarm_worker import http_call


def swarm(**changes):
    return ParameterServer(ServerConfig(**dict(dict(world_size=3, steps=100, round_deadline_s=600), **changes)))


def body_for(server, seed=0):
    gen = torch.Generator().manual_seed(seed)
    grads = {name: 0.01 * torch.randn(shape, generator=gen) for name, shape in server.shapes.items()}
    return c.payload_to_bytes(c.encode_payload(grads, "topk", ratio=0.05))


def up(server, worker, version=None):
    version = server.version if version is None else version
    return server.submit(Upload(worker, version, "topk", 3.0), body_for(server, hash(worker) % 1000))


def wait_for_version(server, version, limit_s=30):
    end_s = time.monotonic() + limit_s
    while server.version < version and time.monotonic() < end_s:
        time.sleep(0.02)
    assert server.version == version


def test_a_crashed_worker_costs_one_deadline_then_is_not_waited_for():
    server = swarm(round_deadline_s=0.3)
    try:
        for worker in "abc":
            up(server, worker)
        assert server.timeline[-1]["by"] == "all"
        assert not up(server, "a")["applied"] and not up(server, "b")["applied"]   # c has crashed
        wait_for_version(server, 2)
        assert server.timeline[-1] == {"version": 1, "workers": ["a", "b"], "by": "deadline",
                                       "waited_s": pytest.approx(0.3, abs=5), "late": ["c"]}
        up(server, "a")
        assert up(server, "b")["applied"]   # c was last seen at version 0: no longer expected
        assert server.timeline[-1]["by"] == "expected" and server.timeline[-1]["late"] == []
    finally:
        server.close()


def test_a_late_worker_is_expected_again_from_its_stale_try():
    server = swarm(round_deadline_s=0.3)
    try:
        for worker in "abc":
            up(server, worker)
        up(server, "a"), up(server, "b")
        wait_for_version(server, 2)               # round 1 stepped without c
        with pytest.raises(Rejection) as refused:
            up(server, "c", version=1)            # c is alive, one round behind
        assert refused.value.code == "stale_version"
        assert server.expected() == {"a", "b", "c"}
        up(server, "a")
        assert not up(server, "b")["applied"]     # the round waits for c now
        assert up(server, "c")["applied"] and server.timeline[-1]["by"] == "all"
    finally:
        server.close()


def test_a_new_worker_joins_the_round_it_reaches_in_time():
    server = swarm(world_size=5, round_deadline_s=0.3)
    try:
        for worker in "abc":
            up(server, worker)
        wait_for_version(server, 1)               # version 0: nobody known, the deadline steps it
        up(server, "a"), up(server, "new")
        assert not up(server, "b")["applied"]     # c is expected
        assert up(server, "c")["applied"]         # every expected worker is in: steps, the newcomer too
        assert server.timeline[-1]["workers"] == ["a", "b", "c", "new"] and server.timeline[-1]["by"] == "expected"
        up(server, "a"), up(server, "b")
        assert not up(server, "c")["applied"]     # now the newcomer is expected as well
        assert up(server, "new")["applied"]
    finally:
        server.close()


def test_min_workers_holds_a_round_back_until_enough_have_come():
    server = swarm(round_deadline_s=0.2, min_workers=2)
    try:
        for worker in "abc":
            up(server, worker)
        up(server, "a")
        while server.counts["deadline_waits"] < 2:   # the deadline passed twice with one upload
            time.sleep(0.02)
        assert server.version == 1
        up(server, "b")
        wait_for_version(server, 2)
        assert server.timeline[-1]["workers"] == ["a", "b"] and server.timeline[-1]["by"] == "deadline"
    finally:
        server.close()


def test_a_worker_whose_upload_was_lost_is_answered_at_once():
    running = RunningServer(ServerConfig(world_size=2, steps=100, long_poll_s=600))
    try:
        code, headers, _ = http_call(f"{running.url}/weights?after=0", headers={"X-Worker-Id": "w9"}, timeout_s=30)
        assert (code, headers["X-Model-Version"], headers["X-In-Round"]) == (200, "0", "0")
        assert "X-In-Round" not in http_call(f"{running.url}/weights")[1]   # no worker named: not said
    finally:
        running.close()


def test_status_shows_membership():
    running = RunningServer(ServerConfig(world_size=3, steps=100))
    try:
        for worker in "abc":
            up(running.swarm, worker)
        up(running.swarm, "a")
        import json
        report = json.loads(http_call(f"{running.url}/status")[2])["membership"]
        assert report["expected"] == ["a", "b", "c"] and report["in_round"] == ["a"]
        assert report["late"] == ["b", "c"] and report["last_rounds"][-1]["workers"] == ["a", "b", "c"]
    finally:
        running.close()


# --- table (3): the churn demo ------------------------------------------------------

from lecture09.swarm import swarm_membership as m   # noqa: E402


@pytest.mark.parametrize("steps, workers, plan", [
    (60, 4, (5, 10)), (6, 2, (1, 2)), (3, 2, (1, 2)), (600, 8, (50, 100)), (2, 4, None), (60, 1, None)])
def test_churn_plan(steps, workers, plan):
    got = m.churn_plan(steps, workers)
    assert (got and (got.kill_at, got.join_at)) == plan
    if got:
        assert 1 <= got.kill_at < got.join_at < steps


def test_timeline_rows_merge_identical_rounds_only():
    entry = lambda v, w, by="all", late=(), waited=0.0: {"version": v, "workers": list(w), "by": by,   # noqa: E731
                                                        "late": list(late), "waited_s": waited}
    rows = m.timeline_rows([entry(0, "ab"), entry(1, "ab"), entry(2, "a", "deadline", "b", 2.0),
                            entry(3, "a", "expected"), entry(4, "a", "expected", waited=0.25), entry(5, "ab")])
    assert rows == [["0-1", "a,b", "2", "到齐 all", "0.0", "-"], ["2", "a", "1", "截止 deadline", "2.0", "b"],
                    ["3-4", "a", "1", "预期的都到 expected", "0.2", "-"], ["5", "a,b", "2", "到齐 all", "0.0", "-"]]


def test_a_real_churn_run_kills_one_and_lets_one_join():
    from dataclasses import replace

    from lecture01.tiny_gpt import load_world_tokens
    from lecture09.swarm.swarm_protocol import WorkerConfig
    from lecture09.swarm.swarm_pool import start_worker_pool, stop_worker_pool, wait_until_ready

    pool = start_worker_pool(3)
    try:
        wait_until_ready(pool)
        plan = m.churn_plan(6, 2)
        result = m.run_churn(pool[:2], pool[2], ServerConfig(world_size=2, steps=6, token="t"),
                             replace(WorkerConfig(), token="t"), load_world_tokens()[1], plan)
    finally:
        stop_worker_pool(pool, at_once=True)
    timeline = result.timeline
    assert [r["version"] for r in timeline] == list(range(6))
    assert all("1" not in r["workers"] for r in timeline[plan.kill_at + 1:])   # the killed worker is gone
    assert "2" in timeline[-1]["workers"] and all("2" not in r["workers"] for r in timeline[:plan.join_at])
    assert sum(r["by"] == "deadline" for r in timeline) >= 1                  # the crash cost a deadline
    assert result.uploads_averaged == sum(len(r["workers"]) for r in timeline) < 12
    assert torch.isfinite(torch.tensor(result.val_bpc))


def test_table_3_fits_a_projector(capsys):
    from lecture01.console import display_width

    class Undisturbed:
        workers, steps, val_bpc, wall_s = 4, 60, 3.5, 6.0
    timeline = [{"version": v, "workers": ["0", "1", "2", "3"], "by": "all", "late": [], "waited_s": 0.1}
                for v in range(60)]
    m.print_churn(m.ChurnResult(m.ChurnPlan(5, 10), timeline, 3.4, 240, 4), Undisturbed(), "topk-int8")
    m.print_no_churn("--update async 没有轮次 no rounds")
    out = capsys.readouterr().out
    assert max(display_width(line) for line in out.splitlines()) <= 100
    assert "差 Δ -0.1000" in out and "0 轮等到了截止时间" in out
    flat = "".join(out.split())   # the wrapped lines joined, spaces left out
    assert "rounddeadline1.0s。服务器" in flat   # not the rule's 0.5 s: no rule is claimed
    m.print_churn(m.ChurnResult(m.ChurnPlan(5, 10), timeline, 3.4, 240, 4, 0.5), Undisturbed(), "topk")
    flat = "".join(capsys.readouterr().out.split())
    assert "".join(("round deadline 0.5 s：表 (1) 那次 topk 训练每步用时 0.100 s（计时表 Timing 的用时 / 步数）的 5 倍，"
                    "向上取到 0.1 s，至少 0.3 s。").split()) in flat


def test_a_pool_started_by_spawn_trains_too():
    """macOS and Windows start the pool's workers by spawn (fresh interpreters): the same
    job gives the same training as Linux's forked workers, bit for bit."""
    from dataclasses import replace

    from lecture01.tiny_gpt import load_world_tokens
    from lecture09.swarm.swarm_protocol import WorkerConfig
    from lecture09.swarm.swarm_report import run_swarm
    from lecture09.swarm.swarm_pool import pool_start_method, start_worker_pool, stop_worker_pool, wait_until_ready

    assert pool_start_method() in ("fork", "spawn")
    train, val = load_world_tokens()
    results = {}
    for method in ("spawn", "fork") if sys.platform.startswith("linux") else ("spawn",):
        pool = start_worker_pool(1, method=method, train_tokens=train)   # the data sent, or shared by fork
        try:
            wait_until_ready(pool)
            results[method] = run_swarm(pool, ServerConfig(world_size=1, steps=3, token="t"),
                                        replace(WorkerConfig(), token="t"), val)
        finally:
            stop_worker_pool(pool)
        assert all(worker.poll() == 0 for worker in pool)   # each exited by itself, cleanly
    assert results["spawn"].steps == 3 and torch.isfinite(torch.tensor(results["spawn"].val_bpc))
    if "fork" in results:
        assert results["fork"].val_bpc == results["spawn"].val_bpc


def test_a_process_with_other_threads_spawns_its_pool():
    """fork copies only the calling thread, and a lock another thread holds stays locked
    in the child for ever: with a second thread running, the pool spawns."""
    import threading

    from lecture09.swarm.swarm_pool import pool_start_method

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert pool_start_method() == "spawn"
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize("wall_s, steps, expected", [(6.0, 60, 0.5), (5.4, 60, 0.5), (5.41, 60, 0.5),
                                                     (6.06, 60, 0.6), (1.2, 60, 0.3), (60.0, 60, 5.0)])
def test_the_demo_deadline_is_five_measured_steps_rounded_up(wall_s, steps, expected):
    class Measured:
        pass
    Measured.wall_s, Measured.steps = wall_s, steps
    assert m.churn_deadline_s(Measured) == expected
