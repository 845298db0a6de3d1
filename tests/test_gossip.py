"""Gossip local SGD (compress/gossip.py; notes §11.6): the matching, the spread and the bytes
by hand; one exchange by hand in both modes; with two workers gossip is the all-reduce bit
for bit; the all-reduce mode is DiLoCo with outer lr 1 and no momentum."""

import re
from dataclasses import replace

import pytest
import torch

from lecture09.compress import compressed_dp as cdp
from lecture09.compress import gossip
from notes_book import LECTURE09_BOOK


def test_a_matching_pairs_every_worker_once_and_leaves_one_out_when_odd():
    gen = torch.Generator().manual_seed(0)
    for n in (2, 4, 8):
        pairs = gossip.matching(n, gen)
        assert sorted(w for p in pairs for w in p) == list(range(n))
    pairs = gossip.matching(5, gen)
    assert len(pairs) == 2 and len({w for p in pairs for w in p}) == 4
    again = gossip.matching(8, torch.Generator().manual_seed(3))
    assert again == gossip.matching(8, torch.Generator().manual_seed(3))     # seeded


def test_spread_by_hand():
    assert gossip.spread([torch.tensor([1.0, 0.0])] * 3) == 0.0
    # v̄ = (1, 0); deviations ±(0, 1): sqrt(mean of 1, 1) / 1 = 1
    assert gossip.spread([torch.tensor([1.0, 1.0]), torch.tensor([1.0, -1.0])]) == pytest.approx(1.0)


def test_one_exchange_by_hand_in_both_modes():
    v = [torch.tensor([float(k)]) for k in range(4)]
    assert [x.item() for x in gossip.exchange(v, "all", None)] == [1.5] * 4
    gen = torch.Generator().manual_seed(1)
    pairs = gossip.matching(4, torch.Generator().manual_seed(1))
    out = gossip.exchange(v, "gossip", gen)
    for a, b in pairs:
        assert out[a].item() == out[b].item() == (a + b) / 2
    assert [x.item() for x in v] == [0.0, 1.0, 2.0, 3.0]                    # inputs left alone


def test_bytes_per_exchange_by_hand():
    # one fp32 copy of the model per worker per exchange in either mode, as DiLoCo's row counts
    assert gossip.bytes_per_exchange("gossip") == gossip.bytes_per_exchange("all") == 4.0
    assert gossip.ring_bytes_per_exchange(4) == 6.0                           # 2 (W − 1) / W × 4
    assert gossip.ring_bytes_per_exchange(2) == 4.0
    with pytest.raises(ValueError):
        gossip.bytes_per_exchange("ring")


def _setup(n_workers=4, steps=6):
    return replace(cdp.TrainSetup().with_steps(steps), n_workers=n_workers, precision="fp32")


def test_with_two_workers_gossip_is_the_all_reduce_bit_for_bit():
    setup, seeds = _setup(n_workers=2), cdp.Seeds(0, 1)
    a = cdp.train_run(cdp.Run("all", "gossip", "none", param=(3, "all")), seeds, setup)
    g = cdp.train_run(cdp.Run("gossip", "gossip", "none", param=(3, "gossip")), seeds, setup)
    assert a.losses == g.losses and a.bpc == g.bpc and a.spread == g.spread


def test_the_all_reduce_mode_is_diloco_with_outer_lr_1_and_no_momentum():
    setup, seeds = replace(_setup(), outer_lr=1.0, outer_momentum=0.0), cdp.Seeds(0, 1)
    ours = cdp.train_run(cdp.Run("all", "gossip", "none", param=(3, "all")), seeds, setup)
    plain = cdp.train_run(cdp.Run("DiLoCo", "diloco", "none", param=3), seeds, setup)
    # θ ← mean θ_w here, θ ← θ − mean(θ − θ_w) there: equal up to rounding
    assert ours.losses == pytest.approx(plain.losses, abs=1e-5)
    assert ours.bpc == pytest.approx(plain.bpc, abs=1e-5)
    assert ours.spread[0] > 0 and ours.spread[1] == 0.0                     # everyone equal after
    assert ours.bytes_per_element == pytest.approx(4.0 * 2 / 6, rel=1e-12)  # two exchanges in 6 steps,
    assert ours.bytes_per_element == plain.bytes_per_element                 # counted as DiLoCo's are


def test_gossip_leaves_the_replicas_apart_and_sends_one_model_per_exchange():
    setup, seeds = _setup(), cdp.Seeds(0, 1)
    g = cdp.train_run(cdp.Run("gossip", "gossip", "none", param=(3, "gossip")), seeds, setup)
    a = cdp.train_run(cdp.Run("all", "gossip", "none", param=(3, "all")), seeds, setup)
    assert 0 < g.spread[1] < g.spread[0]                                     # closer, not equal
    assert g.bytes_per_element == pytest.approx(4.0 * 2 / 6, rel=1e-12)
    assert g.losses[:3] == a.losses[:3] and g.losses[3:] != a.losses[3:]     # the same until they talk


# --- pricing on demo 1's network (schedule/gossip_pricing.py), by hand ---------------------

def test_perfect_matchings_count_and_cover():
    from lecture09.schedule.gossip_pricing import perfect_matchings
    assert len(perfect_matchings(range(8))) == 105                           # 7 × 5 × 3 × 1
    assert perfect_matchings([3, 5]) == [[(3, 5)]]
    assert all(sorted(w for p in m for w in p) == [0, 1, 2, 3] for m in perfect_matchings(range(4)))
    with pytest.raises(ValueError):
        perfect_matchings(range(3))


def test_expected_max_of_independent_by_hand():
    from lecture09.schedule.gossip_pricing import expected_max_of_independent
    assert expected_max_of_independent([[1.0, 3.0]]) == 2.0
    # max of two fair coins over {1, 3}: 3 unless both are 1 (1/4): 1/4 + 3 × 3/4 = 2.5
    assert expected_max_of_independent([[1.0, 3.0], [1.0, 3.0]]) == 2.5


def test_price_groups_by_hand():
    from lecture09.schedule.gossip_pricing import price_groups
    # one group of 4: pairs (0,1) 1 s, (2,3) 1 s, the cross pairs 10 s; matchings
    # {01, 23} slowest 1, {02, 13} 10, {03, 12} 10: the round expects (1 + 10 + 10) / 3
    pairs = {(0, 1): 1.0, (2, 3): 1.0, (0, 2): 10.0, (0, 3): 10.0, (1, 2): 10.0, (1, 3): 10.0}
    p = price_groups([pairs])
    assert (p.own_min_s, p.own_max_s, p.n_pairs) == (1.0, 10.0, 6)
    assert p.own_mean_s == pytest.approx(42 / 6)
    assert p.round_mean_s == pytest.approx(21 / 3)


def test_pair_seconds_are_one_alpha_beta_term_of_the_whole_stage():
    import numpy as np
    from lecture09.schedule.gossip_pricing import pair_seconds
    net = {"latency_s": np.array([[0, 0.1], [0.1, 0]]), "bandwidth_bps": np.array([[1, 8e9], [8e9, 1]])}
    [pairs] = pair_seconds(net, [[0, 1]], 1e9)                               # 1 GB over 8 Gbit/s
    assert pairs == {(0, 1): pytest.approx(0.1 + 1.0)}


def test_on_demo_1s_network_a_round_is_no_faster_than_the_ring():
    from lecture09.schedule import gossip_pricing, sync_pricing
    price, ring, plain, setup = gossip_pricing.price_gossip(4.0)
    prices, _, plain2 = sync_pricing.price_syncs({"d": (4.0, 30, 0)})
    assert ring == prices["d"].sync_s and plain == plain2                    # table (d)'s figures
    assert price.n_pairs == setup.n_stages * 28                              # 8 replicas: 28 pairs each
    assert price.own_min_s < price.own_mean_s < ring <= price.round_mean_s <= price.own_max_s


# --- table (i) and (j) observations on each branch -----------------------------------------

def _table(bpcs, spreads, h=30, outer_momentum=0.9):
    """Table (i) from made-up bpcs: AdamW, DiLoCo, [DiLoCo momentum 0,] full average, gossip.
    Given four rows of figures (the table before the momentum-0 row), that row copies DiLoCo's."""
    from lecture09.compress import gossip_report as gr
    from lecture09.compress.training import RunResult
    rows = gr.build_rows(h, outer_momentum)
    if len(rows) == 5 and len(bpcs) == 4:
        bpcs, spreads = bpcs[:2] + [bpcs[1]] + bpcs[2:], spreads[:2] + [()] + spreads[2:]
    sent = [4.0] + [4.0 / h] * (len(rows) - 1)
    runs = []
    for row, per_seed, b, sp in zip(rows, bpcs, sent, spreads):
        runs += [RunResult(row.run, cdp.Seeds(0, 0).shifted(k), x, b, 0.0, x != x, 300, 1.0, spread=sp)
                 for k, x in enumerate(per_seed)]
    return gr.collect(rows, iter(runs), len(bpcs[0]))


def test_table_i_observations_follow_the_numbers():
    from lecture09.compress import gossip_report as gr
    worse = _table([[1.5, 1.6], [1.9, 1.9], [2.0, 2.1], [2.1, 2.2]], [(), (), (0.03, 0.0), (0.04, 0.01)])
    lines = gr.table_i_observations(worse, 4)
    assert "平均每步每个参数都发 0.1333 字节" in lines[0] and "2(W − 1)/W = 1.50 倍（W = 4）" in lines[0]
    assert "W = 2 时环形 all-reduce 每人也只发一份" in gr.table_i_observations(worse, 2)[0]
    # unequal bytes (a row counted another way) are printed side by side, not called equal
    words = gr.bytes_words("gossip", "全体平均", 0.1333, 0.2, 4)
    assert words.startswith("字节：「gossip」平均每步每个参数发 0.1333 字节，「全体平均」发 0.2000") and "都发" not in words
    assert "+0.1000，各种子 +0.1000..+0.1000（更差）" in lines[1]
    assert "交换后还有 0.0100，是交换前（0.0400）的 25%" in lines[2] and "交换后是 0.0000" in lines[2]
    same = _table([[1.5], [1.9], [2.0], [2.005]], [(), (), (0.03, 0.0), (0.04, 0.01)])
    assert "（差不多）" in gr.table_i_observations(same, 4)[1] and "--seeds 5" in gr.table_i_observations(same, 4)[1]
    diverged = _table([[1.5], [1.9], [2.0], [float("nan")]], [(), (), (0.03, 0.0), (0.04, 0.01)])
    assert "有一行发散了" in gr.table_i_observations(diverged, 4)[1]


def test_the_momentum_0_row_is_diloco_with_outer_momentum_0():
    from lecture09.compress import gossip_report as gr
    setup, seeds = _setup(), cdp.Seeds(0, 1)
    rows = {r.run.optimizer: r.run for r in gr.build_rows(3)}
    control = cdp.train_run(rows["diloco-no-momentum"], seeds, setup)
    by_hand = cdp.train_run(rows["diloco"], seeds, replace(setup, outer_momentum=0.0))
    with_momentum = cdp.train_run(rows["diloco"], seeds, setup)
    assert control.losses == by_hand.losses and control.bpc == by_hand.bpc          # one change: the momentum
    assert control.losses[3:] != with_momentum.losses[3:]
    # with no momentum in DiLoCo the row would repeat DiLoCo's: it is left out
    assert "diloco-no-momentum" not in {r.run.optimizer for r in gr.build_rows(3, 0.0)}


def test_the_outer_step_is_split_one_change_at_a_time():
    from lecture09.compress import gossip_report as gr
    # per seed: DiLoCo − momentum 0 = +0.03, +0.03; momentum 0 − full average = +0.07, +0.06
    t = _table([[1.5, 1.5], [1.90, 1.89], [1.87, 1.86], [1.80, 1.80], [1.82, 1.82]], [(), (), (), (0.03, 0.0), (0.04, 0.01)])
    words = gr.outer_step_words(t, 0.7, 0.9)
    assert "「DiLoCo，每 30 步」（lr 0.7，动量 0.9）比「全体平均（对照）」：+0.0950，各种子 +0.0900..+0.1000（更差）" in words
    assert "动量那一份（「DiLoCo，每 30 步」减「DiLoCo，每 30 步，动量 0」）+0.0300，各种子 +0.0300..+0.0300（更差）" in words
    assert "lr 那一份（0.7 对 1，「DiLoCo，每 30 步，动量 0」减「全体平均（对照）」）+0.0650，各种子 +0.0600..+0.0700（更差）" in words
    assert words.endswith("两份同号，平均来看lr那一份大") and "舍入" not in words
    assert words == gr.table_i_observations(t, 4)[-1]
    momentum = _table([[1.5], [1.95], [1.85], [1.80], [1.82]], [(), (), (), (0.03, 0.0), (0.04, 0.01)])
    assert gr.outer_step_words(momentum, 0.7, 0.9).endswith("平均来看动量那一份大")
    opposite = _table([[1.5], [1.80], [1.90], [1.80], [1.82]], [(), (), (), (0.03, 0.0), (0.04, 0.01)])
    w = gr.outer_step_words(opposite, 0.7, 0.9)
    assert "比「全体平均（对照）」：0.0000（差不多）" in w and w.endswith("两份方向相反，互相抵消了一部分")
    # a part within the tolerance: which is larger is not said
    small = _table([[1.5], [1.905], [1.90], [1.80], [1.82]], [(), (), (), (0.03, 0.0), (0.04, 0.01)])
    w = gr.outer_step_words(small, 0.7, 0.9)
    assert "+0.0050（差不多）" in w and "那一份大" not in w and "相反" not in w
    # seeds that disagree on the momentum's sign: no ranking either
    mixed = _table([[1.5, 1.5], [1.90, 1.85], [1.87, 1.88], [1.80, 1.80], [1.82, 1.82]],
                   [(), (), (), (0.03, 0.0), (0.04, 0.01)])
    w = gr.outer_step_words(mixed, 0.7, 0.9)
    assert "（种子之间不一致）" in w and "那一份大" not in w and "相反" not in w
    # printed parts that do not add up to the printed total in the last digit are said to be rounding
    rounding = _table([[1.5], [1.90006], [1.80003], [1.8], [1.82]], [(), (), (), (0.03, 0.0), (0.04, 0.01)])
    assert "是舍入" in gr.outer_step_words(rounding, 0.7, 0.9)
    assert gr.outer_step_words(t, 1.0, 0.9).endswith("lr 已经是 1，后一段只是舍入")
    diverged = _table([[1.5], [1.9], [float("nan")], [1.8], [1.82]], [(), (), (), (0.03, 0.0), (0.04, 0.01)])
    assert gr.outer_step_words(diverged, 0.7, 0.9).endswith("发散了，拆不开")


def test_without_outer_momentum_the_outer_step_differs_only_in_lr():
    from lecture09.compress import gossip_report as gr
    t = _table([[1.5], [1.9], [1.8], [1.82]], [(), (), (0.03, 0.0), (0.04, 0.01)], outer_momentum=0.0)
    assert len(t) == 4
    assert gr.outer_step_words(t, 0.7, 0.0).endswith("两行只差外层 lr（0.7 和 1）")
    assert gr.outer_step_words(t, 1.0, 0.0).endswith("同一个计算，只差舍入")
    assert gr.table_i_observations(t, 4, outer_lr=0.7, outer_momentum=0.0)[-1].endswith("（0.7 和 1）")


def test_table_j_observations_follow_the_numbers():
    from lecture09.compress import gossip_report as gr
    from lecture09.schedule.gossip_pricing import GossipPrice
    slow = GossipPrice(16.0, 1.0, 33.0, 32.5, 112)
    lines = gr.table_j_observations(gr.price_rows(slow, 32.0, 30), slow)
    assert "是环形的 32.00 秒的 50%" in lines[0]
    assert "不比环形快（多 0.50 秒）" in lines[1] and "只在副本不等别人的时候" in lines[1]
    fast = GossipPrice(16.0, 1.0, 20.0, 18.0, 112)
    lines = gr.table_j_observations(gr.price_rows(fast, 32.0, 30), fast)
    assert "比环形快 14.00 秒" in lines[1]
    never = GossipPrice(40.0, 35.0, 45.0, 44.0, 112)
    lines = gr.table_j_observations(gr.price_rows(never, 32.0, 30), never)
    assert "不比环形的 32.00 秒快" in lines[0] and "只在副本不等别人" not in lines[1]


def test_quick_run_of_demo_5_prints_what_it_returns():
    from conftest import LECTURE09, load_script, main_quietly
    from lecture01.console import display_width
    results, out = main_quietly(load_script(LECTURE09 / "11_frontier.py").main, ["--demo", "5", "--quick"])
    assert set(results) == {"demo5"}
    demo5 = results["demo5"]
    assert "(i) 小 GPT" in out and "(j) 每 6 步交换一次整个模型" in out
    assert all(display_width(line) <= 100 for line in out.splitlines())
    for label, (row, (run,), _) in demo5["table"].items():
        assert f"{run.bpc:.4f}" in out
        if row.run.param and row.run.optimizer == "gossip":                 # 12 steps, H = 6: two exchanges
            assert run.bytes_per_element == pytest.approx(gossip.bytes_per_exchange(row.run.param[1]) * 2 / 12)
    assert f"{demo5['price'].own_mean_s:.2f}" in out and f"{demo5['price'].round_mean_s:.2f}" in out
    for line in demo5["observations"]:
        assert line[:30] in out.replace("\n     ", "")


def test_with_demo_2_adamw_and_diloco_are_demo_2s_runs():
    from conftest import shared_quick_run
    results, out = shared_quick_run("11_frontier.py")
    two, five = (list(results[d]["table"].values()) for d in ("demo2", "demo5"))
    assert five[0][1] == two[0][1] and five[1][1] == two[1][1]           # trained once (Arrivals)
    assert out.index("(i) 小 GPT") > out.index("(g) 小 GPT")


def _notes_section():
    from conftest import ROOT
    text = LECTURE09_BOOK.read_text(encoding="utf-8")
    start = text.index("### 11.6 ")
    return text[start:text.index("**本节参考文献**", start)]


def _notes_rows(first_cells):
    section = _notes_section()
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in section.splitlines() if line.startswith(first_cells))}


ROWS = ("| DiLoCo，", "| 全体平均（", "| gossip，")


def test_the_notes_table_i_quotes_the_bytes_by_arithmetic():
    rows = _notes_rows(ROWS)
    assert len(rows) == 4
    assert rows["gossip，一个随机同伴"][1] == f"{gossip.bytes_per_exchange('gossip') / 30:.4f}"
    assert rows["全体平均（对照）"][1] == f"{gossip.bytes_per_exchange('all') / 30:.4f}"


def test_the_notes_table_i_quotes_diloco_s_bytes_by_arithmetic():
    """DiLoCo's row sends one fp32 pseudo-gradient per exchange (what local_sgd counts), every H
    steps: bytes per step = one exchange's bytes × exchanges / steps. No training needed."""
    from conftest import LECTURE09, load_script
    from lecture01 import tiny_gpt
    from lecture09.compress import gossip_report as gr
    from lecture09.compress import local_sgd
    h, setup = load_script(LECTURE09 / "11_frontier.py").DEFAULTS["sync_every"], cdp.TrainSetup()
    row = next(r for r in gr.build_rows(h) if r.run.optimizer == "diloco")
    n = tiny_gpt.make_model(setup.model).n_params()
    _, sent = local_sgd.PseudoGradientExchange(row.run, setup)([torch.zeros(n)] * setup.n_workers)
    exchanges = -(-setup.recipe.steps // h)                     # and one more at the end if h does not divide
    assert _notes_rows(ROWS)[row.label][1] == f"{sent / n * exchanges / setup.recipe.steps:.4f}"
    # the momentum-0 row is DiLoCo with another outer step: the same exchange, the same bytes
    control = next(r for r in gr.build_rows(h) if r.run.optimizer == "diloco-no-momentum")
    assert _notes_rows(ROWS)[control.label][1] == _notes_rows(ROWS)[row.label][1]


def _spread_of(models):
    return gossip.spread([torch.nn.utils.parameters_to_vector(m.parameters()).detach() for m in models])


def _spreads_of_diloco_workers(monkeypatch, h, steps):
    """(the workers' spread before each inner step, after training) of a short DiLoCo run,
    read from the workers local_sgd.inner_step is given."""
    from lecture09.compress import local_sgd
    before, seen, inner_step = [], {}, local_sgd.inner_step

    def recording(workers, *args):
        seen["workers"] = workers
        before.append(_spread_of(workers))
        return inner_step(workers, *args)

    monkeypatch.setattr(local_sgd, "inner_step", recording)
    cdp.train_run(cdp.Run("DiLoCo", "diloco", "none", param=h), cdp.Seeds(0, 1), _setup(steps=steps))
    return before, _spread_of(seen["workers"])


def test_the_notes_split_of_the_outer_step_adds_up_seed_by_seed():
    """§11.6's per-seed parts of DiLoCo minus the full average: momentum's + lr's = the total,
    whose range the paired table quotes (-0.1203..-0.0674 for full average minus DiLoCo); the
    lr part is positive on every seed, the momentum part changes sign (what the heading says)."""
    section = _notes_section()
    figures = (lambda text: [float(x.strip().replace("−", "-")) for x in text.split("、")])
    momentum = figures(re.search(r"动量那一份是 ([^，]+)，", section).group(1))
    lr = figures(re.search(r"lr 那一份是 ([^（]+)（", section).group(1))
    assert len(momentum) == len(lr) == 5
    total = [m + l for m, l in zip(momentum, lr)]
    # each part is rounded to 4 decimals, so their sum may miss the total by 0.0001 (the notes say so)
    assert max(total) == pytest.approx(0.1203, abs=1.01e-4) and min(total) == pytest.approx(0.0674, abs=1.01e-4)
    assert "最多差 0.0001" in section
    assert all(x > cdp.DELTA_TOLERANCE_BPC for x in lr) and min(momentum) < 0 < max(momentum)
    assert f"| {min(lr):+.4f}..{max(lr):+.4f}，平均 {sum(lr) / 5:+.3f} |" in section
    assert f"| {min(momentum):+.4f}..{max(momentum):+.4f}，平均 {sum(momentum) / 5:+.3f} |" in section


def test_the_notes_diloco_spread_after_an_exchange_is_0_by_construction(monkeypatch):
    """Table (i)'s DiLoCo row: "0（按构造：人人从 θ_global 重新开始）": every worker restarts from
    θ_global, so after each exchange the replicas are equal (and apart between exchanges)."""
    before, last = _spreads_of_diloco_workers(monkeypatch, h=3, steps=6)
    cell = _notes_rows(ROWS)["DiLoCo，每 30 步"][4]
    assert float(re.match(r"\d+(\.\d+)?", cell).group()) == 0.0, cell
    assert before[3] == 0.0 and last == 0.0                     # just after the exchanges at steps 3 and 6
    assert before[2] > 0                                        # apart before one: the spread can see it


def test_the_notes_table_j_figures_are_the_pricing():
    from lecture09.schedule import gossip_pricing
    price, ring, _, _ = gossip_pricing.price_gossip(4.0)
    section = _notes_section()
    for figure in (ring, price.own_min_s, price.own_max_s, price.own_mean_s, price.round_mean_s,
                   price.round_mean_s - ring):
        assert f"{figure:.2f} 秒" in section, figure


# §11.6's ranges are 5 draws (seed pairs (k, k+1)) in each forward precision; the default seed
# pair is one of them, so a default run in either precision lies in that precision's column,
# widened by TOL (another CPU sums in another order); the spread, measured in fp32, by SPREAD_TOL.
TOL, SPREAD_TOL = 0.01, 0.002


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def default_demo_5(request):
    """(precision, table (i)) of demo 5 at its defaults in one forward precision: one run each,
    shared by this module's claims tests."""
    from conftest import frontier_default_run
    return request.param, frontier_default_run(5, request.param)


@pytest.mark.slow
@pytest.mark.claims
def test_each_rows_delta_lies_in_the_notes_range_of_its_precision(default_demo_5):
    from conftest import assert_deltas_in_notes_ranges
    precision, table = default_demo_5
    assert_deltas_in_notes_ranges(_notes_section(), precision, table, 3, TOL)          # AdamW: the baseline


@pytest.mark.slow
@pytest.mark.claims
def test_the_paired_differences_lie_in_the_notes_ranges_of_their_precision(default_demo_5):
    from conftest import notes_range, notes_row
    from lecture09.compress import gossip_report as gr
    precision, table = default_demo_5
    diloco, control, gos = list(table)[1:]
    for name, (a, b) in (("gossip 减 全体平均", (gos, control)), ("全体平均 减 DiLoCo", (control, diloco))):
        [diff] = gr._pair(table, a, b)
        lo, hi = notes_range(notes_row(_notes_section(), name)[f"{precision}（5 组种子）"])
        assert lo - TOL <= diff <= hi + TOL, (precision, name, diff)


@pytest.mark.slow
@pytest.mark.claims
def test_the_spread_after_an_exchange_is_the_notes_fp32_figure(default_demo_5):
    """Gossip's spread lies in its range; the full average's is the notes' "0.0000" as printed."""
    from conftest import notes_range, notes_row
    precision, table = default_demo_5
    if precision != "fp32":
        pytest.skip("the notes quote the spread in fp32 only")
    _, control, gos = list(table)[1:]
    lo, hi = notes_range(notes_row(_notes_section(), gos)["交换后散布 fp32"])
    assert lo - SPREAD_TOL <= table[gos][1][0].spread[1] <= hi + SPREAD_TOL, (gos, table[gos][1][0].spread)
    quoted = re.match(r"\d+\.\d+", notes_row(_notes_section(), control)["交换后散布 fp32"]).group()
    assert f"{table[control][1][0].spread[1]:.{len(quoted.split('.')[1])}f}" == quoted, (control, quoted)
    assert table[control][1][0].spread[1] == 0.0                 # everyone equal after: exactly
