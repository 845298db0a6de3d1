"""The golden comparison itself: what it lets through and what it catches."""

from golden_compare import Golden, differences, units

import pytest

pytestmark = pytest.mark.smoke

GOLDEN = Golden("example", "none.py", (), tolerant=(r"bits/字符",), skip=(r"样本 samples",), mask=(r"\d+\.\d s\b",))
TEXT = """标题 title
表 table      字节 bytes
none         333,872
int8          83,468

 1. 验证 bits/字符 1.5637，比 none 高 0.0021；
    用时 9.5 s。
 2. 最大差 1.3e-07，在容差以内。
[实测 measured] 这一步 28.1 ms。

样本 samples: the cat
"""


def test_units_are_blocks_and_list_items():
    found = units(TEXT)
    assert [u.lines[0].strip()[:2] for u in found] == ["标题", "1.", "2.", "样本"]
    assert len(found[1].lines) == 2


def test_the_same_output_passes_and_noise_is_allowed():
    assert differences(TEXT, TEXT, GOLDEN) == []
    noisy = (TEXT.replace("1.5637", "1.5702").replace("9.5 s", "12.0 s").replace("1.3e-07", "4.1e-08")
             .replace("28.1 ms", "31.7 ms").replace("the cat", "a dog"))
    assert differences(noisy, TEXT, GOLDEN) == []


def test_a_changed_byte_count_a_trained_figure_out_of_tolerance_and_changed_words_fail():
    assert differences(TEXT.replace("83,468", "83,469"), TEXT, GOLDEN)
    assert differences(TEXT.replace("1.5637", "1.6637"), TEXT, GOLDEN)
    assert differences(TEXT.replace("比 none 高", "比 none 低"), TEXT, GOLDEN)
    assert differences(TEXT.replace("int8 ", "int4 "), TEXT, GOLDEN)
    assert differences(TEXT + "\n 3. 多了一条观察。\n", TEXT, GOLDEN)
