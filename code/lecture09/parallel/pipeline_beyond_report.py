"""Code 4's demo 5, run and printed (lecture 9, §4.7): interleaved 1F1B and ZB-H1 on a
timeline, their bubbles and peak activations against the papers' formulas for a table of
(p, m), and both on real gloo ranks against the unsplit model, with observations worded
from the numbers. torch is imported inside the functions that need it.
"""

import sys
import time
from dataclasses import replace

from lecture01.console import LINE_WIDTH, print_header, print_table, print_wrapped
from lecture09.parallel import pipeline
from lecture09.parallel import pipeline_real
from lecture09.parallel import pipeline_schedules as ps
from lecture09.parallel.pipeline_report import GRAD_ATOL   # demo 2's: micro-batch gradients summed in another order
from lecture09.ranks import gloo_ranks

PREFIX = "卡 0 │ "


def interleaving_fits(n_stages, n_micro, n_virtual):
    """Interleaved 1F1B runs here only with v = 1 or m a multiple of p."""
    return n_virtual == 1 or n_micro % n_stages == 0


def shown_schedules(n_stages, n_micro, n_virtual):
    return [s for s in ps.SCHEDULES if s != "interleaved" or interleaving_fits(n_stages, n_micro, n_virtual)]


def simulate_all(setup, n_stages, n_micro):
    return {s: ps.simulate(s, n_stages, n_micro, setup.n_virtual, setup.t_forward, setup.t_b, setup.t_w)
            for s in shown_schedules(n_stages, n_micro, setup.n_virtual)}


def held_in_stages(schedule, held, n_virtual):
    """Chunk micro-batches as whole-stage micro-batches (an interleaved chunk is 1/v of a stage)."""
    return held / n_virtual if schedule == "interleaved" else held


def fmt_count(x):
    return f"{x:g}"


def print_timelines(setup, timelines, out):
    for schedule, t in timelines.items():
        unit = min(t.times.values())
        blocks = ps.timeline_blocks(t, len(PREFIX) + 1, LINE_WIDTH)
        print()
        out(f"{ps.SCHEDULE_NAMES[schedule]}：共 {t.total_time:g} 个时间单位，气泡 {t.bubble_time:g}"
            f"（每格 {unit:g} 个时间单位）")
        if len(blocks) > setup.max_blocks:
            out(f"（时间线要折成 {len(blocks)} 段，不画了：用更小的 --stages / --micro-batches）")
            continue
        for k, block in enumerate(blocks):
            if k:
                print()
            for rank, row in enumerate(block):
                print(f"卡 {rank} │ {row}")


def run_demo5(setup, real, out=print_wrapped):
    p, m, v = setup.n_stages, setup.n_micro, setup.n_virtual
    print_header(f"演示 5：比 1F1B 更少的气泡——交错 1F1B（每张卡 v = {v} 段）和零气泡论文的 ZB-H1（p = {p}、m = {m}）")
    out(f"时间：一个阶段的前向 T_F = {setup.t_forward:g}，反向拆成 B（输入的梯度，下一张卡在等它）= {setup.t_b:g} 和 "
        f"W（权重的梯度，没人等它）= {setup.t_w:g}；1F1B 和交错 1F1B 把 B、W 连着算。F3 = 第 3 个 micro-batch 的前向，"
        "B3、W3 同理；交错时一张卡的第 1、3 段大写，第 2、4 段小写（f3、b3）；-- 同一个操作还在算，. 空闲。")
    timelines = simulate_all(setup, p, m)
    if "interleaved" not in timelines:
        out(f"（交错 1F1B 要 m 是 p 的倍数（Megatron-LM 的条件），m = {m}、p = {p} 不是，这里不画它。）")
    print_timelines(setup, timelines, out)

    print()
    out(f"p = {p}、m = {m} 的三种调度（气泡比 = 气泡时间 ÷ 一张卡的计算时间；最多存 = 卡 0 最多存几个 "
        "micro-batch 的激活，按整个阶段算；消息 = 一个 micro-batch 每个方向过几个切口）：")
    rows = []
    for schedule, t in timelines.items():
        held = ps.peak_held(ps.programs(schedule, p, m, v)[0])
        formula = _formula_cell(schedule, p, m, v)
        rows.append((ps.SCHEDULE_NAMES[schedule], f"{t.total_time:g}", f"{t.bubble_time:g}", f"{t.bubble_ratio:.1%}",
                     formula, fmt_count(held_in_stages(schedule, held, t.n_virtual)),
                     ps.messages_per_micro_batch(p, t.n_virtual)))
    print_table(["调度", "总时间", "气泡时间", "气泡比", "公式", "最多存", "消息"], rows)

    print()
    out("气泡比：模拟 / 公式，1F1B (p−1)/m、交错 (p−1)/(v·m)、ZB-H1 (p−1)/(3m)（T_F = T_B = T_W、m ≥ p 时）；"
        "每格 1F1B / 交错 / ZB-H1：")
    checked, worst, table = 0, 0.0, []
    for n_stages in setup.table_stages:
        cells = []
        for n_micro in setup.table_micro:
            parts = []
            for schedule, t in simulate_all(setup, n_stages, n_micro).items():
                if _has_formula(schedule, n_stages, n_micro, v):
                    worst = max(worst, abs(t.bubble_ratio - ps.bubble_ratio_formula(schedule, n_stages, n_micro, v)))
                    checked += 1
                    worst = max(worst, _worst_peak(schedule, n_stages, n_micro, v))
                parts.append(f"{t.bubble_ratio:.1%}")
            cells.append(" / ".join(parts))
        table.append((f"p = {n_stages}", *cells))
    print_table(["阶段数"] + [f"m = {n}" for n in setup.table_micro], table)
    equal_times = setup.t_forward == setup.t_b == setup.t_w
    out(f"  {checked} 个模拟和公式的最大差 {worst:.1e}（各卡最多存的个数也逐张卡和公式比过）。"
        + ("" if equal_times else "T_F、T_B、T_W 不相等，ZB-H1 的公式换成 (p−1)(T_F + T_B − T_W)。"))
    same, compared = torch_agreement(setup)
    out(f"  程序和 PyTorch 的 torch.distributed.pipelining（ScheduleInterleaved1F1B、ScheduleInterleavedZeroBubble）"
        f"逐个操作比：{compared} 个 (p, m, 卡) 的程序{'全部相同' if same == compared else f'只有 {same} 个相同'}。")
    r = {"timelines": timelines, "checked": checked, "worst": worst, "torch_same": same, "torch_compared": compared}
    r["real"] = run_real(real, v, out)
    return r


def torch_agreement(setup):
    """(programs equal to PyTorch's, programs compared) over the table's (p, m) and every rank:
    interleaved where v >= 2 and m is a multiple of p, and ZB-H1."""
    same = compared = 0
    for p in setup.table_stages:
        for m in setup.table_micro:
            kinds = [("zb-h1", 1)] + ([("interleaved", setup.n_virtual)] if setup.n_virtual >= 2 and m % p == 0 else [])
            for schedule, v in kinds:
                for rank in range(p):
                    compared += 1
                    same += ps.torch_program(schedule, rank, p, m, v) == ps.programs(schedule, p, m, v)[rank]
    return same, compared


def _has_formula(schedule, n_stages, n_micro, n_virtual):
    return schedule != "zb-h1" or n_micro >= n_stages


def _formula_cell(schedule, p, m, v):
    if not _has_formula(schedule, p, m, v):
        return "m < p：不适用"
    return f"{ps.bubble_ratio_formula(schedule, p, m, v):.1%}"


def _worst_peak(schedule, p, m, v):
    """0 when every rank's simulated peak equals the formula, else inf (shows in the printed worst)."""
    progs = ps.programs(schedule, p, m, v)
    same = all(ps.peak_held(progs[r]) == ps.peak_held_formula(schedule, r, p, m, v) for r in range(p))
    return 0.0 if same else float("inf")


def check_real(real, n_virtual):
    """Interleaved 1F1B (if m is a multiple of p) and ZB-H1 on real ranks against the unsplit model."""
    import torch

    from lecture01 import tiny_gpt
    from lecture09.lecture_model import MODEL_CONFIG

    p, m = real.pipe_ranks, real.pipe_micro
    schedules = tuple(s for s in ("interleaved", "zb-h1") if s != "interleaved" or interleaving_fits(p, m, n_virtual))
    n_layer = max(real.n_layer, pipeline_real.pieces_needed(p, n_virtual) - 2)
    config = replace(MODEL_CONFIG, n_layer=n_layer)
    run = pipeline_real.ScheduleRun(config, real.model_seed, m, n_virtual)
    tokens, _ = tiny_gpt.load_world_tokens(0)
    x, y = tiny_gpt.get_batch(tokens, real.batch_size, config.block_size, torch.Generator().manual_seed(real.data_seed))
    t0 = time.perf_counter()
    ranks = gloo_ranks.run_ranks(pipeline_real.schedule_worker, p, args=(run, x, y, schedules),
                                 timeout_s=120 + real.batch_size / 10)
    print(f"（演示 5 的 {p} 个进程用时 {time.perf_counter() - t0:.1f} 秒）", file=sys.stderr)
    loss, reference = pipeline.unsplit_gradients(pipeline.PipelineRun(config, real.model_seed, m), x, y)
    out = {"n_layer": n_layer, "schedules": schedules}
    for schedule in schedules:
        grads = {}
        for r in ranks:
            grads.update(r[schedule]["grads"])
        complete = set(grads) == set(reference)
        diff = max((grads[n] - reference[n]).abs().max().item() for n in reference) if complete else float("inf")
        out[schedule] = {"max_abs_diff": diff, "complete": complete, "loss_diff": abs(ranks[-1][schedule]["loss"] - loss),
                         "peaks": [r[schedule]["peak"] for r in ranks],
                         "messages": sum(r[schedule]["messages"] for r in ranks)}
    return out


def run_real(real, n_virtual, out=print_wrapped):
    p, m = real.pipe_ranks, real.pipe_micro
    r = check_real(real, n_virtual)
    print()
    cut = (f"交错时 {p * n_virtual} 段、ZB-H1 {p} 段" if "interleaved" in r["schedules"] else f"ZB-H1 {p} 段")
    out(f"真实进程：小 GPT 用 {r['n_layer']} 个块，切成 p·v 段（{cut}），{p} 个 gloo 进程，"
        f"batch {real.batch_size} = {m} 个 micro-batch；接收阻塞、发送不阻塞（isend），消息带标签。对照：不切开的模型。"
        f"最多存按段数（交错时一段是 1/{n_virtual} 个阶段）。")
    if "interleaved" not in r["schedules"]:
        out(f"（交错 1F1B 要 --pipe-micro-batches 是 --pipe-ranks 的倍数：{m} 不是 {p} 的倍数，只跑 ZB-H1。）")
    rows = []
    for schedule in r["schedules"]:
        s = r[schedule]
        rows.append((ps.SCHEDULE_NAMES[schedule], f"{s['max_abs_diff']:.1e}", f"{s['loss_diff']:.1e}",
                     " / ".join(map(str, s["peaks"])), " / ".join(map(str, real_formula_peaks(schedule, real, n_virtual))),
                     s["messages"], real_formula_messages(schedule, real, n_virtual)))
    print_table(["调度", "梯度最大差", "loss 差", "各卡实际最多存", "公式", "消息", "2m(pv − 1)"], rows)
    return r


def demo5_observations(setup, real, r, out=print_wrapped):
    p, m, v = setup.n_stages, setup.n_micro, setup.n_virtual
    t = r["timelines"]
    one = t["1f1b"]
    print()
    out("观察 Observations（演示 5）：")
    if p == 1:
        out(" 1. 只有一个阶段（p = 1）：没有流水线，也就没有气泡，三种调度一样长"
            f"（{one.total_time:g} 个时间单位）。试试 --stages 4。")
    elif "interleaved" not in t:
        out(f" 1. 交错 1F1B 这次没有算：m = {m} 不是 p = {p} 的倍数（试试 --micro-batches {p * max(1, m // p)}）。")
    elif v == 1:
        out(" 1. v = 1 时交错 1F1B 就是 1F1B：程序一模一样，气泡比都是 "
            f"{one.bubble_ratio:.1%}。试试 --virtual-stages 2。")
    else:
        inter = t["interleaved"]
        held_one = ps.peak_held(ps.programs("1f1b", p, m)[0])
        held_int = ps.peak_held(ps.programs("interleaved", p, m, v)[0]) / v
        first_start = {name: t[name].spans[p - 1][0][0] for name in ("1f1b", "interleaved")}
        out(f" 1. 交错 1F1B 让每张卡放 {v} 段不相邻的层，气泡比从 {one.bubble_ratio:.1%} 降到 "
            f"{inter.bubble_ratio:.1%} = (p−1)/(v·m)：灌满流水线时每一跳只是 1/v 个阶段（最后一张卡在 "
            f"{first_start['interleaved']:g} 开始算，1F1B 要等到 {first_start['1f1b']:g}），排空时也一样。代价是消息："
            f"一个 micro-batch 每个方向过 {ps.messages_per_micro_batch(p, v)} 个切口而不是 "
            f"{ps.messages_per_micro_batch(p)} 个；卡 0 最多存 {fmt_count(held_int)} 个阶段的激活"
            + (f"，比 1F1B 的 {held_one} 个多。" if held_int > held_one else f"，和 1F1B 的 {held_one} 个一样。"))
    zb = t["zb-h1"]
    if p == 1:
        pass
    elif m >= p and setup.t_forward == setup.t_b == setup.t_w:
        held = [ps.peak_held(prog) for prog in ps.programs("zb-h1", p, m)]
        held_one = [ps.peak_held(prog) for prog in ps.programs("1f1b", p, m)]
        compare = "一样" if max(held) == max(held_one) else "多" if max(held) > max(held_one) else "少"
        out(f" 2. ZB-H1 不等 W：下一张卡只等 B，W 挪到原来的空闲里。气泡从 1F1B 的 {one.bubble_time:g} 个时间单位降到 "
            f"{zb.bubble_time:g} = (p−1)(T_F + T_B − T_W)，是它的 {zb.bubble_time / one.bubble_time:.0%}。各卡最多存 "
            f"{max(held)} 个 micro-batch，和 1F1B 卡 0 的 {max(held_one)} 个{compare}"
            + ("（后面的卡存得比 1F1B 多：W 做完才放掉激活）。" if held[-1] > held_one[-1] else "。"))
    elif m < p:
        out(f" 2. m = {m} 比 p = {p} 小：ZB-H1 的公式假设 m ≥ p，这里不适用；模拟出来气泡 {zb.bubble_time:g} 个时间单位，"
            f"1F1B 是 {one.bubble_time:g}。")
    else:
        out(f" 2. T_F、T_B、T_W 不相等：ZB-H1 的气泡 {zb.bubble_time:g}，公式 (p−1)(T_F + T_B − T_W) = "
            f"{ps.zb_h1_bubble_time(p, setup.t_forward, setup.t_b, setup.t_w):g}，1F1B {one.bubble_time:g}。")
    real_r = r["real"]
    ok = all(real_r[s]["complete"] and real_r[s]["max_abs_diff"] <= GRAD_ATOL for s in real_r["schedules"])
    worst = max(real_r[s]["max_abs_diff"] for s in real_r["schedules"])
    names = "、".join(ps.SCHEDULE_NAMES[s] for s in real_r["schedules"])
    counted = all(real_r[s]["peaks"] == real_formula_peaks(s, real, v) and
                  real_r[s]["messages"] == real_formula_messages(s, real, v) for s in real_r["schedules"])
    out(f" {2 if p == 1 else 3}. 真实进程上{names}的梯度{'都和' if ok else '没有都和'}不切开的模型一致（最大差 "
        f"{worst:.1e}，容差 {GRAD_ATOL:g}）；各卡实际存的段数和发的消息数{'就是' if counted else '不都等于'}公式。"
        + ("调度只改变计算的顺序和时间，不改变结果。" if ok else ""))


def real_formula_peaks(schedule, real, n_virtual):
    v = n_virtual if schedule == "interleaved" else 1
    return [ps.peak_held_formula(schedule, rank, real.pipe_ranks, real.pipe_micro, v) for rank in range(real.pipe_ranks)]


def real_formula_messages(schedule, real, n_virtual):
    v = n_virtual if schedule == "interleaved" else 1
    return 2 * real.pipe_micro * ps.messages_per_micro_batch(real.pipe_ranks, v)
