"""Console output that lines up when Chinese and English share a line.

Introduced in lecture 1 (code/lecture01); every later lecture imports it.

A terminal draws an East Asian wide or fullwidth character (汉字, '：', '（') in two
columns and an ASCII character in one, so `str.ljust` misaligns any table that mixes
them. `display_width` counts columns the way a terminal does, using the Unicode
East Asian Width property (unicodedata.east_asian_width: 'W' and 'F' are two columns).
"""

import re
import unicodedata

ALIGNMENTS = ("<", ">", "^")
LINE_WIDTH = 100   # display columns a projector shows at a readable size: every default line fits


def display_width(text):
    """Columns a terminal uses to draw `text`: wide/fullwidth characters count two."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def pad(text, width, align="<"):
    """Pad `text` with spaces to `width` display columns.

    align: '<' left, '>' right, '^' centre (an odd leftover space goes to the right).
    Text already wider than `width` comes back unchanged, never cut: a table that
    overflows is ugly, a table that hides a digit is wrong.
    """
    if align not in ALIGNMENTS:
        raise ValueError(f"align must be one of {ALIGNMENTS}, got {align!r}")
    text = str(text)
    gap = width - display_width(text)
    if gap <= 0:
        return text
    if align == "<":
        return text + " " * gap
    if align == ">":
        return " " * gap + text
    left = gap // 2
    return " " * left + text + " " * (gap - left)


def print_header(title, rule_char="="):
    """A rule, the title, a rule; the rules are as wide as the title is drawn."""
    rule = rule_char * max(display_width(title), 20)
    print(rule)
    print(title)
    print(rule)


def format_table(headers, rows, aligns=None, gap=2):
    """Lines of a table whose columns line up in a terminal.

    headers: column titles; rows: sequences of cells (anything str() accepts);
    aligns: one of '<', '>', '^' per column (default: first column left, the rest
    right, the usual layout for a name followed by numbers).
    Returns a list of strings so callers can print them or test them.
    """
    n_cols = len(headers)
    if aligns is None:
        aligns = ["<"] + [">"] * (n_cols - 1)
    if len(aligns) != n_cols:
        raise ValueError(f"{len(aligns)} alignments for {n_cols} columns")
    cells = [[str(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != n_cols:
            raise ValueError(f"row has {len(row)} cells, table has {n_cols} columns: {row}")
    widths = [max(display_width(str(h)), *(display_width(r[i]) for r in cells))
              for i, h in enumerate(headers)]
    spacer = " " * gap

    def line(row):
        return spacer.join(pad(c, w, a) for c, w, a in zip(row, widths, aligns)).rstrip()

    total = sum(widths) + gap * (n_cols - 1)
    return [line([str(h) for h in headers]), "-" * total] + [line(r) for r in cells]


def print_table(headers, rows, aligns=None, gap=2):
    """Print `format_table(...)`."""
    for text in format_table(headers, rows, aligns, gap):
        print(text)


def bar_chart(labels, values, width=40, char="█", value_format="{:.3f}"):
    """Lines of a horizontal bar chart: label, bar scaled to the largest value, value.

    Bars are proportional to value / max(values); a zero or negative maximum draws no
    bars. Labels are padded by display width so Chinese labels line up too.
    """
    if len(labels) != len(values):
        raise ValueError(f"{len(labels)} labels for {len(values)} values")
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    top = max(values) if values else 0
    label_width = max((display_width(str(l)) for l in labels), default=0)
    lines = []
    for label, value in zip(labels, values):
        n_cells = int(round(width * value / top)) if top > 0 and value > 0 else 0
        lines.append(f"{pad(str(label), label_width)} {char * n_cells:<{width}} "
                     f"{value_format.format(value)}")
    return lines


def histogram_lines(values, n_bins=16, markers=(), width=30, value_format="{:.1f}", unit=""):
    """Lines of a vertical-list histogram of `values`, with labelled markers.

    Bins are equal-width over [min, max] of the values and the marker positions together,
    so a marker outside the values' range still gets a row. markers: (label, value) pairs;
    each is written after the row of the bin it falls in ("← label"). A bin's bar is
    scaled to the fullest bin; its count is printed after the bar.
    """
    if not values:
        raise ValueError("histogram of no values")
    if n_bins < 1:
        raise ValueError(f"n_bins must be at least 1, got {n_bins}")
    everything = list(values) + [v for _, v in markers]
    lo, hi = min(everything), max(everything)
    span = (hi - lo) or 1.0

    def bin_of(v):
        return min(n_bins - 1, int((v - lo) / span * n_bins))

    counts = [0] * n_bins
    for v in values:
        counts[bin_of(v)] += 1
    labels_at = [[] for _ in range(n_bins)]
    for label, v in markers:
        labels_at[bin_of(v)].append(label)
    edges = [lo + span * i / n_bins for i in range(n_bins + 1)]
    ranges = [f"{value_format.format(a)}–{value_format.format(b)}{unit}" for a, b in zip(edges, edges[1:])]
    range_width = max(display_width(r) for r in ranges)
    top = max(counts)
    lines = []
    for r, count, labels in zip(ranges, counts, labels_at):
        bar = "█" * int(round(width * count / top)) if top else ""
        note = ("  ← " + "，".join(labels)) if labels else ""
        lines.append(f"{pad(r, range_width, '>')} │{pad(bar, width)} {pad(str(count) if count else '', 3, '>')}{note}")
    return lines


# A token is an unbreakable unit: a run of non-space, non-wide characters (an English
# word, a number with its unit), one wide character (a 汉字 may break anywhere), or spaces.
_TOKEN = re.compile(r"[^\s\u1100-\uffff]+|\s+|.")
_NO_LINE_START = set("，。、；：？！）》」』”’%,.;:)")   # punctuation that never begins a line
_NO_LINE_END = set("（《「『“‘(")                        # ... or ends one


def _is_wide(ch):
    return unicodedata.east_asian_width(ch) in ("W", "F")


def _unbreakable_units(text):
    """Tokens of `text`, with closing punctuation glued to what precedes it (spaces in
    between included) and opening punctuation glued to what follows it."""
    units = []
    for token in _TOKEN.findall(text):
        if token[0] in _NO_LINE_START and units:
            j = len(units) - 1
            while j > 0 and units[j].isspace():
                j -= 1
            if not units[j].isspace():
                units[j:] = ["".join(units[j:]) + token]
                continue
        if units and units[-1][-1] in _NO_LINE_END and not token.isspace():
            units[-1] += token
            continue
        units.append(token)
    return units


def wrap(text, width=LINE_WIDTH, indent=None):
    """Lines of `text`, each at most `width` display columns, broken between words or
    between wide characters, never before closing punctuation nor after opening one.

    Continuation lines start with `indent` (default: as many spaces as the text's own
    leading spaces plus its list marker, e.g. " 2. " gives 4), so a numbered observation
    reads as one block. A unit wider than the line is cut (it never overflows).
    """
    if indent is None:
        marker = re.match(r"\s*(\d+\.\s|[-*]\s)?", text)
        indent = " " * display_width(marker.group(0))
    lines, line = [], ""
    for token in _unbreakable_units(text):
        if display_width(line + token) <= width:
            line += token
            continue
        if token.isspace():
            lines.append(line.rstrip())
            line = indent
            continue
        if line.strip():
            lines.append(line.rstrip())
        line = indent
        token = token.lstrip()
        while display_width(line + token) > width:          # a unit longer than a line
            room = width - display_width(line)
            cut = 0
            while cut < len(token) and display_width(token[:cut + 1]) <= room:
                cut += 1
            cut = max(cut, 1)
            lines.append(line + token[:cut])
            line, token = indent, token[cut:]
        line += token
    if line.strip() or not lines:
        lines.append(line.rstrip())
    return lines


def print_wrapped(text, width=LINE_WIDTH, indent=None):
    """Print `wrap(text, width, indent)`, line by line."""
    for line in wrap(text, width, indent):
        print(line)


class StatusLine:
    """Progress on stderr that never lands between the rows of a table on stdout.

    On a terminal it is one line, rewritten in place ("\\r") at most every `min_interval_s`
    seconds and erased by clear() before stdout prints again; it is cut to fit the
    terminal, because a wrapped line cannot be rewritten. Anywhere else (a pipe, a log
    file) each update is its own line, at most one every `log_interval_s` seconds.
    Introduced for lecture 9's training runs (codes 5 and 7).
    """

    def __init__(self, stream=None, min_interval_s=0.5, log_interval_s=10.0):
        import sys
        self.stream = sys.stderr if stream is None else stream
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.min_interval_s = min_interval_s if self.tty else log_interval_s
        self.shown = 0                  # display width of the line now on the terminal
        self.last_s = None              # when the last update was written

    def show(self, text, force=False):
        import shutil
        import sys
        import time
        now = time.perf_counter()
        if not force and self.last_s is not None and now - self.last_s < self.min_interval_s:
            return
        self.last_s = now
        sys.stdout.flush()              # what stdout has printed so far appears first
        if self.tty:
            limit = min(LINE_WIDTH, shutil.get_terminal_size().columns) - 1
            while display_width(text) > limit:
                text = text[:-1]
            width = display_width(text)
            self.stream.write("\r" + text + " " * max(0, self.shown - width))
            self.shown = width
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def clear(self):
        if self.tty and self.shown:
            self.stream.write("\r" + " " * self.shown + "\r")
            self.stream.flush()
            self.shown = 0


def utf8_output():
    """Make this process (and the Python processes it starts) write UTF-8 to stdout and stderr,
    whatever the console's code page. Every script calls it first thing in main().

    Windows gives a redirected stdout (`python script.py > out.txt`, `| more`) the ANSI code
    page (cp1252 in Western Europe, cp936 in China), which cannot encode '✓' or '█' (cp1252
    not even 汉字): the first such print would stop the script with UnicodeEncodeError. A
    stream that already writes UTF-8 (Linux, macOS, a Windows console window) is left alone;
    one that is not a real text file (a test's io.StringIO) has no reconfigure and is left
    alone too. Child processes read PYTHONIOENCODING at start-up, so it is set for them.
    """
    import os
    import sys

    def is_utf8(name):
        return (name or "").lower().replace("-", "").replace("_", "").startswith("utf8")

    changed = False
    for stream in (sys.stdout, sys.stderr):
        if not is_utf8(getattr(stream, "encoding", None)) and hasattr(stream, "reconfigure"):
            try:
                stream.flush()
                stream.reconfigure(encoding="utf-8")
                changed = True
            except (AttributeError, ValueError, OSError):    # detached or closed: nothing to do
                pass
    if changed or not is_utf8(os.environ.get("PYTHONIOENCODING", "utf-8")):
        os.environ["PYTHONIOENCODING"] = "utf-8"


def printed_difference(a, b, digits=4):
    """a − b as a student computes it from the printed numbers: each rounded to `digits`
    decimals as it is printed, then subtracted exactly (decimal arithmetic, no binary rounding).
    A difference computed before rounding can disagree in the last digit with a calculator
    (2.85834 − 2.08266 = 0.77568 prints 0.7757, but 2.8583 − 2.0827 = 0.7756): print this
    one beside its operands. Returns a float that prints back to exactly those digits."""
    from decimal import Decimal
    return float(Decimal(f"{a:.{digits}f}") - Decimal(f"{b:.{digits}f}"))


def signed(x, digits=4):
    """x with its sign ("+0.0123", "-0.0040"), and "0.0000" for anything that rounds to zero
    (never "-0.0000")."""
    return f"{x:+.{digits}f}" if round(x, digits) != 0 else f"{0:.{digits}f}"


def eta_text(done, total, elapsed_s, since_first_s=None, unit="步"):
    """A progress line's numbers: "12/70 步，3.1 秒，还要约 14.9 秒 (ETA)": the rest is assumed
    to go as fast as what is done. since_first_s: the time since the first unit ended; given,
    the estimate leaves out the first unit, which carries the start-up (loading, the first
    call's set-up) and would inflate it; then there is none before a second unit is done."""
    text = f"{done}/{total} {unit}，{elapsed_s:.1f} 秒"
    if since_first_s is not None:
        if 1 < done < total:
            text += f"，还要约 {since_first_s / (done - 1) * (total - done):.1f} 秒 (ETA)"
    elif 0 < done < total:
        text += f"，还要约 {elapsed_s / done * (total - done):.1f} 秒 (ETA)"
    return text
