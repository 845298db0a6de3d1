"""The default run's pool of worker processes (lecture 9, code 6), kept across its
compression modes: each job is exactly `swarm_worker.Worker(...).run()`.

Introduced in lecture 9, §6.
"""

import signal
import subprocess
import sys

from lecture01.cli_args import sigint_ignored

def _pool_child(conn, train_tokens=None):
    """One worker process of the pool: one job (a dict) per message, one stats dict back.

    Ctrl-C is the parent's to answer (one line, then it stops the pool): a child would
    print a traceback, so it ignores SIGINT from its first line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch   # already imported in a forked child

    from lecture01.tiny_gpt import load_world_tokens
    from lecture09.swarm.swarm_protocol import WorkerConfig
    from lecture09.swarm.swarm_worker import Worker

    torch.set_num_threads(1)
    if train_tokens is None:   # given by the parent: a forked child shares its copy, no second encoding
        train_tokens, _ = load_world_tokens()
    conn.send({"ready": True})
    while True:
        try:
            job = conn.recv()
        except EOFError:   # the parent is gone
            return
        if job is None:    # the pool is stopping (forked siblings hold copies of our pipe's
            return         # other end, so its closing alone would not reach us)
        worker = Worker(job["url"], WorkerConfig(**job["config"]), train_tokens)
        try:
            stats = worker.run()
        except Exception as error:   # reported to the parent, which stops with this message
            stats = dict(worker.stats, error=f"{type(error).__name__}: {error}")
        conn.send(stats)


def pool_start_method():
    """How the pool's processes start. On Linux, when this process runs one thread, by
    fork: each worker is a copy of this process with torch already imported (importing
    it takes ~2 s of CPU per process, most of the default run's start-up). Elsewhere by
    spawn, a fresh Python per worker that imports what it needs: on macOS, where fork
    without exec is unsafe, on Windows, which has no fork, and in a process with other
    threads (a test's), where fork could copy a lock that another thread holds."""
    import threading
    return "fork" if sys.platform.startswith("linux") and threading.active_count() == 1 else "spawn"


class PoolWorker:
    """A worker process of the pool and our end of its pipe: send(job), result(), and
    kill / terminate / wait / poll like a subprocess.Popen."""

    def __init__(self, context, train_tokens=None):
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=_pool_child, args=(child_end, train_tokens), daemon=True)
        self.process.start()
        child_end.close()
        self.pid = self.process.pid

    def send(self, job):
        self.conn.send(job)

    def result(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            raise RuntimeError(f"worker process {self.pid} exited (status {self.process.exitcode}) "
                               "without a result") from None

    def poll(self):
        return self.process.exitcode

    def kill(self):
        self.process.kill()

    def terminate(self):
        self.process.terminate()

    def wait(self, timeout=None):
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(f"worker process {self.pid}", timeout)
        return self.process.exitcode

    def close(self):
        """Ask the process to exit, and close our end of its pipe."""
        if self.process.exitcode is None:
            try:
                self.conn.send(None)
            except OSError:   # it has just exited
                pass
        self.conn.close()


def start_worker_pool(n_workers, method=None, train_tokens=None):
    """Start n_workers worker processes, by `method` ("fork" or "spawn"; None:
    pool_start_method() chooses); train_tokens: the training data, if the caller has it
    (else each worker loads it)."""
    import multiprocessing

    sys.stdout.flush()   # a forked child would otherwise print our unflushed output again
    sys.stderr.flush()
    context = multiprocessing.get_context(method or pool_start_method())
    with sigint_ignored():   # only the parent answers Ctrl-C; each child also ignores it
        return [PoolWorker(context, train_tokens) for _ in range(n_workers)]


def wait_until_ready(pool):
    for worker in pool:
        if not worker.result().get("ready"):
            raise RuntimeError(f"worker process {worker.pid} failed to start")


def stop_worker_pool(pool, at_once=False):
    """End the worker processes: after a finished run, ask them to exit and let them;
    at_once (Ctrl-C or an error), terminate them. Only our own children, by handle."""
    for worker in pool:
        if at_once and worker.poll() is None:
            worker.terminate()
        worker.close()
    for worker in pool:
        try:
            worker.wait(timeout=5 if at_once else 30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
