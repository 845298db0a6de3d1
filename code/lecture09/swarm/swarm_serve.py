"""Code 6's parameter server run alone (06_swarm_http.py --serve): it prints its URL and
the workers' command line, reports progress, and on SIGTERM or Ctrl-C stops gracefully.

Introduced in lecture 9, §6 ("失败是常态 failures are the normal case"). Stopping: no new
connection is accepted, requests in flight finish (swarm_http.STOP_DRAIN_S at most), a
checkpoint of everything is written (swarm_checkpoint.py), and the status is 0.
"""

import os
import signal
import sys
import time

import torch

from lecture01.tiny_gpt import bits_per_char, load_world_tokens
from lecture09.swarm.swarm_checkpoint import CheckpointError, CheckpointWriteError
from lecture09.swarm.swarm_http import RunningServer
from lecture09.swarm.swarm_protocol import HOST


class _Terminated(Exception):
    """SIGTERM arrived: stop as gracefully as on Ctrl-C."""


def _raise_terminated(signum, frame):
    raise _Terminated()


def token_mode(config):
    """How uploads are authorised, for the server's first line: a shared token, one per
    worker (--token-file), or none."""
    if config.worker_tokens:
        return f"per-worker tokens ({len(config.worker_tokens)})"
    return "token on" if config.token else "token off"


def worker_token_flag(config):
    """What the workers' command line needs after --worker-id N to be allowed to upload."""
    if config.worker_tokens:
        return " --token TOKEN_N"
    return " --token ..." if config.token else ""


def serve(config, port, verbose, resume, script):
    """The parameter server alone, until SIGTERM or Ctrl-C: then it stops accepting, lets
    what is in flight finish, writes a checkpoint and returns 0 (--resume goes on from it);
    1, with one line, if that checkpoint cannot be written (a full disk, a read-only folder).
    script: how the student types the script's path, for the workers' command line."""
    torch.set_num_threads(1)
    try:
        server = RunningServer(config, port=port, verbose=verbose, resume=resume)
    except CheckpointError as error:
        print(f"无法继续 cannot resume: {error}", file=sys.stderr)
        return 2
    except OSError as error:   # e.g. the port is taken
        print(f"无法监听 cannot listen on {HOST}:{port}: {error}", file=sys.stderr)
        return 1
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    swarm = server.swarm
    try:
        if swarm.resumed_from:
            path, version = swarm.resumed_from
            print(f"从检查点继续 resumed from {path} at version {version} "
                  f"({len(swarm.round)} uploads in the round)", flush=True)
        print(f"参数服务器 server: {server.url} ({config.update}, {config.world_size} workers, "
              f"{config.total_updates} steps, {token_mode(config)})", flush=True)
        print(f"每个工作者一个终端 one terminal per worker, N = 0 .. {config.world_size - 1}:", flush=True)
        print(f"  python3 {script} --worker {server.url} --worker-id N" + worker_token_flag(config), flush=True)
        if config.worker_tokens:
            print("  TOKEN_N：--token-file 里工作者 N 那一行的 token (worker N's own token from the file)", flush=True)
        print(f"服务器的进程号 server pid {os.getpid()}（Ctrl-C 或 SIGTERM 停下，都先写检查点 checkpoint first）",
              flush=True)
        _, val_tokens = load_world_tokens()
        shown = swarm.version
        while not swarm.done:
            with swarm.changed:
                swarm.changed.wait_for(lambda: swarm.version > shown, timeout=1.0)
                version, loss = swarm.version, swarm.last_loss
            if version > shown and (version % 10 == 0 or version == config.total_updates):
                print(f"  步 step {version}/{config.total_updates}  平均损失 mean loss {loss:.4f}", flush=True)
            shown = version
        with swarm.lock:
            bpc = bits_per_char(swarm.model, val_tokens)
        print(f"训练完成 done: 验证 bpc {bpc:.4f}; /status 仍可查询, Ctrl-C 退出 to quit", flush=True)
        while True:
            time.sleep(3600)
    except (KeyboardInterrupt, _Terminated) as stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # one stop at a time
        why = "Ctrl-C" if isinstance(stop, KeyboardInterrupt) else "SIGTERM"
        try:
            saved = server.stop()
        except CheckpointWriteError as error:   # the state since the last good checkpoint is lost
            print(f"\n已停止 stopped ({why}), 检查点没写成 checkpoint failed at {error}", file=sys.stderr, flush=True)
            return 1
        if saved is None:
            print(f"\n已停止 stopped ({why}) at version {swarm.version}; no checkpoint (--checkpoint-dir '')",
                  flush=True)
        else:
            path, n_bytes, seconds = saved
            print(f"\n已停止 stopped ({why}) at version {swarm.version}: checkpoint {path} ({n_bytes:,} bytes, "
                  f"{seconds * 1000:.0f} ms); --resume {path.parent} goes on", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.close()
