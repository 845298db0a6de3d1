"""Bad input, swept: for every script, the values --help says it refuses (each bound of each
flag, a bad choice, flags that contradict each other) are refused the way the course promises
(issue 43, items 7 and 8): exit status 2, nothing on stdout, one line on stderr within 100
display columns (a Chinese character counts two, lecture01.console.display_width), no
traceback, and the refusal comes before torch (or hivemind, torchft) is imported, as --help
does: a student waits no 15 s to learn a flag was wrong.

Each script's cases run in one process (tests/refusal_runner.py, as `python3 script.py ...`
through run_main); whether torch was imported is read from that process's sys.modules after
each case, not from a timing.
"""

import json
import subprocess
import sys
from functools import lru_cache

import pytest

from conftest import LECTURE01, LECTURE09, ROOT

MISSING = "/no/such/folder/for/the/refusal/test"

REFUSALS = {
    "01_world.py": [
        ["--no-such-flag"], ["--seed", "-1"], ["--samples", "-1"], ["--top", "0"], ["--train-chars", "0"],
    ],
    "02_train_base.py": [
        ["--steps", "0"], ["--batch-size", "0"], ["--lr", "0"], ["--lr", "2"], ["--lr", "nan"], ["--eval-every", "0"],
        ["--probes", "-1"], ["--samples", "-1"], ["--precision", "fp8"], ["--seed", "x"],
        ["--batch-size", "100000000", "--steps", "1", "--no-cache"],
    ],
    "01_collectives.py": [
        ["--demo", "8"], ["--links", "10", "0"], ["--links", "-1", "100"], ["--links", "1000", "1"],
        ["--links", "10", "100", "--demo", "3"], ["--links", "10"], ["--n-bytes", "0"], ["--latency-us", "inf"], ["--latency-us", "0"],
        ["--bandwidth-gbps", "-1"], ["--p", "1"], ["--real-p", "1"], ["--repeats", "0"], ["--timeout", "0"],
        ["--demo", "2", "--n-bytes", "1000001", "--p", "16"],
    ],
    "02_data_parallel.py": [
        ["--demo", "4"], ["--world-size", "0"], ["--batch-size", "0"], ["--steps", "6"], ["--bucket-kb", "0"],
        ["--hook-steps", "0"], ["--powersgd-rank", "0"], ["--port", "-1"], ["--port", "70000"], ["--timeout", "0"],
        ["--trace", MISSING + "/trace.json"], ["--world-size", "3", "--batch-size", "8"],
    ],
    "03_memory_zero.py": [
        ["--demo", "9"], ["--gpus", "0"], ["--k", "-1"], ["--psi-b", "0"], ["--psi-gpus", "0"], ["--utilisation", "0"],
        ["--utilisation", "2"], ["--cluster-gpus", "0"], ["--ranks", "0"], ["--steps", "0"], ["--batch-size", "0"],
        ["--ckpt-layers", "0"], ["--ckpt-batch", "0"], ["--fsdp-layers", "0"], ["--batch-size", "7", "--ranks", "2"],
    ],
    "04_pipeline.py": [
        ["--demo", "8"], ["--stages", "0"], ["--micro-batches", "0"], ["--t-backward", "0"], ["--pipe-ranks", "1"],
        ["--pipe-micro-batches", "0"], ["--batch-size", "7", "--pipe-micro-batches", "2"], ["--tp-ranks", "0"],
        ["--tp-size", "0"], ["--plan-model", "1B"], ["--plan-seq-len", "0"], ["--plan-gpus", "0"],
        ["--global-batch", "0"], ["--recompute", "some"], ["--zero-stage", "4"], ["--virtual-stages", "0"],
        ["--ep-ranks", "0"], ["--experts", "7", "--ep-ranks", "4"], ["--top-k", "3"], ["--experts", "1", "--ep-ranks", "1"],
        ["--capacity-factor", "0"], ["--tokens", "0"], ["--cp-ranks", "0"], ["--seq-len", "7"], ["--cp-heads", "5"],
    ],
    "05_decentralized.py": [
        ["--demo", "9"], ["--net-seed", "-1"], ["--network", "moon"], ["--intra-gbps", "0"],
        ["--intra-latency-ms", "-1"], ["--inter-gbps", "2", "1"], ["--inter-latency-ms", "5", "1"],
        ["--global-batch", "1"], ["--second-batch", "1"], ["--micro-batches", "0"], ["--micro-batches", "100000"],
        ["--random-layouts", "0"], ["--restarts", "0"], ["--strict-iters", "-1"], ["--genetic-budget", "1"],
        ["--steps", "0"], ["--seeds", "0"], ["--jobs", "0"], ["--topk-ratio", "0"], ["--topk-ratio", "2"],
        ["--sgd-lr", "0"], ["--sgd-momentum", "1"], ["--backend", "mpi"], ["--precision", "fp8"],
    ],
    "06_swarm_http.py": [
        ["--modes", "bogus"], ["--port", "8000"], ["--serve", "--resume", MISSING], ["--workers", "0"], ["--steps", "0"],
        ["--update", "later"], ["--round-deadline-s", "0"], ["--min-workers", "5"], ["--max-staleness", "-1"],
        ["--max-body-bytes", "0"], ["--uplink-mbyte-per-s", "0"], ["--rtt-ms", "-1"], ["--serve", "--port", "70000"],
        ["--worker-id", "0"], ["--serve", "--compression", "bogus"], ["--topk-ratio", "0"], ["--batch-size", "0"],
        ["--serve", "--checkpoint-every", "-1"], ["--retry-budget-s", "-1"], ["--aggregator", "bogus"],
        ["--byzantine", "-1"], ["--update-clip", "-1"], ["--attack", "bogus"],
        ["--serve", "--token-file", MISSING + "/tokens.txt"], ["--serve", "--token-file", "t.txt", "--token", "x"],
        ["--aggregator", "median", "--update", "async"], ["--serve", "--worker", "http://127.0.0.1:1"],
        ["--worker", "http://127.0.0.1:1", "--worker-id", "-1"], ["--aggregator", "krum"],
        ["--aggregator", "trimmed-mean", "--byzantine", "2", "--workers", "4"],
        ["--relay-links", "50"], ["--relay-links", "50:0"], ["--relay-links", "50:10"],
        ["--serve", "--relay-links", "50:10"], ["--quick", "--relay-links", "50:10,50:10,50:10"],
    ],
    "07_compression_beyond.py": [
        ["--block-size", "0"], ["--powersgd-ranks", "0"], ["--diloco-h", "0"], ["--diloco-compressed-h", "0"],
        ["--outer-lr", "0"], ["--outer-momentum", "1"], ["--onebit-warmup", "1"], ["--steps", "0"], ["--seeds", "0"],
        ["--jobs", "0"], ["--precision", "fp8"],
    ],
    "08_byzantine.py": [
        ["--workers", "1"], ["--liars", "5"], ["--liars", "4", "--workers", "8"], ["--aggregators", "bogus"],
        ["--attacks", "bogus"], ["--compressed-aggregators", "bogus"], ["--compressed-attacks", "bogus"],
        ["--warm-steps", "-1"], ["--bucket", "-1"], ["--cc-tau", "0"], ["--worker-momentum", "1"], ["--steps", "0"],
        ["--aggregators", "krum", "--workers", "4", "--liars", "1"],
    ],
    "09_torchft.py": [
        ["--modes", "bogus"], ["--replicas", "2"], ["--ddp-steps", "0"], ["--outer-steps", "0"], ["--inner-steps", "0"],
        ["--fragments", "0"], ["--sync-delay", "-1"], ["--kill-at", "0"], ["--kill-at", "1"],
        ["--kill-at", "0.5", "--restart-at", "0.4"], ["--heartbeat-ms", "0"], ["--join-ms", "0"], ["--timeout", "0"],
        ["--modes", "streaming", "--inner-steps", "5", "--fragments", "2"],
        ["--modes", "streaming", "--sync-delay", "100"],
    ],
    "10_hivemind.py": [
        ["--peers", "2"], ["--rounds", "0"], ["--inner-steps", "0"], ["--compression", "bogus"], ["--join-at", "100"],
        ["--leave-at", "100"], ["--bootstrap-dies-at", "100"], ["--matchmaking-s", "0"], ["--part-kb", "0"],
        ["--timeout", "0"], ["--join-at", "2", "--leave-at", "2"],
    ],
    "11_frontier.py": [
        ["--demo", "8"], ["--warm-steps", "-1"], ["--gap-steps", "-1"], ["--block-size", "0"], ["--network", "moon"],
        ["--intra-gbps", "0"], ["--global-batch", "1"], ["--second-batch", "-1"], ["--micro-batches", "0"],
        ["--sync-every", "0"], ["--sync-every", "10", "--fragments", "3"], ["--overlap", "100"], ["--alpha", "2"],
        ["--outer-lr", "0"], ["--outer-momentum", "1"], ["--steps", "0"], ["--seeds", "0"], ["--jobs", "0"],
        ["--topk-per-chunk", "0"], ["--chunk", "0"], ["--sign-lr", "0"], ["--momentum-decay", "1"],
        ["--sparse-topk", "0"], ["--ef-decay", "2"], ["--sparse-outer-lr", "0"], ["--slowest", "0.5"],
        ["--aq-sequences", "33"], ["--aq-epochs", "0"], ["--aq-stages", "4"], ["--aq-micro-batches", "3"],
        ["--aq-backward", "int2"],
    ],
}
CASES = [(script, tuple(argv)) for script, grid in REFUSALS.items() for argv in grid]


def script_path(script):
    return (LECTURE01 if script in ("01_world.py", "02_train_base.py") else LECTURE09) / script


@lru_cache(maxsize=None)
def refusals_of(script):
    """{argv: result} of every case of `script`, from as few processes as torch allows."""
    left, results = [list(argv) for argv in REFUSALS[script]], {}
    while left:
        done = subprocess.run([sys.executable, str(ROOT / "tests" / "refusal_runner.py"), str(script_path(script))],
                              input=json.dumps(left), capture_output=True, text=True, encoding="utf-8",
                              cwd=str(ROOT.parent), timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        batch = json.loads(done.stdout)
        for result in batch:
            results[tuple(result["argv"])] = result
        left = left[len(batch):]
    return results


def ids(case):
    script, argv = case
    return f"{script[:2]}:{' '.join(argv)}"


@pytest.mark.parametrize("script,argv", CASES, ids=[ids(c) for c in CASES])
def test_refused_in_one_line_that_fits(script, argv):
    from lecture01.console import display_width
    result = refusals_of(script)[argv]
    err = result["stderr"]
    assert result["status"] == 2 and result["stdout"] == "", (result["status"], err[-1500:])
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    assert display_width(err.rstrip("\n")) <= 100, (display_width(err.rstrip("\n")), err)


@pytest.mark.parametrize("script,argv", CASES, ids=[ids(c) for c in CASES])
def test_refused_before_torch_is_imported(script, argv):
    result = refusals_of(script)[argv]
    assert result["heavy"] == [], (result["heavy"], result["stderr"][-300:])


def test_the_runner_sees_torch_when_it_is_imported(tmp_path):
    """The check above can fail: a script that imports torch and then refuses is caught."""
    script = tmp_path / "imports_torch.py"
    script.write_text("import sys\nimport torch\nsys.exit(2)\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "refusal_runner.py"), str(script)],
                          input=json.dumps([[], []]), capture_output=True, text=True, timeout=120)
    results = json.loads(done.stdout)
    assert len(results) == 1 and results[0]["heavy"] == ["torch"] and results[0]["status"] == 2


def test_names_written_out_for_a_fast_refusal_agree_with_the_registries():
    """The torch-free copies the flags are checked with (so a refusal needs no torch) name
    exactly what the torch modules register."""
    from lecture09.compress.compression import WIRE_MODES
    from lecture09.robust import aggregator_rules, aggregators
    from lecture09.swarm import swarm_flags
    assert swarm_flags.WIRE_MODES == WIRE_MODES
    assert aggregator_rules.AGGREGATOR_NAMES == tuple(aggregators.AGGREGATORS)
    assert aggregators.check_settings is aggregator_rules.check_settings


def test_an_engine_that_cannot_run_here_says_so_in_one_line_that_fits(monkeypatch):
    """What codes 09 and 10 print on a platform without the engine's wheels (Windows, macOS)."""
    from conftest import load_script
    from lecture01.console import display_width
    from lecture09.engines import unavailable
    for script, module in (("09_torchft.py", "torchft"), ("10_hivemind.py", "hivemind")):
        why = load_script(LECTURE09 / script).UNAVAILABLE
        assert unavailable(module, False, why) == why and "\n" not in why and display_width(why) <= 100
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)      # not installed
    for module in ("torchft", "hivemind"):
        why = unavailable(module, True, "")
        assert "pip install" in why and display_width(why) <= 100


def test_refusal_line_says_less_until_it_fits():
    """lecture01.cli_args.refusal_line by hand: argparse's wording made shorter, the script's
    name dropped only when needed, a long list of choices left to --help."""
    from lecture01.cli_args import HINT, refusal_line
    from lecture01.console import display_width
    assert refusal_line("a.py", "argument --steps: 需要整数 (expected an integer >= 1), got 0") == \
        "a.py: error: --steps: 需要整数 (expected an integer >= 1), got 0" + HINT
    assert refusal_line("a.py", "argument --demo: invalid choice: '7' (choose from '1', '2', 'all')") == \
        "a.py: error: --demo: 无效的值 invalid choice '7'（可选 choose from 1, 2, all）"
    long_prog = "x" * 60 + ".py"
    line = refusal_line(long_prog, "argument --steps: 需要整数 (expected an integer >= 1), got 0")
    assert line == "error: --steps: 需要整数 (expected an integer >= 1), got 0" + HINT
    many = ", ".join(f"'choice-number-{i}'" for i in range(12))
    line = refusal_line("a.py", f"argument --attacks: invalid choice: 'x' (choose from {many})")
    assert line == "a.py: error: --attacks: 无效的值 invalid choice 'x'（可选的值见 --help）"
    assert display_width(line) <= 100
