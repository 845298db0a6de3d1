"""Lecture 9 code 5: the simulated data-parallel step, a quick smoke run, flag checking."""

import pytest
import torch

import tiny_gpt
from conftest import LECTURE09, load_script

code5 = load_script(LECTURE09 / "05_decentralized.py")


def _grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def test_four_uncompressed_workers_equal_one_process():
    """Reference: averaging four workers' gradients (8 sequences each) gives the gradient of
    the whole batch of 32 computed in one process."""
    data = torch.randint(0, 44, (5000,), generator=torch.Generator().manual_seed(0))
    x, y = tiny_gpt.get_batch(data, 32, 96, torch.Generator().manual_seed(1))
    single = tiny_gpt.make_model(tiny_gpt.BASE_CONFIG, seed=0)
    tiny_gpt.plain_backward(bf16=False)(single, x, y)
    workers = tiny_gpt.make_model(tiny_gpt.BASE_CONFIG, seed=0)
    stats = {"wire_bytes": 0, "zeros": 0, "entries": 0}
    code5.compressed_backward(4, "none", False, 0.01, stats, bf16=False)(workers, x, y)
    assert torch.allclose(_grads(single), _grads(workers), atol=1e-6, rtol=1e-4)
    assert stats["wire_bytes"] == 4 * workers.n_params()


def test_topk_workers_send_only_their_largest_entries():
    data = torch.randint(0, 44, (5000,), generator=torch.Generator().manual_seed(0))
    x, y = tiny_gpt.get_batch(data, 8, 96, torch.Generator().manual_seed(1))
    model = tiny_gpt.make_model(tiny_gpt.BASE_CONFIG, seed=0)
    stats = {"wire_bytes": 0, "zeros": 0, "entries": 0}
    code5.compressed_backward(2, "topk", False, 0.01, stats)(model, x, y)
    n = model.n_params()
    k = int(0.01 * n)
    assert stats["wire_bytes"] == 8 * k
    assert int((_grads(model) != 0).sum()) <= 2 * k   # the average of two sparse vectors


def test_quick_run_of_both_demos(capsys):
    results = code5.main(["--quick", "--jobs", "1"])
    out = capsys.readouterr().out
    assert "演示 1" in out and "演示 2" in out and out.count("观察 Observations") == 2
    d1 = results["demo1"]
    opt = d1["optimum"]
    assert opt.exact
    heuristics = [c for _, c in d1["rows"] if c is not None]
    assert all(opt.cost <= c + 1e-9 for c in heuristics)     # nothing beats the proven optimum
    assert len(d1["random_costs"]) == code5.QUICK_SCHEDULE["n_random"]
    rows_a = results["demo2"]["a"]
    assert [r["label"] for r in rows_a] == [r.label for r in code5.TABLE_A]
    assert rows_a[1]["bytes_per_element"] == 2.0                # fp16
    assert all(r["bpc"] < 5.0 for r in rows_a)                  # 12 steps already beat uniform guessing


def test_control_run_adds_a_row_and_measures_noise(capsys):
    results = code5.main(["--quick", "--jobs", "1", "--demo", "2", "--control"])
    assert results["demo2"]["a"][-1]["label"] == code5.CONTROL_RUN.label
    assert "只换数据顺序" in capsys.readouterr().out


def test_quick_run_is_deterministic(capsys):
    code5.main(["--quick", "--jobs", "1", "--demo", "1"])
    first = capsys.readouterr().out
    code5.main(["--quick", "--jobs", "1", "--demo", "1"])
    assert capsys.readouterr().out == first


def test_measured_network_preset_runs(capsys):
    results = code5.main(["--quick", "--demo", "1", "--network", "aws-world"])
    assert "aws-world" in capsys.readouterr().out
    assert results["demo1"]["hand"]["dp_groups_in_regions"] is None   # 8 cities of 4 cannot hold a DP group of 8


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--topk-ratio", "0"], ["--topk-ratio", "1.5"],
                                  ["--inter-gbps", "2", "1"], ["--inter-gbps", "-1", "1"], ["--demo", "3"],
                                  ["--network", "mars"], ["--jobs", "0"], ["--seed", "x"],
                                  ["--inter-latency-ms", "5", "nan"], ["--genetic-budget", "10"]])
def test_nonsense_flags_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        code5.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


def test_results_do_not_depend_on_how_many_processes_train():
    """Demo 2 in one process and in two worker processes prints the same tables."""
    from conftest import run_script
    one = run_script(LECTURE09 / "05_decentralized.py", "--quick", "--demo", "2", "--jobs", "1")
    two = run_script(LECTURE09 / "05_decentralized.py", "--quick", "--demo", "2", "--jobs", "2")
    assert one == two
    assert "演示 2" in one
