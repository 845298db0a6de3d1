"""Run a function on real torch.distributed ranks, gloo on CPU, launched one of two ways.

Introduced in lecture 9, code 1 (01_collectives.py, notes §1); every lecture-9 script and
test that needs real ranks imports it, so all of them start, time out and clean up the
same way.

    results = run_ranks(worker, world_size=3, args=(n_elements,))

- Self-spawned (the default): one child process per rank on this machine, gloo over
  127.0.0.1, the port picked free in the parent (the pattern of Stanford CS336's systems
  assignment).
- Under torchrun (`torchrun --nproc-per-node N script.py ...`, also over several machines:
  `--nnodes 2 --node-rank k --rdzv-endpoint HOST:PORT`): torchrun has started one copy of
  the script per rank and set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; run_ranks then
  joins them with env:// (once per process), runs the worker in this process and gathers
  every rank's result, so each copy returns the same list. Only rank 0 prints (run_main).
  Every demo checks itself against a single CPU process, so the ranks stay on gloo and
  CPU on a GPU machine as well; NCCL is not used (and could not be tested here).

`worker(rank, world_size, *args)` runs in each child after init_process_group("gloo");
its return value (anything picklable: CPU tensors, floats) comes back in rank order.
`worker` must be a module-level function of an importable module: the "spawn" start
method pickles it by name, and a script named 01_collectives.py cannot be imported, so
workers live in small modules beside the scripts (collectives.py, data_parallel.py).
Children find them because multiprocessing hands the parent's sys.path to its children.
"""

import atexit
import multiprocessing
import os
import pickle
import queue as queue_module
import socket
import time
import traceback
from datetime import timedelta

from lecture01.cli_args import sigint_ignored

HOST = "127.0.0.1"
POLL_S = 0.05          # how often the parent looks at its children while it waits
TERMINATE_GRACE_S = 2.0   # after SIGTERM, how long a child gets before SIGKILL
FAILURE_WINDOW_S = 0.5    # after a first failure, how long to listen for an earlier one


class RankFailed(RuntimeError):
    """A rank raised, died, or the ranks ran out of time. `rank` is None on a timeout;
    `details` holds the child's traceback when there is one."""

    def __init__(self, rank, reason, details=""):
        where = "超时 timeout" if rank is None else f"rank {rank}"
        super().__init__(f"{where}: {reason}")
        self.rank = rank
        self.reason = reason
        self.details = details


def free_port():
    """A TCP port on 127.0.0.1 that is free right now (bind to port 0, read it, close).

    Picked in the parent, so two runs at once never collide on a fixed port; another
    program could still take it in the moment before rank 0 binds it (rare on loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def port_is_free(port):
    """True if nothing listens on 127.0.0.1:port right now (a script's --port check)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _one_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _child(worker, rank, world_size, port, args, timeout_s, results):
    """Body of one rank's process: init gloo, run worker, send (rank, ok, payload, when) back."""
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)           # ranks share the cores: one thread each
        dist.init_process_group("gloo", init_method=f"tcp://{HOST}:{port}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=timeout_s))
        try:
            value = worker(rank, world_size, *args)
        except BaseException as error:     # noqa: BLE001 - everything goes back to the parent
            # Reported before the group is destroyed: destroying it breaks the other ranks'
            # connections, and their follow-on errors must carry later timestamps.
            results.put((rank, False, (_one_line(error), traceback.format_exc()), time.time()))
            dist.destroy_process_group()
            return
        dist.destroy_process_group()
        # Pickled here with plain pickle: tensors travel as bytes, not as shared-memory
        # handles that would die with this process.
        results.put((rank, True, pickle.dumps(value), time.time()))
    except BaseException as error:         # noqa: BLE001 - e.g. init_process_group failed
        results.put((rank, False, (_one_line(error), traceback.format_exc()), time.time()))


def _stop(processes):
    """Terminate every child still running, then reap them all (SIGKILL the stubborn)."""
    processes = [proc for proc in processes if proc.pid is not None]   # only those started
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + TERMINATE_GRACE_S
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()


def _next_message(results, processes, values, deadline, timeout_s):
    """The next (rank, ok, payload, when) from the children; RankFailed if one died silently
    (a crash, os._exit, the OOM killer) or the deadline passed."""
    while True:
        try:
            return results.get(timeout=POLL_S)
        except queue_module.Empty:
            pass
        for rank, proc in enumerate(processes):
            if rank not in values and proc.exitcode is not None:
                try:                       # its last message may still be in the pipe
                    return results.get(timeout=0.5)
                except queue_module.Empty:
                    raise RankFailed(rank, f"进程退出 process exited with code {proc.exitcode}") from None
        if time.monotonic() > deadline:
            raise RankFailed(None, f"{len(processes)} 个 rank 在 {timeout_s:g} 秒内没有完成 "
                                   f"(did not finish within {timeout_s:g} s)")


def _first_failure(results, first):
    """RankFailed for the rank that failed first. One rank's error breaks the others'
    connections, and their follow-on errors can overtake it in the queue, so failures
    arriving within FAILURE_WINDOW_S are compared by the time each rank caught its own."""
    failures = [first]
    end = time.monotonic() + FAILURE_WINDOW_S
    while time.monotonic() < end:
        try:
            rank, ok, payload, when = results.get(timeout=max(0.0, end - time.monotonic()))
        except queue_module.Empty:
            break
        if not ok:
            failures.append((when, rank, payload))
    when, rank, (reason, details) = min(failures, key=lambda f: f[0])
    return RankFailed(rank, reason, details)


TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def launched_by_torchrun(environ=None):
    """True when torchrun (or another launcher of its kind) started this process as one rank."""
    environ = os.environ if environ is None else environ
    return all(name in environ for name in TORCHRUN_VARIABLES)


class WrongWorldSize(ValueError):
    """Under torchrun, a demo needs a number of ranks the launcher did not start: a usage
    error (run_main: one line, status 2)."""
    exit_status = 2


# What a script with real ranks hands to run_main: failures that get one line, no traceback.
LAUNCH_FAILURES = (RankFailed, WrongWorldSize)


_TORCHRUN = {"timeout_s": None}      # the process group torchrun's ranks joined, once per process


def _leave_torchrun_group():
    """At exit: destroy the process group (and every new_group) while the interpreter is
    still whole. Left to the interpreter's own shutdown, gloo's threads can still hold work
    with tensors in it as Python goes away, and the rank can die of SIGABRT after it printed
    everything (PyTorch's own diagnosis, pytorch/pytorch#179291; our likely cause of the
    exitcode -6 torchrun once reported in CI for rank 1, not reproduced here). No barrier: a
    rank that stops with an error must not wait for the others at its exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except (RuntimeError, ValueError):    # a peer already gone: nothing left to tidy
            pass


def _torchrun_ranks(worker, world_size, args, timeout_s):
    """run_ranks under torchrun: this process is one rank; every rank gets every result."""
    import torch
    import torch.distributed as dist

    started = int(os.environ["WORLD_SIZE"])
    if started != world_size:
        raise WrongWorldSize(f"这一步要 {world_size} 个 rank，torchrun 启动了 {started} 个 "
                             f"(needs {world_size} ranks; torchrun started {started}: "
                             f"--nnodes x --nproc-per-node must be {world_size})")
    if not dist.is_initialized():
        torch.set_num_threads(1)
        # gloo's timeout bounds each collective; the first demo's timeout_s (never the 1800 s default)
        dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=timeout_s))
        _TORCHRUN["timeout_s"] = timeout_s
        atexit.register(_leave_torchrun_group)   # after run_main's handlers: runs before them
    rank = dist.get_rank()
    dist.barrier()                       # every rank arrives at the same demo
    value = worker(rank, world_size, *args)
    values = [None] * world_size
    dist.all_gather_object(values, pickle.dumps(value))
    return [pickle.loads(v) for v in values]


def run_ranks(worker, world_size, args=(), timeout_s=60, port=None):
    """Run worker(rank, world_size, *args) on world_size gloo ranks; their results in rank order.

    port: where rank 0 listens for the others (default: free_port()). Under torchrun the
    launcher's MASTER_ADDR and MASTER_PORT are used instead, and a world size other than
    torchrun's raises WrongWorldSize.

    Raises RankFailed (a RuntimeError) naming the rank and a one-line reason as soon as
    one rank raises or dies, and after timeout_s seconds of wall time (spawning included).
    Every child is stopped before this returns or raises, also on Ctrl-C in the parent.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if launched_by_torchrun():
        return _torchrun_ranks(worker, world_size, args, timeout_s)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port() if port is None else port
    processes = [ctx.Process(target=_child, args=(worker, rank, world_size, port, tuple(args), timeout_s, results),
                             name=f"gloo-rank-{rank}", daemon=True)
                 for rank in range(world_size)]
    deadline = time.monotonic() + timeout_s
    values = {}
    try:
        with sigint_ignored():   # a Ctrl-C reaches only the parent, which stops the children
            for proc in processes:
                proc.start()
        while len(values) < world_size:
            rank, ok, payload, when = _next_message(results, processes, values, deadline, timeout_s)
            if not ok:
                raise _first_failure(results, (when, rank, payload))
            values[rank] = pickle.loads(payload)
    finally:
        _stop(processes)
        results.close()
        results.join_thread()
    return [values[rank] for rank in range(world_size)]
