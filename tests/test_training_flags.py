"""lecture09.compress.training_flags: the training flags code 5 (demo 2) and code 7 share."""

import argparse

import pytest

from conftest import load_script, LECTURE09
from lecture09.compress import training_flags
from lecture09.compress.compressed_dp import Seeds, TrainSetup

pytestmark = pytest.mark.smoke

SHARED = ("--steps", "--model-seed", "--data-seed", "--seeds", "--jobs", "--precision", "--fp32")


def test_defaults_written_out_agree_with_compressed_dp():
    d, seeds = training_flags.DEFAULTS, Seeds()
    assert (d["steps"], d["model_seed"], d["data_seed"]) == (TrainSetup().steps, seeds.model, seeds.data)


def test_the_flags_parse_and_check_their_ranges():
    parser = argparse.ArgumentParser()
    training_flags.add_training_arguments(parser)
    args = parser.parse_args(["--steps", "12", "--seeds", str(training_flags.MAX_SEEDS), "--fp32"])
    assert (args.steps, args.seeds, args.fp32, args.jobs) == (12, training_flags.MAX_SEEDS, True, 2)
    for bad in (["--seeds", str(training_flags.MAX_SEEDS + 1)], ["--steps", "0"], ["--model-seed", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def _actions(parser):
    return {a.option_strings[0]: a for a in parser._actions if a.option_strings}


@pytest.mark.parametrize("script", ["05_decentralized.py", "07_compression_beyond.py"])
def test_codes_5_and_7_use_the_one_definition(script, monkeypatch):
    """Each script's parser has exactly the shared flags' types, defaults and help texts."""
    module = load_script(LECTURE09 / script)
    reference = argparse.ArgumentParser()
    training_flags.add_training_arguments(reference)
    seen = {}

    def capture(self, args=None, namespace=None):
        seen.update(_actions(self))
        raise SystemExit(0)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(SystemExit):
        module.parse_args([])
    for flag in SHARED:
        mine, theirs = seen[flag], _actions(reference)[flag]
        if (script, flag) == ("05_decentralized.py", "--steps"):   # the class run's 240, --demo time's 300
            assert mine.default == module.CLASS_STEPS and f"--demo time {module.TIME_STEPS}" in mine.help
            assert module.TIME_STEPS == theirs.default and mine.choices is theirs.choices is None
        else:
            assert (mine.help, mine.default, mine.choices) == (theirs.help, theirs.default, theirs.choices), flag
        if theirs.type is not None:   # the same checks: the same values accepted and refused
            assert [_parsed(mine.type, v) for v in SAMPLES] == [_parsed(theirs.type, v) for v in SAMPLES], flag


SAMPLES = ("-1", "0", "1", "10", "11", "300", "x")


def _parsed(parse, text):
    try:
        return parse(text)
    except (argparse.ArgumentTypeError, ValueError):
        return "refused"
