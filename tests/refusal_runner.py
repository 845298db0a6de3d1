"""Run one script's refusals in this one process, as `python3 script.py ARGS` would run each
(runpy, __name__ == "__main__", so run_main is the one a student's run goes through), and
report, for each, the exit status, stdout, stderr and whether torch was imported by then.

    python3 tests/refusal_runner.py SCRIPT < cases.json > results.json

cases.json: a list of argv lists. Stops after the first case that imports torch (what
follows would all look guilty); the caller starts it again for the rest. Used by
tests/test_refusals.py: one process per script instead of one per case.
"""

import contextlib
import io
import json
import runpy
import sys

HEAVY = ("torch", "hivemind", "torchft")
SECONDS = 60          # a case that is not refused by then is running for real: stopped, reported


class TookTooLong(Exception):
    pass


def alarm(signum, frame):
    raise TookTooLong(f"not refused within {SECONDS} s")


def main():
    script = sys.argv[1]
    cases = json.load(sys.stdin)
    real_stdout = sys.stdout
    import signal
    signal.signal(signal.SIGALRM, alarm)
    results = []
    for argv in cases:
        out, err = io.StringIO(), io.StringIO()
        sys.argv = [script, *argv]
        status = 0
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                signal.alarm(SECONDS)
                runpy.run_path(script, run_name="__main__")
            except SystemExit as stop:
                status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            except BaseException as error:                   # a traceback: reported, not raised
                import traceback
                status = "traceback"
                err.write(traceback.format_exc())
            finally:
                signal.alarm(0)
        heavy = [name for name in HEAVY if name in sys.modules]
        results.append({"argv": argv, "status": status, "stdout": out.getvalue(), "stderr": err.getvalue(),
                        "heavy": heavy})
        if heavy:
            break
    json.dump(results, real_stdout)


if __name__ == "__main__":
    main()
