"""Interleaved 1F1B and ZB-H1 on real gloo ranks: the tiny GPT cut into p·v pieces, the
programs of pipeline_schedules.py run as they are (lecture 9, code 4, demo 5; notes §4.7).

Introduced in lecture 9, §4.7; imported by pipeline_beyond_report.py and
tests/test_pipeline_schedules.py.

Piece g of the model lives on rank g mod p. A rank runs its program's compute ops in order.
Before a forward of piece g > 0 it receives the activation from rank (g − 1) mod p; before
a backward of a piece below the last it receives the output's gradient from rank
(g + 1) mod p. Receives block; sends do not (`isend`, all waited for at the end), and every
message carries a tag naming (direction, piece, micro-batch). So a rank waits only for an
op that `pipeline_schedules.simulate` shows runs earlier: the real run cannot deadlock
where the simulation finishes. (Demo 2's blocking sends need the lower-first ordering
instead; see pipeline.py.)

ZB-H1's B is `backward(inputs=[the piece's input])` (the gradient the rank below waits
for; the graph is kept), and its W is `backward(inputs=the piece's weights)` later. The
first piece has no input gradient, so its B does nothing and its W does the whole backward.
"""

from dataclasses import dataclass

from lecture09.parallel import pipeline
from lecture09.parallel import pipeline_schedules as ps


@dataclass(frozen=True)
class ScheduleRun:
    config: object               # tiny_gpt.GPTConfig
    model_seed: int = 0
    n_micro: int = 8
    n_virtual: int = 2


def pieces_needed(n_stages, n_virtual):
    """The model must have at least p·v pieces: embedding, n_layer blocks, head."""
    return n_stages * n_virtual


def tag(direction, piece, micro_batch, n_micro):
    """A message's tag: forward activations even, backward gradients odd."""
    return 2 * (piece * n_micro + micro_batch) + (direction == "bwd")


def schedule_worker(rank, world_size, run, x, y, schedules=("interleaved", "zb-h1")):
    """Rank body. For each schedule, one forward-backward of the batch x, y (B, T) in
    run.n_micro micro-batches; returns {schedule: {"grads": {name: grad}, "loss": float
    (the rank holding the last piece, else None), "peak": chunk micro-batches held,
    "messages": messages this rank sent}}."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from lecture01 import tiny_gpt

    p, m = world_size, run.n_micro
    results = {}
    for schedule in schedules:
        v = run.n_virtual if schedule == "interleaved" else 1
        n_pieces = p * v
        model = tiny_gpt.make_model(run.config, run.model_seed)
        layers = pipeline._layers(model)
        bounds = pipeline.stage_bounds(len(layers), n_pieces)
        chunks = [torch.nn.Sequential(*layers[slice(*bounds[c * p + rank])]) for c in range(v)]
        xs, ys = x.chunk(m), y.chunk(m)
        act_shape = (xs[0].shape[0], xs[0].shape[1], run.config.n_embd)
        inputs, outputs, upstream, sends = {}, {}, {}, []
        loss_sum, held, peak = 0.0, 0, 0
        program = ps.programs(schedule, p, m, run.n_virtual)[rank]
        for op in program:
            g, i, key = op.chunk * p + rank, op.micro_batch, (op.chunk, op.micro_batch)
            first, last = g == 0, g == n_pieces - 1
            if op.kind == "F":
                if not first:
                    buf = torch.empty(act_shape)
                    dist.recv(buf, src=(g - 1) % p, tag=tag("fwd", g - 1, i, m))
                    inputs[key] = buf.requires_grad_()
                out = chunks[op.chunk](xs[i] if first else inputs[key])
                if last:
                    loss = F.cross_entropy(out.reshape(-1, out.size(-1)), ys[i].reshape(-1))   # (b·T, vocab), (b·T,)
                    loss_sum += loss.item() / m
                    out = loss / m                   # equal micro-batches: these add up to the batch mean
                else:
                    sent = out.detach().contiguous()
                    sends.append((dist.isend(sent, dst=(g + 1) % p, tag=tag("fwd", g, i, m)), sent))
                outputs[key] = out
                held += 1
                peak = max(peak, held)
            elif op.kind == "B":
                if not last:
                    upstream[key] = torch.empty(act_shape)
                    dist.recv(upstream[key], src=(g + 1) % p, tag=tag("bwd", g + 1, i, m))
                grad = None if last else upstream[key]
                if schedule == "zb-h1":
                    if not first:                     # B: the input's gradient only; W comes later
                        outputs[key].backward(grad, inputs=[inputs[key]], retain_graph=True)
                else:
                    outputs.pop(key).backward(grad)
                    upstream.pop(key, None)
                    held -= 1
                if not first:
                    sent = inputs.pop(key).grad.contiguous()
                    sends.append((dist.isend(sent, dst=(g - 1) % p, tag=tag("bwd", g, i, m)), sent))
            else:                                     # W: the weights' gradients; the activations go
                weights = [w for w in chunks[op.chunk].parameters() if w.requires_grad]
                outputs.pop(key).backward(None if last else upstream.pop(key), inputs=weights)
                held -= 1
        for work, _ in sends:
            work.wait()
        mine = {id(w) for c in chunks for w in c.parameters()}
        results[schedule] = {"grads": {n: w.grad.clone() for n, w in model.named_parameters() if id(w) in mine},
                             "loss": loss_sum if rank == (n_pieces - 1) % p else None,
                             "peak": peak, "messages": len(sends)}
    return results
