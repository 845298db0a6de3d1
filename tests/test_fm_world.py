"""Tests for the toy world (code/lecture01/fm_world.py) and its tour script 01_world.py."""

import re

import pytest

from lecture01 import fm_world
from conftest import LECTURE01, load_script
from lecture01.fm_world import ALPHABET, Fact, World, WorldConfig, build_world

pytestmark = pytest.mark.smoke


@pytest.fixture(scope="module")
def world():
    return build_world(0)


@pytest.fixture(scope="module")
def script():
    return load_script(LECTURE01 / "01_world.py")


# -- alphabet ---------------------------------------------------------------------

def test_alphabet_has_44_distinct_characters():
    assert len(ALPHABET) == 44
    assert len(set(ALPHABET)) == 44


def test_alphabet_order_fixes_token_ids():
    # Token ids are positions in ALPHABET; lecture 9 views logits as (-1, 44).
    assert ALPHABET[0] == "\n" and ALPHABET[1] == " "
    assert ALPHABET[2:28] == "abcdefghijklmnopqrstuvwxyz"
    assert ALPHABET[28:38] == "0123456789"
    assert ALPHABET[38:] == ".,'?-:"


def test_every_character_of_both_texts_is_in_the_alphabet(world):
    allowed = set(ALPHABET)
    assert set(world.train_text()) <= allowed
    assert set(world.val_text()) <= allowed


# -- determinism and sizes ----------------------------------------------------------

def test_same_seed_gives_identical_world(world):
    again = build_world(0)
    assert again.train_text() == world.train_text()
    assert again.val_text() == world.val_text()
    assert again.facts == world.facts


def test_different_seed_gives_different_world(world):
    other = build_world(1)
    assert other.train_text() != world.train_text()
    assert other.facts != world.facts


def test_texts_are_cached(world):
    assert world.train_text() is world.train_text()
    assert world.val_text() is world.val_text()


def test_sizes(world):
    assert len(world.train_text()) >= 1_000_000
    assert 50_000 <= len(world.val_text()) <= 200_000
    s = world.summary()
    assert 200 <= s["people"] <= 400 and 20 <= s["towns"] <= 30 and s["jobs"] == 20
    assert s["train_chars"] == len(world.train_text())
    assert s["facts"] == len(world.facts)
    assert s["people"] == len(world.people) and s["events"] == len(world.events)


# -- the split ----------------------------------------------------------------------

def test_texts_are_the_joined_documents(world):
    assert world.train_text() == "\n".join(world.train_documents)
    assert world.val_text() == "\n".join(world.val_documents)
    assert all(d.endswith("\n") for d in world.train_documents + world.val_documents)


def test_validation_documents_are_disjoint_from_training(world):
    assert len(world.val_documents) > 0
    assert not set(world.val_documents) & set(world.train_documents)
    assert len(set(world.train_documents)) == len(world.train_documents)


def test_records_go_to_training_only(world):
    n_subjects = len(world.people) + len(world.towns) + len(world.jobs) + len(world.events)
    assert sum(d.startswith("record:") for d in world.train_documents) == n_subjects
    assert not any(d.startswith("record:") for d in world.val_documents)


# -- facts ----------------------------------------------------------------------------

def test_every_probe_sentence_occurs_in_training_text(world):
    text = world.train_text()
    probeable = [f for f in world.facts if f.relation in fm_world.PROBE_RELATIONS]
    assert len(probeable) > 1000
    missing = [f for f in probeable if "".join(world.probe(f)) + "." not in text]
    assert missing == []


def test_person_facts_are_stated_several_times(world):
    """A person's name and home town share at least 3 training documents (the record
    is one); without repetition a model could not learn the fact."""
    index = {}
    for i, doc in enumerate(world.train_documents):
        for word in set(re.findall(r"[a-z0-9]+", doc)):
            index.setdefault(word, set()).add(i)
    for p in world.people:
        assert len(index[p.name] & index[p.town]) >= 3, p.name
        assert len(index[p.name] & index[p.job]) >= 3, p.name


def test_facts_match_entities(world):
    facts = set(world.facts)
    for p in world.people:
        assert Fact(p.name, "lives_in", p.town) in facts
        assert Fact(p.name, "works_as", p.job) in facts
        assert Fact(p.name, "age", str(p.age)) in facts
    for t in world.towns:
        assert Fact(t.name, "river", t.river) in facts
    for e in world.events:
        assert Fact(e.name, "year", str(e.year)) in facts
        assert Fact(e.name, e.role, e.person) in facts


def test_world_is_consistent(world):
    people = {p.name: p for p in world.people}
    town_names = {t.name for t in world.towns}
    job_names = {j.name for j in world.jobs}
    assert len(people) == len(world.people)                      # first names unique
    assert not town_names & set(people)                          # no town named like a person
    for p in world.people:
        assert p.town in town_names and p.job in job_names and p.age >= 18
        if p.mother is not None:
            mother, father = people[p.mother], people[p.father]
            assert mother.female and not father.female
            assert min(mother.age, father.age) - p.age >= 20
            assert mother.family == father.family == p.family
        if p.spouse is not None:
            assert people[p.spouse].spouse == p.name and people[p.spouse].town == p.town
        if p.best_friend is not None:
            assert p.best_friend != p.name and people[p.best_friend].best_friend == p.name
    for j in world.jobs:
        assert j.name[0] not in "aeiou" and j.tool[0] not in "aeiou"   # "a {job}", "a {tool}"
    for e in world.events:
        assert e.town in town_names
        assert fm_world.PRESENT_YEAR - people[e.person].age + 18 <= e.year < fm_world.PRESENT_YEAR


def test_probe_of_a_hand_written_fact():
    assert World.probe(Fact("mira", "lives_in", "oakford")) == ("mira lives in ", "oakford")
    assert World.probe(Fact("the x flood", "year", "1931")) == ("the x flood happened in ", "1931")
    with pytest.raises(ValueError):
        World.probe(Fact("mira", "sibling", "tom"))


def test_fact_prompts(world):
    pairs = world.fact_prompts(50, rng_seed=3)
    assert pairs == world.fact_prompts(50, rng_seed=3)
    assert pairs != world.fact_prompts(50, rng_seed=4)
    assert len(set(pairs)) == 50
    homes = world.fact_prompts(20, rng_seed=0, relations=["lives_in"])
    for prompt, answer in homes:
        assert prompt.endswith(" lives in ")
        assert world.person(prompt[: -len(" lives in ")]).town == answer
    with pytest.raises(ValueError):
        world.fact_prompts(10, relations=["sibling"])
    with pytest.raises(ValueError):
        world.fact_prompts(len(world.facts) + 1)


def test_small_config_and_bad_config():
    small = build_world(0, WorldConfig(train_chars=5_000))
    assert 5_000 <= len(small.train_text()) < 400_000   # one varied pass at least
    with pytest.raises(ValueError):
        WorldConfig(val_fraction=1.0)
    with pytest.raises(ValueError):
        WorldConfig(n_towns=1)


# -- the script -------------------------------------------------------------------

def test_script_smoke(script, capsys):
    script.main(["--samples", "3", "--top", "5", "--train-chars", "20000", "--seed", "2"])
    out = capsys.readouterr().out
    for title in ("1. 实体 Entities", "2. 事实 Facts", "4. 字母表 Alphabet (44",
                  "5. 文本大小 Text sizes", "观察 Observations"):
        assert title in out
    assert "  3. " in out and "  4. " not in out.split("一篇完整文档")[0]   # 3 samples
    assert out.count("%\n") >= 5                                           # 5 chart bars


def test_script_unigram_entropy_hand_case(script):
    from collections import Counter
    assert script.unigram_entropy_bits(Counter("abab")) == pytest.approx(1.0)
    assert script.unigram_entropy_bits(Counter("aaaa")) == 0.0


@pytest.mark.parametrize("argv", [["--samples", "0"], ["--top", "45"], ["--seed", "x"],
                                  ["--train-chars", "10"], ["--seed", "-1"], ["--bogus"]])
def test_script_rejects_bad_flags(script, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        script.main(argv)
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err
