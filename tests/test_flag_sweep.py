"""Legal extreme flags, swept in quick settings, codes 01-11 (every demo of code 11; issue 43):
each run ends without a traceback and every line fits 100 display columns (issue 21:
observations must stay true under any flag --help accepts; the branch each sentence takes is unit-tested beside its module's tests). Runs in
this process (main(argv)), the scripts' cheap demos and quick runs: more of the training
demos' extremes are in test_code5_observations.py, test_code7.py and test_data_parallel.py."""

import pytest

from conftest import LECTURE09, SWEEP_TIER, load_script, main_quietly

SWEEPS = {
    "01_collectives.py": [
        ["--demo", "1"], ["--demo", "2", "--p", "2"], ["--demo", "4", "--p", "2"], ["--demo", "4", "--p", "1024"],
        ["--demo", "4", "--p", "3", "--n-bytes", "3145728"], ["--demo", "3", "--n-bytes", "1048576", "--p", "1024"],
        ["--demo", "4", "--latency-us", "0.001"], ["--demo", "4", "--bandwidth-gbps", "100000"],
        # demo 7 (emulated links): no latency and a network that vanishes; two ranks on a slow link
        ["--demo", "7", "--quick", "--links", "0", "1000000"], ["--demo", "7", "--quick", "--real-p", "2", "--links", "50", "5"],
    ],
    "02_data_parallel.py": [
        ["--demo", "1", "--quick", "--world-size", "1"], ["--demo", "1", "--quick", "--world-size", "8", "--batch-size", "8"],
        ["--demo", "1", "--quick", "--steps", "1", "--bucket-kb", "1"], ["--demo", "2", "--quick", "--powersgd-rank", "96"],
        ["--demo", "3", "--quick", "--steps", "1"], ["--demo", "3", "--quick", "--bucket-kb", "1048576"],
        ["--demo", "3", "--quick", "--world-size", "8", "--batch-size", "8"],
    ],
    "03_memory_zero.py": [
        ["--demo", "1", "--cluster-gpus", "1"], ["--demo", "1", "--utilisation", "1"], ["--demo", "2", "--gpus", "1"],
        ["--demo", "2", "--gpus", "1", "100000"], ["--demo", "2", "--k", "1"], ["--demo", "2", "--psi-b", "1000"],
        ["--demo", "2", "--psi-gpus", "1"], ["--demo", "3"],
        ["--demo", "5", "--quick", "--ckpt-layers", "1", "--ckpt-batch", "1"], ["--demo", "5", "--quick", "--ckpt-batch", "64"],
        ["--demo", "6", "--quick", "--fsdp-layers", "1"], ["--demo", "6", "--quick", "--fsdp-layers", "8", "--ranks", "4"],
    ],
    "04_pipeline.py": [
        ["--demo", "1", "--stages", "1", "--micro-batches", "1"], ["--demo", "1", "--stages", "16", "--micro-batches", "2"],
        ["--demo", "1", "--micro-batches", "64"], ["--demo", "1", "--t-backward", "4"],
        ["--demo", "4", "--plan-model", "1.3B", "--plan-gpus", "1"], ["--demo", "4", "--global-batch", "256"],
        ["--demo", "4", "--zero-stage", "0", "--recompute", "none"], ["--demo", "4", "--zero-stage", "3", "--recompute", "full"],
        ["--demo", "4", "--plan-model", "175B", "--plan-gpus", "8"],
        ["--demo", "4", "--plan-model", "8x7B", "--plan-gpus", "1"], ["--demo", "4", "--plan-seq-len", "128"],
        ["--demo", "4", "--plan-model", "8x7B", "--plan-gpus", "65536", "--global-batch", "65536"],
        ["--demo", "4", "--plan-model", "7B", "--plan-seq-len", "1048576", "--plan-gpus", "4096", "--global-batch", "1"],
        ["--demo", "5", "--quick", "--stages", "1", "--micro-batches", "1"],
        ["--demo", "5", "--quick", "--stages", "16", "--micro-batches", "64", "--virtual-stages", "4"],
        ["--demo", "5", "--quick", "--stages", "3", "--micro-batches", "2", "--virtual-stages", "1"],
        ["--demo", "5", "--quick", "--pipe-ranks", "3", "--pipe-micro-batches", "4"],
        ["--demo", "5", "--quick", "--pipe-ranks", "4", "--pipe-micro-batches", "8", "--batch-size", "8",
         "--virtual-stages", "4"],
        ["--demo", "6", "--quick", "--experts", "16", "--ep-ranks", "4", "--tokens", "1", "--capacity-factor", "0.01"],
        ["--demo", "6", "--quick", "--experts", "2", "--top-k", "1", "--tokens", "1024", "--capacity-factor", "8"],
        ["--demo", "7", "--quick", "--cp-ranks", "4", "--seq-len", "8", "--cp-heads", "1"],
        ["--demo", "7", "--quick", "--cp-ranks", "3", "--seq-len", "768", "--cp-heads", "8"],
    ],
    "05_decentralized.py": [
        ["--demo", "1", "--quick", "--micro-batches", "1"], ["--demo", "1", "--quick", "--micro-batches", "64", "--second-batch", "0"],
        ["--demo", "1", "--quick", "--second-batch", "0"], ["--demo", "1", "--quick", "--network", "aws-regional"],
        ["--demo", "1", "--quick", "--global-batch", "8", "--second-batch", "0", "--micro-batches", "1"],
        ["--demo", "1", "--quick", "--intra-gbps", "100000", "--inter-gbps", "100000", "100000"],
        ["--demo", "3", "--quick", "--mix", "v100=32"], ["--demo", "3", "--quick", "--mix", "t4=32", "--memory-gb", "t4=13.5"],
        ["--demo", "3", "--quick", "--mix", "a100=1,t4=31", "--network", "aws-regional", "--micro-batches", "8"],
    ],
    "06_swarm_http.py": [
        ["--quick", "--workers", "1", "--modes", "none"], ["--quick", "--update", "async", "--modes", "topk"],
        ["--quick", "--modes", "topk", "--aggregator", "median", "--attack", "tiny-dense"],
        ["--quick", "--workers", "3", "--modes", "topk-int8", "--aggregator", "trimmed-mean", "--attack", "replay"],
        ["--quick", "--modes", "topk", "--update-clip", "1e-06", "--attack", "tiny-dense"],
    ],
    "07_compression_beyond.py": [
        ["--steps", "1", "--diloco-h", "1", "--diloco-compressed-h", "1", "--powersgd-ranks", "64", "--jobs", "1"],
        ["--quick", "--block-size", "1", "--jobs", "1"], ["--quick", "--outer-momentum", "0", "--outer-lr", "10", "--jobs", "1"],
        ["--quick", "--onebit-warmup", "0.99", "--jobs", "1"],
    ],
    "08_byzantine.py": [
        ["--quick", "--workers", "3", "--jobs", "1"], ["--quick", "--workers", "9", "--liars", "4", "--jobs", "1"],
        ["--quick", "--bucket", "2", "--jobs", "1"], ["--quick", "--cc-tau", "1e-06", "--jobs", "1"],
        ["--quick", "--cc-tau", "1000000", "--jobs", "1"], ["--quick", "--worker-momentum", "0.999", "--jobs", "1"],
        ["--quick", "--seeds", "2", "--jobs", "1", "--model-seed", "3"],
        # the measured round after more warm-up steps than the training has (its own schedule)
        ["--steps", "2", "--warm-steps", "5", "--aggregators", "mean", "--attacks", "none",
         "--compressed-aggregators", "mean", "--jobs", "1"],
        # every attack and several seeds: table (2) wider than 100 columns is printed in parts
        ["--steps", "1", "--warm-steps", "1", "--seeds", "2", "--aggregators", "mean", "--attacks", "none",
         "sign-flip", "alie", "ipm", "tiny-dense", "tiny-dense-fixed", "gaussian", "replay",
         "--compressed-aggregators", "mean", "--jobs", "1"],
    ],
    # the engines: a kill at either end of the run, no restart, no failure, the smallest group,
    # the longest sync delay the quick run allows, hivemind's 8-bit codec, churn at its earliest
    "09_torchft.py": [
        ["--quick", "--modes", "ddp", "--kill-at", "0.05", "--restart-at", "0.95"],
        ["--quick", "--modes", "diloco", "--no-restart"],
        ["--quick", "--modes", "streaming", "--fragments", "2", "--sync-delay", "1", "--no-failure"],
    ],
    "10_hivemind.py": [
        ["--quick", "--peers", "3", "--no-check"], ["--quick", "--no-churn", "--compression", "uniform_8bit"],
        ["--quick", "--join-at", "1", "--leave-at", "5", "--bootstrap-dies-at", "1"],
    ],
    "11_frontier.py": [
        ["--quick", "--warm-steps", "0", "--block-size", "1"], ["--quick", "--block-size", "1048576"],
        ["--demo", "1", "--quick", "--block-size", "2", "--global-batch", "1024", "--second-batch", "0"],
        ["--quick", "--global-batch", "8", "--second-batch", "100000", "--micro-batches", "64"],
        ["--quick", "--network", "aws-regional", "--intra-gbps", "0.01"],
        ["--demo", "2", "--quick", "--fragments", "1", "--overlap", "0", "--jobs", "1"],
        ["--demo", "2", "--steps", "2", "--sync-every", "64", "--fragments", "64", "--overlap", "0", "--jobs", "1"],
        ["--demo", "2", "--quick", "--alpha", "1", "--outer-momentum", "0", "--outer-lr", "10", "--jobs", "1"],
        ["--demo", "2", "--quick", "--seeds", "2", "--fragments", "6", "--overlap", "0", "--jobs", "1"],
        # DeMo: one coefficient per chunk (everything sent, no control row); k beyond any chunk;
        # the largest lr with no momentum (sign-SGD at lr 1 blows up but stays finite)
        ["--demo", "3", "--quick", "--topk-per-chunk", "1", "--chunk", "1", "--jobs", "1"],
        ["--demo", "3", "--quick", "--topk-per-chunk", "1048576", "--chunk", "1024", "--jobs", "1"],
        ["--demo", "3", "--quick", "--sign-lr", "1", "--momentum-decay", "0", "--seeds", "2", "--jobs", "1"],
        # SparseLoCo: chunks of one entry (everything sent); the largest k and lr, every step, no
        # error feedback left; H beyond the steps (one exchange at the end)
        ["--demo", "4", "--quick", "--sparse-topk", "1", "--chunk", "1", "--jobs", "1"],
        ["--demo", "4", "--steps", "2", "--sync-every", "1", "--sparse-outer-lr", "10", "--seeds", "2",
         "--sparse-topk", "1048576", "--chunk", "1024", "--ef-decay", "0", "--jobs", "1"],
        ["--demo", "4", "--steps", "3", "--sync-every", "64", "--ef-decay", "1", "--jobs", "1"],
        # gossip: an exchange every step; H beyond the steps (one exchange at the end)
        ["--demo", "5", "--steps", "2", "--sync-every", "1", "--seeds", "2", "--jobs", "1"],
        ["--demo", "5", "--steps", "3", "--sync-every", "64", "--jobs", "1"],
        # asynchronous local SGD: equally fast workers; the slowest 100 times slower, an arrival
        # every step; H beyond the steps (one round each) with the largest outer lr, no momentum
        ["--demo", "7", "--quick", "--slowest", "1", "--jobs", "1"],
        ["--demo", "7", "--steps", "2", "--sync-every", "1", "--slowest", "100", "--seeds", "2", "--jobs", "1"],
        ["--demo", "7", "--steps", "3", "--sync-every", "64", "--outer-lr", "10", "--outer-momentum", "0",
         "--jobs", "1"],
        # AQ-SGD on real ranks: one batch, one epoch (every visit a first one), gradients in fp32; the
        # most stages the tiny GPT can be cut into, one sequence per micro-batch... and the fewest
        ["--demo", "6", "--aq-sequences", "32", "--aq-epochs", "1", "--aq-backward", "none"],
        ["--demo", "6", "--aq-sequences", "32", "--aq-epochs", "2", "--aq-stages", "3", "--aq-micro-batches", "32"],
        ["--demo", "6", "--aq-sequences", "64", "--aq-epochs", "2", "--aq-micro-batches", "1",
         "--aq-backward", "int4-block"],
    ],
}
CASES = [(script, argv) for script, grid in SWEEPS.items() for argv in grid]

# Demos that train or start real ranks take seconds each; their extremes are the sweep tier
# (conftest.SWEEP_TIER). Arithmetic demos take milliseconds and stay in the main part.
TRAINS_OR_SPAWNS = {"01_collectives.py": {"7"}, "02_data_parallel.py": "all", "03_memory_zero.py": {"5", "6"},
                    "04_pipeline.py": {"5", "6", "7"}, "06_swarm_http.py": "all",
                    "07_compression_beyond.py": "all", "08_byzantine.py": "all", "09_torchft.py": "all",
                    "10_hivemind.py": "all", "11_frontier.py": "all"}
NEEDS = {"09_torchft.py": "torchft", "10_hivemind.py": "hivemind"}      # Linux only; not Windows


def trains_or_spawns(script, argv):
    demos = TRAINS_OR_SPAWNS.get(script, set())
    return demos == "all" or (argv[0] == "--demo" and argv[1] in demos)


PARAMS = [pytest.param(script, argv, marks=SWEEP_TIER if trains_or_spawns(script, argv) else (),
                       id=f"{script[:2]}:{' '.join(argv)}") for script, argv in CASES]


@pytest.mark.parametrize("script,argv", PARAMS)
def test_extreme_flags_run_and_fit(script, argv):
    import importlib.util
    from lecture01.console import display_width
    if script in NEEDS and importlib.util.find_spec(NEEDS[script]) is None:
        pytest.skip(f"{script} needs {NEEDS[script]}")
    module = load_script(LECTURE09 / script)
    result, out = main_quietly(module.main, argv)
    assert out.strip()
    assert not isinstance(result, int) or result == 0, (result, out[-1500:])    # codes 09, 10: an exit status
    wide = [line for line in out.splitlines() if display_width(line) > 100]
    assert not wide, wide[:3]
