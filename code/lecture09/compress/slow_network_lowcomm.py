"""The low-communication methods of code 5's --demo time that need more than
slow_network.train_timed_diloco: Streaming DiLoCo with its overlap, and SparseLoCo
(lecture 9, §5.12). The update rules are the untimed trainers' own
(streaming_diloco.train, sparseloco.outer_loop): this module only keeps the clock.

Streaming DiLoCo's clock. Every worker's inner step adds its measured compute (a quarter of
local_sgd.inner_step's seconds, as in train_timed_diloco). At a fragment's send step its
encoded tensors leave every worker for the other three on the emulated links (shared
uplink: they queue behind whatever that worker is still sending); the workers go on with τ
more inner steps; at the sync step the clock moves to the last of those messages'
arrivals if it is later. Waiting is only the part of the exchange that τ steps of compute
did not hide. The control (overlap=False) is the same run's messages timed as if every
worker waited for the fragment's exchange right at its send step: same bytes, same
training, the overlap alone removed.
"""

from lecture01 import tiny_gpt
from lecture09.compress import sparseloco, streaming_diloco
from lecture09.compress.slow_network import TimedRun, emulator_for, train_timed_diloco


class OverlappedExchange:
    """One clock (real seconds) for fragments sent at one step and waited for at a later one."""

    def __init__(self, emulator, devices, overlap=True):
        self.emu, self.devices, self.overlap = emulator, devices, overlap
        self.clock = self.compute_s = self.network_s = 0.0
        self.bytes_sent = 0
        self.pending = {}            # sync step -> [Message]

    def compute(self, seconds):
        self.clock += seconds
        self.compute_s += seconds

    def send(self, sync, parts):
        """parts[w]: worker w's encoded tensors, sent now to every other worker."""
        emu, devices, n = self.emu, self.devices, len(parts)
        for d in devices:
            emu.device_clock[d] = self.clock
        messages = []
        for w in range(n):
            for k in range(1, n):
                m = emu.send(devices[w], devices[(w + k) % n], parts[w])
                self.bytes_sent += m.nbytes
                messages.append(m)
        for m in messages:           # handed over now; only the clock waits for them
            emu.recv(m.dst, m.src, wait=False)
        self.pending[sync] = messages
        if not self.overlap:
            self.wait(sync)

    def wait(self, sync):
        """The fragment of this sync step is applied now: wait for its last message."""
        messages = self.pending.pop(sync, None)
        if messages:
            end = max(self.clock, max(m.model_arrival_s for m in messages))
            self.network_s += end - self.clock
            self.clock = end


class StreamingTimer:
    """streaming_diloco.train's timer: the overlapped clock and its control on two emulators
    (each with its own queues), and the validation curve of θ_global."""

    def __init__(self, setup, seeds, net, devices, scale, eval_every, eval_windows):
        ids = list(range(len(devices)))
        self.clocks = [OverlappedExchange(emulator_for(net, devices, scale), ids, overlap)
                       for overlap in (True, False)]
        self.scale, self.eval_every, self.eval_windows = scale, eval_every, eval_windows
        self.model = tiny_gpt.make_model(setup.model, seed=seeds.model)
        self.val_data, self.fragments = None, None
        self.curves = ([], [])

    def computed(self, seconds):
        for c in self.clocks:
            c.compute(seconds)

    def send(self, sync, parts, encode_s):
        for c in self.clocks:
            c.compute(encode_s)
            c.send(sync, parts)

    def wait(self, sync):
        for c in self.clocks:
            c.wait(sync)

    def step_done(self, step, fragments):
        self.fragments = fragments
        if step % self.eval_every == 0:
            bpc = self.bpc()
            for c, curve in zip(self.clocks, self.curves):
                curve.append((step, self.scale.job_seconds(c.clock), bpc))

    def bpc(self):
        """Validation bpc of θ_global (the fragments' last synced values), as the other rows'."""
        import torch
        with torch.no_grad():
            flat = torch.cat([f.detach() for f in self.fragments])
            torch.nn.utils.vector_to_parameters(flat, self.model.parameters())
        return tiny_gpt.bits_per_char(self.model, self.val_data, n_windows=self.eval_windows)


def train_timed_streaming(run, seeds, setup, net, devices, scale, eval_every, eval_windows=64):
    """Streaming DiLoCo (run.param = (H, F, τ)) on emulated links: (TimedRun with the overlap,
    TimedRun of the same run without it)."""
    from lecture09.compress.training import world_tokens

    timer = StreamingTimer(setup, seeds, net, devices, scale, eval_every, eval_windows)
    timer.val_data = world_tokens(setup.world_seed)[1]
    result = streaming_diloco.train(run, seeds, setup, timer=timer)
    n, steps = timer.model.n_params(), max(1, result.steps_done)
    bpc = float("nan") if result.diverged else timer.bpc()
    timed = []
    for clock, curve in zip(timer.clocks, timer.curves):
        per_step_bytes = clock.bytes_sent / steps / setup.n_workers
        timed.append(TimedRun(run.key, seeds.model, steps, scale.job_seconds(clock.compute_s) / steps,
                              scale.job_seconds(clock.network_s) / steps, per_step_bytes / scale.bytes,
                              per_step_bytes / (setup.n_workers - 1) / n, bpc, tuple(curve),
                              result.diverged))
    return tuple(timed)


def train_timed_sparseloco(run, seeds, setup, net, devices, scale, eval_every, eval_windows=64):
    """SparseLoCo (run.param = (H, top-k, chunk, bits)) on emulated links: its exchange's wire
    tensors (indices, packed 2-bit codes, lookup) cross them; a TimedRun."""
    return train_timed_diloco(run, seeds, setup, net, devices, scale, eval_every, eval_windows,
                              **sparseloco.outer_loop(run, seeds, setup))
