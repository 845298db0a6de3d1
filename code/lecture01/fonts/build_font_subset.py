"""Rebuild FMCourseSansSC-Regular.otf, the font the figures are drawn in (figures.py).

Not run by the course: the .otf is committed. It is a subset of Noto Sans CJK SC Regular
(SIL Open Font License 1.1, OFL.txt beside this file) renamed "FM Course Sans SC", so that a
full Noto Sans CJK installed on a machine can never be picked in its place. It holds the
3755 characters of GB 2312 level 1 (the common simplified characters), GB 2312's symbols,
ASCII, Greek and the signs the figures use, and every character of the course's code (its
labels and messages, which a figure may show). With a character outside these, figures.py
stops and names it; add it to EXTRA (or to the code) and rebuild:

    apt-get download fonts-noto-cjk && dpkg -x fonts-noto-cjk_*.deb noto   # Debian's package
    python3 code/lecture01/fonts/build_font_subset.py noto/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc

(needs fontTools, which matplotlib installs). The figures' SVG files change only where a
glyph's outline changes, so a rebuild from the same Noto release leaves them byte-identical.
"""

import sys
from pathlib import Path

FAMILY = "FM Course Sans SC"
FILE = Path(__file__).with_name("FMCourseSansSC-Regular.otf")
SC_INDEX = 2           # Noto Sans CJK SC in NotoSansCJK-Regular.ttc (JP, KR, SC, TC, HK, ...)
EXTRA = "αβγδεθλμπστΔΣ×·−–—≈≤≥≠→←↑↓↔±°²³½‰…“”‘’√∞∑∝∈％（），：；、。《》【】"


def code_characters():
    """Every character outside ASCII in code/lecture*/**/*.py."""
    code = Path(__file__).resolve().parents[2]
    return {c for path in code.glob("lecture*/**/*.py") for c in path.read_text(encoding="utf-8") if ord(c) > 0x7F}


def characters():
    """GB 2312 level 1 (rows 16-55), its symbol rows 1-9, printable ASCII, EXTRA and the code's."""
    chars = set()
    for high in (*range(0xA1, 0xAA), *range(0xB0, 0xD8)):
        for low in range(0xA1, 0xFF):
            try:
                chars.add(bytes((high, low)).decode("gb2312"))
            except UnicodeDecodeError:
                pass
    chars |= {chr(c) for c in range(0x20, 0x7F)} | set(EXTRA) | code_characters()
    return "".join(sorted(chars))


def build(source):
    from fontTools import subset
    from fontTools.ttLib import TTFont

    options = subset.Options()
    options.layout_features = ["kern"]
    options.hinting = False
    options.notdef_outline = True
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6]
    font = TTFont(source, fontNumber=SC_INDEX)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=characters())      # characters the font lacks are left out
    subsetter.subset(font)
    names = font["name"]
    for record in list(names.names):
        if record.nameID in (1, 3, 4, 6):
            value = {1: FAMILY, 3: FAMILY.replace(" ", "") + "-Regular;subset of Noto Sans CJK SC 2.004",
                     4: FAMILY, 6: FAMILY.replace(" ", "") + "-Regular"}[record.nameID]
            names.setName(value, record.nameID, record.platformID, record.platEncID, record.langID)
    font["CFF "].cff.fontNames = [FAMILY.replace(" ", "") + "-Regular"]
    font.save(FILE)
    print(f"{FILE}: {FILE.stat().st_size} bytes, {len(font.getBestCmap())} characters")


if __name__ == "__main__":
    build(sys.argv[1])
