"""§5.7's trained figures "≈mean（min–max）": the mean of 5 seed pairs (fp32) and the smallest
and largest draw. tests/test_claims.py checks this machine's runs against the ranges; one
seed pair can sit anywhere in a range, so the means are checked here by what is arithmetic
about them, with the rounding the notes use (half a unit of each figure's last digit):

- a mean lies between the smallest and the largest draw;
- Δ is paired (this row minus the uncompressed row of the same optimizer, same seeds), and a
  mean of differences is the difference of the means: Δ's mean = this row's bpc mean − the
  uncompressed bpc mean;
- an error-feedback gain is "without − with" of two rows: its mean is the difference of
  their bpc means.
"""

import re

import pytest

from conftest import ROOT, notes_section, table_cells
from notes_book import LECTURE09_BOOK

NOTES = LECTURE09_BOOK
NONE = "不压缩（fp32）"
# the gains table's rows: (optimizer, row without error feedback, row with it)
GAINS = {"top-k，AdamW": ("AdamW", "top-k，没有误差反馈", "top-k，有误差反馈"),
         "top-k，SGD": ("SGD", "top-k，没有误差反馈", "top-k，有误差反馈"),
         "只发符号，AdamW": ("AdamW", "只发符号，没有误差反馈", "只发符号，有误差反馈")}
QUOTE = re.compile(r"≈([+-]?\d+\.\d+)（([+-]?\d+\.\d+)(?:–|\.\.)([+-]?\d+\.\d+)）")


def _rows():
    """§5.7's table rows as lists of cells."""
    return [table_cells(line)
            for line in notes_section(NOTES, "### 5.7").splitlines()
            if line.startswith("|") and not line.startswith("|---")]


def _quote(cell):
    """(mean, low, high) of a cell "≈1.55（1.539–1.564）" or "≈+1.10（+1.050..+1.173）", as strings."""
    m = QUOTE.fullmatch(cell.replace("−", "-"))
    assert m, f"not a '≈mean（min–max）' figure: {cell!r}"
    return m.groups()


def _half_unit(figure):
    """Half a unit of a written figure's last digit: "1.55" -> 0.005."""
    return 0.5 * 10.0 ** -len(figure.split(".")[1])


def _mean_and_rounding(cell):
    mean = _quote(cell)[0]
    return float(mean), _half_unit(mean)


def _bpc_table():
    """{(optimizer, compression): (bpc cell, Δ cell)} of the first table."""
    rows = {(cells[0], cells[1]): (cells[4], cells[5]) for cells in _rows()
            if len(cells) == 6 and cells[0] in ("AdamW", "SGD")}
    assert len(rows) == 10
    return rows


def _gain_table():
    rows = {cells[0]: cells[1] for cells in _rows() if len(cells) == 2 and cells[0] in GAINS}
    assert len(rows) == len(GAINS)
    return rows


def _quoted_cells():
    cells = [c for pair in _bpc_table().values() for c in pair if c != "—"]
    return cells + list(_gain_table().values())


@pytest.mark.parametrize("cell", _quoted_cells())
def test_each_mean_lies_between_its_smallest_and_largest_draw(cell):
    mean, low, high = _quote(cell)
    h = _half_unit(mean)
    assert float(low) - h <= float(mean) <= float(high) + h, cell


def test_each_delta_mean_is_the_rows_bpc_mean_minus_the_uncompressed_one():
    table = _bpc_table()
    checked = 0
    for (optimizer, compression), (bpc_cell, delta_cell) in table.items():
        if delta_cell == "—":
            continue
        bpc, h_bpc = _mean_and_rounding(bpc_cell)
        base, h_base = _mean_and_rounding(table[(optimizer, NONE)][0])
        delta, h_delta = _mean_and_rounding(delta_cell)
        assert abs(delta - (bpc - base)) <= h_delta + h_bpc + h_base + 1e-9, (optimizer, compression)
        checked += 1
    assert checked == 8


def test_each_error_feedback_gain_mean_is_a_difference_of_two_bpc_means():
    table = _bpc_table()
    for label, cell in _gain_table().items():
        optimizer, without, with_ef = GAINS[label]
        a, h_a = _mean_and_rounding(table[(optimizer, without)][0])
        b, h_b = _mean_and_rounding(table[(optimizer, with_ef)][0])
        gain, h_gain = _mean_and_rounding(cell)
        assert abs(gain - (a - b)) <= h_gain + h_a + h_b + 1e-9, label
