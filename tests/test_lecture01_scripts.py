"""Smoke tests of lecture 1's training script with tiny settings, and its flag checking."""

import math

import pytest

from conftest import LECTURE01, load_script

train_base = load_script(LECTURE01 / "02_train_base.py")


def test_train_base_smoke(capsys):
    result = train_base.main(["--steps", "12", "--eval-every", "6", "--probes", "5",
                              "--samples", "1", "--no-cache"])
    out = capsys.readouterr().out
    assert "观察 Observations" in out and "fact probes" in out
    evals = result["history"]["evals"]
    assert [step for step, _, _ in evals] == [0, 6, 12]
    assert evals[-1][1] < evals[0][1] < math.log2(44) + 0.2     # a few steps already help
    assert 0.0 <= result["fact_accuracy"] <= 1.0


def test_train_base_output_fits_100_columns_and_words_follow_numbers(capsys):
    from console import display_width

    result = train_base.main(["--steps", "12", "--eval-every", "12", "--probes", "20", "--no-cache"])
    out = capsys.readouterr().out
    too_wide = [line for line in out.splitlines() if display_width(line) > 100]
    assert not too_wide, too_wide
    assert f"前向精度 forward precision: {result['precision']}（auto：" in out
    share = result["real_words"] / result["sample_words"]
    assert share < train_base.SPELLING_LEARNED                  # 12 steps: no spelling yet ...
    assert "基本学会" not in out                                 # ... and the script does not claim it
    verdict = {"beyond": "超出噪声", "below": "明显不如", "within": "在噪声之内"}[result["probe_verdict"]]
    assert verdict in out.replace("\n", "").replace(" ", "")


def test_train_base_is_deterministic():
    a = train_base.main(["--steps", "5", "--eval-every", "5", "--probes", "3", "--samples", "0", "--no-cache"])
    b = train_base.main(["--steps", "5", "--eval-every", "5", "--probes", "3", "--samples", "0", "--no-cache"])
    assert a["history"]["train_bits"] == b["history"]["train_bits"]
    assert a["final_bpc"] == b["final_bpc"]


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--steps", "ten"], ["--lr", "-1"],
                                  ["--lr", "nan"], ["--eval-every", "-3"], ["--bogus"],
                                  ["--precision", "fp8"], ["--precision"]])
def test_train_base_rejects_nonsense_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_base.main(argv)
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_precision_flags_resolve_and_enter_the_cache_key():
    import tiny_gpt

    auto, _ = train_base.parse_args([])
    assert auto.precision == tiny_gpt.resolve_precision("auto") == train_base.BaseRunConfig().precision
    fp32, _ = train_base.parse_args(["--fp32"])
    bf16, _ = train_base.parse_args(["--precision", "bf16"])
    assert (fp32.precision, fp32.bf16, bf16.precision, bf16.bf16) == ("fp32", False, "bf16", True)
    assert train_base.parse_args(["--precision", "bf16", "--fp32"])[0].precision == "fp32"
    paths = {train_base.cache_path(run, tiny_gpt.BASE_CONFIG) for run in (fp32, bf16)}
    assert len(paths) == 2                                       # weights of one precision never load as the other
    with pytest.raises(ValueError):
        train_base.BaseRunConfig(precision="auto")               # the config holds the resolved precision


def test_precision_line_names_the_reason():
    for argv, expected in ((["--fp32"], "--fp32"), (["--precision", "fp32"], "--precision fp32"),
                           ([], "auto：这台 CPU ")):
        run, args = train_base.parse_args(argv)
        line = train_base.precision_line(run, args)
        assert line.startswith(f"前向精度 forward precision: {run.precision}（") and expected in line


def test_probe_noise_and_verdict():
    difference, sd = train_base.probe_noise(12, 10, 200)        # the old notes' "12 vs 10 of 200"
    assert difference == 2 and sd == pytest.approx(math.sqrt(200 * 0.055 * 0.945))
    assert train_base.probe_verdict(difference, sd) == "within"
    assert train_base.probe_verdict(*train_base.probe_noise(40, 10, 200)) == "beyond"
    assert train_base.probe_verdict(*train_base.probe_noise(0, 10, 200)) == "below"
    assert train_base.probe_verdict(*train_base.probe_noise(0, 0, 5)) == "within"   # sd 0, no difference


def test_real_words_count_complete_words_only():
    vocabulary = {"mira", "lives", "in", "oakford"}
    assert train_base.sample_words("mira lives in oakf") == ["mira", "lives", "in"]   # cut-off word dropped
    assert train_base.sample_words("mira lives.\nin") == ["mira", "lives"]
    assert train_base.real_word_count(["mira lives in oakford.", "mirra lives "], vocabulary) == (5, 6)
    assert train_base.real_word_count([], vocabulary) == (0, 0)


def test_unigram_bits():
    assert train_base.unigram_bits("abab") == pytest.approx(1.0)
    assert train_base.unigram_bits("aaaa") == 0.0
