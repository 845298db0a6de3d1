"""A bootstrap DHT node and n hivemind peers on 127.0.0.1; peers that join late and leave.

Introduced in lecture 9, code 10 (10_hivemind.py, notes §10). The parent starts the
bootstrap node (the address every peer is given first) and one process per peer
(hivemind_peer.run_peer), reads their reports on one pipe each, and plays the churn: it
lets a late peer start when the first report of the round before arrives, SIGKILLs a
leaving peer (no goodbye, like a volunteer's laptop closing) when that peer reports the
round before it leaves, and kills the bootstrap node itself at a stated round.

    record = run(PeerSettings(), Churn(join=(3, 4), leave=(1, 8), bootstrap_dies=6))

Each peer, and the bootstrap node, is its own process group: its DHT process, averager
process and libp2p daemon (p2pd) are killed with it. Every wait is bounded (the settings'
timeouts, the whole run by run_timeout_s); on any exit every child is stopped.
"""

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait

from lecture09.engines.hivemind_peer import PeerSettings, run_peer
from lecture09.engines.torchft_run import EngineFailed

POLL_S = 0.05
EXIT_GRACE_S = 5.0        # after its result, how long a peer gets to shut its DHT and averager down
START_LIMIT_S = 60.0      # every peer's DHT node must be up within this


@dataclass(frozen=True)
class Churn:
    join: tuple = None          # (peer, round): the peer starts when round − 1 is first reported
    leave: tuple = None         # (peer, round): SIGKILLed once it has reported round − 1
    bootstrap_dies: int = None  # the bootstrap node is SIGKILLed when this round − 1 is first reported


@dataclass
class RoundReport:
    seconds: float              # since the peers were released
    peer: int
    round: int
    members: tuple              # who averaged together (a group of one: nobody was found)
    sent: int                   # tensor bytes this peer's averaging sent and received (counted
    received: int               # until its next round begins: a reducer sends after it returns)
    wait_s: float               # the averaging step: matchmaking + all-reduce
    loss: float                 # of its last inner step
    complete: bool = True       # the average passed the checksum (else: the outer step was skipped)
    weight: float = 1.0         # 0: it had just downloaded the state and brought no pseudo-gradient


@dataclass
class Download:
    seconds: float
    peer: int
    round: int                  # the round the downloaded state starts
    bytes: int
    download_s: float
    missed: int = None          # None: joining; else the round it found no group for


@dataclass
class RunRecord:
    settings: PeerSettings
    churn: Churn = None
    rounds: list = field(default_factory=list)
    downloads: list = field(default_factory=list)
    finals: dict = field(default_factory=dict)    # peer -> θ_global at the end
    events: dict = field(default_factory=dict)    # "join"/"leave"/"bootstrap" -> (seconds, after round)
    seconds: float = 0.0

    def of_round(self, r):
        return [e for e in self.rounds if e.round == r]


def log_path(target, pid):
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"hivemind{target.__name__}_{pid}.log")


def peer_start_method():
    """How the peers' processes start. fork on Linux: a peer is a copy of the parent with
    torch, hivemind and the toy world already loaded (about a second less per peer). spawn
    everywhere else: macOS makes spawn Python's default (3.8+) because fork without exec is
    unsafe there once a process has loaded system frameworks and threads, as torch's import
    does; hivemind has no Windows wheels. A spawned peer imports what it needs and loads the
    world itself (run_peer calls prepare). tests/test_code10.py runs the spawn path here on
    Linux too: hivemind's average of spawned peers equals the mean."""
    import sys

    return "fork" if sys.platform.startswith("linux") else "spawn"


SOCKETS_ENV = "LECTURE09_P2P_SOCKET_PREFIX"      # run()'s socket folder, for a spawned peer's p2pd


def own_mpfuture_lock():
    """Fresh locks for hivemind's futures in this child. hivemind makes them at import time
    (utils/mpfuture.py: MPFuture's update and initialization locks, SharedBytes' lock, all
    multiprocessing Locks), so every process forked from the parent shares them; a peer
    SIGKILLed while it held one left every other peer blocked for ever on its next future
    (measured, quick churn runs: 3 of 11 hung in set_group_bits or step; 0 of 20 with
    this). hivemind's own
    MPFuture.reset_backend() makes new ones; a peer's DHT and averager processes, forked
    after this, share the peer's, and are killed with it."""
    import multiprocessing

    from hivemind.utils import asyncio as hivemind_asyncio
    from hivemind.utils.mpfuture import MPFuture

    MPFuture.reset_backend()
    hivemind_asyncio._AsyncContextWrapper.EXECUTOR_LOCK = multiprocessing.get_context(peer_start_method()).Lock()


def _group_child(target, connection, *args):
    """A child in a process group of its own (its DHT, averager and p2pd with it), with its
    logs in a file the error names, one error line to the parent."""
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent answers Ctrl-C and stops us
    if os.environ.get(SOCKETS_ENV):                # spawned: the parent's class attribute is not inherited
        from hivemind.p2p.p2p_daemon import P2P
        P2P._UNIX_SOCKET_PREFIX = os.environ[SOCKETS_ENV]
    # hivemind starts its DHT and averager as multiprocessing.Process subclasses that cannot be
    # pickled, so spawn cannot start them (checked here: "cannot pickle 'weakref.ReferenceType'");
    # a spawned peer inherits spawn as its default, and hivemind itself needs fork inside it
    multiprocessing.set_start_method("fork", force=True)
    own_mpfuture_lock()
    log = log_path(target, os.getpid())
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        target(*args, connection)
        os.unlink(log)
    except BaseException as error:
        text = str(error).splitlines()[0] if str(error) else ""
        try:
            connection.send(("error", f"{type(error).__name__}: {text[:200]} (log: {log})"))
        except OSError:
            pass


def _bootstrap(connection):
    """The first DHT node: it only answers lookups; every peer is given its address."""
    os.environ.setdefault("HIVEMIND_LOGLEVEL", "ERROR")
    import hivemind

    dht = hivemind.DHT(host_maddrs=["/ip4/127.0.0.1/tcp/0"], start=True)
    connection.send(("address", [str(a) for a in dht.get_visible_maddrs()]))
    try:
        connection.recv()          # "stop" from the parent
    except EOFError:
        pass
    dht.shutdown()


def _peer(peer, initial_peers, settings, start_round, connection):
    run_peer(peer, initial_peers, settings, connection, start_round=start_round)


def _average_peer(i, tensor, initial_peers, n, part_bytes, connection):
    """One peer of average_once: average `tensor` once in a group of n; send the result."""
    os.environ.setdefault("HIVEMIND_LOGLEVEL", "ERROR")
    import hivemind
    from hivemind.averaging import DecentralizedAverager

    from lecture09.engines.hivemind_peer import is_complete

    dht = hivemind.DHT(initial_peers=initial_peers, host_maddrs=["/ip4/127.0.0.1/tcp/0"], start=True)
    averager = DecentralizedAverager([tensor.clone()], dht, start=True, prefix="check", target_group_size=n,
                                     min_group_size=n, min_matchmaking_time=START_LIMIT_S / 4,
                                     request_timeout=5.0, part_size_bytes=part_bytes)
    try:
        group = averager.step(gather=(i, float(tensor.double().sum())), timeout=START_LIMIT_S)
        complete = is_complete(averager, [g[1] for g in group.values()])
        with averager.get_tensors() as tensors:
            connection.send(("averaged", i, sorted(g[0] for g in group.values()), tensors[0].numpy().copy(), complete))
    finally:
        averager.shutdown()
        dht.shutdown()


def average_once(tensors, part_bytes=2 ** 14, run_timeout_s=120.0, method=None):
    """Each tensor in a peer process of its own; one hivemind averaging round in a fixed
    group of all of them (min_group_size = target); for each peer, in order, (the group it
    saw, its result, whether the checksum passed). For the check that hivemind's average is
    the mean. method: "fork" or "spawn" (None: peer_start_method())."""
    import hivemind.averaging  # noqa: F401

    ctx = multiprocessing.get_context(method or peer_start_method())
    processes, pipes, results = [], [], {}
    try:
        mine, theirs = ctx.Pipe()
        processes.append(ctx.Process(target=_group_child, args=(_bootstrap, theirs)))
        processes[0].start()
        pipes.append(mine)
        if not mine.poll(START_LIMIT_S):
            raise EngineFailed(f"the bootstrap DHT node did not start within {START_LIMIT_S:g} s")
        address = mine.recv()[1]
        for i, tensor in enumerate(tensors):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_group_child, args=(_average_peer, theirs, i, tensor, address, len(tensors),
                                                       part_bytes))
            p.start()
            processes.append(p)
            pipes.append(mine)
        deadline = time.monotonic() + run_timeout_s
        while len(results) < len(tensors):
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineFailed(f"超时 timeout: no average within {run_timeout_s:g} s")
            for reader in wait(pipes[1:], timeout=min(left, 1.0)):
                message = reader.recv()
                if message[0] == "error":
                    raise EngineFailed(message[1])
                results[message[1]] = message[2:]
        return [results[i] for i in range(len(tensors))]
    finally:
        for p in processes:
            _kill_group(p)
        if len(results) == len(tensors):         # the bootstrap node was killed, not failed
            try:
                os.unlink(log_path(_bootstrap, processes[0].pid))
            except FileNotFoundError:
                pass


def _kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.join(5)


def run(settings, churn=None, run_timeout_s=None, on_round=None, method=None):
    """Train settings.n_peers peers with DiLoCo over hivemind; a RunRecord."""
    import hivemind.averaging  # noqa: F401  imported once here; the forked children inherit it
    from lecture09.engines.torchft_replica import prepare

    import shutil
    import tempfile

    from hivemind.p2p.p2p_daemon import P2P

    prepare(settings.world_seed)
    # libp2p's daemons talk to their clients over unix sockets named under /tmp; a killed
    # daemon leaves its socket behind. Name them in a directory of this run instead, removed
    # at the end (short, under /tmp: a socket's path must stay within 104 bytes on macOS).
    sockets = tempfile.mkdtemp(prefix="hm", dir="/tmp")
    default_prefix, P2P._UNIX_SOCKET_PREFIX = P2P._UNIX_SOCKET_PREFIX, f"/unix{sockets}/hivemind-"
    os.environ[SOCKETS_ENV] = P2P._UNIX_SOCKET_PREFIX   # what a spawned peer reads (_group_child)
    churn = churn or Churn()
    limit = run_timeout_s or START_LIMIT_S + settings.rounds * (2 * settings.round_s + 5)
    ctx = multiprocessing.get_context(method or peer_start_method())
    processes, pipes = {}, {}

    def start(key, *args):
        mine, theirs = ctx.Pipe()
        target = _bootstrap if key == "bootstrap" else _peer
        p = ctx.Process(target=_group_child, args=(target, theirs, *args))
        p.start()
        theirs.close()
        processes[key], pipes[key] = p, mine

    record = RunRecord(settings=settings, churn=churn)
    succeeded = False
    try:
        start("bootstrap")
        if not pipes["bootstrap"].poll(START_LIMIT_S):
            raise EngineFailed(f"the bootstrap DHT node did not start within {START_LIMIT_S:g} s")
        kind, address = pipes["bootstrap"].recv()
        if kind != "address":
            raise EngineFailed(f"bootstrap: {address}")
        for peer in range(settings.n_peers):
            late = churn.join is not None and churn.join[0] == peer
            start(peer, peer, address, settings, churn.join[1] if late else 0)
        deadline = time.monotonic() + limit
        ready, done, gone, t0 = set(), set(), set(), time.perf_counter()
        addresses = {}              # peer -> its DHT node's addresses (a late peer is given them all)
        released = False

        def note(what, after_round):
            record.events[what] = (time.perf_counter() - t0, after_round)

        while len(done | gone) < settings.n_peers:
            if time.monotonic() > deadline:
                last = {x.peer: x.round for x in record.rounds}
                waiting = [p for p in range(settings.n_peers) if p not in done | gone]
                raise EngineFailed(f"超时 timeout: the run did not finish within {limit:g} s (last round reported "
                                   f"by each peer: {last}; not finished: {waiting})")
            for reader in wait([c for k, c in pipes.items() if k not in gone | done or k == "bootstrap"],
                               timeout=POLL_S):
                key = next(k for k, c in pipes.items() if c is reader)
                try:
                    message = reader.recv()
                except EOFError:
                    if key == "bootstrap" and "bootstrap" in record.events:
                        continue
                    if key in done or key in gone:
                        continue
                    raise EngineFailed(f"{key} exited with status {processes[key].join(5) or processes[key].exitcode}")
                if message[0] == "error":
                    raise EngineFailed(f"peer {key}: {message[1]}")
                if message[0] == "ready":
                    ready.add(key)
                    addresses[key] = message[2]
                    if len(ready) == settings.n_peers and not released:
                        released, t0 = True, time.perf_counter()
                        for peer in range(settings.n_peers):
                            if not (churn.join and churn.join[0] == peer):
                                pipes[peer].send(("go", None))
                    continue
                now = time.perf_counter() - t0
                if message[0] == "done":
                    done.add(key)
                    import torch
                    record.finals[key] = {k: torch.from_numpy(v) for k, v in message[2].items()}
                elif message[0] == "bytes":        # a reducer's last sends finish after its step returns
                    for i, x in enumerate(record.rounds):
                        if x.peer == message[1] and x.round == message[2]:
                            record.rounds[i] = replace(x, sent=message[3], received=message[4])
                elif message[0] == "joined":
                    record.downloads.append(Download(now, *message[1:]))
                elif message[0] == "round":
                    report = RoundReport(now, *message[1:])
                    record.rounds.append(report)
                    if on_round:
                        on_round(report)
                    r = report.round + 1             # the round that starts now
                    if churn.join and r == churn.join[1] and "join" not in record.events:
                        known = address + [a for k, found in addresses.items() if k not in gone for a in found]
                        pipes[churn.join[0]].send(("go", known))
                        note("join", report.round)
                    if churn.leave and report.peer == churn.leave[0] and r == churn.leave[1]:
                        _kill_group(processes[report.peer])
                        gone.add(report.peer)
                        note("leave", report.round)
                    if churn.bootstrap_dies is not None and r == churn.bootstrap_dies \
                            and "bootstrap" not in record.events:
                        _kill_group(processes["bootstrap"])
                        note("bootstrap", report.round)
        record.seconds = time.perf_counter() - t0
        succeeded = True
        return record
    finally:
        grace_end = time.monotonic() + EXIT_GRACE_S
        for key, p in processes.items():
            if key == "bootstrap" and p.is_alive():
                try:
                    pipes[key].send("stop")
                except OSError:
                    pass
            p.join(max(0.0, grace_end - time.monotonic()))
        for p in processes.values():
            _kill_group(p)          # the whole group: a peer's DHT, averager and p2pd too
        for c in pipes.values():
            c.close()
        P2P._UNIX_SOCKET_PREFIX = default_prefix
        os.environ.pop(SOCKETS_ENV, None)
        shutil.rmtree(sockets, ignore_errors=True)
        if succeeded:       # the logs of children that were killed: nothing went wrong in them
            for key, p in processes.items():
                target = _bootstrap if key == "bootstrap" else _peer
                try:
                    os.unlink(log_path(target, p.pid))
                except FileNotFoundError:
                    pass
