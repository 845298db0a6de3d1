"""One hivemind peer training the tiny GPT with DiLoCo, in its own process.

Introduced in lecture 9, code 10 (10_hivemind.py, notes §10). hivemind_run starts N of
these beside a bootstrap DHT node; each reports to the parent on its own pipe:

    ("ready", peer, addresses)                            its DHT node is up (a late peer: none yet)
    ("joined", peer, round, bytes, seconds, missed)   took the state of a peer (missed: its round)
    ("round", peer, round, members, sent, received, seconds, loss, complete, weight)
    ("bytes", peer, round, sent, received)                the round's bytes in full, a round later
    ("done", peer, final θ_global as numpy arrays)

Each round is OpenDiLoCo's recipe: H inner AdamW steps on this peer's slice of the global
batch, then the pseudo-gradient (θ_global − θ_local, one flat tensor) is averaged with
whoever is there through hivemind's DecentralizedAverager (matchmaking in the DHT, then a
butterfly all-reduce), and an outer SGD (Nesterov) steps on θ_global. The matchmaking key
carries the round number (the averager's group bits), so only peers in the same round can
form a group. A peer whose round found no group downloads θ_global from a peer again. A
peer that has just downloaded the state (joining, or after a miss) averages that round with
weight 0 and trains from the next (joining_step).

The batches are those of compress/local_sgd.py: one generator draws the global batch each
inner step and peer p takes sequences p·b … (p+1)·b − 1.
"""

import os
import threading
import time
from dataclasses import dataclass

COMPRESSIONS = ("none", "float16", "meanstd_16bit", "uniform_8bit", "quantile_8bit")
WAIT_FOR_PARENT_S = 600   # a late peer waits this long for the parent's "go", then gives up
CHECKSUM_TOLERANCE = 1e-6  # of the average's L1 norm: fp32 rounding is ~1e-7 of it; a part left unaveraged is far more
ROUND_BITS = 16            # the round number, in binary, is the matchmaking key's group bits


@dataclass(frozen=True)
class PeerSettings:
    n_peers: int = 4             # peers the global batch is split over (a group's target size)
    rounds: int = 12             # outer steps
    inner_steps: int = 10        # H
    batch_per_peer: int = 8
    peak_lr: float = 3e-3
    outer_lr: float = 0.7        # OpenDiLoCo's outer SGD, as in compress.training.TrainSetup
    outer_momentum: float = 0.9
    compression: str = "none"    # hivemind's CompressionType for the averaged tensor
    matchmaking_s: float = 1.0   # how long a group waits for more peers (min_matchmaking_time)
    chunk_s: float = 2.0         # the all-reduce and a state download give up on a peer silent this long
    part_bytes: int = 2 ** 14    # the all-reduce's unit of work (hivemind's default: 2 ** 19)
    round_s: float = 10.0        # an all-reduce, or a state download, gives up after this
    model_seed: int = 0
    data_seed: int = 1
    world_seed: int = 0

    @property
    def find_s(self):
        """How long a peer looks for its round's group before it gives up (and catches up by
        downloading the state): a group forms within matchmaking_s of its first member's
        arrival, so a peer that has not found one in 3 x that has missed it."""
        return min(self.round_s, 3 * self.matchmaking_s)

    @property
    def request_s(self):
        """Every matchmaking RPC's time limit: half the matchmaking time (hivemind warns that a
        request_timeout above min_matchmaking_time can deadlock matchmaking)."""
        return self.matchmaking_s / 2

    @property
    def total_inner_steps(self):
        return self.rounds * self.inner_steps


def numpy2_compat():
    """hivemind 1.1.12's 8-bit codecs cannot read their own wire format under numpy 2.4:
    Quantization.extract converts a one-element array to int, which numpy 2.4 refuses
    (TypeError). Read the same bytes the same way, with the element taken first; and keep
    torch's deprecation warning about quantize_per_tensor (which the encoder calls) out of
    the lecture's output. Idempotent."""
    import warnings

    import numpy as np
    import torch
    from hivemind.compression import quantization as q

    warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor")
    if getattr(q.Quantization, "_numpy2", False):
        return

    def extract(self, serialized):
        size = int(np.frombuffer(serialized.buffer, count=1, dtype=np.int64)[0])
        codebook = np.frombuffer(serialized.buffer, offset=8, count=size, dtype=self.codebook_dtype)
        indices = np.frombuffer(serialized.buffer, offset=8 + codebook.nbytes, dtype=self.indices_dtype)
        indices = torch.as_tensor(indices, dtype=torch.int64).reshape(tuple(serialized.size))
        codebook = torch.as_tensor(codebook).to(dtype=getattr(torch, serialized.dtype))
        return codebook[indices].requires_grad_(serialized.requires_grad)

    q.Quantization.extract = extract
    q.Quantization._numpy2 = True


def compression_of(name):
    """hivemind's compression object for one of COMPRESSIONS."""
    from hivemind import compression as c

    numpy2_compat()

    return {"none": c.NoCompression, "float16": c.Float16Compression, "meanstd_16bit": c.ScaledFloat16Compression,
            "uniform_8bit": c.Uniform8BitQuantization, "quantile_8bit": c.Quantile8BitQuantization}[name]()


def round_bits(r):
    return format(r, f"0{ROUND_BITS}b")


def count_wire_bytes(sent, received):
    """Count the tensor bytes hivemind's all-reduce sends and receives (serialized buffers,
    without protobuf framing and libp2p's own bytes) in two shared counters (multiprocessing
    Values). Must run before the averager's process is forked: it inherits these wrappers."""
    from hivemind.averaging import allreduce

    def counting(function, counter, of_result):
        def wrapper(*args, **kwargs):
            result = function(*args, **kwargs)
            with counter.get_lock():
                counter.value += len((result if of_result else args[0]).buffer)
            return result
        return wrapper

    if not getattr(allreduce, "_counting", False):
        allreduce.serialize_torch_tensor = counting(allreduce.serialize_torch_tensor, sent, True)
        allreduce.deserialize_torch_tensor = counting(allreduce.deserialize_torch_tensor, received, False)
        allreduce._counting = True


def counting_compression(inner, sent):
    """The averager's compression, counting the bytes of every part it serializes."""
    from hivemind.compression import CompressionBase

    class Counting(CompressionBase):
        compression_type = inner.compression_type

        def compress(self, tensor, info, allow_inplace=False):
            result = inner.compress(tensor, info, allow_inplace)
            with sent.get_lock():
                sent.value += len(result.buffer)
            return result

        def extract(self, serialized):
            return inner.extract(serialized)

        def estimate_compression_ratio(self, info):
            return inner.estimate_compression_ratio(info)

    return Counting()


def settle(sent, received, quiet_s=0.2, limit_s=2.0):
    """Wait (at most limit_s) until the byte counters have not moved for quiet_s: a reducer
    sends the averaged parts back after its own step has returned."""
    end = time.monotonic() + limit_s
    last = (sent.value, received.value)
    while time.monotonic() < end:
        time.sleep(quiet_s)
        now = (sent.value, received.value)
        if now == last:
            return
        last = now


def is_complete(averager, sums, weights=None):
    """Whether the averaged tensor is the average of the group's tensors, by a linear
    checksum: the sum of the average must be the (weighted) mean of the sums each member
    gathered (weights: each member's averaging weight; None: equal).
    hivemind can return a group while a part's reducer failed (it logs "received x%
    results" and leaves that part as this peer's own); the check sees that."""
    with averager.get_tensors() as tensors:
        got, scale = float(tensors[0].double().sum()), float(tensors[0].double().abs().sum())
    weights = [1.0] * len(sums) if weights is None else weights
    expected = sum(w * x for w, x in zip(weights, sums)) / sum(weights)
    return abs(got - expected) <= CHECKSUM_TOLERANCE * scale + 1e-12


def catch_up(peer, averager, load, pipe, settings, missed=None):
    """Download the state of a peer (hivemind's load_state_from_peers), load it and report
    ("joined", ...); the round it starts at, or None if no peer answered."""
    started = time.perf_counter()
    state = averager.load_state_from_peers(timeout=settings.round_s)
    if state is None:
        return None
    metadata, tensors = state
    r = load(metadata, tensors)
    pipe.send(("joined", peer, r, sum(t.numel() * t.element_size() for t in tensors),
               time.perf_counter() - started, missed))
    return r


def joining_step(averager, gather, settings, left_s=0.0):
    """Average the round whose state was just downloaded with weight 0: bring no
    pseudo-gradient, take the group's average. The downloaded state is that of the start of
    the sharing peer's round, and that peer may be most of a round further on (measured:
    0.3-3.7 s behind its group's matchmaking when the joiner replayed the round, against a
    1 s window; notes §10.3); so the joiner does not replay it, it waits for the others'
    matchmaking. Its declared start is late (scheduled_time near the deadline): it is never
    a leader that closes a group early, it joins the leader the others join. left_s: what the
    sharing peer said is left of its round (its last round's length less the time since this
    one began); the wait is that plus 2 x matchmaking_s (the others' group closes matchmaking_s
    after the first of them starts looking), at most round_s. A joiner that finds no group
    downloads again and joins that round, or the next, the same way."""
    from hivemind.utils import get_dht_time

    timeout = min(settings.round_s, left_s + 2 * settings.matchmaking_s)
    return averager.step(gather=gather, weight=0.0, timeout=timeout,
                         scheduled_time=get_dht_time() + timeout - settings.request_s)


def run_peer(peer, initial_peers, settings, pipe, start_round=0):
    """Train rounds start_round … settings.rounds − 1; report on `pipe` (a Connection).

    Once its DHT node is up it says ("ready", peer, its addresses) and waits for ("go", _).
    start_round > 0: a late peer; told ("go", addresses) it starts its DHT node with those
    initial peers, downloads the state of a peer and joins that peer's round with weight 0
    (joining_step); it trains from the next round. A peer that found no group does the same
    with the state it downloads again."""
    os.environ.setdefault("HIVEMIND_LOGLEVEL", "ERROR")
    import multiprocessing as mp

    import hivemind
    import torch
    from hivemind.averaging import DecentralizedAverager
    from hivemind.averaging.partition import AllreduceException

    from lecture01 import tiny_gpt
    from lecture09.engines.torchft_replica import prepare
    from lecture09.lecture_model import MODEL_CONFIG

    tiny_gpt.use_deterministic_threads()
    s = settings
    recipe = tiny_gpt.TrainConfig(steps=s.total_inner_steps, batch_size=s.batch_per_peer * s.n_peers,
                                  peak_lr=s.peak_lr)
    train_data, _ = prepare(s.world_seed)
    model = tiny_gpt.make_model(MODEL_CONFIG, seed=s.model_seed)
    global_model = tiny_gpt.make_model(MODEL_CONFIG, seed=s.model_seed)
    global_params, params = list(global_model.parameters()), list(model.parameters())
    inner = tiny_gpt.make_adamw(model, recipe)
    outer = torch.optim.SGD(global_params, lr=s.outer_lr, momentum=s.outer_momentum,
                            nesterov=s.outer_momentum > 0)
    gen = torch.Generator().manual_seed(s.data_seed)
    flat = torch.zeros(sum(p.numel() for p in params))
    sent, received = mp.Value("q", 0), mp.Value("q", 0)
    count_wire_bytes(sent, received)
    lock = threading.Lock()
    shared = {}                  # the state a joining peer downloads, as of the start of a round
    ahead = {"left_s": 0.0}      # what the peer it downloaded from had left of its round

    def snapshot(r):
        with lock:
            now = time.monotonic()       # how long its rounds take, for a joiner's wait (joining_step)
            shared["round_s"] = now - shared["since"] if shared.get("round") == r - 1 else 0.0
            shared["round"], shared["since"] = r, now
            shared["tensors"] = [p.detach().clone() for p in global_params] + [
                outer.state[p]["momentum_buffer"].clone() if p in outer.state else torch.zeros_like(p)
                for p in global_params] + [
                inner.state[p][k].clone() if p in inner.state else torch.zeros_like(p)
                for k in ("exp_avg", "exp_avg_sq") for p in params] + [gen.get_state()]
            shared["adam_step"] = float(inner.state[params[0]]["step"]) if params[0] in inner.state else 0.0
        if averager is not None:     # a peer that downloads takes the state of the peer furthest on
            averager.state_sharing_priority = float(r)

    def load(metadata, tensors):
        n = len(global_params)
        with torch.no_grad():
            for p, g, t in zip(params, global_params, tensors[:n]):
                g.copy_(t)
                p.copy_(t)
            for p, t in zip(global_params, tensors[n:2 * n]):
                outer.state[p]["momentum_buffer"] = t.clone()
            for i, p in enumerate(params):
                inner.state[p] = {"step": torch.tensor(metadata["adam_step"]),
                                  "exp_avg": tensors[2 * n + i].clone(), "exp_avg_sq": tensors[3 * n + i].clone()}
        gen.set_state(tensors[-1])
        ahead["left_s"] = max(0.0, metadata["round_s"] - metadata["age_s"])
        return int(metadata["round"])

    class Averager(DecentralizedAverager):
        def get_current_state(self):        # what a joining peer downloads (host process)
            with lock:
                return dict(round=shared["round"], adam_step=shared["adam_step"], round_s=shared["round_s"],
                            age_s=time.monotonic() - shared["since"]), list(shared["tensors"]), None

    def download(missed=None):
        """catch_up; ahead["left_s"] becomes what the sharing peer has left of its round now,
        after the download (which took 0.1-1.1 s here)."""
        started = time.perf_counter()
        caught = catch_up(peer, averager, load, pipe, s, missed=missed)
        ahead["left_s"] -= time.perf_counter() - started
        return caught

    def start_dht(addresses):
        return hivemind.DHT(initial_peers=addresses, host_maddrs=["/ip4/127.0.0.1/tcp/0"], start=True)

    dht = averager = None
    try:
        # every peer starts together; a late one starts its DHT node when told to go, with
        # the addresses of every peer the parent knows (as a volunteer is given several)
        dht = None if start_round else start_dht(initial_peers)
        pipe.send(("ready", peer, [str(a) for a in dht.get_visible_maddrs()] if dht else []))
        go = pipe.recv() if pipe.poll(WAIT_FOR_PARENT_S) else None
        if not (isinstance(go, tuple) and go[0] == "go"):
            return
        if start_round:
            dht = start_dht(go[1])
        averager = Averager([flat], dht, start=True, prefix="tinygpt", target_group_size=s.n_peers,
                            min_group_size=2, min_matchmaking_time=s.matchmaking_s, request_timeout=s.request_s, part_size_bytes=s.part_bytes,
                            allreduce_timeout=s.round_s, next_chunk_timeout=s.chunk_s,
                            compression=counting_compression(compression_of(s.compression), sent),
                            initial_group_bits=round_bits(start_round), allow_state_sharing=True)
        r, pending = start_round, None   # pending: (round, counters at its start) until its bytes are sent
        joining = bool(start_round)      # this round's state was downloaded: average it with weight 0
        if start_round:
            r = download()
            if r is None:
                raise RuntimeError(f"peer {peer} could not download the state of any peer")
        snapshot(r)
        while r < s.rounds:
            if joining and ahead["left_s"] <= 0:
                # by its last round's length, the peer it downloaded from has closed its group:
                # a joiner is too late (4 of 6 runs without this wait); wait for its next round and
                # download that (round r stays loaded: if nobody answers, it trains round r itself)
                time.sleep(max(0.0, ahead["left_s"]) + s.request_s)
                caught = download()
                if caught is None:
                    joining = False
                elif caught > r:
                    r = caught
                    snapshot(r)
                continue
            averager.set_group_bits(round_bits(r))
            if joining:                  # no inner steps: the round's batches are drawn, AdamW's count moves
                with torch.no_grad():
                    for _ in range(s.inner_steps):
                        x, y = tiny_gpt.get_batch(train_data, recipe.batch_size, MODEL_CONFIG.block_size, gen)
                    mine = slice(peer * s.batch_per_peer, (peer + 1) * s.batch_per_peer)
                    loss = tiny_gpt.lm_loss(model, x[mine], y[mine])
                for p in params:
                    if p in inner.state:
                        inner.state[p]["step"] = inner.state[p]["step"] + s.inner_steps
            for step in range(r * s.inner_steps, (r + 1) * s.inner_steps) if not joining else ():
                for group in inner.param_groups:
                    group["lr"] = tiny_gpt.lr_at(step, recipe.steps, recipe.peak_lr)
                x, y = tiny_gpt.get_batch(train_data, recipe.batch_size, MODEL_CONFIG.block_size, gen)
                mine = slice(peer * s.batch_per_peer, (peer + 1) * s.batch_per_peer)
                inner.zero_grad(set_to_none=True)
                loss = tiny_gpt.lm_loss(model, x[mine], y[mine])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, recipe.clip_norm)
                inner.step()
            with averager.get_tensors() as tensors:
                tensors[0].copy_(torch.nn.utils.parameters_to_vector(global_params).detach()
                                 - torch.nn.utils.parameters_to_vector(params).detach())
                if joining:
                    tensors[0].zero_()
                checksum = float(tensors[0].double().sum())
            if pending is not None:         # the round before: its last sends are done by now
                pipe.send(("bytes", peer, pending[0], sent.value - pending[1], received.value - pending[2]))
            before = (sent.value, received.value)
            pending = (r, *before)
            started = time.perf_counter()
            weight = 0.0 if joining else 1.0
            gather = dict(peer=peer, round=r, sum=checksum, weight=weight)
            try:
                group = (joining_step(averager, gather, s, ahead["left_s"]) if joining
                         else averager.step(gather=gather, timeout=s.find_s))
            except AllreduceException:      # found no group, or the group's all-reduce failed
                group = None
            if group and not sum(g["weight"] for g in group.values()):
                group = None                # only peers that had just joined: nobody brought a pseudo-gradient
            seconds = time.perf_counter() - started
            members = tuple(sorted(g["peer"] for g in group.values())) if group else (peer,)
            complete = group is None or is_complete(averager, [g["sum"] for g in group.values()],
                                                    [g["weight"] for g in group.values()])
            caught = None
            if group is None:           # no group: take θ_global from a peer again, join its round
                caught = download(missed=r)
                if joining and caught == r:
                    continue            # the others are still in this round: join it again (unreported)
            pipe.send(("round", peer, r, members, sent.value - before[0], received.value - before[1], seconds,
                       loss.item(), complete, weight))
            joining = False
            if caught is not None and caught > r:
                r, joining = caught, True
                snapshot(r)
                continue
            # no group and nobody ahead of it: the outer step uses its own pseudo-gradient (a group of one)
            if not complete:            # hivemind returned a partial average: skip this outer step
                with torch.no_grad():
                    for p, g in zip(params, global_params):
                        p.copy_(g)
                r += 1
                snapshot(r)
                continue
            with averager.get_tensors() as tensors:
                offset = 0
                for p in global_params:
                    p.grad = tensors[0][offset:offset + p.numel()].view_as(p).clone()
                    offset += p.numel()
            outer.step()
            with torch.no_grad():
                for p, g in zip(params, global_params):
                    p.copy_(g)
            r += 1
            snapshot(r)
        if pending is not None:
            settle(sent, received)
            pipe.send(("bytes", peer, pending[0], sent.value - pending[1], received.value - pending[2]))
        pipe.send(("done", peer, {k: v.detach().numpy().copy() for k, v in global_model.state_dict().items()}))
    finally:
        if averager is not None:
            averager.shutdown()
        if dht is not None:
            dht.shutdown()
