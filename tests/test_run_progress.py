"""Progress inside training runs (lecture09.compress.run_progress): the parent sees each run's steps
while it trains, in a pool or in this process, and stdout's results do not change."""

import io

import pytest

from lecture09.compress import compressed_dp as cdp
from lecture09.compress import run_progress
from lecture01.console import StatusLine


def jobs(steps):
    setup = cdp.TrainSetup()
    setup = cdp.replace(setup, recipe=cdp.replace(setup.recipe, steps=steps))
    return [(cdp.Run("不压缩", "adamw", "none"), cdp.Seeds(0, 1), setup),
            (cdp.Run("int8", "adamw", "int8"), cdp.Seeds(0, 1), setup)]


def test_step_done_fills_the_slot_of_the_run_in_this_process():
    counts = [0, 0, 0]
    run_progress.attach(counts)
    try:
        run_progress.start_run(1)
        run_progress.step_done(7)
    finally:
        run_progress.attach(None)
        run_progress.start_run(None)
    assert counts == [0, 7, 0]


@pytest.mark.slow
@pytest.mark.sweep                  # a pool against one process: a further case
def test_progress_shows_steps_in_a_pool_and_in_process_with_the_same_results():
    log = io.StringIO()
    results = {}
    for n_processes in (1, 2):
        pool, iterator = cdp.start_training(jobs(12), n_processes)
        iterator.status = StatusLine(log, log_interval_s=0)
        try:
            results[n_processes] = [r.bpc for r in iterator]
        finally:
            if pool is not None:
                pool.terminate()
        assert list(iterator.steps_done) == [12, 12]     # every run reported all its steps
    assert results[1] == results[2]
    lines = log.getvalue().splitlines()
    assert lines and all("个完成" in line for line in lines)
    assert any("/12 步" in line for line in lines)       # a run seen while it trained


def _own_niceness(_):
    import os
    return os.nice(0)


def test_pool_workers_train_at_the_parents_cpu_priority():
    """A lower priority lost a whole core to any program beside them (compressed_dp's note)."""
    import multiprocessing
    import os
    import pytest
    if not hasattr(os, "nice"):
        pytest.skip("no process niceness on this platform")
    context = multiprocessing.get_context("spawn")
    with context.Pool(1, initializer=cdp._start_worker, initargs=([0],)) as pool:
        worker = pool.map(_own_niceness, [None])[0]
    assert worker == os.nice(0)


def _shown(steps_done, steps_per_run, elapsed, label="训练中 training", first_step_at=0.0):
    """The line at `elapsed` s, a step having first been seen done at `first_step_at` s."""
    progress = run_progress.ShownProgress(iter(()), steps_done, steps_per_run, polled=True, label=label,
                                          status=StatusLine(io.StringIO()))
    progress.first_step_s = progress.started + first_step_at
    return progress.text(now=progress.started + elapsed)


def test_the_progress_line_estimates_the_seconds_left_from_the_pace_so_far():
    # 10 runs of 240 steps, 600 of 2,400 done 15 s after the first step: 1,800 more at 40 a second = 45 s
    line = _shown([240, 240, 60, 60] + [0] * 6, 240, 15.0)
    assert line == "  训练中 training：2/10 个完成；第 3 个 60/240 步，第 4 个 60/240 步（已用 15 秒，约还要 45 秒）"
    # the same steps, the first seen 3 s in (processes starting, torch importing): 12 s of training
    assert _shown([240, 240, 60, 60] + [0] * 6, 240, 15.0, first_step_at=3.0).endswith("（已用 15 秒，约还要 36 秒）")


def test_the_pace_is_timed_from_the_first_step_seen():
    progress = run_progress.ShownProgress(iter(()), [0, 0], 100, polled=True, status=StatusLine(io.StringIO()))
    t0 = progress.started
    assert "约还要" not in progress.text(now=t0 + 2.0)          # nothing trained yet
    progress.steps_done[:] = [10, 10]
    assert "约还要" not in progress.text(now=t0 + 3.0)          # first seen now: no pace yet
    progress.steps_done[:] = [50, 50]                          # 100 done, 2 s since: 100 left, 2 s
    assert progress.text(now=t0 + 5.0).endswith("（已用 5 秒，约还要 2 秒）")
    assert "约还要" not in _shown([4] + [0] * 9, 240, 1.0)          # under 2% done: no guess yet
    # the class run's first line: both runs training stay on it (102 columns before "个完成")
    assert "第 2 个 190/240 步" in _shown([178, 190] + [0] * 8, 240, 10.0)
    assert _shown([240] * 10, 240, 30.0).endswith("10/10 个完成（已用 30 秒）")


def test_the_progress_line_fits_the_projector_with_many_runs_at_once():
    from lecture01.console import LINE_WIDTH, display_width
    line = _shown([1000] * 90 + [100] * 8 + [0] * 2, 1000, 3600.0)     # --seeds 10 --steps 1000 --jobs 8
    assert display_width(line) <= LINE_WIDTH and "约还要" in line and "第 91 个" in line
    assert "第 93 个" not in line                  # the third run training was dropped to fit
