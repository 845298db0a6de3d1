"""Lecture 9 code 2: every data-parallel variant on 2 real gloo ranks equals the single-
process full-batch reference (and gradient accumulation), bytes by hand, buckets, bad
flags exit 2, a crashed rank is reported, a --quick smoke run of 02_data_parallel.py."""

import signal
import subprocess
import sys
import time

import pytest
import torch

from lecture09.parallel import data_parallel as D
from lecture09.ranks import gloo_ranks
from lecture01 import tiny_gpt
from conftest import LECTURE09, load_script, shared_quick_run

N_PARAMS = 83_468      # lecture 1's BASE_CONFIG, counted by hand in tests/test_tiny_gpt.py's terms:
# tok_emb 44·96 = 4,224; ln1, ln2, ln_f 3 · 2·96 = 576; qkv 96·288 + 288 = 27,936; proj 96·96 + 96 = 9,312;
# mlp 96·192 + 192 = 18,624 and 192·96 + 96 = 18,528; head 96·44 + 44 = 4,268


@pytest.fixture(scope="module")
def script():
    return load_script(LECTURE09 / "02_data_parallel.py")


@pytest.fixture(scope="module")
def quick_run(script):
    return shared_quick_run("02_data_parallel.py")            # the golden output's run too


def test_parameter_count_by_hand():
    assert 4224 + 576 + 27936 + 9312 + 18624 + 18528 + 4268 == N_PARAMS == D.n_params()
    assert D.n_tensors() == 17


def test_every_variant_equals_the_full_batch_reference_on_two_ranks(quick_run, script):
    results, _ = quick_run
    diffs = results["demo1"]["diffs"]
    assert set(diffs) == {"accumulation", "naive", "flat", "bucketed", "ddp"}
    for name, (grad_diff, weight_diff, ok) in diffs.items():
        assert ok, name
        assert grad_diff <= script.GRAD_ATOL and weight_diff <= script.WEIGHT_ATOL, name
    assert results["demo1"]["ranks_agree"] and results["demo1"]["same_losses"]


def test_calls_and_bytes_by_hand(quick_run):
    results, text = quick_run
    assert results["demo1"]["calls"] == {"naive": 17, "flat": 1, "bucketed": 4, "ddp": None}
    hooks = results["demo2"]
    assert hooks["none"]["bytes"] == 4 * N_PARAMS == 333_872          # fp32: 4 bytes per gradient element
    assert hooks["fp16"]["bytes"] == 2 * N_PARAMS == 166_936
    # PowerSGD rank 2: every weight matrix (rows = first dim) sends (rows + cols)·2 floats, vectors go as they are:
    # tok_emb 44x96, qkv 288x96, proj 96x96, mlp 192x96 and 96x192, head 44x96 → (140 + 384 + 192 + 288 + 288 + 140)·2
    vectors = 576 + 288 + 96 + 192 + 96 + 44                           # LayerNorms and biases
    assert hooks["powersgd"]["bytes"] == 4 * ((140 + 384 + 192 + 288 + 288 + 140) * 2 + vectors) == 16_624
    assert D.powersgd_elements(2) == ((140 + 384 + 192 + 288 + 288 + 140) * 2, vectors, 6, 11)
    assert "333,872" in text and "16,624" in text


def test_buckets_cover_every_parameter_once_in_reverse_order():
    model = tiny_gpt.make_model()
    params = list(model.parameters())
    buckets = D.make_buckets(params, 64 * 1024)
    flat = [p for bucket in buckets for p in bucket]
    assert [id(p) for p in flat] == [id(p) for p in reversed(params)]
    assert all(sum(p.numel() * 4 for p in b) >= 64 * 1024 for b in buckets[:-1])
    assert len(buckets) == 4
    assert len(D.make_buckets(params, 1)) == 17 and len(D.make_buckets(params, 10**9)) == 1


def test_gradient_accumulation_equals_the_full_batch_in_one_process():
    setup = D.DPSetup(steps=1, batch_size=8)
    tokens = torch.arange(2000) % 44
    full, _, full_loss = D.reference_run(setup, tokens)
    accumulated, _, acc_loss = D.reference_run(setup, tokens, micro_batches=4)
    for g, h in zip(full, accumulated):
        assert torch.allclose(g, h, atol=1e-6, rtol=1e-5)          # same terms, another summation order
    assert acc_loss[0] == pytest.approx(full_loss[0], rel=1e-6)
    with pytest.raises(ValueError):
        D.reference_run(setup, tokens, micro_batches=3)


def test_quick_output_fits_100_columns(quick_run):
    from lecture01.console import display_width
    _, text = quick_run
    assert "演示 1" in text and "演示 2" in text
    assert all(display_width(line) <= 100 for line in text.splitlines())


def test_a_crashed_rank_is_reported_and_leaves_nothing():
    import multiprocessing
    job = D.DPJob(D.DPSetup(steps=1, fail_rank=1), variants=("flat",))
    started = time.monotonic()
    with pytest.raises(gloo_ranks.RankFailed) as info:
        gloo_ranks.run_ranks(D.dp_worker, 2, args=(job,), timeout_s=60)
    assert info.value.rank == 1 and "fails on purpose" in str(info.value)
    assert time.monotonic() - started < 45          # reported, not waited out to the timeout
    assert not multiprocessing.active_children()


@pytest.mark.parametrize("flags", [["--world-size", "0"], ["--world-size", "3"], ["--batch-size", "30", "--world-size", "4"],
                                   ["--steps", "9"], ["--hook-steps", "2"], ["--port", "70000"]])
def test_bad_flags_exit_2_with_one_line(script, flags, capsys):
    with pytest.raises(SystemExit) as info:
        script.parse_args(flags)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("usage:") or "error:" in err[-1]
    assert "Traceback" not in "\n".join(err)


def test_busy_port_exits_2_without_traceback():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = subprocess.run([sys.executable, str(LECTURE09 / "02_data_parallel.py"), "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"--port {port}" in done.stderr and "Traceback" not in done.stderr


def test_ctrl_c_stops_every_process_with_one_line():
    """SIGINT while the gloo processes run: one line on stderr, status 130, no process left."""
    proc = subprocess.Popen([sys.executable, str(LECTURE09 / "02_data_parallel.py"), "--demo", "2", "--hook-steps", "500"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    line = ""
    while "启动" not in line:                        # the processes are being started
        line = proc.stderr.readline()
        assert line, "the script ended before starting its processes"
    time.sleep(2)
    listed = subprocess.run(["pgrep", "-a", "-P", str(proc.pid)], capture_output=True, text=True).stdout
    ranks = [line.split()[0] for line in listed.splitlines() if "spawn_main" in line]
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 130
    assert "已中断 interrupted (Ctrl-C)" in err and "Traceback" not in err
    assert len(ranks) == 2                           # there were two rank processes to stop ...
    for pid in ranks:                                # ... and neither is left (the script reaped them)
        assert subprocess.run(["kill", "-0", pid], capture_output=True).returncode != 0


def test_loss_sentence_says_identical_only_when_bit_identical():
    code2 = load_script(LECTURE09 / "02_data_parallel.py")
    same = {"flat": {"losses": [3.9, 3.1]}, "ddp": {"losses": [3.9, 3.1]}}
    assert "逐位相同" in code2.loss_sentence(same, [3.9, 3.1], [3.9, 3.1])
    apart = {"flat": {"losses": [3.9, 3.1]}, "ddp": {"losses": [3.9 + 2e-7, 3.1]}}
    text = code2.loss_sentence(apart, [3.9, 3.1], [3.9, 3.1])
    assert "只在舍入上不同" in text and "2.0e-07" in text and "逐位相同" not in text


def test_one_bucket_is_not_said_to_overlap(capsys):
    """--bucket-kb larger than the gradient: one bucket, sent after backward (issue 21, 3)."""
    code2 = load_script(LECTURE09 / "02_data_parallel.py")
    code2.main(["--demo", "1", "--quick", "--bucket-kb", "1024"])
    out = capsys.readouterr().out.replace("\n", "").replace(" ", "")
    assert "只有1个桶" in out
    assert "在反向计算的同时进行" not in out and "藏到了反向计算后面" not in out


def test_a_forgotten_one_over_w_hides_from_the_weight_check_not_from_the_gradient_check():
    """The control for §2.2 (issue 20, 2): 'forgetting 1/W' at W = 2 is the loss doubled.
    AdamW divides by sqrt(v) and global clipping rescales, so both ignore the gradient's
    scale: the weights stay within code 2's weight tolerance after 1 and 5 steps, while the
    gradients differ by 2x, far beyond the gradient tolerance. Only the gradient check catches it."""
    import torch
    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG
    code2 = load_script(LECTURE09 / "02_data_parallel.py")
    train, _ = tiny_gpt.load_world_tokens(0)
    recipe = tiny_gpt.TrainConfig()

    def weights_and_first_grad(scale, steps):
        model = tiny_gpt.make_model(MODEL_CONFIG, seed=0)
        optimizer = tiny_gpt.make_adamw(model, recipe)
        gen = torch.Generator().manual_seed(1)
        first = None
        for step in range(steps):
            x, y = tiny_gpt.get_batch(train, recipe.batch_size, MODEL_CONFIG.block_size, gen)
            optimizer.zero_grad(set_to_none=True)
            (scale * tiny_gpt.lm_loss(model, x, y)).backward()
            if first is None:
                first = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip_norm)
            for group in optimizer.param_groups:
                group["lr"] = tiny_gpt.lr_at(step, steps, recipe.peak_lr)
            optimizer.step()
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), first

    for steps in (1, 5):
        (w1, g1), (w2, g2) = weights_and_first_grad(1.0, steps), weights_and_first_grad(2.0, steps)
        assert float((w1 - w2).abs().max()) < code2.WEIGHT_ATOL           # the weight check would pass it
        assert float((g1 - g2).abs().max()) > 100 * code2.GRAD_ATOL        # the gradient check does not


def _demo1_results(world_diff, bucketed_after=0.1):
    diffs = {"accumulation": (world_diff, 0.0, True), "flat": (0.0, world_diff, True)}
    timing = {"flat": {"after": 0.4}, "bucketed": {"after": bucketed_after}, "ddp": {"after": 0.0}}
    return {"demo1": {"diffs": diffs, "n_params": 1000, "calls": {"naive": 17, "flat": 1, "bucketed": 4},
                      "timing": timing}}


def test_observation_1_prints_the_measured_difference_and_zero_as_zero():
    code2 = load_script(LECTURE09 / "02_data_parallel.py")
    assert "0（只有 1 个进程" in code2.difference_sentence({"a": (0.0, 0.0, True)}, 1)
    assert "没有带来差别" in code2.difference_sentence({"a": (0.0, 0.0, True)}, 2)
    text = code2.difference_sentence({"a": (3e-7, 1.2e-6, True), "b": (0.0, 0.0, True)}, 2)
    assert "梯度最大差 3.0e-07" in text and "权重最大差 1.2e-06" in text and "1e-7" not in text


def test_one_process_is_not_said_to_send_or_overlap_anything():
    """--world-size 1 (the sweep's minimum): no bytes move, so no overlap is claimed."""
    code2 = load_script(LECTURE09 / "02_data_parallel.py")
    lines = []
    code2.observations(code2.Setup(world_size=1), _demo1_results(0.0), out=lines.append)
    text = "".join(lines)
    assert "= 0 字节" in text and "什么也不传" in text and "没有数据在走" in text
    assert "藏到了反向计算后面" not in text and "差为 0" in text
    lines = []
    code2.observations(code2.Setup(world_size=2), _demo1_results(1e-6), out=lines.append)
    text = "".join(lines)
    assert "藏到了反向计算后面" in text and "什么也不传" not in text and "权重最大差 1.0e-06" in text
    lines = []
    code2.observations(code2.Setup(world_size=2), _demo1_results(1e-6, bucketed_after=0.9), out=lines.append)
    assert "没有少等" in "".join(lines)


def test_a_powersgd_rank_too_large_to_save_is_said_to_send_everything():
    """--powersgd-rank 96: torch's hook compresses no matrix ((m + k)·r·2 >= m·k), so the
    observation must not say it sends only P and Q."""
    code2 = load_script(LECTURE09 / "02_data_parallel.py")
    def figures(psgd_bytes):
        return {"demo2": {"none": {"bytes": 400, "bpc": 4.0}, "fp16": {"bytes": 200, "bpc": 4.0},
                          "powersgd": {"bytes": psgd_bytes, "bpc": 4.1}}}
    for rank, psgd_bytes, said, unsaid in ((96, 400, "一个矩阵也没压", "只发每个矩阵"), (2, 100, "少 4.0 倍", "没压")):
        lines = []
        code2.observations(code2.Setup(powersgd_rank=rank), figures(psgd_bytes), out=lines.append)
        text = "".join(lines)
        assert said in text and unsaid not in text
