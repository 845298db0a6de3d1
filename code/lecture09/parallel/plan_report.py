"""Code 04's demo 4: the 3D-parallelism planner's table and observations, and the planner
held against a published run, Megatron-LM's GPT-3 175B on 1024 A100s (Narayanan et al.
2021): a table that changes one assumption per row until it reaches the published seconds
per iteration; then the planner with context and expert parallelism added (a table of the
best plan at each CP and EP size, and which of them it chooses). Notes §4.16-§4.18."""

from dataclasses import replace

from lecture01.console import print_header, print_table, print_wrapped
from lecture09.parallel import memory_model as mm
from lecture09.parallel import parallel_plan


ZERO_WORDS = {0: "不用 ZeRO（--zero-stage 0），优化器状态也不分", 1: "ZeRO-1 只再分优化器状态",
              2: "ZeRO-2 再分优化器状态和梯度", 3: "ZeRO-3 连参数也分，但每层用时要先收齐"}
SMALL_BUBBLE = 0.2      # below this share of the iteration, demo 4 calls the bubbles small


def bubble_sentence(pipelined, global_batch):
    """Demo 4: how big the bubbles of the plans that fit are, from their own figures."""
    low, high = min(pipelined, key=lambda c: c.bubble), max(pipelined, key=lambda c: c.bubble)
    if high.bubble < SMALL_BUBBLE:
        return (f"放得下的几种流水线组合气泡都不大（{low.bubble:.1%}–{high.bubble:.1%}）：batch {global_batch} "
                f"切成的 micro-batch 数 m = batch ÷ DP 都比 PP 大得多。")
    return (f"放得下的几种流水线组合气泡从 {low.bubble:.1%} 到 {high.bubble:.1%}：最大的 {high.plan} 只有 "
            f"m = {high.n_micro} 个 micro-batch、PP = {high.plan.pp}，气泡 (PP−1)/(m+PP−1)：batch 越小、DP 越大，"
            "m 就越少，气泡越大。")


def candidate_plans(setup):
    plans = []
    for pp, tp in setup.candidates:
        if setup.n_gpus % (pp * tp) == 0:
            plans.append(parallel_plan.Plan(setup.n_gpus // (pp * tp), pp, tp))
    return plans


def run_demo4(setup, out=print_wrapped):
    model = plan_model(setup)
    cluster = replace(parallel_plan.Cluster(), n_gpus=setup.n_gpus)
    print_header(f"演示 4：3D 并行规划器——{model.name} 模型、{cluster.n_gpus} 张 A100（每台机器 {cluster.gpus_per_node} 张），"
                 f"batch {setup.global_batch} × {model.seq_len} token")
    out(f"(DP, PP, TP) = (数据并行, 流水线并行, 张量并行)，DP × PP × TP = {cluster.n_gpus}；micro-batch {setup.micro_batch}，"
        f"1F1B；ZeRO-{setup.zero_stage} 分片在数据并行组里；激活用{ {'none': '不重算', 'selective': '选择性重算', 'full': '全重算'}[setup.recompute] }"
        f"（Korthikanti et al. 2022）；显存 = 模型状态 + 阶段 0 的激活，一张卡 {cluster.gpu_memory_bytes / mm.GB:g} GB。")
    if parallel_plan.is_moe(model):
        out(f"{model.name} 是混合专家模型 MoE：{model.n_params / 1e9:.1f}B 参数，其中专家 {model.n_expert_params / 1e9:.1f}B；"
            f"每层 {model.n_experts} 个专家、每个 token 去 {model.top_k} 个，只用到 {model.n_active_params / 1e9:.1f}B；"
            f"容量因子 {model.capacity_factor:g}（我们定的）。")
    out("时间 = 计算 ÷ (1 − 气泡) + TP + PP + DP 通信（α–β 模型，通信和计算不重叠：偏悲观）；计算按 6·N·D·(1 + s/6h)，"
        "s/6h 是注意力的 QKᵀ 和 AV" + ("（N 是每个 token 用到的参数）" if parallel_plan.is_moe(model) else "") +
        "；最后一列是另一头的界："
        "DP 的 all-reduce 完全藏在反向后面（DDP 分桶就是为此），TP、PP 仍不重叠。")
    rows, costs, invalid = [], {}, []
    plans = candidate_plans(setup)
    best, best_hidden = (parallel_plan.best_plan(model, cluster, setup.global_batch, setup.micro_batch,
                                                 setup.zero_stage, setup.recompute, hide_dp=hide)
                         for hide in (False, True))
    for extra in (best, best_hidden):
        if extra is not None and extra.plan not in plans:
            plans.append(extra.plan)
    for plan in plans:
        reason = parallel_plan.why_invalid(model, cluster, plan, setup.global_batch, setup.micro_batch)
        if reason:
            invalid.append(f"{plan}：{reason}")
            continue
        c = parallel_plan.plan_cost(model, cluster, plan, setup.global_batch, setup.micro_batch, setup.zero_stage,
                                    setup.recompute)
        costs[plan] = c
        rows.append((str(plan), c.n_micro, f"{c.state_bytes / mm.GB:.1f} + {c.activation_bytes / mm.GB:.1f}",
                     f"{c.bubble:.1%}", f"{c.pipeline_s:.2f}", f"{c.tp_s:.2f}", f"{c.pp_s:.2f}", f"{c.dp_s:.2f}",
                     f"{c.iteration_s:.2f}" if c.fits else "放不下",
                     f"{c.iteration_hidden_dp_s:.2f}" if c.fits else "放不下"))
    if rows:
        print_table(["(DP, PP, TP)", "m", "显存 GB 状态+激活", "气泡", "计算 s", "TP s", "PP s", "DP s", "每次迭代 s",
                     "DP 藏起 s"], rows)
    if best is not None:
        out(f"最好 best（放得下、估计时间最短）：不重叠时 {best.plan}，{best.iteration_s:.2f} s；DP 藏起来时 "
            f"{best_hidden.plan}，{best_hidden.iteration_hidden_dp_s:.2f} s。")
    if invalid:
        out("不可行 infeasible：" + "；".join(invalid))
    n_valid = sum(1 for plan in parallel_plan.all_plans(cluster)
                  if not parallel_plan.why_invalid(model, cluster, plan, setup.global_batch, setup.micro_batch))
    out(f"（'最好'在全部 {n_valid} 种可行的 (DP, PP, TP) 里找：放得下、估计时间最短。）")
    comparison = published_comparison(setup, model, cluster)
    for line in published_lines(comparison, model, cluster):
        out(line)
    if comparison:
        print_table(["一次换掉一个假设 one assumption at a time", "每次迭代 s"],
                    [(step, f"{s:.2f}") for step, s in reconciliation_rows(model, cluster, parallel_plan.MEGATRON_175B,
                                                                           setup.zero_stage)])
    dims = dimension_table(setup, model, cluster, out)
    result = {"model": model, "cluster": cluster, "costs": costs, "best": best, "best_hidden": best_hidden,
              "plans": plans, "published": comparison is not None, "dims": dims}
    if comparison:
        result["published_seconds"] = comparison["seconds"]
        result["planned"] = {r: c.iteration_s for r, c in comparison["ours"].items()}
    return result


def overlap_sentence(b, h):
    """Demo 4: whether the overlap assumption decides the best plan (b: not overlapped, h: DP hidden)."""
    if b.plan == h.plan:
        return f"DP 的 all-reduce 完全藏起来时最好的还是 {b.plan}（{h.iteration_hidden_dp_s:.2f} s）：这个假设不改变选择。"
    return (f"DP 的 all-reduce 完全藏在反向后面时，最好的变成 {h.plan}（{h.iteration_hidden_dp_s:.2f} s；不重叠时它要 "
            f"{h.iteration_s:.2f} s）。和 {b.plan} 比：气泡 {b.bubble:.1%} → {h.bubble:.1%}，PP 通信 {b.pp_s:.2f} → "
            f"{h.pp_s:.2f} s，DP 通信 {b.dp_s:.2f} → {h.dp_s:.2f} s。两种排法只差 DP 这一项，所以是这个假设决定了选哪一个；"
            "真实系统在两头之间，要实测。")


def demo4_observations(setup, r, out=print_wrapped):
    costs, best, cluster = r["costs"], r["best"], r["cluster"]
    print()
    out("观察 Observations（演示 4）：")
    numbers = iter(range(1, 10))

    def item(text):
        out(f" {next(numbers)}. " + text)

    too_big = [c for c in costs.values() if not c.fits]
    if too_big:
        c = max(too_big, key=lambda c: c.memory_bytes)
        item(f"{c.plan} 放不下：每卡 {c.memory_bytes / mm.GB:.1f} GB > {cluster.gpu_memory_bytes / mm.GB:g} GB。"
             f"模型状态按 1/(PP × TP) 分，{ZERO_WORDS[setup.zero_stage]}；模型越大，越需要把模型本身切开。")
    in_node = [c for c in costs.values() if c.fits and 1 < c.plan.tp <= cluster.gpus_per_node]
    across = [c for c in costs.values() if c.plan.tp > cluster.gpus_per_node]
    if in_node and across:
        b = min(across, key=lambda c: c.tp_s)
        same_pp = [c for c in in_node if c.plan.pp == b.plan.pp]
        a = min(same_pp or in_node, key=lambda c: c.tp_s)
        item(f"张量并行跨机器很贵：{b.plan} 的 TP 通信 {b.tp_s:.2f} 秒，{a.plan} 在一台机器里只要 {a.tp_s:.2f} 秒。")
    pipelined = [c for c in costs.values() if c.fits and c.plan.pp > 1]
    if pipelined:
        same = {round(c.activation_bytes / mm.GB, 6) for c in pipelined
                if c.n_micro >= c.plan.pp and c.plan.tp == pipelined[0].plan.tp}
        item(bubble_sentence(pipelined, setup.global_batch) + "m ≥ PP 时，1F1B 的阶段 0 存 PP 个 micro-batch、每个 L/PP 层，"
             "加起来正好 L 层：激活显存和 PP 无关" + ("（表里 TP 相同的几行激活都一样）。" if len(same) == 1 else "。"))
    if best is not None:
        item(f"不重叠时估计最快的是 {best.plan}：每卡 {best.memory_bytes / mm.GB:.1f} GB，气泡 {best.bubble:.1%}，"
             f"每次迭代约 {best.iteration_s:.2f} 秒，其中计算 {best.pipeline_s:.2f} 秒。" + overlap_sentence(best, r["best_hidden"]))
    else:
        item("没有一种组合放得下：试试 --recompute full、更大的 --plan-gpus 或更小的 --global-batch。")
    if r.get("published"):
        item(published_sentence(r["published_seconds"], r["planned"]))
    item(dimension_sentence(r["dims"], r["model"], setup.micro_batch))


def plan_model(setup):
    """The model of --plan-model, at --plan-seq-len when given."""
    model = parallel_plan.PLAN_MODELS[setup.model]
    return replace(model, seq_len=setup.seq_len) if setup.seq_len else model


MAX_ROW_SIZE = 16       # the table shows CP and EP sizes up to this; the search goes further


def dimension_table(setup, model, cluster, out=print_wrapped):
    """Demo 4's second table: the best plan with CP (and, for an MoE, EP) fixed at each size,
    and the best over all of them. Returns {"best3", "best", "rows": [(label, cost or None)]}."""
    moe = parallel_plan.is_moe(model)
    plans = parallel_plan.all_plans(cluster, model, with_cp=True, with_ep=moe)

    def best(keep):
        return parallel_plan.best_plan(model, cluster, setup.global_batch, setup.micro_batch, setup.zero_stage,
                                       setup.recompute, plans=[p for p in plans if keep(p)])

    overall = best(lambda p: True)
    rows = [(f"CP {c}", best(lambda p, c=c: p.cp == c)) for c in sorted({p.cp for p in plans})
            if c <= MAX_ROW_SIZE or (overall and overall.plan.cp == c)]
    if moe:
        rows += [(f"EP {e}", best(lambda p, e=e: p.ep == e)) for e in sorted({p.ep for p in plans}) if e > 1]
    best3 = best(lambda p: p.cp == 1 and p.ep == 1)
    print()
    what = "上下文并行 CP 和专家并行 EP" if moe else "上下文并行 CP（稠密模型没有专家，不看 EP）"
    out(f"加上{what}（第 4.13、4.14 节）：CP 把序列切成 CP 段，和 DP、PP、TP 相乘凑满 {cluster.n_gpus} 张卡"
        + ("；EP 从 DP 里分出来，每张卡放 1/EP 的专家" if moe else "")
        + f"。每一行把 CP（或 EP）固定在这个大小、其余随便排，取最好的（CP 列到 {MAX_ROW_SIZE}，搜索更大的也看）；"
        "CP 用环形注意力（ring attention）、传 K/V，每层每个 micro-batch 绕环 3 遍（前向 K/V，反向 K/V 和它们的梯度）"
        + ("；EP 每层 4 次 all-to-all" if moe else "") + "；通信都不重叠。")
    table = []
    for label, c in rows:
        if c is None:
            table.append((label, "没有放得下的") + ("",) * 7)
            continue
        table.append((label, str(c.plan), f"{c.memory_bytes / mm.GB:.1f}", f"{c.bubble:.1%}", f"{c.tp_s:.2f}",
                      f"{c.cp_s:.2f}", f"{c.ep_s:.2f}", f"{c.dp_s:.2f}", f"{c.iteration_s:.2f}"))
    headers = ["固定 fixed", "最好的排法 (DP, PP, TP)", "显存 GB", "气泡", "TP s", "CP s", "EP s", "DP s", "每次迭代 s"]
    if not moe:                 # a dense model: no EP column
        headers, table = headers[:6] + headers[7:], [row[:6] + row[7:] for row in table]
    print_table(headers, table)
    n_valid = sum(1 for p in plans if not parallel_plan.why_invalid(model, cluster, p, setup.global_batch,
                                                                     setup.micro_batch))
    if overall is None:
        out(f"在全部 {n_valid} 种可行的排法里也没有一种放得下。")
    else:
        out(f"在全部 {n_valid} 种可行的排法里最好的是 {overall.plan}，{overall.iteration_s:.2f} s"
            + (f"；只用 (DP, PP, TP) 最好的是 {best3.plan}，{best3.iteration_s:.2f} s。" if best3 else
               "；只用 (DP, PP, TP) 没有一种放得下。"))
    return {"best3": best3, "best": overall, "rows": rows, "moe": moe}


TERMS = (("计算", "pipeline_s"), ("TP", "tp_s"), ("CP", "cp_s"), ("EP", "ep_s"), ("PP", "pp_s"),
         ("DP", "dp_s"))


def term_changes(a, b):
    """The time terms that differ between two plans' costs, in words: 'TP 1.68 → 0.24 s'."""
    parts = [f"{name} {getattr(a, key):.2f} → {getattr(b, key):.2f}" for name, key in TERMS
             if round(getattr(a, key), 2) != round(getattr(b, key), 2)]
    return "，".join(parts) + " s" if parts else ""


def dimension_sentence(dims, model, micro_batch):
    """Demo 4's observation on CP and EP: which the planner chooses and what moved, from the
    figures of the second table."""
    best3, best, moe = dims["best3"], dims["best"], dims["moe"]
    names = ["CP", "EP"] if moe else ["CP"]
    if best is None:
        return f"加上 {'、'.join(names)} 也没有一种放得下：试试 --recompute full 或更多的卡。"
    chosen = [d for d in names if getattr(best.plan, d.lower()) > 1]
    if best3 is None:
        text = (f"只用 (DP, PP, TP) 放不下，加上 {'、'.join(chosen)} 才放得下：{best.plan} 每卡 "
                f"{best.memory_bytes / mm.GB:.1f} GB。" + cp_memory_words(best, model))
    elif chosen:
        text = (f"规划器选了 {'、'.join(chosen)}：{best.plan} {best.iteration_s:.2f} s，比只用 (DP, PP, TP) 最好的 "
                f"{best3.plan} {best3.iteration_s:.2f} s 快 {1 - best.iteration_s / best3.iteration_s:.1%}。"
                f"逐项：{term_changes(best3, best)}；显存 {best3.memory_bytes / mm.GB:.1f} → "
                f"{best.memory_bytes / mm.GB:.1f} GB。" + cp_memory_words(best, model))
    else:
        text = ""
    left_out = [d for d in names if d not in chosen]
    rivals = [c for _, c in dims["rows"] if c is not None and any(getattr(c.plan, d.lower()) > 1 for d in left_out)]
    if left_out and rivals:
        r = min(rivals, key=lambda c: c.iteration_s)
        digits = 2 if f"{r.iteration_s:.2f}" != f"{best.iteration_s:.2f}" else 4
        text += (f"{'、'.join(left_out)} 没被选上：带上{'它们' if len(left_out) > 1 else '它'}最好的 {r.plan} 要 "
                 f"{r.iteration_s:.{digits}f} s，比 {best.plan} 的 {best.iteration_s:.{digits}f} s 慢。"
                 f"逐项：{term_changes(best, r)}。")
    if not text:                # one GPU, or no other size divides the cluster and the sequence
        text = f"{'、'.join(names)} 在这里没有别的可行大小：{best.plan} 就是最好的。"
    if best.plan.cp > 1:
        text += (f"规划器的利用率是固定的，不管每卡每个 micro-batch 剩多少个位置（这里 {micro_batch} × "
                 f"{model.seq_len // best.plan.cp}）：序列切短以后 GPU 还跑不跑得满，规划器不知道，要实测。")
    return text


def cp_memory_words(c, model):
    if c.plan.cp == 1:
        return ""
    return (f"CP {c.plan.cp} 让每卡只存 {model.seq_len} ÷ {c.plan.cp} = {model.seq_len // c.plan.cp} 个位置的激活"
            f"（这里 {c.activation_bytes / mm.GB:.1f} GB）。")


def published_comparison(setup, model, cluster):
    """Megatron-LM's own run and the planner's two estimates of its layout, when the flags are
    its setting (model, GPUs, batch, micro-batch); None otherwise."""
    run = parallel_plan.MEGATRON_175B
    if (setup.model, cluster.n_gpus, setup.global_batch, setup.micro_batch, model.seq_len) != (
            run.model, 1024, run.global_batch, run.micro_batch, mm.MODELS[run.model].seq_len):
        return None
    seconds, days, mfu = parallel_plan.published_figures(run, model, cluster.n_gpus, cluster.peak_flops)
    ours = {r: parallel_plan.plan_cost(model, cluster, run.plan, run.global_batch, run.micro_batch, setup.zero_stage, r)
            for r in ("selective", "full")}
    return {"seconds": seconds, "days": days, "mfu": mfu, "ours": ours}


def published_lines(comparison, model, cluster):
    """Demo 4's lines about the published run, or one line saying which flags it needs."""
    run = parallel_plan.MEGATRON_175B
    if comparison is None:
        return [f"（发表的运行只有一个可以对照：{run.model}、1024 张卡、batch {run.global_batch}、序列 "
                f"{mm.MODELS[run.model].seq_len}，即默认设置。）"]
    seconds, days, mfu, ours = comparison["seconds"], comparison["days"], comparison["mfu"], comparison["ours"]
    hardware = run.tflops_per_gpu * 1e12 / cluster.peak_flops
    return ["",
            f"对照发表的运行 published run（Narayanan et al. 2021，表 1）：Megatron-LM 的 GPT-3 175B 用 {run.plan}、"
            f"micro-batch {run.micro_batch}、全重算，每卡 {run.tflops_per_gpu:g} TFLOP/s（按论文自己含重算的 FLOP 计数，"
            f"峰值的 {hardware:.1%}）。折算成每次迭代 {seconds:.2f} 秒、{model.train_tokens / 1e9:g}B token 约 {days:.1f} 天；"
            f"只按 6·N·D 计的模型 FLOPs 利用率（MFU）是 {mfu:.1%}，规划器假设 {cluster.utilisation:.0%}。"
            f"规划器的同一排法：选择性重算 {ours['selective'].iteration_s:.2f} 秒，全重算 {ours['full'].iteration_s:.2f} 秒"
            f"（通信不重叠；DP 藏起时 {ours['full'].iteration_hidden_dp_s:.2f} 秒）。"
            "全重算的估计和发表的差在哪里，下表每一行在上一行上只换掉一个假设："]


def reconciliation_rows(model, cluster, run, zero_stage):
    """[(step, seconds)] from the planner's full-recompute estimate of the published layout to
    the published run's seconds per iteration, one assumption changed per step: the
    utilisation (ours 40% of the busy compute; theirs, achieved over the whole iteration),
    then the bubble and the communication (inside their end-to-end throughput already),
    then their FLOP count (12·l·h² for N, and the output layer; both counts have the
    attention's s/(6h))."""
    seconds, _, _ = parallel_plan.published_figures(run, model, cluster.n_gpus, cluster.peak_flops)
    hardware = run.tflops_per_gpu * 1e12 / cluster.peak_flops
    ours = parallel_plan.plan_cost(model, cluster, run.plan, run.global_batch, run.micro_batch, zero_stage, "full")
    theirs = parallel_plan.plan_cost(model, replace(cluster, utilisation=hardware), run.plan, run.global_batch,
                                     run.micro_batch, zero_stage, "full")
    ideal = theirs.pipeline_s * (1 - theirs.bubble)                       # 8·N·tokens at their utilisation
    count = parallel_plan.megatron_flops_per_iteration(model, run.global_batch, run.vocab) / (
        8 * model.n_params * run.global_batch * model.seq_len * (1 + model.seq_len / (6 * model.hidden)))
    return [(f"规划器，全重算（峰值的 {cluster.utilisation:.0%}，加上气泡和不重叠的通信）", ours.iteration_s),
            (f"利用率换成发表的 {hardware:.1%}", theirs.iteration_s),
            ("再去掉气泡和通信（发表的吞吐是整次迭代量的，已经含着它们）", ideal),
            (f"再换成论文的 FLOP 计数（参数按 12·l·h²、加上输出层，× {count:.4f}）", ideal * count),
            ("发表的运行 published", seconds)]


def published_sentence(published_s, planned):
    """Demo 4's last observation: the planner's estimates of the published layout against the
    published seconds ({recompute: seconds}), and which of them only looks close."""
    sel, full = planned["selective"], planned["full"]
    close = abs(sel - published_s) / published_s <= 0.05
    text = (f"发表的运行每次迭代 {published_s:.2f} 秒，规划器对同一排法的全重算估计 {full:.2f} 秒"
            f"（{'慢' if full > published_s else '快'} {abs(full / published_s - 1):.0%}）。")
    if close:
        text += (f"选择性重算的 {sel:.2f} 秒离它更近，但发表的运行用的是全重算：这是两处偏差碰巧相抵"
                 "（规划器少算了重算的 FLOPs，又把利用率、气泡和通信都算得偏悲观），上表一步一步拆开了。")
    else:
        text += "上表一步一步拆开了这个差。"
    return text
