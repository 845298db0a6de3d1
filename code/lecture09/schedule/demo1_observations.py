"""Demo 1 of code 5, in words: observations whose every number and comparison comes from
the run's own figures (a demo1_tables.Demo1Result), with their conditions explicit (a
layout that does not fit, a search that reached the optimum or not). Lecture 9, §5.5.
"""

import statistics

from lecture01.console import print_wrapped
from lecture09.schedule import schedule_study
from lecture09.schedule.demo1_tables import _pct, method_label, per_device_bytes
from lecture09.schedule.hand_layouts import layout_stats


def _hand_best(inst):
    """(name, cost) of the cheaper hand layout that fits, or (None, None)."""
    fits = [(inst.methods[n].cost, n) for n in schedule_study.HAND_LAYOUTS if inst.methods[n].cost is not None]
    return (min(fits)[1], min(fits)[0]) if fits else (None, None)


def _count_hits(inst, name):
    return sum(inst.reaches_optimum(c) for c in inst.methods[name].runs)


def demo1_observations(setup, r, out=print_wrapped):
    """Observations whose every number and comparison comes from this run's figures (r: a
    Demo1Result); methods are found by name."""
    main, opt = r.main, r.main.optimum
    m = main.methods
    hand_pp, hand_dp = m["pipelines_in_regions"].cost, m["dp_groups_in_regions"].cost
    cross_links = statistics.mean(1 - s["pipeline_links_within_region"] / s["pipeline_links"] for s in main.random_stats)
    cross_groups = statistics.mean(1 - s["dp_groups_within_region"] / s["dp_groups"] for s in main.random_stats)
    out("\n观察 Observations（演示 1）：")
    out(f" 1. 随机分配平均 {m['random_mean'].cost:.2f} 秒：平均 {cross_links:.0%} 的流水线边、{cross_groups:.0%} 的数据并行组跨了地区，"
        f"每一步都被最慢的跨地区链路拖住（代价取的是最慢的那一组 / 那一条边）。")
    dp_bytes, pp_bytes, chain_bytes = per_device_bytes(setup, setup.act_bytes)
    grad, act = setup.stage_param_bytes, setup.act_bytes
    if hand_pp is not None and hand_dp is not None:
        winner, loser = ("流水线", "数据并行") if hand_pp < hand_dp else ("数据并行组", "流水线")
        spread = max(hand_pp, hand_dp) / min(hand_pp, hand_dp)
        how_far = "差很多" if spread >= 1.5 else ("差一些" if spread >= 1.1 else "差不多")
        which = ("两种一样快。" if hand_pp == hand_dp else f"把{winner}留在地区内、让{loser}跨地区更好。")
        out(f" 2. 两种手工分配{how_far}：{hand_pp:.2f} 秒（流水线在地区内）对 {hand_dp:.2f} 秒（数据并行组在地区内）。"
            + which + optimum_versus_hand(setup, main, r.geo))
    elif hand_pp is not None or hand_dp is not None:
        only, missing = (("流水线在地区内", "整个数据并行组") if hand_pp is not None else ("数据并行组在地区内", "整条流水线"))
        c = hand_pp if hand_pp is not None else hand_dp
        if opt.exact:
            verdict = ("它就是最优的。" if main.reaches_optimum(c) else
                       f"它比最优的 {opt.cost:.2f} 秒慢 {(c / opt.cost - 1) * 100:.1f}%。")
        else:
            verdict = f"它比下界 {opt.cost:.2f} 秒高 {(c / opt.cost - 1) * 100:.1f}%。"
        out(f" 2. 这个网络的地区放不下{missing}，只能比较'{only}'这一种手工分配：{c:.2f} 秒；{verdict}")
    else:
        out(" 2. 这个网络的地区既放不下整条流水线，也放不下整个数据并行组：两种手工分配都用不上。")
    heavier = "流水线" if pp_bytes > dp_bytes else "数据并行"
    out(f"    每张卡每次迭代发出的字节：数据并行 {dp_bytes / 1e9:.2f} GB（Eq. 2：给 {setup.n_replicas - 1} 个同伴"
        f"各发两次 1/{setup.n_replicas} 份梯度，2 × {setup.n_replicas - 1}/{setup.n_replicas} × {grad / 1e9:.2f} GB），"
        f"流水线中间阶段的卡 {pp_bytes / 1e9:.2f} GB——{heavier}更多。一个副本在一个切口的激活（{act / 1e9:.2f} GB）"
        f"{'比' if act > grad else '不比'}一个阶段的梯度（{grad / 1e9:.2f} GB）大；而且一个副本的 "
        f"{setup.n_stages - 1} 个切口 × 2 个方向一个接一个相加（{chain_bytes / 1e9:.1f} GB），"
        f"{setup.n_stages} 个数据并行组却同时进行（取最大）。")
    out("    哪种通信更重取决于 batch、模型大小和切法——所以要用代价模型去算，而不是凭直觉。")
    local_search_observation(setup, main, out)
    genetic_observation(setup, r, out)
    optimum_observation(setup, r, out)
    end_to_end_observation(setup, r, out)


def local_search_observation(setup, main, out):
    m, c = main.methods, main.census
    strict, sideways = m["strict"], m["sideways"]
    lower, equal, higher = c.cross_region
    out(f" 3. 局部搜索不知道'地区'，只会交换两张卡。严格下降的 {setup.restarts} 次重启停在 "
        f"{min(strict.runs):.2f}–{max(strict.runs):.2f} 秒。在它最好的那个分配上把全部 {c.n_swaps} 个交换都试一遍："
        f"同一地区内的 {sum(c.same_region)} 个" + ("代价全都不变——同一地区的卡可以互换，这种交换什么也没改"
                                                 if c.same_region[0] == c.same_region[2] == 0 else
                                                 f"里 {c.same_region[0]} 个更好、{c.same_region[2]} 个更差")
        + f"；跨地区的 {sum(c.cross_region)} 个：{lower} 个更好、{equal} 个不变、{higher} 个更差。")
    if lower == 0 and equal == 0:
        stop = "所以严格下降停在一个真正的局部最小（local minimum）上：没有平台，每一个真正改变分配的交换都更差。"
    elif lower == 0:
        stop = f"所以严格下降停在局部最小的平台上：没有更好的交换，只有 {equal} 个跨地区的交换持平。"
    else:
        stop = f"还有 {lower} 个跨地区交换能降低代价：严格下降是提议次数用完了，并没有真正停住。"
    same_budget = all(a == b for a, b in zip(main.strict_long_runs, strict.runs))
    if setup.sideways_iters <= setup.strict_iters:
        budget = (f"两种局部搜索每次的提议数：严格 {setup.strict_iters:,}、持平 {setup.sideways_iters:,}；"
                  "持平的预算不比严格的多，这里不比较多给预算的效果。")
    else:
        budget = (f"两种局部搜索的预算不同：严格每次 {setup.strict_iters:,} 次提议、持平每次 {setup.sideways_iters:,} 次；"
                  f"给严格下降同样 {setup.sideways_iters:,} 次，" +
                  ("结果一个也没变，多给预算没有用。" if same_budget else
                   f"最好的一次是 {min(main.strict_long_runs):.2f} 秒（原来 {strict.cost:.2f} 秒）。"))
    t = main.sideways_traces
    improvements, after_ties = sum(x.improvements for x in t), sum(x.improvements_after_ties for x in t)
    hand_name, hand_cost = _hand_best(main)
    beats = (lambda runs: sum(x <= hand_cost for x in runs)) if hand_cost is not None else (lambda runs: 0)
    out(f"    {stop}{budget}")
    out(f"    持平帮的是下降途中：几项并列最慢时，先持平地挪开其中一项，下一步才降得下来。{len(t)} 次持平重启的 "
        f"{improvements} 次下降里，有 {after_ties} 次紧跟在跨地区的持平交换之后。最好的一次 {sideways.cost:.2f} 秒；"
        f"{setup.restarts} 次里有 {beats(sideways.runs)} 次不差于最好的手工分配（严格下降：{beats(strict.runs)} 次）。")


def genetic_observation(setup, r, out):
    main, second = r.main, r.second
    hits = [(main, _count_hits(main, "genetic"), _count_hits(main, "genetic_blind"))]
    if second is not None:
        hits.append((second, _count_hits(second, "genetic"), _count_hits(second, "genetic_blind")))
    n = setup.restarts
    if main.optimum.exact:
        counted = "；".join(f"batch {inst.global_batch}：{aware}/{n} 个种子到了最优（不看地区：{blind}/{n}）"
                           for inst, aware, blind in hits)
    else:
        counted = "没有证明过的最优可比"
    total_sideways = setup.restarts * setup.sideways_iters
    out(f" 4. 遗传算法（Yuan et al. 2022 的调度器，仿 Kang & Moon 2000：整组交叉 + 局部搜索）每个种子 "
        f"{setup.genetic_budget:,} 次代价计算（持平局部搜索 {setup.restarts} 次重启一共 {total_sideways:,} 次）。"
        f"它知道局部搜索不知道的'地区'：交叉后修补冲突时挑同一地区的卡，变异时把数据并行组整组搬进它多数卡所在的地区。"
        f"{counted}。")
    if main.optimum.exact:
        out("    " + region_knowledge_sentence(main, hits))


def region_knowledge_sentence(main, hits):
    """What region knowledge does, read off the region-blind row: that row is the control
    (the same genetic search with region knowledge removed, crossover kept). hits: per
    instance (instance, seeds that reached its optimum, the same without region knowledge)."""
    blind_cost = main.methods["genetic_blind"].cost
    local_cost = min(main.methods["strict"].cost, main.methods["sideways"].cost)
    aware_more = [inst.global_batch for inst, aware, blind in hits if aware > blind]
    blind_more = [inst.global_batch for inst, aware, blind in hits if blind > aware]
    reach = ""
    if aware_more:
        reach += (f"batch {'、'.join(map(str, aware_more))} 上看地区的版本到最优的次数更多："
                  "在那里，到达最优靠的是地区知识。")
    if blind_more:
        reach += f"batch {'、'.join(map(str, blind_more))} 上反而是不看地区的版本到得更多。"
    if not reach:
        reach = "两个版本到最优的次数一样：地区知识在这里没有带来好处。"
    if blind_cost < local_cost:
        local = (f"遗传算法比局部搜索强，却不只靠地区知识：batch {main.global_batch} 上不看地区的遗传算法最好 {blind_cost:.2f} 秒，"
                 f"局部搜索最好 {local_cost:.2f} 秒（不看地区的那一行就是对照：去掉地区知识，留下整组交叉）。")
    else:
        local = (f"不看地区的遗传算法（{blind_cost:.2f} 秒）没有比局部搜索（{local_cost:.2f} 秒）好："
                 "这里比局部搜索强的部分来自地区知识。")
    return reach + local


def optimum_observation(setup, r, out):
    main, opt = r.main, r.main.optimum
    if opt.exact:
        reached = [method_label(setup, name) for name, m in main.methods.items() if main.reaches_optimum(m.cost)]
        best_h = min(m.cost for m in main.methods.values() if m.cost is not None)
        out(f" 5. 最优分配 {opt.cost:.2f} 秒是证明过的：没有任何分配能更快。同一地区里的卡可以互换，分配只取决于"
            f"'每个阶段在每个地区放几个'和相邻阶段怎么配对，这个空间小到可以穷举（讲义 5.4 节）。"
            + (f"这次达到最优的：{'、'.join(reached)}。" if reached else
               f"启发式里最好的 {best_h:.2f} 秒，离最优还差 {(best_h / opt.cost - 1) * 100:.1f}%。"))
    else:
        out(f" 5. 这个网络不是地区内均匀的，{opt.cost:.2f} 秒只是下界：{opt.note}。")
    second = r.second
    if second is None:
        return
    s_opt, sm = second.optimum, second.methods
    name, hand_cost = _hand_best(second)
    if not s_opt.exact or hand_cost is None:
        return
    if second.reaches_optimum(hand_cost):
        what = f"最好的手工分配（{method_label(setup, name)}）就是最优"
    else:
        st = layout_stats(s_opt.assignment, r.geo, setup.n_stages, setup.n_replicas)
        what = (f"两种手工分配都不是最优（最好的 {hand_cost:.2f} 秒，高出 {second.gap(name) * 100:.1f}%）："
                f"最优分配 {st['pipeline_links_within_region']}/{st['pipeline_links']} 条流水线边在地区内、"
                f"{st['dp_groups_within_region']}/{st['dp_groups']} 个数据并行组整组在一个地区")
        if st["dp_groups_within_region"] == st["dp_groups"]:
            order = [next(k for k, n in enumerate(row) if n) for row in s_opt.counts]
            what += (f"，阶段依次经过 {' → '.join(r.geo['region_names'][k] for k in order)}"
                     "（Yuan et al. 把这个顺序写成开放路径的旅行商问题 open-loop TSP）")
    gaps = "、".join(f"{label} {_pct(second.gap(key))}" for key, label in
                    (("strict", "严格"), ("sideways", "持平"), ("genetic", "遗传"), ("genetic_blind", "不看地区的遗传")))
    if second.reaches_optimum(sm["genetic"].cost) and not second.reaches_optimum(sm["genetic_blind"].cost):
        verdict = "手工分配和'不看地区'的搜索在这里都不够；要有证明过的最优，才知道谁到了、谁还差多少。"
    elif second.reaches_optimum(sm["genetic"].cost):
        verdict = "要有证明过的最优，才知道谁到了、谁还差多少。"
    elif second.reaches_optimum(sm["genetic_blind"].cost):
        verdict = "这里看地区的遗传算法没到，不看地区的反而到了；要有证明过的最优，才知道谁到了、谁还差多少。"
    else:
        verdict = "这里两种遗传算法都没到；没有证明过的最优，就不会知道还差多少。"
    out(f"    第二个实例 batch {second.global_batch}：最优 {s_opt.cost:.2f} 秒，{what}。各方法离最优：{gaps}。"
        + verdict)


def end_to_end_observation(setup, r, out):
    e, opt = r.end_to_end, r.main.optimum
    comm_ratio = (e.optimum_s - e.compute_s) / r.dc_comm_s
    which = "最优" if opt.exact else "最好"

    def slower(x, digits):
        return f"慢 {x:.{digits}f} 倍" if x >= 1 else f"反而快（用时是数据中心的 {x:.{digits}f} 倍）"

    out(f" 6. 只看通信，地理分布的{which}分配比数据中心{slower(comm_ratio, 1)}；加上每次迭代 {e.compute_s:.1f} 秒的计算"
        f"（含 {setup.bubble_fraction:.1%} 的气泡，M = {setup.n_micro_batches}）后，{slower(e.slowdown, 2)}"
        f"（随机分配{slower(e.random_slowdown, 2)}）。")
    if setup.network == "random":
        inside = ("落在" if 1.7 <= e.slowdown <= 3.5 else "不在")
        paper_inside = ("落在" if 1.7 <= e.paper_slowdown <= 3.5 else "不在")
        out(f"    Yuan et al. 2022 报告：去中心化训练只比数据中心慢 1.7–3.5 倍。我们的 {e.slowdown:.2f} 倍{inside}这个区间里；"
            f"但他们的地区内是 {setup.paper_intra_gbps:g} Gbit/s、{setup.paper_intra_latency_ms:g} ms，我们是 "
            f"{setup.intra_gbps:g} Gbit/s、{setup.intra_latency_ms:g} ms。用论文的设置，最优分配的通信 "
            f"{e.paper_comm_s:.2f} 秒，慢 {e.paper_slowdown:.2f} 倍，{paper_inside}区间里。")
    ratio = e.random_over_optimum
    paper = ("比论文大得多：我们的随机基线完全不看网络，而每一条跨地区的边都很慢。" if ratio >= 2 * 2.7 else
             "比论文大：我们的随机基线完全不看网络。" if ratio > 2.7 else
             "没有超过论文的 2.7 倍：这个网络上随机分配吃的亏没那么大。")
    out(f"    论文说调度器比随机分配最多快 2.7 倍，比的是'随机 ÷ 调度后'的端到端时间；这里随机分配是{which}分配的 "
        f"{ratio:.1f} 倍，{paper}这个模型把计算和通信直接相加：真实系统边算边传（重叠 overlap），"
        "慢的倍数会更小。")


def optimum_versus_hand(setup, inst, geo):
    """Observation 2's last sentence: is the proven optimum one of the two hand layouts, and if
    not, what does it keep inside a region (its layout statistics) and which hand layout is
    it like? Empty when the cheaper hand layout is optimal (observation 5 names it then)."""
    m, opt = inst.methods, inst.optimum
    hand_pp, hand_dp = m["pipelines_in_regions"].cost, m["dp_groups_in_regions"].cost
    if not opt.exact:
        return f"{opt.cost:.2f} 秒只是下界，说不出最优分配是不是其中之一。"
    if inst.reaches_optimum(min(hand_pp, hand_dp)):
        return ""
    st = layout_stats(opt.assignment, geo, setup.n_stages, setup.n_replicas)
    links_in, links = st["pipeline_links_within_region"], st["pipeline_links"]
    groups_in, groups = st["dp_groups_within_region"], st["dp_groups"]
    text = (f"但两种都不是最优：最优分配 {opt.cost:.2f} 秒，{links_in}/{links} 条流水线边在地区内、"
            f"{groups_in}/{groups} 个数据并行组整组在一个地区")
    b = inst.cost.breakdown(opt.assignment)
    if groups_in == groups and links_in < links:
        like, like_name, kept = "按地区放数据并行组", "dp_groups_in_regions", "数据并行组"
    elif links_in == links and groups_in < groups:
        like, like_name, kept = "按地区放流水线", "pipelines_in_regions", "流水线"
    else:
        return text + "，两种手工分配的做法它都不完全是。"
    hand_b = inst.cost.breakdown(m[like_name].layout)
    text += (f"——和'{like}'一样把{kept}留在地区内，只是阶段和地区的搭配不同"
             f"（dp {hand_b['dp']:.2f} → {b['dp']:.2f} 秒，pp {hand_b['pp']:.2f} → {b['pp']:.2f} 秒）")
    if m[like_name].cost > min(hand_pp, hand_dp):
        text += "：只比较两种手工分配，会选错把什么留在地区内"
    return text + "。"
