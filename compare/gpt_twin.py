#!/usr/bin/env python3
"""`examples/gpt.rs` against its PyTorch twin: numerics step by step, and a whole run.

The twin is the same GPT written as PyTorch writes it (nested `nn.Module`s named as ours:
`h.N.attend.{ln_1, attn.c_attn, attn.c_proj}`, `h.N.mlp.{ln_2, c_fc, gelu, c_proj}`, `ln_f`,
and nanoGPT's `lm_head`, without a bias, its weight `wte`'s: `self.lm_head.weight =
self.wte.weight`; its state dict lists the shared tensor under both names, so ours loads with
`lm_head.weight` added as `wte.weight`), attention by
`F.scaled_dot_product_attention(is_causal=True)`, trained as the example
trains: AdamW (betas 0.9, 0.99; weight decay 0.1 on parameters of two or more dimensions), the
warm-up and cosine learning rate, `clip_grad_norm_(1.0)`, cross-entropy over every position, on
the same windows of the same text (our sampling, SplitMix64 of the seed and the sample index,
replayed here).

`--steps N` (default 10): from our initial parameters, after each of N steps every tensor of
ours (`--save-params`) against the twin's, on one process and on 2 ranks (the same global
batch); and both against the twin in float64, where ours must stay within about 1.5x of
PyTorch's own float32 distance. Twins with a planted error (the causal mask one position late,
the softmax scaled by 1/d instead of 1/sqrt(d), a head with a weight of its own instead of
`wte`'s) must be caught: ours ends farther from them than the float32 floor.

`--run N`: N steps of the example's defaults (2000: nanoGPT's CPU run) by ours and by the twin
at the same time, one thread each, then both models' loss on the same held-out batches (the
text's last 10%, 20 batches) and their median step times; and our greedy sample (`--top-k 1
--start`) from our final parameters against the twin's argmax continuation of the same prompt. With `--dropout P`, both train with
dropout P where nanoGPT drops (`drop`, attention's weights, `resid_dropout`, the MLP's `dropout`),
each with its own masks, and the held-out losses, measured without it, must still agree.

`--ddp N`: 2 ranks of 6 sequences each (the same global batch of 12), N steps: ours under mpirun
against the twin under PyTorch DDP (gloo), one thread per rank, alternating, 3 rounds; the
median of the per-round ratios of median steps.

`--gpu-speed N`: the twin alone on the GPU, N timed steps on the same windows of the same text;
its median step as JSON, for `scripts/gpu-check.sh` to set beside ours.

Needs `cargo build --release --examples` and torch with safetensors (prints "skipped" without).
"""

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import jobs

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS, BATCH = 96, 64, 128, 4, 4, 12
# The example's compiled shapes (layers, heads, width, positions, vocabulary): nanoGPT's CPU run
# (the default), its baby GPT (`--shape baby`), and the CPU run over GPT-2's padded token ids
# (`--shape gpt2`; the text's characters are its first 96 of 50304 ids).
SHAPES = {"nano": (4, 4, 128, 64, 96), "baby": (6, 6, 384, 256, 96), "gpt2": (4, 4, 128, 64, 50304)}
# The flags that choose the shape in ours (none for the default).
SHAPE_FLAGS = []
LR, MIN_LR, WARMUP, DECAY_UNTIL, BETAS, DECAY, CLIP = 1e-3, 1e-4, 100, 2000, (0.9, 0.99), 0.1, 1.0
MASK64 = (1 << 64) - 1


class Text:
    """Our `CharText`: sorted characters, 90/10 split, windows by SplitMix64(seed, index)."""

    def __init__(self, path, seed=0, context=None):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(self.vocab)}
        self.tokens = [index[c] for c in text]
        self.train_end = int(len(self.tokens) * 0.9)
        self.seed, self.context = seed, context or CONTEXT

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


def twin(torch, planted=None, dropout=0.0):
    """nanoGPT's GPT in our structure and names; `dropout` where nanoGPT's is (after the
    embeddings, on attention's weights, after attention's projection and after the MLP), dropping
    only in training mode."""
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
            self.c_proj = nn.Linear(WIDTH, WIDTH)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in self.c_attn(x).split(c, dim=2))
            if planted is None:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout if self.training else 0.0,
                                                   is_causal=True)
            else:
                d = c // HEADS
                scale = 1.0 / d if planted == "scale" else 1.0 / math.sqrt(d)
                late = 1 if planted == "mask" else 0
                allowed = torch.ones(t, t, dtype=torch.bool, device=q.device).tril(diagonal=late)
                scores = (q @ k.transpose(-2, -1)) * scale
                y = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class Attend(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(WIDTH)
            self.attn = Attention()
            self.resid_dropout = nn.Dropout(dropout)

        def forward(self, x):
            return x + self.resid_dropout(self.attn(self.ln_1(x)))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_2 = nn.LayerNorm(WIDTH)
            self.c_fc = nn.Linear(WIDTH, 4 * WIDTH)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * WIDTH, WIDTH)
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
            self.wte = nn.Embedding(VOCAB, WIDTH)
            self.wpe = nn.Embedding(CONTEXT, WIDTH)
            self.drop = nn.Dropout(dropout)
            self.h = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(WIDTH)
            self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
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

    def __init__(self, torch, model):
        self.torch, self.model, self.step_count = torch, model, 0
        params = list(model.parameters())
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": DECAY},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        self.opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=1e-8)

    def step(self, x, y):
        torch = self.torch
        for group in self.opt.param_groups:
            group["lr"] = lr_at(self.step_count)
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(self.model(x).view(-1, VOCAB), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.opt.step()
        self.step_count += 1
        return loss.item()


def ours(binary, text, out, steps, ranks=1, extra=()):
    cmd = [binary, "--text", text, "--steps", str(steps), "--batch", str(BATCH // ranks), "--report", "off",
           "--eval-every", "0", "--save-params", out, *SHAPE_FLAGS, *extra]
    done = jobs.run(jobs.on_ranks(ranks, cmd), timeout=3600)
    return done.stdout + done.stderr


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


def numerics(torch, load_file, binary, text_path, steps, work):
    text = Text(text_path)
    init = os.path.join(work, "init.safetensors")
    ours(binary, text_path, init, 1, extra=["--optimizer", "sgd", "--momentum", "0", "--lr", "1e-30",
                                          "--lr-schedule", "constant", "--clip-grad-norm", "off"])
    start = load_file(init)

    def trained(dtype, planted=None):
        model = twin(torch, planted).to(dtype)
        model.load_state_dict({k: v.to(dtype) for k, v in with_head(start).items()}, strict=True)
        return model, Trainer(torch, model)

    planted = ("mask", "scale", "untied")
    runs = {"f32": trained(torch.float32), "f64": trained(torch.float64),
            **{error: trained(torch.float32, error) for error in planted}}
    failures, rows = [], []
    for step in range(steps):
        x, y = text.batch(torch, step * BATCH, BATCH)
        for _, trainer in runs.values():
            trainer.step(x, y)
        state = {k: {n: v.detach() for n, v in m.state_dict().items()} for k, (m, _) in runs.items()}
        row = {"pytorch f32": distance(torch, state["f32"], state["f64"])[0]}
        for ranks in (1, 2):
            out = os.path.join(work, f"ours-{ranks}-{step + 1}.safetensors")
            ours(binary, text_path, out, step + 1, ranks, ["--init-params", init])
            mine = load_file(out)
            row[f"ours {ranks} rank(s)"] = distance(torch, mine, state["f64"])[0]
            row[f"ours {ranks} vs twin"] = distance(torch, mine, state["f32"])
        for error in planted:
            row[f"ours vs {error} twin"] = distance(torch, load_file(os.path.join(work, f"ours-1-{step + 1}.safetensors")),
                                                   state[error])[0]
        rows.append(row)
        line = "  ".join(f"{k} {v[0] if isinstance(v, tuple) else v:.1e}" for k, v in row.items())
        print(f"  step {step + 1:2}: {line}")
    last = rows[-1]
    for ranks in (1, 2):
        ratio = last[f"ours {ranks} rank(s)"] / max(last["pytorch f32"], 1e-30)
        print(f"ours on {ranks} rank(s) to float64 after {steps} steps: {ratio:.2f}x PyTorch float32's distance")
        if ratio > 1.5:
            failures.append(f"{ranks} rank(s): {ratio:.2f}x PyTorch's float32 distance to float64 (at most 1.5)")
    floor = max(last["ours 1 vs twin"][0], last["pytorch f32"])
    for error in planted:
        if last[f"ours vs {error} twin"] < 10 * floor:
            failures.append(f"the {error} error is not caught: {last[f'ours vs {error} twin']:.1e} within 10x "
                            f"of the float32 floor {floor:.1e}")
        else:
            print(f"planted {error} error caught: {last[f'ours vs {error} twin']:.1e} against a floor of {floor:.1e}")
    return failures


def held_out_loss(torch, model, text, batches=20):
    model.eval()  # no dropout, as ours measures it
    with torch.no_grad():
        losses = []
        for k in range(batches):
            x, y = text.batch(torch, k * BATCH, BATCH, held_out=True)
            losses.append(float(torch.nn.functional.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))))
    model.train()
    return sum(losses) / len(losses)


def whole_run(torch, load_file, binary, text_path, steps, work, dropout=0.0):
    text = Text(text_path)
    init = os.path.join(work, "init.safetensors")
    ours(binary, text_path, init, 1, extra=["--optimizer", "sgd", "--momentum", "0", "--lr", "1e-30",
                                          "--lr-schedule", "constant", "--clip-grad-norm", "off"])
    final = os.path.join(work, "ours-final.safetensors")
    # Ours in the background, the twin here: the same two cores' worth of machine for both.
    cmd = [binary, "--text", text_path, "--steps", str(steps), "--init-params", init, "--report", "off",
           "--eval-every", str(steps), "--eval-batches", "20", "--log-every", str(max(steps // 10, 1)),
           "--save-params", final, "--dropout", str(dropout), *SHAPE_FLAGS]
    mine = subprocess.Popen(cmd, env=jobs.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    model = twin(torch, dropout=dropout)
    model.load_state_dict(with_head(load_file(init)), strict=True)
    trainer, times = Trainer(torch, model), []
    for step in range(steps):
        x, y = text.batch(torch, step * BATCH, BATCH)
        started = time.perf_counter()
        loss = trainer.step(x, y)
        times.append(time.perf_counter() - started)
        if (step + 1) % max(steps // 10, 1) == 0:
            print(f"  twin step {step + 1:5}  loss {loss:.4f}", flush=True)
    log, _ = mine.communicate()
    if mine.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{log}")
    print("  " + "\n  ".join(line for line in log.splitlines() if "loss" in line))
    theirs = held_out_loss(torch, model, text)
    our_model = twin(torch)
    our_model.load_state_dict(with_head(load_file(final)), strict=True)
    recomputed = held_out_loss(torch, our_model, text)
    logged = float(re.findall(r"validation loss ([0-9.]+)", log)[-1])
    our_step = float(re.search(r"median step ([0-9.]+) ms", log).group(1))
    their_step = statistics.median(times) * 1e3  # over every step, as ours
    print(f"held-out loss after {steps} steps: ours {logged:.4f} (the twin's forward on our final parameters: "
          f"{recomputed:.4f}), PyTorch {theirs:.4f}: {100 * (logged / theirs - 1):+.2f}%")
    print(f"median step, side by side, one thread each: ours {our_step:.1f} ms, PyTorch {their_step:.1f} ms: "
          f"{our_step / their_step:.2f}x")
    failures = greedy_continuations(torch, binary, text_path, final, our_model, text)
    if abs(logged / theirs - 1) > 0.02:
        failures.append(f"held-out loss {logged:.4f} is not within 2% of PyTorch's {theirs:.4f}")
    if abs(recomputed - logged) > 1e-3 * logged:
        failures.append(f"our logged held-out loss {logged:.4f} differs from the twin's forward on our parameters "
                        f"{recomputed:.4f}")
    return failures


def greedy_continuations(torch, binary, text_path, params, model, text, chars=200):
    """Ours sampling greedily (`--steps 0 --init-params --sample N --top-k 1 --start PROMPT`)
    against the twin's argmax continuation of the same prompt (the held-out split's first 32
    characters), from the same parameters: the same characters, or the first that differs."""
    prompt = "".join(text.vocab[t] for t in text.tokens[text.train_end:text.train_end + 32])
    cmd = [binary, "--text", text_path, "--steps", "0", "--init-params", params, "--sample", str(chars),
           "--top-k", "1", f"--start={prompt}", *SHAPE_FLAGS]
    done = subprocess.run(cmd, env=jobs.ENV, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return [f"failed: {' '.join(cmd)}\n{done.stderr}"]
    printed = done.stdout.split(":\n", 1)[1]
    if not printed.startswith(prompt):
        return [f"our sample does not begin with its prompt {prompt!r}: {printed[:80]!r}"]
    mine = printed[len(prompt):len(prompt) + chars]
    index = {c: i for i, c in enumerate(text.vocab)}
    tokens = [index[c] for c in prompt]
    model.eval()
    with torch.no_grad():
        for _ in range(chars):
            # Over the text's ids only, as ours draws (a shape may predict more ids than it uses).
            logits = model(torch.tensor([tokens[-CONTEXT:]]))[0, -1, :len(text.vocab)]
            tokens.append(int(torch.argmax(logits)))
    theirs = "".join(text.vocab[t] for t in tokens[len(prompt):])
    same = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), len(theirs))
    print(f"greedy continuation of {prompt!r}: {same} of {chars} characters as the twin's: {mine[:60]!r}...")
    if same < chars:
        return [f"our greedy sample parts from the twin's at character {same}: {mine[same:same + 20]!r} against "
                f"{theirs[same:same + 20]!r}"]
    return []


def gpu_speed(torch, text_path, steps):
    """The twin's median step on the GPU, from the same windows of the same text as ours: what
    `scripts/gpu-check.sh` sets our `gpt --device cuda` beside. The first 5 steps warm up."""
    if not torch.cuda.is_available():
        print("gpt twin on the GPU: skipped (PyTorch sees no GPU)")
        return []
    device = torch.device("cuda")
    text = Text(text_path)
    trainer, times = Trainer(torch, twin(torch).to(device)), []
    for step in range(steps + 5):
        x, y = (z.to(device) for z in text.batch(torch, step * BATCH, BATCH))
        torch.cuda.synchronize()
        started = time.perf_counter()
        trainer.step(x, y)  # reads the loss back, as our logged steps do
        torch.cuda.synchronize()
        if step >= 5:
            times.append(time.perf_counter() - started)
    times.sort()
    median = (times[(len(times) - 1) // 2] + times[len(times) // 2]) / 2
    print(json.dumps({"mode": "gpt twin", "device": "cuda", "torch": torch.__version__, "steps": steps,
                      "step_ms": median * 1e3}))
    return []


def ddp_rank(rank, steps, text_path, init, port, out, shape):
    """One rank of the twin under DDP (gloo), its median step time written to `out` by rank 0. A
    process of its own, which starts from this module's defaults: `shape` sets the model's."""
    global LAYERS, HEADS, WIDTH, CONTEXT
    LAYERS, HEADS, WIDTH, CONTEXT = shape
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    text = Text(text_path)
    model = twin(torch)
    model.load_state_dict(with_head(load_file(init)), strict=True)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    trainer, times = Trainer(torch, ddp), []
    per_rank = BATCH // 2
    for step in range(steps):
        x, y = text.batch(torch, step * BATCH + rank * per_rank, per_rank)
        dist.barrier()
        started = time.perf_counter()
        trainer.step(x, y)
        times.append(time.perf_counter() - started)
    if rank == 0:
        with open(out, "w") as f:
            f.write(str(statistics.median(times) * 1e3))  # over every step, as ours
    dist.destroy_process_group()


def ddp_comparison(torch, binary, text_path, steps, work):
    import torch.multiprocessing as mp

    init = os.path.join(work, "init.safetensors")
    ours(binary, text_path, init, 1, extra=["--optimizer", "sgd", "--momentum", "0", "--lr", "1e-30",
                                          "--lr-schedule", "constant", "--clip-grad-norm", "off"])
    ratios = []
    for round_ in range(3):
        log = ours(binary, text_path, os.path.join(work, "ddp-ours.safetensors"), steps, 2, ["--init-params", init])
        our_step = float(re.search(r"median step ([0-9.]+) ms", log).group(1))
        out = os.path.join(work, f"ddp-{round_}.txt")
        shape = (LAYERS, HEADS, WIDTH, CONTEXT)
        mp.spawn(ddp_rank, args=(steps, text_path, init, 29500 + round_, out, shape), nprocs=2, join=True)
        with open(out) as f:
            their_step = float(f.read())
        ratios.append(our_step / their_step)
        print(f"  round {round_ + 1}: ours (mpirun -n 2) {our_step:.1f} ms, PyTorch DDP (gloo) {their_step:.1f} ms: "
              f"{ratios[-1]:.2f}x")
    ratio = sorted(ratios)[1]
    print(f"2 ranks, global batch {BATCH}, median of 3 rounds: ours {ratio:.2f}x PyTorch DDP's step")
    return []


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(jobs.ROOT, "target", "release", "examples"))
    p.add_argument("--text", help="a UTF-8 file [default: this script]")
    p.add_argument("--steps", type=int, default=10, help="steps compared one by one")
    p.add_argument("--run", type=int, metavar="N", help="instead: a whole run of N steps, then held-out losses")
    p.add_argument("--dropout", type=float, default=0.0, metavar="P",
                   help="with --run: both train with dropout P where nanoGPT drops (each its own masks)")
    p.add_argument("--ddp", type=int, metavar="N", help="instead: N steps on 2 ranks against PyTorch DDP (gloo)")
    p.add_argument("--gpu-speed", type=int, metavar="N", help="instead: the twin's median step on the GPU over N steps")
    p.add_argument("--shape", choices=SHAPES, default="nano",
                   help="the example's compiled shape: nano (4 layers, 4 heads, 128 wide, 64 positions: nanoGPT's CPU "
                        "run, the default), baby (6, 6, 384, 256: its GPU run's baby GPT) or gpt2 (nano over GPT-2's "
                        "50304 padded token ids)")
    args = p.parse_args()
    global LAYERS, HEADS, WIDTH, CONTEXT, VOCAB
    LAYERS, HEADS, WIDTH, CONTEXT, VOCAB = SHAPES[args.shape]
    if args.shape != "nano":
        SHAPE_FLAGS.extend(["--layers", str(LAYERS), "--heads", str(HEADS), "--width", str(WIDTH),
                            "--vocab", str(VOCAB)])
    try:
        import torch
        from safetensors.torch import load_file
    except ImportError:
        print("gpt against its PyTorch twin: skipped (torch and safetensors are not importable)")
        return 0
    torch.set_num_threads(1)
    text = args.text or os.path.abspath(__file__)
    if args.gpu_speed:
        return 1 if gpu_speed(torch, text, args.gpu_speed) else 0
    binary = os.path.join(args.bin_dir, "gpt")
    work = tempfile.mkdtemp(prefix="gpt-twin-")
    print(f"gpt against its PyTorch twin ({torch.__version__}) on {os.path.basename(text)}")
    if args.ddp:
        failures = ddp_comparison(torch, binary, text, args.ddp, work)
    elif args.run:
        failures = whole_run(torch, load_file, binary, text, args.run, work, args.dropout)
    else:
        print("largest per-tensor relative distance to the float64 twin (and to the float32 twin)")
        failures = numerics(torch, load_file, binary, text, args.steps, work)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
