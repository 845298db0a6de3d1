"""Code 11, demo 4: SparseLoCo's tables (g) and (h). Bytes on the 1.3B by hand, the pricing
of each row, each observation's branches from made-up tables, and code 11's quick run
(demo 4 with demo 2, whose AdamW and DiLoCo it shares)."""

import math
import subprocess
import sys

import pytest

from conftest import (LECTURE09, assert_deltas_in_notes_ranges, frontier_default_run, notes_range, notes_row,
                      shared_quick_run)
from lecture09.compress import sparseloco as sl
from lecture09.compress import sparseloco_report as sr
from lecture09.compress.compressed_dp import Seeds
from lecture09.compress.decoupled_report import XL, gpt_shapes
from lecture09.compress.training import RunResult
from lecture09.schedule.sync_pricing import SyncPrice
from notes_book import LECTURE09_BOOK

H = 30
MEAN = {"DiLoCo，每 30 步": 4.0 / H, "DiLoCo，每 30 步，int8": 1.0157 / H,
        "SparseLoCo，k = 32，2 bit": 0.0533 / H, "SparseLoCo，值用 fp32（对照）": 0.1334 / H}


def _table(bpcs):
    """bpcs: [bpc per seed] for the five rows in order."""
    rows = sr.build_rows(H, 32, 64)
    runs = []
    for row, per_seed in zip(rows, bpcs):
        mean = MEAN.get(row.label, 4.0)                     # AdamW: 4 bytes every step
        runs += [RunResult(row.run, Seeds(0, 0).shifted(k), b, mean, 0.0, not math.isfinite(b), 300, 1.0)
                 for k, b in enumerate(per_seed)]
    return sr.collect(rows, iter(runs), len(bpcs[0]))


def test_build_rows_share_demo_2s_runs():
    from lecture09.compress import streaming_report
    rows = sr.build_rows(H, 32, 64)
    demo2 = streaming_report.build_rows(H, 3, 1)
    assert rows[0].run == demo2[0].run and rows[1].run == demo2[1].run      # trained once (Arrivals)
    assert rows[3].run.param == (H, 32, 64, 2) and rows[4].run.param == (H, 32, 64, 32) and rows[4].control
    assert [r.gathered for r in rows] == [False, False, False, True, True]


def test_sparseloco_bytes_on_a_1_3b_matrix_by_hand():
    # 2048 x 2048 in 64 x 64 chunks: 1024 chunks, 32 kept in each; int16 indices, 2 bits, the lookup
    assert sl.sent_bytes([(2048, 2048)], 32, 64, 2) == 32768 * 2 + 32768 // 4 + 16
    # the vocabulary side 50,257 = 29 x 1,733 chunks in 29 rows: (50257, 2048) -> 1733 x 32 chunks of 29 x 64
    assert sl.sent_bytes([(50257, 2048)], 32, 64, 2) == 1733 * 32 * 32 * 2 + 1733 * 32 * 32 // 4 + 16


def test_price_rows_by_hand():
    table = _table([[1.5], [1.9], [1.9], [2.4], [2.4]])
    priced = sr.price_rows(table, H, 32, 64, 8)
    assert list(priced) == ["DiLoCo，每 30 步", "DiLoCo，每 30 步，int8", "SparseLoCo，k = 32，2 bit"]
    assert priced["DiLoCo，每 30 步"] == (pytest.approx(4.0), pytest.approx(4.0))
    assert priced["DiLoCo，每 30 步，int8"][0] == pytest.approx((1.0157 + 4) / 2)      # int8 up, fp32 back
    shapes = gpt_shapes(**XL)
    up = sl.sent_bytes(shapes, 32, 64, 2) / sum(math.prod(s) for s in shapes)
    assert priced["SparseLoCo，k = 32，2 bit"] == (8 * up / 2, up)


def test_observations_when_sparseloco_is_worse_and_2_bits_cost_nothing():
    lines = sr.table_g_observations(_table([[1.5, 1.6], [1.9, 2.0], [1.9, 2.0], [2.4, 2.45], [2.405, 2.445]]), H)
    assert lines[0].startswith("字节：「SparseLoCo，k = 32，2 bit」交换那一步每个参数发 0.0533 字节，平均每步 0.0018")
    assert "的 1/19.1" in lines[0] and "是 fp32 DiLoCo（0.1333）的 1/75.0" in lines[0]
    assert "比 int8 的 DiLoCo：+0.4750，各种子 +0.4500..+0.5000（更差）" in lines[1]
    assert "（对照，只改了值的位数）：0.0000，各种子 -0.0050..+0.0050（差不多）" in lines[2]
    assert "2 组种子都在同一边" in lines[2]


def test_observations_when_better_unclear_diverged_and_one_seed():
    better = sr.table_g_observations(_table([[1.5], [1.9], [1.9], [1.8], [1.9]]), H)
    assert "：-0.1000（更好）" in better[1] and "：-0.1000（更好）" in better[2]
    assert "一组种子只是一次抽样，--seeds 5 给出范围" in better[2]
    unclear = sr.table_g_observations(_table([[1.5, 1.5], [1.9, 1.9], [1.9, 1.9], [1.95, 1.85], [1.9, 1.9]]), H)
    assert "（种子之间不一致）" in unclear[1]
    diverged = sr.table_g_observations(_table([[1.5], [1.9], [1.9], [float("nan")], [1.9]]), H)
    assert "有一行发散了，没有配对差" in diverged[1] and "有一行发散了" in diverged[2]


def test_bytes_observation_when_sparseloco_sends_more():
    table = _table([[1.5], [1.9], [1.9], [1.9], [1.9]])
    row, results, deltas = table["SparseLoCo，k = 32，2 bit"]
    table["SparseLoCo，k = 32，2 bit"] = (row, (results[0].__class__(**{**results[0].__dict__,
                                                                        "bytes_per_element": 0.3}),), deltas)
    line = sr.table_g_observations(table, H)[0]
    assert "（0.0339）的 8.9 倍" in line and "（0.1333）的 2.2 倍" in line


def test_table_h_observation_names_the_fastest():
    priced = {"A": (4.0, 4.0), "B": (0.08, 0.02)}
    prices = {"A": SyncPrice(32.0, 0.0, 32.0, 30, 24.12), "B": SyncPrice(2.9, 0.0, 2.9, 30, 23.15)}
    (line,) = sr.table_h_observations(priced, prices, 23.05)
    assert "「A」32.00 秒，摊到每步 1.07；「B」2.90 秒，摊到每步 0.10" in line
    assert "最快的是「B」，每次迭代 23.15 秒，离不交换的 23.05 秒还差 0.10 秒" in line


def _quick_demo_4():
    """Code 11's one quick run, shared with the golden output (demo 5's test runs a demo alone)."""
    return shared_quick_run("11_frontier.py")


def test_quick_run_of_demo_4_prints_what_it_returns():
    from lecture01 import tiny_gpt
    from lecture01.console import display_width
    from lecture09.lecture_model import MODEL_CONFIG
    results, out = _quick_demo_4()
    demo4 = results["demo4"]
    assert "(g) 小 GPT" in out and "(h) 每一行每 6 步交换一次" in out
    assert all(display_width(line) <= 100 for line in out.splitlines())
    model = tiny_gpt.make_model(MODEL_CONFIG)
    shapes = [tuple(p.shape) for p in model.parameters()]
    for label, (row, (run,), _) in demo4["table"].items():
        assert f"{run.bpc:.4f}" in out
        if row.run.optimizer == "sparseloco":         # 12 steps, H = 6: two exchanges
            bits = row.run.param[3]
            assert run.bytes_per_element == pytest.approx(sl.sent_bytes(shapes, 32, 64, bits) / 6 / model.n_params(),
                                                          rel=1e-12)
    for price in demo4["prices"].values():
        assert f"{price.iteration_s:.2f}" in out
    for line in demo4["observations"]:
        assert line[:30] in out.replace("\n     ", "")


def test_with_demo_2_adamw_and_diloco_are_demo_2s_runs():
    results, out = shared_quick_run("11_frontier.py")
    two, four = (list(results[d]["table"].values()) for d in ("demo2", "demo4"))
    assert four[0][1] == two[0][1] and four[1][1] == two[1][1]
    assert out.index("(g) 小 GPT") > out.index("(e) 小 GPT")


@pytest.mark.parametrize("argv", [["--sparse-topk", "0"], ["--ef-decay", "1.5"], ["--sparse-outer-lr", "0"],
                                  ["--sparse-outer-lr", "11"], ["--sync-every", "0"]])
def test_bad_demo_4_flags_are_one_line_and_status_2(argv):
    done = subprocess.run([sys.executable, str(LECTURE09 / "11_frontier.py"), "--demo", "4", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _notes_rows(first_cells):
    from conftest import ROOT
    text = LECTURE09_BOOK.read_text(encoding="utf-8")
    section = text[text.index("### 11.5 "):text.index("### 11.6 ")]
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in section.splitlines() if line.startswith(first_cells))}


def test_the_notes_table_g_quotes_the_bytes_of_the_quick_run():
    # bytes per exchange are arithmetic: the same in the quick run (H = 6) as in the default
    # run the notes quote (H = 30); the mean per step is that over 30 (300 steps: 10 exchanges)
    results, _ = _quick_demo_4()
    rows = _notes_rows(("| DiLoCo，", "| SparseLoCo，"))
    assert len(rows) == 4
    for label, (row, (run,), _) in list(results["demo4"]["table"].items())[1:]:
        per_exchange = sr.per_exchange(run, 6)
        noted = rows[label.replace("每 6 步", "每 30 步")]
        assert noted[1:3] == [f"{per_exchange:.4f}", f"{per_exchange / 30:.4f}"], label


# §11.5's ranges are 5 draws (seed pairs (k, k+1)) in each forward precision; the default seed
# pair is one of them, so a default run in either precision lies in that precision's column,
# widened by TOL (another CPU sums in another order).
TOL = 0.01


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def default_demo_4(request):
    """(precision, table (g)) of demo 4 at its defaults in one forward precision: one run each,
    shared by this module's claims tests."""
    return request.param, frontier_default_run(4, request.param)


def _notes_section_11_5():
    from conftest import ROOT
    text = LECTURE09_BOOK.read_text(encoding="utf-8")
    return text[text.index("### 11.5 "):text.index("### 11.6 ")]


@pytest.mark.slow
@pytest.mark.claims
def test_each_rows_delta_lies_in_the_notes_range_of_its_precision(default_demo_4):
    precision, table = default_demo_4
    assert_deltas_in_notes_ranges(_notes_section_11_5(), precision, table, 4, TOL)     # AdamW: the baseline


@pytest.mark.slow
@pytest.mark.claims
def test_the_paired_differences_lie_in_the_notes_ranges_of_their_precision(default_demo_4):
    precision, table = default_demo_4
    labels = list(table)
    int8, sparse, control = labels[2], labels[3], labels[4]
    for name, (a, b) in (("SparseLoCo 减 int8 DiLoCo", (sparse, int8)), ("值用 fp32 减 int8 DiLoCo", (control, int8)),
                         ("SparseLoCo 减 值用 fp32", (sparse, control))):
        [diff] = sr._pair(table, a, b)
        lo, hi = notes_range(notes_row(_notes_section_11_5(), name)[f"{precision}（5 组种子）"])
        assert math.isfinite(diff) and lo - TOL <= diff <= hi + TOL, (precision, name, diff)
