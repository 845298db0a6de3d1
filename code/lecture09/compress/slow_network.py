"""Time to a target on the slow network: demo 2's schemes train the tiny GPT on 4 workers
whose exchanges cross emulated links (lecture 9, §5.12; code 05 --demo time).

Real compute, emulated communication. Each step every worker computes its gradient and
encodes it (timed, real); then every worker sends its encoded tensors to each of the
other three (an all-gather: compressed gradients cannot be summed on the way) through a
network.emulator.LinkEmulator on the stamped clock, and the step ends for a worker when
the last of the three others' tensors has arrived. The workers run one after another in
this process, so a step's compute is the slowest worker's measured seconds (as if they
ran at once on 4 machines). Bytes are those of the encoded tensors.

The time scale: the 4 workers stand on 4 devices of demo 1's network, one per region.
One tiny-GPT gradient entry stands for one 1.3B gradient entry (bytes scale = tiny
parameters / 1.3e9), and one measured second of the tiny model's compute per step stands
for the 1.3B job's compute seconds per iteration (schedule_setup.ScheduleSetup.compute_s;
time scale = calibrated tiny compute / that). Every link is scaled by those two factors,
so an fp32 exchange takes the same share of a step as the 1.3B model's would on demo 1's
network; seconds are printed scaled back to the 1.3B job's.
"""

import math
import statistics
import time
from dataclasses import dataclass

import torch

from lecture01 import tiny_gpt
from lecture09.compress.training import (Diverged, WorkerCompression, make_optimizer, world_tokens)
from lecture09.network.emulator import LinkEmulator, TimeScale

JOB_PARAMS = 1.3e9


class EmulatedExchange:
    """WorkerCompression whose encoded tensors cross an emulator: .average() also returns
    the step's compute and network seconds (real)."""

    def __init__(self, run, setup, emulator, devices):
        self.inner = WorkerCompression(run.scheme, setup.n_workers, run.error_feedback, setup.options)
        self.emu, self.devices = emulator, devices
        self.clock = 0.0             # real seconds of the emulated run so far
        self.compute_s = self.network_s = 0.0
        self.bytes_sent = 0

    def _encode(self, worker, grad):
        """(decoded, the encoded tensors) of one worker's gradient."""
        inner = self.inner
        if inner.memories is None:
            parts = inner.scheme.encode(grad, inner.options)
            return inner.scheme.decode(parts, grad.shape, inner.options), parts
        memory = inner.memories[worker]
        encoded, decoded = memory.propose({"": grad}, inner.scheme, inner.options)
        memory.commit()
        return decoded[""], encoded[""]

    def step(self, grads, compute_s):
        """grads: one flat gradient per worker; compute_s: each worker's measured gradient
        seconds. Returns the average of what arrived."""
        decoded, parts, ready = [], [], []
        for w, g in enumerate(grads):
            t0 = time.perf_counter()
            d, p = self._encode(w, g)
            decoded.append(d)
            parts.append(p)          # the scheme's encoded tensors (name -> tensor)
            ready.append(compute_s[w] + time.perf_counter() - t0)
        self.gather(parts, ready)
        total = decoded[0].clone()
        for d in decoded[1:]:
            total.add_(d)
        return total / len(grads)

    def gather(self, parts, ready_s):
        """Every worker's encoded tensors parts[w] to every other worker (an all-gather),
        worker w ready ready_s[w] real seconds after the last exchange; the clock moves to
        when the last tensor has arrived."""
        emu, devices, n = self.emu, self.devices, len(parts)
        ready = [self.clock + r for r in ready_s]
        for w in range(n):
            emu.device_clock[devices[w]] = ready[w]
        for w in range(n):          # every worker's tensors to every other worker (all-gather)
            for k in range(1, n):
                m = emu.send(devices[w], devices[(w + k) % n], parts[w])
                self.bytes_sent += m.nbytes
        for w in range(n):
            for k in range(1, n):
                emu.recv(devices[w], devices[(w - k) % n], wait=False)
        end = max(emu.device_clock[d] for d in devices)
        compute = max(ready) - self.clock
        self.compute_s += compute
        self.network_s += end - self.clock - compute
        self.clock = end


def timed_worker_gradients(model, x, y, n_workers, bf16=False):
    """training.worker_gradients with each worker's seconds: (grads, loss sum, seconds)."""
    params = list(model.parameters())
    per = x.size(0) // n_workers
    grads, loss_sum, seconds = [], 0.0, []
    for w in range(n_workers):
        t0 = time.perf_counter()
        for p in params:
            p.grad = None
        loss = tiny_gpt.lm_loss(model, x[w * per:(w + 1) * per], y[w * per:(w + 1) * per], bf16=bf16)
        loss.backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in params]))
        loss_sum += loss.item()
        seconds.append(time.perf_counter() - t0)
    return grads, loss_sum, seconds


@dataclass(frozen=True)
class TimedRun:
    key: str
    seed: int
    steps: int
    job_compute_s: float       # per step, scaled back
    job_network_s: float       # per step: waiting for the others' tensors
    job_bytes: float           # per worker per step, scaled back (one encode x 3 peers)
    bytes_per_element: float   # one encode, as demo 2's column
    bpc: float
    curve: tuple               # (step, job seconds so far, validation bpc)
    diverged: bool

    @property
    def step_s(self):
        return self.job_compute_s + self.job_network_s

    @property
    def waiting_share(self):
        return self.job_network_s / self.step_s

    def seconds_to(self, target_bpc):
        """Job seconds at the first evaluation at or below target_bpc; None if never."""
        for _, seconds, bpc in self.curve:
            if bpc <= target_bpc:
                return seconds
        return None


def emulator_for(net, devices, scale, shared_uplink=True):
    lat = [[scale.real_latency_s(net["latency_s"][a][b]) if a != b else 0.0 for b in devices] for a in devices]
    bw = [[scale.real_bandwidth_bps(net["bandwidth_bps"][a][b]) if a != b else 1.0 for b in devices]
          for a in devices]
    return LinkEmulator(lat, bw, shared_uplink=shared_uplink)


def train_timed(run, seeds, setup, net, devices, scale, eval_every, eval_windows=64):
    """Train one row with its exchanges on emulated links; a TimedRun."""
    tiny_gpt.use_deterministic_threads()
    train_data, val_data = world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    config, optimizer = make_optimizer(run, setup, model, seeds)
    exchange = EmulatedExchange(run, setup, emulator_for(net, devices, scale), list(range(len(devices))))
    bf16 = setup.precision == "bf16"
    curve = []

    def backward(model, x, y):
        grads, loss_sum, seconds = timed_worker_gradients(model, x, y, setup.n_workers, bf16)
        if not math.isfinite(loss_sum):
            raise Diverged
        average = exchange.step(grads, seconds)
        offset = 0
        for p in model.parameters():
            p.grad = average[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        return loss_sum / setup.n_workers

    def on_step(step, loss):
        if (step + 1) % eval_every == 0:
            curve.append((step + 1, scale.job_seconds(exchange.clock),
                          tiny_gpt.bits_per_char(model, val_data, n_windows=eval_windows)))

    try:
        tiny_gpt.train(model, train_data, config, optimizer=optimizer, backward=backward, on_step=on_step)
        diverged = False
    except Diverged:
        diverged = True
    steps = max(1, len(curve) * eval_every) if diverged else config.steps
    n = model.n_params()
    per_step_bytes = exchange.bytes_sent / max(1, steps) / setup.n_workers
    return TimedRun(run.key, seeds.model, steps, scale.job_seconds(exchange.compute_s) / steps,
                    scale.job_seconds(exchange.network_s) / steps, per_step_bytes / scale.bytes,
                    per_step_bytes / (setup.n_workers - 1) / n,
                    curve[-1][2] if curve and not diverged else float("nan"), tuple(curve), diverged)


def train_timed_diloco(run, seeds, setup, net, devices, scale, eval_every, eval_windows=64, exchange=None,
                       outer_lr=None, outer_momentum=None, inner_steps=None):
    """DiLoCo (compress/local_sgd.train's loop, H = run.param inner steps, its pseudo-gradient
    encoded by run.scheme) with each sync's encoded tensors on emulated links; a TimedRun.
    Between syncs the workers do not wait; a worker's compute is a quarter of the measured
    inner step (local_sgd.inner_step runs the 4 one after another). exchange, outer_lr,
    outer_momentum, inner_steps: as local_sgd.train's (SparseLoCo: sparseloco.outer_loop);
    such an exchange leaves what each worker sent in .wire, and that crosses the links."""
    import copy
    from lecture09.compress import local_sgd

    tiny_gpt.use_deterministic_threads()
    train_data, val_data = world_tokens(setup.world_seed)
    r, n_workers, H = setup.recipe, setup.n_workers, inner_steps or run.param
    global_model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    global_params = list(global_model.parameters())
    lr_out = setup.outer_lr if outer_lr is None else outer_lr
    momentum = setup.outer_momentum if outer_momentum is None else outer_momentum
    outer = torch.optim.SGD(global_params, lr=lr_out, momentum=momentum, nesterov=momentum > 0)
    workers = [copy.deepcopy(global_model) for _ in range(n_workers)]
    inner = [tiny_gpt.make_adamw(w, r) for w in workers]
    emulated = EmulatedExchange(run, setup, emulator_for(net, devices, scale), list(range(len(devices))))
    gen = torch.Generator().manual_seed(seeds.data)
    curve, since_sync, diverged, steps = [], 0.0, False, 0
    for step in range(r.steps):
        lr = tiny_gpt.lr_at(step, r.steps, r.peak_lr)
        x, y = tiny_gpt.get_batch(train_data, r.batch_size, global_model.config.block_size, gen)
        t0 = time.perf_counter()
        loss_sum = local_sgd.inner_step(workers, inner, x, y, lr, r.clip_norm, setup.precision == "bf16")
        since_sync += (time.perf_counter() - t0) / n_workers
        if not math.isfinite(loss_sum):
            diverged = True
            break
        steps = step + 1
        if (step + 1) % H == 0 or step + 1 == r.steps:
            theta = torch.nn.utils.parameters_to_vector(global_params).detach()
            deltas = [theta - torch.nn.utils.parameters_to_vector(m.parameters()).detach() for m in workers]
            if exchange is None:
                pseudo_gradient = emulated.step(deltas, [since_sync] * n_workers)
            else:
                t0 = time.perf_counter()
                pseudo_gradient, _ = exchange(deltas)
                emulated.gather(exchange.wire, [since_sync + (time.perf_counter() - t0) / n_workers] * n_workers)
            since_sync = 0.0
            local_sgd.outer_step(global_params, pseudo_gradient, outer, workers)
        if (step + 1) % eval_every == 0:
            curve.append((step + 1, scale.job_seconds(emulated.clock + since_sync),
                          tiny_gpt.bits_per_char(global_model, val_data, n_windows=eval_windows)))
    n = global_model.n_params()
    steps = max(1, steps)
    per_step_bytes = emulated.bytes_sent / steps / n_workers
    return TimedRun(run.key, seeds.model, steps, scale.job_seconds(emulated.compute_s) / steps,
                    scale.job_seconds(emulated.network_s) / steps, per_step_bytes / scale.bytes,
                    per_step_bytes / (n_workers - 1) / n,
                    float("nan") if diverged else tiny_gpt.bits_per_char(global_model, val_data, n_windows=eval_windows),
                    tuple(curve), diverged)


def calibrate(setup, seeds, steps=6):
    """Median measured seconds of one worker's gradient on the tiny model (real)."""
    tiny_gpt.use_deterministic_threads()
    train_data, _ = world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    config = setup.recipe
    seconds = []
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, y = tiny_gpt.get_batch(train_data, config.batch_size, model.config.block_size, gen)
        seconds += timed_worker_gradients(model, x, y, setup.n_workers, setup.precision == "bf16")[2]
    return statistics.median(seconds), model.n_params()


def time_scale_for(tiny_compute_s, tiny_params, job_compute_s):
    """The TimeScale of the module docstring."""
    return TimeScale(time=tiny_compute_s / job_compute_s, bytes=tiny_params / JOB_PARAMS)
