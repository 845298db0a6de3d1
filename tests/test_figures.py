"""The figures (`--figures DIR`, lecture01/figures.py; issue 42 item 4).

- Figures of arithmetic are redrawn into a temporary folder and compared byte for byte with
  the committed files in lectures/lecture09/figures/ (a changed formula, font, style or
  matplotlib version shows up here: regenerate with the command CAPTIONS.md gives).
- The course font draws the Chinese labels (their outlines are the font's glyphs, not the
  empty box), a character it lacks stops the figure with one message naming it.
- --help never imports matplotlib; a bad --figures path is one line and exit status 2.
- Each script's quick run with --figures writes the files it should (the main part
  draws from the shared quick runs; the sweep tier runs every script as a student would).
- CAPTIONS.md has an entry (section, alt text, caption) for every committed figure.
"""

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import LECTURE09, ROOT, SWEEP_TIER, load_script, main_quietly, shared_quick_run, student_run

FIGURES = ROOT / "lectures" / "lecture09" / "figures"
CAPTIONS = FIGURES / "CAPTIONS.md"

# the command that drew the committed figures: (script, its arguments, the files)
ARITHMETIC = {
    "01_collectives.py": ("01_collectives.py", ("--demo", "4"), ("fig09_01_allreduce_time.svg",)),
    "03_memory_zero.py": ("03_memory_zero.py", ("--demo", "2"), ("fig09_03_zero_memory.svg",)),
    "04_pipeline.py": ("04_pipeline.py", ("--demo", "1"), ("fig09_04_schedules.svg", "fig09_04_bubble.svg")),
    "05_decentralized.py": ("05_decentralized.py", ("--demo", "1"),
                            ("fig09_05_regions_optimum.svg", "fig09_05_random_layouts.svg")),
    "05_decentralized.py --demo 3": ("05_decentralized.py", ("--demo", "3"), ("fig09_05_demo3_convergence.svg",)),
}
# script: the files its --quick --figures run writes (trained and measured ones included)
QUICK_FILES = {
    "01_collectives.py": ("fig09_01_allreduce_time.svg",),
    "02_data_parallel.py": ("fig09_02_overlap_timeline.svg",),
    "03_memory_zero.py": ("fig09_03_zero_memory.svg",),
    "04_pipeline.py": ("fig09_04_schedules.svg", "fig09_04_bubble.svg"),
    "05_decentralized.py": ("fig09_05_regions_optimum.svg", "fig09_05_random_layouts.svg",
                            "fig09_05_compression_loss.svg"),
    "06_swarm_http.py": ("fig09_06_membership.svg",),
    "07_compression_beyond.py": ("fig09_07_loss_curves.svg",),
    "09_torchft.py": ("fig09_09_membership.svg",),
    "10_hivemind.py": ("fig09_10_membership.svg",),
    "11_frontier.py": ("fig09_11_frontier.svg",),
}


def script_module(script):
    """The script loaded once per session (the shared quick runs load the same module)."""
    return sys.modules.get("script_" + script[:-3]) or load_script(LECTURE09 / script)


def redraw(script, argv, directory):
    main_quietly(script_module(script).main, [*argv, "--figures", str(directory)])


# --- byte for byte ---------------------------------------------------------------------

# demo 3 searches for about 5 CPU-seconds: its bytes are checked in the sweep tier (CI runs
# it); the main part draws its figure from a quick study (test_demo3_convergence_...)
SWEPT = {"05_decentralized.py --demo 3"}


@pytest.mark.parametrize("command", [pytest.param(c, marks=SWEEP_TIER if c in SWEPT else ()) for c in sorted(ARITHMETIC)])
def test_arithmetic_figures_are_the_committed_bytes(command, tmp_path):
    script, argv, files = ARITHMETIC[command]
    redraw(script, argv, tmp_path)
    for name in files:
        assert (tmp_path / name).read_bytes() == (FIGURES / name).read_bytes(), \
            f"{name} differs from the committed file: python3 code/lecture09/{script} {' '.join(argv)} " \
            f"--figures lectures/lecture09/figures"


def test_a_figure_is_the_same_bytes_twice_and_carries_no_date(tmp_path):
    from lecture01 import figures

    for run in ("a", "b"):
        with figures.figure(tmp_path / run, "fig09_00_test.svg", size=(3, 2)) as (fig, ax):
            ax.plot([0, 1], [1, 0], label="环形 ring")
            ax.set_title("图 α–β")
            ax.legend()
    first = (tmp_path / "a" / "fig09_00_test.svg").read_bytes()
    assert first == (tmp_path / "b" / "fig09_00_test.svg").read_bytes()
    assert b"<dc:date>" not in first and b"<text" not in first        # text drawn as paths


# --- the font ----------------------------------------------------------------------------

def glyph_paths(svg_bytes):
    """{glyph id: outline} of the text drawn as paths in an SVG."""
    root = ET.fromstring(svg_bytes)
    return {e.get("id"): e.get("d") for e in root.iter("{http://www.w3.org/2000/svg}path") if e.get("id")}


def test_chinese_labels_are_drawn_from_the_course_font(tmp_path):
    """Every character of the title is a glyph of FM Course Sans SC with an outline of its
    own: two different characters never share one (the empty box a missing glyph gets)."""
    from lecture01 import figures

    text = "流水线阶段气泡"
    with figures.figure(tmp_path, "fig09_00_font.svg", size=(3, 1)) as (fig, ax):
        ax.set_title(text)
    glyphs = glyph_paths((tmp_path / "fig09_00_font.svg").read_bytes())
    outlines = []
    for char in text:
        gid = f"FMCourseSansSC-Regular-{ord(char):x}"
        assert gid in glyphs, (char, sorted(glyphs)[:5])
        assert glyphs[gid].count("L") + glyphs[gid].count("Q") + glyphs[gid].count("C") > 8, char
        outlines.append(glyphs[gid])
    assert len(set(outlines)) == len(text)


def test_a_character_the_font_lacks_stops_the_figure_and_is_named(tmp_path):
    from lecture01 import figures

    with pytest.raises(figures.MissingGlyphs, match="U\\+D55C"):
        with figures.figure(tmp_path, "fig09_00_missing.svg", size=(3, 1)) as (fig, ax):
            ax.set_title("한")
    assert not (tmp_path / "fig09_00_missing.svg").exists()


def test_the_font_is_the_renamed_subset_with_its_licence():
    from matplotlib.ft2font import FT2Font
    from lecture01 import figures

    font = FT2Font(str(figures.FONT_FILE))
    assert font.family_name == figures.FONT_FAMILY
    licence = (figures.FONT_FILE.parent / "OFL.txt").read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Noto Sans CJK SC" in licence
    have = figures.font_characters()
    assert set("的一是在不了有和人这中大为上个国我以要他") <= have      # common characters
    assert set("αβΔτ×≈−→") <= have                                     # the signs the figures use


def test_a_figure_name_must_say_lecture_and_section(tmp_path):
    from lecture01 import figures

    with pytest.raises(ValueError, match="fig<lecture>_<section>"):
        with figures.figure(tmp_path, "schedules.svg"):
            pass


# --- the flag ------------------------------------------------------------------------------

# the one-minute check tries one script; the main part every one
ONE_IN_SMOKE = [pytest.param(s, marks=pytest.mark.smoke if s == "04_pipeline.py" else ()) for s in sorted(QUICK_FILES)]


@pytest.mark.parametrize("script", ONE_IN_SMOKE)
def test_help_does_not_import_matplotlib(script):
    done = subprocess.run([sys.executable, "-X", "importtime", str(LECTURE09 / script), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--figures DIR" in done.stdout
    assert "matplotlib" not in done.stderr


@pytest.mark.parametrize("script", ONE_IN_SMOKE)
def test_a_bad_figures_path_is_one_line_and_status_2(script, tmp_path):
    from lecture01.console import display_width

    a_file = tmp_path / "a_file.svg"
    a_file.write_text("x")
    for path, words in ((a_file, "not a folder"), (a_file / "inside", "not a folder")):
        done = subprocess.run([sys.executable, str(LECTURE09 / script), "--figures", str(path)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stdout == "", (script, done.stderr)
        assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
        # the parser's own frame ("NN_script.py: error: --figures: ...（见 --help）", cli_args.
        # refusal_line) is every flag's; the message this flag adds fits in 50 columns, path and all
        message = done.stderr.split("--figures: ", 1)[1].split("（见 --help", 1)[0]
        assert display_width(message) <= 50, message
        assert "Traceback" not in done.stderr


def test_figures_dir_accepts_a_new_folder_and_refuses_a_file(tmp_path):
    import argparse
    from lecture01.cli_args import figures_dir

    assert figures_dir(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()                  # made when the first figure is written
    (tmp_path / "f").write_text("")
    with pytest.raises(argparse.ArgumentTypeError, match="not a folder"):
        figures_dir(str(tmp_path / "f"))
    with pytest.raises(argparse.ArgumentTypeError, match="not a folder"):
        figures_dir(str(tmp_path / "f" / "sub"))


# --- each script's quick run ---------------------------------------------------------------

# script: how its figure module is called on the quick run's results (the setups from --quick)
SHARED = {"01_collectives.py": lambda m, r, d: m.draw(d, script_module("01_collectives.py").parse_args(["--quick"])[1], r),
          "03_memory_zero.py": lambda m, r, d: m.draw(d, script_module("03_memory_zero.py").parse_args(["--quick"])[1], r),
          "04_pipeline.py": lambda m, r, d: m.draw(d, script_module("04_pipeline.py").parse_args(["--quick"])[4], r),
          "02_data_parallel.py": lambda m, r, d: m.draw(d, r)}
MODULES = {"01_collectives.py": "lecture09.ranks.collectives_figures",
           "02_data_parallel.py": "lecture09.parallel.profile_figures",
           "03_memory_zero.py": "lecture09.parallel.memory_figures",
           "04_pipeline.py": "lecture09.parallel.pipeline_figures"}


@pytest.mark.parametrize("script", sorted(SHARED))
def test_the_shared_quick_run_draws_its_figures(script, tmp_path):
    """The main part: the figures of the quick run every other test reads."""
    import importlib

    results, _ = shared_quick_run(script)
    SHARED[script](importlib.import_module(MODULES[script]), results, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(QUICK_FILES[script])
    for name in QUICK_FILES[script]:
        ET.fromstring((tmp_path / name).read_bytes())       # well-formed SVG


# The flags of the sweep's run. It is conftest.student_run's one fresh run of `--quick
# --figures DIR` under PYTHONIOENCODING=cp936, which the golden comparison of a fresh process
# (test_golden_outputs.py, where its flags are these) and the code-page check of the script
# (test_console_encoding.py) read too: each test makes its own assertions on the one run.
STUDENT_ARGV = ("--quick",)


def quick_run_with_figures(script):
    return student_run(LECTURE09 / script, STUDENT_ARGV, code_page="cp936", figures=True)


@pytest.mark.parametrize("script", sorted(QUICK_FILES))
@pytest.mark.slow
@pytest.mark.sweep
def test_quick_run_with_figures_writes_the_files(script):
    """The sweep tier: each script as a student runs it, --quick --figures DIR."""
    if script == "09_torchft.py" and not sys.platform.startswith("linux"):
        pytest.skip("torchft runs on Linux only")
    if script == "10_hivemind.py" and sys.platform == "win32":
        pytest.skip("hivemind does not run on Windows")
    done = quick_run_with_figures(script)
    out = done.figures
    assert done.status == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(QUICK_FILES[script])
    for name in QUICK_FILES[script]:
        ET.fromstring((out / name).read_bytes())
        assert f"figure: {out / name}" in done.stderr


# --- captions ------------------------------------------------------------------------------

def caption_entries():
    """{file: {field: value}} from CAPTIONS.md's '## fig09_....svg' entries."""
    entries, current = {}, None
    for line in CAPTIONS.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^## (fig\d\d_\d\d_[a-z0-9_]+\.svg)$", line)
        if heading:
            current = entries.setdefault(heading.group(1), {})
            continue
        field = re.match(r"^- \*\*(\w[\w ]*)\*\*: (.+)$", line)
        if current is not None and field:
            current[field.group(1)] = field.group(2)
    return entries


def test_every_committed_figure_has_its_caption_and_alt_text():
    entries = caption_entries()
    committed = sorted(p.name for p in FIGURES.glob("*.svg"))
    assert sorted(entries) == committed
    assert len(committed) >= 12
    arithmetic = {name for _, _, files in ARITHMETIC.values() for name in files}
    every_file = {name for files in QUICK_FILES.values() for name in files} | arithmetic
    assert set(committed) <= every_file                     # each drawn by a script's --figures
    assert arithmetic <= set(committed)
    for name, fields in entries.items():
        assert {"section", "drawn by", "kind", "alt", "caption"} <= set(fields), (name, fields)
        assert fields["kind"].startswith("arithmetic" if name in arithmetic else ("trained", "measured")), name
        assert re.search(r"[\u4e00-\u9fff]", fields["caption"]) and len(fields["alt"]) > 20, name


# --- demo 3's convergence (code 5, §5.11) -------------------------------------------------

def test_demo3_convergence_curves_are_the_searches_own_runs(tmp_path):
    """Each curve is one run of one search as HeteroCost recorded it: a run per seed (one per
    enumeration), the runs' evaluations add up to the printed count, each curve only falls,
    and the best curve of a search ends on that search's printed total. Recording is off
    unless asked (demo 3's default run does no extra work). Drawn without the small instance
    (as when nothing fits it; with it, the sweep tier compares the committed bytes)."""
    import dataclasses
    from lecture09.schedule import hetero_figures
    from lecture09.schedule.hetero_cost import HeteroSetup
    from lecture09.schedule.hetero_study import study
    from lecture09.schedule.schedule_setup import ScheduleSetup

    base = ScheduleSetup(n_random=20, restarts=2, genetic_population=3, genetic_local_iters=100)
    hetero = HeteroSetup(base=base, budget=400, small_budget=450, seeds=2)   # 450: 4 x 101 on the small one
    assert hetero.record is False
    r = study(dataclasses.replace(hetero, record=True))
    for inst in (r.small, r.large):
        curves = hetero_figures.curves(inst.cost)
        for name, result in inst.results.items():
            mine = [c for c in curves if c.search == name]
            assert len(mine) == (hetero.seeds if name in ("genetic", "graph") else 1), name
            assert sum(c.length for c in mine) == result.evaluations, name
            for c in mine:
                xs, ys = zip(*c.points)
                assert list(xs) == sorted(set(xs)) and xs[-1] <= c.length
                assert all(a > b for a, b in zip(ys, ys[1:])), name
            raw = [run for run in inst.cost.runs if run[0] == name]
            assert min(run[2][-1][1] for run in raw) == result.total_ps, name
    hetero_figures.draw(tmp_path, {"demo3": dataclasses.replace(r, small=None)})   # both panels: the sweep's bytes
    ET.fromstring((tmp_path / hetero_figures.FILE).read_bytes())
