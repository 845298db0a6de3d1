"""The parameter server's checkpoints (lecture 9, code 6): everything needed to go on after
a crash or a restart, written so that a crash mid-write never leaves a bad file behind.

Introduced in lecture 9, §6 ("失败是常态 failures are the normal case").

A checkpoint holds the weights, the AdamW state, the version (= steps taken), the round
in progress (uploads accepted but not yet stepped), the per-step losses and the counts,
and the settings that must not change across a restart. It is written atomically: to a
temporary file in the same folder, flushed and fsync'ed, then renamed over (os.replace);
a reader sees the old file or the new one, never half of one. The file starts with a
magic line and the SHA-256 of the rest, so a truncated or damaged file is refused with
one line instead of being half-loaded. The folder keeps the newest KEEP files.
"""

import hashlib
import io
import os
import re
import time
from pathlib import Path

import torch

MAGIC = b"tiny-swarm-checkpoint 1\n"
KEEP = 2                       # checkpoints kept in the folder: the newest and the one before
PATTERN = "checkpoint-*.pt"
# Settings a resumed server must share with the one that wrote the checkpoint.
# The wire format and the top-k ratio too: a swarm resumed with another --compression refuses
# every worker's upload (400 wrong_compression), and another ratio changes check 8's bound.
FIXED_SETTINGS = ("world_size", "update", "steps", "peak_lr", "clip_norm", "model_seed", "max_staleness",
                  "aggregator", "byzantine", "update_clip", "compression", "topk_ratio")
SAVED_SINCE_ISSUE_45 = ("compression", "topk_ratio")   # older checkpoints lack them: not checked


class CheckpointError(Exception):
    """A checkpoint that cannot be used (missing, damaged, or for other settings)."""
    exit_status = 2


class CheckpointWriteError(Exception):
    """A checkpoint that could not be written (a full disk, a read-only folder): one line."""


def checkpoint_path(directory, version):
    return Path(directory) / f"checkpoint-{version:06d}.pt"


NAME = re.compile(r"checkpoint-([0-9]{1,18})\.pt")
TEMPORARY = re.compile(r"\.checkpoint-[0-9]{1,18}\.pt\.([0-9]{1,10})\.tmp")


def checkpoints_in(directory):
    """The folder's checkpoints, oldest first, by the version in the name as a number (as
    text, checkpoint-1000000.pt would sort before checkpoint-999999.pt)."""
    found = [(int(m.group(1)), path) for path in Path(directory).glob(PATTERN)
             if (m := NAME.fullmatch(path.name))]
    return [path for _, path in sorted(found)]


def remove_dead_temporaries(directory):
    """Delete the temporary files of writers that died mid-write (SIGKILL, power loss):
    the process id in the name is no longer running. Returns how many."""
    removed = 0
    for path in Path(directory).glob(".checkpoint-*.tmp"):
        found = TEMPORARY.fullmatch(path.name)
        if found is None or int(found.group(1)) == os.getpid() or _alive(int(found.group(1))):
            continue
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def _alive(pid):
    if os.name != "posix":
        return True               # no cheap check: leave it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def encode(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode(data, name):
    """The state dict in a checkpoint file's bytes, after checking magic and checksum."""
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{name} is not a swarm checkpoint (no '{MAGIC.decode().strip()}' line)")
    digest, _, payload = data[len(MAGIC):].partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CheckpointError(f"{name} is truncated or damaged (its SHA-256 does not match)")
    return torch.load(io.BytesIO(payload), weights_only=True)


def write_atomically(path, data):
    """data to path: a temporary file in the same folder, fsync, rename; then the folder."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:   # a full disk, a read-only folder: no partial file stays behind
        temporary.unlink(missing_ok=True)
        raise
    if os.name == "posix":   # the rename itself reaches the disk (Windows cannot open a folder)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def save(state, directory):
    """Write one checkpoint of `state` (a dict with "version"); keep the newest KEEP.
    Returns (path, bytes, seconds)."""
    start_s = time.perf_counter()
    Path(directory).mkdir(parents=True, exist_ok=True)
    data = encode(state)
    path = checkpoint_path(directory, state["version"])
    write_atomically(path, data)
    for old in checkpoints_in(directory)[:-KEEP]:
        old.unlink(missing_ok=True)
    remove_dead_temporaries(directory)
    return path, len(data), time.perf_counter() - start_s


def load(where):
    """The state in `where`: a checkpoint file, or a folder (its newest checkpoint).

    A damaged newest file is refused, not skipped: the message names the one before it,
    which is kept, so the student chooses to go back a few steps."""
    where = Path(where)
    if where.is_dir():
        found = checkpoints_in(where)
        if not found:
            raise CheckpointError(f"no checkpoint in {where} (files named {PATTERN})")
        path = found[-1]
        earlier = found[:-1]
    elif where.is_file():
        path, earlier = where, []
    else:
        raise CheckpointError(f"no such checkpoint file or folder: {where}")
    try:
        return decode(path.read_bytes(), path.name), path
    except CheckpointError as error:
        hint = f"; the previous one is kept: --resume {earlier[-1]}" if earlier else ""
        raise CheckpointError(f"{error}{hint}") from None
    except Exception as error:   # a checksum-valid file torch cannot read (a pickle, another version's format)
        first = (str(error).strip().splitlines() or [""])[0]
        raise CheckpointError(fitted(f"{path.name} cannot be read: {type(error).__name__}: {first}")) from None


STATE_KEYS = ("version", "settings", "weights", "optimizer", "round", "step_losses", "last_loss", "last_skip",
              "counts", "changed_entries", "seen", "aggregator")


def _tensor_like(value, shape, what):
    """Refuse (one line) anything but a float32 tensor of exactly `shape` with finite values:
    copy_ would broadcast a (1,) tensor over a whole LayerNorm gain."""
    import torch
    if not torch.is_tensor(value):
        raise CheckpointError(f"{what}: {type(value).__name__}, want a tensor")
    if tuple(value.shape) != tuple(shape):
        raise CheckpointError(f"{what}: shape {tuple(value.shape)}, want {tuple(shape)}")
    if value.dtype != torch.float32:
        raise CheckpointError(f"{what}: {str(value.dtype).removeprefix('torch.')}, want float32")
    if not bool(torch.isfinite(value).all()):
        raise CheckpointError(f"{what}: non-finite values")


def _number(value, what, integer=False, lowest=None):
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or (lowest is not None and value < lowest):
        raise CheckpointError(f"{what} is {type(value).__name__} {str(value)[:20]}, not a "
                              f"{'non-negative integer' if integer else 'number'}")


def check_contents(state, name, shapes, param_order, total_updates):
    """Refuse, in one line naming the file, a checkpoint whose checksum is right but whose
    contents this server cannot take: a missing key (an older format), another model's
    weights or shapes, AdamW state of the wrong shape or dtype, a round or counts that are
    not what the server writes. shapes: {name: shape}; param_order: the parameter names
    in the optimizer's order (its state is keyed by position)."""
    import math

    import torch
    try:
        if not isinstance(state, dict):
            raise CheckpointError("is not a dict of state")
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            raise CheckpointError(f"lacks {', '.join(missing)[:40]} (another format)")
        if not isinstance(state["settings"], dict):
            raise CheckpointError("has settings that are not a dict")
        _number(state["version"], "version", integer=True, lowest=0)
        if state["version"] > total_updates:
            raise CheckpointError(f"is at version {state['version']}, beyond this run's {total_updates} steps")
        weights = state["weights"]
        if not isinstance(weights, dict) or set(weights) != set(shapes):
            raise CheckpointError("holds another model's parameters")
        for key, shape in shapes.items():
            _tensor_like(weights[key], shape, f"weight {key}")
        optimizer = state["optimizer"]
        if not isinstance(optimizer, dict) or set(optimizer) != {"state", "param_groups"}:
            raise CheckpointError("has no AdamW state_dict")
        groups = optimizer["param_groups"]
        if (not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups)
                or [i for g in groups for i in g.get("params", [])] != list(range(len(param_order)))):
            raise CheckpointError("has AdamW parameter groups for another model")
        adam_state = optimizer["state"]
        if not isinstance(adam_state, dict) or not set(adam_state) <= set(range(len(param_order))):
            raise CheckpointError("has AdamW state for another model")
        for index, entry in adam_state.items():
            key = param_order[index]
            if not isinstance(entry, dict) or set(entry) != {"step", "exp_avg", "exp_avg_sq"}:
                raise CheckpointError(f"AdamW {key}: not step, exp_avg, exp_avg_sq")
            _tensor_like(entry["step"], (), f"AdamW step {key}")
            _tensor_like(entry["exp_avg"], shapes[key], f"exp_avg {key}")
            _tensor_like(entry["exp_avg_sq"], shapes[key], f"exp_avg_sq {key}")
        if not isinstance(state["round"], dict):
            raise CheckpointError("has a round that is not a dict")
        for worker, entry in state["round"].items():
            if not isinstance(worker, str) or not isinstance(entry, dict) or set(entry) != {"grads", "loss"}:
                raise CheckpointError("has a malformed upload in its round")
            if not isinstance(entry["grads"], dict) or set(entry["grads"]) != set(shapes):
                raise CheckpointError(f"has an upload of {worker[:20]} for another model")
            for key, shape in shapes.items():
                _tensor_like(entry["grads"][key], shape, f"{worker[:20]}'s upload {key}")
            _number(entry["loss"], f"upload of {worker[:20]}: loss")
        for key in ("step_losses", "changed_entries"):
            if not isinstance(state[key], list):
                raise CheckpointError(f"has {key} that is not a list")
            for value in state[key]:
                _number(value, key, integer=key == "changed_entries")
        for key in ("counts", "seen"):
            if not isinstance(state[key], dict) or not all(isinstance(k, str) for k in state[key]):
                raise CheckpointError(f"has {key} that is not a dict of names")
            for value in state[key].values():
                _number(value, key, integer=True, lowest=0)
        if state["last_loss"] is not None:
            _number(state["last_loss"], "last_loss")
        if state["last_skip"] is not None and not isinstance(state["last_skip"], str):
            raise CheckpointError("has a last_skip that is not text")
        aggregator = state["aggregator"]
        if not isinstance(aggregator, dict) or not set(aggregator) <= {"center"}:
            raise CheckpointError("has an aggregator state this server does not write")
        if aggregator.get("center") is not None:
            _tensor_like(aggregator["center"], (sum(math.prod(s) for s in shapes.values()),), "the aggregator's center")
    except CheckpointError as error:
        raise CheckpointError(fitted(f"{name}: {error}")) from None


def fitted(text, width=76):
    """text cut to `width` display columns (CJK counts 2), with … if cut: with the 24 of
    swarm_serve's "无法继续 cannot resume: " the line fits 100 columns."""
    from lecture01.console import display_width
    if display_width(text) <= width:
        return text
    while display_width(text) > width - 1:
        text = text[:-1]
    return text + "…"


def check_settings(state, config):
    """Refuse to resume with settings that differ from the checkpoint's (one line)."""
    saved = state["settings"]
    for name in FIXED_SETTINGS:
        if name not in saved and name in SAVED_SINCE_ISSUE_45:
            continue                 # --serve's default is not ServerConfig's: nothing to compare with
        if name not in saved:        # a checkpoint from before the setting was saved: its default
            saved = {**saved, name: getattr(type(config)(), name)}
        if saved[name] != getattr(config, name):
            flag = {"world_size": "workers", "model_seed": "seed"}.get(name, name).replace("_", "-")
            raise CheckpointError(fitted(f"the checkpoint was made with --{flag} {saved[name]}, "
                                         f"not {getattr(config, name)}"))
