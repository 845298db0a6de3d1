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


def test_train_base_is_deterministic():
    a = train_base.main(["--steps", "5", "--eval-every", "5", "--probes", "3", "--samples", "0", "--no-cache"])
    b = train_base.main(["--steps", "5", "--eval-every", "5", "--probes", "3", "--samples", "0", "--no-cache"])
    assert a["history"]["train_bits"] == b["history"]["train_bits"]
    assert a["final_bpc"] == b["final_bpc"]


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--steps", "ten"], ["--lr", "-1"],
                                  ["--lr", "nan"], ["--eval-every", "-3"], ["--bogus"]])
def test_train_base_rejects_nonsense_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_base.main(argv)
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err
