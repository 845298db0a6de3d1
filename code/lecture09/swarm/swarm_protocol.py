"""The swarm's protocol (lecture 9, code 6): its settings, its refusals, and every check
the parameter server makes on a request, in the order it makes them.

Introduced in lecture 9, §6. Imported by 06_swarm_http.py before torch is loaded, so
nothing here imports torch at module level (the payload check imports it when called).

    order  check (function here)                                      refusal
    0      the request line and each header line parse strictly
           (swarm_head.read_head; RFC 9112 §3 and §5.1: token ":" OWS value OWS,
           no obs-fold, no control bytes, at most MAX_HEADER_LINES)   400 / 414 / 431 / 501 / 505
    1      framing: one Content-Length, no Transfer-Encoding, no bare
           CR in a header line, no repeated single-valued header
           (check_framing; RFC 9112 §6.3 and §2.2)                     400 ambiguous_request
    2      Content-Length present, an integer, at most the cap, judged
           from the header alone (check_length)                       411 / 400 / 413
    3      the bearer token, before a single body byte is read
           (check_token)                                              401 unauthorized
    4      X-Compression, X-Worker-Id, X-Model-Version, X-Loss
           (parse_upload_headers)                                     400 bad_header
           with per-worker tokens: the id is the token's own
           (check_owner)                                              403 wrong_worker
    5      the body arrives whole within the request deadline         400 / 408
    6      version and round: future, stale, repeat, finished
           (check_version)                                            409
    7      the payload: safetensors, exact keys, dtypes, shapes,
           indices, finite values (check_payload ->
           compression.decode_payload)                                400 bad_payload
    8      the swarm's one format, and no more entries per tensor
           than top-k keeps (check_format; check_payload: §8)         400 wrong_compression
                                                                      / too_many_entries
    then   the upload is clipped to a norm bound and enters the round (200)

A wrong token from an address with too many wrong tokens lately gets 429 too_many_failures
(AuthThrottle, Retry-After) instead of 401; a valid token is never throttled (issue 45). Check 0 runs for every request;
checks 1-4 run together in check_upload_request (the HTTP layer calls it once per POST,
before reading the body); 6, 7 and 8 run in swarm_server.ParameterServer.submit.

Every refusal carries a machine-readable `code` (REFUSALS below); a worker decides what
to do next from the code, never from the wording of the message.
"""

import hmac
import math
import re
from dataclasses import dataclass

HOST = "127.0.0.1"   # loopback only: this server has no TLS, so it must not face a network


# ---------------------------------------------------------------------------
# Settings (every field is also a flag of 06_swarm_http.py)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ServerConfig:
    world_size: int = 4              # distinct workers averaged per synchronous round
    update: str = "sync"             # "sync": average a round, then step; "async": step per upload
    steps: int = 60                  # rounds of data: sync takes `steps` optimizer steps, async
                                     # steps * world_size one-upload steps (the same batches seen)
    peak_lr: float = 3e-3            # lecture 1's AdamW recipe (tiny_gpt.TrainConfig)
    clip_norm: float = 1.0           # global clipping after averaging, as in lecture 1
    round_deadline_s: float = 30.0   # a round that waits this long steps with what arrived,
    min_workers: int = 1             # if at least this many uploads did (else it waits again)
    max_staleness: int = 4           # async: accept uploads at most this many versions old
    max_body_bytes: int | None = None  # None: derived from the model (max_body_bytes_for)
    long_poll_s: float = 20.0        # longest a GET /weights?after=V waits for a new version
    max_long_polls: int | None = None  # concurrent waiting long polls; beyond, 503 + Retry-After.
                                     # None: world_size + 16 (every worker, and 16 observers)
    request_deadline_s: float = 20.0 # a whole request (headers and body) must arrive within this
    max_connections: int | None = None  # open connections served at once; beyond, 503 at once.
                                     # None: max(64, 2 * long-poll slots), so waiting polls never fill it
    auth_failures: int = 10          # wrong tokens one client address may send per auth_window_s;
    auth_window_s: float = 10.0      # beyond, 429 until the oldest failure is auth_window_s old
    listen_backlog: int = 128        # the kernel's queue of connections not yet accepted
    model_seed: int = 0              # tiny_gpt.make_model's seed: the starting weights
    token: str | None = None         # shared secret for POST /gradients; None: no check
    worker_tokens: tuple = ()        # ((worker id, token), ...): per-worker tokens (swarm_flags.read_token_file);
                                     # when given, a token uploads only as its own worker id, and
                                     # `token` is not used
    compression: str | None = None   # the swarm's wire format (code 6 sets its --compression): any
    topk_ratio: float = 0.01         # other is refused, and a top-k upload may carry at most
                                     # topk_count(n, ratio) entries per tensor (§8: it bounds what one
                                     # upload moves). None: any format, any count (tests of other checks)
    aggregator: str = "mean"         # robust.aggregators.AGGREGATORS: how a round's uploads combine
    byzantine: int = 1               # f, the liars the aggregator is built for (not used by mean)
    update_clip: float = 0.0         # > 0: each step's |Δw| (L2, after AdamW) is cut to this; 0: off
    checkpoint_dir: str | None = None  # where checkpoints go (swarm_checkpoint.py); None: nowhere
    checkpoint_every: int = 0        # a checkpoint after every this many versions; 0: only on stop

    @property
    def total_updates(self):
        """Optimizer steps in one training run: async takes one per upload, so it needs
        world_size of them to see the data one synchronous round sees."""
        return self.steps * (self.world_size if self.update == "async" else 1)

    @property
    def round_floor(self):
        """The fewest uploads a round may step with: min_workers, or more if the aggregator
        needs them (trimmed mean 2f + 1, Krum 2f + 3; robust.aggregators.check_settings)."""
        need = {"trimmed-mean": 2 * self.byzantine + 1, "krum": 2 * self.byzantine + 3,
                "multi-krum": 2 * self.byzantine + 3}.get(self.aggregator, 1)
        return max(self.min_workers, need)

    @property
    def long_poll_slots(self):
        return self.world_size + 16 if self.max_long_polls is None else self.max_long_polls

    @property
    def connection_slots(self):
        return max(64, 2 * self.long_poll_slots) if self.max_connections is None else self.max_connections

    @property
    def upload_clip_norm(self):
        """Each upload is clipped to this L2 norm before averaging, so that one upload's
        share of a round's average is at most clip_norm: one worker can steer a step but
        never blow it up (honest uploads of the default run stay below it)."""
        return self.world_size * self.clip_norm


@dataclass(frozen=True)
class WorkerConfig:
    worker_id: int = 0
    compression: str = "topk"        # one of compression.WIRE_MODES
    topk_ratio: float = 0.01         # fraction of each tensor's entries a top-k upload keeps
    batch_size: int = 8              # sequences per worker per step: 4 workers x 8 = lecture 1's 32
    data_seed: int = 1               # with worker_id, seeds this worker's batch generator
    token: str | None = None
    timeout_s: float = 60.0          # HTTP timeout; a long poll waits at most long_poll_s
    retry_budget_s: float = 60.0     # one request retries a transient failure (503, 429, 408, no
                                     # connection) for at most this long, then the worker stops
    attack: str = "none"             # WIRE_ATTACKS: what this worker sends instead of its gradient


# What one swarm worker can send instead of its gradient (§8). It sees only its own
# gradient, so the attacks that need the honest uploads (robust.attacks' alie) are not here;
# ipm uses its own gradient in place of the honest mean. Every attack travels in the swarm's
# format (a server refuses any other): in a top-k swarm, noise keeps k entries per tensor.
WIRE_ATTACKS = {"none": "its honest gradient", "sign-flip": "minus its gradient",
                "ipm": "minus 0.1 times its gradient", "tiny-dense": "+-1e-4 in every entry, in the swarm's format",
                "gaussian": "N(0, 1) in every entry, in the swarm's format", "replay": "its previous upload again"}


# The largest valid upload is top-k at ratio 1: every entry as an int64 index and an fp32
# value (12 bytes); its safetensors header (8 bytes + JSON of ~80 bytes per key) fits in
# the allowance below for any model this course builds.
BYTES_PER_SPARSE_ENTRY = 12
HEADER_ALLOWANCE_BYTES = 65_536


def max_body_bytes_for(n_params):
    """The body cap the server derives from its model: 12 bytes per parameter + 64 KiB."""
    return BYTES_PER_SPARSE_ENTRY * n_params + HEADER_ALLOWANCE_BYTES


# ---------------------------------------------------------------------------
# Refusals: one machine-readable code each, and what a worker does on receiving it
# ---------------------------------------------------------------------------

REPULL, WAIT, STOP, RETRY = "re-pull", "wait", "stop", "retry"

REFUSALS = {   # code: (HTTP status, the worker's next move)
    "ambiguous_request": (400, STOP),
    "length_required": (411, STOP),
    "bad_length": (400, STOP),
    "too_large": (413, STOP),
    "unauthorized": (401, STOP),
    "wrong_worker": (403, STOP),       # per-worker tokens: this token is another worker's
    "bad_header": (400, STOP),
    "incomplete_body": (400, STOP),
    "request_timeout": (408, STOP),
    "future_version": (409, REPULL),   # pull the newer weights, compute again
    "stale_version": (409, REPULL),
    "repeat_in_round": (409, WAIT),    # this worker is in the round already: wait for the step
    "duplicate_upload": (409, WAIT),   # robust aggregator: another worker sent this very gradient
    "training_done": (409, REPULL),    # the pull then reports done and the worker stops
    "bad_payload": (400, STOP),
    "wrong_compression": (400, STOP),  # not the swarm's wire format (ServerConfig.compression)
    "too_many_entries": (400, STOP),   # a tensor carries more entries than top-k keeps
    "busy": (503, RETRY),              # transient: the same request again, after Retry-After
    "too_many_failures": (429, RETRY),
    "not_found": (404, STOP),
    # check 0: a request line or header block that does not parse (RFC 9112)
    "bad_request_line": (400, STOP),
    "malformed_header": (400, STOP),
    "uri_too_long": (414, STOP),
    "headers_too_large": (431, STOP),
    "unsupported_method": (501, STOP),
    "unsupported_version": (505, STOP),
    "expectation_failed": (417, STOP),
    "internal_error": (500, STOP)}     # a check the server lacks failed on this upload (logged)
TRANSIENT_STATUSES = (408, 429, 503)   # a worker retries these (and a failed connection)
# To add a check: a function below (called from check_upload_request, check_version or
# check_payload), a code here if none fits, and a row in swarm_bad_uploads.BAD_UPLOADS.


class Rejection(Exception):
    """A request the server refuses: a code from REFUSALS and a reason for the answer."""

    def __init__(self, code, reason, retry_after_s=None):
        super().__init__(reason)
        self.code = code
        self.status = REFUSALS[code][0]
        self.reason = reason
        self.retry_after_s = retry_after_s   # sent as Retry-After (whole seconds, rounded up)


def next_move(code):
    """What a worker does after a refusal with this code (STOP for an unknown code)."""
    return REFUSALS.get(code, (None, STOP))[1]


# ---------------------------------------------------------------------------
# The checks, in the order the server makes them
# ---------------------------------------------------------------------------

class AuthThrottle:
    """Wrong tokens per client address: at most `allowed` in any `window_s` are answered
    401; beyond, a wrong token gets 429 (Retry-After) until the oldest failure is window_s
    old. A valid token is never refused by it: all clients of a classroom swarm share
    127.0.0.1, and an address-wide block let one guesser stop every honest worker there.
    The price: the throttle no longer bounds how fast a guesser may try (a right guess
    gets in whenever it comes), so a token must be unguessable: the default run's and
    new_worker_tokens' are 128 random bits. Bounded memory: at most max_addresses
    addresses (the least recently failing is forgotten first), `allowed` times each."""

    def __init__(self, allowed, window_s, max_addresses=1024, clock=None):
        import collections
        import time
        self.allowed, self.window_s, self.max_addresses = allowed, window_s, max_addresses
        self.clock = clock or time.monotonic
        self.failures = collections.OrderedDict()   # address -> deque of failure times
        self._deque = collections.deque

    def _recent(self, address, now):
        times = self.failures.get(address)
        while times and now - times[0] >= self.window_s:
            times.popleft()
        return times

    def check(self, address):
        """Raise Rejection(too_many_failures) if this address is over its allowance."""
        now = self.clock()
        times = self._recent(address, now)
        if times is not None and len(times) >= self.allowed:
            wait_s = self.window_s - (now - times[0])
            raise Rejection("too_many_failures", f"{len(times)} wrong tokens in {self.window_s:g} s from "
                                                 f"this address: wait {wait_s:.1f} s", retry_after_s=wait_s)

    def failed(self, address):
        now = self.clock()
        times = self._recent(address, now)
        if times is None:
            if len(self.failures) >= self.max_addresses:
                self.failures.popitem(last=False)
            times = self.failures[address] = self._deque(maxlen=self.allowed)
        times.append(now)
        self.failures.move_to_end(address)


SINGLE_VALUED = ("Content-Length", "Authorization", "X-Worker-Id", "X-Compression", "X-Model-Version",
                 "X-Loss", "Host")
WORKER_ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
VERSION_PATTERN = re.compile(r"[0-9]{1,18}")
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{1,256}")   # what a Bearer token may be (also --token)
LENGTH_PATTERN = re.compile(r"[0-9]{1,18}")


def check_framing(raw_header_lines, headers):
    """1. Refuse a request whose meaning a parser (or a proxy in front) could read two ways.

    raw_header_lines: the header lines as bytes (read_head has refused a bare CR in them);
    headers: the parsed message (with get_all)."""
    if headers.get("Transfer-Encoding") is not None:
        raise Rejection("ambiguous_request", "Transfer-Encoding is not accepted: send Content-Length only")
    for name in SINGLE_VALUED:
        values = headers.get_all(name) or []
        if len(values) > 1:
            raise Rejection("ambiguous_request", f"{name} appears {len(values)} times")


def check_length(headers, cap_bytes):
    """2. The announced body size, from the header alone; returns it."""
    length = headers.get("Content-Length")
    if length is None:
        raise Rejection("length_required", "Content-Length is required")
    # 1*DIGIT, with only SP / HTAB around it: str.strip() and int() would also accept
    # Unicode spaces and digits ("\xa012", "12\x0b"), which another parser reads differently.
    if not LENGTH_PATTERN.fullmatch(length.strip(" \t")):
        raise Rejection("bad_length", f"Content-Length must be a non-negative integer, got {length!r}")
    n_bytes = int(length)
    if n_bytes > cap_bytes:
        raise Rejection("too_large", f"body of {n_bytes} bytes exceeds the cap of {cap_bytes} bytes")
    return n_bytes


def new_worker_tokens(n_workers):
    """((worker id, token), ...) for workers 0..n-1, each a fresh random secret: the default
    run's, so that no worker can upload as another (§8: replay under another id)."""
    import secrets
    return tuple((str(worker), secrets.token_urlsafe(16)) for worker in range(n_workers))


def token_for(config, worker_id):
    """The token worker `worker_id` presents to a server with this ServerConfig."""
    return dict(config.worker_tokens)[str(worker_id)] if config.worker_tokens else config.token


def check_token(headers, token, worker_tokens=()):
    """3. The bearer token: the shared one (None: no check), or with per-worker tokens the
    worker id that owns the one given (returned; None otherwise)."""
    given = (headers.get("Authorization") or "").encode("latin-1", "replace")
    # compare_digest does not stop at the first wrong byte, so the answer's timing does
    # not tell an attacker how much of a guess was right; with per-worker tokens every one
    # is compared, so the timing does not tell which worker's it was close to either.
    if worker_tokens:
        owners = [worker for worker, secret in worker_tokens
                  if hmac.compare_digest(given, f"Bearer {secret}".encode("latin-1"))]
        if not owners:
            raise Rejection("unauthorized", "missing or wrong bearer token")
        return owners[0]
    if token is None:
        return None
    if not hmac.compare_digest(given, f"Bearer {token}".encode("latin-1")):
        raise Rejection("unauthorized", "missing or wrong bearer token")
    return None


def check_owner(upload, owner):
    """4b. With per-worker tokens, X-Worker-Id must be the token's own worker: one member
    cannot fill a round under several ids, nor replay another worker's upload as that worker."""
    if owner is not None and upload.worker_id != owner:
        raise Rejection("wrong_worker", f"this token belongs to worker {owner}, not {upload.worker_id}")


@dataclass(frozen=True)
class Upload:
    worker_id: str
    version: int
    compression: str
    loss: float


def parse_upload_headers(headers):
    """4. The upload's own headers (a Mapping with .get) -> Upload."""
    from lecture09.compress.compression import WIRE_MODES   # imports torch: only the server gets here

    compression = headers.get("X-Compression")
    if compression not in WIRE_MODES:
        raise Rejection("bad_header", f"X-Compression must be one of {list(WIRE_MODES)}, got {compression!r}")
    worker_id = headers.get("X-Worker-Id") or ""
    if not WORKER_ID_PATTERN.fullmatch(worker_id):
        raise Rejection("bad_header", "X-Worker-Id must be 1-64 characters of A-Z a-z 0-9 _ . -")
    version = headers.get("X-Model-Version") or ""
    if not VERSION_PATTERN.fullmatch(version):
        raise Rejection("bad_header", f"X-Model-Version must be a non-negative integer, got {version!r}")
    try:
        loss = float(headers.get("X-Loss") or "")
    except ValueError:
        raise Rejection("bad_header", "X-Loss must be a number") from None
    if not math.isfinite(loss):
        raise Rejection("bad_header", "X-Loss must be finite")
    return Upload(worker_id, int(version), compression, loss)


def check_upload_request(raw_header_lines, headers, path, cap_bytes, token, worker_tokens=()):
    """Checks 1-4 of a POST, in order, from its line and headers alone (no body byte read):
    -> (announced body size, Upload). A new check of the request goes here."""
    check_framing(raw_header_lines, headers)
    if path != "/gradients":
        raise Rejection("not_found", f"no such endpoint {path}")
    n_bytes = check_length(headers, cap_bytes)
    owner = check_token(headers, token, worker_tokens)
    upload = parse_upload_headers(headers)
    check_owner(upload, owner)
    return n_bytes, upload


def check_version(upload, version, done, update, max_staleness, round_workers):
    """6. Version and round checks against the server's state (its lock held)."""
    if done:
        raise Rejection("training_done", f"training finished at version {version}")
    if upload.version > version:
        raise Rejection("future_version", f"future version {upload.version}: the server is at {version}")
    age = version - upload.version
    if update == "sync":
        if age > 0:
            raise Rejection("stale_version", f"stale version {upload.version}: the round is for {version}")
        if upload.worker_id in round_workers:
            raise Rejection("repeat_in_round", f"repeat: worker {upload.worker_id} is already in this round")
    elif age > max_staleness:
        raise Rejection("stale_version", f"stale version {upload.version}: {age} steps old, "
                                         f"tolerance {max_staleness}")


def check_format(mode, swarm_mode):
    """8. The swarm's one wire format (None: any): a dense upload to a top-k swarm would touch
    every entry, and AdamW moves an entry by about lr whatever its size (§8)."""
    if swarm_mode is not None and mode != swarm_mode:
        raise Rejection("wrong_compression", f"this swarm uploads {swarm_mode}, got {mode}")


def check_payload(body, shapes, mode, topk_ratio=None):
    """7. The body as a payload: every key, dtype, shape, index and value
    (compression.decode_payload) -> {name: dense float32 gradient}. With topk_ratio, a
    sparse tensor may carry at most compression_schemes.topk_count(numel, ratio) entries."""
    from lecture09.compress.compression import PayloadError, decode_payload, payload_from_bytes
    from lecture09.compress.compression_schemes import IDX_SUFFIX, topk_count

    try:
        payload = payload_from_bytes(body)
        dense = decode_payload(payload, shapes, mode)
    except PayloadError as error:
        raise Rejection("bad_payload", str(error)) from None
    for name, shape in shapes.items():
        index = payload.get(name + IDX_SUFFIX)
        if topk_ratio is not None and index is not None and len(index) > topk_count(shape.numel(), topk_ratio):
            raise Rejection("too_many_entries", f"{name}: {len(index)} entries, top-k keeps "
                                                f"{topk_count(shape.numel(), topk_ratio)} at ratio {topk_ratio:g}")
    return dense
