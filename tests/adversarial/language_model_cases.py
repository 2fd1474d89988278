"""Case 16 of the catalogue: language models. Texts, token shards, tokenizer files, prompts,
clipping and held-out losses that cannot work, each refused before step 1 with its reason."""


def language_model_cases(add):
    """Adds the language-model cases through `add(category, cmd, rc, msg, **kw)`."""
    c = "language-model"
    text = "python3 -c \"print('to be or not to be, ' * 30)\" > t.txt && "
    add(c, "gpt --clip-grad-norm 0", 2, "must be a finite number greater than 0, got 0")
    add(c, "gpt --clip-grad-norm none", 2, "a norm (a finite number greater than 0) or `off`")
    add(c, "gpt --eval-batches 0", 2, "must be at least 1")
    add(c, "gpt --dropout 1", 2, "must be at least 0 and less than 1 (the share of activations dropped), got 1")
    add(c, "gpt --dropout nan", 2, "got nan")
    add(c, "mlp --steps 2 --batch 4 --report off --dropout 0.2", 1, "--dropout 0.2: Mlp has no `Dropout` layer nor attention", forbid="step      1")
    add(c, "gpt --context 8", 1, "--context sets the length of --text or --tokens samples; neither is given")
    # 601 characters: 540 to train on, 61 held out, too few for a window of 64 and its next one.
    add(c, text + "gpt --text t.txt --steps 2 --batch 2", 1,
        "validation split (the last 61 characters) is too short for one sample of 64", forbid="step      1")
    add(c, text + "gpt --text t.txt --steps 2 --batch 2 --eval-every 0 --report off", 0)
    add(c, "printf 'xx' > x_train.bin && gpt --tokens x_train.bin", 1, "shorter than the 1024-byte header")
    add(c, text + "prepare --text t.txt --out shards && gpt --tokens shards --context 100", 1,
        "--context 100: Gpt's position embedding has rows for 64 positions")
    add(c, text + "prepare --text t.txt --out shards && gpt --tokens shards --context 16 --steps 2 --batch 2 "
           "--report off", 0)
    add(c, "prepare --text missing.txt --out shards", 1, "missing.txt")
    add(c, "printf '' > e.txt && prepare --text e.txt --out shards", 1, "empty: nothing to prepare")
    add(c, "printf 'caf\\351' > l.txt && prepare --text l.txt --out shards", 1, "not UTF-8 text (invalid at byte 3)")
    add(c, "gpt --steps 2", 1, "Gpt reads token ids: give it a text (--text FILE) or token shards (--tokens PATH)")
    # The compiled shapes: one not held, a number past usize, a flag left without its value.
    add(c, "gpt --layers 0", 2, "no model of `--layers 0 --heads 4 --width 128 --vocab 96` is compiled into this program")
    add(c, "gpt --width 99999999999999999999999", 2, "invalid value '99999999999999999999999' for '--width <N>'")
    add(c, "gpt --layers 6 --heads 6 --width", 2, "a value is required for '--width <N>'")
    add(c, "gpt --data /dev/null --steps 1", 1, "/dev/null: empty")
    add(c, "mlp --comm-only --steps 0", 1, "--steps 0 trains nothing")
    add(c, text + "gpt --text t.txt --steps 0 --sample 5", 1, "--steps 0 trains nothing")
    add(c, text + "prepare --text t.txt --out s --name a && prepare --text t.txt --out s2 --name b && "
           "mv s2/b_train_000000.bin s/ && gpt --tokens s --context 16 --eval-every 0", 1,
        'holds shards of 2 names ("a", "b")', forbid="step      1")
    # Inputs that never end: read up to a bound, or refused as what they are, never read until memory runs out.
    add(c, "gpt --text /dev/zero", 1, "/dev/zero: more than 1 GiB from a pipe or device", within=60)
    add(c, "ln -s /dev/zero z_train.bin && gpt --tokens z_train.bin", 1, "magic number 0", within=10)
    add(c, text + "gpt --text t.txt --init-params /dev/zero", 1, "--init-params /dev/zero: a character device, not a file",
        within=10)
    # A sample's prompt (--start): a character never trained on, an empty one, an endless file.
    short = "--context 16 --steps 2 --batch 2 --eval-every 0 --report off --sample 5"
    add(c, text + f"gpt --text t.txt {short} --start 'to bé'", 1, "character 5 of the prompt, 'é', is not among",
        forbid="step      1")
    add(c, text + f"gpt --text t.txt {short} --start ''", 1, "an empty prompt", forbid="step      1")
    add(c, text + f"gpt --text t.txt {short} --start FILE:/dev/zero", 1, "/dev/zero: more than 1 MiB", within=30,
        forbid="step      1")
    add(c, text + f"gpt --text t.txt {short} --start -", 1, "character 1 of the prompt, '-', is not among",
        forbid="step      1")
    # The prompt forgotten: the next flag is not sampled from.
    add(c, text + f"gpt --text t.txt {short} --start --no-overlap", 2,
        "--start needs a value, but `--no-overlap` after it is a flag", forbid="step      1")
    # llm.c's tokenizer file (--tokenizer): an endless one, one cut short, a shard in its place, a prompt it
    # cannot encode.
    shards = text + "prepare --text t.txt --out shards && "
    table = ("python3 -c \"import struct; open('tok.bin', 'wb').write(struct.pack('<256i', 20240328, 2, 96, 0, "
             "*[0] * 252) + b''.join(bytes([1, 65 + i % 26]) for i in range(96)))\" && ")
    add(c, shards + f"gpt --tokens shards {short} --tokenizer /dev/zero", 1, "/dev/zero: more than 64 MiB", within=30,
        forbid="step      1")
    add(c, shards + f"printf 'xx' > tok.bin && gpt --tokens shards {short} --tokenizer tok.bin", 1,
        "--tokenizer tok.bin: 2 bytes, shorter than the 1024-byte header", forbid="step      1")
    add(c, shards + f"gpt --tokens shards {short} --tokenizer shards/t_val_000000.bin", 1,
        "a token shard (magic 20240520), not a tokenizer file", forbid="step      1")
    add(c, shards + table + f"gpt --tokens shards {short} --tokenizer tok.bin", 1,
        "these token ids are characters, as shards/vocabulary.txt lists them", forbid="step      1")
    bare = "rm shards/vocabulary.txt && "
    add(c, shards + bare + table + f"gpt --tokens shards {short} --tokenizer tok.bin --start to", 1,
        "--start \"to\": byte 0x74 of \"to\" is no token of the tokenizer file", forbid="step      1")
    add(c, shards + bare + table + f"gpt --tokens shards {short} --tokenizer tok.bin --start ''", 1,
        "an empty prompt", forbid="step      1")
    # prepare --tokenizer: a table that cannot encode the text, or that is no table, names the file.
    add(c, text + table + "prepare --text t.txt --out shards --tokenizer tok.bin", 1,
        "t.txt: as --tokenizer's tokens: byte 0x74 of \"to\" is no token")
    add(c, text + "prepare --text t.txt --out shards --tokenizer /dev/zero", 1, "/dev/zero: more than 64 MiB",
        within=30)
    add(c, shards + "prepare --text t.txt --out gpt2 --tokenizer shards/t_val_000000.bin", 1,
        "a token shard (magic 20240520), not a tokenizer file")
    add(c, shards + bare + table + f"gpt --tokens shards {short} --tokenizer tok.bin", 0)
    # Standard input reaches rank 0 alone: the other ranks' empty copy is named as such.
    add(c, "python3 -c \"print('to be or not to be, ' * 30)\" | mpirun -n 2 gpt --text /dev/stdin --context 16 "
           "--steps 2 --batch 2 --eval-every 0 --report off", 1, "standard input reaches rank 0 alone", within=30)
    # A pipe is read as a file is.
    add(c, "python3 -c \"print('to be or not to be, ' * 30)\" | gpt --text /dev/stdin --context 16 --steps 2 --batch 2 "
           "--eval-every 0 --report off", 0)
