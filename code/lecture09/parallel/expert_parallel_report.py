"""Code 4's demo 6, run and printed (lecture 9, §4.13): a mixture-of-experts layer with its
experts on gloo ranks against one process, the capacity factor's trade between dropped
tokens and bytes, and expert against tensor parallelism's traffic per layer, with
observations worded from the numbers. torch is imported inside the functions that need it.
"""

import sys
import time
from dataclasses import replace

from lecture01.console import print_header, print_table, print_wrapped
from lecture09.parallel import expert_parallel as ep
from lecture09.parallel import memory_model as mm
from lecture09.ranks import gloo_ranks

EP_RTOL = 5e-6       # relative to each quantity's largest value; see check_expert_parallel
CAPACITY_FACTORS = (0.5, 1.0, 1.25, 1.5, 2.0)
BIG = dict(dim=4096, n_experts=8, top_k=2, capacity_factor=1.25, tokens=32768)   # table (c): a Mixtral-sized layer


def check_expert_parallel(cfg, world_size):
    """The layer on real ranks against `ep.reference` on the same groups.

    Tolerance EP_RTOL, relative to the largest value of each quantity (outputs, input
    gradients, weight gradients): an expert's weight gradient sums the contributions of all
    its slots in one batched matrix product on its rank, where the reference sums each
    group's slots and then the groups, and the router's gradient is summed over the ranks by
    all-reduce; float32 addition in another order differs by up to 4.3e-7 of the largest
    gradient (measured over 5 settings, 8-1024 tokens per rank; an absolute 1e-5 failed at
    1024). A token sent to the wrong expert or slot changes them by ~1e-1 of it."""
    t0 = time.perf_counter()
    ranks = gloo_ranks.run_ranks(ep.ep_worker, world_size, args=(cfg,), timeout_s=120)
    print(f"（演示 6 的 {world_size} 个进程用时 {time.perf_counter() - t0:.1f} 秒）", file=sys.stderr)
    got, ref = ep.assemble(ranks, cfg), ep.reference(cfg, world_size)

    def diff(a, b):
        return (a - b).abs().max().item()

    def scale(t):
        return max(t.abs().max().item(), 1e-30)

    grad_scale = max(scale(v) for v in ref["grads"].values())
    experts = max(diff(got["grads"][k], ref["grads"][k]) for k in ("w1", "b1", "w2", "b2"))
    router = diff(got["grads"]["router"], ref["grads"]["router"])
    relative = max(diff(got["y"], ref["y"]) / scale(ref["y"]), diff(got["x_grad"], ref["x_grad"]) / scale(ref["x_grad"]),
                   max(experts, router) / grad_scale)
    return {"y": diff(got["y"], ref["y"]), "x_grad": diff(got["x_grad"], ref["x_grad"]),
            "router": router, "experts": experts, "relative": relative,
            "dropped": got["dropped"], "ref_dropped": ref["dropped"], "routers_agree": got["routers_agree"],
            "sent_bytes": got["sent_bytes"], "grad_scale": grad_scale}


def capacity_rows(cfg, world_size):
    """Per capacity factor: (cf, capacity, dropped assignments, their share, bytes one rank
    sends per all-to-all, share of the sent slots that are empty), routing the demo's own
    groups in one process."""
    import torch

    x, _ = ep.make_inputs(cfg, world_size)
    router = ep.make_params(cfg)["router"]
    rows = []
    for cf in CAPACITY_FACTORS:
        c = replace(cfg, capacity_factor=cf)
        with torch.no_grad():
            n_dropped = sum(ep.dropped(ep.route(x[q], router, c)[2]) for q in range(world_size))
        total = world_size * cfg.tokens_per_rank * cfg.top_k
        slots = world_size * cfg.n_experts * ep.capacity(c)
        sent = ep.ep_bytes_per_rank(cfg.tokens_per_rank, cfg.dim, cfg.n_experts, cfg.top_k, cf, world_size, 4)
        rows.append((cf, ep.capacity(c), n_dropped, n_dropped / total, sent // ep.ALL_TO_ALLS_PER_STEP,
                     (slots - (total - n_dropped)) / slots))
    return rows


def traffic_rows(big=BIG, sizes=(2, 4, 8)):
    """Per p: (p, EP bytes per rank per layer and step, TP bytes, EP / TP, cf·k/p), bf16."""
    rows = []
    for p in sizes:
        n = big["tokens"] // p
        e = ep.ep_bytes_per_rank(n, big["dim"], big["n_experts"], big["top_k"], big["capacity_factor"], p)
        t = ep.tp_bytes_per_rank(big["tokens"], big["dim"], p)
        rows.append((p, e, t, e / t, big["capacity_factor"] * big["top_k"] / p))
    return rows


def run_demo6(cfg, world_size, out=print_wrapped):
    e, k, cf, n = cfg.n_experts, cfg.top_k, cfg.capacity_factor, cfg.tokens_per_rank
    print_header(f"演示 6：专家并行 expert parallelism——{e} 个专家的 MoE 层，top-{k}、容量因子 {cf:g}，"
                 f"分到 {world_size} 个 gloo 进程")
    out(f"层：路由器 Linear({cfg.dim}, {e})，每个专家 Linear({cfg.dim}, {cfg.ratio * cfg.dim}) → GELU → "
        f"Linear({cfg.ratio * cfg.dim}, {cfg.dim})（小 GPT 的宽度）。每个进程 {n} 个随机 token，自成一组；"
        f"每个专家每组最多收 ceil(cf·k·n/E) = {ep.capacity(cfg)} 个（容量 capacity），超出的丢掉（dropped）。"
        f"每个进程放 {e // world_size} 个专家：all-to-all 把 token 发给专家所在的进程，算完再 all-to-all 发回来。"
        "对照：一个进程按同样的组、同样的容量算。")
    r = check_expert_parallel(cfg, world_size)
    print_table(["最大差 vs 一个进程", "输出", "输入梯度", "路由器梯度", "专家权重梯度", "丢掉的", "每进程发 KB"],
                [("专家并行", f"{r['y']:.1e}", f"{r['x_grad']:.1e}", f"{r['router']:.1e}", f"{r['experts']:.1e}",
                  f"{r['dropped']} / {r['ref_dropped']}", f"{r['sent_bytes'][0] / 1e3:.1f}")])
    out("丢掉的 = 专家并行 / 一个进程里超出容量的 (token, 第几选择) 个数；每进程发 = 4 次 all-to-all（前向、反向各两次）"
        "每次发出 (p − 1)/p 个缓冲区 (E, 容量, C)，fp32。")

    print()
    out(f"容量因子 capacity factor 的取舍（同样的 {world_size} 组 token、同样的路由器；共 {world_size * n * k} 个分配）：")
    rows = capacity_rows(cfg, world_size)
    print_table(["容量因子", "容量", "丢掉", "占比", "空槽占比", "每次 all-to-all 每进程发 KB"],
                [(f"{c:g}", cap, d, f"{share:.1%}", f"{empty:.1%}", f"{sent / 1e3:.1f}")
                 for c, cap, d, share, sent, empty in rows])

    print()
    big = BIG
    out(f"真实大小的一层：C = {big['dim']}、E = {big['n_experts']}、top-{big['top_k']}、容量因子 "
        f"{big['capacity_factor']:g}（固定的设定，不随演示 6 的参数变），全局 {big['tokens']:,} 个 token 分给 p 张卡，bf16。"
        "专家并行每张卡放 E/p 个专家、"
        "处理 1/p 的 token；张量并行（第 4.9 节）每张卡处理全部 token、每个矩阵的 1/p，前向、反向各一次 all-reduce：")
    traffic = traffic_rows(big)
    print_table(["p", "专家并行每卡发 MB", "张量并行每卡发 MB", "专家 ÷ 张量", "cf·k/p"],
                [(p, f"{e_ / mm.MB:.1f}", f"{t / mm.MB:.1f}", f"{ratio:.3f}", f"{formula:.3f}")
                 for p, e_, t, ratio, formula in traffic])
    r.update(capacity=rows, traffic=traffic)
    return r


def demo6_observations(cfg, world_size, r, out=print_wrapped):
    ok = r["relative"] <= EP_RTOL
    print()
    out("观察 Observations（演示 6）：")
    out(f" 1. 专家分到 {world_size} 个进程以后，输出和所有梯度{'都和' if ok else '没有都和'}一个进程的一致（最大差是"
        f"各自最大值的 {r['relative']:.1e}，相对容差 {EP_RTOL:g}），丢掉的分配"
        f"{'也一样' if r['dropped'] == r['ref_dropped'] else '不一样'}（{r['dropped']} 个）。"
        "路由器在每个进程都有一份，它的梯度要 all-reduce；专家只在一个进程上，梯度不用通信。")
    rows = r["capacity"]
    none_dropped = [cf for cf, _, d, _, _, _ in rows if d == 0]
    first, last = rows[0], rows[-1]
    if first[1] == last[1]:
        trade = (f"表里每个容量因子的容量都是 {first[1]}（每组只有 {cfg.tokens_per_rank} 个 token，向上取整后一样），"
                 f"丢掉的分配都是 {first[3]:.1%}，每次 all-to-all 都发 {first[4] / 1e3:.1f} KB。")
    else:
        change = f"从 {first[3]:.1%} 降到 {last[3]:.1%}" if last[2] < first[2] else f"都是 {first[3]:.1%}"
        trade = (f"容量因子从 {first[0]:g} 到 {last[0]:g}，丢掉的分配{change}，每次 all-to-all 发的字节从 "
                 f"{first[4] / 1e3:.1f} KB 涨到 {last[4] / 1e3:.1f} KB（和容量成正比：空槽也要发，空槽占比从 "
                 f"{first[5]:.1%} 涨到 {last[5]:.1%}）")
        trade += (f"；这些输入上容量因子 {min(none_dropped):g} 起就一个不丢。" if none_dropped else
                  "；表里最大的容量因子也还在丢。")
    out(" 2. " + trade + "丢掉的分配这一层什么也不加，token 只靠残差连接往下走。")
    traffic = r["traffic"]
    big = BIG
    cfk = big["capacity_factor"] * big["top_k"]
    exact = all(abs(ratio - formula) <= 0.01 * formula for _, _, _, ratio, formula in traffic)
    fewer = [p for p, _, _, ratio, _ in traffic if ratio < 1]
    ratios = "，".join(f"p = {p} 时 {ratio:.3f}" for p, _, _, ratio, _ in traffic)
    if not fewer:
        where = f"表里的 p 都不比 cf·k = {cfk:g} 大，专家并行发得更多。"
    else:
        where = (f"p 比 cf·k = {cfk:g} 大时（表里 p = {'、'.join(map(str, fewer))}）专家并行发得更少，"
                 "按字节算更经得起机器之间的慢链路。")
    out(f" 3. 同样的全局 batch，专家并行每张卡发的字节和张量并行的比（{ratios}）"
        + ("就是 cf·k/p：每张卡只发自己那 1/p 的 token，每个 token 发 k 份、按容量补齐。" if exact else
           "和 cf·k/p 差了 1% 以上：容量向上取整的影响。")
        + where + "容量把每个专家的活固定成同样多的槽，各卡算得一样多；路由不均的代价是丢掉的分配和补齐的空槽（上表）。")
