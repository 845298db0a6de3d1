"""Code 7 (07_compression_beyond.py): a quick run, its words follow its numbers, table (d)
priced with dist_sim, flags (defaults agree with the toolkit, errors exit 2 without torch)."""

import math
import re
import subprocess
import sys

import pytest

from conftest import LECTURE09, load_script, press_ctrl_c, start_in_own_group, wait_until_group_has, shared_quick_run
from notes_book import LECTURE09_BOOK

code7 = load_script(LECTURE09 / "07_compression_beyond.py")
SCRIPT = LECTURE09 / "07_compression_beyond.py"


def _flat(text):
    return re.sub(r"\s+", "", text)


@pytest.fixture(scope="module")
def quick_run():
    return shared_quick_run("07_compression_beyond.py")        # --quick --fp32 --jobs 1: the golden's run too


def test_quick_run_has_every_row_and_pairs_against_the_baseline(quick_run):
    results, out = quick_run
    table = results["table"]
    keys = list(table)
    assert keys[0] == ("adamw", "none", False)
    assert {("adamw", "int8-block", False), ("adamw", "powersgd", True, 1), ("adamw", "powersgd", True, 4),
            ("onebit-adam", "sign-l2", False), ("adamw-frozen-v", "none", False),
            ("adamw-frozen-v-avgclip", "none", False),
            ("diloco", "none", False, 2), ("diloco", "int8", False, 6)} <= set(keys)
    base = table[keys[0]][1]
    for key in keys:
        row, results_, deltas = table[key]
        assert deltas == tuple(r.bpc - b.bpc for r, b in zip(results_, base))
    assert all(display_ok(line) for line in out.splitlines())


def display_ok(line):
    from lecture01.console import display_width
    return display_width(line) <= 100


def test_measured_bytes_of_the_new_rows(quick_run):
    table = quick_run[0]["table"]
    n = 83_468                                       # MODEL_CONFIG's parameters (test_tiny_gpt checks it)
    assert table[("adamw", "none", False)][1][0].bytes_per_element == 4.0
    assert table[("diloco", "none", False, 2)][1][0].bytes_per_element == pytest.approx(4.0 / 2)
    assert table[("diloco", "int8", False, 6)][1][0].bytes_per_element == pytest.approx((n + 4) / n / 6)
    block = table[("adamw", "int8-block", False)][1][0]
    assert block.bytes_per_element == pytest.approx((n + 4 * math.ceil(n / 256)) / n)
    one = table[("adamw", "int8", False)][1][0]
    assert block.zeroed_fraction < one.zeroed_fraction


def test_words_follow_the_numbers(quick_run):
    results, out = quick_run
    table, flat = results["table"], _flat(out)
    one, block = table[("adamw", "int8", False)][1], table[("adamw", "int8-block", False)][1]
    assert _flat(f"从{one[0].zeroed_fraction:.1%}（整个向量一个缩放因子）变成{block[0].zeroed_fraction:.1%}") in flat
    from lecture09.compress.compressed_dp import DELTA_TOLERANCE_BPC as tol
    for key in table:
        delta = table[key][2][0]
        if key[0] == "adamw" and key[1] == "powersgd":
            word = "和每步AdamW差不多" if abs(delta) <= tol else ("比每步AdamW差" if delta > 0 else "比每步AdamW好")
            assert _flat(f"秩{key[3]}每步每个参数{table[key][1][0].bytes_per_element:.3f}字节，{word}") in flat
    # observation 3 reads 1-bit Adam in three parts, each a paired difference of two rows
    d = {k: table[k][2][0] for k in [("onebit-adam", "sign-l2", False), ("adamw-frozen-v", "none", False),
                                     ("adamw-frozen-v-avgclip", "none", False)]}
    clip = d[("adamw-frozen-v", "none", False)] - d[("adamw-frozen-v-avgclip", "none", False)]
    compress = d[("onebit-adam", "sign-l2", False)] - d[("adamw-frozen-v", "none", False)]
    from lecture09.compress.compressed_dp import verdict
    said = {"same": "几乎没有改变结果", "worse": "让结果变差", "better": "让结果变好", "unclear": "的影响在种子之间不一致"}
    assert _flat("各自裁剪（1-bit Adam 只能这样") in flat
    # each difference is of the two rows' bits/char as printed (issue 43: a calculator agrees)
    from lecture01.console import printed_difference
    bpc = {k: table[k][1][0].bpc for k in d}
    clip_text = code7._signed(printed_difference(bpc[("adamw-frozen-v", "none", False)],
                                                 bpc[("adamw-frozen-v-avgclip", "none", False)]))
    compress_text = code7._signed(printed_difference(bpc[("onebit-adam", "sign-l2", False)],
                                                     bpc[("adamw-frozen-v", "none", False)]))
    assert _flat(f"{said[verdict([clip])]}（{clip_text}）；再加上 1 bit 的压缩"
                 f"{said[verdict([compress])]}（{compress_text}）") in flat
    costs = results["costs"]
    fastest = min(costs, key=lambda k: costs[k][1])
    assert _flat(f"“{table[fastest][0].label}”（{costs[fastest][1]:.2f}秒）") in flat


def test_table_d_prices_each_row_with_demo_1s_cost_model():
    """Table (d) is demo 1's job on demo 1's network and cost model: M micro-batches per cut,
    compute with GPipe's bubble, the optimum demo 1 proves for fp16 traffic."""
    from lecture09 import dist_sim
    from lecture09.schedule.schedule_setup import ScheduleSetup, build_networks
    s = ScheduleSetup()
    keys = {"fp16": 2.0, "half": 1.0}
    costs, dc_total, compute_s, _ = code7.slow_network_costs(keys, {"fp16": 1, "half": 2})
    geo, dc = build_networks(s)
    m, p = s.n_micro_batches, s.n_stages
    by_hand_s = 6 * s.n_params * s.seq_len * s.global_batch / (s.n_gpus * s.gpu_peak_flops * s.gpu_utilisation)
    assert compute_s == pytest.approx(by_hand_s * (m + p - 1) / m)
    optimum = dist_sim.optimal_layout(geo, s.n_stages, s.n_replicas, s.stage_param_bytes, s.act_bytes,
                                      n_micro_batches=m)
    # fp16 bytes on the optimal layout: exactly demo 1's optimum plus compute
    assert costs["fp16"][1] == pytest.approx(compute_s + optimum.cost)
    identity = dist_sim.assignment_from_order(list(range(s.n_gpus)), s.n_replicas)
    dc_comm = dist_sim.iteration_cost(identity, dc, s.n_stages, s.n_replicas, s.stage_param_bytes, s.act_bytes,
                                      n_micro_batches=m)["total"]
    assert dc_total == pytest.approx(compute_s + dc_comm)
    # one byte per parameter every other step = two bytes once per two steps: half the exchange
    assert costs["half"][0] == pytest.approx(costs["fp16"][0] / 2)
    assert dc_total < costs["fp16"][1]


def test_flag_defaults_agree_with_the_toolkit():
    from lecture09.compress.compressed_dp import Seeds, TrainSetup
    t, seeds = TrainSetup(), Seeds()
    d = code7.DEFAULTS
    assert (d["steps"], d["block_size"], d["onebit_warmup"]) == (t.steps, t.block_size, t.onebit_warmup)
    assert (d["outer_lr"], d["outer_momentum"]) == (t.outer_lr, t.outer_momentum)
    assert (d["model_seed"], d["data_seed"]) == (seeds.model, seeds.data)


@pytest.mark.parametrize("argv", [["--help"], ["--steps", "0"], ["--powersgd-ranks", "0"], ["--onebit-warmup", "1"],
                                  ["--seeds", "11"], ["--diloco-h", "x"]])
def test_help_and_flag_errors_answer_without_torch(argv):
    probe = ("import runpy, sys\n"
             f"sys.argv = [{str(SCRIPT)!r}] + {argv!r}\n"
             "try:\n"
             f"    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
             "except SystemExit as e:\n"
             "    print('exit', e.code, 'torch' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    expected = 0 if argv == ["--help"] else 2
    assert done.stderr.strip().splitlines()[-1] == f"exit {expected} False", done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.sweep                  # Ctrl-C in a training pool: code 05's is in the main part
def test_ctrl_c_stops_with_one_line_and_leaves_nothing():
    proc = start_in_own_group(SCRIPT, "--steps", "300", "--jobs", "2")
    wait_until_group_has(proc, 3)
    status, out, err, left = press_ctrl_c(proc)
    assert status == 130 and left == [] and "Traceback" not in err, err[-2000:]


# --- DiLoCo rows and --quick follow the flags (issue 21, 7) ----------------------------------

def test_steps_per_sync_counts_the_exchanges_the_training_makes():
    # by hand: every H steps and once at the end (local_sgd.train)
    assert code7.steps_per_sync(25, 300) == 25 and code7.steps_per_sync(100, 300) == 100
    assert code7.steps_per_sync(100, 1) == 1 and code7.steps_per_sync(5, 12) == 4      # 3 exchanges
    assert code7.diloco_label(100, 1) == "DiLoCo H100，只通信 1 次"
    assert code7.diloco_label(5, 300) == "DiLoCo，每 5 步通信一次"


def test_one_step_does_not_make_a_diloco_row_look_cheap(capsys):
    """--steps 1: every DiLoCo row exchanged once in one step, like every-step AdamW."""
    code7.main(["--steps", "1", "--fp32", "--jobs", "1", "--powersgd-ranks", "1", "--diloco-h", "5", "100"])
    out = capsys.readouterr().out
    assert "每 5 步通信一次" not in out and "DiLoCo H100，只通信 1 次" in out
    conclusion = out[out.index(" 结论："):].replace("\n", "")
    assert "最快的一行是“DiLoCo H5" not in conclusion and "最快的一行是“DiLoCo H100" not in conclusion


def test_quick_says_which_given_flags_it_replaces(capsys):
    code7.parse_args(["--quick", "--steps", "50", "--diloco-h", "3"])
    err = capsys.readouterr().err
    assert "覆盖 --diloco-h --steps" in err and err.count("\n") == 1
    code7.parse_args(["--quick"])
    assert capsys.readouterr().err == ""


def test_table_d_pipeline_traffic_is_inside_regions_as_the_notes_say():
    """Notes §7.5: demo 1's optimum, which table (d) prices, has all 24 pipeline edges inside
    a region, so its pipeline seconds are intra-region traffic (issue 20, 6)."""
    from conftest import ROOT
    from lecture09 import dist_sim
    from lecture09.schedule.schedule_setup import ScheduleSetup, build_networks
    s = ScheduleSetup()
    geo, _ = build_networks(s)
    optimum = dist_sim.optimal_layout(geo, s.n_stages, s.n_replicas, s.stage_param_bytes, s.act_bytes,
                                      n_micro_batches=s.n_micro_batches)
    stats = dist_sim.layout_stats(optimum.assignment, geo, s.n_stages, s.n_replicas)
    assert stats["pipeline_links_within_region"] == stats["pipeline_links"] == 24
    notes = LECTURE09_BOOK.read_text(encoding="utf-8")
    assert "这个最优分配的 24 条流水线边都已经在地区之内" in notes


def test_table_d_prices_the_return_leg_the_training_sends():
    """Issue 20, 10: int8 rows average the decoded messages exactly, so the all-gather leg
    carries the fp32 mean (4 bytes per parameter per exchange); PowerSGD, 1-bit Adam and the
    uncompressed rows send the same bytes both ways. The ring's two legs carry half each."""
    from lecture09.compress.compressed_dp import Run
    rows = {"int8": code7.Row(Run("int8", "adamw", "int8"), "int8"),
            "diloco-int8": code7.Row(Run("d", "diloco", "int8", param=25), "d", 25),
            "none": code7.Row(Run("n", "adamw", "none"), "n"),
            "powersgd": code7.Row(Run("p", "adamw", "powersgd", True, 1), "p"),
            "onebit": code7.Row(Run("o", "onebit-adam", "sign-l2"), "o")}
    assert code7.return_leg_bytes(rows["int8"], 1.0) == 4.0
    assert code7.return_leg_bytes(rows["diloco-int8"], 0.04) == pytest.approx(0.16)
    for key, up in (("none", 4.0), ("powersgd", 0.156), ("onebit", 0.901)):
        assert code7.return_leg_bytes(rows[key], up) == up
    # the int8 row priced at (1 + 4) / 2 = 2.5 bytes: between fp16 (2) and fp32 (4) both ways
    costs, *_ = code7.slow_network_costs({"int8": 2.5, "fp16": 2.0, "fp32": 4.0}, {"int8": 1, "fp16": 1, "fp32": 1})
    assert costs["fp16"][1] < costs["int8"][1] < costs["fp32"][1]
    # the exchange's time is linear in its bytes (latency + bytes / bandwidth): 2.5 is a quarter of the way
    assert costs["int8"][0] == pytest.approx(costs["fp16"][0] + (costs["fp32"][0] - costs["fp16"][0]) / 4, rel=1e-9)
