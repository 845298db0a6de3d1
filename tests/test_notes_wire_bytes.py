"""§6.2 "线上的字节 Bytes on the wire": the table of what each X-Compression mode sends
(keys, dtypes, bytes per kept entry) is what compression.encode_payload sends.

For every row the test encodes a small two-tensor gradient in that mode and checks: the
modes are exactly compression.WIRE_MODES; the keys and their dtypes are the ones the row
names; the bytes of each tensor's parts are (bytes per kept entry) x (entries kept) + (the
row's per-tensor extra), counted by parts_bytes, with the row's sum's terms equal to the
element sizes of the per-entry keys ("8 + 1 = 9": int64 index, int8 value). The note under
the table (code 5's compress_vector: int32 indices, 8 bytes per entry) is checked too.
"""

import re

import pytest
import torch

from conftest import ROOT, notes_section, table_cells
from lecture09.compress import compression
from lecture09.compress.compression_schemes import parts_bytes, topk_count
from notes_book import LECTURE09_BOOK

pytestmark = pytest.mark.smoke

NOTES = LECTURE09_BOOK
RATIO = 0.05
GRADIENT = {"w": (7, 30), "b": (50,)}    # top-k keeps 10 of 210 and 2 of 50 entries


def section():
    return notes_section(NOTES, "### 6.2 线上的字节")


def mode_rows():
    """{mode: (keys cell, bytes cell)} of the table whose first column is `X-Compression`."""
    rows = {}
    for line in section().splitlines():
        cells = table_cells(line)
        mode = re.fullmatch(r"`([a-z0-9-]+)`", cells[0])
        if line.startswith("|") and mode and len(cells) == 3:
            rows[mode.group(1)] = (cells[1], cells[2])
    return rows


def written_keys(cell):
    """{suffix: dtype} from "`name::idx`：int64 下标；`name::val`：float32 值"."""
    return {m.group(1): m.group(2) for m in re.finditer(r"`name((?:::[a-z]+)?)`：\s*([a-z]+[0-9]+)", cell)}


def written_bytes(cell):
    """(terms, total per kept entry, extra per tensor) from "8 + 1 = 9 字节，每个张量另加 4 字节"."""
    per_entry = re.match(r"([\d\s+]+?)(?:=\s*(\d+)\s*)?字节", cell)
    assert per_entry, f"no bytes per entry in {cell!r}"
    terms = [int(t) for t in per_entry.group(1).split("+")]
    total = int(per_entry.group(2)) if per_entry.group(2) else terms[0]
    extra = re.search(r"每个张量另加\s*(\d+)\s*字节", cell)
    return terms, total, int(extra.group(1)) if extra else 0


def gradient():
    g = torch.Generator().manual_seed(0)
    return {name: torch.randn(shape, generator=g) for name, shape in GRADIENT.items()}


def test_the_table_has_one_row_per_wire_mode():
    assert sorted(mode_rows()) == sorted(compression.WIRE_MODES)


@pytest.mark.parametrize("mode", sorted(mode_rows()))
def test_a_row_gives_the_keys_and_dtypes_the_payload_has(mode):
    keys = written_keys(mode_rows()[mode][0])
    payload = compression.encode_payload(gradient(), mode, ratio=RATIO)
    assert sorted(payload) == sorted(name + suffix for name in GRADIENT for suffix in keys)
    for key, tensor in payload.items():
        assert str(tensor.dtype).removeprefix("torch.") == keys[key[key.index("::"):] if "::" in key else ""], key
    if "形状 (1,)" in mode_rows()[mode][0]:
        assert all(tuple(t.shape) == (1,) for k, t in payload.items() if k.endswith(compression.SCALE_SUFFIX))


@pytest.mark.parametrize("mode", sorted(mode_rows()))
def test_a_row_gives_the_bytes_the_payload_costs(mode):
    terms, total, extra = written_bytes(mode_rows()[mode][1])
    assert sum(terms) == total, (terms, total)
    payload = compression.encode_payload(gradient(), mode, ratio=RATIO)
    for name, shape in GRADIENT.items():
        parts = {k: t for k, t in payload.items() if k == name or k.startswith(name + "::")}
        numel = torch.Size(shape).numel()
        kept = numel if mode == "none" else topk_count(numel, RATIO)
        per_entry = [t.element_size() for t in parts.values() if t.numel() == kept]
        assert per_entry == terms, (name, per_entry, terms)        # in the row's order: idx, then val
        assert parts_bytes(parts) == total * kept + extra, (name, parts_bytes(parts), total, kept, extra)


def test_code_5s_top_k_note_under_the_table():
    note = re.search(r"`compress_vector`[^。]*?用 (int\d+) 下标，每个数 (\d+) 字节", section())
    assert note, "the note on code 5's compress_vector is gone or reworded"
    assert compression.Options().index_dtype == getattr(torch, note.group(1))
    g = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    _, wire_bytes = compression.compress_vector(g, "topk", topk_ratio=RATIO)
    assert wire_bytes == int(note.group(2)) * topk_count(1000, RATIO)
