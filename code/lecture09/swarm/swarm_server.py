"""The parameter server's logic (lecture 9, code 6): the model, its optimizer, the round
buffer, and the fate of every upload. No HTTP here (swarm_http.py carries the bytes),
so tests can call it directly.

Introduced in lecture 9, §6. The checks it runs are the ones swarm_protocol.py lists.
"""

import math
import secrets
import threading
import time
from collections import Counter, deque

import torch

from lecture01.tiny_gpt import TrainConfig, lr_at, make_adamw, make_model
from lecture09.compress.compression import safetensors_bytes
from lecture09.lecture_model import MODEL_CONFIG
from lecture09.swarm import swarm_checkpoint
from lecture09.swarm.swarm_durable import Durability
from lecture09.swarm.swarm_protocol import (Rejection, ServerConfig, check_format, check_payload, check_version,
                                            max_body_bytes_for)


def l2_norm(tensors):
    """The L2 norm of a list of float32 tensors, summed in float64: finite for any finite
    fp32 values (the largest square, 3.4e38 ** 2 ~ 1.2e77, is far inside float64's range),
    where an fp32 sum of squares overflows to inf from values of about 1.8e19."""
    return math.sqrt(sum(float(t.double().square().sum()) for t in tensors))


def clipped(dense, max_norm):
    """{name: tensor} scaled (a copy) so that its L2 norm is at most max_norm; and the norm."""
    norm = l2_norm(list(dense.values()))
    if norm <= max_norm:
        return dense, norm
    factor = max_norm / norm            # computed in float64: never 0 * inf
    return {name: (t.double() * factor).float() for name, t in dense.items()}, norm


ROUND_HISTORY = 10        # rounds /status lists under "membership"
TIMELINE_LIMIT = 10_000   # rounds kept in .timeline (the demo's membership table)
SEEN_LIMIT = 4096         # worker ids remembered for the quorum; older ones are forgotten


class ParameterServer(Durability):
    """Holds the model, the optimizer and the round buffer; decides every upload's fate.

    version = optimizer steps taken so far; a worker's upload names the version its
    gradient was computed on. Sync: a round collects one upload per distinct worker id
    at the current version (a repeat from the same worker is refused with 409, so one
    fast worker cannot fill a round); with world_size of them, or when the round
    deadline passes with at least one, the server averages them summed in worker-id
    order (arrival order cannot change the result), clips and steps. Async: an upload
    computed age = version_now - version steps ago (0 <= age <= max_staleness) is applied
    at once with the learning rate scaled by 1 / (1 + age). An upload is decoded and
    checked completely before it touches the round buffer, so a rejected upload changes
    nothing.

    Membership (sync): the round's quorum adapts to who is there. A worker is *expected* in
    round v if it uploaded, or tried with a stale version, while the server was at v - 1 or
    v. A round steps as soon as it holds world_size uploads, or (from version 1 on) every
    expected worker's, at least min_workers; when round_deadline_s passes, it steps with
    what it has if that is at least min_workers, else waits another deadline. So a worker
    that crashed costs one deadline and is then no longer waited for; a late or new worker
    is expected from the round after its first try. Every upload is clipped to config.upload_clip_norm before it is averaged,
    and a step that would make a weight non-finite is not taken: the weights stay those
    of the last good version, and /status says so.
    """

    def __init__(self, config=ServerConfig()):
        self.config = config
        self.model = make_model(MODEL_CONFIG, seed=config.model_seed)
        self.model.train()
        self.params = dict(self.model.named_parameters())
        self.shapes = {name: p.shape for name, p in self.params.items()}   # never from the wire
        self.max_body_bytes = config.max_body_bytes or max_body_bytes_for(self.model.n_params())
        self.optimizer = make_adamw(self.model, TrainConfig(steps=config.total_updates, peak_lr=config.peak_lr,
                                                            clip_norm=config.clip_norm))
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)   # long polls wait on it
        self.version = 0
        self.round = {}            # worker id -> (dense gradients, loss), current version only
        # worker id -> digest of its upload, with a robust aggregator: two identical uploads
        # are the cheapest collusion (Krum scores them 0 apart and picks them; issue 45, item 3)
        self.round_digests = {}
        self.round_timer = None
        self.last_loss = None
        self.step_losses = []      # mean worker loss of every step, in step order
        self.counts = Counter()    # "accepted", "clipped_uploads", "deadline_steps", "skipped_steps", "rejected_<code>"
        self.last_skip = None      # why the last step was not taken, for /status
        self.changed_entries = []  # weights that changed in each step (what a delta download would send)
        self.closing = False
        self._weights_cache = (None, b"")
        self._backup_buffers = None  # _backup's copies of the weights and optimizer state
        self.last_checkpoint = None  # (path, bytes, seconds) of the last one written
        self.last_checkpoint_error = None  # why the last failed write failed, for /status
        self.seen = {}             # worker id -> the server's version at its last upload or stale try
        self.recent_rounds = deque(maxlen=ROUND_HISTORY)
        self.timeline = []         # (version, workers, how): every round's step, for the demo
        self.round_started_s = None
        self.resumed_from = None     # (path, version) when started from a checkpoint
        # Each start of a server is an epoch: a worker that sees a new epoch learns from
        # epoch_start what the new server holds (every upload for a version below it, and
        # the round in progress) and rolls back its error feedback for the rest (item 1).
        self.epoch = secrets.token_hex(4)
        self.epoch_start = (0, frozenset())   # (version, workers in the round) at this start
        self.checkpoint_versions = deque(maxlen=swarm_checkpoint.KEEP)   # versions of the kept ones
        # a robust aggregator (robust.aggregators) replaces the mean of a round; centered
        # clipping keeps its center from round to round, so it is built once
        self.combine = None
        if config.aggregator != "mean":
            from lecture09.robust import aggregators
            self.combine = aggregators.make(config.aggregator, f=config.byzantine)

    @property
    def done(self):
        return self.version >= self.config.total_updates

    # --- reading ---------------------------------------------------------

    def lost_upload(self, worker, after):
        """Whether `worker`, waiting for the step after `after`, has nothing in the round
        (the lock held): its upload was lost, e.g. in a restart, and it must upload again."""
        return (worker is not None and self.config.update == "sync" and after == self.version
                and worker not in self.round)

    def weights_body(self, after=None, client_gone=lambda: False, worker=None):
        """(safetensors bytes, version, done, in_round); with `after`, wait (at most
        long_poll_s) for a newer version first, checking every half second whether the
        client left. Answered at once, because waiting would never end: a worker whose
        upload for `after` is not in the round (in_round False), and a worker whose
        `after` is ahead of the server (it restarted from an older checkpoint)."""
        with self.changed:
            if after is not None:
                end_s = time.monotonic() + self.config.long_poll_s
                while not (self.version != after or self.done or self.closing or self.lost_upload(worker, after)):
                    left_s = end_s - time.monotonic()
                    if left_s <= 0 or client_gone():
                        break
                    self.changed.wait(min(0.5, left_s))
            version, done, in_round = self.version, self.done, worker in self.round
            if self._weights_cache[0] != version:
                tensors = {name: p.detach().clone() for name, p in self.params.items()}
                self._weights_cache = (version, safetensors_bytes(tensors))
            return self._weights_cache[1], version, done, in_round, self.epoch_headers(worker)

    def status(self):
        """The /status answer; every number in it is finite (JSON has no inf or NaN)."""
        with self.lock:
            finite = all(bool(torch.isfinite(p).all()) for p in self.params.values())
            loss = self.last_loss if self.last_loss is not None and math.isfinite(self.last_loss) else None
            return {
                "version": self.version,
                "step": self.version,
                "total_steps": self.config.total_updates,
                "update": self.config.update,
                "world_size": self.config.world_size,
                "pending_uploads": len(self.round),
                "last_loss": loss,
                "health": "ok" if finite else "non-finite weights",
                "last_skipped_step": self.last_skip,
                "last_checkpoint_error": self.last_checkpoint_error,
                "done": self.done,
                "counts": dict(self.counts),
                "membership": self._membership(),
            }

    def expected(self):
        """Workers expected in the current round (None at version 0: nobody known yet)."""
        if self.version == 0:
            return None
        return {worker for worker, seen in self.seen.items() if seen >= self.version - 1}

    def _membership(self):
        expected = self.expected() or set()
        return {"min_workers": self.config.round_floor, "expected": sorted(expected),
                "in_round": sorted(self.round), "late": sorted(expected - set(self.round)),
                "last_rounds": list(self.recent_rounds)}

    def _saw(self, worker):
        self.seen[worker] = self.version
        if len(self.seen) > SEEN_LIMIT:   # forget the longest-unseen worker ids
            for old in sorted(self.seen, key=self.seen.get)[: len(self.seen) - SEEN_LIMIT]:
                del self.seen[old]

    # --- writing ---------------------------------------------------------

    def submit(self, upload, body):
        """Decide one upload; returns the 200 answer or raises Rejection (nothing changed)."""
        with self.lock:
            try:
                self._admit(upload)
            except Rejection as rejection:
                if rejection.code != "stale_version":
                    raise
                stale = rejection
            else:
                stale = None
        if stale is not None:
            # Alive, and late: expected from now on, but only if what it sent is an upload
            # (a garbage body must not make every round wait for this id; issue 45, item 7).
            try:
                self._decode(upload, body)
            except Rejection:
                raise stale from None
            with self.lock:
                self._saw(upload.worker_id)
            raise stale
        dense, norm = self._decode(upload, body)
        digest = self._digest(dense) if self._dedupe else None
        with self.changed:
            self._admit(upload)   # again: the version may have moved while we decoded
            if digest is not None and digest in self.round_digests.values():
                twin = next(w for w, d in self.round_digests.items() if d == digest)
                raise Rejection("duplicate_upload", f"the same gradient as worker {twin}'s in this round")
            self.counts["accepted"] += 1
            if norm > self.config.upload_clip_norm:
                self.counts["clipped_uploads"] += 1
            if self.config.update == "async":
                age = self.version - upload.version
                self._step([dense], [upload.loss], lr_factor=1.0 / (1 + age))
                return {"accepted": True, "applied": True, "version": self.version, **self._epoch_answer(upload)}
            self.round[upload.worker_id] = (dense, upload.loss)
            if digest is not None:
                self.round_digests[upload.worker_id] = digest
            self._saw(upload.worker_id)
            if len(self.round) == 1:
                self.round_started_s = time.monotonic()
                self._start_deadline(self.version)
            expected = self.expected()
            if len(self.round) >= self.config.world_size:
                how = "all"
            elif (expected is not None and expected <= set(self.round)
                  and len(self.round) >= self.config.round_floor):
                how = "expected"
            else:
                how = None
            applied = how is not None
            if applied:
                self._step_round(how)
            return {"accepted": True, "applied": applied, "version": self.version, **self._epoch_answer(upload)}

    def _decode(self, upload, body):
        """Checks 7 and 8 and the clip: (dense gradients, norm before clipping). Decoding is
        the slow part; it runs outside the lock, on a private copy."""
        dense = check_payload(body, self.shapes, upload.compression,
                              self.config.topk_ratio if self.config.compression is not None else None)
        check_format(upload.compression, self.config.compression)
        return clipped(dense, self.config.upload_clip_norm)

    @property
    def _dedupe(self):
        """Whether a round refuses a second identical upload (sync, robust aggregator)."""
        return self.combine is not None and self.config.update == "sync"

    @staticmethod
    def _digest(dense):
        """SHA-256 of an upload's decoded (clipped) gradient, in name order: two workers that
        send the same vector get the same digest whatever their bytes looked like."""
        import hashlib
        digest = hashlib.sha256()
        for name in sorted(dense):
            digest.update(dense[name].contiguous().numpy().tobytes())
        return digest.hexdigest()

    def _admit(self, upload):
        check_version(upload, self.version, self.done, self.config.update, self.config.max_staleness, self.round)

    def _start_deadline(self, version):
        timer = threading.Timer(self.config.round_deadline_s, self._deadline, args=(version,))
        timer.daemon = True
        self.round_timer = timer
        timer.start()

    def _deadline(self, version):
        with self.changed:
            if self.version == version and self.round and not self.closing:
                if len(self.round) >= self.config.round_floor:
                    self.counts["deadline_steps"] += 1
                    self._step_round("deadline")
                else:
                    self.counts["deadline_waits"] += 1   # too few: wait another deadline
                    self._start_deadline(version)

    def _step_round(self, how):
        workers = sorted(self.round)
        waited_s = time.monotonic() - self.round_started_s if self.round_started_s is not None else 0.0
        entry = {"version": self.version, "workers": workers, "by": how, "waited_s": round(waited_s, 3),
                 "late": sorted((self.expected() or set()) - set(workers))}
        self.recent_rounds.append(entry)
        if len(self.timeline) < TIMELINE_LIMIT:
            self.timeline.append(entry)
        ordered = [self.round[w] for w in workers]   # worker-id order, not arrival order
        self.round = {}
        self.round_digests = {}
        if self.round_timer is not None:
            self.round_timer.cancel()
            self.round_timer = None
        self._step([d for d, _ in ordered], [loss for _, loss in ordered])

    def _step(self, dense_list, losses, lr_factor=1.0):
        """p.grad = mean(dense_list) (or the robust aggregator's combination of them); clip;
        AdamW at lr_at(version) * lr_factor; version + 1.

        The async discount multiplies the learning rate, after clipping, so clipping cannot
        erase it and AdamW's per-entry normalisation cannot divide it away. If the step
        would leave a weight non-finite, the weights and the optimizer state go back to
        what they were: the version still moves on (the workers' uploads were used up),
        and the skip is counted and reported by /status."""
        if self.combine is not None and len(dense_list) > 1:
            names = list(self.params)
            combined = self.combine([torch.cat([dense[name].reshape(-1) for name in names]) for dense in dense_list])
            offset = 0
            for name, p in self.params.items():
                p.grad = combined[offset:offset + p.numel()].view_as(p).clone()
                offset += p.numel()
        else:
            for name, p in self.params.items():
                total = dense_list[0][name].clone()
                for dense in dense_list[1:]:
                    total += dense[name]
                p.grad = total.mul_(1.0 / len(dense_list))
        torch.nn.utils.clip_grad_norm_(list(self.params.values()), self.config.clip_norm)
        lr = lr_at(self.version, self.config.total_updates, self.config.peak_lr) * lr_factor
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        params = list(self.params.values())
        backup = self._backup()
        try:
            self.optimizer.step()
            after = torch.cat([p.detach().reshape(-1) for p in params])
            good = bool(torch.isfinite(after).all())
        except RuntimeError:   # e.g. a step size beyond fp32's range ("cannot be converted ... overflow")
            good = False
        self.optimizer.zero_grad(set_to_none=True)
        if good:
            before = torch.cat([b.reshape(-1) for b in backup[0]])
            if self.config.update_clip:             # bound the step itself (robust.aggregators.clip_update)
                from lecture09.robust.aggregators import clip_update
                after = clip_update(before, after, self.config.update_clip)
                with torch.no_grad():
                    for p, new in zip(params, after.split([p.numel() for p in params])):
                        p.copy_(new.view_as(p))
            self.changed_entries.append(int((after != before).sum()))
        else:
            self._restore(backup)
            self.counts["skipped_steps"] += 1
            self.last_skip = (f"step {self.version} would have made weights non-finite; "
                              f"kept the weights of version {self.version}")
        # Dividing before adding cannot overflow: the mean of finite numbers stays finite.
        self.last_loss = sum(loss / len(losses) for loss in losses)
        self.step_losses.append(self.last_loss)
        self.version += 1
        every = self.config.checkpoint_every
        if every and self.config.checkpoint_dir and (self.version % every == 0 or self.done):
            self._checkpoint()
        self.changed.notify_all()

    def _backup(self):
        """(weights, optimizer state) copied into buffers kept from step to step: one
        _foreach_copy_ per step instead of ~70 clones. The state is empty before step 1."""
        live = list(self.params.values()) + [t for state in self.optimizer.state.values()
                                             for t in state.values() if torch.is_tensor(t)]
        kept = self._backup_buffers
        if kept is None or len(kept) != len(live) or any(k.shape != t.shape for k, t in zip(kept, live)):
            kept = self._backup_buffers = [torch.empty_like(t.detach()) for t in live]
        with torch.no_grad():
            torch._foreach_copy_(kept, [t.detach() for t in live])
        n = len(self.params)
        had_state = {p: set(state) for p, state in self.optimizer.state.items()}
        return kept[:n], kept[n:], had_state

    def _restore(self, backup):
        """Put back what _backup copied: the weights, and the optimizer state as it was (a
        state the failed step created is dropped)."""
        weights, state_tensors, had_state = backup
        with torch.no_grad():
            torch._foreach_copy_([p.detach() for p in self.params.values()], weights)
            for p in list(self.optimizer.state):
                if p not in had_state:
                    del self.optimizer.state[p]
            live = [t for p, keys in had_state.items() for k, t in self.optimizer.state[p].items()
                    if k in keys and torch.is_tensor(t)]
            if live:
                torch._foreach_copy_(live, state_tensors)

    def count(self, name):
        with self.lock:
            self.counts[name] += 1

    def count_rejection(self, code):
        self.count(f"rejected_{code}")

    def close(self):
        with self.changed:
            self.closing = True
            if self.round_timer is not None:
                self.round_timer.cancel()
            self.changed.notify_all()
