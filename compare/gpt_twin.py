#!/usr/bin/env python3
"""`examples/gpt.rs` against its PyTorch twin: numerics step by step, and a whole run.

The twin (`gpt_model.py`) is the same GPT written as PyTorch writes it, in our names, trained as
the example trains on the same windows of the same text (`--text FILE`, by default this script)
or of the same token shards (`--tokens DIR`: GPT-2's, as `prepare --tokenizer` writes them, with
`--shape gpt2`).

`--steps N` (default 10): from our initial parameters, after each of N steps every tensor of
ours (`--save-params`) against the twin's, on one process and on 2 ranks (the same global
batch); and both against the twin in float64, where ours must stay within about 1.5x of
PyTorch's own float32 distance. Twins with a planted error (the causal mask one position late,
the softmax scaled by 1/d instead of 1/sqrt(d), a head with a weight of its own instead of
`wte`'s) must be caught: ours ends farther from them than the float32 floor.

`--run N`: N steps of the example's defaults (2000: nanoGPT's CPU run) by ours and by the twin
at the same time, one thread each, then both models' loss on the same held-out batches (the
text's last 10%, 20 batches) and their median step times; and our greedy sample (`--top-k 1
--start`) from our final parameters against the twin's argmax continuation of the same prompt
(on token shards: of the end-of-text token, both printed through `--tokenizer FILE`).
With `--dropout P`, both train with dropout P where nanoGPT drops (`drop`, attention's weights,
`resid_dropout`, the MLP's `dropout`), each with its own masks, and the held-out losses, measured
without it, must still agree.

`--ddp N`: 2 ranks of 6 sequences each (the same global batch of 12), N steps: ours under mpirun
against the twin under PyTorch DDP (gloo), one thread per rank, alternating, 3 rounds; the
median of the per-round ratios of median steps.

`--gpu-speed N`: the twin alone on the GPU, N timed steps on the same windows of the same text;
its median step as JSON, for `scripts/gpu-check.sh` to set beside ours.

Needs `cargo build --release --examples` and torch with safetensors (prints "skipped" without).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import namedtuple

import jobs
from gpt_model import (BATCH, NANO, SHAPES, Data, Trainer, distance, held_out_loss, read_token_table, samples, twin,
                       with_head)

# What every comparison runs: our binary, the data both train on, the compiled shape, a scratch folder,
# and llm.c's tokenizer file that prints token shards' samples (None for a text).
Job = namedtuple("Job", "binary data shape work tokenizer")
# Ours at its initial parameters: one step that changes nothing (SGD at a learning rate of 1e-30).
UNTRAINED = ["--optimizer", "sgd", "--momentum", "0", "--lr", "1e-30", "--lr-schedule", "constant",
             "--clip-grad-norm", "off"]


def shape_flags(shape):
    """The flags that choose `shape` in ours (none for the default)."""
    if shape == NANO:
        return []
    return ["--layers", str(shape.layers), "--heads", str(shape.heads), "--width", str(shape.width),
            "--vocab", str(shape.vocab)]


def ours(job, out, steps, ranks=1, extra=()):
    cmd = [job.binary, *job.data, "--steps", str(steps), "--batch", str(BATCH // ranks), "--report",
           "off", "--eval-every", "0", "--save-params", out, *shape_flags(job.shape), *extra]
    done = jobs.run(jobs.on_ranks(ranks, cmd), timeout=3600)
    return done.stdout + done.stderr


def initial_parameters(job):
    """Our initial parameters, as a file."""
    init = os.path.join(job.work, "init.safetensors")
    ours(job, init, 1, extra=UNTRAINED)
    return init


def numerics(torch, load_file, job, steps):
    text = samples(job.data, job.shape.context)
    init = initial_parameters(job)
    start = load_file(init)

    def trained(dtype, planted=None):
        model = twin(torch, job.shape, planted).to(dtype)
        model.load_state_dict({k: v.to(dtype) for k, v in with_head(start).items()}, strict=True)
        return model, Trainer(torch, model, job.shape.vocab)

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
            out = os.path.join(job.work, f"ours-{ranks}-{step + 1}.safetensors")
            ours(job, out, step + 1, ranks, ["--init-params", init])
            mine = load_file(out)
            row[f"ours {ranks} rank(s)"] = distance(torch, mine, state["f64"])[0]
            row[f"ours {ranks} vs twin"] = distance(torch, mine, state["f32"])
        one_rank = load_file(os.path.join(job.work, f"ours-1-{step + 1}.safetensors"))
        for error in planted:
            row[f"ours vs {error} twin"] = distance(torch, one_rank, state[error])[0]
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


def whole_run(torch, load_file, job, steps, dropout=0.0):
    text, vocab = samples(job.data, job.shape.context), job.shape.vocab
    init = initial_parameters(job)
    final = os.path.join(job.work, "ours-final.safetensors")
    # Ours in the background, the twin here: the same two cores' worth of machine for both.
    cmd = [job.binary, *job.data, "--steps", str(steps), "--init-params", init, "--report", "off",
           "--eval-every", str(steps), "--eval-batches", "20", "--log-every", str(max(steps // 10, 1)),
           "--save-params", final, "--dropout", str(dropout), *shape_flags(job.shape)]
    mine = subprocess.Popen(cmd, env=jobs.ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    model = twin(torch, job.shape, dropout=dropout)
    model.load_state_dict(with_head(load_file(init)), strict=True)
    trainer, times = Trainer(torch, model, vocab), []
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
    theirs = held_out_loss(torch, model, text, vocab)
    our_model = twin(torch, job.shape)
    our_model.load_state_dict(with_head(load_file(final)), strict=True)
    recomputed = held_out_loss(torch, our_model, text, vocab)
    logged = float(re.findall(r"validation loss ([0-9.]+)", log)[-1])
    our_step = float(re.search(r"median step ([0-9.]+) ms", log).group(1))
    their_step = statistics.median(times) * 1e3  # over every step, as ours
    print(f"held-out loss after {steps} steps: ours {logged:.4f} (the twin's forward on our final parameters: "
          f"{recomputed:.4f}), PyTorch {theirs:.4f}: {100 * (logged / theirs - 1):+.2f}%")
    print(f"median step, side by side, one thread each: ours {our_step:.1f} ms, PyTorch {their_step:.1f} ms: "
          f"{our_step / their_step:.2f}x")
    if job.data.flag == "--text":
        failures = greedy_continuations(torch, job, final, our_model, text)
    else:
        failures = greedy_tokens(torch, job, final, our_model)
    if abs(logged / theirs - 1) > 0.02:
        failures.append(f"held-out loss {logged:.4f} is not within 2% of PyTorch's {theirs:.4f}")
    if abs(recomputed - logged) > 1e-3 * logged:
        failures.append(f"our logged held-out loss {logged:.4f} differs from the twin's forward on our parameters "
                        f"{recomputed:.4f}")
    return failures


def greedy_continuations(torch, job, params, model, text, chars=200):
    """Ours sampling greedily (`--steps 0 --init-params --sample N --top-k 1 --start PROMPT`)
    against the twin's argmax continuation of the same prompt (the held-out split's first 32
    characters), from the same parameters: the same characters, or the first that differs."""
    prompt = "".join(text.vocab[t] for t in text.tokens[text.train_end:text.train_end + 32])
    cmd = [job.binary, *job.data, "--steps", "0", "--init-params", params, "--sample", str(chars),
           "--top-k", "1", f"--start={prompt}", *shape_flags(job.shape)]
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
            logits = model(torch.tensor([tokens[-job.shape.context:]]))[0, -1, :len(text.vocab)]
            tokens.append(int(torch.argmax(logits)))
    theirs = "".join(text.vocab[t] for t in tokens[len(prompt):])
    same = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), len(theirs))
    print(f"greedy continuation of {prompt!r}: {same} of {chars} characters as the twin's: {mine[:60]!r}...")
    if same < chars:
        return [f"our greedy sample parts from the twin's at character {same}: {mine[same:same + 20]!r} against "
                f"{theirs[same:same + 20]!r}"]
    return []


def greedy_tokens(torch, job, params, model, count=100):
    """On token shards: ours sampling greedily from the end-of-text token, as llm.c's samples
    start (`--steps 0 --init-params --sample N --top-k 1 --tokenizer FILE`), against the twin's
    argmax continuation from the same parameters over the same ids, its tokens' bytes decoded
    (U+FFFD where they form no character, as ours prints them): the same text, or where it parts."""
    pieces, end_of_text = read_token_table(job.tokenizer)
    cmd = [job.binary, *job.data, "--steps", "0", "--init-params", params, "--sample", str(count), "--top-k", "1",
           "--tokenizer", job.tokenizer, *shape_flags(job.shape)]
    done = subprocess.run(cmd, env=jobs.ENV, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return [f"failed: {' '.join(cmd)}\n{done.stderr}"]
    mine = done.stdout.split(":\n", 1)[1].removesuffix("\n")
    tokens = [end_of_text]
    model.eval()
    with torch.no_grad():
        for _ in range(count):
            # Over the tokenizer's ids only, as ours draws (the model predicts 50304).
            logits = model(torch.tensor([tokens[-job.shape.context:]]))[0, -1, :len(pieces)]
            tokens.append(int(torch.argmax(logits)))
    theirs = b"".join(pieces[t] for t in tokens[1:]).decode("utf-8", errors="replace")
    same = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
    print(f"greedy continuation of the end-of-text token, {count} tokens: {same} of {len(theirs)} characters as the "
          f"twin's: {mine[:60]!r}...")
    if mine != theirs:
        return [f"our greedy sample parts from the twin's at character {same}: {mine[same:same + 20]!r} against "
                f"{theirs[same:same + 20]!r}"]
    return []


def gpu_speed(torch, data, shape, steps):
    """The twin's median step on the GPU, from the same windows of the same text as ours: what
    `scripts/gpu-check.sh` sets our `gpt --device cuda` beside. The first 5 steps warm up."""
    if not torch.cuda.is_available():
        print("gpt twin on the GPU: skipped (PyTorch sees no GPU)")
        return []
    device = torch.device("cuda")
    text = samples(data, shape.context)
    trainer, times = Trainer(torch, twin(torch, shape).to(device), shape.vocab), []
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


def ddp_rank(rank, steps, data, init, port, out, shape):
    """One rank of the twin of `shape` under DDP (gloo), in a process of its own, its median step
    time written to `out` by rank 0."""
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    text = samples(data, shape.context)
    model = twin(torch, shape)
    model.load_state_dict(with_head(load_file(init)), strict=True)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    trainer, times = Trainer(torch, ddp, shape.vocab), []
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


def ddp_comparison(torch, job, steps):
    import torch.multiprocessing as mp

    init = initial_parameters(job)
    ratios = []
    for round_ in range(3):
        log = ours(job, os.path.join(job.work, "ddp-ours.safetensors"), steps, 2, ["--init-params", init])
        our_step = float(re.search(r"median step ([0-9.]+) ms", log).group(1))
        out = os.path.join(job.work, f"ddp-{round_}.txt")
        mp.spawn(ddp_rank, args=(steps, job.data, init, 29500 + round_, out, job.shape), nprocs=2, join=True)
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
    p.add_argument("--tokens", metavar="DIR", help="instead of a text: llm.c's GPT-2 token shards, as `prepare "
                   "--tokenizer` writes them (with --shape gpt2)")
    p.add_argument("--tokenizer", default=os.path.join(jobs.ROOT, ".tools", "gpt2", "gpt2_tokenizer.bin"),
                   help="with --tokens --run: llm.c's tokenizer file, through which both samples print "
                        "[default: the one `make gpt2-tokenizer` writes]")
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
    shape = SHAPES[args.shape]
    try:
        import torch
        from safetensors.torch import load_file
    except ImportError:
        print("gpt against its PyTorch twin: skipped (torch and safetensors are not importable)")
        return 0
    torch.set_num_threads(1)
    if args.tokens and args.text:
        p.error("give --text or --tokens, not both")
    data = Data("--tokens", args.tokens) if args.tokens else Data("--text", args.text or os.path.abspath(__file__))
    if args.gpu_speed:
        return 1 if gpu_speed(torch, data, shape, args.gpu_speed) else 0
    work = tempfile.mkdtemp(prefix="gpt-twin-")
    job = Job(os.path.join(args.bin_dir, "gpt"), data, shape, work, args.tokenizer if args.tokens else None)
    print(f"gpt against its PyTorch twin ({torch.__version__}) on {os.path.basename(data.path)}")
    if args.ddp:
        failures = ddp_comparison(torch, job, args.ddp)
    elif args.run:
        failures = whole_run(torch, load_file, job, args.run, args.dropout)
    else:
        print("largest per-tensor relative distance to the float64 twin (and to the float32 twin)")
        failures = numerics(torch, load_file, job, args.steps)
    return jobs.verdict(failures)


if __name__ == "__main__":
    sys.exit(main())
