"""Figures: the `--figures DIR` flag of the scripts, the course's style and font, and SVG files
that are the same bytes on every machine.

A script that has a picture adds the flag with cli_args.add_figures_flag(parser) and, after its run,
hands its results to a drawing module (`lecture09/<package>/*_figures.py`), which draws each
figure inside `with figure(directory, "fig09_04_schedules.svg") as (fig, ax):`. matplotlib is
imported only then: `--help` and a run without `--figures` never load it.

Reproducible bytes. A figure of arithmetic (a schedule, a formula, a proven optimum) must be
byte-for-byte the same wherever it is drawn, so tests/test_figures.py can redraw it and
compare it with the committed file:
  * text is written as paths (svg.fonttype "path"), from one font file shipped here
    (fonts/FMCourseSansSC-Regular.otf, a subset of Noto Sans CJK SC under the SIL OFL), never
    from a font of the machine;
  * svg.hashsalt is fixed, so clip-path and glyph ids are the same on every run;
  * no date in the metadata (Date None), and the bytes are written by us, "\\n" line ends
    on Windows too;
  * every character of every text must be in the font: otherwise `figure` stops and names
    it (it would be drawn as an empty box).
A figure of a trained or timed run moves between machines; its title says which CPU, which
precision and which seed drew it (`machine_note`).
"""

import contextlib
import io
import platform
import re
import sys
from pathlib import Path

FONT_FILE = Path(__file__).with_name("fonts") / "FMCourseSansSC-Regular.otf"
FONT_FAMILY = "FM Course Sans SC"
NAME = re.compile(r"^fig\d\d_\d\d_[a-z0-9_]+\.svg$")     # fig<lecture>_<section>_<what>.svg

# The style: matplotlib's defaults, our font everywhere (mathtext too), light grid, no
# top and right spines; and what makes the SVG deterministic.
RC = {
    "font.family": [FONT_FAMILY],
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.unicode_minus": True,
    "mathtext.fontset": "custom",
    "mathtext.rm": FONT_FAMILY,
    "mathtext.it": FONT_FAMILY,
    "mathtext.bf": FONT_FAMILY,
    "mathtext.sf": FONT_FAMILY,
    "mathtext.tt": FONT_FAMILY,
    "mathtext.cal": FONT_FAMILY,
    "mathtext.bfit": FONT_FAMILY,
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "svg.fonttype": "path",
    "svg.hashsalt": "fm-course-figures",
    "svg.image_inline": True,
}
METADATA = {"Date": None}

# Colours by idea, the same in every figure (colour-blind safe: Okabe and Ito's palette).
COLORS = {"forward": "#0072B2", "backward": "#E69F00", "weight": "#009E73", "idle": "#DDDDDD",
          "compute": "#56B4E9", "comm": "#D55E00", "other": "#CC79A7", "grey": "#999999",
          "black": "#000000", "yellow": "#F0E442"}
CYCLE = ["#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000", "#999999"]


# =============================================================================
# Drawing and saving
# =============================================================================

class MissingGlyphs(ValueError):
    """A text of a figure has characters that the course font does not have."""


def _matplotlib():
    """matplotlib, imported now (never at a script's start), with the course font registered."""
    import matplotlib
    from matplotlib import font_manager

    if not any(entry.name == FONT_FAMILY for entry in font_manager.fontManager.ttflist):
        font_manager.fontManager.addfont(str(FONT_FILE))
    return matplotlib


def font_characters():
    """The characters the course font has (its character map)."""
    from matplotlib.ft2font import FT2Font

    return {chr(code) for code in FT2Font(str(FONT_FILE)).get_charmap()}


def texts_of(fig):
    """Every non-empty string drawn on the figure (titles, labels, ticks, legends, notes)."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def check_glyphs(fig):
    have = font_characters() | {"\n", "$", "\\", "{", "}", "^", "_"}
    missing = sorted({c for text in texts_of(fig) for c in text} - have)
    if missing:
        raise MissingGlyphs("图里有字体没有的字符 (characters the course font lacks): " + " ".join(
            f"{c!r} U+{ord(c):04X}" for c in missing) + "；加进 fonts/build_font_subset.py 的 EXTRA")


def svg_bytes(fig):
    """The figure as SVG: bytes that depend only on what was drawn (and matplotlib's version)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", metadata=METADATA)
    return buffer.getvalue()


@contextlib.contextmanager
def figure(directory, name, size=(8, 4.5), **subplots):
    """Draw one figure: `with figure(dir, "fig09_04_x.svg", nrows=2) as (fig, axes): ...`; on
    leaving the block it is checked (name, glyphs) and written to dir/name. `subplots`: the
    arguments of Figure.subplots (none: a single Axes)."""
    if not NAME.match(name):
        raise ValueError(f"figure name {name!r} is not fig<lecture>_<section>_<what>.svg")
    matplotlib = _matplotlib()
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):
        fig = Figure(figsize=size, layout="constrained")
        axes = fig.subplots(**subplots)
        yield fig, axes
        check_glyphs(fig)
        data = svg_bytes(fig)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(data)
    print(f"图 figure: {directory / name}", file=sys.stderr)


def cpu_model():
    """The CPU's model name, as the operating system reports it (for trained figures' titles)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_note(precision=None, seed=None):
    """"drawn on <CPU>, <precision>, seed <s>": what a trained figure's title must say."""
    parts = [cpu_model()]
    if precision:
        parts.append(precision)
    if seed is not None:
        parts.append(f"seed {seed}")
    return "本机实测 drawn on " + ", ".join(parts).encode("ascii", "replace").decode()
