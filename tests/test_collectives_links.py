"""Code 1's demo 7 (network/collectives_links.py, §1.6): the collectives of ranks/ on real gloo
ranks behind emulated links (network/gloo_links.py): the model's arithmetic by hand, the
observation on each branch, the flag, and one small run on 3 real ranks (sweep: spawning
3 torch processes costs more than 3 s on 2 shared cores)."""

import pytest

from lecture09.ranks import collectives as C
from lecture09.network import collectives_links as L
from conftest import LECTURE09, load_script


def test_model_and_lockstep_round_starts_by_hand():
    # α = 10 ms, 8 Mbit/s = 1 byte per µs: ring all-reduce of 12 fp32 on 3 ranks, chunks of 4 = 16 bytes
    rounds = C.schedule("all-reduce", "ring", 3)
    offsets = L.round_offsets(rounds, C.chunk_bounds(12, 3), 0.01, 8e6)
    assert offsets == pytest.approx([0, 0.010016, 0.020032, 0.030048])
    stats = C.schedule_cost(rounds, 12, 3)
    assert L.model_s(stats.rounds, stats.path_bytes, 0.01, 8e6) == pytest.approx(4 * 0.010016)
    # naive reduce, 1 KiB: 2 rounds of the whole vector
    naive = C.schedule_cost(C.schedule("reduce", "naive", 3), 256, 3)
    assert L.model_s(naive.rounds, naive.path_bytes, 0.01, 8e6) == pytest.approx(2 * (0.01 + 1024e-6))


def test_planned_seconds_sums_every_key_size_and_mode():
    job = L.LinksJob(0.01, 8e6, sizes=(12,), keys=(("all-reduce", "ring"),), start_margin_s=0.0)
    assert L.planned_seconds(3, job) == pytest.approx(2 * 4 * 0.010016)


def row(collective, algorithm, n_bytes, model, free, lockstep):
    return {"collective": collective, "algorithm": algorithm, "bytes": n_bytes, "model_s": model,
            "free_s": free, "lockstep_s": lockstep}


AGREE = [row("all-reduce", "naive", 1024, 0.060, 0.062, 0.061), row("all-reduce", "tree", 1024, 0.040, 0.041, 0.041),
         row("all-reduce", "ring", 1024, 0.060, 0.061, 0.062), row("all-reduce", "naive", 2**19, 0.31, 0.32, 0.31),
         row("all-reduce", "tree", 2**19, 0.21, 0.21, 0.21), row("all-reduce", "ring", 2**19, 0.12, 0.125, 0.12)]


def test_observation_when_every_row_agrees():
    text = L.links_observation(AGREE, 0.01, 100e6)
    # pairs the model tells apart by > 1.25x: 1 KiB naive/tree, ring/tree; 512 KiB all three pairs
    assert "的 5 对算法里，自由运行实测有 5 对快慢相同。" in text
    assert "1 KiB 时环 ÷ 树 模型 1.50、实测 1.49" in text and "512 KiB 时环 ÷ 树 模型 0.57、实测 0.60" in text
    assert "每一行的 实测 ÷ 模型 都在 [1/1.25, 1.25] 之内" in text


def test_observation_when_lockstep_explains_every_departure_and_the_ranking_flips():
    rows = AGREE[:3] + [row("all-reduce", "naive", 2**19, 0.31, 0.10, 0.31)] + AGREE[4:]
    text = L.links_observation(rows, 0.01, 100e6)
    assert "的 5 对算法里，自由运行实测有 3 对快慢相同；不同的：" in text
    assert "all-reduce 512 KiB 模型 tree 快于 naive，实测相反" in text
    assert "1 行自由运行的 实测 ÷ 模型 在 [1/1.25, 1.25] 之外（自由→按轮同步：all-reduce naive 512 KiB 0.32→1.00）" in text
    assert "把它们全拉回了容差之内" in text


def test_observation_when_lockstep_explains_none_or_some():
    slow = [row("reduce", "ring", 1024, 0.03, 0.05, 0.05)]
    assert "按轮同步也没有拉回来" in L.links_observation(slow, 0.01, 100e6)
    mixed = slow + [row("reduce", "naive", 1024, 0.03, 0.01, 0.03)]
    text = L.links_observation(mixed, 0.01, 100e6)
    assert "按轮同步拉回了 1 行" in text and "没拉回的 reduce ring 1 KiB" in text


def test_the_links_flag_selects_demo_7_and_builds_the_job():
    code1 = load_script(LECTURE09 / "01_collectives.py")
    args, _, _ = code1.parse_args(["--links", "5", "50"])
    assert args.demo == "7" and args.links_job.latency_s == 0.005 and args.links_job.bandwidth_bps == 50e6
    args, _, _ = code1.parse_args(["--demo", "7"])
    assert (args.links_job.latency_s, args.links_job.bandwidth_bps) == (0.02, 100e6)
    args, _, _ = code1.parse_args(["--links", "0", "100000"])         # zero latency is legal
    assert args.links_job.latency_s == 0


P, N = 3, 12500                 # 3 ranks, 50 kB vectors
ALPHA, BW = 0.05, 8e6           # 50 ms, 1 byte per µs: a 50 kB message serialises in 50 ms


@pytest.fixture(scope="module")
def small_run():
    from lecture09.ranks.gloo_ranks import run_ranks
    job = L.LinksJob(ALPHA, BW, sizes=(N,), keys=(("reduce", "naive"), ("all-reduce", "ring"), ("broadcast", "tree")))
    return {(r["collective"], r["algorithm"]): r for r in L.table_rows(run_ranks(L.links_worker, P, args=(job,),
                                                                                   timeout_s=120), job, P)}


@pytest.mark.slow
@pytest.mark.sweep
def test_results_equal_expected_and_bytes_equal_schedule_cost(small_run):
    for r in small_run.values():
        assert r["ok"]
        assert r["sent"] == r["schedule_sent"] and sum(r["sent"]) > 0


@pytest.mark.slow
@pytest.mark.sweep
def test_measured_is_the_model_in_lockstep_and_for_the_ring(small_run):
    for r in small_run.values():      # the emulator's tolerance: ±25% (README's lateness, 3 processes)
        assert L.within(r["lockstep_s"] / r["model_s"]), r
    ring = small_run[("all-reduce", "ring")]
    assert L.within(ring["free_s"] / ring["model_s"]), ring


@pytest.mark.slow
@pytest.mark.sweep
def test_free_running_naive_reduce_is_one_hop_by_hand(small_run):
    """Both non-roots send at once on their own links; the root's downlink is not limited:
    α + 50 kB / (1 byte/µs) = 100 ms, where the model's two rounds say 200 ms."""
    naive = small_run[("reduce", "naive")]
    assert naive["model_s"] == pytest.approx(2 * (ALPHA + 4 * N * 8 / BW))
    assert L.within(naive["free_s"] / (ALPHA + 4 * N * 8 / BW))
    assert not L.within(naive["free_s"] / naive["model_s"])
