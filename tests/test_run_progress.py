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
    assert lines and all("个运行完成" in line for line in lines)
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
