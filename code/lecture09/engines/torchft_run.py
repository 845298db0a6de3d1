"""A torchft Lighthouse and n replica processes on 127.0.0.1; one replica killed and restarted.

Introduced in lecture 9, code 9 (09_torchft.py, notes §9). The parent process holds the
Lighthouse (torchft's Rust quorum server) and starts one process per replica group
(torchft_replica.run_replica). It reads their reports, kills a replica (SIGKILL: no
clean-up, like a machine that loses power) when it reports the stated step, and starts it
again, as a fresh process with no state, once the others reach the restart step. The
restarted replica heals: it downloads a healthy peer's state over HTTP and trains on.

    record = run(ReplicaSettings(mode="diloco"), Failure(replica=2, kill_at=4, restart_at=7))

Every wait is bounded: each collective, quorum and transfer by settings.timeout_s, the
Lighthouse's view of a dead replica by HEARTBEAT_TIMEOUT_MS, the whole run by run_timeout_s.
On any exit (success, a failed replica, the deadline, Ctrl-C) every child is stopped.
"""

import multiprocessing
import sys
import time
from multiprocessing.connection import wait
from dataclasses import dataclass, field

from lecture01.cli_args import sigint_ignored
from lecture09.engines.torchft_replica import ReplicaSettings, run_replica

MIN_REPLICAS = 2              # the Lighthouse forms a quorum of at least this many replica groups
JOIN_TIMEOUT_MS = 2000        # the Lighthouse waits this long for a heartbeating replica to join a quorum
HEARTBEAT_TIMEOUT_MS = 1500   # a replica silent this long is dead to the Lighthouse
QUORUM_TICK_MS = 50           # how often the Lighthouse re-checks whether a quorum can form
POLL_S = 0.05
EXIT_GRACE_S = 1.0            # after the last result, how long the children get to exit by themselves


class EngineFailed(RuntimeError):
    """A replica raised or died on its own, or the run ran out of time."""


@dataclass(frozen=True)
class Failure:
    replica: int = 2        # which replica is killed
    kill_at: int = 4        # killed when it reports this manager step
    restart_at: int = 7     # started again when a survivor reports this step; None = never
    lighthouse: bool = False   # stop the Lighthouse at kill_at instead (no replica is killed)


@dataclass
class Event:
    seconds: float          # since the replicas were released
    replica: int
    step: int               # the manager's step after this report (committed steps so far)
    members: tuple          # replica numbers in the quorum this step used
    committed: bool
    loss: float
    healed_bytes: int       # > 0: this step began by downloading a peer's state
    heal_s: float


@dataclass
class RunRecord:
    settings: ReplicaSettings
    failure: Failure = None
    events: list = field(default_factory=list)
    finals: dict = field(default_factory=dict)    # replica -> its θ_global state dict at the end
    killed_s: float = None                        # when the kill happened (since release)
    restarted_s: float = None
    errors: dict = field(default_factory=dict)    # replica -> (seconds, its one-line error): Lighthouse runs
    seconds: float = 0.0

    def of(self, replica):
        return [e for e in self.events if e.replica == replica]


class _Sender:
    """One child's end of its own pipe. Not a shared Queue: SIGKILL can land while a child
    holds a shared queue's write lock, and then every other child blocks on it forever."""

    def __init__(self, connection):
        self._connection = connection

    def put(self, message):
        self._connection.send(message)


def _child(replica, lighthouse_addr, settings, connection, go, standby):
    import os
    import signal
    import tempfile

    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the parent answers Ctrl-C and stops us
    # torchft, gloo and the checkpoint server write their own logs; keep them out of the
    # lecture's output, in a file the error message names
    log = os.path.join(tempfile.gettempdir(), f"torchft_replica{replica}_{os.getpid()}.log")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        messages = _Sender(connection)
        run_replica(replica, lighthouse_addr, settings, messages, go, standby=standby)
        os.unlink(log)
    except BaseException as error:      # one line to the parent; it decides what to print
        text = str(error).splitlines()[0] if str(error) else ""
        messages.put(("error", replica, f"{type(error).__name__}: {text[:200]} (log: {log})"))


def _lighthouse_child(connection, heartbeat_timeout_ms, join_timeout_ms):
    """The Lighthouse in a process of its own, as in production, so that it can be killed:
    LighthouseServer.shutdown() only stops it accepting connections (measured: a Manager
    already connected still got quorums afterwards)."""
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("RUST_LOG", "error")
    from torchft._torchft import LighthouseServer

    server = LighthouseServer(bind="127.0.0.1:0", min_replicas=MIN_REPLICAS, join_timeout_ms=join_timeout_ms,
                              heartbeat_timeout_ms=heartbeat_timeout_ms, quorum_tick_ms=QUORUM_TICK_MS)
    connection.send(int(server.address().rsplit(":", 1)[1]))
    try:
        connection.recv()          # "stop" from the parent
    except EOFError:               # or the parent is gone
        pass
    server.shutdown()


def run(settings, failure=None, run_timeout_s=120.0, on_event=None, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
        join_timeout_ms=JOIN_TIMEOUT_MS):
    """Train settings.n_replicas replicas under a Lighthouse; a RunRecord.

    With failure.lighthouse the Lighthouse is stopped instead: every replica's next quorum
    then fails after settings.timeout_s, and each error is recorded, not raised."""
    # fork (torchft runs on Linux only): the children inherit torch and torchft already
    # imported, ~3 CPU-seconds each otherwise (x 4 processes x 4 runs on 2 cores). Safe
    # here because each child runs torch on one thread (no inherited OpenMP pool is used)
    # and every server (Lighthouse, Manager, gloo) is created after the fork.
    import torchft.checkpointing.http_transport  # noqa: F401
    import torchft.local_sgd  # noqa: F401
    import torchft.manager  # noqa: F401
    import torchft.process_group  # noqa: F401
    from lecture09.engines.torchft_replica import prepare

    prepare(settings.world_seed)
    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    mine, theirs = ctx.Pipe()
    with sigint_ignored():
        lighthouse = ctx.Process(target=_lighthouse_child, args=(theirs, heartbeat_timeout_ms, join_timeout_ms),
                                     daemon=True)
        lighthouse.start()
    theirs.close()
    if not mine.poll(60):
        lighthouse.kill()
        raise EngineFailed("the Lighthouse did not start within 60 s")
    address = f"http://127.0.0.1:{mine.recv()}"
    record = RunRecord(settings=settings, failure=failure)
    processes, go, pipes = {}, {}, {}

    def start(key, replica):
        go[key] = ctx.Event()
        reader, writer = ctx.Pipe(duplex=False)
        with sigint_ignored():
            p = ctx.Process(target=_child, args=(replica, address, settings, writer, go[key], key == "standby"),
                            daemon=True)
            p.start()
        writer.close()
        processes[key], pipes[key] = p, reader

    def next_message():
        """A message from any child, or None after POLL_S; a child that died unasked raises."""
        for reader in wait(list(pipes.values()), timeout=POLL_S):
            key = next(k for k, r in pipes.items() if r is reader)
            try:
                return reader.recv()
            except EOFError:                 # its pipe closed: it exited
                del pipes[key]
                processes[key].join(5)
                if key not in done and not (killed and key == failure.replica and not failure.lighthouse):
                    raise EngineFailed(f"replica {key} exited with status {processes[key].exitcode}")
        return None

    try:
        for r in range(settings.n_replicas):
            start(r, r)
        if failure and failure.restart_at is not None and not failure.lighthouse:
            start("standby", failure.replica)   # the restarted replica: imports now, joins when told
        deadline = time.monotonic() + run_timeout_s
        n_ready, t0 = 0, None
        killed = restarted = False
        done, expected = set(), settings.n_replicas
        while len(done) < expected:
            if time.monotonic() > deadline:
                raise EngineFailed(f"超时 timeout: the run did not finish within {run_timeout_s:g} s")
            message = next_message()
            if message is None:
                continue
            kind, replica = message[0], message[1]
            if kind == "error" and killed and failure.lighthouse:
                record.errors[replica] = (time.perf_counter() - t0, message[2])
                done.add(replica)
                continue
            if kind == "error":
                raise EngineFailed(f"replica {replica}: {message[2]}")
            if kind == "ready":
                n_ready += 1
                if n_ready == len(processes):      # every process has imported: start the clock
                    t0 = time.perf_counter()
                    for key in range(settings.n_replicas):
                        go[key].set()
                continue
            now = time.perf_counter() - t0
            if kind == "done":
                import torch
                done.add("standby" if restarted and replica == failure.replica else replica)
                record.finals[replica] = {k: torch.from_numpy(v) for k, v in message[3].items()}
                survivors = [k for k in processes if k not in (failure and failure.replica, "standby")]
                if (restarted and "standby" not in done and all(k in done for k in survivors)
                        and not any(e.seconds >= record.restarted_s and e.replica == failure.replica
                                    for e in record.events)):
                    break      # the others finished before the restarted replica joined a quorum
                continue
            if killed and not restarted and replica == failure.replica:
                continue      # a report the killed process sent just before the kill landed
            event = Event(now, replica, *message[2:])
            record.events.append(event)
            if on_event:
                on_event(event)
            if failure and failure.lighthouse and not killed and event.step >= failure.kill_at:
                lighthouse.kill()          # SIGKILL, like the machine it runs on losing power
                killed, record.killed_s = True, time.perf_counter() - t0
            elif failure and not failure.lighthouse and not killed and replica == failure.replica \
                    and event.step >= failure.kill_at:
                processes[replica].kill()
                processes[replica].join(5)
                killed, record.killed_s = True, time.perf_counter() - t0
                if failure.restart_at is None:
                    expected -= 1
                else:
                    done.add(replica)            # the killed process: the standby replaces it
                    expected += 1
            elif (killed and not restarted and not failure.lighthouse and failure.restart_at is not None
                  and replica != failure.replica and event.step >= failure.restart_at):
                go["standby"].set()
                restarted, record.restarted_s = True, time.perf_counter() - t0
        record.seconds = time.perf_counter() - t0
        return record
    finally:
        # Every result is in (or the run failed): a child still exiting gets EXIT_GRACE_S in
        # all, then SIGKILL (torchft's and gloo's threads can take seconds to wind down).
        grace_end = time.monotonic() + EXIT_GRACE_S
        for p in processes.values():
            p.join(max(0.0, grace_end - time.monotonic()))
            if p.is_alive():
                p.kill()
        for p in processes.values():
            p.join(5)
        try:
            mine.send("stop")          # not just close(): forked children hold copies of this end
        except OSError:
            pass                       # it is dead already (killed by --kill-lighthouse)
        mine.close()
        lighthouse.join(5)
        if lighthouse.is_alive():
            lighthouse.kill()
            lighthouse.join(5)
