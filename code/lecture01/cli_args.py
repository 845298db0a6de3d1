"""Flags for every script: a parser whose help fits the projector, and checked types.

Introduced in lecture 1; every script builds its flags with `Parser` and these types, so
`--steps -3` or `--lr nan` is refused the same way everywhere: one line naming the flag
and a hint to --help, exit status 2, never a traceback nor the whole usage block.

    parser = Parser(description="...")
    parser.add_argument("--steps", type=int_at_least(1))
    parser.add_argument("--lr", type=positive_float)
"""

import argparse
import contextlib
import math
import os
import shutil

from lecture01.console import LINE_WIDTH, display_width, wrap


class DisplayWidthHelpFormatter(argparse.HelpFormatter):
    """argparse's help, wrapped by display columns (a Chinese character takes two), within
    the terminal and never wider than LINE_WIDTH (argparse itself counts characters)."""

    def __init__(self, prog, **kwargs):
        columns = min(shutil.get_terminal_size((LINE_WIDTH, 24)).columns, LINE_WIDTH)
        kwargs.setdefault("width", columns - 2)            # argparse's own margin
        kwargs.setdefault("max_help_position", 24)
        super().__init__(prog, **kwargs)

    def _split_lines(self, text, width):
        return wrap(self._whitespace_matcher.sub(" ", text).strip(), width=width, indent="") or [""]

    def _fill_text(self, text, width, indent):
        lines = wrap(indent + self._whitespace_matcher.sub(" ", text).strip(), width=width, indent=indent)
        return "\n".join(lines)


def given_flags(parser, argv):
    """The dests of the flags actually on the command line, whatever their values: the
    same (already valid) command line parsed once more with every default suppressed."""
    saved = [(action, action.default) for action in parser._actions]
    try:
        for action, _ in saved:
            action.default = argparse.SUPPRESS
        return set(vars(parser.parse_args(argv)))
    finally:
        for action, default in saved:
            action.default = default


def note_quick_overrides(dests, given):
    """--quick replaces the flags `dests` (argparse dests); those the command line also gave
    (`given`: given_flags) are named in one stderr line, and the run goes on."""
    import sys
    replaced = sorted(set(dests) & given)
    if replaced:
        print("注意 note: --quick 用自己的小设置，覆盖 " + " ".join("--" + n.replace("_", "-") for n in replaced)
              + " (overridden by --quick)", file=sys.stderr)


def apply_quick(args, settings, given):
    """--quick: set `settings` (argparse dest -> value) on args; if the command line also gave
    some of those flags (`given`: given_flags), run anyway and say so in one stderr line."""
    note_quick_overrides(settings, given)
    for name, value in settings.items():
        setattr(args, name, value)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser with DisplayWidthHelpFormatter, whose errors are one line."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DisplayWidthHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, refusal_line(os.path.basename(self.prog), message) + "\n")


HINT = "（见 --help）"


def refusal_line(prog, message, width=LINE_WIDTH):
    """The one line a refused command line prints: the script, the flag, what was wrong, a
    hint to --help; within `width` display columns (a Chinese character counts two), saying
    less until it fits: argparse's "argument " and quotes go, then the script's name, then an
    invalid choice's list of choices (--help has it). Never cut in the middle of a word; a
    message that still does not fit is printed whole (the refusal sweep, tests/test_refusals.py,
    finds it)."""
    import re
    message = re.sub(r"^argument ", "", message)
    message = re.sub(r"argument (--[\w-]+)", r"\1", message)          # "not allowed with argument --serve"
    choice = re.search(r"invalid choice: (.+?) \(choose from (.*)\)$", message)
    short = message
    if choice:
        listed = ", ".join(c.strip("'") for c in choice.group(2).split(", "))
        head = message[:choice.start()]
        message = f"{head}无效的值 invalid choice {choice.group(1)}（可选 choose from {listed}）"
        short = f"{head}无效的值 invalid choice {choice.group(1)}（可选的值见 --help）"
    hint = "" if choice else HINT                  # the list of choices, or where to find it, is the hint
    candidates = [f"{prog}: error: {message}{hint}", f"error: {message}{hint}",
                  f"{prog}: error: {short}{hint}", f"error: {short}{hint}"]
    return next((line for line in candidates if display_width(line) <= width), candidates[-1])


def int_in(low=None, high=None):
    """An argparse type: an integer with low <= value <= high (either bound may be None)."""
    bounds = (f">= {low}" if high is None else f"in [{low}, {high}]") if low is not None else \
        (f"<= {high}" if high is not None else "")

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"需要整数 (expected an integer {bounds}), got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"需要整数 (expected an integer {bounds}), got {value}")
        return value

    return parse


def int_at_least(minimum):
    return int_in(minimum, None)


def float_in(low, high, low_open=False, high_open=False):
    """An argparse type: a finite float between low and high (open or closed ends;
    None for no bound)."""
    left = "(" if low_open or low is None else "["       # no bound: inf itself is refused (not finite)
    right = ")" if high_open or high is None else "]"
    described = f"in {left}{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}{right}"

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"需要数 (expected a number {described}), got {text!r}") from None
        ok = math.isfinite(value)
        if ok and low is not None:
            ok = value > low if low_open else value >= low
        if ok and high is not None:
            ok = value < high if high_open else value <= high
        if not ok:
            raise argparse.ArgumentTypeError(f"需要数 (expected a number {described}), got {text!r}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)
positive_float = float_in(0, None, low_open=True)
non_negative_float = float_in(0, None)
ratio = float_in(0, 1, low_open=True)          # a fraction in (0, 1]


def add_precision_arguments(parser):
    """--precision {auto,bf16,fp32} and its shorthand --fp32, for every training script.

    Read the choice back with precision_from_args(args)."""
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                        help="前向计算的精度 forward precision: auto = 这台 CPU 有 bf16 硬件就用 bf16，"
                             "否则 fp32 (default %(default)s)")
    parser.add_argument("--fp32", action="store_true", help="等于 --precision fp32 (same as --precision fp32)")


def precision_from_args(args):
    """"bf16" or "fp32": what the flags of add_precision_arguments ask for on this CPU."""
    from lecture01.tiny_gpt import resolve_precision   # imported here: --help must not wait for torch

    return resolve_precision("fp32" if args.fp32 else args.precision)


def _path_tail(path, width=20):
    """A path for a one-line message: its last `width` characters."""
    text = str(path)
    return repr(text if len(text) <= width else "..." + text[-(width - 3):])


def figures_dir(text):
    """An argparse type: a folder to write figures into. It may not exist yet (it is made
    when the first figure is written), but the nearest existing folder above it must be a
    writable folder, and the path itself must not be a file."""
    from pathlib import Path

    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"不是文件夹 (not a folder): {_path_tail(text)}")
    ancestor = path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"不是文件夹 (not a folder): {_path_tail(ancestor)}")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"不能写 (not writable): {_path_tail(ancestor)}")
    return path


def add_figures_flag(parser):
    """--figures DIR, for a script that has a picture (default: none, no figure and no
    matplotlib); lecture01/figures.py draws and writes them."""
    parser.add_argument("--figures", metavar="DIR", type=figures_dir, default=None,
                        help="把这个脚本的图写成 SVG 文件放进 DIR（用 matplotlib）"
                             "write this script's figures into DIR as SVG files (default: 不画 none)")


@contextlib.contextmanager
def sigint_ignored():
    """Ctrl-C ignored while child processes start. Ctrl-C reaches the whole process group,
    but only the parent should answer it (one line, then it stops its children); a child
    would print a traceback. An ignored signal stays ignored across exec, and Python then
    keeps it so; a forked child inherits it. Outside the main thread (where signal handlers
    cannot be set) this does nothing."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_main(main, failures=()):
    """Every script's last line: run main(); Ctrl-C stops it with one line and status 130.

    The scripts' own clean-up (finally blocks, gloo_ranks, process pools) has already
    stopped every process they started by the time KeyboardInterrupt arrives here, so one
    line is all a student needs to see. `failures`: exception types that mean "a part of
    the run failed" (e.g. gloo_ranks.RankFailed): one line and no traceback, status 1 (or
    the exception's `exit_status`, 2 for a usage error). An int returned by main() is the
    exit status.

    Started by torchrun as one of several ranks (RANK, WORLD_SIZE, LOCAL_RANK set), only
    rank 0 writes to stdout: every rank runs the whole script, and the class reads one copy.
    """
    import atexit
    import gc
    import os
    import sys

    if os.environ.get("RANK", "0") != "0" and "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ:
        sys.stdout.flush()                # file descriptor 1 itself: also what modules bound at import
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)

    # The last exit handler (they run last registered, first run): freeze what is left, so
    # the interpreter's final garbage collection does not walk torch's objects one by one,
    # about 1 s on this machine once torch.optim has imported torch._dynamo. It frees nothing
    # that matters: the process is ending. At exit, not here: a test goes on after SystemExit.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    # At exit, not here: a caller that goes on after SystemExit (a test) keeps its pools.
    atexit.unregister(stop_resource_tracker)
    atexit.register(stop_resource_tracker)
    try:
        status = main()
    except KeyboardInterrupt:
        print("\n已中断 interrupted (Ctrl-C)", file=sys.stderr)
        sys.exit(130)
    except failures as error:
        print(f"错误 error: {error}", file=sys.stderr)
        sys.exit(getattr(error, "exit_status", 1))
    except BrokenPipeError:               # the reader went away (python3 script.py | head): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())     # so the interpreter's own flush at exit finds no pipe
        sys.exit(1)
    sys.exit(status if isinstance(status, int) else 0)


def stop_resource_tracker():
    """Stop multiprocessing's resource tracker now, if this process started one.

    A "spawn" pool or process starts it (a helper process that unlinks semaphores left
    behind); on its own it ends only after the script has exited, on this machine up to
    2 s later, so the shell prompt (or a tool that checks the process group) would find
    a process still running. Multiprocessing's own exit clean-up runs first: it joins the
    children and unregisters every semaphore, so the tracker has nothing left to do, and
    nothing after it would start a new one. Both are private calls of the standard
    library, hence the guard: if they change, the tracker just ends a moment later.
    run_main registers this with atexit; whichever of the two exit handlers runs first,
    the stdlib's clean-up runs once and before the tracker stops.
    """
    import sys

    util, tracker = sys.modules.get("multiprocessing.util"), sys.modules.get("multiprocessing.resource_tracker")
    if util is None or tracker is None:
        return
    try:
        util._exit_function()        # what atexit would run: finalizers, children joined
        tracker._resource_tracker._stop()
    except (AttributeError, OSError, ChildProcessError):
        pass
