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
import time
from pathlib import Path

import torch

MAGIC = b"tiny-swarm-checkpoint 1\n"
KEEP = 2                       # checkpoints kept in the folder: the newest and the one before
PATTERN = "checkpoint-*.pt"
# Settings a resumed server must share with the one that wrote the checkpoint.
FIXED_SETTINGS = ("world_size", "update", "steps", "peak_lr", "clip_norm", "model_seed", "max_staleness",
                  "aggregator", "byzantine", "update_clip")


class CheckpointError(Exception):
    """A checkpoint that cannot be used (missing, damaged, or for other settings)."""
    exit_status = 2


class CheckpointWriteError(Exception):
    """A checkpoint that could not be written (a full disk, a read-only folder): one line."""


def checkpoint_path(directory, version):
    return Path(directory) / f"checkpoint-{version:06d}.pt"


def checkpoints_in(directory):
    """The folder's checkpoints, oldest first (the version is in the name, zero-padded)."""
    return sorted(Path(directory).glob(PATTERN))


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
    except Exception as error:   # a checksum-valid file torch cannot read (another version's format)
        raise CheckpointError(f"{path.name} cannot be read: {type(error).__name__}: {error}") from None


def check_settings(state, config):
    """Refuse to resume with settings that differ from the checkpoint's (one line)."""
    saved = state["settings"]
    for name in FIXED_SETTINGS:
        if name not in saved:        # a checkpoint from before the setting was saved: its default
            saved = {**saved, name: getattr(type(config)(), name)}
        if saved[name] != getattr(config, name):
            flag = {"world_size": "workers", "model_seed": "seed"}.get(name, name).replace("_", "-")
            raise CheckpointError(f"the checkpoint was made with --{flag} {saved[name]}, not "
                                  f"{getattr(config, name)}: resume with the same settings")
