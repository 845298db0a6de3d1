"""A swarm worker (lecture 9, code 6): pull the weights, compute a gradient on its own
batch, upload it compressed with error feedback (the default run's processes that run
workers: swarm_pool.py).

Introduced in lecture 9, §6. After a refusal the worker reads the answer's `code`
(swarm_protocol.REFUSALS) to decide: re-pull, wait for the next round, or stop.
"""

import http.client
import json
import random
import socket
import time
import urllib.error
import urllib.request

import torch
from safetensors.torch import load as safetensors_load

from lecture01.tiny_gpt import get_batch, lm_loss, load_world_tokens, make_model
from lecture09.compress.compression import (PayloadErrorFeedback, encode_payload, payload_tensor_bytes,
                                            payload_to_bytes)
from lecture09.lecture_model import MODEL_CONFIG
from lecture09.swarm.swarm_protocol import REPULL, TRANSIENT_STATUSES, WAIT, WorkerConfig, next_move

BACKOFF_FIRST_S = 0.1    # the first wait after a transient failure; doubled after each, up to
BACKOFF_CAP_S = 5.0      # this cap, with full jitter; Retry-After from the server is a floor


class _NoDelayConnection(http.client.HTTPConnection):
    """urllib's connection with Nagle's algorithm off: a request's headers and body leave
    in two writes, and the body must not wait ~40 ms for the server's delayed ACK."""

    def connect(self):
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _NoDelayHandler(urllib.request.HTTPHandler):
    def http_open(self, request):
        return self.do_open(_NoDelayConnection, request)


# A swarm talks straight to its server: never through an http_proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoDelayHandler())


def http_call(url, body=None, headers=None, timeout_s=60.0):
    """(status, headers, body) of one request on a new connection (urllib opens one per
    request: a TCP handshake, then the request); 4xx/5xx answers are returned, not raised."""
    # A fixed User-Agent (urllib's own names the Python version): the same bytes on every machine.
    headers = {"User-Agent": "tiny-swarm-worker", **(headers or {})}
    request = urllib.request.Request(url, data=body, headers=headers,
                                     method="GET" if body is None else "POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


class GaveUp(RuntimeError):
    """A request kept failing transiently for longer than the worker's retry budget."""


class BadAnswer(RuntimeError):
    """A 200 answer the worker cannot use (not safetensors, a header missing or malformed):
    one line, and the worker stops (the same server would answer the same again)."""


def retry_after_s(headers):
    """Retry-After in seconds (we send whole seconds; an HTTP date is not understood: 0)."""
    value = headers.get("Retry-After") if headers is not None else None
    return float(value) if value and value.strip().isdigit() else 0.0


def call_with_retry(call, budget_s, rng, sleep=time.sleep, clock=time.monotonic, on_retry=lambda: None):
    """call() -> (status, headers, body), repeated while it fails transiently.

    Transient: a status in TRANSIENT_STATUSES (503 busy, 429 throttled, 408 too slow) or no
    connection at all (refused, reset, timed out: e.g. a server restarting). Between tries
    the wait is uniform in [0, backoff] (full jitter, so workers that failed together do not
    retry together), backoff doubling from BACKOFF_FIRST_S to BACKOFF_CAP_S, and never less
    than the answer's Retry-After. After budget_s of failures: GaveUp. Returns the first
    answer that is not transient; on_retry() is called before each retry."""
    start_s, backoff_s = clock(), BACKOFF_FIRST_S
    while True:
        try:
            answer = call()
            if answer[0] not in TRANSIENT_STATUSES:
                return answer
            reason, floor_s = f"answered {answer[0]}", retry_after_s(answer[1])
        except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as error:
            reason, floor_s = f"no connection ({getattr(error, 'reason', error)})", 0.0
        wait_s = max(floor_s, rng.uniform(0, backoff_s))
        if clock() + wait_s - start_s > budget_s:
            raise GaveUp(f"{reason}; gave up after retrying for {budget_s:g} s (--retry-budget-s)")
        on_retry()
        sleep(wait_s)
        backoff_s = min(2 * backoff_s, BACKOFF_CAP_S)


def load_weights(model, body):
    """Copy a GET /weights body into the model, after checking its names and shapes."""
    try:
        tensors = safetensors_load(body)
    except Exception as error:   # safetensors raises its own SafetensorError (and others) on junk
        raise BadAnswer(f"GET /weights: 200 with {len(body):,} bytes that are not safetensors") from None
    params = dict(model.named_parameters())
    if set(tensors) != set(params):
        raise BadAnswer("the server's parameters do not match this worker's model")
    with torch.no_grad():
        for name, p in params.items():
            if tensors[name].shape != p.shape or tensors[name].dtype != p.dtype:
                raise BadAnswer(f"weights for {name} have the wrong shape or dtype")
            if not bool(torch.isfinite(tensors[name]).all()):
                raise BadAnswer(f"weights for {name} are not finite")
            p.copy_(tensors[name])


def int_header(headers, name, answer="GET /weights"):
    """A non-negative integer header of a 200 answer, or BadAnswer in one line."""
    value = headers.get(name) if headers is not None else None
    if value is None or not value.strip().isdigit() or len(value.strip()) > 18:
        raise BadAnswer(f"{answer}: 200 without a usable {name} (got {value!r:.12})")
    return int(value)


def _minus(a, b):
    """{name: a - b} for residual dicts (a missing name is zero)."""
    return {name: a.get(name, 0) - b.get(name, 0) for name in set(a) | set(b)}


def _plus(a, b):
    return {name: a.get(name, 0) + b.get(name, 0) for name in set(a) | set(b)}


class Worker:
    """One swarm worker: pull weights, compute a gradient, upload it with error feedback.

    pull(after) fetches the weights (waiting for a version newer than `after`) into the
    local model; upload(version) computes the gradient of one local batch, proposes a
    payload to the error-feedback memory and POSTs it. On 200 the new residual is
    committed; on any refusal it is rolled back, because nothing reached the server.
    Batches come from this worker's own generator, seeded by (data_seed, worker_id).
    The forward runs in fp32 (code 5's demo 2 uses bf16 where the CPU has it; §6).
    Compute time is process CPU time of forward + backward, so workers that share
    cores do not inflate each other's figure.
    """

    def __init__(self, url, config=WorkerConfig(), train_tokens=None, log=None):
        if train_tokens is None:
            train_tokens, _ = load_world_tokens()
        self.url = url.rstrip("/")
        self.config = config
        self.train_tokens = train_tokens
        self.model = make_model(MODEL_CONFIG, seed=0)   # architecture only: weights come from the server
        self.model.train()
        self.gen = torch.Generator().manual_seed(config.data_seed * 100_000 + config.worker_id)
        self.feedback = PayloadErrorFeedback()
        self.headers = {"X-Worker-Id": str(config.worker_id), "X-Compression": config.compression,
                        "Content-Type": "application/octet-stream"}
        if config.token is not None:
            self.headers["Authorization"] = f"Bearer {config.token}"
        self.stats = {"worker_id": config.worker_id, "compression": config.compression, "uploads": 0, "pulls": 0,
                      "accepted": 0, "body_bytes_sent": 0, "tensor_bytes_sent": 0, "entries_sent": 0,
                      "compute_s": [], "encode_s": [], "rejected": {}, "retries": 0, "error": None}
        self.rng = random.Random(config.worker_id)   # the back-off's jitter only: never the data
        self.lie_gen = torch.Generator().manual_seed(10_000 + config.worker_id)   # a liar's noise and signs
        self.last_body = None      # replay: the previous upload's bytes and mode
        self._proposed = False     # whether this upload went through the error-feedback memory
        # Restarts (item 1 of issue 45): the server's epoch as last seen, and for each
        # accepted upload (version, epoch, residuals before it), back to the oldest version
        # a restart of the server can return to (its X-Resume-Floor).
        self.epoch = None
        self.history = []
        self.trimmed_through = -1  # the highest version whose history entry was dropped
        self.rejoins = []          # (old epoch, new epoch, start version, uploads rolled back)
        self._proposed_for_history = False
        self.log = log             # a print-like callable for a one-line note on each restart

    def _call(self, url, body=None, headers=None):
        def count():
            self.stats["retries"] += 1
        return call_with_retry(lambda: http_call(url, body, headers, timeout_s=self.config.timeout_s),
                               self.config.retry_budget_s, self.rng, on_retry=count)

    def pull(self, after=-1):
        """GET /weights?after=...; load them; return (version, done, fresh): fresh = there is
        something to compute on: a version other than `after`, or the same one whose round
        lost our upload, or a restarted server (a new epoch: the error feedback of the
        uploads it lost is rolled back first, _rejoin)."""
        status, headers, body = self._call(f"{self.url}/weights?after={after}",
                                           headers={"X-Worker-Id": self.headers["X-Worker-Id"]})
        if status != 200:
            raise RuntimeError(f"GET /weights answered {status}")
        self.stats["pulls"] += 1
        version = int_header(headers, "X-Model-Version")
        done = headers.get("X-Training-Done") == "1"
        restarted, _ = self._see_epoch(headers.get("X-Server-Epoch"), headers.get("X-Epoch-Start"),
                                       headers.get("X-Epoch-Start-In-Round") == "1", headers.get("X-Resume-Floor"))
        fresh = version != after or (headers.get("X-In-Round") == "0" and version == after)
        if not done and (fresh or restarted):
            load_weights(self.model, body)
        return version, done, fresh

    def _see_epoch(self, epoch, start, start_in_round, floor, accepted_now=None):
        """Note the server's epoch from an answer; on a new one (the server restarted), roll
        back what it lost (_rejoin). Returns whether it was new. accepted_now: the residuals
        before the upload this answer accepts (it is the new server's, not lost); the second
        value is what the lost uploads had left in the residuals (None: nothing rolled back)."""
        if epoch is None:          # a server without epochs: nothing to compare
            return False, None
        if start is None or not start.isdigit():
            raise BadAnswer(f"X-Server-Epoch {epoch!r:.20} came without a usable X-Epoch-Start")
        restarted = self.epoch is not None and epoch != self.epoch
        span = self._rejoin(self.epoch, epoch, int(start), start_in_round, accepted_now) if restarted else None
        self.epoch = epoch
        if floor is not None and str(floor).isdigit():
            keep = [entry for entry in self.history if entry[0] >= int(floor)]
            dropped = self.history[: len(self.history) - len(keep)]
            if dropped:
                self.trimmed_through = max(self.trimmed_through, max(v for v, _, _ in dropped))
            self.history = keep
        return restarted, span

    def _rejoin(self, old_epoch, new_epoch, start, start_in_round, accepted_now=None):
        """The server restarted at version `start` holding every upload of ours for a
        version below it (and the one for `start` if start_in_round): the error feedback
        goes back to what that server has. The lost uploads' residual changes are undone
        (their gradients are forgotten, never sent twice); with accepted_now, the upload
        being accepted keeps what it left behind on top. Returns the undone change (or None)."""
        lost = [i for i, (version, epoch, _) in enumerate(self.history)
                if epoch != new_epoch and (version > start or (version == start and not start_in_round))]
        if lost:
            first = lost[0]
            begin = self.history[first][2]
            if self.trimmed_through >= start:   # our history does not reach back that far
                begin = {}
            end = accepted_now if accepted_now is not None else self.feedback.residuals
            span = _minus(end, begin)            # what the lost uploads left in the residuals
            if accepted_now is not None:         # keep the accepted upload's own change
                self.feedback._pending = _minus(self.feedback._pending, span)
            else:                                # exactly the residuals before the first lost upload
                self.feedback.residuals = begin
            self.history = self.history[:first]
        else:
            span = None
        self.rejoins.append((old_epoch, new_epoch, start, len(lost)))
        if self.log is not None:
            self.log(f"服务器重启 server restarted at version {start}: "
                     f"撤回 rolled back {len(lost)} lost uploads' error feedback")
        return span

    def upload(self, version):
        """Gradient on one batch at the loaded weights (= `version`), compressed, POSTed.

        Returns (status, answer dict)."""
        stats = self.stats
        x, y = get_batch(self.train_tokens, self.config.batch_size, MODEL_CONFIG.block_size, self.gen)   # (B, T)
        start_s = time.process_time()
        self.model.zero_grad(set_to_none=True)
        loss = lm_loss(self.model, x, y)
        loss.backward()
        stats["compute_s"].append(time.process_time() - start_s)
        start_s = time.process_time()
        grads = {name: p.grad for name, p in self.model.named_parameters()}
        before = self.feedback.residuals   # commit replaces the dict: this reference stays as it is
        payload, body, mode = self.what_to_send(grads)
        stats["encode_s"].append(time.process_time() - start_s)
        # 9 significant digits give an fp32 loss back exactly, in a fixed width (15 characters).
        headers = dict(self.headers, **{"X-Model-Version": str(version), "X-Loss": f"{loss.item():.8e}",
                                        "X-Compression": mode})
        try:   # the same bytes again after a transient failure: the batch stream is not disturbed
            status, _, answer = self._call(f"{self.url}/gradients", body, headers)
        except GaveUp:
            self._settle(False)   # nothing reached the server
            raise
        stats["uploads"] += 1
        stats["body_bytes_sent"] += len(body)
        stats["tensor_bytes_sent"] += payload_tensor_bytes(payload)
        stats["entries_sent"] += sum(t.numel() for key, t in payload.items() if not key.endswith(("::idx", "::scale")))
        try:
            reply = json.loads(answer or b"{}")
        except ValueError:
            reply = {}
        if not isinstance(reply, dict):
            reply = {}
        if status == 200:
            if self._proposed and reply.get("epoch") is not None:
                start, floor = reply.get("epoch_start"), reply.get("resume_floor")
                _, span = self._see_epoch(str(reply["epoch"]), str(start), reply.get("epoch_start_in_round") is True,
                                          None if floor is None else str(floor), accepted_now=before)
                if span is not None:
                    before = _minus(before, span)   # what this upload started from, once the lost ones are undone
            self._settle(True)
            stats["accepted"] += 1
            if self._proposed_for_history and self.epoch is not None:   # a server without epochs: no use
                self.history.append((version, self.epoch, before))
        else:
            self._settle(False)   # the server kept nothing, so the residual must not move
            stats["rejected"][str(status)] = stats["rejected"].get(str(status), 0) + 1
        return status, reply

    def _settle(self, accepted):
        """Commit (accepted) or roll back the error-feedback proposal of this upload, if it made one."""
        self._proposed_for_history = self._proposed
        if self._proposed:
            self.feedback.commit() if accepted else self.feedback.rollback()
        self._proposed = False

    def what_to_send(self, grads):
        """(payload, body bytes, mode): the honest compressed gradient through error feedback,
        or what config.attack sends instead (swarm_protocol.WIRE_ATTACKS; §8)."""
        attack, mode = self.config.attack, self.config.compression
        if attack in ("sign-flip", "ipm"):
            factor = -1.0 if attack == "sign-flip" else -0.1
            grads = {name: factor * g for name, g in grads.items()}
        elif attack in ("tiny-dense", "gaussian"):
            def noise(g):
                if attack == "gaussian":
                    return torch.randn(g.shape, generator=self.lie_gen)
                return (torch.randint(0, 2, g.shape, generator=self.lie_gen).float() * 2 - 1) * 1e-4
            # in the swarm's own format: a server refuses any other (check_format), so in a
            # top-k swarm the liar's noise travels as k entries per tensor like everyone's
            noise_grads = {name: noise(g) for name, g in grads.items()}
            payload = encode_payload(noise_grads, mode, ratio=self.config.topk_ratio)
            self._proposed = False
            return payload, payload_to_bytes(payload), mode
        elif attack == "replay" and self.last_body is not None:
            self._proposed = False
            return self.last_body
        payload = self.feedback.propose(grads, mode, self.config.topk_ratio)
        self._proposed = True
        body = payload_to_bytes(payload)
        if attack == "replay":
            self.last_body = (payload, body, mode)
        return payload, body, mode

    def run(self, max_uploads=None):
        """Loop until the server reports training done; returns the stats dict.

        After a refusal, the answer's code decides (swarm_protocol.REFUSALS): re-pull at
        once (stale, future), wait for the next version (repeat in this round), or stop
        (anything else: resending the same thing cannot help)."""
        after = -1
        while max_uploads is None or self.stats["uploads"] < max_uploads:
            version, done, fresh = self.pull(after)
            if done:
                break
            if not fresh:
                continue   # the long poll timed out with nothing new: ask again
            # new weights; the same ones, whose round lost our upload; or a restarted
            # server's (older ones too: its version may be below `after`): compute again
            status, reply = self.upload(version)
            move = WAIT if status == 200 else next_move(reply.get("code"))
            if move == WAIT:
                after = version
            elif move == REPULL:
                after = -1
            else:   # STOP (RETRY cannot come here: _call has retried transient answers)
                self.stats["error"] = f"POST /gradients answered {status}: {reply.get('error', '')}"
                break
        return self.stats
