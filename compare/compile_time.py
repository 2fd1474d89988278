"""How long a release build of a deep model takes: a crate outside the repository, depending on it
by path, holding a GPT of width 768 and 12 heads with N blocks (the `gpt` example's block, unrolled
N times) and a `main` that trains it through the examples' command line, so that the generated
program is compiled for the host as a user's binary is. The dependencies are built once; each
depth is then timed as a rebuild of that crate alone, the median of `--rounds`.

    python3 compare/compile_time.py                       # 12, 24 and 48 blocks
    python3 compare/compile_time.py --blocks 96 --rounds 1
    python3 compare/compile_time.py --base ../before      # another checkout beside this one, alternating
    python3 compare/compile_time.py --codegen-units 1     # the release profile's setting, for every crate
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import jobs

MODEL = """#[overlap::distributed_model(bucket_cap_mb = 0.5, first_bucket_mb = 0.5)]
pub mod gpt {{
    use overlap::prelude::*;
    #[residual]
    pub struct Attend {{ ln_1: LayerNorm<768>, attn: CausalSelfAttention<768, 12> }}
    #[residual]
    pub struct Mlp {{ ln_2: LayerNorm<768>, c_fc: Linear<768, 3072>, gelu: Gelu, c_proj: Linear<3072, 768> }}
    pub struct Block {{ attend: Attend, mlp: Mlp }}
    pub struct Gpt {{
        wte: Embedding<96, 768>,
        wpe: PositionEmbedding<64, 768>,
        h: [Block; {blocks}],
        ln_f: LayerNorm<768>,
        #[tied(wte)]
        lm_head: TiedHead<768, 96>,
    }}
}}
"""

MAIN = """#[path = "../gpt{blocks}.rs"]
mod model;
fn main() -> std::process::ExitCode {{
    overlap_cli::main_with_defaults::<model::gpt::Gpt>(&overlap_cli::ExampleDefaults {{ about: "", flags: &[] }})
}}
"""


def make_crate(checkout, blocks, into):
    """A crate in `into` with one binary per depth, depending on `checkout`."""
    os.makedirs(os.path.join(into, "src", "bin"), exist_ok=True)
    with open(os.path.join(into, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "deep"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n'
                f'overlap = {{ path = "{checkout}" }}\noverlap-cli = {{ path = "{checkout}/cli" }}\n')
    # The repository's own build settings (the host's vector units), as its examples get them.
    config = os.path.join(checkout, ".cargo")
    if os.path.isdir(config):
        shutil.copytree(config, os.path.join(into, ".cargo"), dirs_exist_ok=True)
    for n in blocks:
        with open(os.path.join(into, "src", f"gpt{n}.rs"), "w") as f:
            f.write(MODEL.format(blocks=n))
        with open(os.path.join(into, "src", "bin", f"gpt{n}.rs"), "w") as f:
            f.write(MAIN.format(blocks=n))


# `--codegen-units`, as cargo's environment sets it (empty: the profile's default).
CARGO_ENV = dict(jobs.ENV)


def cargo(crate, *args):
    cmd = ["cargo", "build", "--release", "--quiet", *args]
    done = subprocess.run(cmd, cwd=crate, env=dict(CARGO_ENV, CARGO_TARGET_DIR=os.path.join(crate, "target")),
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} in {crate} failed:\n{done.stderr[-4000:]}")


def build_seconds(crate, blocks):
    """A rebuild of the depth's binary: its model source touched, the dependencies already built."""
    os.utime(os.path.join(crate, "src", f"gpt{blocks}.rs"))
    start = time.monotonic()
    cargo(crate, "--bin", f"gpt{blocks}")
    return time.monotonic() - start


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=int, nargs="+", default=[12, 24, 48], help="depths to build")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--base", help="another checkout of the repository, timed alternately with this one")
    p.add_argument("--codegen-units", type=int, help="the release profile's codegen-units (default: cargo's, 16)")
    args = p.parse_args()
    if args.codegen_units:
        CARGO_ENV["CARGO_PROFILE_RELEASE_CODEGEN_UNITS"] = str(args.codegen_units)
    checkouts = {"this": jobs.ROOT}
    if args.base:
        base = os.path.abspath(args.base)
        if not os.path.isfile(os.path.join(base, "Cargo.toml")):
            sys.exit(f"{args.base}: not a checkout of the repository")
        checkouts = {"base": base, **checkouts}
    with tempfile.TemporaryDirectory(prefix="overlap-compile-time-") as scratch:
        crates = {}
        for name, checkout in checkouts.items():
            crates[name] = os.path.join(scratch, name)
            make_crate(checkout, args.blocks, crates[name])
            print(f"building the dependencies of {name} ({checkout}) ...", flush=True)
            cargo(crates[name], "--bin", f"gpt{min(args.blocks)}")
        units = f", codegen-units {args.codegen_units}" if args.codegen_units else ""
        print(f"release build of a GPT of width 768 (12 heads), one binary per depth{units}; medians of {args.rounds}")
        print(f"{'blocks':>6}  " + "  ".join(f"{name:>8}" for name in crates) + ("  this / base" if args.base else ""))
        for n in args.blocks:
            times = {name: [] for name in crates}
            for r in range(args.rounds):
                # Alternate which goes first, so that neither always builds on a warmer machine.
                for name in (list(crates) if r % 2 == 0 else list(reversed(crates))):
                    times[name].append(build_seconds(crates[name], n))
            medians = {name: statistics.median(t) for name, t in times.items()}
            ratio = f"  {medians['this'] / medians['base']:>11.2f}" if args.base else ""
            print(f"{n:>6}  " + "  ".join(f"{medians[name]:>7.1f}s" for name in crates) + ratio, flush=True)


if __name__ == "__main__":
    main()
