"""Code 5, demo 2: the observations' words follow from the run's own numbers under the flag
values the exercises ask for (quick versions: 12 steps), never from what the defaults give."""

import re

import pytest

from conftest import LECTURE09, SWEEP_TIER, load_script

code5 = load_script(LECTURE09 / "05_decentralized.py")
TOL = code5.compressed_dp.DELTA_TOLERANCE_BPC


def _flat(text):
    return re.sub(r"\s+", "", text)


def _expected_help_words(gain):
    if gain > TOL:
        return "有帮助"
    if gain < -TOL:
        return "反而有害"
    return "几乎没有影响"


@pytest.mark.parametrize("argv", [[], *(pytest.param(a, marks=SWEEP_TIER) for a in (
    ["--topk-ratio", "0.1"], ["--topk-ratio", "0.001"], ["--sgd-momentum", "0.9", "--sgd-lr", "0.1"]))])
def test_error_feedback_words_follow_the_numbers(argv, capsys):
    rows = code5.main(["--quick", "--demo", "2", "--jobs", "1", *argv])["demo2"]
    out = _flat(capsys.readouterr().out)
    for optimizer, name in (("adamw", "AdamW"), ("sgd", "SGD")):
        plain, with_ef = rows[(optimizer, "topk", False)], rows[(optimizer, "topk", True)]
        gain = plain.bpc.mean - with_ef.bpc.mean
        assert _flat(f"对 {name} {_expected_help_words(gain)}") in out, (argv, name, gain)
    # observation 4 says what error feedback did to SGD here, never a fixed sentence
    gain_sgd = rows[("sgd", "topk", False)].bpc.mean - rows[("sgd", "topk", True)].bpc.mean
    assert _flat("误差反馈帮了" if gain_sgd > TOL else "误差反馈没有帮") in out, (argv, gain_sgd)
    assert _flat("误差反馈对 SGD 这类线性的优化器有效") not in out
    for key, label in ((("adamw", "fp16", False), "fp16：通信量减半，"), (("adamw", "int8", False), "通信量1/4，")):
        delta = rows[key].deltas[0]
        word = "和不压缩差不多" if abs(delta) <= TOL else ("比不压缩差" if delta > 0 else "比不压缩好")
        assert _flat(label + word) in out, (argv, key, delta)


class _Setup:
    def __init__(self, momentum):
        self.sgd_lr, self.sgd_momentum = 0.3, momentum


@pytest.mark.parametrize("adam, sgd, momentum, words", [
    ([-0.1], [0.3], 0.0, "和 1-bit Adam（Tang et al. 2021）的出发点一致：误差反馈帮了普通 SGD"),
    ([0.2, 0.1], [0.3, 0.4], 0.0, "误差反馈帮了普通 SGD（lr 0.3，不带动量），也帮了 AdamW"),
    ([0.2], [-0.3], 0.9, "没有帮带动量的 SGD（lr 0.3，动量 momentum 0.9）。一个假设"),
    ([0.2], [0.0], 0.0, "没有帮普通 SGD（lr 0.3，不带动量），和 1-bit Adam"),
    ([0.2, 0.2], [0.3, -0.3], 0.0, "没有帮普通 SGD"),  # seeds disagree: not claimed as help
])
def test_observation_4_branches(adam, sgd, momentum, words):
    """Hand-made gains (bits per char without minus with EF, per seed) reach each branch."""
    said = code5_report().error_feedback_and_the_optimizer(adam, sgd, _Setup(momentum))
    assert words in said
    assert ("误差反馈帮了" in said) == all(g > TOL for g in sgd)


def code5_report():
    from lecture09.compress import demo2_report
    return demo2_report


class _Recipe:
    clip_norm = 1.0


class _AdamSetup:
    recipe = _Recipe()


class _NoClipRecipe:
    clip_norm = 0


class _NoClipSetup:
    recipe = _NoClipRecipe()


@pytest.mark.parametrize("sign_gains, said", [
    ([-0.5], True), ([-0.51, -0.46], True),    # error feedback hurt sign on every seed: the hypothesis
    ([0.2], False), ([0.004], False),          # it helped, or did nothing: no reason to explain
    ([-0.5, 0.2], False),                      # seeds disagree: nothing to explain either
])
def test_the_sign_mechanism_is_said_as_a_hypothesis_and_only_when_error_feedback_hurt(sign_gains, said):
    """Observation 3's mechanism: no run separates its two causes, so it is printed as a
    hypothesis with the exercise that would, and only on the branch it would explain."""
    text = code5_report().sign_error_feedback_hypothesis(sign_gains, _AdamSetup())
    assert bool(text) == said
    if said:
        assert text.startswith("可能的原因（假设 hypothesis") and "练习 9" in text and "范数压到 1）" in text


def test_without_clipping_the_hypothesis_names_only_the_cause_left():
    """Exercise 9 (a) sets clip_norm 0: no line may speak of a clipping that did not happen."""
    text = code5_report().sign_error_feedback_hypothesis([-0.4], _NoClipSetup())
    assert "没有裁剪" in text and "范数压到" not in text and "练习 9 (b)" in text
    assert code5_report().sign_error_feedback_hypothesis([0.1], _NoClipSetup()) == ""
