"""Lecture 9 code 4, demo 7: context parallelism. Layouts and the causal load by hand, the
bytes formulas, ring attention and Ulysses on real gloo ranks against the whole-sequence
attention layer for p = 2, 3, 4 and both layouts, every branch of the observations, flags."""

import pytest

from conftest import LECTURE09, SWEEP_TIER, load_script, main_quietly, shared_quick_run

from lecture09.parallel import context_parallel as cp
from lecture09.parallel import context_parallel_report as report

code4 = load_script(LECTURE09 / "04_pipeline.py")


def test_layouts_by_hand():
    assert [cp.positions("contiguous", r, 2, 8) for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [cp.positions("zigzag", r, 2, 8) for r in range(2)] == [[0, 1, 6, 7], [2, 3, 4, 5]]
    for layout in cp.LAYOUTS:
        for p in (2, 3, 4):
            held = sorted(i for r in range(p) for i in cp.positions(layout, r, p, 24))
            assert held == list(range(24))


def test_causal_load_by_hand_and_zigzag_balances_it():
    # T = 8, p = 2: position i attends to i + 1 keys
    assert [cp.unmasked_pairs("contiguous", r, 2, 8) for r in range(2)] == [1 + 2 + 3 + 4, 5 + 6 + 7 + 8]
    assert [cp.unmasked_pairs("zigzag", r, 2, 8) for r in range(2)] == [1 + 2 + 7 + 8, 3 + 4 + 5 + 6]
    for p in (2, 3, 4, 8):
        for t in (2 * p, 8 * p, 96 * p):
            zig = [cp.unmasked_pairs("zigzag", r, p, t) for r in range(p)]
            cont = [cp.unmasked_pairs("contiguous", r, p, t) for r in range(p)]
            assert len(set(zig)) == 1 and sum(zig) == sum(cont) == t * (t + 1) // 2
            assert [cp.tiles("contiguous", r, p) for r in range(p)] == [4 * r + 3 for r in range(p)]
            assert {cp.tiles("zigzag", r, p) for r in range(p)} == {2 * p + 1}


def test_bytes_by_hand():
    # ring: 2 directions × (p − 1) shifts × (K and V) × T/p × C × 2 bytes
    assert cp.ring_bytes_per_rank(1024, 64, 4) == 2 * 3 * 2 * 256 * 64 * 2
    # Ulysses: 2 directions × 4 all-to-alls × (p − 1)/p × T/p × C × 2 bytes
    assert cp.ulysses_bytes_per_rank(1024, 64, 4) == 2 * 4 * 3 * 256 * 64 * 2 // 4
    for p, ring, uly in report.bytes_rows():
        if uly is not None:
            assert ring / uly == pytest.approx(p / 2)
        else:
            assert report.BIG["n_head"] % p


def test_bad_cases_raise():
    with pytest.raises(ValueError, match="equal pieces"):
        cp.check_case(cp.CPCase(seq_len=12), 4, "zigzag")
    with pytest.raises(ValueError, match="divisible"):
        cp.check_case(cp.CPCase(n_head=4), 3, "contiguous", "ulysses")


@pytest.mark.parametrize("p", [2, pytest.param(3, marks=SWEEP_TIER), 4])
def test_ring_and_ulysses_equal_the_whole_sequence(p):
    case = cp.CPCase(seq_len=48, batch=2)
    r = report.check_context_parallel(case, p)
    for (method, layout), s in r.items():
        if method == "ulysses" and case.n_head % p:
            assert "skipped_because" in s
            continue
        assert max(s["y"], s["x_grad"], s["grads"]) <= report.CP_RTOL, (method, layout, s)
        assert s["grads_agree"]
        if method == "ring" and layout == "contiguous":       # rank r needs blocks 0..r only
            assert s["blocks"] == [k + 1 for k in range(p)] and s["skipped"] == [p - 1 - k for k in range(p)]
        if method == "ring" and layout == "zigzag":
            assert s["blocks"] == [p] * p


# ---------------------------------------------------------------------------
# Quick run and the observations' branches
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def quick7():
    return shared_quick_run("04_pipeline.py")              # demo 7 is part of it


def test_quick_demo7(quick7):
    r = quick7[0]["demo7"]
    assert all(max(s["y"], s["x_grad"], s["grads"]) <= report.CP_RTOL for s in r["checks"].values())
    assert "都和一个进程算整个序列的一致" in quick7[1] and "每个进程都是" in quick7[1]


def observations(r, case=cp.CPCase(), p=4):
    lines = []
    report.demo7_observations(case, p, r, out=lines.append)
    return "\n".join(lines)


def fake(checks=None, loads=None, sizes=None, rel=1e-7):
    ok = {"y": rel, "x_grad": rel, "grads": rel, "grads_agree": True, "blocks": [1, 2], "skipped": [1, 0]}
    return {"checks": checks or {run: dict(ok) for run in report.RUNS},
            "loads": loads or [("contiguous", [10, 26], 1.44), ("zigzag", [18, 18], 1.0)],
            "bytes": sizes or report.bytes_rows()}


def test_observation_branches():
    text = observations(fake())
    assert "环形注意力和 Ulysses 在两种切法下的输出" in text and "都和一个进程" in text
    assert "进程 0 跳过了 1 个" in text and "每个进程都是 18 对" in text and "正好是 p/2" in text
    assert "p = 128 做不了" in text
    assert "没有都和" in observations(fake(rel=1e-3))
    checks = fake()["checks"]
    for run in (("ulysses", "contiguous"), ("ulysses", "zigzag")):
        checks[run] = {"skipped_because": "heads"}
    assert "Ulysses 这次没有跑" in observations(fake(checks=checks), p=3)
    uneven = fake(loads=[("contiguous", [10, 26], 1.44), ("zigzag", [17, 19], 1.06)])
    assert "最多是平均的 1.06 倍" in observations(uneven)
    odd = fake(sizes=[(4, 300, 100), (8, 800, 100)])
    assert "正好是 p/2" not in observations(odd) and "做不了" not in observations(odd)


@pytest.mark.parametrize("argv", [["--cp-ranks", "5"], ["--cp-ranks", "1"], ["--seq-len", "100"],
                                  ["--seq-len", "7"], ["--cp-heads", "5"]])
def test_bad_flags_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code4.main(["--demo", "7"] + argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err
