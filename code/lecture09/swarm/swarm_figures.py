"""Code 06's figure (`--figures DIR`, notes §6): table (3)'s membership over the server's
rounds: who uploaded in each round, how the round stepped, how long it waited. Measured on
this machine (when the kill lands, which rounds reach the deadline): the title says which
machine drew it."""

from lecture01.figures import COLORS, figure, machine_note

HOW = {"all": ("到齐 all", COLORS["forward"]), "expected": ("预期的都到 expected", COLORS["weight"]),
       "deadline": ("等到截止 deadline", COLORS["comm"])}


def draw_churn(directory, result, mode):
    """result: swarm_membership.ChurnResult."""
    plan, n = result.plan, result.workers
    timeline = result.timeline
    ids = sorted({int(w) for r in timeline for w in r["workers"]} | set(range(n + 1)))
    with figure(directory, "fig09_06_membership.svg", size=(9, 5), nrows=2, sharex=True,
                height_ratios=(2.2, 1)) as (fig, (who, wait)):
        for how, (label, color) in HOW.items():
            xs = [r["version"] for r in timeline for w in r["workers"] if r["by"] == how]
            ys = [int(w) for r in timeline for w in r["workers"] if r["by"] == how]
            if xs:
                who.scatter(xs, ys, s=14, marker="s", color=color, label=label)
        for ax in (who, wait):
            ax.axvline(plan.kill_at, color=COLORS["black"], linestyle="--", linewidth=1)
            ax.axvline(plan.join_at, color=COLORS["grey"], linestyle=":", linewidth=1.2)
        who.annotate(f"版本 {plan.kill_at}：工作者 {n - 1} 被 SIGKILL", (plan.kill_at, n - 0.6), xytext=(4, 0),
                     textcoords="offset points", fontsize=8)
        who.annotate(f"版本 {plan.join_at}：工作者 {n} 加入", (plan.join_at, n + 0.4), xytext=(4, 0),
                     textcoords="offset points", fontsize=8)
        who.set_yticks(ids, [f"工作者 {i}" for i in ids])
        who.set_ylim(max(ids) + 0.8, min(ids) - 0.6)
        who.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
        who.set_title(f"训练群的成员 swarm membership（sync，{mode}）：每一轮谁的上传进了平均\n"
                      f"{machine_note()}；什么时候杀、哪几轮等到截止时间随机器而变 [实测]", fontsize=9.5)
        wait.bar([r["version"] for r in timeline], [r["waited_s"] for r in timeline], width=0.8,
                 color=[HOW[r["by"]][1] for r in timeline])
        wait.axhline(result.deadline_s, color=COLORS["comm"], linewidth=0.8, linestyle="--")
        wait.annotate(f"截止时间 deadline {result.deadline_s:.1f} s", (timeline[-1]["version"], result.deadline_s),
                      ha="right", va="bottom", fontsize=8, color=COLORS["comm"])
        wait.set_ylabel("这一轮等了 s")
        wait.set_xlabel("服务器的版本 version（一轮一个）")
