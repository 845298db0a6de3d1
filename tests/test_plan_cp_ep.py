"""Lecture 9 code 4, demo 4: the planner's context and expert parallelism (issue 27, item 5).
Every cost term by hand on small shapes, the validity rules, the search space, the MoE's
parameter counts, and each branch of the sentence that says which dimension is chosen."""

import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from conftest import LECTURE09, load_script, main_quietly

from lecture09.parallel import memory_model as mm
from lecture09.parallel import parallel_plan as P
from lecture09.parallel import plan_report as R

TOY = mm.ModelShape("toy", 1e9, 8, 1024, 8, 1024, 16, 1e9, "test")
TOY_MOE = P.MoEShape("toy-moe", 4, 256, 4, 2, 512, 4, 2, 1000, 512, 16, 1.25, "test")
ALPHA = 5e-6


def cluster(n):
    return replace(P.Cluster(), n_gpus=n)


def test_mixtral_parameter_counts_follow_from_its_shape():
    """Jiang et al. 2024 quote 47B parameters, 13B active: the shape gives 46.70B and 12.88B."""
    m = P.MOE_MODELS["8x7B"]
    attention = 2 * 4096 * 4096 + 2 * 4096 * 1024                 # q, o: h×h; k, v: h×(8 heads × 128)
    expert = 3 * 4096 * 14336
    per_layer = attention + 8 * expert + 4096 * 8 + 2 * 4096
    assert m.n_params == 32 * per_layer + 2 * 32000 * 4096 + 4096 == 46_702_792_704
    assert m.n_active_params == m.n_params - 32 * 6 * expert == 12_879_925_248
    assert m.n_expert_params == 32 * 8 * expert
    assert f"{m.n_params / 1e9:.0f}B" == "47B" and f"{m.n_active_params / 1e9:.0f}B" == "13B"


def test_activations_per_layer_with_context_parallelism_by_hand():
    """s/CP positions per rank; without recomputation the scores are (s/CP) × s per head."""
    s, b, h, a = 2048, 1, 12288, 96
    local = s // 4 * b * h
    assert mm.activation_bytes_per_layer(s, b, h, a, 8, "selective", cp=4) == local * 13
    assert mm.activation_bytes_per_layer(s, b, h, a, 1, "full", cp=4) == 2 * local
    assert mm.activation_bytes_per_layer(s, b, h, a, 1, "none", cp=4) == pytest.approx(
        local * 34 + 5 * a * (s // 4) * s * b)
    assert mm.activation_bytes_per_layer(s, b, h, a, 8, "none", cp=1) == mm.activation_bytes_per_layer(s, b, h, a, 8)


def test_context_parallel_cost_by_hand():
    """TOY (Ψ 1e9, L 8, h 1024, s 1024) on 2 GPUs as CP 2, batch 16 (m = 16): weights are the
    same on both ranks, so ZeRO and the gradient all-reduce run over DP·CP = 2; the ring
    passes (K, V) of 512 positions 3 times per layer per micro-batch over NVLink."""
    c = P.plan_cost(TOY, cluster(2), P.Plan(1, 1, 1, cp=2), 16)
    assert c.n_micro == 16 and c.bubble == 0 and c.tp_s == c.pp_s == c.ep_s == 0
    assert c.state_bytes == pytest.approx((4 + 12 / 2) * 1e9)
    assert c.activation_bytes == 512 * 1024 * 34 * 8                 # selective, t = 1, one stage holds L layers
    kv = 2 * 512 * 1024 * 2
    assert c.cp_s == pytest.approx(3 * 1 * 8 * 16 * (ALPHA + kv / 300e9))
    assert c.dp_s == pytest.approx(2 * ALPHA + 2e9 / 300e9)
    assert c.compute_s == pytest.approx(6 * 1e9 * 16 * 1024 * (1 + 1 / 6) / (2 * 312e12 * 0.4))
    full = P.plan_cost(TOY, cluster(2), P.Plan(1, 1, 1, cp=2), 16, recompute="full")
    assert full.cp_s == pytest.approx(4 / 3 * c.cp_s)               # the forward runs again


def test_context_parallel_across_machines_and_with_tensor_parallelism():
    """TP·CP within 8 GPUs rides NVLink; beyond, InfiniBand. TP splits K and V by t."""
    inside = P.plan_cost(TOY, cluster(16), P.Plan(4, 1, 2, cp=2), 16)
    edge = P.plan_cost(TOY, cluster(32), P.Plan(4, 1, 2, cp=4), 16)               # TP·CP = 8: one machine
    across = P.plan_cost(TOY, cluster(64), P.Plan(4, 1, 2, cp=8), 16)
    kv = {2: 2 * 512 * 512 * 2, 4: 2 * 256 * 512 * 2, 8: 2 * 128 * 512 * 2}
    assert inside.cp_s == pytest.approx(3 * 1 * 8 * 4 * (ALPHA + kv[2] / 300e9))
    assert edge.cp_s == pytest.approx(3 * 3 * 8 * 4 * (ALPHA + kv[4] / 300e9))
    assert across.cp_s == pytest.approx(3 * 7 * 8 * 4 * (ALPHA + kv[8] / 25e9))


def test_expert_parallel_cost_by_hand():
    """TOY_MOE (L 4, h 256, s 512, E 4 of width 512, top-2, cf 1.25) on 4 GPUs as DP 4 with
    EP 2: expert weights 1/2 per GPU, their ZeRO and all-reduce over DP/EP = 2 ranks; 4
    pairwise all-to-alls per layer per micro-batch of k·cf·b·s·h fp16 values."""
    m = TOY_MOE
    c = P.plan_cost(m, cluster(4), P.Plan(4, 1, 1, ep=2), 16)
    dense, experts = m.n_params - m.n_expert_params, m.n_expert_params
    assert experts == 4 * 4 * 3 * 256 * 512
    assert c.state_bytes == pytest.approx((4 + 12 / 4) * dense + (4 + 12 / 2) * experts / 2)
    buffer = 2 * 1.25 * 512 * 256 * 2
    assert c.ep_s == pytest.approx(4 * 4 * 4 * (ALPHA + buffer / 2 / 300e9))
    assert c.dp_s == pytest.approx(6 * ALPHA + 2 * 3 / 4 * 2 * dense / 300e9
                                   + 2 * ALPHA + 2 * 1 / 2 * 2 * (experts / 2) / 300e9)
    assert c.compute_s == pytest.approx(6 * m.n_active_params * 16 * 512 * (1 + 512 / (6 * 256)) / (4 * 312e12 * 0.4))
    local = 512 * 256
    assert c.activation_bytes == pytest.approx((34 * local + (2 * 512 / (4 * 256) - 1) * 16 * local) * 4)
    no_ep = P.plan_cost(m, cluster(4), P.Plan(4, 1, 1), 16)
    assert no_ep.ep_s == 0 and no_ep.state_bytes > c.state_bytes


def test_the_pairwise_all_to_all_price_is_the_collectives_scripts():
    from lecture09.ranks import all_to_all
    for n, p in ((1024, 2), (4096, 4), (3 * 2 ** 20, 8)):
        assert P._pairwise_all_to_all_s(n, p, ALPHA, 25e9) == pytest.approx(
            all_to_all.time_s("pairwise", n, p, ALPHA, 25e9))


def test_validity_of_the_new_dimensions():
    c8 = cluster(8)
    assert "DP × PP × TP × CP = 4" in P.why_invalid(TOY, c8, P.Plan(1, 2, 1, cp=2), 16)
    assert "DP × PP × TP = 4" in P.why_invalid(TOY, c8, P.Plan(2, 2, 1), 16)
    assert "之字形" in P.why_invalid(replace(TOY, seq_len=1000), c8, P.Plan(1, 1, 1, cp=8), 16)
    assert "稠密模型没有专家" in P.why_invalid(TOY, c8, P.Plan(8, 1, 1, ep=2), 16)
    assert "EP 8 要整除" in P.why_invalid(TOY_MOE, c8, P.Plan(8, 1, 1, ep=8), 16)      # 4 experts
    assert "EP 4 要整除" in P.why_invalid(TOY_MOE, c8, P.Plan(2, 1, 1, cp=4, ep=4), 16)   # DP 2
    assert "注意力头" in P.why_invalid(TOY_MOE, c8, P.Plan(2, 1, 4), 16)                  # 2 K/V heads
    assert P.why_invalid(TOY_MOE, c8, P.Plan(4, 1, 1, cp=2, ep=4), 16) is None
    with pytest.raises(ValueError):
        P.plan_cost(TOY, c8, P.Plan(8, 1, 1, ep=2), 16)


def test_the_search_space():
    """Ordered 4-tuples with product 8: C(3 + 3, 3) = 20; with EP for 4 experts, every EP in
    {1, 2, 4} that divides DP; the default stays the 3D one."""
    c8 = cluster(8)
    assert len(P.all_plans(c8)) == 10 and all(p.cp == p.ep == 1 for p in P.all_plans(c8))
    with_cp = P.all_plans(c8, TOY, with_cp=True)
    assert len(with_cp) == 20 and len(set(with_cp)) == 20
    assert P.all_plans(c8, TOY, with_cp=True, with_ep=True) == with_cp            # dense: EP stays 1
    with_ep = P.all_plans(c8, TOY_MOE, with_cp=True, with_ep=True)
    by_hand = sum(len([e for e in (1, 2, 4) if p.dp % e == 0]) for p in with_cp)
    assert len(with_ep) == by_hand and max(p.ep for p in with_ep) == 4
    assert str(P.Plan(4, 32, 2, cp=4)) == "(4, 32, 2) CP 4" and str(P.Plan(2, 1, 1, cp=2, ep=2)) == "(2, 1, 1) CP 2 EP 2"
    assert str(P.Plan(8, 4, 2)) == "(8, 4, 2)"


def test_the_best_plan_over_every_dimension_beats_every_other_that_fits():
    m, c = P.MOE_MODELS["8x7B"], cluster(64)
    plans = P.all_plans(c, m, with_cp=True, with_ep=True)
    best = P.best_plan(m, c, 256, plans=plans)
    for plan in plans:
        if not P.why_invalid(m, c, plan, 256):
            cost = P.plan_cost(m, c, plan, 256)
            assert not cost.fits or cost.iteration_s >= best.iteration_s


def setup(batch, recompute="selective"):
    return SimpleNamespace(global_batch=batch, micro_batch=1, zero_stage=1, recompute=recompute)


def dims(model, n, batch, recompute="selective"):
    return R.dimension_table(setup(batch, recompute), model, cluster(n), out=lambda line: None)


@pytest.mark.parametrize("model, n, batch, seq, starts, has", [
    ("175B", 8, 1536, None, "加上 CP 也没有一种放得下", ()),
    ("7B", 64, 16, 131072, "只用 (DP, PP, TP) 放不下，加上 CP 才放得下：(4, 1, 4) CP 4", ("32768 个位置", "这里 1 × 32768", "要实测")),
    ("1.3B", 8, 64, None, "CP 没被选上：带上它最好的 (4, 1, 1) CP 2", ("逐项：CP 0.00 → 0.04 s",)),
    ("1.3B", 1, 8, None, "CP 在这里没有别的可行大小：(1, 1, 1) 就是最好的", ()),
    ("175B", 1024, 1536, None, "规划器选了 CP：(4, 32, 2) CP 4 30.24 s", ("快 2.3%", "TP 1.68 → 0.24", "要实测")),
    ("8x7B", 256, 4096, None, "规划器选了 EP：(256, 1, 1) EP 8 49.05 s", ("CP 没被选上",)),
    ("8x7B", 256, 1024, None, "规划器选了 CP：(2, 16, 2) CP 4", ("EP 没被选上：带上它最好的 (4, 16, 1) CP 4 EP 2",)),
])
def test_the_dimension_sentence_on_each_branch(capsys, model, n, batch, seq, starts, has):
    shape = P.PLAN_MODELS[model] if seq is None else replace(P.PLAN_MODELS[model], seq_len=seq)
    d = dims(shape, n, batch)
    capsys.readouterr()
    text = R.dimension_sentence(d, shape, 1)
    assert text.startswith(starts), text
    assert all(x in text for x in has), text
    if d["best"] is not None and d["best"].plan.cp == 1:
        assert "要实测" not in text
    if d["best3"] is not None and d["best"] is not None:
        assert d["best"].iteration_s <= d["best3"].iteration_s


def test_the_dimension_table_rows_are_the_best_at_each_size(capsys):
    m, c = P.MOE_MODELS["8x7B"], cluster(256)
    d = dims(m, 256, 1024)
    out = capsys.readouterr().out
    plans = P.all_plans(c, m, with_cp=True, with_ep=True)
    for label, cost in d["rows"]:
        size = int(label.split()[1])
        keep = [p for p in plans if (p.cp if label.startswith("CP") else p.ep) == size]
        assert cost == P.best_plan(m, c, 1024, plans=keep)
        assert f"{cost.iteration_s:.2f}" in out and str(cost.plan) in out
    assert [label for label, _ in d["rows"]] == ["CP 1", "CP 2", "CP 4", "CP 8", "CP 16", "EP 2", "EP 4", "EP 8"]
    said = []
    R.dimension_table(setup(1024), m, c, out=said.append)
    assert "在全部 341 种可行的排法里最好的是 (2, 16, 2) CP 4，13.00 s；只用 (DP, PP, TP) 最好的是 (16, 4, 4)，" \
           "13.41 s。" in said


def test_term_changes_lists_only_what_moved():
    m = mm.MODELS["1.3B"]
    a = P.plan_cost(m, cluster(8), P.Plan(8, 1, 1), 64)
    b = P.plan_cost(m, cluster(8), P.Plan(4, 1, 1, cp=2), 64)
    assert R.term_changes(a, b) == f"CP 0.00 → {b.cp_s:.2f} s" and b.cp_s > 0.005
    assert R.term_changes(a, a) == ""


def test_demo4_with_an_moe_and_a_long_sequence_from_the_command_line():
    code4 = load_script(LECTURE09 / "04_pipeline.py")
    _, out = main_quietly(code4.main, ["--demo", "4", "--plan-model", "8x7B", "--plan-gpus", "256",
                                       "--global-batch", "4096"])
    assert "EP s" in out and "规划器选了 EP" in out and "只有一个可以对照" in out and "N 是每个 token 用到的参数" in out
    flat = re.sub(r"\n\s*", "", out)
    assert "46.7B 参数，其中专家 45.1B" in flat and "12.9B；容量因子 1.25（我们定的）" in flat
    _, out = main_quietly(code4.main, ["--demo", "4", "--plan-model", "7B", "--plan-gpus", "64", "--global-batch", "16",
                                       "--plan-seq-len", "131072"])
    assert "EP s" not in out and "加上 CP 才放得下" in out and "× 131072 token" in out
    _, out = main_quietly(code4.main, ["--demo", "4", "--plan-seq-len", "4096"])
    assert "对照发表的运行" not in out                       # the published run is at s = 2048
