#!/usr/bin/env python3
"""GPT-2's tokens from llm.c's tokenizer file (`prepare --tokenizer`) against tiktoken's, on three
texts: the licenses a Debian system ships with this repository's docs, 200 K random characters of
many scripts, and a million letters in one word. Every token must be the same; the times are
`prepare`'s whole run (reading, encoding, writing the shards) against tiktoken's `encode` alone,
the best of 3 each.

Needs `make gpt2-tokenizer` (whose `vocab.bpe` and `encoder.json` tiktoken reads here, checked
against the hashes its own `gpt2` encoding expects), `cargo build --release --examples`, and
tiktoken (prints "skipped" without).
"""

import argparse
import glob
import os
import random
import subprocess
import sys
import tempfile
import time

import jobs
from gpt_model import read_shard, shard_paths

END_OF_TEXT = "<|endoftext|>"
GPT2_DIR = os.path.join(jobs.ROOT, ".tools", "gpt2")


def tiktoken_gpt2(vocab_dir):
    """tiktoken's `gpt2` encoding, its files read from `vocab_dir` instead of fetched."""
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext import openai_public

    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(vocab_dir, "vocab.bpe"),
        encoder_json_file=os.path.join(vocab_dir, "encoder.json"),
        vocab_bpe_hash="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
        encoder_json_hash="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    )
    spec = {"name": "gpt2", "explicit_n_vocab": 50257, "pat_str": openai_public.r50k_pat_str}
    return tiktoken.Encoding(**spec, mergeable_ranks=ranks, special_tokens={END_OF_TEXT: 50256})


def texts():
    """The three texts, by name."""
    docs = sorted(glob.glob(os.path.join(jobs.ROOT, "docs", "*.md")))
    documents = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")) + docs:
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                documents.append(f.read())
    rng = random.Random(5)
    ranges = [(32, 127), (0xA0, 0x2FFF), (0x3000, 0x9FFF), (0x1F300, 0x1FAFF)]
    special = [10, 32, 9, 0x200D, 0x301]

    def character():
        if rng.random() < 0.2:
            return chr(rng.choice(special))
        low, high = rng.choice(ranges)
        return chr(rng.randrange(low, high))

    return {
        "licenses and docs": "".join(documents),
        "random characters": "".join(character() for _ in range(200_000)),
        "one long word": "a" * 1_000_000 + " " + "xyz" * 300_000,
    }


def read_shards(folder):
    """The tokens of a folder's shards, training ones first."""
    paths = shard_paths(folder, "train") + shard_paths(folder, "val")
    return [token for path in paths for token in read_shard(path)]


def best_of(runs, action):
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return min(times), result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(jobs.ROOT, "target", "release", "examples"))
    args = p.parse_args()
    try:
        enc = tiktoken_gpt2(GPT2_DIR)
    except ImportError:
        print("GPT-2's tokens against tiktoken: skipped (tiktoken is not importable)")
        return 0
    table = os.path.join(GPT2_DIR, "gpt2_tokenizer.bin")
    if not os.path.exists(table):
        sys.exit(f"{table} is missing: run `make gpt2-tokenizer`")
    failures = []
    work = tempfile.mkdtemp(prefix="tokenizer-")
    print(f"GPT-2's tokens, `prepare --tokenizer` against tiktoken {enc.name} (tiktoken's encode alone)")
    for name, text in texts().items():
        path = os.path.join(work, name.replace(" ", "-") + ".txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        with open(path, encoding="utf-8") as f:  # as prepare reads it: Python's newlines
            read = f.read()
        theirs_s, theirs = best_of(3, lambda: enc.encode(read, allowed_special={END_OF_TEXT}))
        folders = iter(range(3))

        def prepare():
            out = os.path.join(work, f"{name.replace(' ', '-')}-{next(folders)}")
            cmd = [os.path.join(args.bin_dir, "prepare"), "--text", path, "--out", out, "--tokenizer", table]
            subprocess.run(cmd, check=True, capture_output=True, env=jobs.ENV)
            return out

        ours_s, out = best_of(3, prepare)
        ours = read_shards(out)
        expected = [enc.eot_token] + theirs
        same = ours == expected
        print(f"  {name}: {len(read)} characters, {len(expected)} tokens, "
              f"{'the same' if same else 'NOT the same'}; prepare {ours_s:.3f} s, tiktoken {theirs_s:.3f} s")
        if not same:
            at = next((i for i, (a, b) in enumerate(zip(ours, expected)) if a != b), min(len(ours), len(expected)))
            failures.append(f"{name}: the tokens part at {at}: {ours[at:at + 5]} against {expected[at:at + 5]}")
    return jobs.verdict(failures)


if __name__ == "__main__":
    sys.exit(main())
