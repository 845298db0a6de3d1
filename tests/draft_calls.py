"""The calls the earlier draft of code 5 makes, with its argument names, positions and
returned keys, on small inputs. Run as a separate process by test_draft_compatibility.py.

The draft is not part of the project. It puts its own folder and ../lecture01 on sys.path
and imports the toolkit's modules by their bare names (`from dist_sim import ...`); this
file does exactly the same, so the thin top-level modules stay importable that way.
"""

import sys
from pathlib import Path

CODE = Path(__file__).resolve().parent.parent / "code"
sys.path[:0] = [str(CODE / "lecture09"), str(CODE / "lecture01")]


import random  # noqa: E402

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from console import pad, print_header
from dist_sim import iteration_cost, local_search, make_network
from fm_world import ALPHABET, build_world
from tiny_gpt import BASE_CONFIG, CharTokenizer, bits_per_char, get_batch, lr_at, make_model


def scheduling_calls():
    geo = make_network([8, 8, 8, 8], intra_gbps=10, inter_gbps_range=(0.3, 1.3),
                       inter_latency_ms_range=(10, 250), seed=0)
    dc = make_network([32], intra_gbps=25, inter_gbps_range=(25, 25), inter_latency_ms_range=(0.1, 0.1), seed=0)
    assert geo["region"][0] == 0 and geo["region"][31] == 3

    def cost(a, net=geo):
        return iteration_cost(a, net, 4, 8, 1.3e9 * 2 / 4, 2048 * 2048 * 2 * 128)["total"]

    order = list(range(32))
    random.Random(100).shuffle(order)
    start = {(k // 8, k % 8): dev for k, dev in enumerate(order)}
    best, best_cost = local_search(start, cost, random.Random(200), 50, False)
    assert best_cost <= cost(start)
    _, side_cost = local_search(start, cost, random.Random(200), 50, True)
    assert side_cost <= cost(start)
    detail = iteration_cost(best, geo, 4, 8, 1.3e9 * 2 / 4, 2048 * 2048 * 2 * 128)
    assert set(detail) >= {"dp", "pp", "total"}
    assert cost({(k // 8, k % 8): k for k in range(32)}, dc) > 0
    print_header("标题 title")
    line = f"{pad('分配方式', 38)}{pad('1.0 秒', 20, '>')}"
    assert line.endswith("1.0 秒")


def training_calls():
    world, tok = build_world(), CharTokenizer(ALPHABET)
    data = torch.tensor(tok.encode(world.train_text()[:20000]), dtype=torch.long)
    val = torch.tensor(tok.encode(world.val_text()[:5000]), dtype=torch.long)
    model = make_model(BASE_CONFIG, seed=0)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(1)
    n = sum(q.numel() for q in params)
    for step in range(2):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, 2, 3e-3)
        x, y = get_batch(data, 32, 96, gen)
        received = torch.zeros(n)
        for r in range(4):
            model.zero_grad()
            F.cross_entropy(model(x[r * 8:(r + 1) * 8]).view(-1, 44), y[r * 8:(r + 1) * 8].reshape(-1)).backward()
            received += parameters_to_vector([q.grad for q in params]).detach()
        vector_to_parameters(received / 4, [q.grad for q in params])
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    assert 0 < bits_per_char(model, val) < 6


if __name__ == "__main__":
    scheduling_calls()
    training_calls()
    print("draft calls ok")
