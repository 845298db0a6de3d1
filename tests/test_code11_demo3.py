"""Code 11, demo 3: DeMo's tables (e) and (f). Hand-computed bytes and crossovers, the
1.3B's parameter count by hand, the torch-free byte count against the trained optimizer's,
each observation's branches from made-up tables, and the quick runs as a student runs them
(demo 3 alone, and with demo 2, whose every-step AdamW it reuses)."""

import math
import subprocess
import sys

import pytest
import torch

from conftest import (LECTURE09, assert_deltas_in_notes_ranges, frontier_default_run, notes_range, notes_row,
                      shared_quick_run)
from lecture09.compress import decoupled_momentum as dm
from lecture09.compress import decoupled_report as dr
from lecture09.compress import compressed_dp as cdp
from lecture09.compress.compressed_dp import Seeds
from lecture09.compress.training import RunResult
from lecture09.schedule.sync_pricing import SyncPrice
from notes_book import LECTURE09_BOOK


def test_received_bytes_by_hand():
    assert dr.received(0.5, True, 4) == 1.5                  # all-gather: the 3 others' pairs
    assert dr.received(4.0, False, 4) == 6.0                 # ring: 2 (W - 1) / W x 4
    assert dr.received(4.0, False, 2) == 4.0
    assert dr.received(0.5, True, 1) == 0.0                  # alone: nothing to receive


@pytest.mark.parametrize("sent,w", [(0.5, 17), (1.0, 9), (8.0, 2), (100.0, 2), (0.3, 27), (3.0, 3),
                                    (2.0, 5), (7.9, 2)])
def test_ring_crossover_is_the_first_w_with_s_w_above_8(sent, w):
    assert dr.ring_crossover(sent) == w
    # the definition itself: more than the ring at w, not more at w - 1 (when w - 1 >= 2)
    assert dr.received(sent, True, w) > dr.received(4.0, False, w)
    if w > 2:
        assert dr.received(sent, True, w - 1) <= dr.received(4.0, False, w - 1)


def test_ring_crossover_refuses_nothing_sent():
    with pytest.raises(ValueError):
        dr.ring_crossover(0.0)


def test_gpt3_xl_has_1315723264_parameters_by_hand():
    d, layers, vocab, context = 2048, 24, 50257, 2048
    embeddings = vocab * d + context * d                     # 102,926,336 + 4,194,304
    per_layer = 12 * d * d + 13 * d                          # qkv 3d²+3d, proj d²+d, MLP 8d²+5d, 2 LN 4d
    assert embeddings + layers * per_layer + 2 * d == 1_315_723_264
    assert sum(math.prod(s) for s in dr.gpt_shapes(**dr.XL)) == 1_315_723_264


@pytest.mark.parametrize("n,target,side", [(6, 4, 3), (7, 4, 1), (64, 64, 64), (96, 64, 48), (1, 64, 1),
                                           (50257, 64, 29), (2048, 1, 1)])
def test_chunk_side_by_hand_and_both_copies_agree(n, target, side):
    assert dr.chunk_side(n, target) == dm.chunk_side(n, target) == side


def test_demo_bytes_by_hand():
    # (6,) at chunk 4: side 3, 2 chunks of 3; k = 2 -> 2 x 2 pairs of (int16, fp32)
    assert dr.demo_bytes([(6,)], 2, 4) == (24, 6)
    # (4, 6) at chunk 4: chunks of 4 x 3 = 12 coefficients, 2 of them; k = 32 clamps to 12
    assert dr.demo_bytes([(4, 6)], 32, 4) == (2 * 12 * 6, 24)
    # 256 x 256 in one chunk: 65,536 coefficients need an int32 index
    assert dr.demo_bytes([(256, 256)], 1, 256) == (8, 65536)


@pytest.mark.parametrize("topk,chunk", [(32, 64), (1, 1), (8, 16), (4096, 64), (1, 256)])
def test_the_torch_free_count_equals_the_optimizers_bytes(topk, chunk):
    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    model = tiny_gpt.make_model(MODEL_CONFIG, seed=0)
    params = [p for p in model.parameters()] + [torch.zeros(256, 256)]
    demo = dm.DeMo(params, 4, topk=topk, chunk=chunk)
    total, n = dr.demo_bytes([tuple(p.shape) for p in params], topk, chunk)
    assert total == demo.sent_bytes and n == sum(p.numel() for p in params)


def test_build_rows_has_the_control_only_when_something_is_left_out():
    rows = dr.build_rows(32, 64, 0.01)
    assert [r.run.optimizer for r in rows] == ["adamw", "adamw", "demo", "demo"]
    assert rows[-1].control and rows[-1].run.param == (64 * 64, 64) and rows[2].run.param == (32, 64)
    assert [r.gathered for r in rows] == [False, True, True, True]
    assert len(dr.build_rows(16, 4, 0.01)) == 3                # k = chunk²: DeMo already sends everything


def _result(label, bpc, sent, k):
    run = next(r.run for r in dr.build_rows(32, 64, 0.01) if r.label.startswith(label))
    return RunResult(run, Seeds(0, 0).shifted(k), bpc, sent, 0.0, not math.isfinite(bpc), 300, 1.0)


def _table(bpcs, with_control=True):
    """bpcs: {row prefix: [bpc per seed]} for AdamW, top-k, DeMo (and the control)."""
    rows = dr.build_rows(32, 64, 0.01)
    if not with_control:
        rows = rows[:3]
    sent = {"AdamW": 4.0, "top-k": 0.0799, "DeMo，每块": 0.1334, "DeMo，系数": 6.0}
    runs = []
    for row in rows:
        prefix = next(p for p in sent if row.label.startswith(p))
        runs.extend(_result(prefix, b, sent[prefix], k) for k, b in enumerate(bpcs[prefix]))
    n = len(bpcs["AdamW"])
    return dr.collect(rows, iter(runs), n)


def test_collect_pairs_each_row_with_adamw_seed_by_seed():
    table = _table({"AdamW": [1.50, 1.60], "top-k": [2.5, 2.6], "DeMo，每块": [1.52, 1.58],
                    "DeMo，系数": [1.55, 1.65]})
    deltas = [d for (_, _, d) in table.values()]
    assert deltas[0] == (0.0, 0.0)
    assert deltas[2] == pytest.approx((0.02, -0.02))


def test_arrivals_train_a_shared_run_once_and_wait_only_for_what_is_needed():
    rows = dr.build_rows(32, 64, 0.01)
    runs = [r.run for r in rows]
    fed = []

    def results():
        for run in runs:
            for seed in range(2):
                fed.append(run)
                yield (run.label, seed)
    arrivals = cdp.Arrivals(runs, results(), 2)
    first = list(arrivals.for_rows(rows[:1]))
    assert first == [("AdamW", 0), ("AdamW", 1)] and len(fed) == 2         # nothing more was read
    again = list(arrivals.for_rows([rows[0], rows[2]]))
    assert again[:2] == first and again[2:] == [("DeMo", 0), ("DeMo", 1)]   # AdamW once, top-k read on the way
    assert arrivals.of(rows[0].run) is arrivals.of(rows[0].run)
    with pytest.raises(ValueError):
        cdp.Arrivals(runs + runs[:1], iter(()), 1)
    with pytest.raises(KeyError):
        cdp.Arrivals([], iter(()), 1).of(runs[0])


def test_observations_when_demo_is_close_and_the_seeds_agree_on_topk():
    lines = dr.table_e_observations(_table({"AdamW": [1.50, 1.60], "top-k": [2.5, 2.6],
                                            "DeMo，每块": [1.505, 1.595], "DeMo，系数": [1.55, 1.65]}), 4)
    assert lines[0].startswith("字节：DeMo 每步发出 0.1334 字节/参数，是 fp32 的 1/30.0；4 个工作者时每个收到 0.4002")
    assert "是它的 15.0 倍" in lines[0] and "从 W = 60 起" in lines[0]
    assert "「top-k 1% + 误差反馈（AdamW）」+1.0000（更差）" in lines[1]
    assert "「DeMo，每块 32 个」0.0000（差不多）" in lines[1]
    assert "「DeMo，系数全发（对照）」+0.0500（更差）" in lines[1] and "2 组种子都在同一边" in lines[1]
    assert "bits/字符 -1.0000，各种子 -1.0050..-0.9950（更好）" in lines[2]
    assert "每块 32 个减去全发：-0.0500，各种子 -0.0550..-0.0450（更好）" in lines[3]


def test_observations_when_the_seeds_disagree_or_a_row_diverged():
    lines = dr.table_e_observations(_table({"AdamW": [1.50, 1.60], "top-k": [2.5, float("nan")],
                                            "DeMo，每块": [1.55, 1.55], "DeMo，系数": [1.50, 1.60]}), 4)
    assert "「top-k 1% + 误差反馈（AdamW）」发散了" in lines[1]
    assert "「DeMo，每块 32 个」0.0000（种子之间不一致）" in lines[1]
    assert not any(line.startswith("DeMo 对 top-k") for line in lines)       # nothing to pair with
    assert "（种子之间不一致）" in lines[-1] and lines[-1].startswith("对照")


def test_observations_without_the_control_and_with_one_seed():
    lines = dr.table_e_observations(_table({"AdamW": [1.5], "top-k": [2.5], "DeMo，每块": [1.4]},
                                           with_control=False), 2)
    assert len(lines) == 3 and not any("对照" in line for line in lines)
    assert "2 个工作者时每个收到 0.1334" in lines[0]
    assert "「DeMo，每块 32 个」-0.1000（更好）" in lines[1] and "一组种子只是一次抽样，--seeds 5 给出范围" in lines[1]
    assert "各种子" not in lines[2]


def test_bytes_observation_when_demo_sends_every_coefficient():
    rows = dr.build_rows(1, 1, 0.01)                            # chunks of one coefficient
    assert len(rows) == 3
    runs = [RunResult(r.run, Seeds(0, 0), 1.5, sent, 0.0, False, 300, 1.0)
            for r, sent in zip(rows, (4.0, 0.0799, 6.0))]
    line = dr.table_e_observations(dr.collect(rows, iter(runs), 1), 4)[0]
    assert "是 fp32 的 1.50 倍（每块最多 1² = 1 个系数，k = 1 不比它少：每个系数都发了）" in line
    assert "每个收到 18.0000，AdamW 的环形 all-reduce 收到 6.0000，只有它的 1/3.0" in line
    assert "从 W = 2 起" in line


def test_price_rows_leave_out_the_control_and_charge_an_all_gather_as_eq_2():
    table = _table({"AdamW": [1.5], "top-k": [2.5], "DeMo，每块": [1.6], "DeMo，系数": [1.7]})
    priced, n = dr.price_rows(table, 32, 64, 0.01, 8)
    assert n == 1_315_723_264 and len(priced) == 3
    (c_adamw, s_adamw), (c_topk, s_topk), (c_demo, s_demo) = priced.values()
    assert (c_adamw, s_adamw) == (4.0, 4.0)
    assert s_topk == pytest.approx(0.08) and c_topk == pytest.approx(8 * 0.08 / 2)
    total, params = dr.demo_bytes(dr.gpt_shapes(**dr.XL), 32, 64)
    assert s_demo == total / params and c_demo == pytest.approx(8 * s_demo / 2)


def _price(sync_s, iteration_s):
    return SyncPrice(sync_s, 0.0, sync_s, 1, iteration_s)


def test_table_f_observations_say_faster_or_slower_from_the_numbers():
    priced = {"AdamW": (4.0, 4.0), "A": (0.3, 0.08), "B": (9.0, 2.0)}
    lines = dr.table_f_observations(priced, {"AdamW": _price(32.0, 55.0), "A": _price(4.0, 27.0),
                                             "B": _price(40.0, 63.0)}, 23.0)
    assert "「A」每次迭代 27.00 秒，比每步 all-reduce 的 AdamW（55.00 秒）快 28.00 秒；其中交换 4.00 秒，其余 23.00 秒" \
        in lines[0]
    assert "慢 8.00 秒" in lines[1]
    assert lines[2].startswith("这张表里最快的是「A」")


def test_quick_run_of_demo_3_prints_what_it_returns():
    from lecture01.console import display_width
    results, out = shared_quick_run("11_frontier.py")       # the golden's run; demo 5's test runs one alone
    demo3 = results["demo3"]
    assert "(e) 小 GPT" in out and "(f) 每一行每步交换一次" in out
    assert all(display_width(line) <= 100 for line in out.splitlines())
    for label, (row, runs, deltas) in demo3["table"].items():
        assert len(runs) == 1 and f"{runs[0].bpc:.4f}" in out
        if row.run.optimizer == "demo":
            total, n = dr.demo_bytes(_tiny_shapes(), *row.run.param)
            assert runs[0].bytes_per_element == pytest.approx(total / n, rel=1e-12)
    for label, price in demo3["prices"].items():
        assert f"{price.iteration_s:.2f}" in out
    for line in demo3["observations"]:
        assert line[:30] in out.replace("\n     ", "")


def _tiny_shapes():
    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    return [tuple(p.shape) for p in tiny_gpt.make_model(MODEL_CONFIG, seed=0).parameters()]


def test_with_demo_2_the_adamw_row_is_demo_2s_run():
    results, out = shared_quick_run("11_frontier.py")
    adamw2 = next(iter(results["demo2"]["table"].values()))[1]
    adamw3 = next(iter(results["demo3"]["table"].values()))[1]
    assert adamw3 == adamw2                 # the same run (trained once: compressed_dp.Arrivals)
    assert "(e) 小 GPT" in out and out.index("(e) 小 GPT") > out.index("(d) 用在演示 1")


@pytest.mark.parametrize("argv", [["--topk-per-chunk", "0"], ["--chunk", "2000"], ["--chunk", "0"],
                                  ["--momentum-decay", "1"], ["--sign-lr", "0"], ["--sign-lr", "x"],
                                  ["--demo", "8"]])
def test_bad_demo_3_flags_are_one_line_and_status_2(argv):
    done = subprocess.run([sys.executable, str(LECTURE09 / "11_frontier.py"), "--demo", "3", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _notes_rows(first_cells):
    from conftest import ROOT
    text = LECTURE09_BOOK.read_text(encoding="utf-8")
    section = text[text.index("### 11.4 "):text.index("## 参考文献 References")]
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in section.splitlines() if line.startswith(first_cells))}


def test_the_notes_table_e_quotes_the_bytes_of_the_quick_run():
    # bytes are arithmetic: the same in the quick run as in the 5-seed runs the notes quote
    results, _ = shared_quick_run("11_frontier.py")
    rows = _notes_rows(("| top-k", "| DeMo，"))
    assert len(rows) == 3
    for label, (row, runs, _) in results["demo3"]["table"].items():
        if label in rows:
            sent = runs[0].bytes_per_element
            assert rows[label][1:3] == [f"{sent:.4f}", f"{dr.received(sent, row.gathered, 4):.4f}"]


# §11.4's ranges are 5 draws (seed pairs (k, k+1)) in each forward precision; the default seed
# pair is one of them, so a default run in either precision lies in that precision's column,
# widened by TOL (another CPU sums in another order).
TOL = 0.01


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def default_demo_3(request):
    """(precision, table (e)) of demo 3 at its defaults in one forward precision: one run each,
    shared by this module's claims tests."""
    return request.param, frontier_default_run(3, request.param)


def _notes_section_11_4():
    from conftest import ROOT
    text = LECTURE09_BOOK.read_text(encoding="utf-8")
    return text[text.index("### 11.4 "):text.index("### 11.5 ")]


@pytest.mark.slow
@pytest.mark.claims
def test_each_rows_delta_lies_in_the_notes_range_of_its_precision(default_demo_3):
    precision, table = default_demo_3
    assert_deltas_in_notes_ranges(_notes_section_11_4(), precision, table, 3, TOL)     # AdamW: the baseline


@pytest.mark.slow
@pytest.mark.claims
def test_the_paired_differences_lie_in_the_notes_ranges_of_their_precision(default_demo_3):
    precision, table = default_demo_3
    by_kind = {("topk" if row.run.scheme == "topk" else "control" if row.control else row.run.optimizer): runs[0]
               for row, runs, _ in table.values()}
    for name, other in (("DeMo 减 top-k + 误差反馈", "topk"), ("DeMo 减 系数全发", "control")):
        diff = by_kind["demo"].bpc - by_kind[other].bpc
        lo, hi = notes_range(notes_row(_notes_section_11_4(), name)[f"{precision}（5 组种子）"])
        assert math.isfinite(diff) and lo - TOL <= diff <= hi + TOL, (precision, name, diff)
