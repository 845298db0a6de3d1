"""Claims tests for lecture 9: run code 5 and code 6 as a student would and check what the
notes (§5) say about them. Slow (minutes), and part of CI on purpose.

Two kinds of figure, two kinds of check:
- machine-independent figures (demo 1's costs and counts, bytes on the wire, parameter
  counts) appear in the notes exactly as the default run prints them: checked verbatim;
- trained figures (bits per character and their paired differences Δ) move with the CPU
  and the seed. The notes write them as "≈" with the range measured over 5 seed pairs;
  the test checks that this machine's runs land inside that range, widened by
  MACHINE_TOLERANCE_BPC. Every qualitative claim is checked on three runs: the default,
  the same demo in the other forward precision (a second kernel path, the nearest thing
  to another CPU we have), and a second seed pair.
"""

import math
import re

import pytest

from conftest import LECTURE09, ROOT, decimals_in, notes_section, other_precision, run_script
from notes_book import LECTURE09_BOOK

LECTURE09_NOTES = LECTURE09_BOOK

# Parameters and cited paper figures the notes may state without a run printing them.
ALLOWED_CONSTANTS_09 = {"1.3", "0.3", "0.1", "0.4", "0.9", "0.95", "0.01", "0.02", "1.7", "3.5", "2.7", "3.3",
                        "4.8", "1.0", "0.003", "0.5", "2.0", "4.0", "2.43", "0.001",
                        "0.005"}   # 0.1 / 0.001: flag values in exercises; 0.005: --time-scale's default

# How far one seed's trained figure moves between CPUs with the pinned versions: measured
# up to 0.006 bits/char (an AMX machine against an AVX512-BF16 one, issue 8) and 0.00x
# between bf16 and fp32 here; 0.01 leaves a margin.
MACHINE_TOLERANCE_BPC = 0.01
TOLERANCE_BPC = 0.01        # compressed_dp.DELTA_TOLERANCE_BPC: what the observations call "about the same"

pytestmark = [pytest.mark.slow, pytest.mark.claims]


@pytest.fixture(scope="module")
def code5_output():
    return run_script(LECTURE09 / "05_decentralized.py")


@pytest.fixture(scope="module")
def code5_runs(code5_output):
    """Demo 2 three ways: default, the other forward precision, another seed pair."""
    return {"default": code5_output,
            "other precision": run_script(LECTURE09 / "05_decentralized.py", "--demo", "2",
                                          "--precision", other_precision()),
            "second seed": run_script(LECTURE09 / "05_decentralized.py", "--demo", "2",
                                      "--model-seed", "1", "--data-seed", "2")}


@pytest.fixture(scope="module")
def code6_output():
    return run_script(LECTURE09 / "06_swarm_http.py")


# §6 table (1)'s ranges: "3 组种子（`--seed 0/1/2 --data-seed 1/2/3`）"; (0, 1) is the default run.
CODE6_SEED_PAIRS = ((0, 1), (1, 2), (2, 3))
CODE6_TOLERANCE_BPC = 0.02   # a quoted ≈ figure or range end vs this machine's run (2-decimal rounding + CPU)


@pytest.fixture(scope="module")
def code6_seed_runs(code6_output):
    """stdout of code 6 for each seed pair of table (1)'s ranges (about 15 s a run)."""
    from lecture09.swarm.swarm_protocol import ServerConfig, WorkerConfig
    assert (ServerConfig().model_seed, WorkerConfig().data_seed) == CODE6_SEED_PAIRS[0]   # the default run's
    runs = {CODE6_SEED_PAIRS[0]: code6_output}
    for seed, data_seed in CODE6_SEED_PAIRS[1:]:
        runs[(seed, data_seed)] = run_script(LECTURE09 / "06_swarm_http.py", "--seed", str(seed),
                                             "--data-seed", str(data_seed))
    return runs


def says(output, phrase):
    """Whether the output says `phrase`, wherever console.wrap broke its lines (spaces and
    line breaks ignored on both sides)."""
    return re.sub(r"\s+", "", phrase) in re.sub(r"\s+", "", output)


def _number(text):
    text = text.replace("−", "-")
    return math.nan if "发散" in text else float(text)


def demo2_tables(output):
    """{("adamw" | "sgd", row label): (bytes/element, ÷ fp32, bpc, Δ)} from demo 2's output
    at --seeds 1 (a diverged bpc is nan, its Δ None)."""
    rows = {}
    optimizer = None
    for line in output.splitlines():
        if line.startswith("(a) AdamW"):
            optimizer = "adamw"
        elif line.startswith("(b) "):
            optimizer = "sgd"
        m = re.match(r"^(\S.*?)\s+(\d\.\d{3})\s+(\d\.\d{4})\s+(\d\.\d{4}|发散 diverged)\s+(\S+)$", line)
        if m and optimizer:
            delta = None if m.group(5) == "—" else _number(m.group(5))
            rows[(optimizer, m.group(1))] = (m.group(2), m.group(3), _number(m.group(4)), delta)
    assert len(rows) == 10, f"demo 2 printed {len(rows)} rows, expected 10"
    return rows


NONE, FP16, INT8 = "不压缩（fp32）", "fp16", "int8（整个向量一个缩放因子）"
TOPK, TOPK_EF = "top-k，没有误差反馈", "top-k，有误差反馈"
SIGN, SIGN_EF = "只发符号，没有误差反馈", "只发符号，有误差反馈"


def _notes_tables(section):
    """Markdown table rows of a notes section, as lists of stripped cells."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]


def _range(cell):
    """(low, high) of a notes cell like "≈1.55（1.54–1.56）" or "≈+1.05（+0.98..+1.12）". The mean
    ("≈1.55", over 5 seed pairs) is not one run's figure: tests/test_notes_seed_means.py checks it."""
    numbers = [float(x) for x in re.findall(r"[+-]?\d+\.\d+", cell.replace("−", "-"))]
    assert len(numbers) == 3, f"cannot read a range from {cell!r}"
    return numbers[1], numbers[2]


def _within(value, low, high):
    return low - MACHINE_TOLERANCE_BPC <= value <= high + MACHINE_TOLERANCE_BPC


def _without_section_references(text):
    """Drop headings, a page's opening lines ("> **课后 at home**：5.8 …, 5.11 …") and references
    like "7.4 节", "§5.4", "表 6.1" / "图 5.2": those numbers are not results."""
    text = "\n".join(line for line in text.splitlines() if not line.startswith(("#", "> **")))
    return re.sub(r"\d+\.\d+(–\d+\.\d+)? ?节|§\d+(\.\d+)?|[表图] ?\d+\.\d+", " ", text)


TRAINED = re.compile(r"≈[^\s|，。；、]*")     # a trained figure with its range: "≈1.55（1.54–1.56）"
MEASURED = re.compile(r"\[实测[^\]]*\]")      # a timing measured on one machine: "[实测 measured：中位数 14.7 ms]"


def test_exact_numbers_in_notes_sections_5_and_6_come_from_the_default_runs(code5_output, code6_output):
    """Every number of §5.1-§5.9 and §6 not marked "≈" is printed verbatim by a default run, or is
    a parameter, or a run time the README measured (tests/test_run_times.py checks those). §5.10's
    exercises ask for other flags; §5.11 quotes `--demo 3` (tests/test_claims_demo3.py) and §5.12
    the opt-in network demos (tests/test_slow_network.py and the emulator's tests)."""
    from test_run_times import readme_times
    five = notes_section(LECTURE09_NOTES, "## 5 ")
    five = five[:five.index("\n### 5.10 ")]
    section = five + "\n" + notes_section(LECTURE09_NOTES, "## 6 ")   # §7: test_claims_demo2.py
    section = MEASURED.sub(" ", TRAINED.sub(" ", _without_section_references(section)))
    measured = {t.split()[0] for t in readme_times("05_decentralized.py")}
    missing = sorted({d for d in decimals_in(section) if d not in code5_output and d not in code6_output
                      and d not in ALLOWED_CONSTANTS_09 and d not in measured})
    assert not missing, f"numbers in the notes that no default run printed: {missing}"


def test_trained_figures_in_the_notes_hold_on_this_machine(code5_runs):
    """§5.7's table: bytes exactly; bits per char and Δ inside the quoted 5-seed range."""
    section = notes_section(LECTURE09_NOTES, "### 5.7")
    checked = 0
    for name, output in code5_runs.items():
        tables = demo2_tables(output)
        for cells in _notes_tables(section):
            if cells[0] not in ("AdamW", "SGD") or len(cells) != 6:
                continue
            optimizer = cells[0].lower()
            bytes_per_element, ratio, bpc, delta = tables[(optimizer, cells[1])]
            assert (cells[2], cells[3]) == (bytes_per_element, ratio), (name, cells)
            if "发散" in cells[4] and math.isnan(bpc):
                checked += 1
                continue
            assert _within(bpc, *_range(cells[4])), f"{name}: {cells[1]} bpc {bpc} outside {cells[4]}"
            if cells[5] != "—":
                assert delta is not None and _within(delta, *_range(cells[5])), \
                    f"{name}: {cells[1]} Δ {delta} outside {cells[5]}"
            checked += 1
    assert checked == 3 * 10


def _gains(tables):
    adamw = tables[("adamw", TOPK)][2] - tables[("adamw", TOPK_EF)][2]
    sgd_plain, sgd_ef = tables[("sgd", TOPK)][2], tables[("sgd", TOPK_EF)][2]
    sgd = math.inf if math.isnan(sgd_plain) else sgd_plain - sgd_ef
    sign = tables[("adamw", SIGN)][2] - tables[("adamw", SIGN_EF)][2]
    return {"top-k，AdamW": adamw, "top-k，SGD": sgd, "只发符号，AdamW": sign}


def test_error_feedback_gains_in_the_notes_hold_on_this_machine(code5_runs):
    section = notes_section(LECTURE09_NOTES, "### 5.7")
    rows = {cells[0]: cells[1] for cells in _notes_tables(section) if len(cells) == 2}
    for name, output in code5_runs.items():
        for label, gain in _gains(demo2_tables(output)).items():
            cell = rows[label]
            if math.isinf(gain):
                assert "发散" in cell, f"{name}: {label} diverged, the notes do not allow it"
            else:
                assert _within(gain, *_range(cell)), f"{name}: {label} gain {gain} outside {cell}"


@pytest.mark.parametrize("run", ["default", "other precision", "second seed"])
def test_code5_demo2_claims_hold_in_every_run(code5_runs, run):
    """§5.7's qualitative claims, with margins, on every kernel path and seed we have."""
    output = code5_runs[run]
    t = demo2_tables(output)
    base = t[("adamw", NONE)][2]
    # lecture 1's model learns: under lecture 1's 1.7 at demo 2's 240 steps too (at most 1.6997 over
    # 5 seed pairs in fp32 and bf16 here, §5.7), with the tolerance for another CPU
    assert base <= 1.7 + MACHINE_TOLERANCE_BPC
    assert abs(t[("adamw", FP16)][3]) <= TOLERANCE_BPC             # "fp16 is free"
    assert abs(t[("adamw", INT8)][3]) <= TOLERANCE_BPC             # "int8 is nearly free"
    assert says(output, "fp16：通信量减半，和不压缩差不多") and says(output, "通信量 1/4，和不压缩差不多")
    assert t[("adamw", TOPK)][3] > 0.5 and t[("adamw", TOPK_EF)][3] > 0.5    # top-1% costs a lot either way
    gains = _gains(t)
    assert gains["top-k，AdamW"] > TOLERANCE_BPC                   # error feedback helps AdamW a little
    assert gains["top-k，SGD"] > gains["top-k，AdamW"] + 0.5        # ... and SGD far more (or SGD diverges without)
    assert says(output, "误差反馈对 SGD 帮助更大")
    assert t[("adamw", SIGN)][3] > TOLERANCE_BPC                   # sign alone is worse than none ...
    assert gains["只发符号，AdamW"] < -0.2                          # ... and error feedback makes it worse still
    assert says(output, "误差反馈在这里反而有害")
    if math.isfinite(t[("sgd", TOPK)][2]):                          # plain SGD: error feedback recovers
        assert t[("sgd", TOPK_EF)][3] < 0.5 * t[("sgd", TOPK)][3]   # most of what top-k lost


def code6_quoted_bpc():
    """{mode: the last cell of §6 table (1)}, e.g. "≈2.55（2.528–2.546）"."""
    section = notes_section(LECTURE09_NOTES, "## 6 ")
    quoted = {cells[0]: cells[-1] for cells in _notes_tables(section)
              if cells[0] in ("none", "topk", "topk-int8") and cells[-1].startswith("≈")}
    assert set(quoted) == {"none", "topk", "topk-int8"}
    return quoted


def code6_printed_bpc(output):
    """{mode: validation bpc} of table (1) in a code 6 output (its first row per mode)."""
    printed = {}
    for line in output.splitlines():
        m = re.match(r"^(none|topk|topk-int8)\s.*\s(\d\.\d{4})\s*$", line)
        if m:
            printed.setdefault(m.group(1), float(m.group(2)))
    return printed


def test_code6_bpc_figures_in_the_notes_hold_on_this_machine(code6_output):
    """§6 quotes the swarm's validation bpc as ≈ figures; a sync run is deterministic
    on one machine, and another CPU moves it by less than the tolerance."""
    quoted = {mode: float(re.match(r"≈(\d+\.\d+)", cell).group(1)) for mode, cell in code6_quoted_bpc().items()}
    printed = code6_printed_bpc(code6_output)
    for mode, value in quoted.items():
        assert abs(printed[mode] - value) <= CODE6_TOLERANCE_BPC, (mode, printed[mode], value)
    assert abs(printed["topk"] - printed["topk-int8"]) <= TOLERANCE_BPC   # "int8 barely changes the result"
    assert printed["none"] < printed["topk"] - 0.3                         # "compression costs bpc in 60 steps"


def test_code6_bpc_ranges_in_the_notes_are_the_seed_runs(code6_seed_runs):
    """§6 table (1)'s ranges: each end is the lowest / highest bpc of the three seed pairs
    the notes name, within the tolerance of the ≈ figures."""
    seeds, data_seeds = ("/".join(str(pair[i]) for pair in CODE6_SEED_PAIRS) for i in (0, 1))
    assert f"`--seed {seeds} --data-seed {data_seeds}`" in notes_section(LECTURE09_NOTES, "## 6 ")
    printed = [code6_printed_bpc(output) for output in code6_seed_runs.values()]
    for mode, cell in code6_quoted_bpc().items():
        low, high = _range(cell)
        runs = [bpc[mode] for bpc in printed]
        assert low <= high, cell
        assert abs(min(runs) - low) <= CODE6_TOLERANCE_BPC, (mode, "low", runs, cell)
        assert abs(max(runs) - high) <= CODE6_TOLERANCE_BPC, (mode, "high", runs, cell)


def test_code6_table_3_shows_what_section_6_says_of_a_crash_and_a_join(code6_output):
    """§6, 失败是常态: in the default run, the crashed worker 3 costs one round that waits
    for the deadline and is not waited for after it; worker 4 trains from its join to the end;
    fewer uploads are averaged than in the undisturbed run."""
    rows = re.findall(r"^\s*(\d+)(?:-(\d+))?\s+([\d,]+)\s+(\d+)\s+(\S+) (\S+)\s+([\d.]+)\s+(\S+)\s*$",
                      code6_output.split("(3) 成员进出")[1].split("观察 Observations")[0], re.M)
    assert rows, "table (3) is missing"
    spans = [(int(first), int(last or first), workers.split(","), how) for first, last, workers, _, _, how, _, _ in rows]
    assert spans[0][0] == 0 and spans[-1][1] == 59
    assert [how for *_, how in spans].count("deadline") >= 1
    assert all("3" not in workers for first, _, workers, _ in spans if first > 5)        # killed at version 5
    assert all("4" not in workers for first, _, workers, _ in spans if first < 10)       # joins at version 10
    assert "4" in spans[-1][2]
    summary = re.search(r"(\d+)份上传进了平均.*?(\d+)份；差Δ", re.sub(r"\s+", "", code6_output))
    assert int(summary.group(1)) < int(summary.group(2)) == 240


def test_code6_table_1b_in_the_notes_is_the_printed_one_row_by_row(code6_output):
    """§6's table (1b) (bytes both ways, requests, the modelled step) is arithmetic on
    counted bytes: every cell equals the default run's, on any machine."""
    section = notes_section(LECTURE09_NOTES, "## 6 ")
    header = "| 压缩 | 上行 up |"
    table = section.split(header)[1].split("\n\n")[0]
    rows = [[c.strip().removesuffix("字节").removesuffix("ms").strip() for c in line.strip("|").split("|")]
            for line in table.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    printed = {line.split()[0]: line.split()[1:] for line in code6_output.split("(1b)")[1].split("(2)")[0].splitlines()
               if line.split() and line.split()[0] in ("none", "topk", "topk-int8")}
    assert [row[0] for row in rows] == ["none", "topk", "topk-int8"]
    for row in rows:
        assert printed[row[0]] == row[1:], (row, printed[row[0]])
