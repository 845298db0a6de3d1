"""Code 9's tables: the membership timeline of a run, the runs side by side, the check
against our own DiLoCo simulation, and the observations worded from their numbers.

Introduced in lecture 9, code 9 (09_torchft.py, notes §9). Everything here reads a
torchft_run.RunRecord (and, for the check, compress.local_sgd's RunResult); nothing here
starts a process, so the tests can feed it hand-made records.
"""

import textwrap
from dataclasses import dataclass

from lecture01.console import pad, print_wrapped

MODE_WORDS = {"ddp": "容错 DDP fault-tolerant DDP", "diloco": "DiLoCo",
              "streaming": "流式 DiLoCo Streaming DiLoCo"}


@dataclass(frozen=True)
class StepView:
    step: int            # the manager step this attempt would commit (1-based)
    members: tuple
    committed: bool
    healed: tuple        # (replica, bytes, seconds) of replicas that healed at this step


def step_views(record):
    """One StepView per attempted manager step, in order (a discarded attempt and the
    committed retry of the same step are two views)."""
    views, seen = [], {}
    for e in record.events:
        attempt = e.step if e.committed else e.step + 1
        key = (attempt, e.committed)
        if key not in seen:
            seen[key] = len(views)
            views.append(StepView(attempt, e.members, e.committed, ()))
        if e.healed_bytes:
            v = views[seen[key]]
            views[seen[key]] = StepView(v.step, v.members, v.committed,
                                        v.healed + ((e.replica, e.healed_bytes, e.heal_s),))
    return views


def intervals(views):
    """Runs of consecutive views with the same members and outcome and no healing:
    [(first step, last step, members, committed, healed)]."""
    runs = []
    for v in views:
        if runs and not v.healed and runs[-1][2:4] == (v.members, v.committed) and not runs[-1][4] \
                and v.step == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v.step, v.members, v.committed, ())
        else:
            runs.append((v.step, v.step, v.members, v.committed, v.healed))
    return runs


@dataclass(frozen=True)
class Summary:
    mode: str
    steps: int               # committed manager steps
    discarded: int           # attempts whose all-reduce failed (nobody stepped)
    without: int             # committed steps the killed replica was not part of
    gap_s: float             # from the kill to the survivors' next committed step (None: no kill)
    healed_bytes: int        # what the restarted replica downloaded (0: it did not heal)
    heal_s: float
    rejoined: bool
    killed: bool                  # a replica was SIGKILLed in this run
    discarded_with_victim: bool   # every discarded attempt's quorum still held the killed replica
    max_diff: float          # largest |θ_r − θ_0| over replicas and entries at the end
    bpc: float


def summarize(record, bpc):
    views = step_views(record)
    committed = [v for v in views if v.committed]
    f = record.failure
    victim = f.replica if f else None
    gap = None
    if record.killed_s is not None:
        last = max(e.step for e in record.events if e.replica == victim and e.seconds <= record.killed_s)
        after = [e.seconds for e in record.events if e.committed and e.replica != victim and e.step > last]
        gap = min(after) - record.killed_s if after else None
    heals = [h for v in views for h in v.healed]
    finals = [record.finals[k] for k in sorted(record.finals)]
    diff = max((max((t[n] - finals[0][n]).abs().max().item() for n in t) for t in finals[1:]), default=0.0)
    return Summary(mode=record.settings.mode, steps=len(committed),
                   discarded=sum(not v.committed for v in views),
                   without=sum(victim is not None and victim not in v.members for v in committed),
                   gap_s=gap, healed_bytes=sum(h[1] for h in heals), heal_s=sum(h[2] for h in heals),
                   rejoined=bool(heals), killed=record.killed_s is not None,
                   discarded_with_victim=all(victim in v.members for v in views if not v.committed),
                   max_diff=diff, bpc=bpc)


def timeline_lines(record):
    """The membership timeline of one run: who was in each quorum, and what happened."""
    f = record.failure
    unit = "步 step" if record.settings.mode == "ddp" else "同步 sync"
    lines = [pad(f"  {unit}", 16) + pad("法定人数 quorum", 18) + "发生了什么 what happened"]
    killed_step = max((e.step for e in record.events if f and e.replica == f.replica
                       and (record.restarted_s is None or e.seconds < record.restarted_s)), default=None)
    marked = False
    for first, last, members, committed, healed in intervals(step_views(record)):
        span = f"{first}" if first == last else f"{first}–{last}"
        words = "提交 committed" if committed else "丢弃 discarded：全归约失败 all-reduce failed，谁都没更新"
        if f and killed_step is not None and first > killed_step and not marked:
            words += f"（副本 {f.replica} 在第 {killed_step} 步后被 SIGKILL）"
            marked = True
        for replica, size, seconds in healed:
            words += f"；副本 {replica} 从同伴恢复 healed：下载 {size:,} B，{seconds:.2f} s"
        lines.append(pad(f"  {span}", 16) + pad(" ".join(map(str, members)), 18) + words)
    return lines


SUMMARY_HEADERS = ("方式 mode", "提交", "丢弃", "缺席", "空窗 s", "恢复下载 B", "恢复 s", "终态 max|Δ|", "bpc")
SUMMARY_WIDTHS = (30, 6, 6, 6, 8, 12, 8, 12, 7)


def summary_lines(summaries):
    lines = ["  " + "".join(pad(h, w, "<" if i == 0 else ">")
                            for i, (h, w) in enumerate(zip(SUMMARY_HEADERS, SUMMARY_WIDTHS)))]
    lines.append("  " + "-" * sum(SUMMARY_WIDTHS))
    for s in summaries:
        cells = (MODE_WORDS[s.mode], s.steps, s.discarded, s.without,
                 "—" if s.gap_s is None else f"{s.gap_s:.2f}",
                 f"{s.healed_bytes:,}" if s.rejoined else "—",
                 f"{s.heal_s:.2f}" if s.rejoined else "—", f"{s.max_diff:.1e}" if s.max_diff else "0",
                 f"{s.bpc:.3f}")
        lines.append("  " + "".join(pad(c, w, "<" if i == 0 else ">")
                                    for i, (c, w) in enumerate(zip(cells, SUMMARY_WIDTHS))))
    return lines


GAP_NEAR_S = 0.3     # a gap "matches" min(heartbeat, join timeout) within this


def summary_observations(summaries, param_bytes, victim, waits_s=None):
    """Sentences that are functions of the summary rows (each branch unit-tested).
    waits_s: (heartbeat timeout, join timeout) in seconds, the Lighthouse's two waits."""
    lines = []
    equal = [s for s in summaries if s.max_diff == 0]
    if equal and len(equal) == len(summaries):
        after = ("被杀、重启、从同伴恢复之后" if all(s.rejoined for s in summaries if s.killed) else "被杀之后")
        lines.append("每种方式结束时，所有副本的 θ_global 逐位相同（max|Δ| = 0）"
                     + (f"：{after}，副本之间没有分叉。" if any(s.killed for s in summaries) else "。"))
    elif summaries:
        worst = max(summaries, key=lambda s: s.max_diff)
        lines.append(f"结束时副本之间最大相差 {worst.max_diff:.1e}（{MODE_WORDS[worst.mode]}）：不是逐位相同。")
    for s in summaries:
        if not s.rejoined and s.gap_s is not None:
            lines.append(f"{MODE_WORDS[s.mode]}：副本 {victim} 在训练结束前没有回来，最后 {s.without} 步只有幸存者。")
    healed = {s.mode: s for s in summaries if s.rejoined}
    for s in healed.values():
        lines.append(f"{MODE_WORDS[s.mode]}：恢复时下载 {s.healed_bytes:,} B = {s.healed_bytes / param_bytes:.3f} 份"
                     f"模型的 fp32 字节（{param_bytes:,} B）。")
    if "ddp" in healed and ("diloco" in healed or "streaming" in healed):
        other = healed.get("diloco") or healed["streaming"]
        extra = (other.healed_bytes - healed["ddp"].healed_bytes) / param_bytes
        lines.append(f"{MODE_WORDS[other.mode]} 比容错 DDP 多下载 {extra:.3f} 份模型：它的状态里还有上次同步的 "
                     "θ_global 和外层动量 outer momentum，各是一份模型大小。")
    gaps = [s.gap_s for s in summaries if s.gap_s is not None]
    if gaps and waits_s:
        bound = min(waits_s)
        near = all(abs(g - bound) <= GAP_NEAR_S for g in gaps)
        span = f"{min(gaps):.2f}" if f"{min(gaps):.2f}" == f"{max(gaps):.2f}" else f"{min(gaps):.2f}–{max(gaps):.2f}"
        lines.append(f"空窗 {span} s；Lighthouse 的两个等待里短的那个 min(心跳超时 "
                     f"{waits_s[0]:g} s, 加入等待 {waits_s[1]:g} s) = {bound:g} s"
                     + ("：每次都在它 ±0.3 s 以内。" if near else "：不是每次都在它 ±0.3 s 以内。"))
    discarded = [s for s in summaries if s.discarded]
    clean = [s for s in summaries if s.gap_s is not None and not s.discarded]
    if discarded:
        lines.append("丢弃的步：" + "，".join(f"{MODE_WORDS[s.mode]} {s.discarded} 步" for s in discarded)
                     + ("。时间线里这些步的法定人数还有被杀的副本：全归约失败，幸存者的这一步作废，"
                        "下一次法定人数才没有它。" if all(s.discarded_with_victim for s in discarded) else "。"))
    if clean:
        lines.append("、".join(MODE_WORDS[s.mode] for s in clean) + " 没有丢弃任何一步：时间线里被杀以后的"
                     "第一次法定人数已经没有它，没有哪次全归约在等一个死掉的进程。")
    return lines


def lighthouse_lines(record, quorum_timeout_s):
    """What happened after the Lighthouse stopped: commits, then each replica's error."""
    before = max((e.step for e in record.events if e.seconds <= record.killed_s), default=0)
    last = max((e.step for e in record.events if e.committed), default=0)
    lines = [f"Lighthouse 在第 {before} 步时停下（{record.killed_s:.2f} s）。之后提交到第 {last} 步"
             + ("，一步也没有多。" if last == before else "：这些步的法定人数在它停下之前已经组成。")]
    for replica, (seconds, text) in sorted(record.errors.items()):
        lines.append(f"  副本 {replica}：停下后 {seconds - record.killed_s:.1f} s 报错退出："
                     f"{textwrap.shorten(text.split(' (log:')[0], 56, placeholder=' …')}")
    waits = [seconds - record.killed_s for seconds, _ in record.errors.values()]
    if waits and all(quorum_timeout_s <= w <= quorum_timeout_s + 1.5 for w in waits):
        lines.append(f"  每个副本都在停下后 {min(waits):.1f}–{max(waits):.1f} s 报错：和法定人数的时限 "
                     f"{quorum_timeout_s:g} s（2 × --timeout）相符（换一个 --timeout 再跑，这一列跟着变）。")
    missing = sorted(set(range(record.settings.n_replicas)) - set(record.errors))
    if missing:
        lines.append("  没有报错的副本 replicas without an error：" + " ".join(map(str, missing)))
    return lines


def print_lines(lines, out=print_wrapped):
    for line in lines:
        out(line)
