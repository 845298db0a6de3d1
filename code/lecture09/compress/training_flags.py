"""The flags shared by the lecture-9 scripts that train rows of runs over seed pairs
(code 5's demo 2 and code 7): training steps, the first seed pair, how many pairs, how many
processes, the forward precision.

Defined once, so both scripts name, check and explain them alike. No torch here: --help
and a flag error answer at once (tests check the defaults against compressed_dp).
"""

from lecture01.cli_args import add_precision_arguments, int_in, non_negative_int, positive_int

# compressed_dp.TrainSetup().steps, compressed_dp.Seeds(), one seed pair, two processes (2 cores)
DEFAULTS = dict(steps=300, model_seed=0, data_seed=1, seeds=1, jobs=2)
MAX_SEEDS = 10   # --seeds: 10 seed pairs x 10 rows = 100 runs, about 8 minutes on 2 cores


def add_training_arguments(group, defaults=DEFAULTS, steps_help="训练步数 training steps (default %(default)s)"):
    """Add --steps, --model-seed, --data-seed, --seeds, --jobs and the precision flags to
    an argparse parser or argument group (steps_help: for a script whose demos differ in steps)."""
    d = defaults
    group.add_argument("--steps", type=positive_int, default=d["steps"], help=steps_help)
    group.add_argument("--model-seed", type=non_negative_int, default=d["model_seed"],
                       help="模型初始化的种子 model init seed (default %(default)s)")
    group.add_argument("--data-seed", type=non_negative_int, default=d["data_seed"],
                       help="数据顺序的种子 data order seed (default %(default)s)")
    group.add_argument("--seeds", type=int_in(1, MAX_SEEDS), default=d["seeds"],
                       help="每行训练几组种子，打印平均和范围；第 k 组 = (模型+k, 数据+k) "
                            "(seed pairs per row, default %(default)s)")
    group.add_argument("--jobs", type=positive_int, default=d["jobs"],
                       help="同时训练的进程数，结果与它无关 training processes at once (default %(default)s)")
    add_precision_arguments(group)
