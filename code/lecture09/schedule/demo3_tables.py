"""Demo 3 of code 5, printed: mixed cards, the three searches against a proven optimum,
and the control with every card made equal (lecture 9, §5.11). The observations that
read these tables are in demo3_observations.py. Pure arithmetic: no torch.
"""

import sys
import time

from lecture01.console import StatusLine, display_width, print_header, print_table, print_wrapped
from lecture09.schedule.device_figures import CARDS, EQUAL_CARD
from lecture09.schedule.hetero_cost import layer_bytes
from lecture09.schedule.hetero_study import SEARCHES, study

NAMES = {"genetic": "遗传算法 genetic（演示 1）", "graph": "图划分（HexiScale 式）",
         "enumeration": "剪枝枚举（Metis 式）", "optimum": "最优（已证明）"}
CONTROL_NAMES = {"homo_even": "同卡最优 + 均分层数", "homo_balanced": "同卡最优 + 按卡速切层",
                 "mixed_best": "混合卡上找到的最好"}


def short_name(name):
    return NAMES[name].split("（")[0].split(" ")[0]


def seconds(x):
    return "放不下" if x == float("inf") else f"{x:.2f}"


def percent(x):
    return "—" if x != x or x == float("inf") else f"{x * 100:+.1f}%"


def _places(names):
    text = "、".join(sorted(names))
    return text if display_width(text) <= 16 else f"{len(names)} 个地区"


def print_cards(r):
    h, setup = r.hetero, r.hetero.base
    per_layer, fixed = layer_bytes(setup, h.n_layers, setup.n_replicas)
    cost = r.large.cost
    print_header(f"演示 3：卡也不一样——{setup.n_gpus} 张算力、显存不同的卡，不均匀的阶段，三种搜索和证明过的最优")
    out = print_wrapped
    out(f"任务和网络同演示 1：{setup.n_params / 1e9:.1f}B 参数、{h.n_layers} 层，{setup.n_stages} 阶段 × "
        f"{setup.n_replicas} 副本，batch {setup.global_batch}，M = {setup.n_micro_batches}。每张卡的有效算力 = "
        f"峰值 × {h.utilisation:.0%}（假设，同演示 1）；地区按卡的顺序填满（每个地区 "
        f"{setup.n_gpus // len(r.world['region_sizes'])} 张）。每层的显存 = ZeRO-1 的状态 + {setup.n_micro_batches} 个微批次的"
        f"层输入（整层重算）= {per_layer / 1e9:.2f} GB，另加反向时重建的一层 {fixed / 1e9:.2f} GB（第 3 节的公式）。")
    regions = {}
    for d, card in enumerate(h.cards):
        regions.setdefault(card, set()).add(r.world["region_names"][r.world["region"][d]])
    rows = []
    for card in r.max_layers:
        c = CARDS[card]
        d = h.cards.index(card)
        rows.append((card, f"{c.peak_tflops:g}", f"{c.peak_tflops * h.utilisation:.1f}", f"{h.memory_of(card):g}",
                     str(r.max_layers[card]), str(h.cards.count(card)), _places(regions[card]),
                     f"{cost.layer_ps[d] / 1e12:.2f}"))
    out("表 (c)　卡 cards（峰值：厂商资料里 16 位张量核心的稠密峰值，FP32 累加）")
    print_table(["卡", "峰值 TFLOP/s", "有效", "显存 GB", "放得下几层", "张数", "地区", "每层用时 秒"], rows)
    for card in r.max_layers:
        out(f"  {card}：{CARDS[card].source}")


def _method_row(cost, name, result, gap):
    b = cost.breakdown(result.order, result.partitions)   # the optimum's own partitions; else the balancer's
    evals = f"{result.evaluations:,}" + ("" if result.finished else "（预算用完）")
    return b, (NAMES[name], seconds(b.compute), seconds(b.dp), seconds(b.pp), seconds(result.total), percent(gap), evals)


def print_small(r):
    inst, h = r.small, r.hetero
    if inst is None:
        print_wrapped("\n表 (d)　小实例：没有一种分配放得下（它的层更大：每层是 1.3B 的 1/4；看 --memory-gb），这次不比")
        return
    cost = inst.cost
    names = "、".join(cost.net["region_names"])
    print_wrapped(f"\n表 (d)　小实例：{cost.n_stages} 阶段 × {cost.n_replicas} 副本，{len(cost.cards)} 张卡（{names} 各取"
                  f"第一张和最后一张：{'、'.join(cost.cards)}），{cost.n_layers} 层，batch "
                  f"{h.base.second_batch or h.base.global_batch}；每种搜索每次 {h.small_budget:,} 次代价计算，"
                  f"{h.seeds} 个种子（秒）")
    rows, splits = [], []
    for name in SEARCHES + ("optimum",):
        b, row = _method_row(cost, name, inst.results[name], inst.gap(name))
        rows.append(row)
        splits.append(f"{short_name(name)} {' '.join(''.join(map(str, p)) for p in b.partitions)}")
    print_table(["方法 method", "计算", "dp", "pp", "合计", "离最优", "代价计算次数"], rows)
    print_wrapped("  每个副本各阶段的层数：" + "；".join(splits))
    ctl = optimum_with_balancer(inst)
    print_wrapped(f"  对照：最优的放法（卡放在哪个位置）配上负载均衡器的切层 {seconds(ctl.total)}（计算 {seconds(ctl.compute)}、"
                  f"dp {seconds(ctl.dp)}、pp {seconds(ctl.pp)}）")
    print_wrapped(f"  最优：枚举了 {inst.results['optimum'].nodes:,} 个候选流水线、每个叶子试遍所有切层法，证明没有更好的分配")


def optimum_with_balancer(inst):
    """The control of table (d): the optimum's placement, each replica's layers split by the
    balancer (what all three searches do) instead of the optimum's own split."""
    return inst.cost.breakdown(inst.results["optimum"].order)


def print_large(r):
    inst, h = r.large, r.hetero
    setup = h.base
    print_wrapped(f"\n表 (e)　演示 1 的规模：{setup.n_stages} × {setup.n_replicas}，{setup.n_gpus} 张卡，{h.n_layers} 层；"
                  f"每种搜索每次 {h.budget:,} 次代价计算，{h.seeds} 个种子；这里证明不了最优，离的是三者里最好的（秒）")
    rows = []
    for name in SEARCHES:
        res = inst.results[name]
        _, row = _method_row(inst.cost, name, res, inst.gap(name))
        rows.append(row + (links_in_region(r, res.order),))
    print_table(["方法 method", "计算", "dp", "pp", "合计", "离最好", "代价计算次数", "地区内边"], rows)
    for name in SEARCHES:
        res = inst.results[name]
        more = f"，候选流水线 {res.nodes:,} 个" if name == "enumeration" else ""
        print_wrapped(f"  {NAMES[name]}：各次 " + "、".join(f"{t:.2f}" for t in res.runs) + more)


def links_in_region(r, order):
    net, n_r = r.world, r.hetero.base.n_replicas
    inside = sum(net["region"][order[k]] == net["region"][order[k + n_r]] for k in range(len(order) - n_r))
    return f"{inside}/{len(order) - n_r}"


def print_control(r):
    c = r.control
    best = c.rows["mixed_best"].mixed.total
    print_wrapped(f"\n表 (f)　对照：同一个网络，每张卡都换成 {EQUAL_CARD}（'同卡最优' = 演示 1 的分支定界给的最优，"
                  "等卡时各阶段层数相同，计算对每种分配都一样）；同一批分配放回混合卡上（秒）")
    rows = [(CONTROL_NAMES[k], seconds(x.equal.total), seconds(x.mixed.compute), seconds(x.mixed.dp),
             seconds(x.mixed.pp), seconds(x.mixed.total), percent(x.mixed.total / best - 1), f"{x.inside}/{x.links}")
            for k, x in c.rows.items()]
    print_table(["分配 layout", f"全是 {EQUAL_CARD}", "混合：计算", "dp", "pp", "合计", "离最好", "地区内边"], rows)


def print_demo3(r):
    """Every table of demo 3, in order (the observations follow: demo3_observations.run_demo3)."""
    print_cards(r)
    print_small(r)
    print_large(r)
    print_control(r)


def study_with_progress(hetero):
    """study(), with its steps on one stderr status line (erased before the tables print)."""
    status = StatusLine(None, min_interval_s=0, log_interval_s=0)
    started = time.perf_counter()
    r = study(hetero, lambda text: status.show(f"  演示 3 搜索中（{time.perf_counter() - started:.1f} 秒）：{text}"))
    status.clear()
    print(f"（演示 3 的搜索用时 {time.perf_counter() - started:.1f} 秒）", file=sys.stderr)
    return r
