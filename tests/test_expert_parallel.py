"""Lecture 9 code 4, demo 6: the mixture-of-experts layer by hand (routing, capacity,
priority, dispatch and combine), expert parallelism on real gloo ranks against one process,
the traffic formulas, every branch of the observations, and the flags."""

from dataclasses import replace

import pytest
import torch

from conftest import LECTURE09, SWEEP_TIER, load_script, main_quietly, shared_quick_run

from lecture09.parallel import expert_parallel as ep
from lecture09.parallel import expert_parallel_report as report
from lecture09.ranks import gloo_ranks

code4 = load_script(LECTURE09 / "04_pipeline.py")


# ---------------------------------------------------------------------------
# The layer by hand
# ---------------------------------------------------------------------------

def test_capacity_by_hand():
    assert ep.capacity(ep.MoEConfig(n_experts=4, top_k=2, capacity_factor=1.25, tokens_per_rank=64)) == 40
    assert ep.capacity(ep.MoEConfig(n_experts=8, top_k=1, capacity_factor=1.0, tokens_per_rank=10)) == 2   # ceil(1.25)
    assert ep.capacity(ep.MoEConfig(n_experts=16, top_k=2, capacity_factor=0.01, tokens_per_rank=1)) == 1


def test_routing_by_hand_fills_in_token_order_and_drops_past_the_capacity():
    """C = 2, E = 2, router = identity: token t goes to the expert of its larger coordinate.
    Capacity ceil(1·1·4/2) = 2: the third token for expert 0 is dropped."""
    cfg = ep.MoEConfig(dim=2, n_experts=2, top_k=1, capacity_factor=1.0, tokens_per_rank=4)
    x = torch.tensor([[3.0, 0.0], [2.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    expert, gate, slot = ep.route(x, torch.eye(2), cfg)
    assert expert[:, 0].tolist() == [0, 0, 1, 0]
    assert slot[:, 0].tolist() == [0, 1, 0, -1]
    assert gate[:, 0].tolist() == pytest.approx(torch.softmax(x, -1).max(-1).values.tolist())
    assert ep.dropped(slot) == 1


def test_top2_first_choices_are_served_before_second_choices():
    """Token 0 prefers expert 0, then 1; tokens 1 and 2 prefer 1, then 0. Capacity
    ceil(0.5·2·3/2) = 2. First choices: expert 0 gets token 0, expert 1 tokens 1 and 2 (full).
    Second choices: token 0's (expert 1) is dropped; token 1's takes expert 0's second slot;
    token 2's finds expert 0 full and is dropped."""
    cfg = ep.MoEConfig(dim=2, n_experts=2, top_k=2, capacity_factor=0.5, tokens_per_rank=3)
    x = torch.tensor([[2.0, 1.0], [0.0, 3.0], [0.0, 2.0]])
    expert, gate, slot = ep.route(x, torch.eye(2), cfg)
    assert expert.tolist() == [[0, 1], [1, 0], [1, 0]]
    assert slot.tolist() == [[0, -1], [0, 1], [1, -1]]
    assert gate.sum(-1).tolist() == pytest.approx([1, 1, 1])              # top-2 gates renormalised


def test_with_room_for_everyone_the_layer_is_the_gated_sum_of_its_experts():
    cfg = ep.MoEConfig(n_experts=4, top_k=2, capacity_factor=4.0, tokens_per_rank=16)
    x, _ = ep.make_inputs(cfg, 1)
    p = ep.make_params(cfg)
    y, slot = ep.group_forward(x[0], p, cfg)
    assert ep.dropped(slot) == 0
    probs = torch.softmax(x[0] @ p["router"].t(), -1)
    top, idx = probs.topk(2, -1)
    every = ep.run_experts(x[0].expand(4, -1, -1), p["w1"], p["b1"], p["w2"], p["b2"])   # (E, n, C)
    by_hand = torch.stack([sum(top[t, j] / top[t].sum() * every[idx[t, j], t] for j in range(2)) for t in range(16)])
    assert torch.allclose(y, by_hand, atol=1e-6)


def test_dispatch_then_combine_with_identity_experts_gives_back_the_kept_share():
    cfg = ep.MoEConfig(n_experts=4, top_k=2, capacity_factor=0.75, tokens_per_rank=32)
    x, _ = ep.make_inputs(cfg, 1)
    expert, gate, slot = ep.route(x[0], ep.make_params(cfg)["router"], cfg)
    y = ep.combine(ep.dispatch(x[0], expert, slot, cfg), expert, gate, slot, cfg)
    kept_gate = (gate * (slot >= 0)).sum(-1, keepdim=True)
    assert ep.dropped(slot) > 0 and torch.allclose(y, kept_gate * x[0], atol=1e-6)


def test_bad_configs_raise():
    with pytest.raises(ValueError):
        ep.check_config(ep.MoEConfig(n_experts=3), world_size=2)
    with pytest.raises(ValueError):
        ep.check_config(ep.MoEConfig(n_experts=1, top_k=2))
    with pytest.raises(ValueError):
        ep.check_config(ep.MoEConfig(top_k=3))


# ---------------------------------------------------------------------------
# Real ranks against one process
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("p,experts,k,cf,n", [(2, 4, 2, 1.25, 32), pytest.param(4, 8, 1, 1.0, 16, marks=SWEEP_TIER),
                                              pytest.param(2, 2, 1, 0.5, 8, marks=SWEEP_TIER),
                                              pytest.param(4, 4, 2, 2.0, 8, marks=SWEEP_TIER)])
def test_expert_parallel_equals_one_process(p, experts, k, cf, n):
    cfg = ep.MoEConfig(n_experts=experts, top_k=k, capacity_factor=cf, tokens_per_rank=n)
    r = report.check_expert_parallel(cfg, p)
    assert r["relative"] <= report.EP_RTOL, r
    assert r["dropped"] == r["ref_dropped"] and r["routers_agree"]
    assert r["sent_bytes"] == [ep.ep_bytes_per_rank(n, cfg.dim, experts, k, cf, p, 4)] * p


def test_a_wrong_expert_is_caught():
    """The check can fail: ranks that swap two experts' weights differ from one process."""
    cfg = ep.MoEConfig(n_experts=4, top_k=1, capacity_factor=2.0, tokens_per_rank=16)
    ranks = gloo_ranks.run_ranks(ep.ep_worker, 2, args=(cfg,), timeout_s=60)
    got, ref = ep.assemble(ranks, cfg), ep.reference(cfg, 2)
    assert torch.allclose(got["y"], ref["y"], atol=1e-6)
    swapped = {k: v.clone() for k, v in ep.make_params(cfg).items()}
    for k in ("w1", "b1", "w2", "b2"):
        swapped[k][[0, 1]] = swapped[k][[1, 0]]
    x, _ = ep.make_inputs(cfg, 2)
    wrong = torch.stack([ep.group_forward(x[q], swapped, cfg)[0] for q in range(2)]).detach()
    assert (wrong - ref["y"]).abs().max() > 1e-2


# ---------------------------------------------------------------------------
# Traffic
# ---------------------------------------------------------------------------

def test_traffic_by_hand():
    # 4 all-to-alls × (p − 1) blocks × E/p experts × capacity × C × bytes
    assert ep.ep_bytes_per_rank(64, 96, 8, 2, 1.25, 4, 4) == 4 * 3 * 2 * 20 * 96 * 4
    # 2 all-reduces × 2(p − 1)/p × tokens × C × bytes
    assert ep.tp_bytes_per_rank(32768, 4096, 8) == 2 * 2 * 7 * 32768 * 4096 * 2 // 8
    for p, e, t, ratio, formula in report.traffic_rows():
        assert ratio == pytest.approx(formula, rel=0.01)


def test_capacity_rows_trade_drops_for_bytes():
    rows = report.capacity_rows(ep.MoEConfig(n_experts=8, tokens_per_rank=64), 4)
    drops = [d for _, _, d, _, _, _ in rows]
    sent = [s for _, _, _, _, s, _ in rows]
    assert drops == sorted(drops, reverse=True) and sent == sorted(sent) and drops[0] > 0 == drops[-1]
    for cf, cap, d, share, s, empty in rows:
        slots = 4 * 8 * cap
        assert empty == pytest.approx((slots - (4 * 64 * 2 - d)) / slots)


# ---------------------------------------------------------------------------
# The quick run and every branch of the observations
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def quick6():
    return shared_quick_run("04_pipeline.py")              # demo 6 is part of it


def test_quick_demo6(quick6):
    r = quick6[0]["demo6"]
    assert r["relative"] <= report.EP_RTOL and r["dropped"] == r["ref_dropped"]
    assert "观察 Observations（演示 6）" in quick6[1] and "都和一个进程的一致" in quick6[1]


def observations(r, cfg=ep.MoEConfig(n_experts=8), world_size=4):
    lines = []
    report.demo6_observations(cfg, world_size, r, out=lines.append)
    return "\n".join(lines)


def fake(relative=1e-7, capacity=None, traffic=None):
    return {"relative": relative, "dropped": 3, "ref_dropped": 3,
            "capacity": capacity or [(0.5, 8, 100, 0.2, 1000, 0.0), (2.0, 32, 0, 0.0, 4000, 0.5)],
            "traffic": traffic or report.traffic_rows()}


def test_observation_branches():
    assert "都和一个进程的一致" in observations(fake())
    assert "没有都和一个进程的一致" in observations(fake(relative=1e-3))
    assert "容量因子 2 起就一个不丢" in observations(fake())
    never = fake(capacity=[(0.5, 8, 100, 0.2, 1000, 0.0), (2.0, 32, 5, 0.01, 4000, 0.4)])
    assert "表里最大的容量因子也还在丢" in observations(never)
    same = fake(capacity=[(0.5, 1, 0, 0.0, 1000, 0.9), (2.0, 1, 0, 0.0, 1000, 0.9)])
    assert "容量都是 1" in observations(same)
    text = observations(fake())
    assert "就是 cf·k/p" in text and "表里 p = 4、8" in text
    more = fake(traffic=[(2, 10, 5, 2.0, 1.25)])
    assert "都不比 cf·k = 2.5 大" in observations(more) and "差了 1% 以上" in observations(more)


@pytest.mark.parametrize("argv", [["--experts", "3"], ["--experts", "1", "--ep-ranks", "2"], ["--top-k", "3"],
                                  ["--capacity-factor", "0"], ["--capacity-factor", "9"], ["--tokens", "0"],
                                  ["--ep-ranks", "5"], ["--ep-ranks", "1"]])
def test_bad_flags_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code4.main(["--demo", "6"] + argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


def test_flags_reach_the_layer():
    args, *_, expert, context = code4.parse_args(["--experts", "4", "--top-k", "1", "--capacity-factor", "1.5",
                                         "--tokens", "8", "--ep-ranks", "2"])
    assert expert.ep_ranks == 2 and expert.moe == replace(code4.ExpertSetup.moe, n_experts=4, top_k=1,
                                                          capacity_factor=1.5, tokens_per_rank=8)
