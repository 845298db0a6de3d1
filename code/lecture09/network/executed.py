"""Demo 1's layouts executed, not only priced (lecture 9, §5.12; code 05 --demo executed).

One iteration of the 4-stage x 8-replica job runs as real messages between 32 emulated
devices (one thread each, in one process; emulator.LinkEmulator on demo 1's network at a
TimeScale). Communication only, as Yuan et al.'s Eq. 1-4: no compute is charged, so the
cost model's seconds and the measured seconds count the same thing.

The message pattern of one iteration (Pattern's switches change one assumption each):
- GPipe across the cuts: every replica's batch crosses each cut as M micro-batch messages
  forward (activations) and M backward (their gradients); a stage forwards micro-batch m
  as soon as it has arrived (overlap=True) or only after all M arrived (overlap=False).
- each stage's data-parallel exchange when that device's backward is done (or, with
  dp_after_pipeline, after every device's backward: Eq. 1 adds DP and PP), either as Eq. 2
  describes it (sharded: scatter-reduce to each shard's owner, then all-gather from it,
  c_DP / D_DP bytes per message) or as a ring (2 (D_DP - 1) steps to the next replica).
- stop_and_wait: every message waits to arrive before its sender sends the next (Eq. 2 and
  Eq. 3-4 charge a latency per message, as if so).
- lockstep: every assumption of Eq. 1-4 at once: cut after cut, each cut's slowest replica
  waited for (sum over cuts of the max over replicas), stop-and-wait messages, the DP
  exchange after the pipeline, each device's 2 (D_DP - 1) DP messages one after another.
  Measured against the model, this row is the emulator's own error on the whole pattern.
"""

import threading
from dataclasses import dataclass, replace

import numpy as np

from lecture09.network.emulator import LinkEmulator, TimeScale, run_devices


@dataclass(frozen=True)
class Pattern:
    """How one iteration's messages are sent (the default: what GPipe + Eq. 2 really do)."""
    shared_uplink: bool = True
    overlap: bool = True
    exchange: str = "sharded"      # "sharded" (Eq. 2) or "ring"
    stop_and_wait: bool = False
    dp_after_pipeline: bool = False
    lockstep: bool = False

    def __post_init__(self):
        if self.exchange not in ("sharded", "ring"):
            raise ValueError(f"exchange must be 'sharded' or 'ring', got {self.exchange!r}")


EXECUTED = Pattern()
LOCKSTEP = Pattern(lockstep=True)
# The controls: each changes one switch of EXECUTED (name -> pattern), in table order.
CONTROLS = {
    "uplink_off": replace(EXECUTED, shared_uplink=False),
    "no_overlap": replace(EXECUTED, overlap=False),
    "stop_and_wait": replace(EXECUTED, stop_and_wait=True),
    "dp_after_pipeline": replace(EXECUTED, dp_after_pipeline=True),
    "ring": replace(EXECUTED, exchange="ring"),
}


@dataclass(frozen=True)
class Job:
    """The sizes one iteration sends (job bytes, before the TimeScale)."""
    n_stages: int
    n_replicas: int
    n_micro_batches: int
    stage_param_bytes: float     # c_DP: one stage's gradient
    act_bytes: float             # c_PP: one replica's activations across one cut

    @classmethod
    def of(cls, setup):
        return cls(setup.n_stages, setup.n_replicas, setup.n_micro_batches, setup.stage_param_bytes,
                   setup.act_bytes)


@dataclass(frozen=True)
class Execution:
    seconds: float             # job seconds (measured real seconds / scale.time)
    stamped_seconds: float     # job seconds of the senders' clocks: the pattern without wake-up lateness
    bytes_sent: float          # job bytes (measured real bytes / scale.bytes)
    messages: int
    real_seconds: float


def _buffer(n):
    return np.zeros(n, dtype=np.uint8)


def execute(layout, net, job, pattern=EXECUTED, scale=TimeScale(), timeout_s=120.0, stamped=True):
    """Run one iteration of `job` laid out as `layout` ((stage, replica) -> device) on `net`
    under `pattern`; return the Execution (seconds scaled back to the job's)."""
    emu = LinkEmulator.from_network(net, scale, shared_uplink=pattern.shared_uplink, stamped=stamped)
    P, R, M = job.n_stages, job.n_replicas, job.n_micro_batches
    micro = scale.real_bytes(job.act_bytes / M)
    shard = scale.real_bytes(job.stage_param_bytes / R)
    everyone = threading.Barrier(P * R, action=emu.align) if (pattern.lockstep or pattern.dp_after_pipeline) else None
    send = emu.send_and_wait if (pattern.stop_and_wait or pattern.lockstep) else emu.send

    def lockstep_pipeline(s, r, d):
        prev = layout[(s - 1, r)] if s > 0 else None
        nxt = layout[(s + 1, r)] if s < P - 1 else None
        for direction, cuts in (("f", range(P - 1)), ("b", range(P - 2, -1, -1))):
            for cut in cuts:
                sender, receiver = (cut, cut + 1) if direction == "f" else (cut + 1, cut)
                if s == sender:
                    peer = nxt if direction == "f" else prev
                    for _ in range(M):
                        emu.send_and_wait(d, peer, _buffer(micro))
                elif s == receiver:
                    peer = prev if direction == "f" else nxt
                    for _ in range(M):
                        emu.recv(d, peer, timeout_s)
                everyone.wait(timeout_s)

    def gpipe(s, r, d):
        prev = layout[(s - 1, r)] if s > 0 else None
        nxt = layout[(s + 1, r)] if s < P - 1 else None
        for src, dst in ((prev, nxt), (nxt, prev)):   # forward, then backward
            if pattern.overlap:
                for _ in range(M):
                    x = emu.recv(d, src, timeout_s) if src is not None else _buffer(micro)
                    if dst is not None:
                        send(d, dst, x)
            else:
                xs = [emu.recv(d, src, timeout_s) if src is not None else _buffer(micro) for _ in range(M)]
                if dst is not None:
                    for x in xs:
                        send(d, dst, x)

    def sharded(s, r, d):
        group = [layout[(s, q)] for q in range(R)]
        peers = [group[(r + k) % R] for k in range(1, R)]
        for peer in peers:                                # scatter-reduce: my part of each owner's shard
            send(d, peer, _buffer(shard))
        if pattern.lockstep:                              # Eq. 2 reads each device's messages as a sum
            for peer in peers:
                send(d, peer, _buffer(shard))
            for peer in peers:
                emu.recv(d, peer, timeout_s)
                emu.recv(d, peer, timeout_s)
            return
        mine = _buffer(shard)
        for peer in peers:
            mine += emu.recv(d, peer, timeout_s)          # reduce the shard I own
        for peer in peers:                                # all-gather: my reduced shard to each peer
            send(d, peer, mine)
        for peer in peers:
            emu.recv(d, peer, timeout_s)

    def ring(s, r, d):
        right, left = layout[(s, (r + 1) % R)], layout[(s, (r - 1) % R)]
        chunk = scale.real_bytes(job.stage_param_bytes / R)
        acc = _buffer(chunk)
        for step in range(2 * (R - 1)):                   # R - 1 reduce-scatter, R - 1 all-gather steps
            send(d, right, acc)
            got = emu.recv(d, left, timeout_s)
            acc = acc + got if step < R - 1 else got

    def program(s, r):
        d = layout[(s, r)]

        def run():
            if pattern.lockstep:
                lockstep_pipeline(s, r, d)
            else:
                gpipe(s, r, d)
                if pattern.dp_after_pipeline:
                    everyone.wait(timeout_s)
            if R > 1:
                (ring if pattern.exchange == "ring" else sharded)(s, r, d)
            return emu.now()
        return run

    programs = [program(s, r) for s in range(P) for r in range(R)]
    finish = run_devices(programs, timeout_s)
    real = max(finish)
    return Execution(scale.job_seconds(real), scale.job_seconds(max(emu.device_clock)), emu.total_bytes() / scale.bytes, len(emu.messages), real)
