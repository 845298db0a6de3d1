"""Code 10's tables: who averaged with whom in each round, the two runs side by side, the
wire formats, the comparison with code 6's server, and the observations worded from them.

Introduced in lecture 9, code 10 (10_hivemind.py, notes §10). Everything here reads a
hivemind_run.RunRecord (or plain numbers); nothing here starts a process, so the tests can
feed it hand-made records.
"""

import statistics
from dataclasses import dataclass

from lecture01.console import format_table


def butterfly_bytes(group, tensor_bytes):
    """Mean bytes one peer sends (and receives) in hivemind's all-reduce of one tensor in a
    group of `group`: it sends the other group − 1 shares of its tensor to their reducers,
    and sends the averaged share it reduced back to the group − 1 others: 2 (g − 1) / g · S."""
    return 2 * (group - 1) * tensor_bytes / group


def groups_of(reports):
    """The distinct groups of one round's reports, largest first (a group of one: a peer
    that found nobody)."""
    return sorted({r.members for r in reports}, key=lambda g: (-len(g), g))


def not_comparable_rounds(record):
    """The rounds of a run without churn in which not every peer averaged with all the others
    in full (a smaller group, a peer alone, a partial average): our simulation averages
    everyone every round, so with any such round the two runs differ by design."""
    n = record.settings.n_peers
    return [r for r in range(record.settings.rounds)
            if len(record.of_round(r)) < n or any(len(x.members) < n or not x.complete for x in record.of_round(r))]


def not_everyone(record):
    """Why table (d) cannot agree, in one sentence ("" when every round was everyone's)."""
    rounds = not_comparable_rounds(record)
    if not rounds:
        return ""
    first = rounds[0]
    groups = "、".join("{" + ",".join(map(str, g)) + "}" for g in groups_of(record.of_round(first)))
    return (f"{len(rounds)} 轮没有 {record.settings.n_peers} 个同伴一起平均（第 {first} 轮的组：{groups or '无'}），"
            "我们的模拟每轮全体平均，两边算的本来就不是同一件事。机器忙时同伴凑组慢："
            "--matchmaking-s 加大（如 3）再试 (groups were not everyone; try a longer --matchmaking-s)")


def events_in(record, r):
    """What happened just before round r started (join, leave, bootstrap) and in it."""
    churn, out = record.churn, []
    for what, (seconds, after) in sorted(record.events.items(), key=lambda kv: kv[1]):
        if after + 1 != r:
            continue
        if what == "join":
            got = [d for d in record.downloads if d.peer == churn.join[0] and d.missed is None]
            text = f"同伴 {churn.join[0]} 加入 joins" + (f"，下载 {got[-1].bytes:,} B" if got else "")
            if len(got) > 1:
                text += f"（{len(got)} 次：下载到的那一轮别人已在找组，它等下一轮开始再下载）"
            if got and got[-1].round > r:
                text += (f"：下载到的已是第 {got[-1].round} 轮开始时的状态，它从第 {got[-1].round} 轮起才平均，"
                         f"第 {r} 轮没有它")
            out.append(text)
        elif what == "leave":
            out.append(f"同伴 {churn.leave[0]} 离开 leaves (SIGKILL)")
        else:
            out.append("引导节点死了 the bootstrap node dies")
    joined = sorted(x.peer for x in record.of_round(r) if x.weight == 0 and len(x.members) > 1)
    if joined:
        out.append("同伴 " + ",".join(map(str, joined)) + " 刚下载了状态，以权重 0 入组 (weight 0)：只收平均，不带伪梯度")
    partial = sorted(x.peer for x in record.of_round(r) if not x.complete)
    if partial:
        out.append("平均不全 partial（校验和 checksum）：同伴 " + ",".join(map(str, partial)) + " 跳过外层步")
    for d in record.downloads:
        if d.missed == r:
            out.append(f"同伴 {d.peer} 没凑上组，再下载 {d.bytes:,} B，从第 {d.round} 轮接着走")
    return "；".join(out)


def round_rows(record, tensor_bytes):
    rows = []
    for r in range(record.settings.rounds):
        reports = record.of_round(r)
        if not reports:
            continue
        groups = groups_of(reports)
        sent = [x.sent for x in reports if len(x.members) > 1]
        formula = [butterfly_bytes(len(g), tensor_bytes) for g in groups if len(g) > 1]
        rows.append([r, " | ".join("{" + ",".join(map(str, g)) + "}" for g in groups),
                     f"{statistics.mean(sent):,.0f}" if sent else "0",
                     " / ".join(f"{f:,.0f}" for f in formula) if formula else "0",
                     f"{max(x.wait_s for x in reports):.2f}", f"{statistics.mean(x.loss for x in reports):.3f}",
                     "*" if events_in(record, r) else ""])
    return rows


ROUND_HEADERS = ["轮 round", "谁和谁平均 groups", "发出/同伴 sent", "2(g-1)/g·S", "等待 s", "损失 loss", "事件"]


def round_lines(record, tensor_bytes):
    """The table, then one line per round marked * (what happened before or in it)."""
    lines = format_table(ROUND_HEADERS, round_rows(record, tensor_bytes), aligns=["<", "<", ">", ">", ">", ">", "<"])
    return lines + [f"  * 第 {r} 轮：{events_in(record, r)}" for r in range(record.settings.rounds)
                    if record.of_round(r) and events_in(record, r)]


def late_start(record):
    """(the round the late peer was let in, the round its joining download starts), or None
    when there is no late peer or no download: the two differ when the others had already
    moved on to a later round by the time it asked a peer for the state (its last download
    while joining: it downloads again when the first came as the others were looking for a
    group)."""
    if not record.churn.join or "join" not in record.events:
        return None
    peer = record.churn.join[0]
    got = [d for d in record.downloads if d.peer == peer and d.missed is None]
    return (record.events["join"][1] + 1, got[-1].round) if got else None


def late_observation(record, matchmaking_s):
    """How the late peer started and how often it found a group after it joined (None: no
    late peer, or it averaged from the round it was let in, in a group every round). Three
    outcomes for the round it was let in: it averaged in it; it found no group in it; or the
    state it downloaded already began a later round, and it was not in that round at all."""
    if not record.churn.join:
        return None
    peer = record.churn.join[0]
    mine = [x for x in record.rounds if x.peer == peer]
    alone = [x for x in mine if x.members == (peer,)]
    start = late_start(record)
    later = ""
    if start is not None and start[1] > start[0]:
        later = (f"同伴 {peer} 在第 {start[0]} 轮被放行，可它下载到的已是第 {start[1]} 轮开始时的状态（别的同伴已经"
                 f"走进下一轮）：它从第 {start[1]} 轮起平均，第 {start[0]} 轮的组里没有它，表 (b) 第 {start[0]} 轮那行的"
                 "事件说的是放行。")
    if not alone:
        return later or None
    if len(alone) == len(mine):
        return (f"同伴 {peer} 加入以后的 {len(mine)} 轮一次也没凑上组：每次都晚到，别的同伴凑组只等 --matchmaking-s "
                f"{matchmaking_s:g} s；它找不到组，就再下载一次状态、接着晚到。对照 control：只改 --matchmaking-s，"
                "见讲义 §10。" + later)
    return (f"同伴 {peer} 加入以后的 {len(mine)} 轮里有 {len(alone)} 轮没凑上组（一个人的组 a group of one）。"
            + later)


def late_rounds(record):
    """(late peer, rounds it reported, of those the rounds it was in a group of 2 or more), or
    None when there is no late peer or it reported no round."""
    if not record.churn or not record.churn.join:
        return None
    peer = record.churn.join[0]
    mine = [x for x in record.rounds if x.peer == peer]
    return (peer, len(mine), sum(len(x.members) > 1 for x in mine)) if mine else None


def late_cell(late):
    """Table (f)'s cell for the late peer: "同伴 3：3 轮里 3 轮在组里" ("—": no late peer)."""
    if late is None:
        return "—（没有晚来的同伴）"
    peer, total, grouped = late
    return f"同伴 {peer}：加入后 {total} 轮里 {grouped} 轮在组里"


def centre_observation(sizes, late, dies_at, joined_at):
    """What table (f)'s two last rows say, in one sentence (each branch unit-tested). sizes:
    the largest group of each round from dies_at on; late: late_rounds; joined_at: the round
    the late peer was let in. "照样成组" is said of the late peer only when it was in a
    group in every round it reported."""
    if sizes and min(sizes) >= 2:
        first = f"引导节点第 {dies_at} 轮死后，每轮都有同伴凑成组（最大的组 {' '.join(map(str, sizes))}）"
    else:
        first = (f"引导节点第 {dies_at} 轮死后，{sum(x < 2 for x in sizes)} 轮谁也没凑成组"
                 f"（最大的组 {' '.join(map(str, sizes)) or '—'}）")
    if late is None:
        return first + "。"
    peer, total, grouped = late
    when = "它死后才加入的" if joined_at is not None and joined_at >= dies_at else "晚来的"
    if grouped == total:
        return first + f"；{when}同伴 {peer} 加入后 {total} 轮都在组里，也照样成组。"
    if grouped == 0:
        return (first + f"；{when}同伴 {peer} 加入后 {total} 轮一次也没在组里：它没有照样成组"
                "（原因见讲义 §10.3 的对照）。")
    return first + f"；{when}同伴 {peer} 加入后 {total} 轮里只有 {grouped} 轮在组里。"


def formula_holds(record, tensor_bytes):
    """Whether, in every round where one group formed, the peers' mean sent bytes equal
    butterfly_bytes exactly (to the byte, as a fraction)."""
    for r in range(record.settings.rounds):
        reports = record.of_round(r)
        groups = groups_of(reports)
        if len(groups) != 1 or len(groups[0]) < 2:
            continue
        if abs(sum(x.sent for x in reports) - len(reports) * butterfly_bytes(len(groups[0]), tensor_bytes)) > 1e-6:
            return False
    return True


@dataclass(frozen=True)
class Summary:
    label: str
    rounds_by_peer: dict        # peer -> rounds it averaged in a group of 2 or more
    sent: int                   # all peers' averaging bytes, the whole run
    busiest_share: float        # the busiest peer's sent bytes / the mean over peers, per round (max)
    downloads: int              # state downloads and their bytes
    download_bytes: int
    small_rounds: int           # rounds whose largest group was below the target
    partial_rounds: int         # rounds in which some peer's average failed the checksum
    wait_full_s: float          # median of a round's slowest wait in a group: full groups, and smaller ones
    wait_small_s: float
    max_diff: float             # final θ_global of each peer against the lowest-numbered peer
    bpc: float
    seconds: float


def summarize(label, record, bpc):
    import torch

    s = record.settings
    by_peer, shares, waits_full, waits_small = {}, [], [], []
    for r in range(s.rounds):
        reports = record.of_round(r)
        if not reports:
            continue
        for x in reports:
            if len(x.members) > 1:
                by_peer[x.peer] = by_peer.get(x.peer, 0) + 1
        sent = [x.sent for x in reports if len(x.members) > 1]
        if sent and statistics.mean(sent):
            shares.append(max(sent) / statistics.mean(sent))
        grouped = [x.wait_s for x in reports if len(x.members) > 1]   # a peer alone waited for nobody
        if grouped:
            (waits_full if max(len(g) for g in groups_of(reports)) == s.n_peers else waits_small).append(max(grouped))
    finals = [record.finals[k] for k in sorted(record.finals)]
    diff = max((float((f[n] - finals[0][n]).abs().max()) for f in finals[1:] for n in f), default=0.0)
    del torch
    partial = len({x.round for x in record.rounds if not x.complete})
    return Summary(label, by_peer, sum(x.sent for x in record.rounds), max(shares, default=1.0),
                   len(record.downloads), sum(d.bytes for d in record.downloads), len(waits_small), partial,
                   statistics.median(waits_full) if waits_full else float("nan"),
                   statistics.median(waits_small) if waits_small else float("nan"), diff, bpc, record.seconds)


def summary_lines(summaries):
    """The runs side by side: one column per run, one row per figure."""
    def seconds(x):
        return f"{x:.2f}" if x == x else "—"       # NaN: no such round

    rows = [["各同伴平均的轮数 rounds averaged", *(" ".join(f"{p}:{n}" for p, n in sorted(x.rounds_by_peer.items()))
                                                for x in summaries)],
            ["发出的字节 bytes sent (all peers)", *(f"{x.sent:,}" for x in summaries)],
            ["下载状态 state downloads: 次 / 字节", *(f"{x.downloads} / {x.download_bytes:,}" for x in summaries)],
            ["不满的轮 rounds below the target", *(str(x.small_rounds) for x in summaries)],
            ["平均不全的轮 partial averages", *(str(x.partial_rounds) for x in summaries)],
            ["满组的轮：最慢等待 s (median)", *(seconds(x.wait_full_s) for x in summaries)],
            ["不满的轮：最慢等待 s (median)", *(seconds(x.wait_small_s) for x in summaries)],
            ["终态差 final max|Δθ| between peers", *(f"{x.max_diff:.1e}" if x.max_diff else "0" for x in summaries)],
            ["验证集 bits/字符 validation bpc", *(f"{x.bpc:.3f}" for x in summaries)]]
    return format_table(["", *(x.label for x in summaries)], rows)


def summary_observations(undisturbed, churned, matchmaking_s, n_peers):
    """Sentences that are functions of the two summaries (each branch unit-tested)."""
    lines = []
    d = churned.bpc - undisturbed.bpc
    lines.append(f"有进有出的一遍比不受打扰的一遍 bpc {'高' if d > 0 else '低' if d < 0 else '相同'} "
                 f"{abs(d):.3f}（各一次运行 one draw each；训练出来的数随机器和种子变）。")
    if churned.small_rounds:
        if churned.wait_small_s >= matchmaking_s > undisturbed.wait_full_s:
            lines.append(f"凑不满 {n_peers} 个同伴的 {churned.small_rounds} 轮，最慢的等待中位数 "
                         f"{churned.wait_small_s:.2f} s，满组的轮 {undisturbed.wait_full_s:.2f} s：小组要等够 "
                         f"--matchmaking-s {matchmaking_s:g} s 才成组（hivemind 的 min_matchmaking_time；"
                         "满组不等）。没有中心，谁也不知道还有几个同伴活着。")
        else:
            lines.append(f"凑不满 {n_peers} 个同伴的 {churned.small_rounds} 轮，最慢的等待中位数 "
                         f"{churned.wait_small_s:.2f} s，满组的轮 {undisturbed.wait_full_s:.2f} s。")
    for x in (undisturbed, churned):
        if x.partial_rounds:
            lines.append(f"{x.label}：{x.partial_rounds} 轮里 hivemind 交回的平均没有通过校验和（有一块的归约者没交回"
                         "结果，hivemind 只记一条警告，照样返回小组）；这些轮里校验不过的同伴跳过外层步。")
        if x.max_diff:
            lines.append(f"{x.label}：结束时各同伴的 θ_global 不是逐位相同，最大差 {x.max_diff:.1e}"
                         "（代码 9 的 torchft 是逐位相同的）。")
    return lines


def share_observation(summary, part_kb):
    if summary.busiest_share > 1.5:
        return (f"最忙的同伴发出的字节是平均的 {summary.busiest_share:.2f} 倍：张量切成 {part_kb} KiB 的块 (parts) "
                "分给同伴去归约，块太大，就分不匀——最极端是一个同伴归约全部，成了中心。")
    return (f"最忙的同伴发出的字节至多是平均的 {summary.busiest_share:.2f} 倍：张量切成 {part_kb} KiB 的块 (parts)，"
            "每个同伴归约差不多一样多的块，没有谁是中心（试试 --part-kb 512，hivemind 的默认）。")

