"""Progress inside training runs: how many steps each run has done, visible while it trains.

A run of 300 steps takes ~10 s and a run of 3,000 over a minute; without this the class
would see nothing until the run ends. Every training loop calls step_done(step) after each
step. The runs may train in other processes (a multiprocessing pool), so the counts live
in a shared array, one slot per run; the parent, while it waits for the next result,
shows them on one status line (lecture01.console.StatusLine: stderr, never between the
rows of a table). Only progress travels this way: results still come back through the
pool, and stdout is the same with or without it.
"""

import multiprocessing
import time

from lecture01.console import LINE_WIDTH, StatusLine, display_width

_steps_done = None     # shared array of ints, one slot per run, in every process that trains
_slot = None           # the slot of the run this process is training now
_refresh = None        # training in this very process: refresh the status line from the loop


def attach(steps_done):
    """Pool initializer: this process reports into `steps_done`."""
    global _steps_done
    _steps_done = steps_done


def start_run(slot):
    global _slot
    _slot = slot


def step_done(step):
    """Called by a training loop after step `step` (counting from 1)."""
    if _steps_done is not None and _slot is not None:
        _steps_done[_slot] = step
    if _refresh is not None:
        _refresh()


class ShownProgress:
    """An iterator over the results of n runs that shows their progress while it waits.

    results: an iterator of the runs' results in order; a multiprocessing IMapIterator
    (polled, so the line moves while the pool trains) or a plain iterator (training
    happens inside next(); the loop's own step_done calls refresh the line).
    """

    def __init__(self, results, steps_done, steps_per_run, polled, label="训练中 training", status=None):
        self.results, self.steps_done, self.polled = results, steps_done, polled
        self.steps_per_run, self.label = steps_per_run, label
        self.status = StatusLine() if status is None else status
        self.started = time.perf_counter()
        self.first_step_s = None        # when a step was first seen done: the pace is timed from there

    def text(self, now=None):
        """One status line within LINE_WIDTH columns: runs done, the runs training now, the
        seconds used and, once 2% of all steps are done, an estimate of the seconds left: the
        steps still to train at the pace since a step was first seen done (starting the
        processes and importing torch are not training, and would make it overshoot)."""
        now = time.perf_counter() if now is None else now
        counts = [min(s, self.steps_per_run) for s in self.steps_done]
        n, done, total = len(counts), sum(counts), len(counts) * self.steps_per_run
        if done and self.first_step_s is None:
            self.first_step_s = now
        finished = sum(1 for s in counts if s >= self.steps_per_run)
        timing = f"已用 {now - self.started:.0f} 秒"
        training_s = now - self.first_step_s if self.first_step_s is not None else 0.0
        if total and done >= 0.02 * total and done < total and training_s > 0:
            timing += f"，约还要 {training_s * (total - done) / done:.0f} 秒"
        running = [f"第 {i + 1} 个 {s}/{self.steps_per_run} 步" for i, s in enumerate(counts)
                   if 0 < s < self.steps_per_run][:3]
        while True:
            text = (f"  {self.label}：{finished}/{n} 个完成" + ("；" + "，".join(running) if running else "")
                    + f"（{timing}）")
            if not running or display_width(text) <= LINE_WIDTH:
                return text
            running.pop()

    def refresh(self):
        self.status.show(self.text())

    def __iter__(self):
        return self

    def __next__(self):
        global _steps_done, _refresh
        try:
            if self.polled:             # a pool trains: wait in short slices, moving the line
                while True:
                    try:
                        result = self.results.next(timeout=0.5)
                        break
                    except multiprocessing.TimeoutError:
                        self.refresh()
            else:                       # the run trains inside next(): its loop refreshes the line
                _steps_done, _refresh = self.steps_done, self.refresh
                try:
                    result = next(self.results)
                finally:
                    _steps_done, _refresh = None, None
        finally:
            self.status.clear()         # the caller prints a table row (or an error) next
        return result
