"""Lecture 9 code 4, demo 5: interleaved 1F1B and ZB-H1. Programs by hand, the simulated
bubble and peak activations against the papers' formulas over a grid of (p, m, v), the
programs against PyTorch's torch.distributed.pipelining, the real ranks against the unsplit
model, and every branch of the observations."""

from dataclasses import replace

import pytest

from conftest import LECTURE09, load_script, main_quietly, shared_quick_run

from lecture09.parallel import pipeline
from lecture09.parallel import pipeline_beyond_report as report
from lecture09.parallel import pipeline_schedules as ps
from lecture09.parallel.pipeline_schedules import Op

code4 = load_script(LECTURE09 / "04_pipeline.py")

GRID = [(p, m) for p in (1, 2, 3, 4, 8) for m in (1, 2, 3, 4, 8, 12, 16, 32)]


# ---------------------------------------------------------------------------
# Programs by hand
# ---------------------------------------------------------------------------

def test_interleaved_program_by_hand_two_ranks_two_chunks_two_micro_batches():
    """p = 2, v = 2, m = 2: pieces 0, 2 on rank 0 and 1, 3 on rank 1. Rank 0 warms up with
    2(p − 1) + (v − 1)p = 4 = all its chunk forwards; rank 1 with 2."""
    F, B = "F", "B"
    assert ps.interleaved_program(0, 2, 2, 2) == [Op(F, 0, 0), Op(F, 0, 1), Op(F, 1, 0), Op(F, 1, 1),
                                                   Op(B, 1, 0), Op(B, 1, 1), Op(B, 0, 0), Op(B, 0, 1)]
    assert ps.interleaved_program(1, 2, 2, 2) == [Op(F, 0, 0), Op(F, 0, 1), Op(F, 1, 0), Op(B, 1, 0),
                                                   Op(F, 1, 1), Op(B, 1, 1), Op(B, 0, 0), Op(B, 0, 1)]


def test_zb_h1_program_by_hand_two_ranks_three_micro_batches():
    """Rank 0 (r = 0) runs each W right after its B; rank 1 holds its first W back one step."""
    assert [tuple(op)[::2] for op in ps.zb_h1_program(0, 2, 3)] == [
        ("F", 0), ("F", 1), ("B", 0), ("W", 0), ("F", 2), ("B", 1), ("W", 1), ("B", 2), ("W", 2)]
    assert [tuple(op)[::2] for op in ps.zb_h1_program(1, 2, 3)] == [
        ("F", 0), ("B", 0), ("F", 1), ("B", 1), ("W", 0), ("F", 2), ("B", 2), ("W", 1), ("W", 2)]


@pytest.mark.parametrize("p,m", GRID)
def test_one_chunk_interleaving_is_1f1b_op_for_op(p, m):
    for rank in range(p):
        ours = [(op.kind, op.micro_batch) for op in ps.interleaved_program(rank, p, m, 1)]
        demo1 = [(op.kind, op.micro_batch) for op in pipeline.compute_order(pipeline.stage_program("1f1b", rank, p, m))]
        assert ours == demo1


@pytest.mark.parametrize("p,m", GRID)
def test_every_op_appears_once(p, m):
    for schedule, v in (("interleaved", 2), ("zb-h1", 1)):
        if schedule == "interleaved" and m % p:
            continue
        for prog in ps.programs(schedule, p, m, v):
            kinds = ("F", "B", "W") if schedule == "zb-h1" else ("F", "B")
            expected = {(k, c, i) for k in kinds for c in range(v) for i in range(m)}
            assert sorted(map(tuple, prog)) == sorted(expected)


def test_interleaving_needs_m_a_multiple_of_p_and_bad_arguments_raise():
    with pytest.raises(ValueError, match="multiple"):
        ps.interleaved_program(0, 4, 6, 2)
    with pytest.raises(ValueError):
        ps.programs("2f2b", 2, 2)
    with pytest.raises(ValueError):
        ps.zb_h1_program(2, 2, 4)
    with pytest.raises(ValueError, match="m >= p"):
        ps.bubble_ratio_formula("zb-h1", 4, 2)


# ---------------------------------------------------------------------------
# Simulation against the formulas
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("p,m", GRID)
@pytest.mark.parametrize("v", [1, 2, 3, 4])
def test_interleaved_bubble_and_peak_equal_narayanan_and_korthikanti(p, m, v):
    if v > 1 and m % p:
        return
    for t_f, t_b, t_w in ((1, 1, 1), (1, 0.5, 0.5), (2, 3, 1)):
        t = ps.simulate("interleaved", p, m, v, t_f, t_b, t_w)
        assert t.ideal_time == pytest.approx(m * (t_f + t_b + t_w))
        assert t.bubble_ratio == pytest.approx(ps.bubble_ratio_formula("interleaved", p, m, v), abs=1e-12)
    for rank, prog in enumerate(ps.programs("interleaved", p, m, v)):
        assert ps.peak_held(prog) == ps.peak_held_formula("interleaved", rank, p, m, v)
    if v > 1 and m >= 2 * p:       # stage 0 holds p + (p − 1)/v stages' worth (Korthikanti et al. 2022)
        assert ps.peak_held(ps.programs("interleaved", p, m, v)[0]) / v == pytest.approx(p + (p - 1) / v)


@pytest.mark.parametrize("p,m", GRID)
def test_zb_h1_bubble_is_a_third_of_1f1b_and_holds_p(p, m):
    one = ps.simulate("1f1b", p, m)
    zb = ps.simulate("zb-h1", p, m)
    assert one.bubble_time == pytest.approx((p - 1) * 3)
    if m >= p:
        assert zb.bubble_time == pytest.approx(ps.zb_h1_bubble_time(p, 1, 1, 1)) == pytest.approx((p - 1))
        assert zb.bubble_ratio == pytest.approx(ps.bubble_ratio_formula("zb-h1", p, m))
    else:
        assert one.bubble_time >= zb.bubble_time > (p - 1)      # the formula's m >= p is needed
    for rank, prog in enumerate(ps.programs("zb-h1", p, m)):
        assert ps.peak_held(prog) == ps.peak_held_formula("zb-h1", rank, p, m) == min(p, m)


@pytest.mark.parametrize("times", [(1, 0.5, 0.5), (2, 1, 1), (1, 2, 1)])
def test_zb_h1_bubble_with_unequal_times_where_w_is_not_longer_than_f(times):
    """(p − 1)(T_F + T_B − T_W) also holds away from T_F = T_B = T_W in these cases."""
    for p in (2, 4, 8):
        for m in (p, 2 * p):
            assert ps.simulate("zb-h1", p, m, 1, *times).bubble_time == pytest.approx(ps.zb_h1_bubble_time(p, *times))


def test_messages_per_micro_batch():
    assert ps.messages_per_micro_batch(4) == 3 and ps.messages_per_micro_batch(4, 2) == 7
    assert ps.messages_per_micro_batch(1, 4) == 0                # one rank: nothing crosses a wire


def test_timeline_blocks_fold_within_the_width_and_keep_every_cell():
    t = ps.simulate("interleaved", 4, 8, 2)
    rows, width = ps.timeline_cells(t)
    blocks = ps.timeline_blocks(t, 8, 100)
    assert len(blocks) == 2 and all(len(line) <= 92 for block in blocks for line in block)
    assert rows[0][:4] == ["F1", "F2", "F3", "F4"] and rows[0][4] == "f1"     # the second chunk is lower case
    joined = ["".join(block[r] for block in blocks) for r in range(4)]
    assert joined[0].replace(" ", "") == "".join(rows[0]).replace(" ", "")


# ---------------------------------------------------------------------------
# PyTorch's torch.distributed.pipelining orders the same ops
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("m_per_p", [1, 2, 4])
def test_programs_equal_pytorch_schedules(p, m_per_p):
    m = p * m_per_p
    for rank in range(p):
        for v in (2, 3, 4):
            assert ps.torch_program("interleaved", rank, p, m, v) == ps.interleaved_program(rank, p, m, v)
        assert ps.torch_program("zb-h1", rank, p, m) == ps.zb_h1_program(rank, p, m)


def test_zb_h1_equals_pytorch_with_fewer_micro_batches_than_ranks():
    for p, m in ((4, 1), (4, 3), (8, 5)):
        for rank in range(p):
            assert ps.torch_program("zb-h1", rank, p, m) == ps.zb_h1_program(rank, p, m)


# ---------------------------------------------------------------------------
# The quick run: both schedules on 2 real gloo ranks
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def quick5():
    return shared_quick_run("04_pipeline.py")              # demo 5 is part of it


def test_real_ranks_equal_the_unsplit_model_and_count_what_the_formulas_say(quick5):
    r = quick5[0]["demo5"]["real"]
    assert r["schedules"] == ("interleaved", "zb-h1")
    for schedule in r["schedules"]:
        assert r[schedule]["complete"] and r[schedule]["max_abs_diff"] <= report.GRAD_ATOL
        assert r[schedule]["loss_diff"] <= 1e-5
    # quick: p = 2 ranks, m = 4, v = 2: 2·1 + 1·2 + 1 = 5 and 0 + 2 + 1 = 3 chunk micro-batches
    assert r["interleaved"]["peaks"] == [5, 3] and r["zb-h1"]["peaks"] == [2, 2]
    assert r["interleaved"]["messages"] == 2 * 4 * 3 and r["zb-h1"]["messages"] == 2 * 4 * 1


def test_quick_demo5_prints_its_checks(quick5):
    d = quick5[0]["demo5"]
    assert d["worst"] == 0 and d["checked"] == 12
    assert d["torch_same"] == d["torch_compared"] == 24
    text = quick5[1].split("\n演示 5：", 1)[1].split("\n演示 6：", 1)[0]   # demo 5's part of the run
    assert "全部相同" in text and text.count("观察 Observations") == 1


@pytest.mark.slow
@pytest.mark.sweep                  # the quick run's real ranks, at 4 ranks
def test_real_ranks_with_four_ranks_and_three_chunks():
    real = replace(code4.RealSetup(), pipe_ranks=4, pipe_micro=4, batch_size=4)
    r = report.check_real(real, 3)
    assert r["n_layer"] == 10
    for schedule in ("interleaved", "zb-h1"):
        assert r[schedule]["complete"] and r[schedule]["max_abs_diff"] <= report.GRAD_ATOL
    assert r["interleaved"]["peaks"] == [ps.peak_held_formula("interleaved", k, 4, 4, 3) for k in range(4)]
    assert r["interleaved"]["messages"] == 2 * 4 * 11


# ---------------------------------------------------------------------------
# Every branch of the observations, worded from the numbers
# ---------------------------------------------------------------------------

def observations(setup, real_schedules=("interleaved", "zb-h1"), diff=1e-8):
    real = replace(code4.RealSetup(), pipe_ranks=2, pipe_micro=4, batch_size=4)
    fake_real = {"schedules": real_schedules}
    for s in real_schedules:
        v = setup.n_virtual if s == "interleaved" else 1
        fake_real[s] = {"complete": True, "max_abs_diff": diff,
                        "peaks": [ps.peak_held_formula(s, k, 2, 4, v) for k in range(2)],
                        "messages": 2 * 4 * ps.messages_per_micro_batch(2, v)}
    r = {"timelines": report.simulate_all(setup, setup.n_stages, setup.n_micro), "real": fake_real}
    lines = []
    report.demo5_observations(setup, real, r, out=lines.append)
    return "\n".join(lines)


def test_observation_interleaved_halves_the_bubble_and_costs_messages():
    text = observations(code4.BeyondSetup())
    assert "气泡比从 37.5% 降到 18.8%" in text and "过 7 个切口而不是 3 个" in text
    assert "最后一张卡在 1.5 开始算，1F1B 要等到 3" in text and "5.5 个阶段的激活，比 1F1B 的 4 个多" in text
    assert "是它的 33%" in text and "都和不切开的模型一致" in text and "就是公式" in text


def test_observation_when_v_is_one_m_is_not_a_multiple_or_p_is_one():
    assert "v = 1 时交错 1F1B 就是 1F1B" in observations(code4.BeyondSetup(n_virtual=1))
    assert "m = 8 不是 p = 3 的倍数" in observations(code4.BeyondSetup(n_stages=3))
    one = observations(code4.BeyondSetup(n_stages=1))
    assert "只有一个阶段" in one and " 2. 真实进程上" in one and "ZB-H1 不等 W" not in one


def test_observation_zb_when_m_is_below_p_or_times_differ():
    few = observations(code4.BeyondSetup(n_stages=8, n_micro=4))
    assert "m = 4 比 p = 8 小" in few and "不适用" in few
    unequal = observations(code4.BeyondSetup(t_b=2))
    assert "T_F、T_B、T_W 不相等" in unequal and "公式 (p−1)(T_F + T_B − T_W) = 6" in unequal


def test_observation_says_when_the_real_gradients_disagree():
    text = observations(code4.BeyondSetup(), diff=1e-2)
    assert "没有都和不切开的模型一致" in text and "调度只改变" not in text


# ---------------------------------------------------------------------------
# Flags
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--virtual-stages", "0"], ["--virtual-stages", "5"], ["--virtual-stages", "x"]])
def test_bad_virtual_stages_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code4.main(["--demo", "5"] + argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err
