"""Demo 3 of code 5, in words: each observation reads one printed table (a Demo3Result) and
says only what its numbers show, on whichever branch they fall (lecture 9, §5.11).
"""

from lecture01.console import print_wrapped
from lecture09.schedule.demo3_tables import optimum_with_balancer, short_name, percent, print_demo3, seconds, study_with_progress
from lecture09.schedule.hetero_cost import INFEASIBLE_PS
from lecture09.schedule.hetero_study import SEARCHES


def _short(name):
    return short_name(name)


def small_observation(r):
    """Table (d): who reached the proven optimum, and what the balancer's split costs there."""
    inst = r.small
    if inst is None:
        return " 1. 表 (d)：小实例没有放得下的分配，这次没有证明过的最优可比。"
    opt = inst.results["optimum"]
    reached = [n for n in SEARCHES if inst.results[n].total_ps == opt.total_ps]
    missed = [n for n in SEARCHES if n not in reached]
    text = f" 1. 表 (d)：证明过的最优 {seconds(opt.total)} 秒。"
    if reached:
        text += "到了最优的：" + "、".join(_short(n) for n in reached) + "。"
    if missed:
        text += "没到的：" + "、".join(f"{_short(n)} {percent(inst.gap(n))}（{inst.results[n].evaluations:,} 次）"
                                    for n in missed) + "。"
    ctl = optimum_with_balancer(inst)
    if ctl.total > opt.total:
        text += (f"对照：最优的放法换上负载均衡器的切层（三种搜索都这样切），合计从 {seconds(opt.total)} 变成 "
                 f"{seconds(ctl.total)} 秒（计算 {seconds(ctl.compute)}、dp {seconds(ctl.dp)}）：只改切层就差 "
                 f"{ctl.total - opt.total:.2f} 秒。均衡器只看每条流水线自己的计算，不看数据并行：各副本的层边界"
                 "对不对得齐，它不管。")
    elif missed:
        text += "最优的放法配上负载均衡器的切层一样快：这个实例上切层不是搜索差的原因。"
    else:
        text += "最优的放法配上负载均衡器的切层也一样快。"
    return text


def large_observation(r):
    """Table (e): the best of the three at demo 1's size, the others' gaps and efforts."""
    inst = r.large
    best = inst.best
    tops = [n for n in SEARCHES if inst.results[n].total_ps == best.total_ps]
    others = [n for n in SEARCHES if n not in tops]
    text = (f" 2. 表 (e)：{inst.cost.n_stages} × {inst.cost.n_replicas} 的规模证明不了最优；三者里最好的 "
            f"{seconds(best.total)} 秒来自" + "、".join(f"{_short(n)}（{inst.results[n].evaluations:,} 次）" for n in tops) + "。")
    if others:
        text += "其余：" + "、".join(f"{_short(n)} {seconds(inst.results[n].total)} 秒、{percent(inst.gap(n))}"
                                  f"（{inst.results[n].evaluations:,} 次）" for n in others) + "。"
    enum = inst.results["enumeration"]
    text += ("剪枝枚举在预算内没有走完，它的结果不是证明。" if not enum.finished else
             "剪枝枚举在预算内走完了：在'每条流水线按负载均衡器切层'的分配里，它证明了没有更好的；"
             "别的切层它没试，所以不是整个问题的最优。")
    return text


def bottleneck_observation(r):
    """Table (e)'s best row: which stage of which replica sets the compute time."""
    inst = r.large
    cost, best = inst.cost, inst.best
    b = cost.breakdown(best.order, best.partitions)
    stages = sorted(((n * cost.layer_ps[cost.chain(best.order, rep)[s]], rep, s, n)
                     for rep, parts in enumerate(b.partitions) for s, n in enumerate(parts)), reverse=True)
    _, rep, s, n = stages[0]
    tied = sum(t == stages[0][0] for t, *_ in stages)
    d = cost.chain(best.order, rep)[s]
    m = r.hetero.base.n_micro_batches
    who = f"副本 {rep} 的阶段 {s}" if tied == 1 else f"共 {tied} 个一样慢，例如副本 {rep} 的阶段 {s}"
    return (f" 3. 表 (e) 最好的分配里，计算 {seconds(b.compute)} 秒来自最慢的阶段（{who}）：{cost.cards[d]} 上 {n} 层 × "
            f"{cost.layer_ps[d] / 1e12:.2f} 秒 × (M+P−1)/M（{m + cost.n_stages - 1}/{m}）。数据并行等最慢的副本，"
            "别的卡再快也没用。假设：同一地区里没有更快的卡可以和它搭档时，要它少放层，就得把流水线跨地区拼起来、"
            "多付 pp——5.11 节的练习 12 拿 --mix 去试。")


def control_observation(r):
    """Table (f): does 'pipelines inside regions' survive the mix, and what ignoring speed costs."""
    rows = r.control.rows
    homo, balanced, best = rows["homo_even"], rows["homo_balanced"], rows["mixed_best"]
    keep = "也" if best.inside == best.links else "不再"
    text = (f" 4. 表 (f)：卡都一样时，最优分配 {homo.inside}/{homo.links} 条流水线边在地区内；换成混合卡，找到的最好分配"
            f" {best.inside}/{best.links}——'流水线待在地区内'{keep}成立。")
    ignore = homo.mixed.total - best.mixed.total
    if homo.mixed.feasible and ignore == 0:
        text += f"把同卡最优原样放到混合卡上、层数均分（完全忽略卡速），{seconds(homo.mixed.total)} 秒，就是找到的最好。"
    elif homo.mixed.feasible and ignore < 0:
        text += (f"把同卡最优原样放到混合卡上、层数均分（完全忽略卡速），{seconds(homo.mixed.total)} 秒，反而比三种搜索"
                 f"找到的最好还快 {-ignore:.2f} 秒：三种搜索都只用负载均衡器的切层，没试过这种均分。")
    elif homo.mixed.feasible:
        text += (f"把同卡最优原样放到混合卡上、层数均分（完全忽略卡速），{seconds(homo.mixed.total)} 秒，比混合卡上最好的多 "
                 f"{ignore:.2f} 秒（{percent(homo.mixed.total / best.mixed.total - 1)}）。")
    else:
        text += "把同卡最优原样放到混合卡上、层数均分，有的卡放不下（显存不够）。"
    if balanced.mixed.feasible and homo.mixed.feasible:
        if balanced.mixed.total == homo.mixed.total:
            text += "同一放法按卡速重切层，一样快（负载均衡器给这些流水线的也是均分）。"
        elif balanced.mixed.total > homo.mixed.total:
            text += (f"同一放法按卡速重切层反而更慢（{seconds(balanced.mixed.total)} 秒）：计算 {seconds(homo.mixed.compute)} → "
                     f"{seconds(balanced.mixed.compute)}，dp {seconds(homo.mixed.dp)} → {seconds(balanced.mixed.dp)}——"
                     "两行只差切层：各条流水线切得不一样，数据并行的那一项涨了。")
        else:
            text += (f"按卡速重切层 {seconds(balanced.mixed.total)} 秒：计算 {seconds(homo.mixed.compute)} → "
                     f"{seconds(balanced.mixed.compute)}，dp {seconds(homo.mixed.dp)} → {seconds(balanced.mixed.dp)}。")
    diff = best.equal.total - homo.equal.total
    text += (f"对照（每张卡都一样）：混合卡上最好的分配在等卡世界里 {seconds(best.equal.total)} 秒，同卡最优 "
             f"{seconds(homo.equal.total)} 秒" + ("，一样快：两者的差别全来自卡不一样。" if diff == 0 else
                                                f"，多 {diff:.2f} 秒：它为了迁就卡的速度和显存付出的通信。"))
    return text


def demo3_observations(r):
    if r.large.best.total_ps >= INFEASIBLE_PS:
        return ["\n观察 Observations（演示 3）：", small_observation(r),
                " 2. 表 (e)：三种搜索都没有找到放得下的分配（显存不够），后面的比较都不做。"]
    return ["\n观察 Observations（演示 3）：", small_observation(r), large_observation(r),
            bottleneck_observation(r), control_observation(r)]


def run_demo3(hetero, out=print_wrapped):
    """Code 5's demo 3: run the study, print its tables, then the observations; return the result."""
    r = study_with_progress(hetero)
    print_demo3(r)
    for line in demo3_observations(r):
        out(line)
    return r
