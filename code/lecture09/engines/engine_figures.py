"""Codes 09's and 10's figures (`--figures DIR`, notes §9, §10): membership over time on the
real engines. torchft: each replica's reports (committed or discarded) against seconds, the
kill and the restart marked. hivemind: each peer's rounds against seconds, coloured by the size
of the group it averaged in, the join, the leave and the bootstrap node's death marked.
Measured (when a kill lands, who meets whom): the title says which machine drew them."""

from lecture01.figures import COLORS, CYCLE, figure, machine_note

MODE_TITLES = {"ddp": "容错 DDP", "diloco": "DiLoCo", "streaming": "Streaming DiLoCo"}


def draw_torchft(directory, records):
    """records: [(mode, torchft_run.RunRecord)] in the order the script ran them."""
    if not records:
        return
    with figure(directory, "fig09_09_membership.svg", size=(9, 1.2 + 1.7 * len(records)), nrows=len(records),
                squeeze=False) as (fig, axes):
        for ax, (mode, record) in zip(axes[:, 0], records):
            replicas = sorted({e.replica for e in record.events})
            for committed, marker, color, label in ((True, "o", COLORS["forward"], "提交 committed"),
                                                     (False, "x", COLORS["comm"], "丢弃 discarded")):
                events = [e for e in record.events if e.committed == committed]
                if events:
                    ax.scatter([e.seconds for e in events], [e.replica for e in events], s=12, marker=marker,
                               color=color, label=label)
            healed = [e for e in record.events if e.healed_bytes]
            if healed:
                ax.scatter([e.seconds for e in healed], [e.replica for e in healed], s=70, marker="*",
                           color=COLORS["weight"], label="从同伴恢复 healed", zorder=3)
            if record.killed_s is not None:
                ax.axvline(record.killed_s, color=COLORS["black"], linestyle="--", linewidth=1, label="SIGKILL")
            if record.restarted_s is not None:
                ax.axvline(record.restarted_s, color=COLORS["grey"], linestyle=":", linewidth=1.2, label="重启 restart")
            ax.set_yticks(replicas, [f"副本 {r}" for r in replicas])
            ax.set_ylim(max(replicas) + 0.6, min(replicas) - 0.6)
            ax.set_title(MODE_TITLES.get(mode, mode), fontsize=9.5, loc="left")
            ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7.5)
        axes[-1, 0].set_xlabel("秒 seconds（从副本开始算）")
        first = records[0][1].settings
        fig.suptitle("torchft：每个副本每一步的法定人数结果 membership over time\n"
                     f"{machine_note(None, f'model {first.model_seed}, data {first.data_seed}')}；"
                     "杀进程的时刻和谁在法定人数里随机器而变 [实测]", fontsize=10)


def draw_hivemind(directory, records, args):
    """records: [(title, hivemind_run.RunRecord)]: the undisturbed run and the churned one."""
    if not records:
        return
    sizes = sorted({len(e.members) for _, record in records for e in record.rounds})
    color_of = {g: (COLORS["grey"] if g == 1 else CYCLE[k % len(CYCLE)]) for k, g in enumerate(sizes)}
    with figure(directory, "fig09_10_membership.svg", size=(9, 1.2 + 1.9 * len(records)), nrows=len(records),
                squeeze=False, sharex=True) as (fig, axes):
        for ax, (title, record) in zip(axes[:, 0], records):
            peers = sorted({e.peer for e in record.rounds})
            for g in sizes:
                events = [e for e in record.rounds if len(e.members) == g]
                if events:
                    ax.scatter([e.seconds for e in events], [e.peer for e in events], s=18, marker="s",
                               color=color_of[g], label="没找到组 alone" if g == 1 else f"{g} 个同伴一组")
            words = {"join": "加入 join", "leave": "离开 leave", "bootstrap": "引导节点死 bootstrap dies"}
            for k, (what, (seconds, _)) in enumerate(sorted(record.events.items(), key=lambda kv: kv[1][0])):
                ax.axvline(seconds, color=(COLORS["black"], COLORS["comm"], COLORS["grey"])[k % 3], linestyle="--",
                           linewidth=1, label=words.get(what, what))
            ax.set_yticks(peers, [f"同伴 {p}" for p in peers])
            ax.set_ylim(max(peers) + 0.6, min(peers) - 0.6)
            ax.set_title(title, fontsize=9.5, loc="left")
            ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7.5)
        axes[-1, 0].set_xlabel("秒 seconds（从同伴开始算）；一个方块 = 一个同伴平均完的一轮")
        fig.suptitle(f"hivemind：每一轮谁和谁平均 who averaged with whom（{args.peers} 个同伴，DiLoCo）\n"
                     f"{machine_note(None, f'model {args.model_seed}, data {args.data_seed}')}；"
                     "谁和谁凑成一组随机器和时机而变 [实测]", fontsize=10)
