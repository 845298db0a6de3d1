"""console: display widths with Chinese text, padding, tables."""

import io

import pytest

from lecture01 import console

pytestmark = pytest.mark.smoke


def test_display_width_counts_wide_characters_as_two():
    assert console.display_width("abc") == 3
    assert console.display_width("数据并行") == 8
    assert console.display_width("数据 parallel") == 4 + 1 + 8
    assert console.display_width("（：）") == 6   # fullwidth punctuation is two columns too


@pytest.mark.parametrize("align, expected", [("<", "中文a   "), (">", "   中文a"), ("^", " 中文a  ")])
def test_pad_to_display_width(align, expected):
    out = console.pad("中文a", 8, align)
    assert out == expected
    assert console.display_width(out) == 8


def test_pad_leaves_long_text_unchanged():
    assert console.pad("很长的中文标题", 4) == "很长的中文标题"


def test_pad_rejects_unknown_alignment():
    with pytest.raises(ValueError):
        console.pad("x", 4, "=")


def test_table_columns_line_up_with_mixed_scripts(capsys):
    lines = console.format_table(["方法 method", "秒 s"], [["随机", "1.5"], ["local search", "12.25"]])
    widths = {console.display_width(line) for line in lines[2:]}
    assert len(widths) == 1                       # every row ends at the same column
    assert lines[2].endswith("1.5") and lines[3].endswith("12.25")   # numbers right-aligned
    assert console.display_width(lines[0]) == widths.pop()            # header as wide as rows


def test_table_rejects_ragged_rows():
    with pytest.raises(ValueError):
        console.format_table(["a", "b"], [["1"]])


def test_print_header_rules_match_title_width(capsys):
    console.print_header("第 1 讲 lecture 1: 一个很长很长的标题 title")
    rule, title, rule2 = capsys.readouterr().out.splitlines()
    assert rule == rule2 and len(rule) == console.display_width(title)


def test_bar_chart_scales_to_largest_value():
    lines = console.bar_chart(["a", "字"], [2.0, 1.0], width=10)
    assert lines[0].count("█") == 10 and lines[1].count("█") == 5


def test_histogram_counts_every_value_and_places_markers():
    values = [1.0, 1.1, 2.0, 2.1, 2.2, 4.0]
    lines = console.histogram_lines(values, n_bins=4, markers=[("best", 0.0), ("worst", 4.0)])
    counts = [int(line.split()[-1]) if line.split()[-1].isdigit() else 0
              for line in (l.split("  ←")[0] for l in lines)]
    assert sum(counts) == len(values)
    assert lines[0].endswith("← best")            # 0.0 extends the range downward
    assert lines[-1].endswith("← worst")


def test_wrap_keeps_every_line_within_the_width_and_loses_nothing():
    text = (" 2. 误差反馈：对 AdamW 有帮助（好了 0.0206），对 SGD 有帮助（好了 0.1606）。"
            "Error feedback helps SGD more than AdamW, measured as paired differences. " * 3)
    lines = console.wrap(text, width=40)
    assert len(lines) > 3
    assert all(console.display_width(line) <= 40 for line in lines)
    assert all(line.startswith("    ") for line in lines[1:])        # indented under " 2. "
    assert "".join(line.strip().replace(" ", "") for line in lines) == text.replace(" ", "")
    assert not any(line.strip()[0] in "，。）" for line in lines)       # no line starts with closing punctuation
    assert not any(line.rstrip()[-1] == "（" for line in lines)          # ... nor ends with an opening one


def test_wrap_breaks_between_english_words_not_inside_them():
    lines = console.wrap("alpha beta gamma delta", width=11)
    assert lines == ["alpha beta", "gamma delta"]
    assert console.wrap("short") == ["short"]


def test_wrap_cuts_a_word_longer_than_the_line():
    lines = console.wrap("x" * 25, width=10, indent="")
    assert lines == ["x" * 10, "x" * 10, "x" * 5]


@pytest.mark.parametrize("width", range(16, 60))
def test_wrap_never_starts_a_line_with_closing_punctuation(width):
    text = " 2. 误差反馈（好了 0.0206），对 SGD（好了 0.1606）。" * 3 + "abc 个参数 / ）之后还有。"
    lines = console.wrap(text, width=width)
    assert all(console.display_width(line) <= width for line in lines)
    assert not any(line.strip()[:1] in ("，", "。", "）") for line in lines)
    assert "".join(line.replace(" ", "") for line in lines) == text.replace(" ", "")


def test_status_line_on_a_terminal_is_rewritten_in_place_and_erased():
    from lecture01.console import StatusLine

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    screen = Terminal()
    status = StatusLine(screen, min_interval_s=0)
    status.show("训练中 3/10")
    status.show("训练中 4/10")
    status.clear()
    text = screen.getvalue()
    assert "\n" not in text and text.count("\r") == 4     # two updates, then erase: \r blanks \r
    assert text.endswith("\r" + " " * 11 + "\r")          # erased: the next stdout line starts clean


def test_status_line_in_a_log_is_one_line_per_update_and_throttled():
    from lecture01.console import StatusLine
    log = io.StringIO()
    status = StatusLine(log, log_interval_s=3600)
    status.show("a")
    status.show("b")                # within the interval: not written
    status.show("c", force=True)
    status.clear()
    assert log.getvalue() == "a\nc\n"


def test_printed_difference_is_the_difference_of_the_printed_numbers():
    """Issue 43, item 5: a calculator on the printed numbers gives the printed difference."""
    from lecture01.console import printed_difference, signed
    # 2.85834 − 2.08266 = 0.77568 before rounding (prints 0.7757); printed: 2.8583 − 2.0827
    assert f"{2.85834 - 2.08266:.4f}" == "0.7757"
    assert f"{printed_difference(2.85834, 2.08266):.4f}" == "0.7756"
    # code 06 at --topk-ratio 0.001: two rows both printed 4.2225 must get one Δ
    assert f"{4.22246 - 2.54496:.4f}" == "1.6775" and f"{4.22254 - 2.54496:.4f}" == "1.6776"
    assert printed_difference(4.22246, 2.54496) == printed_difference(4.22254, 2.54496) == 1.6775
    assert signed(printed_difference(1.00006, 1.00007)) == "0.0000"         # both print 1.0001: no "-0.0000"
    assert signed(printed_difference(0.1, 0.3)) == "-0.2000"
    assert printed_difference(1.23456, 1.0, digits=2) == 0.23
    for a, b in ((2.85834, 2.08266), (0.00005, 0.00004999), (123.45675, 0.00125), (-1.99995, 2.5)):
        assert f"{printed_difference(a, b):.4f}" == f"{round(float(f'{a:.4f}') - float(f'{b:.4f}'), 4):.4f}"


def test_printed_mean_delta_is_the_difference_of_the_printed_means():
    from types import SimpleNamespace as R
    from lecture09.compress.compressed_dp import printed_mean_delta
    row = [R(bpc=2.8583, diverged=False), R(bpc=2.85838, diverged=False)]     # mean 2.85834: prints 2.8583
    base = [R(bpc=2.08266, diverged=False), R(bpc=2.08266, diverged=False)]   # prints 2.0827
    paired = sum(r.bpc - b.bpc for r, b in zip(row, base)) / 2
    assert f"{paired:.4f}" == "0.7757"                                          # what the tables printed
    assert f"{printed_mean_delta(row, base):.4f}" == "0.7756"
    import math
    assert math.isnan(printed_mean_delta(row, [R(bpc=math.nan, diverged=True), base[1]]))


def test_eta_text_estimates_from_what_is_done():
    from lecture01.console import eta_text
    assert eta_text(0, 70, 0.5) == "0/70 步，0.5 秒"
    assert eta_text(10, 70, 5.0) == "10/70 步，5.0 秒，还要约 30.0 秒 (ETA)"     # 0.5 s a step, 60 left
    assert eta_text(70, 70, 35.0) == "70/70 步，35.0 秒"
    # the first step carried 4 s of start-up: left out, 9 steps in 4.5 s give 0.5 s a step
    assert eta_text(10, 70, 8.5, since_first_s=4.5) == "10/70 步，8.5 秒，还要约 30.0 秒 (ETA)"
    assert eta_text(1, 70, 4.0, since_first_s=0.0) == "1/70 步，4.0 秒"
    assert eta_text(3, 8, 2.0, unit="个") == "3/8 个，2.0 秒，还要约 3.3 秒 (ETA)"
