"""Claims tests for code 8 (08_byzantine.py) and notes §8, row by row: each sentence of
the section that states a figure or a comparison is checked on the default run (about a
minute on 2 cores), in the precision `auto` picks and with a stated tolerance."""

import re

import pytest

from conftest import LECTURE09, ROOT, load_script, main_quietly, notes_section, other_precision
from notes_book import LECTURE09_BOOK

pytestmark = [pytest.mark.slow, pytest.mark.claims]

code8 = load_script(LECTURE09 / "08_byzantine.py")
NOTES = LECTURE09_BOOK
B = code8.BOUND_UNITS


@pytest.fixture(scope="module")
def default_run():
    return main_quietly(code8.main, [])[0]


@pytest.fixture(scope="module")
def section():
    return notes_section(NOTES, "## 8 ")


def test_the_tiny_dense_upload_and_its_two_controls(default_run, section):
    study, control, dense = default_run["study"], default_run["control"], default_run["dense"]
    adam = study.cell("mean", "tiny-dense").influence
    assert 22 <= adam <= 45                                         # "约 32 个单位"
    assert control.cell("mean", "tiny-dense").influence <= 1.5       # "只剩约 1 个单位"
    assert dense.cell("mean", "tiny-dense").influence <= 1.5
    assert "约 32 个单位" in section and "只剩约 1 个单位" in section


def test_what_bounds_what_in_one_round(default_run, section):
    study = default_run["study"]
    attacks = {c.attack for c in study.cells}
    assert all(study.cell("median", a).influence <= 1.0 for a in attacks)          # "都压在 1 个单位以内"
    assert all(study.cell("trimmed-mean", a).influence <= 2.5 for a in attacks)    # "在 2 个单位上下"
    for name in ("krum", "multi-krum", "centered-clip"):             # they let tiny-dense through
        assert study.cell(name, "tiny-dense").influence > 5 * B, name
    assert study.cell("krum", "tiny-dense").picked_liar and study.cell("multi-krum", "tiny-dense").picked_liar
    assert 6 <= study.bounded["tiny-dense"] <= 18                    # "|Δw| 封顶 ... 约 12 个单位"
    assert 0.03 <= study.nonzero["mean"] <= 0.06 and study.nonzero["median"] <= 0.005   # 约 4% / 0.3%
    assert "六种攻击都压在 1 个单位以内" in section and "约 12 个单位" in section


def _dense_control_claims(study, dense):
    """§8.2's last bullets: the bounds of median and trimmed mean on sign-flip belong to the
    top-k round (with dense uploads, the setting of table (2), they push as much as the mean);
    centered clipping lets gaussian through with top-k uploads although it clips it, and not
    once the honest workers fill v themselves."""
    for name in ("median", "trimmed-mean"):
        assert study.cell(name, "sign-flip").influence <= 1.0, name                 # 0.40, 0.70
        assert dense.cell(name, "sign-flip").influence > 2 * study.cell(name, "sign-flip").influence, name
        assert dense.cell(name, "sign-flip").influence >= 0.9 * dense.cell("mean", "sign-flip").influence, name
    assert study.cell("centered-clip", "gaussian").influence > 5 * B                # "约 32 个单位"
    assert study.cell("centered-clip", "tiny-dense").influence > 5 * B
    assert dense.cell("centered-clip", "tiny-dense").influence <= 1.5              # "约 1 个单位"
    assert dense.cell("centered-clip", "gaussian").influence <= 2.5                # "约 2 个"


def test_a_bound_of_the_top_k_round_and_its_dense_control(default_run, section):
    _dense_control_claims(default_run["study"], default_run["dense"])
    assert "这些界只属于诚实的发 top-k 的一轮" in section and "和裁不裁剪无关" in section
    assert "“保留”是没人说谎时这个聚合器走的一步和平均走的一步之间的余弦" in section


@pytest.mark.parametrize("precision, seeds", [("other", (0, 1)), ("auto", (1, 2))])
def test_the_dense_control_holds_in_the_other_precision_and_a_second_seed(precision, seeds):
    from dataclasses import replace
    from lecture09.compress.training import Seeds
    from lecture09.swarm.influence import measure_round
    settings = code8.parse_args([] if precision == "auto" else ["--precision", other_precision()])
    names = ("mean", "median", "trimmed-mean", "centered-clip")
    rounds = [measure_round(replace(settings.train), scheme=scheme, warm_steps=settings.warm_steps, liars=1,
                            aggregator_names=names, attack_names=("sign-flip", "tiny-dense", "gaussian"),
                            seeds=Seeds(*seeds)) for scheme in ("topk", "none")]
    _dense_control_claims(*rounds)


def deltas(table, key):
    return table[key][1]


def test_training_costs_and_attacks(default_run, section):
    table, topk = default_run["table"], default_run["compressed"]
    tol = 0.01
    for name in ("median", "trimmed-mean", "krum", "centered-clip"):          # every one costs something
        assert all(d > 0 for d in deltas(table, (name, "none"))), name
    assert all(d > tol for d in deltas(table, ("krum", "none")))
    assert all(d > tol for d in deltas(table, ("mean", "sign-flip")))
    assert all(d > tol for d in deltas(table, ("mean", "alie")))
    for attack in ("sign-flip", "alie"):                                    # "没有一个 ... 都比平均好"
        for name in ("median", "trimmed-mean", "krum", "centered-clip"):
            better = [a - b < -tol for a, b in zip(deltas(table, (name, attack)), deltas(table, ("mean", attack)))]
            assert not all(better), (name, attack)
    assert all(d > 0.3 for d in deltas(topk, ("median", "none")))          # median on top-k: +0.49..+0.51
    assert all(d > 0.1 for d in deltas(topk, ("trimmed-mean", "none")))    # +0.19..+0.20
    assert all(0 < d < 0.1 for d in deltas(topk, ("mean", "tiny-dense")))  # "训练只差 +0.02..+0.04"
    assert re.search(r"没有一个稳健聚合器在每组种子上都比平均好", section)
    # "平均受的伤是 trimmed-mean 自己代价的约 7 倍": not a cost as large as the damage
    mean_of = (lambda key: sum(deltas(table, key)) / len(deltas(table, key)))
    assert mean_of(("mean", "sign-flip")) > 3 * mean_of(("trimmed-mean", "none"))
    assert "约 7 倍" in section and "自己付的代价\n差不多大" not in section


def test_worker_momentum_rows(section):
    """The worker-momentum paragraph: centered clipping stops costing anything when nobody
    attacks, while the honest mean itself gets worse with fp32 uploads and better with top-k
    (paired over the same 3 seeds, in the precision auto picks)."""
    from dataclasses import replace
    from lecture09.compress.training import Run, train_simulated
    argv = ["--worker-momentum", "0.9", "--aggregators", "mean", "centered-clip", "--attacks", "none",
            "--compressed-aggregators", "mean", "--compressed-attacks", "none", "--seeds", "3"]
    results = main_quietly(code8.main, argv)[0]
    assert all(-0.05 <= d <= 0.01 for d in deltas(results["table"], ("centered-clip", "none")))   # −0.03..0.00
    settings = code8.parse_args(argv)
    seeds = [settings.seeds.shifted(k) for k in range(3)]
    for scheme, low, high in (("none", 0.03, 0.25), ("topk", -0.12, -0.01)):   # +0.07..+0.17, −0.07..−0.03
        gradients = replace(settings.train, worker_momentum=0.0)
        for s in seeds:
            paired = (train_simulated(Run("m", "adamw", scheme), s, settings.train).bpc
                      - train_simulated(Run("m", "adamw", scheme), s, gradients).bpc)
            assert low <= paired <= high, (scheme, s, paired)
    assert "−0.03..0.00" in section and "+0.07..+0.17" in section
