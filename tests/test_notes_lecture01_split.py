"""Lecture 1's split table (### 训练集和验证集): each row's document count, character count
and MB are what the toy world (lecture01.fm_world.build_world(0), the world 01_world.py's
part 5 prints) gives for that text. Pure arithmetic of the world, no training: changing a
cell, or the world, alone fails."""

import re

import pytest

from conftest import ROOT, notes_section, table_cells
from lecture01.fm_world import build_world

pytestmark = pytest.mark.smoke

NOTES = ROOT / "lectures" / "lecture01_base_model.md"


def split_rows():
    """{row name: (documents, characters, MB) cells} of the table under the heading."""
    rows = {}
    for line in notes_section(NOTES, "### 训练集和验证集").splitlines():
        cells = table_cells(line)
        if line.startswith("|") and len(cells) == 4 and re.fullmatch(r"\d+", cells[1]):
            rows[cells[0]] = tuple(cells[1:])
    return rows


def world_rows():
    """The same cells as the world computes them (as 01_world.py's show_sizes does)."""
    world = build_world(0)
    rows = {}
    for name, docs, text in (("训练 train", world.train_documents, world.train_text()),
                             ("验证 validation", world.val_documents, world.val_text())):
        rows[name] = (str(len(docs)), str(len(text)), f"{len(text.encode('utf-8')) / 1e6:.3f}")
    return rows


def test_split_table_cells_are_the_worlds_sizes():
    assert split_rows() == world_rows()
