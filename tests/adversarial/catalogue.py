"""The catalogue of adversarial cases, by category: flags, data files, checkpoints, models,
closed pipes, signals, MPI ranks. Each states its command, its setup and what it expects."""

import os
import shutil
import signal
import struct
from pathlib import Path

from fixtures import (Fixtures, a_checkpoint, both, checks, ck, damaged, edit_state, edit_tensors, files_exist,
                      help_default, holds, idx, idx_bytes, latest_is, mkdir, no_progress_board_left,
                      no_torn_checkpoint, recorded, starts_with, symlink, write, write_idx)
from harness import LONG, Case, Signal
from language_model_cases import language_model_cases

# Short forms used below.
RUN = "--steps 2 --batch 4 --report off"  # a short run that trains
LOOP = "--steps 100000 --batch 4 --log-every 1 --report off"  # runs until stopped
ADDR = "needs more memory than any machine can address"
UNEXPECTED = "unexpected argument"


def catalogue() -> list:
    cases = []

    def add(category, cmd, rc, msg="", **kw):
        cases.append(Case(category, cmd, rc, msg, **kw))

    # 1. A closed stdout (or stderr) stops the printing, not the run.
    c = "closed-stdout"
    add(c, "mlp --steps 40 --batch 4 --log-every 1 --save ck --save-every 20 --save-params p.st | head -2", 0,
        survive=checks(latest_is("step-00000040"), files_exist("p.st")))
    add(c, "mlp --print-schedule | head -1", 0)
    add(c, "mlp --steps 3 --batch 4 --report json --save-params p.st | head -1", 0, survive=files_exist("p.st"))
    add(c, "mlp --steps 3 --batch 4 --log-every 1 --save-params p.st >&-", 0, survive=files_exist("p.st"))
    add(c, "mlp --steps 3 --batch 4 --log-every 1 --save-params p.st > /dev/full", 0, survive=files_exist("p.st"))
    # --report json sends the log lines to stderr: here stderr is the pipe that closes.
    add(c, "mlp --steps 20 --batch 4 --log-every 1 --report json --save-params p.st 2>&1 >/dev/null | head -1", 0,
        survive=files_exist("p.st"))
    # OpenMPI's mpirun aborts the whole job once writing to its closed stdout fails (no MCA
    # parameter changes that; the README says so): the ranks never see the closed pipe.
    add(c, "mpirun -n 2 mlp --steps 20 --batch 4 --log-every 1 --save ck --save-params p.st | head -2", 0,
        survive=checks(latest_is("step-00000020"), files_exist("p.st")),
        documented=("SIGPIPE detected", "mpirun aborts on SIGPIPE (documented)"))
    # What the README recommends instead: the ranks' output in files, none through mpirun's stdout.
    add(c, "mpirun -n 2 --output-filename logs:nocopy mlp --steps 20 --batch 4 --log-every 1 --save ck "
           "--save-params p.st | head -2", 0, survive=checks(latest_is("step-00000020"), files_exist("p.st")))

    # 2. A checkpoint folder holding another run's checkpoints.
    c = "foreign-ck"
    add(c, f"mlp {RUN} --seed 1 --save ck", 1, "holds another run's checkpoints (latest, step-00000002)",
        setup=ck(), survive=latest_is("step-00000002"))
    add(c, f"mlp {RUN} --seed 1 --save ck --overwrite", 0, setup=ck(), survive=latest_is("step-00000002"))
    add(c, "mlp --steps 4 --batch 4 --report off --save ck --resume ck", 0, "resumed from ck at step 2",
        setup=ck(), survive=latest_is("step-00000004"))
    add(c, f"mlp {RUN} --save ck", 1, "holds another run's checkpoints (latest)",
        setup=write("ck/latest", b"step-00000002\n"))
    add(c, f"mlp {RUN} --save ck", 0, setup=write("ck/notes.txt", b"the run's notes\n"),
        survive=latest_is("step-00000002"))
    add(c, "mlp --steps 2 --batch 4 --report off --resume ck", 1, "the checkpoint is at step 2", setup=ck())

    # 3. Output paths that cannot be written, even by root: refused before step 1, naming the path.
    c = "output-path"
    in_file = write("f", b"a regular file\n")
    for flag, path in [("--save-params", "f/p.st"), ("--trace", "f/t.json"), ("--timeline", "f/t.svg"),
                       ("--write-profile", "f/p.json"), ("--save", "f"), ("--save-params", "/proc/x.st")]:
        add(c, f"mlp --steps 3 --batch 4 --log-every 1 {flag} {path}", 1, path, forbid="step      1",
            setup=in_file, within=20)
    add(c, "mlp --steps 3 --batch 4 --log-every 1 --save-params .", 1, "is a folder; give a file name",
        forbid="step      1")
    add(c, "mlp --steps 3 --batch 4 --log-every 1 --save ck", 1, "ck", setup=symlink("ck", "nowhere"),
        forbid="step      1")
    add(c, f"mlp --steps 3 --batch 4 --log-every 1 --save-params {LONG}.st", 1, "File name too long",
        forbid="step      1")

    # Disk full, without root: /dev/full behind a symlink (writes fail with ENOSPC), and
    # RLIMIT_FSIZE with SIGXFSZ ignored (writes past 1 MiB fail with EFBIG).
    c = "disk-full"
    full = symlink("out", "/dev/full")
    add(c, "mlp --steps 2 --batch 4 --save-params out", 1, "No space left on device", setup=full)
    add(c, "mlp --steps 2 --batch 4 --trace out", 1, "No space left on device", setup=full)
    add(c, "trap '' XFSZ; ulimit -f 1024; mlp --steps 2 --batch 4 --save ck", 1, "File too large",
        survive=no_torn_checkpoint())
    add(c, "trap '' XFSZ; ulimit -f 1024; mlp --steps 2 --batch 4 --save-params p.st", 1, "File too large")

    # 4. Sizes, zeros, negatives, non-numbers.
    c = "size"
    add(c, "mlp --steps 18446744073709551615 --batch 4 --log-every 1 --report off", 143, "stopped by SIGTERM",
        signals=[Signal(signal.SIGTERM, "step      1/")])
    add(c, "mlp --steps 1000000000000 --batch 4 --log-every 1 --report off", 130, "stopped by SIGINT",
        signals=[Signal(signal.SIGINT, "step      1/")])
    add(c, "mlp --steps 18446744073709551616", 2, "--steps")
    add(c, "mlp --batch 18446744073709551615 --steps 1", 1, ADDR)
    add(c, "mlp --batch 2305843009213693952 --steps 1", 1, ADDR)
    add(c, "mlp --batch 1000000 --steps 1", 1, "GiB available")
    add(c, "mlp --accumulate 9223372036854775807 --steps 1 --batch 4", 1, "--accumulate", within=30)
    add(c, "mlp --steps 1000000000000 --batch 4 --report-every 1000000000000 --trace t.json", 1, "--report-every",
        within=30)
    for flag in ["--batch", "--threads"]:
        add(c, f"mlp {flag} 0", 2, flag)
    # Zero steps is a run that only samples (`--sample N` from `--init-params`): refused without.
    add(c, "mlp --steps 0", 1, "--steps 0 trains nothing")
    add(c, "mlp --save ck --save-every 0", 2, "--save-every")
    add(c, "mlp --batch -1", 2, "must be a whole number of at least 1")
    add(c, "mlp --steps -1", 2, "invalid value '-1' for '--steps")
    add(c, "mlp --steps 1.5", 2, "must be a whole number")
    # A value forgotten: the next flag is not taken for it.
    add(c, "mlp --steps --report off", 2, "--steps needs a value, but `--report` after it is a flag")
    add(c, "mlp --lr --no-overlap --steps 1", 2, "--lr needs a value, but `--no-overlap` after it is a flag")
    add(c, "mlp --timeline step.png --steps 1", 2, "give a file name ending in .svg (or without an extension)")
    add(c, "mlp --batch abc", 2, "--batch")

    # Learning rates and optimizer settings (there are no --beta flags: AdamW uses PyTorch's).
    c = "optimizer"
    for v in ["nan", "inf", "-1"]:
        add(c, f"mlp --lr {v}", 2, "--lr")
    add(c, "mlp --momentum -0.5", 2, "--momentum")
    add(c, "mlp --weight-decay -inf", 2, "--weight-decay")
    add(c, "mlp --optimizer lbfgs", 2, "--optimizer")
    add(c, "mlp --beta1 1 --optimizer adamw", 2, "must be at least 0 and less than 1")
    add(c, "mlp --beta1 -inf --optimizer adamw", 2, "must be at least 0 and less than 1")
    # The parameters overflow in step 1's update: step 2's loss is the first non-finite value.
    add(c, "mlp --steps 3 --batch 4 --lr 1e30 --check-finite", 1, "the loss is NaN at step 2")

    # 5. Hangs: rank 1 stopped with SIGSTOP at step 3; the waiting ranks give up after the
    # --comm-timeout and name it. Without the flag the bound is 10 minutes (`mlp --help` says so),
    # longer than a case: the stopped-rank cases give a short one.
    c = "hang"
    stop = [Signal(signal.SIGSTOP, "step      3/", to="rank1")]
    add(c, f"mpirun -n 2 mlp {LOOP} --comm-timeout 5s", 1, "was not reduced within 5s", signals=stop, timeout=40,
        within=30)
    # Over MPI the step's loss sum and the stop vote queue on the same thread as the all-reduces:
    # which wait gives up first depends on where rank 1 stopped; each names it as stopped.
    add(c, f"mpirun -n 2 mlp {LOOP} --all-reduce mpi --comm-timeout 5s", 1, "its process is stopped by a signal",
        signals=stop, timeout=40, within=30)
    add(c, f"mpirun -n 2 mlp {LOOP} --no-overlap --comm-timeout 5s", 1, "within 5s", signals=stop, timeout=40,
        within=30)
    # Rank 0 stopped while it writes a checkpoint: rank 1 waits for it after the save.
    add(c, f"mpirun -n 2 mlp {LOOP} --save ck --save-every 1 --comm-timeout 5s", 1, "rank 0", timeout=40,
        signals=[Signal(signal.SIGSTOP, file="ck/step-00000003/model.safetensors", to="rank0")], within=30)
    # A rank killed in start-up: mpirun ends the others before they can clean up; nothing of the
    # job may stay in /dev/shm.
    add(c, f"mpirun -n 3 mlp {LOOP}", 137, signals=[Signal(signal.SIGKILL, delay=0.15, to="rank1")],
        survive=no_progress_board_left, within=20)
    add(c, "mlp --help", 0, check=help_default("--comm-timeout", "10m"))
    add(c, f"mlp {RUN} --comm-timeout off", 0)
    add(c, "mlp --comm-timeout 60", 2, "needs a unit")
    add(c, "mlp --comm-timeout 1us", 2, "`us` is not a unit taken here (ms, s, m or h)")
    add(c, "mlp --comm-timeout 0s", 2, "must be a positive time")
    add(c, "mlp --comm-timeout 99999999999999999999h", 2, "too long")
    add(c, "mpirun -n 2 mlp --steps 2 --batch 4 --report off --comm-timeout 18000000000000000000s", 2, "too long")
    add(c, "mpirun -n 2 mlp --steps 2 --batch 4 --report off --link latency=1e20s", 2,
        "latency `1e20s` is too long: at most 1 hour", within=30)

    # 6. A short --comm-timeout while rank 0 writes large checkpoints and output files. (1 s: 300 ms
    # was shorter than two debug ranks' start-up on a busy machine. A write that outlasts the
    # timeout is tests/failures/'s, with a slow write injected.)
    c = "save+timeout"
    add(c, "mpirun -n 2 mlp --steps 3 --batch 4 --report off --save ck --save-every 1 --comm-timeout 1s", 0,
        survive=latest_is("step-00000003"))
    add(c, "mpirun -n 2 mlp --steps 3 --batch 4 --report off --save ck --save-every 1 --comm-timeout 1s "
           "--all-reduce mpi", 0, survive=latest_is("step-00000003"))
    add(c, "mpirun -n 2 mlp --steps 3 --batch 4 --save-params p.st --trace t.json --timeline t.svg "
           "--write-profile w.json --comm-timeout 1s", 0,
        survive=files_exist("p.st", "t.json", "t.svg", "w.json"))

    # 7. --comm-only trains nothing: flags about training are refused, as are contradictions.
    c = "comm-only"
    add(c, "mlp --comm-only --steps 1 --save ck", 1, "nothing to do with --save")
    add(c, "mlp --comm-only --steps 1 --data data", 1, "nothing to do with --data")
    add(c, "mlp --comm-only --steps 1 --save ck --save-params p.st --resume ck --data data", 1,
        "nothing to do with --save, --save-params, --resume, --data")
    add(c, "mlp --comm-only --compute-only", 2, "cannot be used with")
    add(c, "mlp --comm-only --steps 1 --lr 0.1 --eval-every 2 --write-profile p.json", 1,
        "nothing to do with --lr, --eval-every, --write-profile")
    add(c, "mlp --comm-only --steps 18446744073709551615 --trace t.json", 1, "trace a shorter run")

    # 7b. Ranks given other settings: every rank names the flags that differ, before step 1.
    c = "rank-settings"
    add(c, "mpirun -n 1 mlp --steps 3 --batch 4 --report off : -n 1 mlp --steps 4 --batch 4 --report off", 1,
        "--steps (rank(s) 1; this rank's: ", within=30)
    add(c, "mpirun -n 1 mlp --steps 3 --batch 4 --report off : -n 1 mlp --steps 3 --batch 4 --report text", 1,
        "--report (rank(s) 1; this rank's: ", within=30)
    add(c, "mpirun -n 1 mlp --steps 3 --batch 4 --report off : -n 1 mlp --steps 3 --batch 4 --report off --save ck",
        1, "--save (rank(s) 1; this rank's: ", within=30)
    sampled = "gpt --text t.txt --context 8 --batch 2 --steps 1 --eval-every 0 --report off --sample 5"
    add(c, f"mpirun -n 1 {sampled} : -n 1 {sampled} --temperature 2", 1, "--temperature (rank(s) 1; this rank's: ",
        within=30, setup=write("t.txt", b"to be or not to be, " * 30))
    add(c, f"mlp {RUN} --optimizer adamw --lr 1e-5 --lr-schedule cosine:warmup=1,until=5,min=1e-4", 1,
        "its minimum rate 1e-4 is above the learning rate 1e-5")
    add(c, "prepare --text one.txt --out shards", 1, "cannot make one training sample",
        setup=write("one.txt", b"x"))
    add(c, "prepare --text t.txt --out shards --name ../escape", 1, "give a plain name",
        setup=write("t.txt", b"to be or not to be, that is the question"))
    add(c, "mlp --no-overlap --compute-only", 2, "cannot be used with")

    # 8. Resuming another run: warnings for a changed run, refusals for another model or optimizer.
    c = "resume"
    r = "--steps 3 --batch 4 --report off --resume ck --save ck"
    add(c, f"mlp {r} --seed 5", 0, "warning: resuming with other data", setup=ck(),
        survive=latest_is("step-00000003"))
    add(c, "mlp --steps 3 --batch 8 --report off --resume ck --save ck", 0,
        "warning: resuming with another global batch: 4 samples per step before, 8 now", setup=ck())
    add(c, f"mpirun -n 2 mlp {r}", 0, "warning: resuming with another global batch", setup=ck())
    add(c, f"mlp {r} --data data", 0, "warning: resuming with other data", setup=both(ck(), idx()))
    add(c, "mlp --steps 4 --batch 4 --report off --resume ck", 1,
        "this is a checkpoint of `Tower`; this run trains `Mlp`", setup=ck("tower"))
    add(c, "custom_layer --steps 4 --batch 4 --report off --resume ck", 1,
        "this is a checkpoint of `Mlp`; this run trains `Classifier`", setup=ck("mlp"))
    add(c, "mlp --steps 4 --batch 4 --optimizer adamw --resume ck", 1, "optimizer `sgd`, this run uses `adamw`",
        setup=ck())
    add(c, "mlp --steps 4 --batch 4 --resume nowhere", 1, "no checkpoint in nowhere")

    # 9. SIGTERM / SIGINT mid-run: a checkpoint, and 128 + signal; a second signal ends at once.
    c = "signal"
    add(c, f"mlp {LOOP} --save ck", 143, "stopped by SIGTERM after step",
        signals=[Signal(signal.SIGTERM, "step      3/")], survive=a_checkpoint())
    add(c, f"mlp {LOOP} --save ck", 130, "stopped by SIGINT after step",
        signals=[Signal(signal.SIGINT, "step      3/")], survive=a_checkpoint())
    add(c, f"mlp {LOOP}", 143, "no checkpoint (the run does not save)",
        signals=[Signal(signal.SIGTERM, "step      2/")])
    add(c, f"mlp {LOOP} --save ck", 143,
        signals=[Signal(signal.SIGTERM, "step      3/"), Signal(signal.SIGTERM, delay=0.2)], within=5)
    # The signal lands in the last step: the run has reached --steps, so it ends as a finished run.
    add(c, "mlp --steps 3 --batch 4 --log-every 1 --report off --save ck --save-params p.st", 0,
        signals=[Signal(signal.SIGTERM, "step      3/")], survive=checks(latest_is("step-00000003"),
                                                                          files_exist("p.st")))
    # mpirun forwards SIGTERM to the ranks (which exit 143) and then reports 1 itself; the README
    # asks for a longer odls_base_sigkill_timeout than OpenMPI's 1 s so that rank 0 can save.
    add(c, f"mpirun --mca odls_base_sigkill_timeout 3 -n 2 mlp {LOOP} --save ck", 1,
        "stopped by SIGTERM after step", signals=[Signal(signal.SIGTERM, "step      3/")], survive=a_checkpoint())
    # Two SIGINTs 0.1 s apart end mpirun at once, before it passes anything on; the ranks get
    # SIGHUP from the kernel as their launcher dies and stop with a checkpoint, silently.
    add(c, f"mpirun -n 3 custom_layer {LOOP} --save ck", 1, survive=a_checkpoint(),
        signals=[Signal(signal.SIGINT, "step      3/"), Signal(signal.SIGINT, delay=0.1)], within=5)

    # 10. Two jobs saving into one folder at once: the second fails at once, naming the first.
    c = "lock"
    first = "mlp --steps 100000 --batch 4 --log-every 100000 --report off --save ck"
    add(c, f"mlp {RUN} --save ck --overwrite", 1, "is in use by another run (process", background=first,
        background_ready=("ck/.lock", "process"), within=20)
    add(c, "mlp --steps 4 --batch 4 --report off --save ck --resume ck", 1, "is in use by another run (process",
        background=first, background_ready=("ck/.lock", "process"), within=20)

    # 11. Dangling and missing things, and devices this machine lacks.
    c = "missing"
    add(c, "mlp --steps 4 --batch 4 --resume ck", 1, "`latest` names step-00000002, which is missing",
        setup=damaged(shutil.rmtree))
    add(c, "mlp --steps 4 --batch 4 --resume ck", 1, "is not a checkpoint directory name",
        setup=both(ck(), write("ck/latest", b"../elsewhere")))
    add(c, "mlp --steps 1 --data nowhere", 1, "IDX folder nowhere: no such folder")
    add(c, "mlp --steps 1 --data d", 1, "no train images file", setup=mkdir("d"))
    add(c, "mlp --steps 1 --gpu 0", 1, "--gpu chooses a GPU for --device cuda")
    add(c, "mlp --steps 1 --device cuda", 1, "--features cuda")
    add(c, "mlp --cuda-libraries", 1, "--features cuda")

    # 12. Bad IDX data files.
    c = "idx"
    img, lab = idx_bytes()
    n_img = lambda data: idx(images=data)  # noqa: E731
    n_lab = lambda data: idx(labels=data)  # noqa: E731
    d = "mlp --steps 1 --batch 4 --data data"
    add(c, d, 1, "truncated: expected 15680 bytes of data", setup=n_img(img[: len(img) - 100]))
    add(c, d, 1, "truncated header", setup=n_img(b""))
    add(c, d, 1, "bad magic number 0x12340803", setup=n_img(b"\x12\x34" + img[2:]))
    add(c, d, 1, "unsupported data type byte 0x0d", setup=n_img(img[:2] + b"\x0d" + img[3:]))
    add(c, d, 1, "declares 1 dimension(s), expected 3", setup=n_img(img[:3] + b"\x01" + img[4:]))
    add(c, d, 1, "trailing byte(s)", setup=n_img(img + b"\x00\x00\x00"))
    add(c, d, 1, "holds 20 images but", setup=n_lab(lab[:4] + struct.pack(">I", 19) + lab[8:-1]))
    add(c, d, 1, "label 42 at index 3 is out of range for 10 classes", setup=n_lab(lab[:11] + b"\x2a" + lab[12:]))
    add(c, d, 1, "truncated: expected",
        setup=n_img(img[:4] + struct.pack(">III", 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF) + img[16:]))
    add(c, d, 1, "images have 64 pixels, the model's first layer takes 784 inputs", setup=idx(side=8))
    add(c, d, 1, "train-images-idx3-ubyte: a folder, not a file",
        setup=both(mkdir("data/train-images-idx3-ubyte"), write("data/train-labels-idx1-ubyte", lab)))
    # Something other than a file where a file was looked for: named as what it is, at once.
    def fifo(rel: str):
        def setup(d: Path, fx: Fixtures):
            os.mkfifo(d / rel)

        return setup

    labels_there = write("data/train-labels-idx1-ubyte", lab)
    add(c, d, 1, "a FIFO (named pipe), not a file", setup=both(mkdir("data"), fifo("data/train-images-idx3-ubyte"),
                                                                labels_there), within=10)
    add(c, d, 1, "a character device, not a file",
        setup=both(mkdir("data"), symlink("data/train-images-idx3-ubyte", "/dev/zero"), labels_there), within=10)
    add(c, d, 1, "a loop of symbolic links, not a file",
        setup=both(mkdir("data"), symlink("data/train-images-idx3-ubyte", "train-images-idx3-ubyte"), labels_there))

    # A 4 GiB sparse labels file declaring 20 labels: refused from its length, not read through.
    def sparse_labels(d: Path, fx: Fixtures):
        write_idx(d / "data")
        with open(d / "data/train-labels-idx1-ubyte", "r+b") as f:
            f.truncate(4 << 30)

    add(c, d, 1, "trailing byte(s) after the 20 bytes of data", setup=sparse_labels, within=5)
    add(c, d, 1, "no train labels file", setup=write("data/train-images-idx3-ubyte", img))

    # Damaged checkpoints (changes to a tensor file are recorded in state.json, so that only the
    # change itself is wrong).
    c = "damaged-ck"
    rk = "mlp --steps 4 --batch 4 --report off --resume ck"

    def truncate(name):
        def change(step):
            data = (step / name).read_bytes()
            (step / name).write_bytes(data[: len(data) // 2])

        return change

    def flip(step):
        p = step / "optimizer.safetensors"
        data = bytearray(p.read_bytes())
        data[len(data) // 2] ^= 0x40
        p.write_bytes(bytes(data))

    def huge_header(step):
        p = step / "model.safetensors"
        p.write_bytes(struct.pack("<Q", 2**64 - 1) + p.read_bytes()[8:])
        recorded(step, "model.safetensors")

    def retype(ts):
        return [(n, "I32" if n == "fc1.bias" else t, s, b) for n, t, s, b in ts]

    def reshape(ts):
        return [(n, t, [1024, 2] if n == "fc1.bias" else s, b) for n, t, s, b in ts]

    add(c, rk, 1, "model.safetensors: truncated", setup=damaged(truncate("model.safetensors")))
    add(c, rk, 1, "optimizer.safetensors: corrupted: CRC-32", setup=damaged(flip))
    add(c, rk, 1, "not a valid checkpoint state file", setup=damaged(truncate("state.json")))
    add(c, rk, 1, "model.safetensors: No such file or directory",
        setup=damaged(lambda s: (s / "model.safetensors").unlink()))
    add(c, rk, 1, "this build reads `overlap-checkpoint/1`",
        setup=damaged(edit_state(lambda s: s.update(format="overlap-checkpoint/9"))))
    add(c, rk, 1, "`fc1.bias` is I32, the model expects F32", setup=damaged(edit_tensors("model.safetensors", retype)))
    add(c, rk, 1, "`fc1.bias` has shape [1024, 2], the model expects [2048]",
        setup=damaged(edit_tensors("model.safetensors", reshape)))
    add(c, rk, 1, "unexpected tensor `momentum_buffer.fc9.bias` [2048]", setup=damaged(edit_tensors(
        "optimizer.safetensors", lambda ts: ts + [("momentum_buffer.fc9.bias", "F32", [2048], bytes(8192))])))
    add(c, rk, 1, "not a valid safetensors file", setup=damaged(huge_header))
    add(c, rk, 1, "state.json: edited or damaged",
        setup=damaged(edit_state(lambda s: s["position"].update(samples_seen=2**64 - 1))))
    add(c, rk, 1, "state.json: edited or damaged", setup=damaged(edit_state(lambda s: s.update(optimizer_step=7))))

    # Unknown and conflicting flags, bad specs.
    c = "flags"
    add(c, "mlp --frobnicate", 2, UNEXPECTED)
    for spec, why in [("infiniband", "unknown link `infiniband`"), ("latency=5", "needs a unit"),
                      ("bandwidth=0GB/s", "must be greater than 0")]:
        add(c, f"mlp --link {spec}", 2, why)
    add(c, "mlp --threads 100 --steps 1 --batch 4 --report off", 0, "note: 100 threads for the products, but this process may run on only")
    add(c, "mlp --threads 100000 --steps 1 --batch 4 --report off", 2, "must be at most 4096")
    add(c, "mlp --simulate world=0,link=ib-hdr", 2, "world `0` must be a whole number from 1 to 16777216")
    add(c, "mlp --steps 2 --batch 4 --simulate world=64,link=latency=1e300s", 2, "too long")

    # Found by the second adversarial pass: outputs that would destroy a file or each other.
    c = "outputs"
    add(c, f"mlp {RUN} --save ck", 1, ".lock is a symbolic link", forbid="step      1",
        setup=both(write("precious.txt", b"keep me\n"), mkdir("ck"), symlink("ck/.lock", "../precious.txt")),
        survive=holds("precious.txt", b"keep me\n"))
    add(c, f"mlp {RUN} --save ck --save-params ck/latest", 1, "is in the checkpoint folder", forbid="step      1")
    add(c, f"mlp {RUN} --save x --save-params x", 1, "is in the checkpoint folder", forbid="step      1")
    add(c, f"mlp {RUN} --trace out --timeline out", 1, "--trace and --timeline both name", forbid="step      1")
    add(c, f"mlp {RUN} --write-profile p --save-params ./p", 1, "--save-params and --write-profile both name",
        forbid="step      1")
    add(c, f"mpirun -n 2 mlp {RUN} --compute-only --save ck", 1, "--compute-only sums no gradients",
        forbid="step      1")
    add(c, f"mlp {RUN} --save-params /dev/stdout >> job.log", 0, setup=write("job.log", b"earlier lines\n"),
        survive=starts_with("job.log", b"earlier lines\n"))

    # A checkpoint folder whose own path (4064 characters) fits, but not its files' paths.
    deep = "/".join(["d" * 200] * 19) + "/" + "e" * 245
    add(c, f"mlp {RUN} --save {deep}", 1, "the checkpoint's files cannot be created there", setup=mkdir(deep),
        forbid="step      1")

    # A stray OVERLAP_FAULT in the environment: the examples users build ignore it.
    add(c, f"env OVERLAP_FAULT=kill:0:1 mlp {RUN} --save-params p.st", 0, survive=files_exist("p.st"))

    # A checkpoint of another compiled schedule: refused where state would be lost, else warned.
    c = "schedule"
    add(c, "mlp --steps 4 --batch 4 --report off --resume ck", 1, "PowerSGD's error feedback of 1 rank(s)",
        setup=ck("mlp_powersgd"), forbid="step      3")
    add(c, "mlp --steps 4 --batch 4 --report off --resume ck --grad-comm bf16", 0,
        "gradients that travel otherwise: as fp32 before, as bf16 (chosen at run time) now", setup=ck())
    # Sharded state writes the files whole state does: no other schedule to warn about.
    add(c, "mlp --steps 4 --batch 4 --report off --resume ck", 0, setup=ck("mlp_zero"),
        forbid="another compiled schedule")

    # 15. A parameters file to start from: it must fit the model exactly, as load_state_dict(strict=True).
    c = "init-params"
    model = "ck/step-00000002/model.safetensors"
    add(c, f"mlp --steps 2 --batch 4 --report off --init-params {model}", 1, "does not fit Mlp",
        setup=ck("tower"), forbid="step      1")
    add(c, f"mlp --steps 2 --batch 4 --report off --init-params {model}", 0, setup=ck())
    add(c, "mlp --steps 2 --batch 4 --report off --init-params nowhere.safetensors", 1, "nowhere.safetensors")
    add(c, "mlp --steps 3 --batch 4 --report off --resume ck/step-00000002", 1,
        "is one checkpoint of the folder ck: give that", setup=ck())
    add(c, "mlp --steps 2 --batch 4 --report off --data data --eval-every 1", 1,
        "(held-out loss: --eval-every 0 measures none)", setup=idx(), forbid="step      1")
    add(c, "mlp --steps 2 --batch 4 --report off --init-params ck --resume ck", 2, "cannot be used with", setup=ck())

    # 16. Language models: texts, token shards, clipping and held-out losses that cannot work.
    language_model_cases(add)
    return cases
