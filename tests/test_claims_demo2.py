"""Claims tests for code 7 (07_compression_beyond.py) and notes §7.1-§7.5. Slow (a few
minutes): the default run, the other forward precision and a second seed pair, as a
student runs them.

- machine-independent figures (bytes, table (d)'s seconds) appear in the notes exactly as
  the default run prints them;
- trained figures are written "≈mean (min..max)" over 5 seed pairs in the notes: the
  default run's first pair must lie in each range (with a margin for another machine);
- the qualitative claims the notes make are checked on all three runs, with the
  tolerance the observations use.
"""

import re

import pytest

from conftest import LECTURE09, ROOT, decimals_in, load_script, main_quietly, notes_section, other_precision
from notes_book import LECTURE09_BOOK

code7 = load_script(LECTURE09 / "07_compression_beyond.py")
NOTES = LECTURE09_BOOK
TOL = 0.01                     # compressed_dp.DELTA_TOLERANCE_BPC
ALLOWED = {"0.7", "0.9", "0.1", "0.4", "0.2", "1.3", "0.3"}     # flag values and parameters named in the text
NEW_SECTIONS = ("### 7.1 ", "### 7.2 ", "### 7.3 ", "### 7.4 ", "### 7.5 ")

pytestmark = [pytest.mark.slow, pytest.mark.claims]


RUNS = ("default", "other precision", "second seed")
# Trained figures the notes quote as "≈mean (min..max)" over 5 seed pairs (`--seeds 5`, fp32),
# with the row they belong to. The default run trains the first of those pairs, so its Δ lies
# inside the range (as rounded in the notes) on the machine that measured it; MACHINE_TOL is
# the margin for another CPU or the other precision: bf16 here moved these Δ by at most
# 0.012 from fp32's (PowerSGD), and the notes round the ends to the quoted digits.
MACHINE_TOL = 0.02
QUOTED_RANGES = {("adamw", "int8", False): "一个缩放因子 ≈+0.002（−0.001..+0.005）",
                 ("adamw", "int8-block", False): "按块 ≈+0.0001（−0.0002..+0.0003）",
                 ("adamw", "powersgd", True, 1): "Δ ≈+1.15（+1.10..+1.19）",
                 ("adamw", "powersgd", True, 4): "Δ ≈+0.43（+0.41..+0.44）",
                 ("adamw-frozen-v-avgclip", "none", False): "Δ ≈−0.040（−0.049..−0.033）",
                 ("diloco", "none", False, 5): "≈+0.85（+0.81..+0.93）",
                 ("diloco", "none", False, 25): "≈+0.35（+0.32..+0.39）",
                 ("diloco", "none", False, 100): "≈+0.54（+0.51..+0.58）",
                 ("onebit-adam", "sign-l2", False): "比每步通信的 AdamW 差 ≈0.087（+0.073..+0.098）"}


@pytest.fixture(scope="module")
def runs():
    default, out = main_quietly(code7.main, [])
    other, _ = main_quietly(code7.main, ["--precision", other_precision()])
    second, _ = main_quietly(code7.main, ["--model-seed", "1", "--data-seed", "2"])
    return {"default": (default, out), "other precision": (other, None), "second seed": (second, None)}


def _range_of(quote):
    """(low, high) of a quote "…≈mean（low..high）" (the notes write minus as −)."""
    low, high = re.search(r"（([+−-]?[\d.]+)\.\.([+−-]?[\d.]+)）", quote).groups()
    return tuple(float(x.replace("−", "-")) for x in (low, high))


@pytest.mark.parametrize("name", ["default", "other precision"])
def test_the_first_seed_pair_lies_in_the_ranges_the_notes_quote(runs, name):
    notes = "\n".join(notes_section(NOTES, s) for s in NEW_SECTIONS)
    r = runs[name][0]
    for key, quote in QUOTED_RANGES.items():
        assert quote in notes, f"the notes no longer say {quote!r}"
        low, high = _range_of(quote)
        delta = r["table"][key][2][0]
        assert low - MACHINE_TOL <= delta <= high + MACHINE_TOL, (key, delta, quote)


# The quoted means and ranges themselves, against a `--seeds 5 --fp32` run (the run they come
# from): the mean of the 5 paired Δ must round to the quoted mean, the smallest and largest
# draw to the quoted ends, each within half a unit of the quoted last digit plus a stated
# margin for another CPU. The notes' figures were measured on an AMD EPYC; the same command
# on an Intel Xeon (fp32) moved a 5-seed mean by at most 0.0097 and a single draw by at most
# 0.017 (both PowerSGD rank 1, the least stable row), so the margins are 0.01 and 0.02 (the
# draw margin is MACHINE_TOL above). A mean quoted 0.03 off is still caught.
MEAN_TOL = 0.01
DRAW_TOL = MACHINE_TOL


def _quote_figures(quote):
    """(mean, low, high) as written in a quote "…≈mean（low..high）"."""
    m = re.search(r"≈([+−-]?[\d.]+)（([+−-]?[\d.]+)\.\.([+−-]?[\d.]+)）", quote)
    return m.groups()


def _half_unit(figure):
    return 0.5 * 10.0 ** -len(figure.split(".")[1])


def _value(figure):
    return float(figure.replace("−", "-"))


@pytest.fixture(scope="module")
def five_seeds():
    return main_quietly(code7.main, ["--seeds", "5", "--fp32"])[0]


def check_quoted_figures(table, quotes):
    """Every quoted mean and range against the 5 seeds' paired Δ of its row; the mismatches."""
    wrong = []
    for key, quote in quotes.items():
        deltas = table[key][2]
        assert len(deltas) == 5, key
        for figure, value, tol in zip(_quote_figures(quote), (sum(deltas) / 5, min(deltas), max(deltas)),
                                      (MEAN_TOL, DRAW_TOL, DRAW_TOL)):
            if abs(value - _value(figure)) > _half_unit(figure) + tol:
                wrong.append((key, figure, round(value, 4)))
    return wrong


def test_the_quoted_five_seed_means_and_ranges_are_those_of_the_seeds_run(five_seeds):
    notes = "\n".join(notes_section(NOTES, s) for s in NEW_SECTIONS)
    assert all(quote in notes for quote in QUOTED_RANGES.values())
    assert not check_quoted_figures(five_seeds["table"], QUOTED_RANGES)
    # the check can fail: a mean quoted 0.03 away from the run's (still inside the quoted range
    # of DiLoCo H = 25, +0.32..+0.39) is caught
    key = ("diloco", "none", False, 25)
    run_mean = sum(five_seeds["table"][key][2]) / 5
    moved = dict(QUOTED_RANGES)
    moved[key] = f"≈+{run_mean + 0.03:.2f}（+0.32..+0.39）"
    assert [w[:2] for w in check_quoted_figures(five_seeds["table"], moved)] == [(key, f"+{run_mean + 0.03:.2f}")]


def _delta(results, key):
    deltas = results["table"][key][2]
    return sum(deltas) / len(deltas)


def test_exact_numbers_in_the_new_sections_come_from_the_default_run(runs):
    out = runs["default"][1]
    text = "\n".join(notes_section(NOTES, s) for s in NEW_SECTIONS)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    text = re.sub(r"≈[^\s|，。；、]*", " ", text)                       # trained figures: ranges below
    text = re.sub(r"\d+\.\d+(–\d+\.\d+)? ?节|§\d+(\.\d+)?|arXiv:\d+\.\d+", " ", text)
    missing = sorted({d for d in decimals_in(text) if d not in out and d not in ALLOWED})
    assert not missing, f"numbers in §7.1-§7.5 that the default run did not print: {missing}"


@pytest.mark.parametrize("name", RUNS)
def test_claims_of_the_notes_hold(runs, name):
    r = runs[name][0]
    t = r["table"]
    one, block = t[("adamw", "int8", False)][1], t[("adamw", "int8-block", False)][1]
    assert all(b.zeroed_fraction < 0.05 < 0.10 < o.zeroed_fraction for o, b in zip(one, block))
    assert abs(_delta(r, ("adamw", "int8", False))) <= TOL and abs(_delta(r, ("adamw", "int8-block", False))) <= TOL
    ranks = sorted(k for k in t if k[1] == "powersgd")
    assert _delta(r, ranks[0]) > _delta(r, ranks[-1]) > TOL                 # lower rank, worse; both worse
    frozen, onebit = _delta(r, ("adamw-frozen-v", "none", False)), _delta(r, ("onebit-adam", "sign-l2", False))
    avgclip = _delta(r, ("adamw-frozen-v-avgclip", "none", False))
    assert avgclip < -TOL                                                  # freezing alone helps here
    assert frozen - avgclip > onebit - frozen > TOL                        # most of it is the per-worker clipping
    diloco = {k[3]: _delta(r, k) for k in t if k[0] == "diloco" and k[1] == "none"}
    assert all(d > TOL for d in diloco.values())
    assert diloco[5] > diloco[25]                                          # outer momentum overshoots at small H
    assert abs(_delta(r, ("diloco", "int8", False, 25)) - diloco[25]) <= TOL
    others = [k for k in t if k[1] not in ("int8", "int8-block") and k != ("adamw", "none", False)
              and k != ("adamw-frozen-v-avgclip", "none", False)]
    assert all(_delta(r, k) > TOL for k in others)                         # "only the int8 rows stay within"
