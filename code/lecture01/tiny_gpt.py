"""A tiny GPT for the toy world: tokenizer, model, batches, learning-rate schedule,
bits per character and one training loop.

Introduced in lecture 1 (code/lecture01, notes: lectures/lecture01_base_model.md §3-§6);
lecture 9 (distributed training) imports the same pieces, so the model a student met in
lecture 1 is exactly the one later lectures split across workers.

The model follows GPT-2 / nanoGPT (Radford et al. 2019; karpathy/nanoGPT): token
embeddings, pre-LayerNorm transformer blocks (causal self-attention + MLP) and a linear
head, with one change: positions enter through ALiBi (Press et al. 2022), a distance
penalty on attention, instead of learned position embeddings. It is deliberately small:
lecture 9 trains it ten times in one class run.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from lecture01.fm_world import ALPHABET, build_world

# One thread per process: at ~100k parameters the matrices are so small that a second
# thread costs more in synchronisation than it saves (measured up to 10x slower on a
# loaded 2-core machine). Independent runs parallelise across processes instead.
TORCH_THREADS = 1


def use_deterministic_threads(n_threads=TORCH_THREADS):
    """Fix torch's intra-op thread count and flush denormals; scripts call this first.

    Results (bits per character, losses) are reproducible for a given thread count, CPU
    and library versions; the notes quote numbers produced with one thread.
    Flushing denormals (numbers below ~1e-38 become 0): ALiBi's steepest head pushes
    far-away attention weights into that range, where some CPUs compute up to 100x
    slower; the trained results do not change beyond their seed-to-seed noise.
    """
    torch.set_num_threads(n_threads)
    torch.set_flush_denormal(True)


# ---------------------------------------------------------------------------
# Precision of the forward pass
# ---------------------------------------------------------------------------

PRECISIONS = ("auto", "bf16", "fp32")


def cpu_has_native_bf16():
    """True if this CPU does bf16 arithmetic in hardware (AVX512-BF16 or AMX tiles).

    Without it, torch emulates bf16 and a training step of this model was measured ~3x
    slower than fp32 (AVX512 without BF16); with it, bf16 was ~30% faster.
    """
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_precision(choice="auto"):
    """"bf16" or "fp32" for the forward pass: "auto" takes bf16 only where it is fast."""
    if choice not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {choice!r}")
    if choice == "auto":
        return "bf16" if cpu_has_native_bf16() else "fp32"
    return choice


# ---------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------

class CharTokenizer:
    """One token per character: the simplest tokenizer there is (lecture 1 §3).

    encode("ab") -> [id of 'a', id of 'b']; ids are positions in the alphabet.
    """

    def __init__(self, alphabet):
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("alphabet has repeated characters")
        self.alphabet = alphabet
        self.vocab_size = len(alphabet)
        self._id_of = {ch: i for i, ch in enumerate(alphabet)}

    def encode(self, text):
        ids = []
        id_of = self._id_of
        for position, ch in enumerate(text):
            token = id_of.get(ch)
            if token is None:
                raise ValueError(f"character {ch!r} at position {position} is not in the alphabet")
            ids.append(token)
        return ids

    def decode(self, ids):
        out = []
        for position, token in enumerate(ids):
            token = int(token)
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"token id {token} at position {position} is outside 0..{self.vocab_size - 1}")
            out.append(self.alphabet[token])
        return "".join(out)


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class GPTConfig:
    """Model shape. The defaults (BASE_CONFIG) were chosen by measurement for lecture 9's
    workload: 300 steps of batch 32 x 96 characters must take under 10 s on one CPU core
    and still reach under 1.7 bits per character. Narrower, deeper or GPT-2-initialised
    variants we timed were either slower or clearly worse after 300 steps."""
    vocab_size: int = len(ALPHABET)   # the toy world's alphabet: one id per character (44)
    block_size: int = 96     # context in characters: longer than most toy-world sentences
    n_layer: int = 1         # one wide block learned faster per second than two narrow ones (d=64)
    n_head: int = 4          # 24 dimensions per head; four ALiBi slopes from 1 to 1/8
    n_embd: int = 96         # width matters most for how fast a tiny model learns at a fixed lr
    mlp_ratio: int = 2       # MLP hidden width 2 x 96: half GPT-2's 4x, which cost more than it gave here
    init_std: float = 0.05   # larger than GPT-2's 0.02: at this width 0.02 learned visibly slower in 300 steps

    def validate(self):
        """Raise ValueError on a configuration no model can be built from."""
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "mlp_ratio"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if not self.init_std > 0:
            raise ValueError(f"init_std must be positive, got {self.init_std}")


BASE_CONFIG = GPTConfig()


def alibi_slopes(n_head):
    """Per-head slopes of ALiBi's distance penalty: 1, 1/2, 1/4, ... (steepest first).

    Press et al. 2022 use 2^(-8h/n_head); we use a steeper sequence 2^-h, which in our
    300-step trial runs learned the toy world's short-range spelling faster.
    """
    return torch.tensor([2.0 ** -h for h in range(n_head)])


def alibi_bias(n_head, block_size):
    """(n_head, T, T) additive attention bias: -slope * (i - j) for j <= i, -inf for j > i.

    ALiBi (Attention with Linear Biases, Press et al. 2022; used in BLOOM and MPT) tells
    attention how far back a character is by penalising distance linearly, instead of
    adding learned position embeddings. From the first step every head prefers recent
    characters, so a tiny model learns spelling after tens of steps, not hundreds.
    The -inf above the diagonal is the causal mask: no character sees the future.
    """
    pos = torch.arange(block_size)
    distance = (pos[:, None] - pos[None, :]).float()                  # (T, T): i - j
    bias = -alibi_slopes(n_head)[:, None, None] * distance            # (nh, T, T)
    return bias.masked_fill(distance < 0, float("-inf"))


class SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        # A buffer, not a parameter: it is never trained and not saved with the weights.
        self.register_buffer("bias", alibi_bias(config.n_head, config.block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)                      # each (B, T, C)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)           # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)           # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)           # (B, nh, T, hs)
        # Written out rather than F.scaled_dot_product_attention: with an additive mask that
        # call takes a slower generic path on CPU (measured ~10% of a whole training step).
        # Scale q (B, nh, T, hs) rather than the scores (B, nh, T, T): 4x fewer elements.
        att = (q * (1.0 / math.sqrt(hs))) @ k.transpose(-2, -1)     # (B, nh, T, T)
        att = F.softmax(att + self.bias[:, :T, :T], dim=-1)         # ALiBi + causal mask
        y = att @ v                                                 # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)                      # (B, T, C)
        return self.proj(y)


class Block(nn.Module):
    """Pre-LN block: x + attn(ln(x)), then x + mlp(ln(x)) (GPT-2's ordering)."""

    def __init__(self, config):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.attn = SelfAttention(config)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, config.mlp_ratio * config.n_embd),
            nn.GELU(),
            nn.Linear(config.mlp_ratio * config.n_embd, config.n_embd),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        config.validate()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size)

    def forward(self, idx):
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens is longer than block_size {self.config.block_size}")
        x = self.tok_emb(idx)                       # (B, T, C); positions enter through ALiBi
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))              # (B, T, vocab)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    @torch.no_grad()
    def generate(self, idx, n_new, gen, temperature=1.0):
        """Sample n_new tokens after idx (B, T), drawing from `gen` (a torch.Generator)."""
        was_training = self.training
        self.eval()
        for _ in range(n_new):
            context = idx[:, -self.config.block_size:]
            logits = self(context)[:, -1, :]           # (B, vocab)
            if temperature <= 0:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                probs = F.softmax(logits / temperature, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=gen)
            idx = torch.cat([idx, nxt], dim=1)
        self.train(was_training)
        return idx


def make_model(config=BASE_CONFIG, seed=0):
    """Build a TinyGPT whose initial weights depend only on `seed`.

    Every weight is drawn from one torch.Generator seeded with `seed`, in the fixed order
    of named_parameters(), so a seed gives bit-identical initial weights on any machine.
    (Building the modules draws from torch's global generator too, as nn.Linear and
    nn.Embedding initialise themselves; every one of those values is then overwritten.)
    Linear and embedding weights ~ N(0, init_std); the two projections that write into
    the residual stream are scaled by 1/sqrt(2 * n_layer) (GPT-2), so the residual's
    variance does not grow with depth. Biases start at 0, LayerNorm gains at 1.
    """
    config.validate()
    model = TinyGPT(config)
    gen = torch.Generator().manual_seed(seed)
    residual_std = config.init_std / math.sqrt(2 * config.n_layer)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif ".ln" in name or name.startswith("ln_"):
                p.fill_(1.0)
            elif name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight"):
                p.normal_(0.0, residual_std, generator=gen)
            else:
                p.normal_(0.0, config.init_std, generator=gen)
    return model


def lm_loss(model, x, y, bf16=False):
    """Mean next-character cross-entropy in nats; x, y: (B, T) int64.

    bf16=True runs the forward pass under torch.autocast with bfloat16 (混合精度 mixed
    precision, as large models are trained): matrix products take bf16 inputs and
    accumulate in fp32; weights, gradients and the loss stay fp32. On a CPU with
    AVX512-BF16 this made a training step about 30% faster; on one without it, about 3x
    slower, which is why scripts choose with resolve_precision("auto").
    """
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(x)                                           # (B, T, vocab)
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------

def encode_text(text, tokenizer):
    """A 1-D int64 tensor of token ids."""
    return torch.tensor(tokenizer.encode(text), dtype=torch.long)


def load_world_tokens(seed=0):
    """(train_tokens, val_tokens): the toy world's texts as 1-D int64 tensors."""

    world = build_world(seed)
    tokenizer = CharTokenizer(ALPHABET)
    return encode_text(world.train_text(), tokenizer), encode_text(world.val_text(), tokenizer)


def get_batch(data, batch_size, block_size, gen):
    """Random windows of the token stream: x (B, T) and y = x shifted left by one.

    Offsets are drawn from `gen` (a torch.Generator), so a seeded generator gives the
    same batches on every run.
    """
    if batch_size < 1 or block_size < 1:
        raise ValueError(f"batch_size and block_size must be positive, got {batch_size}, {block_size}")
    if data.numel() < block_size + 1:
        raise ValueError(f"data has {data.numel()} tokens; need at least block_size + 1 = {block_size + 1}")
    starts = torch.randint(0, data.numel() - block_size, (batch_size,), generator=gen)
    offsets = torch.arange(block_size)
    x = data[starts[:, None] + offsets]         # (B, T)
    y = data[starts[:, None] + offsets + 1]     # (B, T)
    return x, y


# ---------------------------------------------------------------------------
# Learning-rate schedule and evaluation
# ---------------------------------------------------------------------------

WARMUP_FRACTION = 0.05   # warm up over the first 5% of steps: Adam's moment estimates settle first
LR_FLOOR_FRACTION = 0.1  # cosine ends at 10% of the peak, not 0: the last steps still learn


def warmup_steps(total_steps):
    return max(1, round(WARMUP_FRACTION * total_steps))


def lr_at(step, total_steps, peak_lr):
    """Learning rate at `step` (0-based) of `total_steps`.

    Linear warm-up over warmup_steps(total_steps) = max(1, round(5% of total_steps)) steps,
    from peak_lr / warmup up to peak_lr; then cosine decay to LR_FLOOR_FRACTION * peak_lr,
    reached exactly at the last step.
    """
    if total_steps < 1:
        raise ValueError(f"total_steps must be positive, got {total_steps}")
    if not 0 <= step < total_steps:
        raise ValueError(f"step must be in [0, {total_steps}), got {step}")
    warmup = warmup_steps(total_steps)
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    decay_steps = total_steps - 1 - warmup
    progress = 1.0 if decay_steps <= 0 else (step - warmup) / decay_steps
    floor = LR_FLOOR_FRACTION * peak_lr
    return floor + (peak_lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


EVAL_WINDOWS = 256   # windows of block_size + 1 characters, taken back to back from the start


def bits_per_char(model, val_data, n_windows=EVAL_WINDOWS, batch_size=64):
    """Average bits per predicted character on a fixed prefix of the validation data.

    Reads n_windows non-overlapping windows of block_size + 1 characters from the start
    of val_data (256 x 97 = 24,832 characters at BASE_CONFIG) and predicts the last
    block_size of each: 256 x 96 = 24,576 predictions. The same windows every call, so
    two models are compared on identical text. Eval mode, no gradients; the model's
    train/eval mode is restored afterwards. A uniform guess over 44 characters scores
    log2(44) = 5.459 bits.
    """
    T = model.config.block_size
    n_windows = min(n_windows, val_data.numel() // (T + 1))
    if n_windows < 1:
        raise ValueError(f"validation data of {val_data.numel()} tokens is shorter than one window of {T + 1}")
    windows = val_data[: n_windows * (T + 1)].view(n_windows, T + 1)   # (N, T + 1)
    was_training = model.training
    model.eval()
    total_nats = 0.0
    with torch.no_grad():
        for start in range(0, n_windows, batch_size):
            chunk = windows[start:start + batch_size]
            logits = model(chunk[:, :-1])                               # (b, T, vocab)
            nats = F.cross_entropy(logits.reshape(-1, logits.size(-1)).double(),
                                   chunk[:, 1:].reshape(-1), reduction="sum")
            total_nats += nats.item()
    model.train(was_training)
    return total_nats / (n_windows * T) / math.log(2)


# ---------------------------------------------------------------------------
# Training loop (lecture 1 trains with it; lecture 9 plugs in its own gradient function)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainConfig:
    steps: int = 300            # lecture 9's workload; lecture 1's base model uses more
    batch_size: int = 32        # sequences per step
    peak_lr: float = 3e-3       # high for a transformer, fine for one this small with warm-up
    weight_decay: float = 0.1   # AdamW decoupled decay on weight matrices and embeddings (nanoGPT)
    beta1: float = 0.9
    beta2: float = 0.95         # shorter memory for the second moment: steadier with few steps
    clip_norm: float = 1.0      # global gradient-norm clipping; None or 0 turns it off
    data_seed: int = 1          # seeds the generator that draws batch offsets
    bf16: bool = False          # mixed-precision forward (see lm_loss); scripts pass resolve_precision()


def make_adamw(model, config):
    """AdamW with weight decay on 2-D weights only (biases and LayerNorm gains are not decayed)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.peak_lr, betas=(config.beta1, config.beta2))


def plain_backward(bf16=False):
    """A `backward` for train(): the single-process gradient, loss.backward() into p.grad."""
    def backward(model, x, y):
        loss = lm_loss(model, x, y, bf16=bf16)
        loss.backward()
        return loss.item()
    return backward


def train(model, train_data, config=TrainConfig(), optimizer=None, backward=None,
          on_step=None):
    """Train `model` for config.steps steps; return the list of per-step training losses.

    Each step: learning rate from lr_at; a batch from get_batch with a generator seeded by
    config.data_seed (the same data order for every run with that seed); `backward(model,
    x, y)` fills p.grad and returns the loss (lecture 9 passes one that splits the batch
    across workers and compresses their gradients); global clipping; optimizer step.
    on_step(step, loss), if given, is called after every step (progress lines, charts).
    """
    if config.steps < 1:
        raise ValueError(f"steps must be positive, got {config.steps}")
    if optimizer is None:
        optimizer = make_adamw(model, config)
    if backward is None:
        backward = plain_backward(config.bf16)
    gen = torch.Generator().manual_seed(config.data_seed)
    block_size = model.config.block_size
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    losses = []
    for step in range(config.steps):
        lr = lr_at(step, config.steps, config.peak_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, config.batch_size, block_size, gen)
        optimizer.zero_grad(set_to_none=True)
        loss = backward(model, x, y)
        if config.clip_norm:
            torch.nn.utils.clip_grad_norm_(params, config.clip_norm)
        optimizer.step()
        losses.append(loss)
        if on_step is not None:
            on_step(step, loss)
    return losses
