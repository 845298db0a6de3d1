"""Code 4's demo 7, run and printed (lecture 9, §4.14): ring attention and Ulysses on gloo
ranks against the whole-sequence attention, the causal mask's load per rank under the
contiguous and zig-zag layouts, and their bytes per rank at a real size, with observations
worded from the numbers. torch is imported inside the functions that need it.
"""

import sys
import time

from lecture01.console import print_header, print_table, print_wrapped
from lecture09.parallel import context_parallel as cp
from lecture09.parallel import memory_model as mm
from lecture09.ranks import gloo_ranks

CP_RTOL = 5e-6          # relative to each quantity's largest value; see check_context_parallel
BIG = dict(seq_len=131072, n_embd=8192, n_head=64)      # table (c): a long-context layer
BIG_RANKS = (2, 4, 8, 16, 64, 128)
RUNS = (("ring", "contiguous"), ("ring", "zigzag"), ("ulysses", "contiguous"), ("ulysses", "zigzag"))


def check_context_parallel(case, world_size):
    """Each (method, layout) that applies, on real ranks, against `cp.reference`.

    Tolerance CP_RTOL, relative to the largest value of each quantity: the online softmax
    adds the blocks' exponentials in another order than one softmax over the row, and the
    weight gradients are summed over the ranks by all-reduce; float32 rounding then differs
    by ~1e-7 of the largest value (measured up to 3e-7 over p = 2, 3, 4 and both layouts).
    A block with the wrong positions' bias, or a missing block, moves outputs by ~1e-2 of it."""
    y, x_grad, grads = cp.reference(case)

    def rel(a, b):
        return (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30)

    out, runs = {}, []
    for method, layout in RUNS:
        try:
            cp.check_case(case, world_size, layout, method)
            runs.append((method, layout))
        except ValueError as e:
            out[(method, layout)] = {"skipped_because": str(e)}
    t0 = time.perf_counter()
    all_ranks = gloo_ranks.run_ranks(cp.cp_runs_worker, world_size, args=(case, tuple(runs)),
                                     timeout_s=120 + case.seq_len / 10)
    print(f"（演示 7 的 {world_size} 个进程用时 {time.perf_counter() - t0:.1f} 秒）", file=sys.stderr)
    for method, layout in runs:
        ranks = [r[(method, layout)] for r in all_ranks]
        got = cp.assemble(ranks, case)
        out[(method, layout)] = {"y": rel(got["y"], y), "x_grad": rel(got["x_grad"], x_grad),
                                 "grads": max(rel(got["grads"][n], grads[n]) for n in grads),
                                 "grads_agree": got["grads_agree"], "blocks": [r["blocks"] for r in ranks],
                                 "skipped": [r["skipped"] for r in ranks]}
    return out


def load_rows(seq_len, world_size):
    """Per layout: (layout, unmasked (query, key) pairs per rank, max / mean)."""
    rows = []
    for layout in cp.LAYOUTS:
        pairs = [cp.unmasked_pairs(layout, r, world_size, seq_len) for r in range(world_size)]
        rows.append((layout, pairs, max(pairs) / (sum(pairs) / world_size)))
    return rows


def bytes_rows(big=BIG, sizes=BIG_RANKS):
    """Per p: (p, ring bytes per rank, Ulysses bytes per rank or None where p does not divide the heads)."""
    rows = []
    for p in sizes:
        ring = cp.ring_bytes_per_rank(big["seq_len"], big["n_embd"], p)
        uly = cp.ulysses_bytes_per_rank(big["seq_len"], big["n_embd"], p) if big["n_head"] % p == 0 else None
        rows.append((p, ring, uly))
    return rows


LAYOUT_NAMES = {"contiguous": "连续切 contiguous", "zigzag": "之字形 zig-zag"}
METHOD_NAMES = {"ring": "环形注意力 ring", "ulysses": "Ulysses"}


def run_demo7(case, world_size, out=print_wrapped):
    p, t = world_size, case.seq_len
    print_header(f"演示 7：上下文并行 context parallelism——长度 {t} 的序列分到 {p} 个 gloo 进程：环形注意力和 Ulysses")
    out(f"层：第 1 讲的注意力层（C = {case.n_embd}、{case.n_head} 个头、ALiBi、因果掩码），batch {case.batch}；"
        f"连续切：进程 r 拿第 r 段；之字形：序列切成 2p = {2 * p} 块，进程 r 拿第 r 块和第 {2 * p - 1}−r 块。"
        "环形：K、V 沿环传 p − 1 次，每次用在线 softmax 加进来，整块都在未来的跳过；Ulysses：一次 all-to-all "
        "换成「全部位置、n_head/p 个头」，算完再换回来。对照：一个进程算整个序列。")
    r = check_context_parallel(case, world_size)
    rows = []
    for method, layout in RUNS:
        s = r[(method, layout)]
        name = f"{METHOD_NAMES[method]} · {LAYOUT_NAMES[layout]}"
        if "skipped_because" in s:
            rows.append((name, "—", "—", "—", "不适用", "—"))
            continue
        rows.append((name, f"{s['y']:.1e}", f"{s['x_grad']:.1e}", f"{s['grads']:.1e}",
                     " / ".join(map(str, s["blocks"])) if method == "ring" else "—",
                     " / ".join(map(str, s["skipped"])) if method == "ring" else "—"))
    print_table(["相对最大差 vs 一个进程", "输出", "输入梯度", "权重梯度", "各进程算的块", "跳过的块"], rows)
    if any("skipped_because" in v for v in r.values()):
        out(f"Ulysses 不适用：{case.n_head} 个头不能平分给 {p} 个进程。")

    print()
    out(f"因果掩码下每个进程要算的 (query, key) 对（掩掉的不算；长度 {t}、{p} 个进程）：")
    loads = load_rows(t, p)
    print_table(["切法"] + [f"进程 {k}" for k in range(p)] + ["最多 ÷ 平均"],
                [(LAYOUT_NAMES[layout], *pairs, f"{ratio:.2f}") for layout, pairs, ratio in loads])

    print()
    big = BIG
    out(f"真实大小的一层：长度 {big['seq_len']:,}、C = {big['n_embd']}、{big['n_head']} 个头、bf16，每个进程每层前向加反向发的"
        "字节：环形 = 2·(p − 1) 次传 K、V（反向传回它们的梯度）；Ulysses = 前向、反向各 4 次 all-to-all（q、k、v 和输出）：")
    sizes = bytes_rows(big)
    print_table(["p", "环形每进程发 MB", "Ulysses 每进程发 MB", "环形 ÷ Ulysses"],
                [(q, f"{ring / mm.MB:,.1f}", "—" if uly is None else f"{uly / mm.MB:,.1f}",
                  "—" if uly is None else f"{ring / uly:.1f}") for q, ring, uly in sizes])
    return {"checks": r, "loads": loads, "bytes": sizes}


def demo7_observations(case, world_size, r, out=print_wrapped):
    p = world_size
    done = {k: v for k, v in r["checks"].items() if "skipped_because" not in v}
    worst = max(max(v["y"], v["x_grad"], v["grads"]) for v in done.values())
    ok = worst <= CP_RTOL and all(v["grads_agree"] for v in done.values())
    names = ("环形注意力和 Ulysses 在两种切法下" if len(done) == len(RUNS) else
             "、".join(f"{METHOD_NAMES[m]}（{LAYOUT_NAMES[lay]}）" for m, lay in done) + " ")
    print()
    out("观察 Observations（演示 7）：")
    missing = "" if len(done) == len(RUNS) else (f"Ulysses 这次没有跑：{case.n_head} 个头不能平分给 {p} 个进程"
                                                 "（它按头分工，p 要整除头数；环形注意力没有这个限制）。")
    out(f" 1. {names}的输出和所有梯度{'都和' if ok else '没有都和'}一个进程算整个序列的一致（最大差是各自最大值的 "
        f"{worst:.1e}，相对容差 {CP_RTOL:g}）。" + missing)
    loads = {layout: (pairs, ratio) for layout, pairs, ratio in r["loads"]}
    cont, zig = loads["contiguous"], loads["zigzag"]
    balanced = max(zig[0]) == min(zig[0])
    ring = r["checks"].get(("ring", "contiguous"), {})
    skipped = f"环形注意力里进程 0 跳过了 {ring['skipped'][0]} 个整块都在未来的块。" if ring.get("skipped") else ""
    out(f" 2. 因果掩码让后面的位置要看的更多：连续切时最后一个进程算 {cont[0][-1]:,} 对，进程 0 只算 {cont[0][0]:,} 对，"
        f"最多是平均的 {cont[1]:.2f} 倍。{skipped}之字形让每个进程拿一块靠前的、一块靠后的，"
        + (f"每个进程都是 {zig[0][0]:,} 对。" if balanced else f"最多是平均的 {zig[1]:.2f} 倍。"))
    sizes = [(q, ring_b, uly) for q, ring_b, uly in r["bytes"] if uly is not None]
    ratios = [ring_b / uly for _, ring_b, uly in sizes]
    halves = all(abs(x - q / 2) < 1e-9 for (q, _, _), x in zip(sizes, ratios))
    over = [q for q, _, uly in r["bytes"] if uly is None]
    out(f" 3. 真实大小时环形每个进程发的字节是 Ulysses 的 {ratios[0]:g} 倍（p = {sizes[0][0]}）到 {ratios[-1]:g} 倍"
        f"（p = {sizes[-1][0]}）"
        + ("，正好是 p/2：环形每个进程把自己的 K、V 传 p − 1 次，Ulysses 的每次 all-to-all 只发出一个 T/p 长的"
           "张量的 (p − 1)/p" if halves else "") + "。"
        + (f"但 Ulysses 按头分工，p 不能超过头数（表里 p = {'、'.join(map(str, over))} 做不了），环形注意力只要序列够长就能再分。"
           if over else ""))
