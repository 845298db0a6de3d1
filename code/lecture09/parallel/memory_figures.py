"""Code 03's figure (`--figures DIR`, notes §3): ZeRO's model states per GPU by stage, the
ZeRO paper's Figure 1 example as stacked bars and the same against the data-parallel size.
Arithmetic (memory_model.py's formulas), the same bytes on every machine."""

from lecture01.figures import COLORS, figure
from lecture09.parallel import memory_model as mm

PARTS = (("fp16 参数 2Ψ", COLORS["forward"]), ("fp16 梯度 2Ψ", COLORS["backward"]),
         ("优化器状态 KΨ", COLORS["weight"]))
SHORT = {0: "数据并行\n(不分片)", 1: "ZeRO-1\n分优化器状态", 2: "ZeRO-2\n+ 梯度", 3: "ZeRO-3\n+ 参数"}


def parts_per_gpu(n_params, n_gpus, stage, k):
    """(weights, gradients, optimizer states) bytes on one GPU: a stage shards the last `stage`
    of (states, gradients, weights) over n_gpus. Their sum is mm.zero_bytes_per_gpu."""
    whole = mm.model_state_bytes(n_params, k)
    sharded = {0: (), 1: (2,), 2: (1, 2), 3: (0, 1, 2)}[stage]
    return tuple(b / n_gpus if i in sharded else b for i, b in enumerate(whole))


def draw(directory, memory, results):
    """Drawn when demo 2 (ZeRO) ran, with its Ψ, N_d and K."""
    if "demo2" not in results:
        return
    psi, n_gpus, k = memory.figure1_params, memory.figure1_gpus, memory.k
    gpu_gb = mm.A100_MEMORY_BYTES / mm.GB
    with figure(directory, "fig09_03_zero_memory.svg", size=(10, 4.2), ncols=2,
                width_ratios=(1, 1.25)) as (fig, (bars, lines)):
        bottoms = [0.0] * 4
        for i, (label, color) in enumerate(PARTS):
            heights = [parts_per_gpu(psi, n_gpus, s, k)[i] / mm.GB for s in mm.ZERO_STAGES]
            bars.bar(range(4), heights, bottom=bottoms, color=color, label=label, width=0.65)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        for s, total in enumerate(bottoms):
            assert abs(total * mm.GB - mm.zero_bytes_per_gpu(psi, n_gpus, s, k)) < 1
            bars.annotate(f"{total:.1f} GB", (s, total), ha="center", va="bottom", xytext=(0, 2),
                          textcoords="offset points")
        bars.axhline(gpu_gb, color=COLORS["grey"], linestyle="--", linewidth=1)
        bars.annotate(f"一张 A100 {gpu_gb:.0f} GB", (3.3, gpu_gb), ha="right", va="bottom", color="#555555")
        bars.set_xticks(range(4), [SHORT[s] for s in mm.ZERO_STAGES])
        bars.set_ylabel("每张卡的模型状态 model states per GPU（GB）")
        bars.set_title(f"Ψ = {psi / 1e9:g}B 参数、N_d = {n_gpus} 张卡、K = {k}（ZeRO 论文图 1）", fontsize=10)
        bars.legend(loc="upper right")
        bars.grid(axis="x", visible=False)
        sizes = [2 ** e for e in range(11)]
        for s, color in zip(mm.ZERO_STAGES, (COLORS["black"], COLORS["weight"], COLORS["backward"], COLORS["comm"])):
            lines.plot(sizes, [mm.zero_bytes_per_gpu(psi, n, s, k) / mm.GB for n in sizes], marker="o", markersize=3,
                       color=color, label=SHORT[s].replace("\n", " "))
        lines.axhline(gpu_gb, color=COLORS["grey"], linestyle="--", linewidth=1)
        lines.axvline(n_gpus, color=COLORS["grey"], linestyle=":", linewidth=1)
        lines.set_xscale("log", base=2)
        lines.set_yscale("log")
        lines.set_xticks(sizes, [str(n) for n in sizes])
        lines.set_xlabel("数据并行的卡数 N_d")
        lines.set_ylabel("每张卡（GB，对数轴 log scale）")
        lines.set_title("阶段 1、2 停在不分片的 4Ψ、2Ψ 上；只有 ZeRO-3 随 N_d 一直下降", fontsize=10)
        lines.legend(loc="lower left")
        fig.suptitle("ZeRO 每个阶段把哪些模型状态分到 N_d 张卡上：每张卡还剩多少（混合精度 Adam）", fontsize=11)
