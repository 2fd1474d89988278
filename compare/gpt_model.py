"""The GPT of `examples/gpt.rs` as PyTorch writes it (its twin), the windows ours trains on, and
nanoGPT's training step: what `gpt_twin.py` and `options_twin.py` hold ours to.

The twin is nested `nn.Module`s named as ours: `h.N.attend.{ln_1, attn.c_attn, attn.c_proj}`,
`h.N.mlp.{ln_2, c_fc, gelu, c_proj}`, `ln_f`, and nanoGPT's `lm_head`, without a bias, its weight
`wte`'s (`self.lm_head.weight = self.wte.weight`; its state dict lists the shared tensor under
both names, so ours loads with `lm_head.weight` added as `wte.weight`), attention by
`F.scaled_dot_product_attention(is_causal=True)`. It trains as the example trains: AdamW (betas
0.9, 0.99; weight decay 0.1 on parameters of two or more dimensions), the warm-up and cosine
learning rate, `clip_grad_norm_(1.0)`, cross-entropy over every position, on the same windows of
the same text (our sampling, SplitMix64 of the seed and the sample index, replayed here) or of the
same token shards (window after window).
"""

import glob
import math
import os
import struct
from collections import namedtuple

# A compiled shape of the example: blocks, heads, width, positions, vocabulary.
Shape = namedtuple("Shape", "layers heads width context vocab")
# nanoGPT's CPU run (the default), its baby GPT, and the CPU run over GPT-2's padded token ids
# (the text's characters are its first 96 of 50304 ids).
SHAPES = {"nano": Shape(4, 4, 128, 64, 96), "baby": Shape(6, 6, 384, 256, 96), "gpt2": Shape(4, 4, 128, 64, 50304)}
NANO = SHAPES["nano"]
BATCH = 12
LR, MIN_LR, WARMUP, DECAY_UNTIL, BETAS, DECAY, CLIP = 1e-3, 1e-4, 100, 2000, (0.9, 0.99), 0.1, 1.0
MASK64 = (1 << 64) - 1


# What both train on: `--text FILE` (characters) or `--tokens DIR` (llm.c's token shards, as
# `prepare` writes them).
Data = namedtuple("Data", "flag path")


def samples(data, context):
    """The windows `data` gives ours, replayed: `Text` or `TokenWindows`."""
    return Text(data.path, context=context) if data.flag == "--text" else TokenWindows(data.path, context)


def shard_paths(folder, split):
    """A folder's numbered shards of `split` (`train` or `val`) in the order ours reads them: by
    their numbers, not their names (`_9` before `_10`)."""
    def number(path):
        digits = path[:-len(".bin")].rsplit("_", 1)[1]
        return int(digits) if digits.isdigit() else -1  # ours sorts an unnumbered name first too

    return sorted(glob.glob(os.path.join(folder, f"*_{split}_*.bin")), key=lambda path: (number(path), path))


def read_shard(path):
    """The tokens of one of llm.c's token shards (a 256-int32 header, its third the count)."""
    with open(path, "rb") as f:
        data = f.read()
    count = struct.unpack_from("<i", data, 8)[0]
    return struct.unpack_from(f"<{count}H", data, 1024)


def read_token_table(path):
    """llm.c's tokenizer file: each token's bytes, and the end-of-text token's id (version 2)."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, count, end_of_text = struct.unpack_from("<4i", data)
    if magic != 20240328 or version != 2:
        raise SystemExit(f"{path}: not a version 2 tokenizer file of llm.c's (magic {magic}, version {version})")
    pieces, at = [], 1024
    for _ in range(count):
        pieces.append(data[at + 1:at + 1 + data[at]])
        at += 1 + data[at]
    return pieces, end_of_text


class TokenWindows:
    """Our `TokenShards` over a folder `prepare` wrote: sample `i` is the `i`-th window of
    `context` tokens (and the token after each), shard after shard, none across two, wrapping
    around; from the training shards, or the validation ones when held out."""

    def __init__(self, folder, context):
        self.context = context
        self.splits = {}
        for held_out, split in ((False, "train"), (True, "val")):
            shards = [read_shard(path) for path in shard_paths(folder, split)]
            self.splits[held_out] = [(tokens, (len(tokens) - 1) // context) for tokens in shards]
        if not self.splits[False]:
            raise SystemExit(f"{folder}: no training shards (`*_train_*.bin`)")

    def window(self, index, held_out):
        shards = self.splits[held_out]
        if not shards:
            raise SystemExit("no validation shards (`*_val_*.bin`) to measure a held-out loss on")
        w = index % sum(windows for _, windows in shards)
        for tokens, windows in shards:
            if w < windows:
                return tokens[w * self.context:(w + 1) * self.context + 1]
            w -= windows
        raise AssertionError("the index is below the window count")

    def batch(self, torch, first, rows, held_out=False):
        windows = [self.window(first + s, held_out) for s in range(rows)]
        return torch.tensor([w[:-1] for w in windows]), torch.tensor([w[1:] for w in windows])


class Text:
    """Our `CharText`: sorted characters, 90/10 split, windows by SplitMix64(seed, index)."""

    def __init__(self, path, seed=0, context=None):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(self.vocab)}
        self.tokens = [index[c] for c in text]
        self.train_end = int(len(self.tokens) * 0.9)
        self.seed, self.context = seed, context or NANO.context

    def offset(self, index, split):
        z = (self.seed + index * 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        start, end = split
        return start + z % (end - start - self.context)

    def batch(self, torch, first, rows, held_out=False):
        split = (self.train_end, len(self.tokens)) if held_out else (0, self.train_end)
        at = [self.offset(first + s, split) for s in range(rows)]
        x = torch.tensor([self.tokens[a:a + self.context] for a in at])
        y = torch.tensor([self.tokens[a + 1:a + self.context + 1] for a in at])
        return x, y


def twin(torch, shape=NANO, planted=None, dropout=0.0):
    """nanoGPT's GPT of `shape` in our structure and names; `dropout` where nanoGPT's is (after the
    embeddings, on attention's weights, after attention's projection and after the MLP), dropping
    only in training mode."""
    nn, F = torch.nn, torch.nn.functional
    layers, heads, width, context, vocab = shape

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(width, 3 * width)
            self.c_proj = nn.Linear(width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in self.c_attn(x).split(c, dim=2))
            if planted is None:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout if self.training else 0.0,
                                                   is_causal=True)
            else:
                d = c // heads
                scale = 1.0 / d if planted == "scale" else 1.0 / math.sqrt(d)
                late = 1 if planted == "mask" else 0
                allowed = torch.ones(t, t, dtype=torch.bool, device=q.device).tril(diagonal=late)
                scores = (q @ k.transpose(-2, -1)) * scale
                y = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class Attend(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = Attention()
            self.resid_dropout = nn.Dropout(dropout)

        def forward(self, x):
            return x + self.resid_dropout(self.attn(self.ln_1(x)))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_2 = nn.LayerNorm(width)
            self.c_fc = nn.Linear(width, 4 * width)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * width, width)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            return x + self.dropout(self.c_proj(self.gelu(self.c_fc(self.ln_2(x)))))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attend = Attend()
            self.mlp = Mlp()

        def forward(self, x):
            return self.mlp(self.attend(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(context, width)
            self.drop = nn.Dropout(dropout)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            self.lm_head = nn.Linear(width, vocab, bias=False)
            if planted != "untied":
                self.lm_head.weight = self.wte.weight

        def forward(self, idx):
            x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return Gpt()


def lr_at(step, lr=LR, warmup=WARMUP, decay_until=DECAY_UNTIL, min_lr=MIN_LR):
    """nanoGPT's get_lr (the example's schedule by default)."""
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    if step > decay_until:
        return min_lr
    ratio = (step - warmup) / (decay_until - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


class Trainer:
    """The twin's training loop, one step at a time."""

    def __init__(self, torch, model, vocab):
        self.torch, self.model, self.vocab, self.step_count = torch, model, vocab, 0
        params = list(model.parameters())
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": DECAY},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        self.opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=1e-8)

    def step(self, x, y):
        torch = self.torch
        for group in self.opt.param_groups:
            group["lr"] = lr_at(self.step_count)
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self.model(x).view(-1, self.vocab), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.opt.step()
        self.step_count += 1
        return loss.item()


def with_head(state):
    """Our parameters as the twin's (nanoGPT's) state dict: the tied head's weight is `wte`'s."""
    return {**state, "lm_head.weight": state["wte.weight"]}


def distance(torch, a, b):
    """The largest per-tensor `|a - b| / |b|` (Euclidean norms) over a's tensors, and its name."""
    worst = (0.0, "")
    for name in a:
        value = b[name]
        diff = float(torch.linalg.vector_norm(a[name].double() - value.double()))
        worst = max(worst, (diff / max(float(torch.linalg.vector_norm(value.double())), 1e-30), name))
    return worst


def held_out_loss(torch, model, text, vocab, batches=20):
    """`model`'s mean loss over `batches` batches of the held-out split, without dropout."""
    model.eval()  # no dropout, as ours measures it
    with torch.no_grad():
        losses = []
        for k in range(batches):
            x, y = text.batch(torch, k * BATCH, BATCH, held_out=True)
            losses.append(float(torch.nn.functional.cross_entropy(model(x).view(-1, vocab), y.view(-1))))
    model.train()
    return sum(losses) / len(losses)
