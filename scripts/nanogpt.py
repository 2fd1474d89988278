#!/usr/bin/env python3
"""Checkpoints of the `gpt` example to and from nanoGPT's `GPT` (karpathy/nanoGPT, `model.py`).

The structures are the same; the names differ where our block holds its two residual halves as
blocks of their own (`attend`, `mlp`) and where nanoGPT nests its trunk in `transformer`:

    ours                          nanoGPT
    wte.weight                    transformer.wte.weight, and lm_head.weight (the same tensor)
    wpe.weight                    transformer.wpe.weight
    h.N.attend.ln_1.*             transformer.h.N.ln_1.*
    h.N.attend.attn.c_attn.*      transformer.h.N.attn.c_attn.*
    h.N.attend.attn.c_proj.*      transformer.h.N.attn.c_proj.*
    h.N.mlp.ln_2.*                transformer.h.N.ln_2.*
    h.N.mlp.c_fc.*, c_proj.*      transformer.h.N.mlp.c_fc.*, c_proj.*
    ln_f.*                        transformer.ln_f.*

nanoGPT's MLP uses the exact GELU (`nn.GELU()`), ours the tanh approximation: a model loads and
runs either way, its logits differ by the two GELUs' difference (printed by `check`).

    scripts/nanogpt.py to-nanogpt params.safetensors ckpt.pt   # for nanoGPT's sample.py
    scripts/nanogpt.py from-nanogpt ckpt.pt params.safetensors # for --init-params
    scripts/nanogpt.py check --nanogpt DIR                     # both ways with nanoGPT's own GPT

`to-nanogpt` writes a checkpoint as nanoGPT's `train.py` does (`model`, `model_args`: the sizes
read off the tensors, the heads those of the example's shape of that width unless `--n-head`
says), which its `sample.py` loads with `init_from='resume'`; `from-nanogpt` reads one (a
`_orig_mod.` prefix of a compiled model removed). `check` (run by `make bench` with NANOGPT_DIR
set) builds nanoGPT's `GPT` with the configuration of one of the example's shapes (`--shape nano`,
the default, `baby`, or `gpt2`: the default over GPT-2's 50304 padded token ids), compares our
initial parameters with its own (each
tensor's spread, nanoGPT's scaled `c_proj.weight` included), loads our parameters into it with
`strict=True`, and loads its own state dict back into ours (`--init-params`, as strict), values
intact.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The gpt example's compiled shapes, as nanoGPT's GPTConfig: nanoGPT's CPU run (the default) and
# its baby GPT (`gpt --layers 6 --heads 6 --width 384`).
SHAPES = {
    "nano": dict(block_size=64, vocab_size=96, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=True),
    "baby": dict(block_size=256, vocab_size=96, n_layer=6, n_head=6, n_embd=384, dropout=0.0, bias=True),
    # nanoGPT's CPU run over GPT-2's token ids, padded as GPTConfig's default `vocab_size` pads them.
    "gpt2": dict(block_size=64, vocab_size=50304, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=True),
}

TO_NANOGPT = [
    (r"h\.(\d+)\.attend\.(ln_1|attn)\.(.+)", r"transformer.h.\1.\2.\3"),
    (r"h\.(\d+)\.mlp\.ln_2\.(.+)", r"transformer.h.\1.ln_2.\2"),
    (r"h\.(\d+)\.mlp\.(c_fc|c_proj)\.(.+)", r"transformer.h.\1.mlp.\2.\3"),
    (r"(wte|wpe|ln_f)\.(.+)", r"transformer.\1.\2"),
]
FROM_NANOGPT = [
    (r"transformer\.h\.(\d+)\.(ln_1|attn)\.(.+)", r"h.\1.attend.\2.\3"),
    (r"transformer\.h\.(\d+)\.ln_2\.(.+)", r"h.\1.mlp.ln_2.\2"),
    (r"transformer\.h\.(\d+)\.mlp\.(c_fc|c_proj)\.(.+)", r"h.\1.mlp.\2.\3"),
    (r"transformer\.(wte|wpe|ln_f)\.(.+)", r"\1.\2"),
]

# One optimizer step that moves nothing: the parameters a run starts from, saved.
FROZEN = ["--optimizer", "sgd", "--momentum", "0", "--lr", "1e-30", "--clip-grad-norm", "off", "--lr-schedule",
          "constant"]


def renamed(name, rules):
    for pattern, replacement in rules:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, replacement, name)
    sys.exit(f"no mapping for the parameter {name!r}")


def to_nanogpt(ours):
    state = {renamed(k, TO_NANOGPT): v for k, v in ours.items()}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


def from_nanogpt(state, torch):
    state = {k.removeprefix("_orig_mod."): v for k, v in state.items()}
    head, table = state.pop("lm_head.weight"), state["transformer.wte.weight"]
    if not torch.equal(head, table):
        sys.exit("lm_head.weight is not transformer.wte.weight: this model's head is not tied, ours is")
    # The causal-mask buffer of nanoGPT's attention without flash attention is not a parameter.
    state = {k: v for k, v in state.items() if not k.endswith(".attn.bias")}
    return {renamed(k, FROM_NANOGPT): v.contiguous() for k, v in state.items()}


def config_of(ours, heads):
    """nanoGPT's GPTConfig for a parameters file of ours: every size but the heads' count, which no
    tensor shows, read off the tensors; `heads` given, or the compiled shape's of that width."""
    blocks = {int(m.group(1)) for m in (re.match(r"h\.(\d+)\.", k) for k in ours) if m}
    vocab, width = ours["wte.weight"].shape
    if heads is None:
        known = [c["n_head"] for c in SHAPES.values() if c["n_embd"] == width]
        if not known:
            sys.exit(f"the model is {width} wide, a width no compiled shape has: give its heads (--n-head)")
        heads = known[0]
    return dict(block_size=ours["wpe.weight"].shape[0], vocab_size=vocab, n_layer=len(blocks), n_head=heads,
                n_embd=width, dropout=0.0, bias=True)


def nanogpt_model(torch, directory, config):
    sys.path.insert(0, directory)
    import model as nanogpt  # nanoGPT's model.py

    return nanogpt.GPT(nanogpt.GPTConfig(**config))


def check(args, torch, load_file, save_file):
    directory = args.nanogpt or os.environ.get("NANOGPT_DIR")
    if not directory or not os.path.exists(os.path.join(directory, "model.py")):
        print("gpt checkpoints with nanoGPT: skipped (give --nanogpt DIR or NANOGPT_DIR: a nanoGPT checkout)")
        return 0
    binary = os.path.join(args.bin_dir, "gpt")
    config = SHAPES[args.shape]
    shape_flags = ["--layers", str(config["n_layer"]), "--heads", str(config["n_head"]), "--width",
                   str(config["n_embd"]), "--vocab", str(config["vocab_size"])]
    work = tempfile.mkdtemp(prefix="nanogpt-")
    text = os.path.join(work, "text.txt")
    with open(__file__, encoding="utf-8") as f, open(text, "w", encoding="utf-8") as out:
        out.write(f.read())
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    def ours(out, steps, extra=()):
        cmd = [binary, "--text", text, "--steps", str(steps), "--batch", "4", "--report", "off", "--eval-every", "0",
               "--save-params", out, *shape_flags, *extra]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")

    # Initialisation: ours (one step at a rate that moves nothing) against a fresh nanoGPT GPT's,
    # tensor by tensor: the same spread (within 5%, a sample's error being under 1%), and the same
    # zero biases and unit gains.
    start = os.path.join(work, "start.safetensors")
    ours(start, 1, FROZEN)
    fresh, theirs = to_nanogpt(load_file(start)), nanogpt_model(torch, directory, config).state_dict()
    init_ok = True
    for name, value in sorted(fresh.items()):
        want = theirs[name]
        if bool((want == want.flatten()[0]).all()):  # zeros or ones (the step moved them by 1e-30 at most)
            same, shown = bool(torch.allclose(value, want, rtol=0, atol=1e-20)), f"all {float(want.flatten()[0]):g}"
        else:
            spread, wanted = float(value.std()), float(want.std())
            same, shown = abs(spread / wanted - 1) <= 0.05, f"spread {spread:.5f}, nanoGPT's {wanted:.5f}"
        if not same or name.endswith(("h.0.attn.c_proj.weight", "h.0.mlp.c_fc.weight", "wte.weight")):
            print(f"  init {name}: {shown}{'' if same else '  <- differs'}")
        init_ok &= same
    print(f"initialisation against nanoGPT's: {'the same' if init_ok else 'different'} for {len(fresh)} tensors")

    trained = os.path.join(work, "trained.safetensors")
    ours(trained, 5)
    mine = load_file(trained)
    model = nanogpt_model(torch, directory, config)
    model.load_state_dict(to_nanogpt(mine), strict=True)
    print(f"ours -> nanoGPT: {len(mine)} tensors loaded into nanoGPT's GPT with strict=True")
    # Back: nanoGPT's state dict into ours, as strict; one step at a rate that moves nothing.
    back = os.path.join(work, "from-nanogpt.safetensors")
    save_file(from_nanogpt(model.state_dict(), torch), back)
    again = os.path.join(work, "again.safetensors")
    ours(again, 1, ["--init-params", back, *FROZEN])
    round_trip = load_file(again)
    worst = max(float((round_trip[k] - v).abs().max()) for k, v in mine.items())
    print(f"nanoGPT -> ours: loaded with --init-params (strict); largest difference after the round trip {worst:.1e}")
    # The two GELUs: nanoGPT's logits on our parameters against the same model with ours.
    idx = torch.arange(config["block_size"]).remainder(config["vocab_size"]).unsqueeze(0)
    with torch.no_grad():
        exact, _ = model(idx, targets=idx)
        for block in model.transformer.h:
            block.mlp.gelu = torch.nn.GELU(approximate="tanh")
        tanh, _ = model(idx, targets=idx)
    print(f"logits, nanoGPT's exact GELU against our tanh GELU: largest difference "
          f"{float((exact - tanh).abs().max()):.1e}")
    return 0 if worst < 1e-6 and init_ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    to = sub.add_parser("to-nanogpt", help="our parameters file -> a nanoGPT checkpoint")
    to.add_argument("params")
    to.add_argument("checkpoint")
    to.add_argument("--n-head", type=int, help="its heads [default: those of the compiled shape of its width]")
    back = sub.add_parser("from-nanogpt", help="a nanoGPT checkpoint -> our parameters file")
    back.add_argument("checkpoint")
    back.add_argument("params")
    c = sub.add_parser("check", help="both ways with nanoGPT's own GPT class")
    c.add_argument("--nanogpt", help="a nanoGPT checkout (its model.py) [default: NANOGPT_DIR]")
    c.add_argument("--bin-dir", default=os.path.join(ROOT, "target", "release", "examples"))
    c.add_argument("--shape", choices=SHAPES, default="nano", help="the example's compiled shape [default: nano]")
    args = p.parse_args()
    try:
        import torch
        from safetensors.torch import load_file, save_file
    except ImportError:
        print("nanogpt.py needs torch and safetensors (pip install torch safetensors)")
        return 0 if args.command == "check" else 1
    if args.command == "check":
        return check(args, torch, load_file, save_file)
    if args.command == "to-nanogpt":
        ours = load_file(args.params)
        torch.save({"model": to_nanogpt(ours), "model_args": config_of(ours, args.n_head), "iter_num": 0,
                    "best_val_loss": 1e9, "config": {}}, args.checkpoint)
        return 0
    checkpoint = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    save_file(from_nanogpt(checkpoint.get("model", checkpoint), torch), args.params)
    return 0


if __name__ == "__main__":
    sys.exit(main())
