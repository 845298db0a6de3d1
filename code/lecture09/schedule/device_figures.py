"""GPU figures with their sources, and demo 3's world of mixed cards (lecture 9, §5.11).

network_figures.py gives every link figure its source; this file does the same for the
devices: a card's dense fp16/bf16 tensor-core peak (FP32 accumulate, no sparsity: what
mixed-precision training uses) and its memory, from the vendor's own sheet. What a card
really sustains is a fraction of its peak: UTILISATION, an assumption, the same for every
card (demo 1 assumes it for the V100).

A world is a list of card names in device order; regions are filled in that order
(region 0 gets the first cards), so the default mix puts the data-center cards in
region 0, the new consumer cards in regions 1-2 and the old cards in region 3.
"""

from dataclasses import dataclass

from lecture09.schedule.network_figures import FIGURES


@dataclass(frozen=True)
class Card:
    """One GPU model: dense 16-bit tensor peak (TFLOP/s), memory (GB), where both come from."""
    name: str
    peak_tflops: float
    memory_gb: float
    source: str       # the vendor's sheet (short name, printed)
    url: str          # where that sheet is


_A100_SHEET = ("NVIDIA A100 datasheet", "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/"
               "a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
_V100_SHEET = ("NVIDIA V100 datasheet", "https://images.nvidia.com/content/technologies/volta/pdf/"
               "volta-v100-datasheet-update-us-1165301-r5.pdf")
_ADA_PAPER = ("NVIDIA Ada GPU architecture whitepaper (RTX 4090, FP16 tensor, FP32 accumulate)",
              "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf")
_GA102_PAPER = ("NVIDIA Ampere GA102 whitepaper (RTX 3090, FP16 tensor, FP32 accumulate)",
                "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf")
_T4_SHEET = ("NVIDIA T4 datasheet (mixed precision FP16/FP32)", "https://www.nvidia.com/content/dam/en-zz/"
             "Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf")

CARDS = {card.name: card for card in (
    Card("a100", 312.0, 80.0, *_A100_SHEET),          # A100 80GB SXM: BF16/FP16 tensor 312 (624 sparse)
    Card("v100", FIGURES["v100_fp16_peak_tflops"].value, 32.0, *_V100_SHEET),   # V100 SXM2 32GB: 125
    Card("v100-16", FIGURES["v100_fp16_peak_tflops"].value, 16.0, *_V100_SHEET),
    Card("rtx4090", 165.2, 24.0, *_ADA_PAPER),        # 330.3 with FP16 accumulate; training uses FP32
    Card("rtx3090", 71.0, 24.0, *_GA102_PAPER),       # 142 with FP16 accumulate
    Card("t4", 65.0, 16.0, *_T4_SHEET),
)}
UTILISATION = 0.4   # assumption: the fraction of peak every card sustains (demo 1's figure for the V100)
EQUAL_CARD = "v100"   # the control: every card made demo 1's V100

# Demo 3's default world: 32 cards, regions filled in this order (8 per region).
DEFAULT_MIX = (("a100", 4), ("v100", 4), ("rtx4090", 8), ("rtx3090", 8), ("t4", 4), ("v100-16", 4))


def world_cards(mix):
    """Card names in device order from ((name, count), ...)."""
    return [name for name, count in mix for _ in range(count)]


def parse_mix(text):
    """'a100=4,t4=28' -> (("a100", 4), ("t4", 28)); ValueError with a one-line reason."""
    mix, seen = [], set()
    for part in text.split(","):
        name, sep, count = part.strip().partition("=")
        if not sep or name not in CARDS:
            raise ValueError(f"'{part[:8]}' 不是 卡=张数")
        if name in seen:
            raise ValueError(f"{name} 出现了两次")
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"{name} 的张数不是正整数")
        seen.add(name)
        mix.append((name, int(count)))
    return tuple(mix)


def parse_memory(text):
    """'t4=8,rtx3090=12' -> {"t4": 8.0, ...}: a card's memory replaced (GB)."""
    memory = {}
    for part in text.split(","):
        name, sep, gb = part.strip().partition("=")
        if not sep or name not in CARDS:
            raise ValueError("要写成 卡=GB")
        try:
            value = float(gb)
        except ValueError:
            value = -1.0
        if not 0 < value <= 1000:
            raise ValueError(f"{name}={gb[:6]} 超出范围")   # (0, 1000] GB
        memory[name] = value
    return memory
