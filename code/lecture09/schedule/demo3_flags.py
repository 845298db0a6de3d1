"""Code 5's demo 3 on the command line: its flag group, the setup they make, and the
one-line refusals (a card too small for one layer, a mix of the wrong size) given before
any search runs (lecture 9, §5.11). The script calls add_arguments, hetero_setup, run_demo3.
"""

import argparse
import sys
from dataclasses import replace

from lecture01.cli_args import int_in
from lecture09.schedule.demo3_observations import run_demo3  # noqa: F401  (the script's one call)
from lecture09.schedule.device_figures import CARDS, DEFAULT_MIX, parse_memory, parse_mix
from lecture09.schedule.hetero_cost import HeteroSetup
from lecture09.schedule.hetero_study import refusal

QUICK = dict(budget=600, small_budget=600, seeds=2)   # --quick: each search a few hundred costs
MAX_BUDGET = 1_000_000


def _typed(parse):
    def convert(text):
        try:
            return parse(text)
        except ValueError as why:
            raise argparse.ArgumentTypeError(str(why)) from None
    return convert


def add_arguments(parser):
    """Demo 3's flags, in their own group (returned)."""
    g = parser.add_argument_group("演示 3 demo 3（异构的卡 mixed cards）")
    default_mix = ",".join(f"{name}={n}" for name, n in DEFAULT_MIX)
    g.add_argument("--mix", type=_typed(parse_mix), default=default_mix, metavar="卡=张数,...",
                   help=f"每种卡几张，按这个顺序填满地区；卡 cards: {', '.join(CARDS)} (default %(default)s)")
    g.add_argument("--memory-gb", type=_typed(parse_memory), default=None, metavar="卡=GB,...",
                   help="把某种卡的显存换成这个数 a card's memory, GB，例如 t4=8 (default: 不写，用厂商的数)")
    g.add_argument("--hetero-budget", type=int_in(1, MAX_BUDGET), default=HeteroSetup().budget,
                   help="演示 1 规模上每种搜索每次的代价计算次数 cost evaluations per search (default %(default)s)")
    return g


def hetero_setup(parser, args, schedule, given, demo3_dests):
    """The HeteroSetup the flags ask for (None unless --demo 3), refused in one line by
    parser.error when the cards cannot run the job; a note when its flags go unused."""
    if args.demo != "3":
        unused = sorted(demo3_dests & given)
        if unused:
            print("注意 note: 演示 3 的参数只在 --demo 3 时用，忽略 "
                  + " ".join("--" + d.replace("_", "-") for d in unused) + " (ignored)", file=sys.stderr)
        return None
    memory = args.memory_gb or {}
    hetero = HeteroSetup(base=schedule, mix=args.mix, memory_gb=tuple(sorted(memory.items())),
                         budget=args.hetero_budget, record=bool(args.figures))   # --figures: the convergence
    if args.quick:
        hetero = replace(hetero, **QUICK)
    least = schedule.genetic_population * (schedule.genetic_local_iters + 1)
    if hetero.budget < least:
        parser.error(f"--hetero-budget 至少要 {least}")
    unknown = sorted(set(memory) - set(hetero.cards))
    if unknown:
        parser.error(f"--memory-gb 的 {unknown[0]} 不在 --mix 里")
    why = refusal(hetero)
    if why:
        parser.error(why)
    return hetero
