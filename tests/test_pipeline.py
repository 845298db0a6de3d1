"""Lecture 9 code 4: pipeline schedules and bubble by hand, the real pipeline and the
tensor-parallel layers on gloo against single-process references, the 3D planner, flags,
a quick run and Ctrl-C."""


from dataclasses import replace

import pytest

from conftest import LECTURE09, interrupt_when_ranks_run, load_script, main_quietly, shared_quick_run

from lecture09.parallel import memory_model as mm
from lecture09.parallel import parallel_plan
from lecture09.parallel import pipeline
from lecture09.parallel.pipeline import Op

code4 = load_script(LECTURE09 / "04_pipeline.py")


# ---------------------------------------------------------------------------
# Schedules on paper
# ---------------------------------------------------------------------------

def test_bubble_formula_by_hand():
    assert pipeline.bubble_fraction(1, 1) == 0 and pipeline.bubble_fraction(1, 8) == 0   # one stage: no bubble
    assert pipeline.bubble_fraction(2, 2) == pytest.approx(1 / 3)
    assert pipeline.bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert pipeline.bubble_fraction(4, 1) == pytest.approx(3 / 4)
    assert pipeline.bubble_fraction(8, 64) == pytest.approx(7 / 71)
    with pytest.raises(ValueError):
        pipeline.bubble_fraction(0, 4)


@pytest.mark.parametrize("schedule", pipeline.SCHEDULES)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 8])
def test_simulated_timeline_matches_the_formula(schedule, p, m):
    """Total time (m + p - 1)(t_f + t_b); each stage busy m(t_f + t_b); idle share (p-1)/(m+p-1)."""
    for t_f, t_b in ((1, 1), (1, 2), (2, 3)):
        t = pipeline.simulate(schedule, p, m, t_f, t_b)
        assert t.total_time == (m + p - 1) * (t_f + t_b)
        assert all(t.busy_time(s) == m * (t_f + t_b) for s in range(p))
        assert t.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), abs=1e-12)


def test_one_stage_pipeline_has_no_bubble():
    for schedule in pipeline.SCHEDULES:
        assert pipeline.simulate(schedule, 1, 6).bubble_fraction == 0


def test_programs_by_hand_two_stages_two_micro_batches():
    F, B = (lambda i: Op("F", i)), (lambda i: Op("B", i))
    assert pipeline.stage_program("gpipe", 0, 2, 2) == [F(0), Op("send_fwd", 0), F(1), Op("send_fwd", 1),
                                                        Op("recv_bwd", 0), B(0), Op("recv_bwd", 1), B(1)]
    assert pipeline.stage_program("gpipe", 1, 2, 2) == [Op("recv_fwd", 0), F(0), Op("recv_fwd", 1), F(1),
                                                        B(0), Op("send_bwd", 0), B(1), Op("send_bwd", 1)]
    # 1F1B, stage 0: warm-up 1 forward; steady 1 pair (send up, then receive down); cool-down 1 backward
    assert pipeline.stage_program("1f1b", 0, 2, 2) == [F(0), Op("send_fwd", 0), F(1), Op("send_fwd", 1),
                                                       Op("recv_bwd", 0), B(0), Op("recv_bwd", 1), B(1)]
    # last stage: no warm-up; after each backward it receives the next input first, then sends down
    assert pipeline.stage_program("1f1b", 1, 2, 2) == [Op("recv_fwd", 0), F(0), B(0), Op("recv_fwd", 1),
                                                       Op("send_bwd", 0), F(1), B(1), Op("send_bwd", 1)]


def test_1f1b_compute_order_by_hand():
    order = [f"{op.kind}{op.micro_batch}" for op in pipeline.compute_order(pipeline.stage_program("1f1b", 0, 3, 5))]
    assert order == ["F0", "F1", "F2", "B0", "F3", "B1", "F4", "B2", "B3", "B4"]
    last = [f"{op.kind}{op.micro_batch}" for op in pipeline.compute_order(pipeline.stage_program("1f1b", 2, 3, 5))]
    assert last == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3", "F4", "B4"]


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("m", [1, 2, 4, 8, 16])
def test_peak_activations(p, m):
    """1F1B holds at most p micro-batches on stage 0 (p - s on stage s); GPipe holds m."""
    for s in range(p):
        gpipe = pipeline.peak_activations(pipeline.stage_program("gpipe", s, p, m))
        ofob = pipeline.peak_activations(pipeline.stage_program("1f1b", s, p, m))
        assert gpipe == m == pipeline.peak_activations_formula("gpipe", s, p, m)
        assert ofob == min(p - s, m) == pipeline.peak_activations_formula("1f1b", s, p, m)
        assert ofob <= p


@pytest.mark.parametrize("schedule", pipeline.SCHEDULES)
def test_programs_never_deadlock_with_rendezvous_sends(schedule):
    for p in range(1, 7):
        for m in range(1, 10):
            assert pipeline.check_rendezvous(pipeline.programs(schedule, p, m)) == 2 * m * (p - 1)


def test_rendezvous_check_finds_a_deadlock_and_a_mismatch():
    both_send_first = [[Op("send_fwd", 0), Op("recv_bwd", 0)], [Op("send_bwd", 0), Op("recv_fwd", 0)]]
    with pytest.raises(RuntimeError, match="deadlock"):
        pipeline.check_rendezvous(both_send_first)
    wrong = [[Op("send_fwd", 0)], [Op("recv_fwd", 1)]]
    with pytest.raises(RuntimeError, match="expects"):
        pipeline.check_rendezvous(wrong)


def test_timeline_rows_by_hand():
    t = pipeline.simulate("gpipe", 2, 1, 1, 1)         # F(0,0) 0-1, F(1,0) 1-2, B(1,0) 2-3, B(0,0) 3-4
    assert pipeline.timeline_rows(t) == ["F1  .  . B1", " . F1 B1  ."]
    t2 = pipeline.simulate("gpipe", 1, 1, 1, 2)
    assert pipeline.timeline_rows(t2) == ["F1 B1 --"]


def test_stage_bounds():
    assert pipeline.stage_bounds(4, 2) == [(0, 2), (2, 4)]
    assert pipeline.stage_bounds(4, 3) == [(0, 2), (2, 3), (3, 4)]
    assert pipeline.stage_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(ValueError):
        pipeline.stage_bounds(3, 4)


def test_stage_param_names_cover_the_model_once():
    from dataclasses import replace

    from lecture01 import tiny_gpt

    model = tiny_gpt.make_model(replace(tiny_gpt.BASE_CONFIG, n_layer=2))
    for p in (1, 2, 3, 4):
        names = [n for s in range(p) for n in pipeline.stage_param_names(model, p, s)]
        assert sorted(names) == sorted(n for n, _ in model.named_parameters())
    assert pipeline.stage_param_names(model, 4, 0) == ["tok_emb.weight"]
    assert pipeline.stage_param_names(model, 4, 3) == ["ln_f.weight", "ln_f.bias", "head.weight", "head.bias"]


# ---------------------------------------------------------------------------
# The planner and the TP traffic
# ---------------------------------------------------------------------------

TOY = mm.ModelShape("toy", 1e9, 8, 1024, 8, 1024, 16, 1e9, "test")


def test_single_gpu_plan_has_no_communication_and_no_bubble():
    c = parallel_plan.plan_cost(TOY, parallel_plan.Cluster(n_gpus=1), parallel_plan.Plan(1, 1, 1), 16,
                                zero_stage=0)
    assert (c.tp_s, c.cp_s, c.ep_s, c.pp_s, c.dp_s, c.bubble) == (0, 0, 0, 0, 0, 0)
    assert c.state_bytes == 16e9
    attention = 1 + 1024 / (6 * 1024)               # s/(6h): QKᵀ and AV
    assert c.compute_s == pytest.approx(6 * 1e9 * 16 * 1024 * attention / (312e12 * 0.4))
    assert c.iteration_s == pytest.approx(c.compute_s)


def test_data_parallel_all_reduce_by_hand():
    """2 GPUs in one machine: ring all-reduce of 2Ψ = 2e9 bytes: 2(p-1)α + 2(p-1)/p · n/β."""
    c = parallel_plan.plan_cost(TOY, parallel_plan.Cluster(n_gpus=2), parallel_plan.Plan(2, 1, 1), 16)
    assert c.dp_s == pytest.approx(2 * 5e-6 + 2e9 / 300e9)
    assert c.n_micro == 8
    assert c.state_bytes == pytest.approx((4 + 12 / 2) * 1e9)          # ZeRO-1 across the 2


def test_plan_memory_by_hand_175b():
    """(16, 8, 8): Ψ/64 = 2.734375e9 per GPU; ZeRO-1 over 16: (4 + 12/16) × that = 12.98828125e9 bytes;
    selective activations, t = 8: 2048 × 12288 × (10 + 24/8) per layer × 12 layers × 8 micro-batches."""
    model = mm.MODELS["175B"]
    c = parallel_plan.plan_cost(model, parallel_plan.Cluster(), parallel_plan.Plan(16, 8, 8), 1536)
    assert c.state_bytes == pytest.approx(12.98828125e9)
    assert c.activation_bytes == 2048 * 12288 * 13 * 12 * 8
    assert c.n_micro == 96 and c.bubble == pytest.approx(7 / 103)


def test_tensor_parallel_across_machines_costs_more():
    model, cluster = mm.MODELS["175B"], parallel_plan.Cluster()
    inside = parallel_plan.plan_cost(model, cluster, parallel_plan.Plan(16, 8, 8), 1536)
    across = parallel_plan.plan_cost(model, cluster, parallel_plan.Plan(8, 8, 16), 1536)
    assert across.tp_s > 10 * inside.tp_s


def test_plan_validity():
    model, cluster = mm.MODELS["175B"], parallel_plan.Cluster()
    assert parallel_plan.why_invalid(model, cluster, parallel_plan.Plan(1024, 1, 1), 1536)      # 1536 / 1024
    assert parallel_plan.why_invalid(model, cluster, parallel_plan.Plan(2, 64, 8), 1536)        # 96 layers / 64
    assert parallel_plan.why_invalid(model, cluster, parallel_plan.Plan(8, 8, 8), 1536)         # 512 GPUs
    assert parallel_plan.why_invalid(model, cluster, parallel_plan.Plan(16, 8, 8), 1536) is None
    with pytest.raises(ValueError):
        parallel_plan.plan_cost(model, cluster, parallel_plan.Plan(2, 64, 8), 1536)
    assert len(parallel_plan.all_plans(parallel_plan.Cluster(n_gpus=8))) == 10       # ordered triples with product 8


def test_best_plan_fits_and_beats_the_others():
    model, cluster = mm.MODELS["175B"], parallel_plan.Cluster()
    best = parallel_plan.best_plan(model, cluster, 1536)
    assert best.fits and best.plan.tp <= cluster.gpus_per_node
    for plan in parallel_plan.all_plans(cluster):
        if not parallel_plan.why_invalid(model, cluster, plan, 1536):
            c = parallel_plan.plan_cost(model, cluster, plan, 1536)
            assert not c.fits or c.iteration_s >= best.iteration_s
    assert parallel_plan.best_plan(model, parallel_plan.Cluster(n_gpus=8), 1536) is None      # 175B on 8 GPUs


@pytest.mark.parametrize("model, gpus, batch, plain, hidden", [
    ("7B", 64, 512, ((8, 4, 2), 6.52), ((64, 1, 1), 5.97)),
    ("175B", 1024, 1536, ((32, 4, 8), 30.94), ((64, 2, 8), 29.44)),
    ("1.3B", 8, 64, ((8, 1, 1), 1.21), ((8, 1, 1), 1.19)),
])
def test_the_best_plan_under_each_overlap_assumption(model, gpus, batch, plain, hidden):
    """Hiding DP's all-reduce changes the first place for 7B and 175B (issue 20, item 3);
    the two rankings differ only by the DP term."""
    cluster = replace(parallel_plan.Cluster(), n_gpus=gpus)
    best = parallel_plan.best_plan(mm.MODELS[model], cluster, batch)
    best_hidden = parallel_plan.best_plan(mm.MODELS[model], cluster, batch, hide_dp=True)
    assert ((best.plan.dp, best.plan.pp, best.plan.tp), round(best.iteration_s, 2)) == plain
    assert ((best_hidden.plan.dp, best_hidden.plan.pp, best_hidden.plan.tp),
            round(best_hidden.iteration_hidden_dp_s, 2)) == hidden
    assert best_hidden.iteration_s - best_hidden.iteration_hidden_dp_s == pytest.approx(best_hidden.dp_s)
    from lecture09.parallel.plan_report import overlap_sentence
    said = overlap_sentence(best, best_hidden)
    if best.plan == best_hidden.plan:
        assert "这个假设不改变选择" in said and "变成" not in said
    else:
        assert f"最好的变成 {best_hidden.plan}" in said and "是这个假设决定了选哪一个" in said
        assert f"DP 通信 {best.dp_s:.2f} → {best_hidden.dp_s:.2f} s" in said


def test_tp_traffic_by_hand():
    """175B, TP 8, b = 1: payload s·h·2 = 50,331,648 bytes; each GPU sends 2·7/8 of it per all-reduce, 4 per layer."""
    payload, sent, nvlink, ib, compute = code4.tp_traffic(mm.MODELS["175B"], 8)
    assert payload == 2048 * 12288 * 2
    assert sent == 4 * 2 * 7 * payload // 8
    assert nvlink == pytest.approx(4 * (14 * 5e-6 + 2 * 7 / 8 * payload / 300e9))
    assert ib == pytest.approx(4 * (14 * 5e-6 + 2 * 7 / 8 * payload / 25e9))
    assert compute == pytest.approx(72 * 2048 * 12288 ** 2 * 37 / 36 / 8 / (312e12 * 0.4))


# ---------------------------------------------------------------------------
# The quick run: real pipeline and tensor parallelism on 2 gloo ranks
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def quick():
    return shared_quick_run("04_pipeline.py")


def test_quick_run_prints_every_demo(quick):
    text = quick[1]
    for title in ("演示 1", "演示 2", "演示 3", "演示 4", "演示 5", "演示 6", "演示 7"):
        assert title in text
    assert text.count("观察 Observations") == 7


def test_quick_output_fits_a_projector(quick):
    from lecture01.console import LINE_WIDTH, display_width
    wide = [line for line in quick[1].splitlines() if display_width(line) > LINE_WIDTH]
    assert not wide, wide[:3]


def test_pipeline_gradients_equal_the_unsplit_model(quick):
    r = quick[0]["demo2"]
    for schedule in pipeline.SCHEDULES:
        assert r[schedule]["complete"]
        assert r[schedule]["max_abs_diff"] <= code4.GRAD_ATOL
        assert abs(r[schedule]["loss"] - r["loss"]) <= 1e-5
    # quick: p = 2 stages, m = 4 micro-batches; every rank reports what it really held
    assert r["gpipe"]["peaks"] == [4, 4]
    assert r["1f1b"]["peaks"] == [2, 1]


def test_tensor_parallel_layers_equal_nn_linear(quick):
    r = quick[0]["demo3"]
    for kind in ("column", "row", "mlp"):
        for what, diff in r["checks"][kind].items():
            assert diff <= code4.TP_ATOL, (kind, what, diff)
    assert r["same_on_every_rank"]
    directions = {kind: [where for where, _ in r["all_reduces"][kind]] for kind in r["all_reduces"]}
    assert directions == {"column": ["backward"], "row": ["forward"], "mlp": ["forward", "backward"]}
    c = r["case"]
    assert all(n == c.batch * c.seq * c.hidden for _, n in r["all_reduces"]["mlp"])


@pytest.mark.parametrize("gpus", ["8", "7"])       # 8: nothing fits; 7: no plan splits the batch
def test_planner_demo_on_a_cluster_where_nothing_fits(capsys, gpus):
    results = code4.main(["--demo", "4", "--plan-gpus", gpus])
    assert results["demo4"]["best"] is None
    assert "没有一种组合放得下" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# Flags and Ctrl-C
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--stages", "0"], ["--stages", "17"], ["--micro-batches", "0"],
                                  ["--pipe-ranks", "5"], ["--pipe-ranks", "1"], ["--pipe-micro-batches", "3"],
                                  ["--plan-model", "70B"], ["--recompute", "some"], ["--zero-stage", "4"],
                                  ["--t-backward", "0"], ["--tp-ranks", "1"], ["--global-batch", "-1"],
                                  ["--plan-gpus", "x"], ["--demo", "0"]])
def test_nonsense_flags_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code4.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.sweep                  # Ctrl-C on ranks run_ranks started: code 02's test is the one in the main part
def test_ctrl_c_stops_with_one_line_and_no_process_left():
    status, err, left = interrupt_when_ranks_run([str(LECTURE09 / "04_pipeline.py"), "--demo", "2", "--pipe-ranks", "2",
                                                  "--batch-size", "2000", "--pipe-micro-batches", "100"], 2)
    assert status == 130
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "已中断 interrupted (Ctrl-C)"
    assert not left, f"processes left behind: {left}"


# --- observations that follow the flags (issue 21, 4) ----------------------------------------

def test_memory_sentence_uses_min_p_m_and_says_when_the_schedules_hold_the_same():
    from lecture09.parallel import pipeline, pipeline_report
    for p, m in ((4, 8), (16, 2), (4, 4)):
        g = pipeline.peak_activations(pipeline.stage_program("gpipe", 0, p, m))
        f = pipeline.peak_activations(pipeline.stage_program("1f1b", 0, p, m))
        assert f == min(p, m) and g == m                        # by hand: the two schedules' stage 0
        text = pipeline_report.memory_sentence(p, m, g, f)
        assert ("只存" in text) == (m > p)
        assert "= p）" not in text


def test_bubble_sentence_calls_bubbles_small_only_when_they_are():
    from types import SimpleNamespace as NS
    from lecture09.parallel.plan_report import SMALL_BUBBLE, bubble_sentence
    small = [NS(bubble=0.05, plan=NS(pp=4), n_micro=64), NS(bubble=0.1, plan=NS(pp=8), n_micro=32)]
    assert "都不大" in bubble_sentence(small, 1024)
    big = small + [NS(bubble=0.795, plan=NS(pp=32), n_micro=8)]
    text = bubble_sentence(big, 256)
    assert "都不大" not in text and "79.5%" in text and "m = 8" in text
    assert 0.1 < SMALL_BUBBLE < 0.795


@pytest.mark.parametrize("stage,words", [("0", "不用 ZeRO"), ("1", "ZeRO-1"), ("3", "ZeRO-3")])
def test_the_plan_that_does_not_fit_names_the_zero_stage_used(stage, words):
    _, out = main_quietly(code4.main, ["--demo", "4", "--plan-model", "175B", "--zero-stage", stage])
    item = next(line for line in out.replace("\n    ", "").splitlines() if "放不下：" in line)
    assert words in item and (stage == "1" or "ZeRO-1" not in item)


def test_demo4_with_a_small_batch_does_not_call_its_bubbles_small():
    _, out = main_quietly(code4.main, ["--demo", "4", "--global-batch", "256"])
    assert "都不大" not in out and "79.5%" in out


def test_tp_beyond_one_machine_is_not_priced_on_nvlink():
    """--tp-size 16 > 8 GPUs per machine: the ring crosses InfiniBand (issue 21, 4)."""
    _, out = main_quietly(code4.main, ["--demo", "3", "--tp-size", "16"])
    rows = [line for line in out.splitlines() if line.startswith(("1.3B ", "7B ", "175B "))]
    assert len(rows) == 3 and all(line.split()[3] == "—" for line in rows)
    flat = out.replace("\n", "").replace(" ", "")
    assert "TP=16放不进一台机器" in flat and "TP=16时通信在NVLink上" not in flat
    _, out = main_quietly(code4.main, ["--demo", "3", "--tp-size", "8"])
    assert "TP=8时通信在NVLink上" in out.replace("\n", "").replace(" ", "")


def test_the_published_megatron_run_by_hand():
    """Narayanan et al. 2021: 175B (l 96, h 12288, s 2048, V 51200), batch 1536, 140 TFLOP/s
    per GPU on 1024 A100s. F = 96·B·s·l·h²(1 + s/6h + V/16lh) per iteration, by hand."""
    from lecture09.parallel import memory_model as mm, parallel_plan
    run, model = parallel_plan.MEGATRON_175B, mm.MODELS["175B"]
    by_hand = 96 * 1536 * 2048 * 96 * 12288 ** 2 * (1 + 2048 / (6 * 12288) + 51200 / (16 * 96 * 12288))
    assert parallel_plan.megatron_flops_per_iteration(model, 1536, 51200) == pytest.approx(by_hand, rel=1e-12)
    seconds, days, mfu = parallel_plan.published_figures(run, model, 1024)
    assert seconds == pytest.approx(by_hand / (1024 * 140e12))
    assert f"{seconds:.2f}" == "31.47" and f"{days:.1f}" == "34.7" and f"{mfu:.1%}" == "32.9%"
    assert mfu == pytest.approx(6 * 175e9 * 1536 * 2048 / (1024 * 312e12 * seconds))


def test_the_reconciliation_ends_at_the_published_seconds_one_change_per_row():
    from lecture09.parallel import memory_model as mm, parallel_plan, plan_report
    run, model, cluster = parallel_plan.MEGATRON_175B, mm.MODELS["175B"], parallel_plan.Cluster()
    rows = plan_report.reconciliation_rows(model, cluster, run, zero_stage=1)
    seconds = [s for _, s in rows]
    full = parallel_plan.plan_cost(model, cluster, run.plan, 1536, 1, 1, "full")
    assert seconds[0] == full.iteration_s                                    # the planner's own estimate
    assert seconds[0] > seconds[1] > seconds[2] > seconds[3]
    assert seconds[3] == pytest.approx(seconds[4], rel=1e-12)                 # the last change reaches it exactly
    assert seconds[2] == pytest.approx(full.pipeline_s * (1 - full.bubble) * 0.4 / (140e12 / 312e12))
    # the FLOP count: 12·l·h² for N and the output layer; the attention's s/(6h) is in both
    count = (12 * 96 * 12288 ** 2 / 175e9) * (1 + 2048 / (6 * 12288) + 51200 / (16 * 96 * 12288)) / (
        1 + 2048 / (6 * 12288))
    assert seconds[3] == pytest.approx(seconds[2] * count, rel=1e-12) and f"{count:.4f}" == "0.9966"
    assert f"{seconds[0]:.2f}" == "41.67" and f"{seconds[1]:.2f}" == "37.52" and f"{seconds[2]:.2f}" == "31.57"


def test_published_sentence_says_close_only_when_it_is():
    from lecture09.parallel import plan_report
    text = plan_report.published_sentence(31.47, {"selective": 30.51, "full": 40.63})
    assert "慢 29%" in text and "碰巧相抵" in text
    text = plan_report.published_sentence(31.47, {"selective": 25.0, "full": 30.0})
    assert "快 5%" in text and "碰巧相抵" not in text


def test_demo4_compares_with_the_published_run_only_in_its_setting(capsys):
    code4 = load_script(LECTURE09 / "04_pipeline.py")
    code4.main(["--demo", "4"])
    out = capsys.readouterr().out
    assert "对照发表的运行" in out and "31.47" in out and "41.67" in out
    code4.main(["--demo", "4", "--plan-gpus", "512"])
    out = capsys.readouterr().out
    assert "对照发表的运行" not in out and "只有一个可以对照" in out
