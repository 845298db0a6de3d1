"""tiny_gpt: tokenizer, model construction, batches, schedule, bits per character, training."""

import math

import pytest
import torch

from lecture01 import tiny_gpt
from lecture01.tiny_gpt import BASE_CONFIG, CharTokenizer, GPTConfig, get_batch, lr_at, make_model

ALPHABET44 = "\n abcdefghijklmnopqrstuvwxyz0123456789.,'?-:"


def test_tokenizer_round_trip():
    tok = CharTokenizer(ALPHABET44)
    text = "mira lives in oakford.\nq: where? a: 42-x, 'ok'"
    ids = tok.encode(text)
    assert all(0 <= i < 44 for i in ids)
    assert tok.decode(ids) == text


def test_tokenizer_unknown_character_names_it_and_its_position():
    tok = CharTokenizer(ALPHABET44)
    with pytest.raises(ValueError, match=r"'Q'.*position 3"):
        tok.encode("abcQ")


def test_tokenizer_rejects_repeated_alphabet():
    with pytest.raises(ValueError):
        CharTokenizer("aab")


def test_base_config_matches_what_lecture_9_needs():
    assert BASE_CONFIG.vocab_size == 44 and BASE_CONFIG.block_size >= 96
    with pytest.raises(Exception):
        BASE_CONFIG.n_layer = 3          # frozen: nobody changes the base model by accident


@pytest.mark.parametrize("bad", [dict(n_embd=50, n_head=4), dict(n_layer=0), dict(vocab_size=-1)])
def test_inconsistent_config_raises(bad):
    with pytest.raises(ValueError):
        make_model(GPTConfig(**bad), seed=0)


def test_same_seed_gives_bit_identical_weights_and_different_seeds_differ():
    a, b, c = make_model(BASE_CONFIG, 3), make_model(BASE_CONFIG, 3), make_model(BASE_CONFIG, 4)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
    assert not all(torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters()))


def test_model_maps_tokens_to_logits():
    model = make_model(BASE_CONFIG, 0)
    x = torch.zeros(2, 10, dtype=torch.long)
    assert model(x).shape == (2, 10, BASE_CONFIG.vocab_size)


def test_model_is_causal():
    """Changing a later character must not change the logits at earlier positions."""
    model = make_model(BASE_CONFIG, 0)
    x = torch.randint(0, 44, (1, 20), generator=torch.Generator().manual_seed(0))
    y = x.clone()
    y[0, 15] = (y[0, 15] + 1) % 44
    assert torch.allclose(model(x)[:, :15], model(y)[:, :15])
    assert not torch.allclose(model(x)[:, 15:], model(y)[:, 15:])


def test_get_batch_shapes_shift_and_determinism():
    data = torch.arange(1000)
    x, y = get_batch(data, 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])
    assert torch.equal(y, x + 1)                      # data[i] = i, so the target is the next id
    x2, _ = get_batch(data, 4, 16, torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)


def test_get_batch_rejects_short_data():
    with pytest.raises(ValueError):
        get_batch(torch.arange(16), 2, 16, torch.Generator())


def test_lr_schedule_end_points():
    peak, total = 3e-3, 300
    warm = tiny_gpt.warmup_steps(total)
    assert warm == 15
    assert lr_at(0, total, peak) == pytest.approx(peak / warm)
    assert lr_at(warm - 1, total, peak) == pytest.approx(peak)
    assert lr_at(warm, total, peak) == pytest.approx(peak)          # cosine starts at the peak
    assert lr_at(total - 1, total, peak) == pytest.approx(tiny_gpt.LR_FLOOR_FRACTION * peak)
    lrs = [lr_at(s, total, peak) for s in range(warm, total)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))                # decays monotonically
    with pytest.raises(ValueError):
        lr_at(total, total, peak)


class ZeroLogits(torch.nn.Module):
    config = BASE_CONFIG

    def forward(self, idx):
        return torch.zeros(*idx.shape, 44)


def test_uniform_model_scores_log2_of_alphabet():
    val = torch.randint(0, 44, (5000,), generator=torch.Generator().manual_seed(0))
    assert tiny_gpt.bits_per_char(ZeroLogits(), val) == pytest.approx(math.log2(44), abs=1e-12)


def test_bits_per_char_is_deterministic_and_restores_train_mode():
    model = make_model(BASE_CONFIG, 0)
    val = torch.randint(0, 44, (30000,), generator=torch.Generator().manual_seed(0))
    model.train()
    first = tiny_gpt.bits_per_char(model, val)
    assert model.training
    assert tiny_gpt.bits_per_char(model, val) == first


def test_training_lowers_the_loss_and_is_reproducible():
    """A few steps on a repetitive text: the loss falls, and a rerun gives identical losses."""
    text_ids = torch.tensor(([1, 2, 3, 4, 5, 6, 7, 8] * 200), dtype=torch.long)
    cfg = tiny_gpt.TrainConfig(steps=30, batch_size=8)
    runs = []
    for _ in range(2):
        model = make_model(BASE_CONFIG, 0)
        runs.append(tiny_gpt.train(model, text_ids, cfg))
    assert runs[0] == runs[1]
    assert runs[0][-1] < 0.5 * runs[0][0]
