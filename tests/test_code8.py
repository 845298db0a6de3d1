"""Code 8 (08_byzantine.py): liars in the training engine, one measured round, the words of
each observation on each of its branches, and flags (errors exit 2 in one line)."""

import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from conftest import LECTURE09, ROOT, load_script, main_quietly, shared_quick_run

code8 = load_script(LECTURE09 / "08_byzantine.py")
SCRIPT = LECTURE09 / "08_byzantine.py"


def test_names_and_defaults_agree_with_the_registries():
    from lecture09.robust import aggregators, attacks
    from lecture09.swarm import influence
    assert code8.AGGREGATOR_NAMES == tuple(aggregators.AGGREGATORS)
    assert code8.ATTACK_NAMES == tuple(attacks.ATTACKS)
    assert code8.SGD_LR == influence.SGD_LR
    from lecture09.compress.training import TrainSetup
    assert influence.SGD_LR == TrainSetup().sgd_lr and code8.DEFAULTS["cc_tau"] == TrainSetup().cc_tau


# --- the engine: liars and aggregators in training.py -----------------------------------

def small_setup(n=4, steps=3):
    from lecture09.compress.training import TrainSetup
    return replace(TrainSetup(n_workers=n).with_steps(steps), precision="fp32")


def test_mean_with_no_liar_trains_exactly_as_the_plain_engine():
    """The robust path with aggregator mean and no liar is today's mean: the same bits per
    character to the last bit (only the summation order could differ, and it does not)."""
    from lecture09.compress.training import Run, Seeds, train_simulated
    setup = small_setup()
    plain = train_simulated(Run("p", "adamw", "topk"), Seeds(), setup)
    robust = train_simulated(Run("r", "adamw", "topk", aggregator="mean", attack="none", liars=0), Seeds(), setup)
    through = train_simulated(Run("m", "adamw", "topk", aggregator="median"), Seeds(), setup)
    assert not Run("r", "adamw", "topk", aggregator="mean").robust
    assert robust.bpc == plain.bpc and robust.losses == plain.losses
    assert through.bpc != plain.bpc                     # the median of 4 sparse uploads is another step


def test_liars_replace_the_last_workers_and_uploads_are_clipped():
    from lecture09.compress.training import LyingWorkers, Run
    setup = small_setup(n=4)
    lying = LyingWorkers(Run("x", "adamw", "none", aggregator="mean", attack="gaussian", liars=1), setup)
    grads = [torch.full((10,), 0.1 * w) for w in range(4)]                 # norms below the cap
    average, wire_bytes, sent = lying.average(grads, None)
    assert all(torch.equal(sent[w], grads[w]) for w in range(3))          # honest workers unchanged
    assert not torch.equal(sent[3], grads[3])                             # the last one lies
    cap = 4 * setup.recipe.clip_norm
    clipped_liar = sent[3] * min(1.0, cap / float(sent[3].double().norm()))
    expected = (grads[0] + grads[1] + grads[2] + clipped_liar) / 4
    assert torch.allclose(average, expected, atol=1e-6) and wire_bytes == 40


def test_worker_momentum_by_hand_and_the_receiver_keeps_none():
    """m = g at a worker's first step, then m = beta m + (1 - beta) g, per worker; with it the
    honest mean goes through LyingWorkers too (so the baseline row has it) and AdamW's beta1 is 0."""
    from lecture09.compress.training import LyingWorkers, Run, Seeds, make_aggregator, make_optimizer
    from lecture01 import tiny_gpt
    setup = replace(small_setup(n=2), worker_momentum=0.5)
    honest = Run("h", "adamw", "none")
    lying = make_aggregator(honest, setup)
    assert isinstance(lying, LyingWorkers) and not honest.robust
    first = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])]
    second = [torch.tensor([3.0, 0.0]), torch.tensor([0.0, -2.0])]
    average, _, sent = lying.average(first, None)
    assert torch.equal(average, torch.tensor([0.5, 1.0]))
    average, _, sent = lying.average(second, None)
    assert torch.equal(sent[0], torch.tensor([2.0, 0.0])) and torch.equal(sent[1], torch.tensor([0.0, 0.0]))
    assert torch.equal(first[0], torch.tensor([1.0, 0.0]))          # the caller's gradients are not touched
    model = tiny_gpt.make_model(setup.model, seed=0)
    _, optimizer = make_optimizer(honest, setup, model, Seeds())
    assert optimizer.param_groups[0]["betas"][0] == 0.0
    _, optimizer = make_optimizer(honest, small_setup(n=2), model, Seeds())
    assert optimizer.param_groups[0]["betas"][0] == 0.9
    plain = make_aggregator(honest, small_setup(n=2))
    assert not isinstance(plain, LyingWorkers)


@pytest.fixture(scope="module")
def quick_run():
    """(results, output) of the quick run, shared by the tests that read it."""
    return shared_quick_run("08_byzantine.py")                 # --quick --fp32 --jobs 1: the golden's run too


@pytest.mark.slow
@pytest.mark.sweep                  # a flag's titles: a further case
def test_worker_momentum_is_named_in_the_titles_of_tables_2_and_3(quick_run):
    results, out = main_quietly(code8.main, ["--quick", "--fp32", "--jobs", "1", "--worker-momentum", "0.9"])
    assert "发 动量 momentum β = 0.9" in out and "topk 的动量（β = 0.9）" in out
    results, out = quick_run
    assert "momentum" not in out and "发 fp32" in out


# --- one measured round ------------------------------------------------------------------

@pytest.fixture(scope="module")
def study():
    from lecture09.swarm.influence import measure_round
    setup = small_setup(n=8, steps=20)
    return (measure_round(setup, scheme="topk", warm_steps=5, liars=1),
            measure_round(setup, scheme="topk", warm_steps=5, liars=1, aggregator_names=("mean",), optimizer="sgd"))


def test_the_round_has_a_cell_per_aggregator_and_attack(study):
    adamw, sgd = study
    from lecture09.robust import aggregators, attacks
    assert {(c.aggregator, c.attack) for c in adamw.cells} == {
        (a, t) for a in aggregators.AGGREGATORS for t in attacks.ATTACKS if t not in ("none", "tiny-dense-fixed")}
    assert adamw.kept["mean"] == pytest.approx(1.0)
    # the median of 8 sparse top-k uploads keeps fewer nonzero entries than their mean
    assert adamw.nonzero["median"] < adamw.nonzero["mean"] <= 8 * 0.01 + 1e-9
    # "none" as the attack is the honest round itself: zero influence (checked through the engine's pieces)
    assert adamw.unit > 0 and sgd.unit > 0


def test_the_tiny_dense_upload_is_strong_under_adamw_and_not_under_sgd_or_the_median(study):
    """The measurement of issue 23, in simulation: stated factor BOUND_UNITS (2 honest units)."""
    adamw, sgd = study
    assert adamw.cell("mean", "tiny-dense").influence > 5 * code8.BOUND_UNITS
    assert sgd.cell("mean", "tiny-dense").influence <= code8.BOUND_UNITS
    assert adamw.cell("median", "tiny-dense").influence <= code8.BOUND_UNITS
    assert adamw.cell("trimmed-mean", "tiny-dense").influence <= code8.BOUND_UNITS
    # bounding |dw| by the honest step's own size still leaves the liar more than the bound
    assert adamw.bounded["tiny-dense"] > code8.BOUND_UNITS
    assert adamw.bounded["tiny-dense"] < adamw.cell("mean", "tiny-dense").influence


# --- the observations' branches -----------------------------------------------------------

def fake_study(cells, kept=None, nonzero=None, scheme="topk", bounded=None):
    from lecture09.swarm.influence import Cell, RoundStudy
    names = list(dict.fromkeys(a for a, _, _, *_ in cells))
    return RoundStudy(n_workers=8, liars=1, scheme=scheme, n_params=100, unit=1.0, honest_step=10.0,
                      optimizer="adamw", kept=kept or {n: 1.0 for n in names}, nonzero=nonzero or {},
                      cells=tuple(Cell(a, t, v, *rest) for a, t, v, *rest in cells), bounded=bounded)


def lines_of(*studies):
    """The observations' sentences (what is printed, without the " k. " numbers)."""
    printed = []
    lines = code8.round_observations(*studies, out=printed.append)
    assert printed == [f" {k}. {line}" for k, line in enumerate(lines, 1)]
    return lines


def test_tiny_dense_observation_on_each_branch():
    control = fake_study([("mean", "tiny-dense", 1.0)])
    dense = fake_study([("mean", "tiny-dense", 1.1)], scheme="none")
    strong = lines_of(fake_study([("mean", "tiny-dense", 30.0)]), control, dense)
    assert "推动 30.0 个单位" in strong[0] and "放大它的是 AdamW" in strong[0]
    unclear = lines_of(fake_study([("mean", "tiny-dense", 30.0)]), control,
                       fake_study([("mean", "tiny-dense", 25.0)], scheme="none"))
    assert "说不清" in unclear[0] and "放大它的是" not in unclear[0]
    weak = lines_of(fake_study([("mean", "tiny-dense", 1.5)]), control, dense)
    assert "没有被放大" in weak[0]
    capped = lines_of(fake_study([("mean", "tiny-dense", 30.0)], bounded={"tiny-dense": 9.9}), control, dense)
    assert "仍然推动 9.9 个单位：只限制更新的大小，挡不住它" in capped[1]
    enough = lines_of(fake_study([("mean", "tiny-dense", 30.0)], bounded={"tiny-dense": 1.5}), control, dense)
    assert "限制更新的大小就够了" in enough[1]
    assert not any("|Δw|" in line for line in weak)                  # nothing to bound: no line


def test_a_bound_with_top_k_uploads_is_compared_with_the_same_round_with_dense_uploads():
    topk = fake_study([("mean", "sign-flip", 2.0), ("median", "sign-flip", 0.4), ("trimmed-mean", "sign-flip", 0.7),
                       ("mean", "alie", 1.3), ("median", "alie", 0.6), ("trimmed-mean", "alie", 1.7)])
    dense = fake_study([("mean", "sign-flip", 2.06), ("median", "sign-flip", 2.49), ("trimmed-mean", "sign-flip", 1.9),
                        ("mean", "alie", 1.9), ("median", "alie", 1.5), ("trimmed-mean", "alie", 2.2)], scheme="none")
    lines = code8.format_observations(topk, dense)
    assert lines == [
        "同一轮、同一个说谎者，只把诚实的上传从 topk 换成稠密的 fp32（表 (2) 发的格式），这些 2 个单位以内的界就没了："
        "sign-flip：median 0.40 → 2.49（mean 2.06）；alie：trimmed-mean 1.70 → 2.20（mean 1.90）。"
        "它们属于诚实的发 topk 的一轮，不能搬到表 (2)。"]
    assert all(line in lines_of(topk, topk, dense) for line in lines)
    assert code8.format_observations(topk, topk) == []                   # the same bounds: nothing to say
    # compared as printed: 2.004 prints 2.00, within the bound of 2
    edge = fake_study([("mean", "sign-flip", 2.0), ("median", "sign-flip", 2.004)], scheme="none")
    assert code8.format_observations(fake_study([("mean", "sign-flip", 2.0), ("median", "sign-flip", 0.4)]), edge) == []
    # an aggregator the dense round did not measure is left out, not looked up
    assert code8.format_observations(topk, fake_study([("mean", "sign-flip", 2.0)], scheme="none")) == []


def test_bounded_lists_follow_the_threshold_and_krum_picks_are_named():
    cells = [("mean", "alie", 3.0), ("median", "alie", 2.0), ("krum", "alie", 2.5, True),
             ("mean", "ipm", 1.0), ("median", "ipm", 1.0), ("krum", "ipm", 0.0, False)]
    lines = lines_of(fake_study(cells), fake_study([("mean", "alie", 1.0)]), fake_study([("mean", "alie", 1.0)]))
    alie = next(line for line in lines if line.startswith("alie"))
    assert "median 把说谎者的推动压在 2 个单位以内" in alie and "mean 3.0、krum 2.5" in alie
    assert not any(line.startswith("ipm") for line in lines)       # every aggregator bounds it: nothing to say
    assert any("krum（alie）" in line for line in lines)
    nobody = lines_of(fake_study([("mean", "alie", 3.0), ("median", "alie", 4.0)]),
                      fake_study([("mean", "alie", 1.0)]), fake_study([("mean", "alie", 1.0)]))
    assert any("没有一个聚合器" in line for line in nobody)


def test_training_observations_follow_the_verdicts():
    from lecture09.compress.training import Run, Seeds, RunResult

    def entry(deltas):
        results = tuple(RunResult(Run("x", "adamw", "none"), Seeds(k), 2.0 + d, 4.0, 0.0, False, 3, 0.0)
                        for k, d in enumerate(deltas))
        return results, tuple(deltas)

    table = {("mean", "none"): entry([0, 0]), ("median", "none"): entry([0.05, 0.04]),
             ("mean", "alie"): entry([0.2, 0.3]), ("median", "alie"): entry([0.05, 0.06]),
             ("krum", "alie"): entry([0.25, 0.1])}
    settings = code8.parse_args(["--quick"])
    out = code8.training_observations(table, {}, settings, out=lambda line: None)
    assert "median 变差（Δ +0.045）" in out[0]
    assert "alie：平均变差（Δ +0.250）；比平均好的：median" in out[1]       # krum better on one seed only
    compressed = {("mean", "none"): entry([0, 0]), ("mean", "tiny-dense"): entry([0.02, 0.03]),
                  ("mean", "tiny-dense-fixed"): entry([0.1, 0.15])}
    out = code8.training_observations(table, compressed, settings, out=lambda line: None)
    assert "差得更多（两者之差 +0.100）：各轮的推动方向一致时会积累起来" in out[-1]
    compressed[("mean", "tiny-dense-fixed")] = entry([0.025, 0.028])
    out = code8.training_observations(table, compressed, settings, out=lambda line: None)
    assert "和随机符号差不多" in out[-1] and "积累" not in out[-1]
    # table (3) with the honest mean alone (--compressed-aggregators mean --compressed-attacks none)
    out = code8.training_observations(table, {("mean", "none"): entry([0])}, settings, out=lambda line: None)
    assert out[-1] == "工作者发 topk 时（表 (3)）：只有诚实平均这一格，没有可比的（再给 --compressed-aggregators 或 " \
                      "--compressed-attacks）。"
    assert not any("：。" in line for line in out)


def test_the_median_line_says_what_n_needs():
    from lecture09.swarm.influence import RoundStudy
    for n, says in [(8, "8 个工作者里要有至少一半（4 个）"), (7, "7 个工作者里要有过半数（4 个）")]:
        study = RoundStudy(n_workers=n, liars=1, scheme="topk", n_params=10, unit=1.0, honest_step=1.0,
                           optimizer="adamw", kept={"mean": 1.0, "median": 1.0}, nonzero={"mean": 0.04, "median": 0.002},
                           cells=(), bounded={})
        lines = code8.round_observations(study, study, study, out=lambda line: None)
        assert any(says in line for line in lines), lines


# --- the script ---------------------------------------------------------------------------

def test_quick_run_prints_every_table_within_100_columns(quick_run):
    from lecture01.console import display_width
    results, out = quick_run
    assert "表 (1)" in out and "表 (2)" in out and "表 (3)" in out
    assert all(display_width(line) <= 100 for line in out.splitlines())
    assert set(results["table"]) == {(a, t) for a in ("mean", "median", "trimmed-mean") for t in ("none", "alie")}


@pytest.mark.parametrize("argv, says", [
    (["--workers", "8", "--liars", "4"], "f < n/2"),
    (["--workers", "4", "--aggregators", "krum"], "krum needs more than 2f + 2 = 4"),
    (["--workers", "8", "--liars", "2", "--bucket", "2", "--aggregators", "trimmed-mean"], "trimmed-mean needs"),
    (["--attacks", "bribe"], "invalid choice"),
    (["--worker-momentum", "1"], "--worker-momentum"),
])
def test_settings_that_cannot_run_are_one_line_and_status_2(argv, says):
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True,
                          cwd=str(ROOT.parent), timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
