"""A small procedurally generated world, written out as English text for a tiny model.

Introduced in lecture 1 (code/lecture01, notes section 2 "玩具世界 toy world"); every
later lecture trains on it or probes what a model learned about it.

Why a toy world instead of real text: a character model small enough to train on a
laptop CPU in minutes cannot learn much from Wikipedia, but it can learn the language of
a closed world. Spelling and grammar come from a few dozen sentence templates (learned in
a few hundred steps); the facts (who lives where, who is whose mother) are arbitrary and
must be memorised, which takes a small model far longer (lecture 1's base model, after
3000 steps, still answers few of them). Because we generated the world, we know every
fact, so we can ask a model "mira lives in " and check the answer.

Public API
----------
ALPHABET                      the 44 characters every text uses (tokenizer vocabulary).
WorldConfig, WORLD_CONFIG     sizes (families, towns, jobs, events, training characters).
build_world(seed=0, config=WORLD_CONFIG) -> World
World.train_text() / val_text()      the two texts (built once, cached in the object).
World.train_documents / val_documents  the same texts as tuples of documents.
World.people / towns / jobs / events / relations   the entities (frozen dataclasses).
World.facts                   tuple of Fact(subject, relation, object), all strings.
World.probe(fact) -> (prompt, answer)   e.g. ("mira lives in ", "oakford").
World.fact_prompts(n, rng_seed=0, relations=None) -> list of (prompt, answer).
PROBE_RELATIONS               relations with one answer per subject (all but "sibling").
World.summary() -> dict       entity, fact, document and character counts.
World.person(name), World.town(name)   look-ups by name.

How the text is built and split
-------------------------------
Pass 0 writes one plain "record:" document per person, town, job and event, stating
each of its facts in the exact probe phrasing ("the mother of mira is ana."). These
records always go to training, so every probe sentence occurs in the training text.
Later passes write varied documents (biographies, family notes, town and job
descriptions, event reports, q/a sheets, conversations), each sentence drawn from
several templates per fact type. Every varied document goes to validation with
probability config.val_fraction (a draw from the world's own random.Random), else to
training; an exact duplicate of an earlier document is dropped, so no validation
document also occurs in training. Passes (at least one) stop once the training text
reaches config.train_chars characters. Validation therefore measures language modelling
on the same world in unseen documents (the same facts, new wording and order).
"""

import random
from dataclasses import dataclass
from typing import NamedTuple

# Order matters: the tokenizer maps ALPHABET[i] to id i. Newline and space first, then
# letters, digits and the little punctuation the templates use. All text is lowercase.
ALPHABET = "\n" + " " + "abcdefghijklmnopqrstuvwxyz" + "0123456789" + ".,'?-:"
assert len(ALPHABET) == 44 and len(set(ALPHABET)) == 44

PRESENT_YEAR = 2020  # "now" in the world: ages are counted to this year


@dataclass(frozen=True)
class WorldConfig:
    """Sizes of the world. Defaults give ~2000 facts, each stated about ten times."""
    n_families: int = 60          # 2 parents + 1..4 children each: about 250 people
    n_towns: int = 24             # about 10 people per town, 4 towns per region
    n_jobs: int = 20              # a town has most jobs, a job has ~12 people
    events_per_town: int = 2      # dated events: about 50
    train_chars: int = 1_000_000  # stop writing passes once training text is this long
    val_fraction: float = 0.1     # chance a varied document goes to validation (~100 KB)

    def __post_init__(self):
        if self.n_families < 2 or self.n_towns < 2 or self.n_jobs < 2:
            raise ValueError("need at least 2 families, 2 towns and 2 jobs")
        if self.events_per_town < 0 or self.train_chars < 1:
            raise ValueError("events_per_town must be >= 0 and train_chars >= 1")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")


WORLD_CONFIG = WorldConfig()


# ----------------------------------------------------------------------------------
# Entities
# ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Person:
    name: str                 # unique first name, e.g. "mira"
    family: str               # family name shared with parents and siblings
    female: bool              # picks she/her or he/his
    age: int                  # years, counted to PRESENT_YEAR
    town: str                 # home town
    job: str
    hobby: str
    mother: str | None        # first names; None for the parent generation
    father: str | None
    spouse: str | None
    best_friend: str | None   # symmetric: a's best friend has a as best friend


@dataclass(frozen=True)
class Town:
    name: str
    region: str
    river: str
    market_day: str
    known_for: str


@dataclass(frozen=True)
class Job:
    name: str                 # starts with a consonant so "a {job}" is always right
    workplace: str
    tool: str


@dataclass(frozen=True)
class Event:
    name: str                 # "the oakford flood": unique, contains its town
    kind: str                 # "flood", "song contest", ...
    town: str
    year: int
    role: str                 # "hero" (disasters) or "winner" (contests)
    person: str               # the hero or winner


@dataclass(frozen=True)
class Relation:
    kind: str                 # "parent" (a is a parent of b), "sibling", "married", "friend"
    a: str
    b: str


class Fact(NamedTuple):
    subject: str
    relation: str
    object: str


# ----------------------------------------------------------------------------------
# Word lists (a seed draws from these)
# ----------------------------------------------------------------------------------

ONSETS = ("b", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
          "w", "z", "br", "dr", "st", "th", "sh", "kr", "tr", "fl", "gr")
VOWELS = ("a", "e", "i", "o", "u")
MIDDLES = ("l", "r", "n", "m", "s", "v", "d", "th", "nd", "rl", "sk", "b")
FEMALE_ENDS = ("a", "e", "ia", "i", "ine", "ra")     # female names end in a vowel sound...
MALE_ENDS = ("o", "an", "en", "in", "on", "el", "ar", "us")  # ...male names mostly not
FAMILY_CODAS = ("lt", "rn", "ck", "ll", "ss", "nd", "rk", "ff", "sh", "dge", "rth")
FAMILY_SUFFIXES = ("", "", "er", "ley", "by", "wood", "man", "well")
TOWN_PREFIXES = ("oak", "ash", "elm", "stone", "mill", "brook", "fox", "wolf", "hare",
                 "red", "green", "black", "white", "thorn", "iron", "salt", "cold",
                 "high", "long", "kings", "bay", "fern", "birch", "swan", "deer", "rye")
TOWN_SUFFIXES = ("ford", "by", "ton", "wick", "stead", "field", "bridge", "mouth",
                 "dale", "well", "haven", "moor", "holm", "ham", "cote", "worth")
REGIONS = ("highlands", "lowlands", "marshes", "woodlands", "plains", "hills")
RIVERS = ("lune", "wend", "tarn", "esk", "ure", "dove", "tame", "arun", "wyre",
          "kell", "brae", "sorrow", "calder", "nidd")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
PRODUCTS = ("cheese", "wool", "apples", "pottery", "salt", "honey", "cider", "timber",
            "iron", "linen", "bread", "fish", "horses", "glass", "candles", "paper",
            "wine", "barley", "leather", "pears")
HOBBIES = ("fishing", "chess", "singing", "painting", "dancing", "hiking", "riding",
           "sailing", "cards", "poetry", "gardening", "climbing", "swimming", "archery",
           "knitting", "baking", "rowing", "juggling")
# (job, workplace, tool): every job starts with a consonant ("a baker", never "a an").
JOBS = (("baker", "bakery", "rolling pin"), ("smith", "forge", "hammer"),
        ("farmer", "farm", "plough"), ("potter", "workshop", "wheel"),
        ("miller", "mill", "millstone"), ("weaver", "weaving shed", "loom"),
        ("fisher", "harbour", "net"), ("carpenter", "timber yard", "saw"),
        ("teacher", "school", "chalkboard"), ("doctor", "clinic", "stethoscope"),
        ("nurse", "hospital", "bandage"), ("tailor", "tailor shop", "needle"),
        ("brewer", "brewery", "barrel"), ("mason", "quarry", "chisel"),
        ("shepherd", "pasture", "crook"), ("sailor", "docks", "rope"),
        ("painter", "studio", "brush"), ("cook", "kitchen", "knife"),
        ("miner", "mine", "pick"), ("clerk", "town hall", "pen"),
        ("guard", "gatehouse", "spear"), ("merchant", "market hall", "scale"),
        ("librarian", "library", "ledger"), ("gardener", "garden", "spade"))
DISASTERS = ("flood", "fire", "storm", "drought")
CONTESTS = ("song contest", "chess match", "horse race", "harvest show")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                "nine", "ten")


# ----------------------------------------------------------------------------------
# Sentence templates
# ----------------------------------------------------------------------------------
# Placeholders: {s} subject (a name, or he/she/it after the first mention), {n} the
# name itself, {p} possessive of the subject ("mira's" or "her"), {ph} his/her,
# {o} the object of the fact, {child} daughter/son, {rel} brother/sister/husband/wife
# (the object's relation to the subject). str.format ignores unused keys.

# One canonical sentence per relation: it appears in every record document, and the
# probe prompt is its text up to {o} (so a probe always matches seen training text).
PROBE_TEMPLATES = {
    "lives_in": "{n} lives in {o}.",
    "works_as": "{n} works as a {o}.",
    "age": "the age of {n} is {o}.",
    "hobby": "the hobby of {n} is {o}.",
    "family_name": "the family name of {n} is {o}.",
    "mother": "the mother of {n} is {o}.",
    "father": "the father of {n} is {o}.",
    "married_to": "{n} is married to {o}.",
    "best_friend": "the best friend of {n} is {o}.",
    "sibling": "{n} is a sibling of {o}.",
    "region": "{n} lies in the {o}.",
    "river": "{n} stands on the river {o}.",
    "market_day": "the market day in {n} is {o}.",
    "known_for": "{n} is known for its {o}.",
    "workplace": "a {n} works at the {o}.",
    "tool": "a {n} uses a {o}.",
    "year": "{n} happened in {o}.",
    "hero": "the hero of {n} was {o}.",
    "winner": "the winner of {n} was {o}.",
}
# A tiny model does not learn that "she has a house in oakford" and "mira lives in
# oakford" state the same fact; it learns the phrasing it sees most. So half of all
# fact sentences use the probe phrasing, and a probe asks the way the text mostly says.
CANONICAL_SHARE = 0.5

# Relations with one answer per subject: only these make fair probes.
PROBE_RELATIONS = tuple(r for r in PROBE_TEMPLATES if r != "sibling")

# Varied phrasings: the canonical one is included, so it stays common.
VARIED = {
    "lives_in": ("{s} lives in {o}.", "{s} has a house in {o}.", "{p} home is in {o}.",
                 "{s} makes {ph} home in {o}.", "these days {s} lives in the town of {o}.",
                 "{s} lives in {o}, like many others."),
    "works_as": ("{s} works as a {o}.", "{s} is a {o}.", "{s} earns a living as a {o}.",
                 "by trade, {s} is a {o}.", "{p} work is that of a {o}.",
                 "{s} has worked as a {o} for years."),
    "age": ("{s} is {o} years old.", "the age of {n} is {o}.", "{s} turned {o} this year.",
            "{p} age is {o}.", "{s} is {o}."),
    "hobby": ("the hobby of {n} is {o}.", "{p} hobby is {o}.",
              "in {ph} free time {s} enjoys {o}.", "{s} loves {o}.",
              "{s} spends the weekends on {o}."),
    "family_name": ("the family name of {n} is {o}.", "{p} family name is {o}.",
                    "{s} belongs to the {o} family.", "{s} was born into the {o} family."),
    "mother": ("the mother of {n} is {o}.", "{p} mother is {o}.", "{o} is {p} mother.",
               "{s} is the {child} of {o}.", "{s} calls {o} mother."),
    "father": ("the father of {n} is {o}.", "{p} father is {o}.", "{o} is {p} father.",
               "{s} is the {child} of {o}.", "{s} learned a lot from {ph} father {o}."),
    "married_to": ("{s} is married to {o}.", "{s} and {o} are married.",
                   "{p} {rel} is {o}.", "{s} married {o} many years ago.",
                   "{s} shares a house with {ph} {rel}, {o}."),
    "best_friend": ("the best friend of {n} is {o}.", "{p} best friend is {o}.",
                    "{s} and {o} are best friends.", "{o} is {p} closest friend.",
                    "{s} spends a lot of time with {ph} best friend {o}."),
    "sibling": ("{s} has a {rel} named {o}.", "{o} is {p} {rel}.",
                "{s} and {o} are siblings.", "{s} is a sibling of {o}."),
    "region": ("{s} lies in the {o}.", "{s} is a town in the {o}.",
               "the town of {n} is found in the {o}.",
               "in the {o} there is a town called {n}."),
    "river": ("{s} stands on the river {o}.", "the river {o} flows through {n}.",
              "{s} was built beside the river {o}.", "{p} river is the {o}."),
    "market_day": ("the market day in {n} is {o}.", "in {n}, the market opens every {o}.",
                   "{p} market day is {o}.", "on {o} the people of {n} go to market."),
    "known_for": ("{s} is known for its {o}.", "people travel to {n} for its {o}.",
                  "{s} is famous for {o}.", "{n} sells its {o} all over the land."),
    "workplace": ("a {n} works at the {o}.", "you will find a {n} at the {o}.",
                  "every {n} goes to the {o} in the morning.",
                  "the {o} is where a {n} works."),
    "tool": ("a {n} uses a {o}.", "the main tool of a {n} is the {o}.",
             "no {n} works without a {o}.", "a good {n} takes care of {ph} {o}."),
    "year": ("{s} happened in {o}.", "in {o} came {s}.", "{s} took place in {o}.",
             "people still talk about {s} of {o}."),
    "hero": ("the hero of {n} was {o}.", "{o} was the hero of {n}.",
             "{o} saved many lives during {n}.", "everyone remembers how {o} helped during {n}."),
    "winner": ("the winner of {n} was {o}.", "{o} won {n}.", "first prize at {n} went to {o}.",
               "{o} was the winner of {n}."),
}

QUESTIONS = {
    "lives_in": ("q: where does {n} live? a: {o}.", "q: in which town does {n} live? a: in {o}."),
    "works_as": ("q: what is the job of {n}? a: {o}.", "q: what does {n} do? a: {n} is a {o}."),
    "age": ("q: how old is {n}? a: {o}.", "q: what is the age of {n}? a: {o}."),
    "hobby": ("q: what is the hobby of {n}? a: {o}.", "q: what does {n} enjoy? a: {o}."),
    "family_name": ("q: what is the family name of {n}? a: {o}.",),
    "mother": ("q: who is the mother of {n}? a: {o}.",),
    "father": ("q: who is the father of {n}? a: {o}.",),
    "married_to": ("q: who is {n} married to? a: {o}.",),
    "best_friend": ("q: who is the best friend of {n}? a: {o}.",),
    "sibling": ("q: does {n} have a {rel}? a: yes, {o}.",),
    "region": ("q: where is {n}? a: in the {o}.", "q: in which region is {n}? a: the {o}."),
    "river": ("q: which river flows through {n}? a: the {o}.",),
    "market_day": ("q: when is market day in {n}? a: {o}.",),
    "known_for": ("q: what is {n} known for? a: its {o}.",),
    "workplace": ("q: where does a {n} work? a: at the {o}.",),
    "tool": ("q: what does a {n} use? a: a {o}.",),
    "year": ("q: when did {n} happen? a: in {o}.", "q: in which year was {n}? a: {o}."),
    "hero": ("q: who was the hero of {n}? a: {o}.",),
    "winner": ("q: who won {n}? a: {o}.",),
}

# First-person lines for conversations: "mira: i live in oakford."
FIRST_PERSON = {
    "lives_in": ("i live in {o}.", "i am from {o}.", "my home is in {o}."),
    "works_as": ("i work as a {o}.", "i am a {o}.", "i earn my living as a {o}."),
    "age": ("i am {o} years old.", "i turned {o} this year."),
    "hobby": ("my hobby is {o}.", "i love {o}.", "in my free time i enjoy {o}."),
    "family_name": ("my family name is {o}.",),
    "mother": ("my mother is {o}.",),
    "father": ("my father is {o}.",),
    "married_to": ("i am married to {o}.", "my {rel} is {o}."),
    "best_friend": ("my best friend is {o}.",),
}
GREETINGS = ("hello, i am {n}.", "good morning, my name is {n}.", "hi, i'm {n}.",
             "nice to meet you, i am {n}.")
REPLIES = ("nice to meet you.", "good to see you.", "oh, how nice.", "is that so?",
           "me too.", "really?", "that is good to hear.")

INTRO_TEMPLATES = (
    "{n} {fam} is a {job} who lives in {town}.",
    "meet {n} {fam}, a {job} from {town}.",
    "{n} {fam}, {age}, works as a {job} in {town}.",
    "{n} {fam} is a {age}-year-old {job}.",
    "this is the story of {n} {fam}.",
    "{n} {fam} is well-known in {town}.",
)
EVENT_COLOUR = {
    "flood": "the river {river} rose over its banks and the streets of {town} filled with water.",
    "fire": "a fire spread through the old houses of {town}.",
    "storm": "a great storm blew across the {region} and tore roofs off in {town}.",
    "drought": "no rain fell on the {region} for months and the wells of {town} ran dry.",
    "song contest": "singers came to {town} from all over the {region}.",
    "chess match": "the best players of the {region} met in {town} for the chess match.",
    "horse race": "riders raced along the river {river} outside {town}.",
    "harvest show": "farmers brought their best {product} to the harvest show in {town}.",
}

_TEMPLATE_WORD_SOURCES = (PROBE_TEMPLATES, VARIED, QUESTIONS, FIRST_PERSON, EVENT_COLOUR)


def _template_words():
    """Every plain word the templates write: generated names must not be one of them."""
    texts = list(GREETINGS) + list(REPLIES) + list(INTRO_TEMPLATES)
    for table in _TEMPLATE_WORD_SOURCES:
        for value in table.values():
            texts.extend(value if isinstance(value, tuple) else (value,))
    words = set()
    for text in texts:
        cleaned = "".join(ch if ch.isalpha() or ch == "{" or ch == "}" else " " for ch in text)
        words.update(w for w in cleaned.split() if "{" not in w)
    words.update(["he", "she", "it", "his", "her", "its", "and", "the", "record", "son",
                  "daughter", "brother", "sister", "husband", "wife", "family", "children"])
    return words


# ----------------------------------------------------------------------------------
# Generating the entities
# ----------------------------------------------------------------------------------

def _unique(rng, make, taken, max_tries=10_000):
    """Draw make(rng) until it is not in `taken`; add it there and return it."""
    for _ in range(max_tries):
        word = make(rng)
        if word not in taken:
            taken.add(word)
            return word
    raise RuntimeError("ran out of unique names: enlarge the syllable lists")


def _first_name(rng, female):
    ends = FEMALE_ENDS if female else MALE_ENDS
    return rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(MIDDLES) + rng.choice(ends)


def _family_name(rng):
    return (rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(FAMILY_CODAS)
            + rng.choice(FAMILY_SUFFIXES))


def _town_name(rng):
    return rng.choice(TOWN_PREFIXES) + rng.choice(TOWN_SUFFIXES)


def _make_entities(rng, config):
    """Towns, jobs, people (in families), best friends and events: all from `rng`."""
    taken = _template_words()
    taken.update(REGIONS + RIVERS + DAYS + PRODUCTS + HOBBIES + NUMBER_WORDS)
    taken.update(j[0] for j in JOBS)

    rivers = rng.sample(RIVERS, min(len(RIVERS), max(2, config.n_towns // 3)))
    towns = []
    for i in range(config.n_towns):
        name = _unique(rng, _town_name, taken)
        # Regions are dealt round-robin so each holds about the same number of towns.
        towns.append(Town(name=name, region=REGIONS[i % len(REGIONS)],
                          river=rng.choice(rivers), market_day=rng.choice(DAYS),
                          known_for=rng.choice(PRODUCTS)))
    jobs = [Job(*spec) for spec in rng.sample(JOBS, min(config.n_jobs, len(JOBS)))]
    town_names = [t.name for t in towns]
    job_names = [j.name for j in jobs]

    # People come in families: two married parents and 1..4 grown-up children.
    records = []   # mutable dicts until everything is decided
    families = []  # (family name, father, mother, [children])
    for _ in range(config.n_families):
        family = _unique(rng, _family_name, taken)
        home = rng.choice(town_names)
        father_age = rng.randint(46, 80)
        mother_age = max(44, min(80, father_age + rng.randint(-6, 4)))
        parents = []
        for female, age in ((False, father_age), (True, mother_age)):
            name = _unique(rng, lambda r, f=female: _first_name(r, f), taken)
            parents.append(dict(name=name, family=family, female=female, age=age, town=home,
                                job=rng.choice(job_names), hobby=rng.choice(HOBBIES),
                                mother=None, father=None, spouse=None, best_friend=None))
        father, mother = parents
        father["spouse"], mother["spouse"] = mother["name"], father["name"]
        children = []
        for _ in range(rng.randint(1, 4)):
            female = rng.random() < 0.5
            # Parents were at least 20 when a child was born; children are adults.
            age = rng.randint(18, min(father_age, mother_age) - 20)
            name = _unique(rng, lambda r, f=female: _first_name(r, f), taken)
            town = home if rng.random() < 0.6 else rng.choice(town_names)
            children.append(dict(name=name, family=family, female=female, age=age, town=town,
                                 job=rng.choice(job_names), hobby=rng.choice(HOBBIES),
                                 mother=mother["name"], father=father["name"], spouse=None,
                                 best_friend=None))
        records.extend(parents + children)
        families.append((family, father["name"], mother["name"], [c["name"] for c in children]))
    by_name = {r["name"]: r for r in records}

    # Some grown children marry into another family; the couple shares one home.
    singles = [r for r in records if r["mother"] is not None and r["age"] >= 24]
    rng.shuffle(singles)
    for r in singles:
        if r["spouse"] is not None or rng.random() < 0.5:
            continue
        for other in singles:
            if (other["spouse"] is None and other is not r and other["family"] != r["family"]
                    and other["female"] != r["female"] and abs(other["age"] - r["age"]) <= 8):
                r["spouse"], other["spouse"] = other["name"], r["name"]
                other["town"] = r["town"]
                break

    # Best friends: a symmetric pairing, outside the family, same town when possible.
    order = records[:]
    rng.shuffle(order)
    for r in order:
        if r["best_friend"] is not None:
            continue
        free = [o for o in order if o["best_friend"] is None and o is not r
                and o["family"] != r["family"] and o["name"] != r["spouse"]]
        if not free:
            continue
        near = [o for o in free if o["town"] == r["town"]]
        friend = rng.choice(near) if near and rng.random() < 0.7 else rng.choice(free)
        r["best_friend"], friend["best_friend"] = friend["name"], r["name"]

    people = tuple(Person(**r) for r in records)

    # Events: each town gets a few, each with a hero or winner who was an adult then.
    events = []
    for town in towns:
        kinds = rng.sample(DISASTERS + CONTESTS, min(config.events_per_town, 8))
        for kind in kinds:
            person = rng.choice([p for p in people if p.age >= 20])
            birth_year = PRESENT_YEAR - person.age
            year = rng.randint(birth_year + 18, PRESENT_YEAR - 1)
            role = "hero" if kind in DISASTERS else "winner"
            events.append(Event(name=f"the {town.name} {kind}", kind=kind, town=town.name,
                                year=year, role=role, person=person.name))

    relations = []
    for family, father, mother, children in families:
        relations.append(Relation("married", father, mother))
        for child in children:
            relations.append(Relation("parent", father, child))
            relations.append(Relation("parent", mother, child))
        for i, a in enumerate(children):
            for b in children[i + 1:]:
                relations.append(Relation("sibling", a, b))
    seen_pairs = set()
    for p in people:
        if p.spouse and p.mother is not None and (p.spouse, p.name) not in seen_pairs:
            if by_name[p.spouse]["mother"] is not None:  # couples of grown children
                seen_pairs.add((p.name, p.spouse))
                relations.append(Relation("married", p.name, p.spouse))
        if p.best_friend and (p.best_friend, p.name) not in seen_pairs:
            seen_pairs.add((p.name, p.best_friend))
            relations.append(Relation("friend", p.name, p.best_friend))
    return tuple(towns), tuple(jobs), people, tuple(events), tuple(relations), families


def _make_facts(people, towns, jobs, events, siblings):
    """Every fact as Fact(subject, relation, object) strings, in a fixed order."""
    facts = []
    for p in people:
        facts.append(Fact(p.name, "lives_in", p.town))
        facts.append(Fact(p.name, "works_as", p.job))
        facts.append(Fact(p.name, "age", str(p.age)))
        facts.append(Fact(p.name, "hobby", p.hobby))
        facts.append(Fact(p.name, "family_name", p.family))
        if p.mother:
            facts.append(Fact(p.name, "mother", p.mother))
            facts.append(Fact(p.name, "father", p.father))
        if p.spouse:
            facts.append(Fact(p.name, "married_to", p.spouse))
        if p.best_friend:
            facts.append(Fact(p.name, "best_friend", p.best_friend))
        for sib in siblings.get(p.name, ()):
            facts.append(Fact(p.name, "sibling", sib))
    for t in towns:
        facts.append(Fact(t.name, "region", t.region))
        facts.append(Fact(t.name, "river", t.river))
        facts.append(Fact(t.name, "market_day", t.market_day))
        facts.append(Fact(t.name, "known_for", t.known_for))
    for j in jobs:
        facts.append(Fact(j.name, "workplace", j.workplace))
        facts.append(Fact(j.name, "tool", j.tool))
    for e in events:
        facts.append(Fact(e.name, "year", str(e.year)))
        facts.append(Fact(e.name, e.role, e.person))
    return tuple(facts)


# ----------------------------------------------------------------------------------
# Writing documents
# ----------------------------------------------------------------------------------

def _join_names(names):
    """'a', 'a and b', 'a, b and c'."""
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


class _Writer:
    """Renders documents about a world from one random.Random (the world's stream)."""

    def __init__(self, rng, people, towns, jobs, events, facts):
        self.rng = rng
        self.people = {p.name: p for p in people}
        self.towns = {t.name: t for t in towns}
        self.jobs = {j.name: j for j in jobs}
        self.events = events
        self.residents = {t.name: [] for t in towns}
        self.workers = {j.name: [] for j in jobs}
        for p in people:
            self.residents[p.town].append(p.name)
            self.workers[p.job].append(p.name)
        self.facts_by_subject = {}
        for f in facts:
            self.facts_by_subject.setdefault(f.subject, []).append(f)
        self.probe_facts = [f for f in facts if f.relation in PROBE_TEMPLATES
                            and f.relation != "sibling"]
        self.person_facts = {p.name: self.facts_by_subject[p.name] for p in people}

    # -- helpers --------------------------------------------------------------------
    def _rel_word(self, fact):
        """The object's relation to the subject, for {rel}: brother, wife, ..."""
        other = self.people.get(fact.object)
        if other is None:
            return ""
        if fact.relation == "sibling":
            return "sister" if other.female else "brother"
        if fact.relation == "married_to":
            return "wife" if other.female else "husband"
        return ""

    def _person_keys(self, person, use_pronoun):
        pron, poss = ("she", "her") if person.female else ("he", "his")
        return {"n": person.name, "s": pron if use_pronoun else person.name,
                "p": poss if use_pronoun else person.name + "'s", "ph": poss,
                "child": "daughter" if person.female else "son"}

    def _entity_keys(self, name, use_pronoun, ph="its"):
        """Keys for a town or job; ph is "their" for a job ("a sailor ... their rope")."""
        return {"n": name, "s": "it" if use_pronoun else name,
                "p": "its" if use_pronoun else name + "'s", "ph": ph, "child": ""}

    def _sentence(self, fact, keys):
        """One sentence stating `fact`: the probe phrasing with probability
        CANONICAL_SHARE, else any of the varied phrasings (see CANONICAL_SHARE)."""
        if self.rng.random() < CANONICAL_SHARE:
            return PROBE_TEMPLATES[fact.relation].format(n=fact.subject, o=fact.object)
        template = self.rng.choice(VARIED[fact.relation])
        return template.format(o=fact.object, rel=self._rel_word(fact), **keys)

    # -- record documents (pass 0, training only) -------------------------------------
    def record(self, subject):
        lines = [f"record: {subject}."]
        for fact in self.facts_by_subject[subject]:
            lines.append(PROBE_TEMPLATES[fact.relation].format(n=fact.subject, o=fact.object))
        return " ".join(lines) + "\n"

    # -- varied documents -------------------------------------------------------------
    def biography(self, name):
        rng, person = self.rng, self.people[name]
        intro = rng.choice(INTRO_TEMPLATES).format(
            n=person.name, fam=person.family, job=person.job, town=person.town, age=person.age)
        facts = [f for f in self.person_facts[name] if rng.random() < 0.75]
        rng.shuffle(facts)
        out = [intro]
        for fact in facts:
            out.append(self._sentence(fact, self._person_keys(person, rng.random() < 0.5)))
        if rng.random() < 0.3:
            # A word about the home town: town facts then recur far more often than
            # person facts, so a model learns them first.
            fact = rng.choice(self.facts_by_subject[person.town])
            out.append(self._sentence(fact, self._entity_keys(person.town, False)))
        if rng.random() < 0.3:  # and about the job, for the same reason
            fact = rng.choice(self.facts_by_subject[person.job])
            out.append(self._sentence(fact, self._entity_keys(person.job, False, ph="their")))
        return " ".join(out) + "\n"

    def family(self, family, father, mother, children):
        rng = self.rng
        home = self.people[father].town
        kids = children[:]
        rng.shuffle(kids)
        count = NUMBER_WORDS[len(kids)]
        noun, verb = ("child", "is") if len(kids) == 1 else ("children", "are")
        out = [rng.choice((f"the {family} family lives in {home}.",
                           f"the {family} family has its home in {home}.",
                           f"this note is about the {family} family of {home}.")),
               rng.choice((f"{father} and {mother} {family} are married.",
                           f"{father} {family} is married to {mother}.",
                           f"{mother} {family} and {father} have been married a long time.")),
               rng.choice((f"they have {count} {noun}: {_join_names(kids)}.",
                           f"their {noun} {verb} {_join_names(kids)}."))]
        for child in kids:
            if rng.random() < 0.6:
                c = self.people[child]
                out.append(rng.choice((
                    f"{child} is the {'daughter' if c.female else 'son'} of {father} and {mother}.",
                    f"{child} lives in {c.town} and works as a {c.job}.",
                    f"{child} is {c.age} years old.",
                    f"the mother of {child} is {mother}.",
                    f"the father of {child} is {father}.")))
        return " ".join(out) + "\n"

    def town_page(self, name):
        rng, town = self.rng, self.towns[name]
        facts = self.facts_by_subject[name][:]
        rng.shuffle(facts)
        out = [self._sentence(facts[0], self._entity_keys(name, False))]
        for fact in facts[1:]:
            if rng.random() < 0.8:
                out.append(self._sentence(fact, self._entity_keys(name, rng.random() < 0.5)))
        residents = self.residents[name]
        if residents:
            shown = rng.sample(residents, min(len(residents), rng.randint(2, 6)))
            verb = "lives" if len(shown) == 1 else "live"
            out.append(rng.choice((f"{_join_names(shown)} {verb} in {name}.",
                                   f"the people of {name} include {_join_names(shown)}.",
                                   f"among those who live in {name} are {_join_names(shown)}.")))
        return " ".join(out) + "\n"

    def job_page(self, name):
        rng = self.rng
        facts = self.facts_by_subject[name][:]
        rng.shuffle(facts)
        out = [self._sentence(f, self._entity_keys(name, False, ph="their")) for f in facts]
        workers = self.workers[name]
        if workers:
            shown = rng.sample(workers, min(len(workers), rng.randint(2, 5)))
            if len(shown) == 1:
                out.append(f"{shown[0]} works as a {name}.")
            else:
                out.append(rng.choice((f"{_join_names(shown)} all work as {name}s.",
                                       f"{_join_names(shown)} are {name}s.")))
            for worker in shown[:2]:
                out.append(f"{worker} works as a {name} in {self.people[worker].town}.")
        return " ".join(out) + "\n"

    def event_report(self, event):
        rng = self.rng
        town = self.towns[event.town]
        person = self.people[event.person]
        keys = {"n": event.name, "s": event.name, "p": event.name + "'s", "ph": "its", "child": ""}
        year = self._sentence(Fact(event.name, "year", str(event.year)), keys)
        role = self._sentence(Fact(event.name, event.role, event.person), keys)
        colour = EVENT_COLOUR[event.kind].format(river=town.river, town=town.name,
                                                 region=town.region, product=town.known_for)
        out = [year, colour, role] if rng.random() < 0.5 else [year, role, colour]
        if rng.random() < 0.5:
            out.append(f"{person.name} was a {person.job} from {person.town} then.")
        return " ".join(out) + "\n"

    def qa_sheet(self):
        rng = self.rng
        lines = []
        for _ in range(rng.randint(4, 8)):
            fact = rng.choice(self.probe_facts)
            line = rng.choice(QUESTIONS[fact.relation]).format(
                n=fact.subject, o=fact.object, rel=self._rel_word(fact))
            if rng.random() < 0.5:  # answer in a full sentence: the probe phrasing
                line = line.split(" a: ")[0] + " a: " + \
                    PROBE_TEMPLATES[fact.relation].format(n=fact.subject, o=fact.object)
            lines.append(line)
        return "\n".join(lines) + "\n"

    def conversation(self, a_name):
        rng = self.rng
        a = self.people[a_name]
        b = self.people[a.best_friend] if a.best_friend and rng.random() < 0.5 else \
            self.people[rng.choice(self.residents[a.town])]
        if b.name == a.name:
            b = self.people[rng.choice(list(self.people))]
        lines = []
        for turn, speaker in enumerate((a, b, a, b)):
            said = [rng.choice(GREETINGS).format(n=speaker.name)] if turn < 2 else \
                [rng.choice(REPLIES)]
            facts = [f for f in self.person_facts[speaker.name] if f.relation in FIRST_PERSON]
            for fact in rng.sample(facts, min(len(facts), rng.randint(1, 2))):
                said.append(rng.choice(FIRST_PERSON[fact.relation]).format(
                    o=fact.object, rel=self._rel_word(fact)))
            lines.append(f"{speaker.name}: " + " ".join(said))
        return "\n".join(lines) + "\n"


def _write_texts(rng, config, people, towns, jobs, events, facts, families):
    """Pass 0 records (train), then varied passes split train/val; see module docstring."""
    writer = _Writer(rng, people, towns, jobs, events, facts)
    train, val, seen = [], [], set()
    subjects = [p.name for p in people] + [t.name for t in towns] + \
               [j.name for j in jobs] + [e.name for e in events]
    for subject in subjects:
        doc = writer.record(subject)
        seen.add(doc)
        train.append(doc)
    train_chars = sum(len(d) for d in train)

    def one_pass():
        docs = [writer.biography(p.name) for p in people]
        docs += [writer.family(*f) for f in families]
        docs += [writer.town_page(t.name) for t in towns]
        docs += [writer.job_page(j.name) for j in jobs]
        docs += [writer.event_report(e) for e in events]
        docs += [writer.qa_sheet() for _ in range(len(people) // 6)]
        docs += [writer.conversation(rng.choice(people).name) for _ in range(len(people) // 8)]
        rng.shuffle(docs)
        return docs

    n_passes = 0
    # At least one whole varied pass, so even a small world has every kind of document
    # and a validation set; then passes continue until the training text is long enough.
    while n_passes == 0 or train_chars < config.train_chars:
        n_passes += 1
        for doc in one_pass():
            if doc in seen:
                continue  # an exact repeat adds nothing and could leak across the split
            seen.add(doc)
            if rng.random() < config.val_fraction:
                val.append(doc)
            else:
                train.append(doc)
                train_chars += len(doc)
            if n_passes > 1 and train_chars >= config.train_chars:
                break
    # Shuffle so records are spread out rather than forming the first 3% of the text.
    rng.shuffle(train)
    return tuple(train), tuple(val)


# ----------------------------------------------------------------------------------
# The world object
# ----------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, repr=False)
class World:
    """Everything generated from one seed; texts are built once and kept."""
    seed: int
    config: WorldConfig
    people: tuple
    towns: tuple
    jobs: tuple
    events: tuple
    relations: tuple
    facts: tuple
    train_documents: tuple
    val_documents: tuple
    _train_text: str
    _val_text: str
    _people_by_name: dict
    _towns_by_name: dict

    def __repr__(self):
        # The default dataclass repr would print a megabyte of text.
        s = self.summary()
        return (f"World(seed={self.seed}, people={s['people']}, towns={s['towns']}, "
                f"jobs={s['jobs']}, events={s['events']}, facts={s['facts']}, "
                f"train_chars={s['train_chars']}, val_chars={s['val_chars']})")

    def train_text(self):
        """Training documents, each ending in a newline, separated by a blank line."""
        return self._train_text

    def val_text(self):
        """Held-out validation documents (none of them occurs in training)."""
        return self._val_text

    def person(self, name):
        return self._people_by_name[name]

    def town(self, name):
        return self._towns_by_name[name]

    @staticmethod
    def probe(fact):
        """(prompt, answer) for a fact, e.g. ('mira lives in ', 'oakford').

        The prompt is the record sentence up to the object, so it occurs in the training
        text followed by the answer; the answer ends where the sentence's '.' follows.
        Raises ValueError for relations without a single answer (sibling).
        """
        if fact.relation not in PROBE_RELATIONS:
            raise ValueError(f"relation {fact.relation!r} has no single answer to probe")
        prompt = PROBE_TEMPLATES[fact.relation].split("{o}")[0].format(n=fact.subject)
        return prompt, fact.object

    def fact_prompts(self, n, rng_seed=0, relations=None):
        """n distinct probe pairs [(prompt, answer), ...], drawn with random.Random(rng_seed).

        relations: optional iterable of relation names to draw from (default: every
        relation with a single answer, see PROBE_RELATIONS). n larger than the number
        of such facts raises ValueError.
        """
        allowed = PROBE_RELATIONS if relations is None else tuple(relations)
        unknown = [r for r in allowed if r not in PROBE_RELATIONS]
        if unknown:
            raise ValueError(f"cannot probe relations {unknown}; choose from {PROBE_RELATIONS}")
        pool = [f for f in self.facts if f.relation in allowed]
        if not 0 <= n <= len(pool):
            raise ValueError(f"asked for {n} prompts, there are {len(pool)} probeable facts")
        return [self.probe(f) for f in random.Random(rng_seed).sample(pool, n)]

    def fact_counts(self):
        """{relation: number of facts}, in the order relations first appear in facts."""
        counts = {}
        for f in self.facts:
            counts[f.relation] = counts.get(f.relation, 0) + 1
        return counts

    def summary(self):
        """Counts of entities, facts, documents and characters (all computed)."""
        kinds = {}
        for r in self.relations:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
        return {
            "people": len(self.people), "towns": len(self.towns), "jobs": len(self.jobs),
            "regions": len({t.region for t in self.towns}), "events": len(self.events),
            "families": len({p.family for p in self.people}),
            "relations": len(self.relations), **{f"relations_{k}": v for k, v in kinds.items()},
            "facts": len(self.facts),
            "probeable_facts": sum(f.relation in PROBE_RELATIONS for f in self.facts),
            "train_documents": len(self.train_documents),
            "val_documents": len(self.val_documents),
            "train_chars": len(self._train_text), "val_chars": len(self._val_text),
        }


def build_world(seed=0, config=WORLD_CONFIG):
    """Generate the world for `seed` and write its training and validation texts.

    Deterministic: one random.Random(seed) drives every choice (no global random state,
    no hash-ordered sets), so a seed gives the same text on any machine.
    """
    rng = random.Random(seed)
    towns, jobs, people, events, relations, families = _make_entities(rng, config)
    siblings = {}
    for r in relations:
        if r.kind == "sibling":
            siblings.setdefault(r.a, []).append(r.b)
            siblings.setdefault(r.b, []).append(r.a)
    facts = _make_facts(people, towns, jobs, events, siblings)
    train_docs, val_docs = _write_texts(rng, config, people, towns, jobs, events, facts, families)
    train_text = "\n".join(train_docs)
    val_text = "\n".join(val_docs)
    # A character outside ALPHABET would crash the tokenizer much later; fail here.
    stray = set(train_text).union(val_text).difference(ALPHABET)
    if stray:
        raise AssertionError(f"characters outside ALPHABET in the text: {sorted(stray)}")
    return World(seed=seed, config=config, people=people, towns=towns, jobs=jobs,
                 events=events, relations=relations, facts=facts,
                 train_documents=train_docs, val_documents=val_docs,
                 _train_text=train_text, _val_text=val_text,
                 _people_by_name={p.name: p for p in people},
                 _towns_by_name={t.name: t for t in towns})
