"""Demo 2 on real gloo ranks (gloo_dp.py) against the one-process simulation: the same
seeds give the same losses step by step and the same bits per character."""

import pytest

from lecture09 import compressed_dp as cdp


@pytest.mark.parametrize("run", [cdp.Run("fp16", "adamw", "fp16"),
                                 cdp.Run("int8", "adamw", "int8"), cdp.Run("topk EF", "sgd", "topk", True),
                                 cdp.Run("powersgd", "adamw", "powersgd", True, 1)])
def test_two_gloo_ranks_train_like_the_simulation(run):
    setup = cdp.replace(cdp.TrainSetup(), n_workers=2).with_steps(4)
    simulated = cdp.train_run(run, cdp.Seeds(), setup)
    real = cdp.train_run(run, cdp.Seeds(), cdp.replace(setup, backend="gloo"))
    assert real.steps_done == simulated.steps_done == 4
    # PowerSGD: the same as PyTorch's hook step by step on a small model (test_powersgd.py);
    # on the GPT the runs part after the first compressed step by ~0.006 in loss. Our
    # guess (not checked): DDP rebuilds its bucket in gradient-ready order, which changes
    # which random numbers start which Q; the simulation draws them in reverse model order.
    tolerance = 0.02 if run.scheme == "powersgd" else 1e-4
    assert real.losses == pytest.approx(simulated.losses, abs=tolerance)
    assert real.bpc == pytest.approx(simulated.bpc, abs=max(tolerance, 1e-3))
    if run.scheme != "powersgd":
        assert real.bytes_per_element == pytest.approx(simulated.bytes_per_element)
    if run.scheme == "int8":
        assert real.zeroed_fraction == pytest.approx(simulated.zeroed_fraction, abs=0.01)
