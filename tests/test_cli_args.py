"""lecture01.cli_args.run_main, every script's last line: exit statuses, one line on Ctrl-C,
and no process left once the script has exited."""

import subprocess
import sys
import textwrap

import pytest

from lecture01.cli_args import run_main

pytestmark = pytest.mark.smoke


class PartFailed(Exception):
    pass


def exit_status(main, capsys, failures=()):
    with pytest.raises(SystemExit) as stopped:
        run_main(main, failures)
    return stopped.value.code, capsys.readouterr().err


def test_an_int_from_main_is_the_exit_status_and_anything_else_is_0(capsys):
    assert exit_status(lambda: 3, capsys)[0] == 3
    assert exit_status(lambda: {"rows": 1}, capsys)[0] == 0


def test_ctrl_c_is_one_line_and_status_130(capsys):
    def interrupted():
        raise KeyboardInterrupt
    status, err = exit_status(interrupted, capsys)
    assert status == 130 and err.strip() == "已中断 interrupted (Ctrl-C)"


def test_a_listed_failure_is_one_line_and_status_1_and_others_propagate(capsys):
    def failing():
        raise PartFailed("rank 2 died")
    status, err = exit_status(failing, capsys, failures=(PartFailed,))
    assert status == 1 and err.strip() == "错误 error: rank 2 died"
    with pytest.raises(PartFailed):
        run_main(failing)


def test_run_main_inside_a_program_that_goes_on_leaves_its_multiprocessing_alone(capsys):
    """The tracker is stopped at exit only: a caller that catches SystemExit (pytest) can
    still start pools afterwards."""
    import multiprocessing
    import multiprocessing.util
    exit_status(lambda: 0, capsys)
    assert not multiprocessing.util._exiting
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.map(abs, [-3]) == [3]


SPAWNING_SCRIPT = textwrap.dedent("""
    import multiprocessing
    from lecture01.cli_args import run_main

    def main():
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            return 0 if pool.map(abs, [-2]) == [2] else 1

    if __name__ == "__main__":
        run_main(main)
""")


def test_a_script_that_spawned_a_pool_leaves_no_process_when_it_exits(tmp_path):
    """A spawn pool starts multiprocessing's resource tracker, which on its own outlives the
    script by up to ~2 s; run_main stops it, so the group is empty the moment we look."""
    from conftest import group_processes
    script = tmp_path / "spawns.py"
    script.write_text(SPAWNING_SCRIPT, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, cwd=tmp_path)
    status = proc.wait(timeout=120)
    left = group_processes(proc.pid)
    err = proc.stderr.read().decode()
    assert status == 0, err
    assert not left, f"processes left behind: {left}"
    assert "leaked" not in err


def test_a_reader_that_goes_away_gets_no_traceback():
    """`python3 script.py | head -3`: the pipe closes while the script still prints."""
    import subprocess
    import sys
    from conftest import LECTURE09
    proc = subprocess.Popen([sys.executable, str(LECTURE09 / "03_memory_zero.py"), "--demo", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                  # before the script prints: what head does, early
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err, err


def test_sigint_ignored_while_children_start_and_restored_after():
    import signal
    import threading

    from lecture01.cli_args import sigint_ignored

    before = signal.getsignal(signal.SIGINT)
    with sigint_ignored():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is before
    seen = []

    def elsewhere():   # outside the main thread no handler can be set: it does nothing
        with sigint_ignored():
            seen.append(signal.getsignal(signal.SIGINT))
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert seen == [before]


def test_quick_names_the_flags_it_replaces_in_one_line_and_only_those(capsys):
    from lecture01.cli_args import Parser, given_flags, note_quick_overrides
    p = Parser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    note_quick_overrides(("ranks", "steps"), given_flags(p, ["--seed", "1"]))
    assert capsys.readouterr().err == ""                          # nothing it replaces was given
    note_quick_overrides(("ranks", "steps"), given_flags(p, ["--steps=9", "--ranks", "4", "--seed", "1"]))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "覆盖 --ranks --steps (overridden by --quick)" in err and "--seed" not in err


@pytest.mark.parametrize("script,argv,named", [
    ("01_collectives.py", ["--demo", "1", "--quick", "--repeats", "3"], "--repeats"),
    ("02_data_parallel.py", ["--quick", "--steps", "4"], "--steps"),
    ("03_memory_zero.py", ["--demo", "1", "--quick", "--ranks", "4"], "--ranks"),
    ("04_pipeline.py", ["--demo", "1", "--quick", "--cp-ranks", "4"], "--cp-ranks")])
def test_the_real_rank_scripts_say_what_quick_replaced(script, argv, named, capsys):
    from conftest import LECTURE09, load_script
    load_script(LECTURE09 / script).parse_args(argv)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err and "overridden by --quick" in err
