"""One torchft replica group (one gloo rank) training the tiny GPT, in its own process.

Introduced in lecture 9, code 9 (09_torchft.py, notes §9). torchft_run starts three of
these beside a Lighthouse and kills and restarts one of them; each reports what it saw to
the parent on a queue, one message per committed or discarded step:

    ("step", replica, step, members, committed, loss, healed_bytes, heal_s)

Three ways to train, one per mode:
- "ddp": fault-tolerant data parallelism. Each step: a quorum (Manager.start_quorum), the
  forward and backward on this replica's slice of the global batch, one all-reduce of the
  flat gradient (Manager.allreduce: the mean over the replicas in this quorum), and the
  AdamW step only if Manager.should_commit() says that every member's step went through.
- "diloco": torchft.local_sgd.DiLoCo: H inner AdamW steps, then the pseudo-gradient
  (θ_global − θ_local) is all-reduced and an outer SGD (Nesterov) steps on θ_global.
- "streaming": the same class with the model cut into fragments that sync in turn.

The batches are those of compress/local_sgd.py: one generator draws the global batch each
inner step and replica r takes sequences r·b … (r+1)·b − 1. The generator's state is part
of the state dict, so a replica that heals from a peer also takes over its data position.
"""

import math
import os
import time
from dataclasses import dataclass
from datetime import timedelta

MODES = ("ddp", "diloco", "streaming")
REPLICA_ID = "replica_{}"
QUORUM_WAITS = 2             # a quorum's time limit, in collective time limits   # torchft reads the trailing digits as the replica's number


@dataclass(frozen=True)
class ReplicaSettings:
    mode: str = "diloco"
    n_replicas: int = 3          # replica groups the batch is split over (and the quorum's size)
    outer_steps: int = 12        # manager steps: committed quorums (DDP: training steps)
    inner_steps: int = 10        # H: inner steps per outer step (DiLoCo); 1 for DDP
    fragments: int = 2           # streaming: model fragments synced in turn
    sync_delay: int = 1          # streaming: τ, inner steps the fragment's all-reduce overlaps
    batch_per_replica: int = 8
    peak_lr: float = 3e-3
    outer_lr: float = 0.7        # OpenDiLoCo's outer SGD, as in compress.training.TrainSetup
    outer_momentum: float = 0.9
    model_seed: int = 0
    data_seed: int = 1
    world_seed: int = 0
    timeout_s: float = 10.0      # every collective and checkpoint transfer (never gloo's 1800 s)

    @property
    def quorum_timeout_s(self):
        """A quorum waits QUORUM_WAITS x timeout_s: a survivor may first sit out a whole
        all-reduce whose peer died (up to timeout_s) before it asks; the others must still
        be waiting then (measured: with equal timeouts, 4 replicas once timed out alone)."""
        return QUORUM_WAITS * self.timeout_s

    @property
    def total_inner_steps(self):
        return self.outer_steps * (1 if self.mode == "ddp" else self.inner_steps)


_WORLD = {}


def prepare(world_seed):
    """What every replica needs before it can start, done once in the parent: the toy
    world's tokens, and a first model and AdamW (whose first use imports torch.optim's
    machinery, ~0.8 s). Forked replicas inherit both."""
    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG

    if world_seed not in _WORLD:
        _WORLD[world_seed] = tiny_gpt.load_world_tokens(world_seed)
        tiny_gpt.make_adamw(tiny_gpt.make_model(MODEL_CONFIG), tiny_gpt.TrainConfig())
    return _WORLD[world_seed]


def fragments_of(model, n):
    """The model cut into n fragments along its layers (Streaming DiLoCo syncs one at a time).

    The pieces in order are the embedding, each transformer block, and the final LayerNorm
    with the head; they are dealt out in contiguous runs, as even as possible."""
    import torch

    pieces = [model.tok_emb, *model.blocks, torch.nn.ModuleList([model.ln_f, model.head])]
    if not 1 <= n <= len(pieces):
        raise ValueError(f"fragments must be 1..{len(pieces)}")
    bounds = [round(i * len(pieces) / n) for i in range(n + 1)]
    return [torch.nn.ModuleList(pieces[a:b]) for a, b in zip(bounds, bounds[1:])]


class _RecordingClient:
    """Stands in for the Manager's ManagerClient: passes every call through and keeps the
    replica ids of the last quorum (torchft does not keep them where a user can read them)."""

    def __init__(self, client):
        self._client = client
        self.members = ()

    def _quorum(self, *args, **kwargs):
        result = self._client._quorum(*args, **kwargs)
        self.members = tuple(sorted(int(r.split(":")[0].rsplit("_", 1)[1]) for r in result.replica_ids))
        return result

    def __getattr__(self, name):
        return getattr(self._client, name)


def _loopback_transport(timeout):
    """torchft's HTTP checkpoint transport, advertised on 127.0.0.1 instead of the hostname."""
    from torchft.checkpointing.http_transport import HTTPTransport

    class LoopbackHTTPTransport(HTTPTransport):
        def address(self):
            port = self._server.socket.getsockname()[1]
            return f"http://127.0.0.1:{port}/checkpoint/"

    return LoopbackHTTPTransport(timeout=timeout, num_chunks=0)


def state_bytes(state):
    """Bytes of every tensor in a (nested) state dict: what a healing replica downloads."""
    import torch

    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


def _named_in_model(model, fragment, tensors):
    """A fragment's {local name: tensor} renamed to the model's own parameter names."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: tensors[n] for n, p in fragment.named_parameters()}


def run_replica(replica, lighthouse_addr, settings, messages, go=None, standby=False):
    """Train until the manager has committed settings.outer_steps steps; report on `messages`.

    `go` (an Event): say "ready" and wait for it, so that every replica starts together
    (after its Manager exists) and a standby (`standby`: before its Manager exists) has
    paid for importing torch before it is needed."""
    os.environ.setdefault("RUST_LOG", "error")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import logging

    if os.environ.get("TF_DEBUG"):
        logging.basicConfig(filename=f"/tmp/tfdbg_{replica}_{os.getpid()}.log", level=logging.INFO)
        os.environ["RUST_LOG"] = "info"
    else:
        logging.disable(logging.WARNING)
    import torch
    from torch.distributed import TCPStore
    from torchft.local_sgd import DiLoCo
    from torchft.manager import Manager
    from torchft.process_group import ProcessGroupGloo

    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG

    tiny_gpt.use_deterministic_threads()
    s = settings
    timeout = timedelta(seconds=s.timeout_s)
    recipe = tiny_gpt.TrainConfig(steps=s.total_inner_steps, batch_size=s.batch_per_replica * s.n_replicas,
                                  peak_lr=s.peak_lr)
    train_data, _ = prepare(s.world_seed)
    model = tiny_gpt.make_model(MODEL_CONFIG, seed=s.model_seed)
    inner = tiny_gpt.make_adamw(model, recipe)
    gen = torch.Generator().manual_seed(s.data_seed)
    progress = {"inner": 0}     # inner steps this replica's state has taken (healed with it)
    healed = {"bytes": 0}

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict(),
                "data": gen.get_state(), "inner": torch.tensor(progress["inner"])}

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])
        gen.set_state(state["data"])
        progress["inner"] = int(state["inner"])
        # the whole download: this state plus DiLoCo's (θ_global and the outer momentum);
        # the Manager holds it in _pending_state_dict while it applies it
        healed["bytes"] = state_bytes(manager._pending_state_dict)

    def ready_then_wait():
        if go is not None:
            messages.put(("ready", replica))
            if not go.wait(600):
                raise TimeoutError("not started by the parent within 600 s")

    if standby:
        ready_then_wait()       # a Manager heartbeats: the others' quorums would wait for it
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout)
    manager = Manager(pg=ProcessGroupGloo(timeout=timeout), load_state_dict=load_state_dict,
                      state_dict=state_dict, min_replica_size=2, use_async_quorum=False,
                      timeout=timeout, quorum_timeout=timedelta(seconds=s.quorum_timeout_s),
                      connect_timeout=timeout,
                      rank=0, world_size=1, store_addr="127.0.0.1", store_port=store.port,
                      lighthouse_addr=lighthouse_addr, replica_id=REPLICA_ID.format(replica),
                      port=0, hostname="127.0.0.1", init_sync=False,
                      checkpoint_transport=_loopback_transport(timeout))
    client = manager._client = _RecordingClient(manager._client)
    if not standby:
        ready_then_wait()       # heartbeating already: the first quorum waits for all of us
    quorum_s = {"last": 0.0}
    start_quorum = manager.start_quorum

    def timed_quorum(*args, **kwargs):      # DiLoCo's hook calls it too: time every quorum
        started = time.perf_counter()
        start_quorum(*args, **kwargs)       # synchronous: includes healing from a peer
        quorum_s["last"] = time.perf_counter() - started

    manager.start_quorum = timed_quorum
    params = list(model.parameters())
    try:
        def inner_step():
            lr = tiny_gpt.lr_at(progress["inner"], recipe.steps, recipe.peak_lr)
            for group in inner.param_groups:
                group["lr"] = lr
            x, y = tiny_gpt.get_batch(train_data, recipe.batch_size, MODEL_CONFIG.block_size, gen)
            b = s.batch_per_replica
            mine = slice(replica * b, (replica + 1) * b)
            inner.zero_grad(set_to_none=True)
            loss = tiny_gpt.lm_loss(model, x[mine], y[mine])
            loss.backward()
            return loss

        def report(committed, loss):
            heal_s = quorum_s["last"] if healed["bytes"] else 0.0
            messages.put(("step", replica, manager.current_step(), client.members, committed,
                          loss.item(), healed["bytes"], heal_s))
            healed["bytes"] = 0

        if s.mode == "ddp":
            while manager.current_step() < s.outer_steps:
                manager.start_quorum()
                loss = inner_step()
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                manager.allreduce(flat).wait()
                offset = 0
                for p in params:
                    p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
                torch.nn.utils.clip_grad_norm_(params, recipe.clip_norm)
                committed = manager.should_commit()
                if committed:
                    inner.step()
                    progress["inner"] += 1
                report(committed, loss)
        else:
            fragments = [model] if s.mode == "diloco" else fragments_of(model, s.fragments)
            outer = [torch.optim.SGD(f.parameters(), lr=s.outer_lr, momentum=s.outer_momentum,
                                     nesterov=s.outer_momentum > 0) for f in fragments]
            delay = s.sync_delay if s.mode == "streaming" else 0
            with DiLoCo(manager, fragments, inner, outer, sync_every=s.inner_steps,
                        backup_device=torch.device("cpu"), pin_memory=False,
                        fragment_sync_delay=delay) as diloco:
                while manager.current_step() < s.outer_steps:
                    before = manager.current_step()
                    loss = inner_step()
                    torch.nn.utils.clip_grad_norm_(params, recipe.clip_norm)
                    inner.step()           # DiLoCo's hooks: a quorum and a sync every H/F steps
                    progress["inner"] += 1
                    if diloco._local_step == 0:          # a fragment was just synced (or discarded)
                        report(manager.current_step() != before, loss)
            # θ_global: what every replica agrees on (streaming: a fragment's local steps since
            # its last sync are not part of it)
            model.load_state_dict({**model.state_dict(), **{
                name: tensor for f, frag in zip(fragments, diloco._fragments)
                for name, tensor in _named_in_model(model, f, frag.original_parameters).items()}})
        if not math.isfinite(loss.item()):
            raise RuntimeError("loss is not finite")
        # numpy, not tensors: torch pickles a tensor for another process as shared memory,
        # which is gone once this process exits
        final = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        messages.put(("done", replica, manager.current_step(), final))
    finally:
        manager.shutdown(wait=False)
