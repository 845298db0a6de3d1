"""gloo_ranks: real ranks come back in rank order, collectives work, failures and hangs
are reported quickly and leave no process behind."""

import multiprocessing
import os
import time

import pytest

from lecture09.ranks import gloo_ranks
from lecture09.ranks.gloo_ranks import RankFailed, free_port, run_ranks


# Workers live at module level: the "spawn" start method pickles them by name.

def report_and_all_reduce(rank, world_size, tag):
    """Rank r contributes the vector (r+1, 2(r+1), 3(r+1)): the sum is known by hand.
    Also reports whether Ctrl-C is ignored here (it must be: only the parent handles it)."""
    import signal

    import torch
    import torch.distributed as dist
    x = torch.tensor([1.0, 2.0, 3.0]) * (rank + 1)
    dist.all_reduce(x)
    return rank, world_size, tag, signal.getsignal(signal.SIGINT) is signal.SIG_IGN, torch.get_num_threads(), x


def fail_on_rank_one(rank, world_size, pid_dir):
    """Rank 1 raises; the others wait in a collective that can never complete."""
    import torch
    import torch.distributed as dist
    (pid_dir / f"{rank}.pid").write_text(str(os.getpid()))
    if rank == 1:
        raise ValueError("boom on purpose\nsecond line")
    dist.all_reduce(torch.ones(1))     # blocks: rank 1 never joins
    return rank


def sleep_forever(rank, world_size, pid_dir):
    (pid_dir / f"{rank}.pid").write_text(str(os.getpid()))
    time.sleep(600)


def avg_and_bf16(rank, world_size):
    """The gloo 'pitfalls' earlier notes warned of, measured: AVG against SUM / W on values
    whose mean is not a short binary fraction, and bf16 all-reduce and all-gather."""
    import torch
    import torch.distributed as dist
    x = torch.tensor([0.1, 1 / 3, 7.0, -2.5]) * (rank + 1)
    summed, averaged = x.clone(), x.clone()
    dist.all_reduce(summed, op=dist.ReduceOp.SUM)
    dist.all_reduce(averaged, op=dist.ReduceOp.AVG)
    b = (torch.arange(4, dtype=torch.bfloat16) + rank)
    dist.all_reduce(b)
    gathered = [torch.empty(2, dtype=torch.bfloat16) for _ in range(world_size)]
    dist.all_gather(gathered, torch.full((2,), float(rank), dtype=torch.bfloat16))
    return summed / world_size, averaged, b, torch.stack(gathered)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pids(pid_dir):
    return [int(f.read_text()) for f in pid_dir.glob("*.pid")]


def test_free_port_is_bindable():
    import socket
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_results_in_rank_order_and_all_reduce_is_the_sum():
    import signal

    import torch
    before = signal.getsignal(signal.SIGINT)
    results = run_ranks(report_and_all_reduce, 3, args=("x",))
    assert signal.getsignal(signal.SIGINT) is before          # the parent's handler is back
    assert [r[:5] for r in results] == [(0, 3, "x", True, 1), (1, 3, "x", True, 1), (2, 3, "x", True, 1)]
    for *_, x in results:
        assert torch.equal(x, torch.tensor([6.0, 12.0, 18.0]))   # (1 + 2 + 3) x (1, 2, 3)


def test_failing_rank_raises_quickly_and_leaves_nothing(tmp_path):
    started = time.monotonic()
    with pytest.raises(RankFailed) as info:
        run_ranks(fail_on_rank_one, 2, args=(tmp_path,), timeout_s=60)
    assert time.monotonic() - started < 30            # not the 60 s timeout
    assert info.value.rank == 1
    assert "ValueError: boom on purpose" in str(info.value)
    assert "\n" not in str(info.value)                # one line
    assert "Traceback" in info.value.details
    assert isinstance(info.value, RuntimeError)
    pids = _pids(tmp_path)
    assert len(pids) == 2
    assert not any(_alive(pid) for pid in pids)
    assert not multiprocessing.active_children()


def test_timeout_is_enforced(tmp_path):
    started = time.monotonic()
    with pytest.raises(RankFailed) as info:
        run_ranks(sleep_forever, 2, args=(tmp_path,), timeout_s=2)
    assert 2 <= time.monotonic() - started < 2 + 3 * gloo_ranks.TERMINATE_GRACE_S
    assert info.value.rank is None and "within 2 s" in info.value.reason
    assert not any(_alive(pid) for pid in _pids(tmp_path))   # those that got as far as writing one
    assert not multiprocessing.active_children()             # every child joined, none left running


def test_world_size_zero_is_refused():
    with pytest.raises(ValueError):
        run_ranks(report_and_all_reduce, 0, args=("x",))


def test_port_is_free_sees_a_listening_socket():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not gloo_ranks.port_is_free(sock.getsockname()[1])
    assert gloo_ranks.port_is_free(free_port())


def test_avg_and_bf16_work_on_gloo_with_the_pinned_torch():
    """On torch 2.13.0 (requirements.txt), 4 gloo ranks: ReduceOp.AVG equals SUM / 4 bit for
    bit here, and bf16 all-reduce and all-gather give the exact sums (small integers are exact
    in bf16). The code still sums and divides, so every variant does the same arithmetic; the
    notes no longer call these gloo pitfalls (issue 20, 7)."""
    import torch
    for mean_of_sum, averaged, b, gathered in run_ranks(avg_and_bf16, 4, timeout_s=120):
        assert torch.equal(mean_of_sum, averaged)
        assert b.dtype == torch.bfloat16 and b.tolist() == [6.0, 10.0, 14.0, 18.0]
        assert gathered.tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
