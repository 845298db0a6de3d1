"""1-bit Adam (Tang et al. 2021), and AdamW with the same frozen variance, uncompressed.

Introduced in lecture 9 (notes: lectures/lecture09/07_compression_beyond.md §7.3).
Error feedback does not carry over to Adam directly: Adam divides by sqrt(v), which is not
linear in the gradient. 1-bit Adam's way round it:

    warm-up (the first `warmup` steps): plain AdamW on the averaged, clipped gradient;
    then v is frozen (its bias-corrected value at the end of warm-up), and per step:
      worker w:  m_w = beta1 m + (1 - beta1) g_w               (its own gradient, clipped)
                 c_w = C(m_w + e_w),  e_w = m_w + e_w - c_w     (worker-side error feedback)
      server:    a = mean_w c_w,  m = C(a + e_s),  e_s = a + e_s - m   (server-side)
      update:    p -= lr (m / bias1) / frozen_denominator,  decoupled weight decay as AdamW
    C = the registry's "sign-l2" scheme per parameter tensor: one bit per entry and one
    scale ||x||_2 / sqrt(d).

With compress=False the same loop averages the m_w exactly: "AdamW with the same frozen
variance, uncompressed", so a table can separate what the freezing did from what the
compression did. It still clips each worker's gradient, as 1-bit Adam must (each worker
compresses its own momentum: there is no averaged gradient to clip before that). With
clip_average=True as well, it clips the averaged gradient instead, as every-step AdamW
does: that row separates the freezing from the per-worker clipping. Warm-up steps send
fp32 gradients; bytes are averaged over the run.
"""

import math
import time

import torch

from lecture09.compress.compression import SCHEMES, Options, parts_bytes
from lecture09.compress import run_progress
from lecture09.compress import training as engine

SIGN_SCHEME = SCHEMES["sign-l2"]
EPS = 1e-8               # torch.optim.AdamW's default


def clip_flat(g, max_norm):
    """torch.nn.utils.clip_grad_norm_ on one flat vector (the same formula)."""
    if not max_norm:
        return g
    coef = torch.clamp(max_norm / (torch.linalg.vector_norm(g) + 1e-6), max=1.0)
    return g * coef


class OneBitAdam:
    """The optimizer over W workers' flat gradients. shapes: the parameters' shapes in
    the flat order; decay: (n,) 1.0 where weight decay applies (2-D weights), else 0."""

    def __init__(self, shapes, decay, n_workers, warmup, beta1, beta2, weight_decay, clip_norm,
                 compress=True, clip_average=False):
        if compress and clip_average:
            raise ValueError("1-bit Adam clips each worker's gradient: it compresses before any average exists")
        self.shapes, self.decay, self.warmup = shapes, decay, warmup
        self.beta1, self.beta2, self.weight_decay, self.clip_norm = beta1, beta2, weight_decay, clip_norm
        self.compress, self.clip_average = compress, clip_average
        n = decay.numel()
        self.m, self.v = torch.zeros(n), torch.zeros(n)
        self.worker_errors = [torch.zeros(n) for _ in range(n_workers)]
        self.server_error = torch.zeros(n)
        self.frozen_denominator = None
        self.t = 0

    def _sign_per_tensor(self, x):
        """(decoded, bytes): C(x), one sign-l2 encoding per parameter tensor."""
        decoded, total, offset = torch.empty_like(x), 0, 0
        for shape in self.shapes:
            part = x[offset:offset + shape.numel()]
            parts = SIGN_SCHEME.encode(part, Options())
            decoded[offset:offset + shape.numel()] = SIGN_SCHEME.decode(parts, part.shape, Options())
            total += parts_bytes(parts)
            offset += shape.numel()
        return decoded, total

    def step(self, theta, grads, lr):
        """theta (n,) -> (new theta, bytes one worker sent this step)."""
        self.t += 1
        b1, b2 = self.beta1, self.beta2
        if self.t <= self.warmup:
            g = clip_flat(sum(grads[1:], grads[0].clone()) / len(grads), self.clip_norm)
            self.m.mul_(b1).add_(g, alpha=1 - b1)
            self.v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denominator = (self.v / (1 - b2 ** self.t)).sqrt() + EPS
            sent_bytes = parts_bytes({"": grads[0]})
        else:
            if self.frozen_denominator is None:
                self.frozen_denominator = (self.v / (1 - b2 ** self.warmup)).sqrt() + EPS
            denominator = self.frozen_denominator
            if self.clip_average:   # the control: frozen v, but clipping the average, as AdamW does
                g = clip_flat(sum(grads[1:], grads[0].clone()) / len(grads), self.clip_norm)
                self.m = self.m * b1 + g * (1 - b1)
                sent_bytes = parts_bytes({"": grads[0]})
                theta = theta * (1 - lr * self.weight_decay * self.decay)
                return theta - (lr / (1 - b1 ** self.t)) * self.m / denominator, sent_bytes
            momenta = [self.m * b1 + clip_flat(g, self.clip_norm) * (1 - b1) for g in grads]
            if self.compress:
                sent = []
                for w, m_w in enumerate(momenta):
                    corrected = m_w + self.worker_errors[w]
                    c_w, sent_bytes = self._sign_per_tensor(corrected)
                    self.worker_errors[w] = corrected - c_w
                    sent.append(c_w)
                average = sum(sent[1:], sent[0].clone()) / len(sent)
                corrected = average + self.server_error
                self.m, _ = self._sign_per_tensor(corrected)
                self.server_error = corrected - self.m
            else:
                self.m = sum(momenta[1:], momenta[0].clone()) / len(momenta)
                sent_bytes = parts_bytes({"": grads[0]})
        theta = theta * (1 - lr * self.weight_decay * self.decay)
        theta = theta - (lr / (1 - b1 ** self.t)) * self.m / denominator
        return theta, sent_bytes


def train(run, seeds, setup, compress, clip_average=False):
    """Train setup.model with 1-bit Adam (compress) or frozen-variance AdamW (clipping each
    worker's gradient, or with clip_average the averaged one); a RunResult."""
    from lecture01 import tiny_gpt

    tiny_gpt.use_deterministic_threads()
    started = time.perf_counter()
    train_data, val_data = engine.world_tokens(setup.world_seed)
    model = tiny_gpt.make_model(setup.model, seed=seeds.model)
    params = list(model.parameters())
    r = setup.recipe
    decay = torch.cat([torch.full((p.numel(),), 1.0 if p.dim() >= 2 else 0.0) for p in params])
    warmup = max(1, round(setup.onebit_warmup * r.steps))
    optimizer = OneBitAdam([p.shape for p in params], decay, setup.n_workers, warmup, r.beta1, r.beta2,
                           r.weight_decay, r.clip_norm, compress=compress, clip_average=clip_average)
    gen = torch.Generator().manual_seed(seeds.data)
    losses, total_bytes, diverged = [], 0, False
    model.train()
    for step in range(r.steps):
        x, y = tiny_gpt.get_batch(train_data, r.batch_size, model.config.block_size, gen)
        grads, loss_sum = engine.worker_gradients(model, x, y, setup.n_workers, setup.precision == "bf16")
        if not math.isfinite(loss_sum):
            diverged = True
            break
        theta = torch.nn.utils.parameters_to_vector(params).detach()
        theta, sent_bytes = optimizer.step(theta, grads, tiny_gpt.lr_at(step, r.steps, r.peak_lr))
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(theta, params)
        total_bytes += sent_bytes
        losses.append(loss_sum / setup.n_workers)
        run_progress.step_done(step + 1)
    return engine.finish_run(run, seeds, model, val_data, started, diverged, total_bytes / max(1, len(losses)),
                          len(losses), losses=losses)
