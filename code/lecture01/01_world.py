"""
第 1 讲 · 代码 1：玩具世界一览 The toy world at a glance
=========================================================
对应讲义 Notes: lectures/lecture01_base_model.md 第 2 节「玩具世界 toy world」

这个文件回答的问题 What this file answers
----------------------------------------
基础模型 base model 读的是什么？我们的 base model 不读网页，而读一个由程序生成的小世界
（fm_world.py）：几百个人、二十几个小镇、二十种职业、亲属和朋友关系、带年份的事件，
用多种句式写成英文文档。这个脚本把这个世界摊开来看：有多少实体和事实 facts，文本长什么样，
字母表 alphabet 有哪 44 个字符，训练集 / 验证集 train / validation 各多大，
哪些字符最常见——以及"只学会字符频率"的模型能做到多少比特每字符 bits per character。

运行方式 How to run
-------------------
python3 01_world.py                      # 默认：种子 0，8 个样例句子
python3 01_world.py --seed 3 --samples 12 --top 30
python3 01_world.py --train-chars 50000  # 更小的世界文本（练习：看统计量怎么变）
可以在任何目录运行。这台 2 核机器上约 0.4 秒 CPU 时间（生成世界约 0.1 秒）；
只需要 Python 标准库（不需要 torch）。
"""

import math
import random
import re
import statistics
import textwrap
from collections import Counter
from dataclasses import replace

try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import Parser, run_main, int_at_least, int_in
from lecture01.console import bar_chart, print_header, print_table, print_wrapped, utf8_output
from lecture01.fm_world import ALPHABET, PROBE_RELATIONS, WORLD_CONFIG, build_world

WRAP_COLUMNS = 88            # sample sentences are wrapped to this width
MIN_TRAIN_CHARS = 2_000      # below this the world has too few documents to sample from
MAX_TRAIN_CHARS = 10_000_000  # 10x the default, ~2 s; 10^9 would run for minutes without a word

# How each relation is shown in the fact table (Chinese first, English beside it).
RELATION_NAMES = {
    "lives_in": "住在 lives in", "works_as": "职业 works as", "age": "年龄 age",
    "hobby": "爱好 hobby", "family_name": "姓 family name", "mother": "母亲 mother",
    "father": "父亲 father", "married_to": "配偶 married to",
    "best_friend": "最好的朋友 best friend", "sibling": "兄弟姐妹 sibling",
    "region": "地区 region", "river": "河流 river", "market_day": "集市日 market day",
    "known_for": "特产 known for", "workplace": "工作地点 workplace", "tool": "工具 tool",
    "year": "年份 year", "hero": "英雄 hero", "winner": "获胜者 winner",
}
CHAR_NAMES = {"\n": "\\n 换行 newline", " ": "空格 space"}


# ----------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = Parser(
        description="玩具世界一览 the toy world at a glance (lecture 1, code 1)")
    parser.add_argument("--seed", type=int_at_least(0), default=0,
                        help="世界的随机种子 world seed (default %(default)s: the world every lecture uses)")
    parser.add_argument("--samples", type=int_at_least(1), default=8,
                        help="打印多少个训练文本里的样例句子 sample sentences to print (default %(default)s)")
    parser.add_argument("--top", type=int_in(1, len(ALPHABET)), default=20,
                        help="字符频率图显示多少个字符 characters in the frequency chart (default %(default)s)")
    parser.add_argument("--train-chars", type=int_in(MIN_TRAIN_CHARS, MAX_TRAIN_CHARS),
                        default=WORLD_CONFIG.train_chars,
                        help=f"训练文本至少多少字符 minimum training characters, {MIN_TRAIN_CHARS}-{MAX_TRAIN_CHARS} "
                             f"(default {WORLD_CONFIG.train_chars})")
    return parser.parse_args(argv)


# ----------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------

def sentences_of(document):
    """Split a document into sentences; a q/a line stays whole (its '?' is not an end)."""
    out = []
    for line in document.splitlines():
        if line.startswith("q:"):
            out.append(line)
        elif line:
            out.extend(re.split(r"(?<=\.) ", line))
    # A record's first sentence is its heading ("record: mira."), not a sentence.
    return [s for s in out if not s.startswith("record:")]


def sample_sentences(documents, n, seed):
    """n sentences, each from a different randomly chosen document (random.Random(seed))."""
    rng = random.Random(seed)
    picks = rng.sample(range(len(documents)), min(n, len(documents)))
    return [rng.choice(sentences_of(documents[i])) for i in picks]


def char_label(ch):
    return CHAR_NAMES.get(ch, repr(ch))


def docs_mentioning_both(documents, pairs):
    """For each (a, b) pair of words: in how many documents both occur as whole words."""
    index = {}  # word -> ids of the documents that contain it
    for i, doc in enumerate(documents):
        for word in set(re.findall(r"[a-z0-9]+", doc)):
            index.setdefault(word, set()).add(i)
    empty = set()
    return [len(index.get(a, empty) & index.get(b, empty)) for a, b in pairs]


def unigram_entropy_bits(counts):
    """Entropy of the character frequencies: the bits per character of a model that
    knows only how often each character occurs (and nothing about context)."""
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values() if c)


# ----------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------

def show_entities(world):
    s = world.summary()
    print_header("1. 实体 Entities")
    rows = [("人 people", s["people"]), ("家庭 families", s["families"]),
            ("小镇 towns", s["towns"]), ("地区 regions", s["regions"]),
            ("职业 jobs", s["jobs"]), ("事件 events", s["events"]),
            ("关系 relations（合计 total）", s["relations"])]
    for kind, label in (("parent", "  父母→子女 parent"), ("sibling", "  兄弟姐妹 sibling"),
                        ("married", "  夫妻 married"), ("friend", "  最好的朋友 best friends")):
        rows.append((label, s.get(f"relations_{kind}", 0)))
    print_table(["实体 entity", "数量 count"], rows)
    person = world.people[0]
    print(f"\n例 example: world.people[0] = {person.name} {person.family}, {person.age} 岁 years, "
          f"住在 lives in {person.town}, 职业 job {person.job}")


def show_facts(world):
    print_header("2. 事实 Facts (subject, relation, object)")
    counts = world.fact_counts()
    example = {}
    for fact in world.facts:
        example.setdefault(fact.relation, fact)
    rows = []
    for relation, n in counts.items():
        f = example[relation]
        if relation in PROBE_RELATIONS:
            prompt, answer = world.probe(f)
            shown = f"{prompt!r} → {answer!r}"
        else:
            shown = f"({f.subject}, {f.relation}, {f.object}) 不唯一 not unique"
        rows.append((RELATION_NAMES.get(relation, relation), n, shown))
    rows.append(("合计 total", len(world.facts), ""))
    print_table(["关系 relation", "事实数 facts", "探针 probe: 提示 prompt → 答案 answer"], rows,
                aligns=["<", ">", "<"])
    n_probe = sum(f.relation in PROBE_RELATIONS for f in world.facts)
    print(f"\n可以用探针检查的事实 probeable facts（答案唯一 one answer）: {n_probe}")


def show_samples(world, n, seed):
    print_header(f"3. 训练文本样例 Sample sentences from the training text ({n})")
    for i, sentence in enumerate(sample_sentences(world.train_documents, n, seed), 1):
        print(textwrap.fill(sentence, WRAP_COLUMNS, initial_indent=f"{i:>3}. ",
                            subsequent_indent="     "))
    # A varied document, not a record: records are the plainest 10% of the text.
    varied = [i for i, d in enumerate(world.train_documents) if not d.startswith("record:")]
    index = random.Random(seed).choice(varied)
    print(f"\n一篇完整文档 one whole document (train_documents[{index}]):")
    for line in world.train_documents[index].splitlines():
        print(textwrap.fill(line, WRAP_COLUMNS, initial_indent="  | ", subsequent_indent="  | "))


def show_alphabet():
    print_header(f"4. 字母表 Alphabet ({len(ALPHABET)} 个字符 characters)")
    groups = [("换行、空格 newline, space", ALPHABET[:2]),
              ("字母 letters", "".join(c for c in ALPHABET if c.isalpha())),
              ("数字 digits", "".join(c for c in ALPHABET if c.isdigit())),
              ("标点 punctuation", "".join(c for c in ALPHABET[2:] if not c.isalnum()))]
    rows = [(name, len(chars), ("  " if chars == ALPHABET[:2] else " ").join(
                 char_label(c) if c in CHAR_NAMES else c for c in chars))
            for name, chars in groups]
    print_table(["类别 group", "个数 count", "字符 characters"], rows, aligns=["<", ">", "<"])
    print("字符 i 的编号 token id 就是它在 ALPHABET 里的位置 i: "
          f"'a' → {ALPHABET.index('a')}, 'z' → {ALPHABET.index('z')}, "
          f"'.' → {ALPHABET.index('.')}")


def show_sizes(world):
    print_header("5. 文本大小 Text sizes")
    rows = []
    for name, docs, text in (("训练 train", world.train_documents, world.train_text()),
                             ("验证 validation", world.val_documents, world.val_text())):
        n_bytes = len(text.encode("utf-8"))
        rows.append((name, len(docs), len(text), n_bytes, f"{n_bytes / 1e6:.3f}",
                     f"{len(text) / len(docs):.0f}"))
    print_table(["文本 text", "文档 documents", "字符 characters", "字节 bytes",
                 "MB (10^6 bytes)", "字符/文档 chars/doc"], rows)
    ratio = len(world.train_text()) / len(world.val_text())
    print(f"训练 : 验证 = {ratio:.1f} : 1（按字符 by characters）。")
    print("每个字符是一个词元 token，所以字符数 = 词元数 tokens；全是 ASCII，所以字节数 = 字符数。"
          if all(len(t.encode("utf-8")) == len(t) for t in (world.train_text(), world.val_text()))
          else "每个字符是一个词元 token，所以字符数 = 词元数 tokens。")


def show_frequencies(text, top):
    print_header(f"6. 字符频率 Character frequency（训练文本前 {top} 个 top {top}）")
    counts = Counter(text)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], ALPHABET.index(kv[0])))[:top]
    total = len(text)
    for line in bar_chart([char_label(ch) for ch, _ in ranked],
                          [100.0 * c / total for _, c in ranked],
                          width=40, value_format="{:5.2f}%"):
        print(line)
    return counts


def show_observations(world, counts):
    print_header("观察 Observations")
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], ALPHABET.index(kv[0])))
    top5_share = 100.0 * sum(c for _, c in ranked[:5]) / total
    space_share = 100.0 * counts.get(" ", 0) / total
    digit_share = 100.0 * sum(counts.get(d, 0) for d in "0123456789") / total
    unused = [c for c in ALPHABET if counts.get(c, 0) == 0]
    entropy_bits = unigram_entropy_bits(counts)
    uniform_bits = math.log2(len(ALPHABET))
    leaked = len(set(world.val_documents) & set(world.train_documents))
    top5 = ", ".join(char_label(ch) for ch, _ in ranked[:5])

    print(f" 1. 字符很不均匀 uneven: 最常见的 5 个字符（{top5}）占训练文本的 {top5_share:.1f}%，")
    print(f"    其中空格 space 占 {space_share:.1f}%；数字 digits（年龄、年份）只占 {digit_share:.2f}%。")
    if unused:
        print(f"    字母表里有 {len(unused)} 个字符没有出现: "
              + " ".join(char_label(c) for c in unused))
    else:
        print(f"    字母表的 {len(ALPHABET)} 个字符全部出现过 all characters occur。")
    print(f" 2. 均匀猜测 uniform guess 每个字符要 log2({len(ALPHABET)}) = {uniform_bits:.2f} 比特 bits；")
    print(f"    只知道字符频率的模型 unigram model 要 {entropy_bits:.2f} 比特（频率的熵 entropy）。")
    print_wrapped(f"    不看上下文 context 的模型，在训练文本上最少也要 {entropy_bits:.2f} 比特每字符；"
                  "要更低，就得利用前文（代码 2 的 base model）。", indent="    ")
    homes = [(f.subject, f.object) for f in world.facts if f.relation == "lives_in"]
    mentions = docs_mentioning_both(world.train_documents, homes)
    print(f" 3. {len(world.facts)} 条事实 facts 分散在 {len(world.train_documents)} 篇训练文档里。"
          f"以「住在 lives in」为例：一个人的名字和他/她住的小镇")
    print(f"    同时出现在 {statistics.median(mentions):.0f} 篇训练文档里（中位数 median；"
          f"最少 min {min(mentions)}，最多 max {max(mentions)}）——")
    print("    同一条事实换着句式出现很多次，模型才有机会记住它。")
    if leaked == 0:
        print(f" 4. 验证集的 {len(world.val_documents)} 篇文档没有一篇出现在训练集里 (held-out documents)；")
        print("    它们讲的是同一个世界，所以验证集衡量的是：在没见过的文档上，模型预测下一个字符的本事。")
    else:
        print(f" 4. 警告 warning: {leaked} 篇验证文档也出现在训练集里 (leak)。")


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    args = parse_args(argv)
    world = build_world(args.seed, replace(WORLD_CONFIG, train_chars=args.train_chars))
    show_entities(world)
    print()
    show_facts(world)
    print()
    show_samples(world, args.samples, args.seed)
    print()
    show_alphabet()
    print()
    show_sizes(world)
    print()
    counts = show_frequencies(world.train_text(), args.top)
    print()
    show_observations(world, counts)


if __name__ == "__main__":
    run_main(main)
