"""
第 1 讲 · 代码 2：训练一个 base model（基础模型）
Lecture 1, code 2: train the base model on the toy world.

这个文件回答的问题 (the question)
    一个只会"预测下一个字符"（next-character prediction）的小模型，读了玩具世界的文本之后，
    学会了什么？拼写和语法学得快，事实（谁住在哪里）学得慢——能不能看出来？

对应讲义 (notes): lectures/lecture01_base_model.md 第 4-6 节（模型、bits per character、训练循环）

运行 (run):  python3 code/lecture01/02_train_base.py            # 第一次约 1.5-2 分钟（2 核机器）；之后读缓存，约 3 秒
             python3 code/lecture01/02_train_base.py --retrain  # 忽略缓存，重新训练
             python3 code/lecture01/02_train_base.py --steps 500 --eval-every 100   # 作业：少训练一些会怎样？
             python3 code/lecture01/02_train_base.py --precision bf16   # 前向用 bf16（默认 auto：有 bf16 硬件才用）
需要 (needs): torch, numpy；同目录的 fm_world.py、tiny_gpt.py、console.py。

训练好的权重存在 code/lecture01/cache/（git 不跟踪）；缓存的名字包含所有影响结果的参数
（包括这次实际用的前向精度 forward precision），改了参数就会重新训练。
第 9 讲的代码 5 从随机初始化开始训练，从不读写这个缓存。

可复现 reproducibility：同一台机器、同样的库版本，每次运行打印的表格逐字相同（只有"用时 elapsed"
一列随机器的快慢变化）。换一种 CPU，训练得到的数（bits/字符、损失、样本、问事实答对几个）会在后几位
小数上不同，换种子也一样；观察里的每句话都由这次运行自己的数决定措辞（讲义第 6 节）。
"""

import hashlib
import json
import math
import random
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    import lecture01  # noqa: F401  the course toolkit, installed by `pip install -r requirements.txt`
except ModuleNotFoundError:
    import _course_path  # noqa: F401  a clone without that install (see that file)

from lecture01.cli_args import (Parser, apply_quick, given_flags, run_main, add_precision_arguments, float_in, non_negative_int,
                      int_in, positive_int, precision_from_args)
from lecture01.console import bar_chart, pad, print_header, print_table, print_wrapped, wrap, utf8_output
from lecture01.fm_world import ALPHABET, PROBE_RELATIONS, build_world

CACHE_DIR = HERE / "cache"
LEARNING_RATE = float_in(0, 1, low_open=True)   # --lr in (0, 1]: the default is 3e-3; far above 1 only diverges


# torch and tiny_gpt (which imports torch) take about 1.5 s to import: they are imported on
# first use, after the flags are parsed, so --help and a flag error answer at once.
def _heavy():
    global torch, tiny_gpt
    if "tiny_gpt" in globals():
        return
    import torch
    from lecture01 import tiny_gpt


def __getattr__(name):
    if name in ("torch", "tiny_gpt"):
        _heavy()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class BaseRunConfig:
    steps: int = 3000         # spelling and sentence frames within a few hundred steps; the rest refines them
    batch_size: int = 32      # the same batch as lecture 9's workload
    peak_lr: float = 3e-3
    eval_every: int = 250     # validation bits per char every 250 steps (~0.1 s each)
    early_evals: tuple = (25, 50, 100, 150)   # extra early points: the first hundred steps change the most
    # "bf16" or "fp32" forward (tiny_gpt.lm_loss); the default is --precision auto resolved on this
    # CPU: bf16 only where the CPU has bf16 hardware (elsewhere it is emulated and ~3x slower).
    precision: str = field(default_factory=lambda: _heavy() or tiny_gpt.resolve_precision("auto"))
    model_seed: int = 0
    data_seed: int = 1
    world_seed: int = 0
    n_probes: int = 200       # facts asked after training
    n_samples: int = 3        # texts sampled from the trained model
    sample_chars: int = 240

    def __post_init__(self):
        if self.precision not in ("bf16", "fp32"):
            raise ValueError(f"precision must be 'bf16' or 'fp32' (resolved), got {self.precision!r}")

    @property
    def bf16(self):
        return self.precision == "bf16"


QUICK = {"steps": 40, "eval_every": 20, "probes": 20, "samples": 1}    # --quick (the golden test's run)
QUICK_TEXT = "--steps 40 --eval-every 20 --probes 20 --samples 1"


MAX_BATCH = 1024


def parse_args(argv=None):
    d = BaseRunConfig          # the class: its plain defaults, without resolving the precision (torch)
    p = Parser(description="训练第 1 讲的 base model (train the lecture 1 base model)")
    p.add_argument("--steps", type=positive_int, default=d.steps, help="训练步数 training steps (default %(default)s)")
    # bounded as lecture 9's code 02 bounds it: at 1024 the activations take a few hundred MB;
    # 100,000,000 ran out of memory in a 22-line traceback (issue 43)
    p.add_argument("--batch-size", type=int_in(1, MAX_BATCH), default=d.batch_size,
                   help=f"每步的序列数 sequences per step, at most {MAX_BATCH} (default %(default)s)")
    p.add_argument("--lr", type=LEARNING_RATE, default=d.peak_lr,
                   help="峰值学习率 peak learning rate, in (0, 1] (default %(default)s)")
    p.add_argument("--eval-every", type=positive_int, default=d.eval_every,
                   help="每隔多少步测一次验证集 validate every N steps；只用默认值时另在第 25、50、100、150 步"
                        "各测一次 (default %(default)s)")
    p.add_argument("--seed", type=non_negative_int, default=d.model_seed, help="模型初始化的种子 model init seed (default %(default)s)")
    p.add_argument("--data-seed", type=non_negative_int, default=d.data_seed, help="数据顺序的种子 data order seed (default %(default)s)")
    p.add_argument("--world-seed", type=non_negative_int, default=d.world_seed, help="玩具世界的种子 world seed (default %(default)s)")
    p.add_argument("--probes", type=positive_int, default=d.n_probes, help="训练后提问的事实数 facts probed (default %(default)s)")
    p.add_argument("--samples", type=non_negative_int, default=d.n_samples, help="生成的样本数 samples (default %(default)s)")
    add_precision_arguments(p)
    p.add_argument("--retrain", action="store_true", help="忽略缓存，重新训练 ignore the cache and train again")
    p.add_argument("--no-cache", action="store_true", help="不读也不写缓存 (tests use this)")
    p.add_argument("--quick", action="store_true",
                   help=f"很小的设置，几秒钟（冒烟测试 smoke test）：{QUICK_TEXT}，不读也不写缓存；覆盖这些参数")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(args, QUICK, given_flags(p, argv))
        args.no_cache = True
    _heavy()
    # the extra early points belong to the default spacing; --eval-every N means every N steps
    early = d.early_evals if args.eval_every == d.eval_every else ()
    return BaseRunConfig(steps=args.steps, batch_size=args.batch_size, peak_lr=args.lr, early_evals=early,
                         eval_every=args.eval_every, model_seed=args.seed, data_seed=args.data_seed,
                         world_seed=args.world_seed, n_probes=args.probes,
                         precision=precision_from_args(args), n_samples=args.samples), args


def precision_line(run, args):
    """One line: which forward precision this run used, and why."""
    native = tiny_gpt.cpu_has_native_bf16()
    if args.fp32:
        reason = "--fp32 指定 requested"
    elif args.precision == "auto":
        reason = "auto：这台 CPU " + ("有 bf16 硬件 native bf16" if native else "没有 bf16 硬件 no native bf16")
    else:
        reason = f"--precision {args.precision}"
        reason += ("；没有 bf16 硬件，软件模拟 emulated 更慢" if run.bf16 and not native
                   else " 指定 requested")
    return f"前向精度 forward precision: {run.precision}（{reason}）"


# ---------------------------------------------------------------------------
# Training (with progress lines) and the cache
# ---------------------------------------------------------------------------

def cache_path(run, model_config):
    """A file name that changes whenever anything that changes the weights changes."""
    kept = ("steps", "batch_size", "peak_lr", "model_seed", "data_seed", "world_seed", "precision",
            "eval_every", "early_evals")
    key = json.dumps({"run": {k: v for k, v in asdict(run).items() if k in kept},
                      "model": asdict(model_config), "torch": torch.__version__}, sort_keys=True)
    return CACHE_DIR / f"base_model_{hashlib.sha256(key.encode()).hexdigest()[:12]}.pt"


PROGRESS_WIDTHS = (8, 16, 16, 14)


def progress_line(step, train_bits, val_bpc, elapsed_s):
    """One progress row: step, mean training bits since the last row, validation bpc, elapsed."""
    train_text = f"{train_bits:.3f}" if math.isfinite(train_bits) else "—"
    cells = (str(step), train_text, f"{val_bpc:.4f}", f"{elapsed_s:.1f} s")
    return "".join(pad(c, w, ">") for c, w in zip(cells, PROGRESS_WIDTHS))


PROGRESS_HEADER = "".join(pad(c, w, ">") for c, w in zip(
    ("步 step", "训练 bits/字符", "验证 bits/字符", "用时 elapsed"), PROGRESS_WIDTHS))


def train_base(run, train_data, val_data, log=print):
    """Train BASE_CONFIG from scratch; return (model, history).

    history: {"train_bits": per-step training loss in bits, "evals": [(step, val_bpc,
    elapsed_s)], "seconds": total}. Validation is measured before step 1 and every
    run.eval_every steps, and after the last step.
    """
    model = tiny_gpt.make_model(tiny_gpt.BASE_CONFIG, seed=run.model_seed)
    config = tiny_gpt.TrainConfig(steps=run.steps, batch_size=run.batch_size, peak_lr=run.peak_lr,
                                  data_seed=run.data_seed, bf16=run.bf16)
    evals = []
    window_bits = []
    start = time.perf_counter()

    def evaluate(step):
        bpc = tiny_gpt.bits_per_char(model, val_data)
        elapsed = time.perf_counter() - start
        evals.append((step, bpc, elapsed))
        recent = sum(window_bits) / len(window_bits) if window_bits else float("nan")
        log(progress_line(step, recent, bpc, elapsed))
        window_bits.clear()

    log(PROGRESS_HEADER)
    evaluate(0)

    def on_step(step, loss):
        window_bits.append(loss / math.log(2))
        done = step + 1
        if done % run.eval_every == 0 or done == run.steps or done in run.early_evals:
            evaluate(done)

    losses = tiny_gpt.train(model, train_data, config, on_step=on_step)
    history = {"train_bits": [l / math.log(2) for l in losses], "evals": evals,
               "seconds": time.perf_counter() - start}
    return model, history


def load_or_train(run, train_data, val_data, use_cache=True, retrain=False):
    path = cache_path(run, tiny_gpt.BASE_CONFIG)
    if use_cache and not retrain and path.exists():
        saved = torch.load(path, weights_only=True)
        model = tiny_gpt.make_model(tiny_gpt.BASE_CONFIG, seed=run.model_seed)
        model.load_state_dict(saved["state_dict"])
        history = json.loads(saved["history_json"])
        print(f"从缓存加载 loaded from cache: {path.relative_to(HERE)}（加 --retrain 重新训练）")
        print("训练时的记录 (recorded while training):")
        print(PROGRESS_HEADER)
        for step, bpc, elapsed in history["evals"]:
            print(progress_line(step, recent_train_bits(history, step), bpc, elapsed))
        return model, history, True
    model, history = train_base(run, train_data, val_data)
    if use_cache:
        CACHE_DIR.mkdir(exist_ok=True)
        torch.save({"state_dict": model.state_dict(), "history_json": json.dumps(history)}, path)
        print(f"权重已存入缓存 weights cached: {path.relative_to(HERE)}")
    return model, history, False


def recent_train_bits(history, step):
    """Mean training bits over the steps since the previous evaluation (what the live line showed)."""
    bits = history["train_bits"]
    steps = [s for s, _, _ in history["evals"]]
    previous = max((s for s in steps if s < step), default=0)
    chunk = bits[previous:step]
    return sum(chunk) / len(chunk) if chunk else float("nan")


# ---------------------------------------------------------------------------
# What did the model learn? Samples and fact probes
# ---------------------------------------------------------------------------

def complete(model, tokenizer, prompt, n_chars, stop="."):
    """Greedy continuation of `prompt` (argmax each step), stopping after `stop`."""
    idx = torch.tensor([tokenizer.encode(prompt)], dtype=torch.long)
    out = []
    model.eval()
    with torch.no_grad():
        for _ in range(n_chars):
            logits = model(idx[:, -model.config.block_size:])[0, -1]   # (vocab,)
            nxt = int(logits.argmax())
            ch = tokenizer.decode([nxt])
            out.append(ch)
            idx = torch.cat([idx, torch.tensor([[nxt]])], dim=1)
            if ch == stop or ch == "\n":
                break
    return "".join(out)


def probe_facts(model, world, tokenizer, n_probes, seed=0):
    """Ask n_probes facts; return rows (relation, prompt, answer, model_answer, correct)."""
    pool = [f for f in world.facts if f.relation in PROBE_RELATIONS]
    n_probes = min(n_probes, len(pool))
    rows = []
    for fact in random.Random(seed).sample(pool, n_probes):   # the draw world.fact_prompts makes
        relation = fact.relation
        prompt, answer = world.probe(fact)
        said = complete(model, tokenizer, prompt, n_chars=len(answer) + 12)
        said = said.rstrip(".\n").strip()
        rows.append((relation, prompt, answer, said, said == answer))
    return rows


def majority_baseline(world, rows):
    """Accuracy of always answering the most common answer of each relation (a guesser that
    knows the world's statistics but no individual)."""
    by_relation = {}
    for fact in world.facts:
        if fact.relation in PROBE_RELATIONS:
            by_relation.setdefault(fact.relation, []).append(fact.object)
    guess = {r: max(set(objs), key=lambda o: (objs.count(o), o)) for r, objs in by_relation.items()}
    return sum(guess.get(relation) == answer for relation, _, answer, _, _ in rows) / len(rows)


WORD = re.compile(r"[a-z]+")
SPELLING_LEARNED = 0.9    # share of real words from which observation 2 calls spelling "mostly learned"
SPELLING_STARTED = 0.5    # ... and below which it says spelling is not learned yet
FEW_WORDS = 30            # fewer complete words than this: observation 2 warns the share is rough
NOISE_SDS = 2             # a probe difference counts as beyond noise only past 2 binomial sd


def sample_words(text):
    """The complete words of a sample: runs of letters, without the last one if the sample
    was cut off in the middle of a word."""
    words = WORD.findall(text)
    if words and text[-1:].isalpha():
        words.pop()
    return words


def real_word_count(samples, vocabulary):
    """(real, total): how many complete words of the samples are words of the training text."""
    words = [w for text in samples for w in sample_words(text)]
    return sum(w in vocabulary for w in words), len(words)


def unigram_bits(text):
    """Entropy of the character frequencies in bits: the best a model without context can do."""
    counts = Counter(text)
    total = len(text)
    return -sum(c / total * math.log2(c / total) for c in counts.values())


def probe_noise(n_correct, n_baseline, n):
    """(difference, sd): model minus baseline hits, and the binomial sd of a count of n
    answers at the rate both share if the model is no better than the baseline
    (p = their mean accuracy): sd = sqrt(n p (1 - p))."""
    p = (n_correct + n_baseline) / (2 * n)
    return n_correct - n_baseline, math.sqrt(n * p * (1 - p))


def probe_verdict(difference, sd):
    """"beyond" (more than NOISE_SDS sd above the baseline), "below" or "within" noise."""
    if difference > NOISE_SDS * sd:
        return "beyond"
    if difference < -NOISE_SDS * sd:
        return "below"
    return "within"


def loss_chart_lines(history, n_bars=12):
    """Training bits per character averaged over n_bars equal spans of the run."""
    bits = history["train_bits"]
    n_bars = min(n_bars, len(bits))
    edges = [round(i * len(bits) / n_bars) for i in range(n_bars + 1)]
    labels = [f"步 {edges[i] + 1}-{edges[i + 1]}" for i in range(n_bars)]
    values = [sum(bits[a:b]) / (b - a) for a, b in zip(edges, edges[1:])]
    return bar_chart(labels, values, width=40, value_format="{:.3f} bits")


def main(argv=None):
    utf8_output()                        # UTF-8 through any console or redirect (Windows: cp1252)
    run, args = parse_args(argv)
    tiny_gpt.use_deterministic_threads()
    world = build_world(run.world_seed)
    tokenizer = tiny_gpt.CharTokenizer(ALPHABET)
    train_text = world.train_text()
    train_data = tiny_gpt.encode_text(train_text, tokenizer)
    val_data = tiny_gpt.encode_text(world.val_text(), tokenizer)

    print_header("第 1 讲 · 代码 2：训练 base model（预测下一个字符 next-character prediction）")
    cfg = tiny_gpt.BASE_CONFIG
    n_params = tiny_gpt.make_model(cfg, run.model_seed).n_params()
    print(f"模型 model: {cfg.n_layer} 层 layers, d={cfg.n_embd}, {cfg.n_head} 头 heads, "
          f"上下文 context {cfg.block_size} 字符, 参数 {n_params:,} parameters")
    print(f"训练 training: {run.steps} 步 × batch {run.batch_size} × {cfg.block_size} 字符 = "
          f"{run.steps * run.batch_size * cfg.block_size:,} 个预测（训练文本 {len(train_data):,} 字符）")
    print(f"学习率 learning rate: 峰值 {run.peak_lr:g}，前 {tiny_gpt.warmup_steps(run.steps)} 步线性预热 warm-up，"
          f"再按余弦 cosine 降到 {tiny_gpt.LR_FLOOR_FRACTION * run.peak_lr:g}")
    print(precision_line(run, args))
    print(f"种子 seeds: 模型初始化 model {run.model_seed}，数据顺序 data order {run.data_seed}，"
          f"世界 world {run.world_seed}")
    uniform_bits = math.log2(len(ALPHABET))
    unigram = unigram_bits(train_text)
    print(f"起点参照：在 {len(ALPHABET)} 个字符里均匀瞎猜 = log2({len(ALPHABET)}) = {uniform_bits:.3f} bits/字符；"
          f"只看字符频率的一元模型 unigram = {unigram:.2f}\n")

    model, history, from_cache = load_or_train(run, train_data, val_data,
                                               use_cache=not args.no_cache, retrain=args.retrain)
    final_bpc = history["evals"][-1][1]
    if not (math.isfinite(final_bpc) and all(math.isfinite(b) for b in history["train_bits"][-run.eval_every:])):
        # A diverged run (NaN or inf loss): its samples and probes would mean nothing, and
        # sampling from NaN probabilities fails. One line, and stop here.
        print(f"\n训练发散了 training diverged：最后的验证 bits/字符 = {final_bpc:.4f}（学习率 --lr {run.peak_lr:g} "
              "太大？），不画损失曲线、不生成样本、不问事实。")
        print(f"（训练用时 {history['seconds']:.0f} 秒）", file=sys.stderr)
        return {"final_bpc": final_bpc, "diverged": True, "precision": run.precision, "history": history,
                "from_cache": from_cache}

    print("\n训练损失曲线 training loss (bits per character, 每段的平均 mean per span):")
    for line in loss_chart_lines(history):
        print("  " + line)

    gen = torch.Generator().manual_seed(0)
    samples = []
    if run.n_samples:
        print("\n模型写的文本 samples (温度 temperature 0.8，从一个换行开始，随机种子 0；' / ' 表示换行):")
        for i in range(run.n_samples):
            start = torch.tensor([tokenizer.encode("\n")], dtype=torch.long)
            text = tokenizer.decode(model.generate(start, run.sample_chars, gen, temperature=0.8)[0, 1:].tolist())
            samples.append(text)
            for line in wrap(f"  {i + 1} | " + text.replace("\n", " / "), indent="    | "):
                print(line)
    n_real, n_words = real_word_count(samples, set(WORD.findall(train_text)))

    rows = probe_facts(model, world, tokenizer, run.n_probes)
    accuracy = sum(r[4] for r in rows) / len(rows)
    baseline = majority_baseline(world, rows)
    print(f"\n问事实 fact probes：{len(rows)} 个提示，贪心续写 greedy continuation，与世界里的真实答案比较")
    print_table(["关系 relation", "提示 prompt", "答案 answer", "模型 model", "对? ok"],
                [(r, repr(p), a, s or "(空)", "✓" if ok else "✗") for r, p, a, s, ok in rows[:10]],
                aligns=["<", "<", "<", "<", "^"])
    per_relation = {}
    for relation, _, _, _, ok in rows:
        per_relation.setdefault(relation, []).append(ok)
    print()
    print_table(["关系 relation", "提问数 asked", "答对 correct", "准确率 accuracy"],
                [(r, len(v), sum(v), f"{sum(v) / len(v):.0%}") for r, v in sorted(per_relation.items())])

    final_bpc = history["evals"][-1][1]
    first_bpc = history["evals"][0][1]
    spelled_at = next((step for step, bpc, _ in history["evals"] if bpc < 2.0), None)
    print("\n观察 Observations:")
    start_note = (f"随机初始化，比均匀瞎猜的 {uniform_bits:.3f} 还高" if first_bpc > uniform_bits
                  else f"随机初始化；均匀瞎猜是 {uniform_bits:.3f}")
    context_note = (f"低于一元模型的 {unigram:.2f}：模型在利用前文。" if final_bpc < unigram
                    else f"不低于一元模型的 {unigram:.2f}：还没学会利用前文。")
    moved = ("降到" if final_bpc < first_bpc else
             "反而升到" if final_bpc > first_bpc else "停在")
    hint = "（学习率太大？learning rate too high?）" if final_bpc > first_bpc else ""
    worst_step, worst_bpc, _ = max(history["evals"][1:], key=lambda e: e[1], default=(0, first_bpc, None))
    if worst_bpc > first_bpc and final_bpc <= first_bpc:   # it went up on the way, then came down
        hint = (f"（中途第 {worst_step} 步的测量点升到 {worst_bpc:.3f}，比起点还高：学习率太大？"
                "learning rate too high?）")
    print_wrapped(f" 1. 验证集 bits/字符从 {first_bpc:.3f}（{start_note}）{moved} {final_bpc:.3f}{hint}，" + context_note
                  + (f"第一次低于 2.0 是在第 {spelled_at} 步的测量点。" if spelled_at is not None
                     else "这次训练没有降到 2.0 以下。"))

    if not samples:
        print_wrapped(" 2. 这次没有生成样本（--samples 0），不评价拼写。")
    elif n_words == 0:
        print_wrapped(" 2. 样本里没有一个完整的词：拼写还没学会 spelling not learned yet。")
    else:
        share = n_real / n_words
        if share >= SPELLING_LEARNED:
            spelling = "拼写基本学会了 spelling mostly learned" + (
                "。" if n_real == n_words else f"，其余 {n_words - n_real} 个是拼错或编出来的词。")
        elif share >= SPELLING_STARTED:
            spelling = (f"另外 {n_words - n_real} 个是拼错或编出来的词：拼写学了大半，"
                        "还没学完 not yet learned。")
        else:
            spelling = "不到一半：拼写还没学会 spelling not learned yet。"
        rough = f"（只有 {n_words} 个词，这个比例很粗。）" if n_words < FEW_WORDS else ""
        print_wrapped(f" 2. 样本的 {n_words} 个完整的词里，{n_real} 个（{share:.0%}）是训练文本里有的词 "
                      f"real words；" + spelling + rough + "真词只说明拼写对，不说明内容对。")

    n_correct = sum(r[4] for r in rows)
    n_baseline = round(baseline * len(rows))
    difference, sd = probe_noise(n_correct, n_baseline, len(rows))
    verdict = probe_verdict(difference, sd)
    if verdict == "beyond":
        conclusion = (f"多答对 {difference} 个，超过 {NOISE_SDS} 个标准差（{NOISE_SDS * sd:.1f}）：超出噪声 "
                      "beyond noise——模型记住了一些具体的事实，不只是统计规律。")
    elif verdict == "below":
        conclusion = (f"少答对 {-difference} 个，超过 {NOISE_SDS} 个标准差（{NOISE_SDS * sd:.1f}）：明显不如"
                      "这个基线——模型还不如只按统计猜。")
    else:
        conclusion = (f"相差 {difference:+d} 个，在 {NOISE_SDS} 个标准差（±{NOISE_SDS * sd:.1f}）之内：在噪声之内 "
                      "within noise——看不出模型记住了具体的事实。")
    print_wrapped(f" 3. 事实准确率 {accuracy:.0%}（{len(rows)} 个里答对 {n_correct} 个）；只按统计猜'每种关系最常见的"
                  f"答案'的基线 baseline 答对 {n_baseline} 个（{baseline:.0%}）。按二项分布 binomial，准确率"
                  f" p = {(n_correct + n_baseline) / (2 * len(rows)):.1%}（两者的平均）时，{len(rows)} 个里答对的"
                  f"个数的标准差 sd = sqrt(n·p·(1-p)) = {sd:.1f}。" + conclusion)
    print_wrapped(" 4. base model 只会续写文本——它没有被教过回答问题，只是把问句当成文本接着写。")
    print(f"（训练用时 {history['seconds']:.0f} 秒" + ("，来自缓存里的记录）" if from_cache else "）"), file=sys.stderr)
    return {"final_bpc": final_bpc, "fact_accuracy": accuracy, "baseline_accuracy": baseline,
            "n_correct": n_correct, "n_baseline": n_baseline, "probe_sd": sd, "probe_verdict": verdict,
            "real_words": n_real, "sample_words": n_words, "samples": samples, "precision": run.precision,
            "history": history, "from_cache": from_cache, "diverged": False}


if __name__ == "__main__":
    run_main(main)
