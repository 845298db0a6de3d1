"""Code 02's demo 3: the bucketed-overlap variant on gloo ranks under torch.profiler (lecture 9,
notes §2.5). The last of the steps is profiled, the others warm up; rank 0's Chrome trace (openable
in Perfetto or chrome://tracing) is read back, and the console timeline, the exposed and the
hidden communication are computed from the trace's own events:

  backward     the autograd engine's "autograd::engine::evaluate_function: ..." ops;
  all-reduce   "gloo:all_reduce", recorded on gloo's worker thread for as long as it runs.

Beside them, the script's own clock (data_parallel.Timeline): backward's end and the wait in
BucketedSync.finish. Imported by 02_data_parallel.py; the worker lives here for "spawn".
"""

import contextlib
import json
import os
import tempfile

import torch

from lecture01 import tiny_gpt
from lecture09.parallel import data_parallel as dp

BACKWARD = "autograd::engine::evaluate_function: "
ALL_REDUCE = "gloo:all_reduce"


@contextlib.contextmanager
def quiet_stderr():
    """The profiler's own library prints a line on fd 2 when it starts and stops."""
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def merged(intervals):
    """The union of (start, end) intervals as a sorted list of disjoint ones."""
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def overlap(intervals, window):
    a, b = window
    return sum(max(0.0, min(end, b) - max(start, a)) for start, end in merged(intervals))


def read_trace(path):
    """From a Chrome trace: {"forward": (start, end), "backward": [intervals], "all_reduce":
    [intervals]} in seconds from the step's first event on the main thread."""
    with open(path, encoding="utf-8") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    backward = [e for e in events if e["name"].startswith(BACKWARD)]
    main_tid = backward[0]["tid"]
    comm = [e for e in events if e["name"] == ALL_REDUCE]
    origin = min(e["ts"] for e in events if e["tid"] == main_tid)

    def span(e):
        return ((e["ts"] - origin) * 1e-6, (e["ts"] + e["dur"] - origin) * 1e-6)

    back = [span(e) for e in backward]
    main_end = max(span(e)[1] for e in events if e["tid"] == main_tid)
    return {"forward": (0.0, min(a for a, _ in back)), "backward": merged(back),
            "all_reduce": sorted(span(e) for e in comm), "main_end": main_end, "n_events": len(events)}


def summary(trace):
    """Backward's end, the communication's busy time, how much of it ran after backward
    (exposed) or before backward ended (hidden: code 2's comm − exposed), and how long the main thread still worked after backward
    (the wait, the division by W, the copies back: what the script's clock calls exposed)."""
    back_start, back_end = trace["backward"][0][0], trace["backward"][-1][1]
    comm = merged(trace["all_reduce"])
    busy = sum(b - a for a, b in comm)
    hidden = overlap(comm, (back_start, back_end))
    exposed = max(0.0, max((b for _, b in comm), default=back_end) - back_end)
    return {"backward_end": back_end, "comm": busy, "hidden": hidden, "exposed": exposed,
            "after_backward": trace["main_end"] - back_end}


def profile_worker(rank, world_size, setup, trace_path=None):
    """Train the bucketed variant setup.steps steps, profiling the last; rank 0 writes the
    trace (to trace_path, or a temporary file it deletes) and returns what it read from it."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    tiny_gpt.use_deterministic_threads()
    train_tokens, _ = tiny_gpt.load_world_tokens(setup.world_seed)
    model, optimizer = dp.make_model_and_optimizer(setup)
    sync = dp.BucketedSync(model, world_size, setup.bucket_bytes)
    gen = torch.Generator().manual_seed(setup.data_seed)
    last = setup.steps - 1
    for step in range(setup.steps):
        x, y = tiny_gpt.get_batch(train_tokens, setup.batch_size, model.config.block_size, gen)
        x, y = dp.shard(x, rank, world_size), dp.shard(y, rank, world_size)
        dist.barrier()
        timeline = dp.Timeline()
        sync.reset(timeline)
        optimizer.zero_grad(set_to_none=True)
        prof = profile(activities=[ProfilerActivity.CPU]) if step == last else None
        if prof is not None:
            with quiet_stderr():
                prof.start()
        t0 = timeline.now()
        loss = tiny_gpt.lm_loss(model, x, y)
        t1 = timeline.now()
        loss.backward()
        t2 = timeline.now()
        n_buckets = sync.finish()
        t3 = timeline.now()
        if prof is not None:
            with quiet_stderr():
                prof.stop()
        dp.optimizer_step(model, optimizer, setup, step)
    if rank != 0:
        return None
    path = trace_path or os.path.join(tempfile.gettempdir(), f"fm_course_trace_{os.getpid()}.json")
    prof.export_chrome_trace(path)
    trace = read_trace(path)
    if trace_path is None:
        os.remove(path)
    own = {"forward": t1 - t0, "backward": t2 - t1, "exposed": t3 - t2,
           "buckets": sorted((s, e) for label, s, e in timeline.events if label.startswith("桶"))}
    return {"trace": trace, "summary": summary(trace), "own": own, "n_buckets": n_buckets}
