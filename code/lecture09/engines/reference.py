"""What both engines are checked against: our own DiLoCo simulation, and the bpc of a state.

Used by code 9 (torchft, §9) and code 10 (hivemind, §10): with no failure, an engine's
DiLoCo run and compress/local_sgd.py at the same seeds and settings should give the same
losses at every sync, and the same validation bits per character.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class SimCheck:
    syncs: int
    max_loss_diff: float      # the engine's mean loss at each sync against the simulation's
    engine_bpc: float
    sim_bpc: float


def bpc_of(state):
    """Validation bits per character of lecture 9's model with this state dict."""
    from lecture01 import tiny_gpt
    from lecture09.compress import training
    from lecture09.lecture_model import MODEL_CONFIG

    model = tiny_gpt.make_model(MODEL_CONFIG)
    model.load_state_dict(state)
    return tiny_gpt.bits_per_char(model, training.world_tokens(0)[1])


def diloco_simulation(n_workers, syncs, inner_steps, batch_per_worker, peak_lr, outer_lr, outer_momentum,
                      model_seed, data_seed):
    """compress/local_sgd.py's DiLoCo (no compression) at these settings: a RunResult."""
    from lecture01 import tiny_gpt
    from lecture09.compress import local_sgd, training

    setup = training.TrainSetup(recipe=tiny_gpt.TrainConfig(steps=syncs * inner_steps,
                                                            batch_size=batch_per_worker * n_workers,
                                                            peak_lr=peak_lr),
                                n_workers=n_workers, outer_lr=outer_lr, outer_momentum=outer_momentum)
    return local_sgd.train(training.Run("diloco", "adamw", "none", param=inner_steps),
                           training.Seeds(model_seed, data_seed), setup)


def sim_check(losses_at_syncs, inner_steps, engine_state, result):
    """SimCheck of an engine's mean loss at each sync (a list, sync 1 first) and final state
    against a diloco_simulation result."""
    diffs = [abs(loss - result.losses[(k + 1) * inner_steps - 1]) for k, loss in enumerate(losses_at_syncs)]
    return SimCheck(syncs=len(diffs), max_loss_diff=max(diffs), engine_bpc=bpc_of(engine_state),
                    sim_bpc=result.bpc)


def sim_check_lines(check, tolerance, engine="torchft", not_comparable=""):
    """The check as printed lines: both bpc, the largest loss difference, and the verdict.
    not_comparable: why the engine's run did not do what the simulation does (e.g. a round
    whose group was not everyone), said in place of "the engine disagrees"."""
    from lecture01.console import pad

    lines = [pad("  比较 compared", 40) + pad(engine, 12, ">") + pad("我们的模拟 ours", 16, ">")
             + pad("差 difference", 16, ">")]
    lines.append(pad("  验证集 bits/字符 validation bpc", 40) + pad(f"{check.engine_bpc:.6f}", 12, ">")
                 + pad(f"{check.sim_bpc:.6f}", 16, ">") + pad(f"{check.engine_bpc - check.sim_bpc:+.1e}", 16, ">"))
    lines.append(pad(f"  {check.syncs} 次同步时的训练损失 loss", 40) + pad("", 28)
                 + pad(f"max {check.max_loss_diff:.1e}", 16, ">"))
    same = abs(check.engine_bpc - check.sim_bpc) <= tolerance and check.max_loss_diff <= tolerance
    if not same and not_comparable:
        lines.append(f"  不一致，但不是 {engine} 算错：{not_comparable}")
        return lines
    lines.append(f"  {'一致' if same else '不一致'}：容差 tolerance {tolerance:g}" +
                 ("（每个差都在容差以内）" if same else f"——超出容差：{engine} 的 DiLoCo 和我们的模拟这里不一致"))
    return lines
