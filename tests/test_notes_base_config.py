"""Lecture 1's "BASE_CONFIG 逐项说明": the table lists every field of tiny_gpt.GPTConfig, in
order, with BASE_CONFIG's value; the figures its 为什么 column derives from them (96/4 = 24
per head, the MLP's 2 × 96) and the parameter count under it (each a × b + c = d term, and
their total) are what BASE_CONFIG and make_model give. Changing a value on either side
alone fails."""

import dataclasses
import math
import re

import pytest

from conftest import ROOT, notes_section, table_cells
from lecture01 import tiny_gpt

pytestmark = pytest.mark.smoke

NOTES = ROOT / "lectures" / "lecture01_base_model.md"
CONFIG = tiny_gpt.BASE_CONFIG


def section():
    return notes_section(NOTES, "### BASE_CONFIG 逐项说明")


def rows():
    """{field: (default cell, why cell)} in the table's order."""
    out = {}
    for line in section().splitlines():
        cells = table_cells(line)
        field = re.fullmatch(r"`(\w+)`", cells[0])
        if line.startswith("|") and field:
            out[field.group(1)] = (cells[1], cells[2])
    return out


def test_the_table_lists_every_field_in_order():
    assert list(rows()) == [f.name for f in dataclasses.fields(tiny_gpt.GPTConfig)]


@pytest.mark.parametrize("field", list(rows()))
def test_a_field_has_base_configs_value(field):
    assert math.isclose(float(rows()[field][0]), getattr(CONFIG, field), rel_tol=1e-12)


def test_the_why_column_derives_from_the_config():
    why = {field: cell for field, (_, cell) in rows().items()}
    width, heads, per_head = map(int, re.search(r"每个头 (\d+)/(\d+) = (\d+) 维", why["n_head"]).groups())
    assert (width, heads, per_head) == (CONFIG.n_embd, CONFIG.n_head, CONFIG.n_embd // CONFIG.n_head)
    ratio, width = map(int, re.search(r"MLP 隐藏层 (\d+) × (\d+)", why["mlp_ratio"]).groups())
    assert (ratio, width) == (CONFIG.mlp_ratio, CONFIG.n_embd)


def test_the_parameter_count_under_the_table_is_the_models():
    text = section()
    total = int(re.search(r"([\d,]+) 个参数", text).group(1).replace(",", ""))
    assert total == sum(p.numel() for p in tiny_gpt.make_model(CONFIG).parameters())
    terms = re.findall(r"(\d+) × (\d+)(?: \+ (\d+))? = (\d+)", text)
    assert len(terms) == 6, terms                  # embedding, qkv, projection, MLP in and out, head
    for a, b, c, d in terms:
        assert int(a) * int(b) + int(c or 0) == int(d), (a, b, c, d)
    norms = re.search(r"([一两二三四五六七八九])个 LayerNorm 各 (\d+)", text)
    n_norms = {"两": 2}.get(norms.group(1)) or "一二三四五六七八九".index(norms.group(1)) + 1
    assert sum(int(d) for *_, d in terms) + n_norms * int(norms.group(2)) == total
    assert int(norms.group(2)) == 2 * CONFIG.n_embd
    assert re.search(r"加起来正好 ([\d,]+)", text).group(1) == f"{total:,}"
