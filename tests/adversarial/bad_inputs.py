#!/usr/bin/env python3
"""Adversarial inputs against the example binaries: a catalogue of command lines, files and
signals that a training binary must refuse clearly (up front where it can), survive, or stop on
cleanly. Each case runs in its own fresh scratch folder and states what it expects: an exit code,
a substring of the message, and for the cases where a result must survive (a closed stdout, a
SIGTERM), the files that must be there afterwards.

Prints a Markdown table (number, category, command, exit code, the first meaningful line printed,
verdict) and the totals: inputs tried, panics, hangs, results lost. Exits non-zero when any case
panics, hangs, loses its result or does not meet its expectation. A case may name such a failure
as another program's documented behaviour (mpirun aborting the job on SIGPIPE): it is then counted
apart, with its verdict, and does not fail the run.

    cargo build --examples && tests/adversarial/bad_inputs.py [--bin-dir DIR] [--only CATEGORY] [--markdown FILE]

A panic is exit status 101 or 134, or `panicked at` in the output. A hang is a run the script had
to end after the case's timeout. The example binaries are on the PATH of every command, so
commands read as they would be typed (`mlp ...`, `mpirun -n 2 mlp ...`); `mpirun` runs with
`--oversubscribe`. Standard library only.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TIMEOUT = 60.0
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
SIGNALS = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT", signal.SIGSTOP: "SIGSTOP"}


@dataclass
class Signal:
    """Send `sig` once `marker` has been printed or the file `file` (relative) exists, and `delay`
    seconds more, to the command's process (`to="job"`) or to one MPI rank (`to="rank1"`)."""

    sig: int
    marker: Optional[str] = None
    delay: float = 0.0
    to: str = "job"
    file: Optional[str] = None


@dataclass
class Case:
    category: str
    cmd: str
    # Expected exit status.
    rc: int
    # A substring the output (stdout and stderr) must contain.
    msg: str = ""
    # check(output) -> None, or what is wrong with the output (stdout and stderr).
    check: Optional[Callable] = None
    # A failure that is another program's documented behaviour, not this project's: when the
    # output holds `documented[0]`, the case is reported as `documented[1]` instead of failing.
    documented: tuple = ()
    # A substring it must not contain (e.g. a step line, for refusals that must come up front).
    forbid: str = ""
    # setup(folder, fixtures) prepares the scratch folder before the command runs.
    setup: Optional[Callable] = None
    # survive(folder) -> None, or what is missing: the result that must outlive the case.
    survive: Optional[Callable] = None
    signals: list = field(default_factory=list)
    # A command started first and left running while `cmd` runs (ended by the script after).
    background: Optional[str] = None
    # Wait for this file (relative) to hold this text before running `cmd`.
    background_ready: tuple = ()
    timeout: float = DEFAULT_TIMEOUT
    # The run must end within this many seconds of its start (or of its last signal).
    within: Optional[float] = None


# ---------------------------------------------------------------------------------------------
# Fixtures: built once per run of the script, copied into the cases' folders.


def idx_bytes(n: int = 20, side: int = 28):
    """An MNIST-like IDX pair (images, labels): `n` side x side images (a bright square whose
    corner encodes the label) and their labels."""
    img = bytearray([0, 0, 8, 3]) + struct.pack(">III", n, side, side)
    lab = bytearray([0, 0, 8, 1]) + struct.pack(">I", n)
    cell = max(side // 4, 1)
    for i in range(n):
        label = i % 10
        for r in range(side):
            for c in range(side):
                on = r // cell == label // 4 and c // cell == label % 4
                img.append(255 if on else 0)
        lab.append(label)
    return bytes(img), bytes(lab)


def write_idx(folder: Path, n: int = 20, side: int = 28, images=None, labels=None):
    """`idx_bytes` in `folder`; `images`/`labels` replace the computed bytes when given."""
    folder.mkdir(parents=True, exist_ok=True)
    img, lab = idx_bytes(n, side)
    (folder / "train-images-idx3-ubyte").write_bytes(img if images is None else images)
    (folder / "train-labels-idx1-ubyte").write_bytes(lab if labels is None else labels)


class Fixtures:
    """Checkpoints made by the binaries themselves, once, in a folder of their own."""

    def __init__(self, runner: "Runner"):
        self.runner = runner
        self.root = Path(tempfile.mkdtemp(prefix="bad-inputs-fixtures-"))
        self.made = {}

    def checkpoint(self, example: str) -> Path:
        """`example --steps 2 --batch 4 --save ck`: a folder with `latest` and step-00000002."""
        if example not in self.made:
            folder = self.root / example
            folder.mkdir()
            cmd = [str(self.runner.bin_dir / example), "--steps", "2", "--batch", "4", "--report", "off",
                   "--save", "ck"]
            out = subprocess.run(cmd, cwd=folder, env=self.runner.env, capture_output=True, text=True,
                                 timeout=300)
            if out.returncode != 0:
                sys.exit(f"fixture `{' '.join(cmd[1:])}` failed:\n{out.stdout}\n{out.stderr}")
            self.made[example] = folder / "ck"
        return self.made[example]

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)


def ck(example: str = "mlp", name: str = "ck"):
    """Setup: a copy of `example`'s step-2 checkpoint at `name`."""

    def setup(d: Path, fx: Fixtures):
        shutil.copytree(fx.checkpoint(example), d / name)

    return setup


def step_dir(d: Path, name: str = "ck") -> Path:
    return d / name / "step-00000002"


def damaged(change: Callable[[Path], None], example: str = "mlp"):
    """Setup: a copy of the checkpoint, then `change(step_dir)`."""

    def setup(d: Path, fx: Fixtures):
        ck(example)(d, fx)
        change(step_dir(d))

    return setup


def read_safetensors(path: Path):
    """[(name, dtype, shape, bytes)] in file order, and the metadata."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    body = raw[8 + n:]
    tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return [(k, v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in tensors], meta


def write_safetensors(path: Path, tensors, meta):
    header, body, at = {}, bytearray(), 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        body += data
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(body))


def recorded(step: Path, file: str):
    """Records `file`'s new size and CRC-32 in state.json, and the state's own CRC-32 again (of
    its fields as compact JSON with sorted keys, as the checkpoint computes it), so that only the
    change itself is wrong."""
    state = json.loads((step / "state.json").read_text())
    data = (step / file).read_bytes()
    state["files"][file] = {"bytes": len(data), "crc32": zlib.crc32(data)}
    state.pop("crc32", None)
    compact = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    state["crc32"] = zlib.crc32(compact)
    (step / "state.json").write_text(json.dumps(state, indent=2))


def edit_tensors(file: str, edit: Callable):
    """A change to one safetensors file of the checkpoint, recorded in state.json."""

    def change(step: Path):
        tensors, meta = read_safetensors(step / file)
        write_safetensors(step / file, edit(tensors), meta)
        recorded(step, file)

    return change


def edit_state(edit: Callable[[dict], None]):
    def change(step: Path):
        state = json.loads((step / "state.json").read_text())
        edit(state)
        (step / "state.json").write_text(json.dumps(state, indent=2))

    return change


def write(rel: str, data: bytes):
    def setup(d: Path, fx: Fixtures):
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)

    return setup


def mkdir(rel: str):
    def setup(d: Path, fx: Fixtures):
        (d / rel).mkdir(parents=True)

    return setup


def symlink(rel: str, target: str):
    def setup(d: Path, fx: Fixtures):
        os.symlink(target, d / rel)

    return setup


def both(*setups):
    def setup(d: Path, fx: Fixtures):
        for s in setups:
            s(d, fx)

    return setup


def idx(folder: str = "data", **kw):
    def setup(d: Path, fx: Fixtures):
        write_idx(d / folder, **kw)

    return setup


def latest_is(expected: str, name: str = "ck"):
    def check(d: Path):
        latest = d / name / "latest"
        if not latest.is_file():
            return f"no {name}/latest"
        found = latest.read_text().strip()
        if found != expected:
            return f"{name}/latest is {found}, expected {expected}"
        if not (d / name / found / "model.safetensors").is_file():
            return f"{name}/{found}/model.safetensors is missing"
        return None

    return check


def a_checkpoint(name: str = "ck"):
    def check(d: Path):
        latest = d / name / "latest"
        if not latest.is_file():
            return f"no checkpoint: {name}/latest is missing"
        step = latest.read_text().strip()
        for f in ["model.safetensors", "optimizer.safetensors", "state.json"]:
            if not (d / name / step / f).is_file():
                return f"{name}/{step}/{f} is missing"
        return None

    return check


def no_progress_board_left(d: Path):
    """No /dev/shm progress board of the last minute whose ranks have all exited."""
    left = []
    for board in Path("/dev/shm").glob("overlap-*"):
        try:
            data, age = board.read_bytes(), time.time() - board.stat().st_mtime
        except OSError:
            continue
        pids = [int.from_bytes(data[i + 8:i + 16], sys.byteorder) for i in range(0, len(data) - 63, 64)]
        if age < 60 and not any(pid and Path(f"/proc/{pid}").exists() for pid in pids):
            left.append(board.name)
    return f"left in /dev/shm: {', '.join(left)}" if left else None


def files_exist(*rels):
    def check(d: Path):
        missing = [r for r in rels if not (d / r).is_file() or (d / r).stat().st_size == 0]
        return f"missing or empty: {', '.join(missing)}" if missing else None

    return check


def holds(rel: str, data: bytes):
    """The file `rel` still holds exactly `data`."""

    def check(d: Path):
        return None if (d / rel).read_bytes() == data else f"{rel} was changed"

    return check


def starts_with(rel: str, data: bytes):
    """The file `rel` still begins with `data` (what was written before the run is kept)."""

    def check(d: Path):
        return None if (d / rel).read_bytes().startswith(data) else f"{rel} lost what it held"

    return check


def no_torn_checkpoint(name: str = "ck"):
    """A failed save leaves no `latest`, or one naming a complete step folder."""

    def check(d: Path):
        latest = d / name / "latest"
        if not latest.exists():
            return None
        return a_checkpoint(name)(d)

    return check


def checks(*cs):
    def check(d: Path):
        for c in cs:
            problem = c(d)
            if problem:
                return problem
        return None

    return check


def help_default(flag: str, default: str):
    """Output check: the `--help` entry of `flag` ends with `[default: <default>]`."""

    def check(out: str):
        text = " ".join(out.split())
        at = text.find(f"{flag} <")
        if at < 0:
            return f"no {flag} in the help"
        entry = text[at:].split(" --", 1)[0]
        found = entry.split("[default:", 1)[1].split("]", 1)[0].strip() if "[default:" in entry else None
        return None if found == default else f"{flag}'s default is {found}, expected {default}"

    return check


# ---------------------------------------------------------------------------------------------
# The catalogue.

# Short forms used below.
RUN = "--steps 2 --batch 4 --report off"  # a short run that trains
LOOP = "--steps 100000 --batch 4 --log-every 1 --report off"  # runs until stopped
ADDR = "needs more memory than any machine can address"
UNEXPECTED = "unexpected argument"
LONG = "a" * 300  # a file name longer than any file system takes


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
        signals=[Signal(signal.SIGTERM, "step      1 ")])
    add(c, "mlp --steps 1000000000000 --batch 4 --log-every 1 --report off", 130, "stopped by SIGINT",
        signals=[Signal(signal.SIGINT, "step      1 ")])
    add(c, "mlp --steps 18446744073709551616", 2, "--steps")
    add(c, "mlp --batch 18446744073709551615 --steps 1", 1, ADDR)
    add(c, "mlp --batch 2305843009213693952 --steps 1", 1, ADDR)
    add(c, "mlp --batch 1000000 --steps 1", 1, "GiB available")
    add(c, "mlp --accumulate 9223372036854775807 --steps 1 --batch 4", 1, "--accumulate", within=30)
    add(c, "mlp --steps 1000000000000 --batch 4 --report-every 1000000000000 --trace t.json", 1, "--report-every",
        within=30)
    for flag in ["--batch", "--steps", "--threads"]:
        add(c, f"mlp {flag} 0", 2, flag)
    add(c, "mlp --save ck --save-every 0", 2, "--save-every")
    add(c, "mlp --batch -1", 2, UNEXPECTED)
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
    add(c, "mlp --steps 3 --batch 4 --lr 1e30 --check-finite", 1, "non-finite gradient")

    # 5. Hangs: rank 1 stopped with SIGSTOP at step 3; the waiting ranks give up after the
    # --comm-timeout and name it. Without the flag the bound is 10 minutes (`mlp --help` says so),
    # longer than a case: the stopped-rank cases give a short one.
    c = "hang"
    stop = [Signal(signal.SIGSTOP, "step      3 ", to="rank1")]
    add(c, f"mpirun -n 2 mlp {LOOP} --comm-timeout 5s", 1, "was not reduced within 5s", signals=stop, timeout=40,
        within=30)
    add(c, f"mpirun -n 2 mlp {LOOP} --all-reduce mpi --comm-timeout 5s", 1, "was not reduced within 5s",
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
    add(c, "mlp --comm-timeout 0s", 2, "must be a positive time")
    add(c, "mlp --comm-timeout 99999999999999999999h", 2, "too long")
    add(c, "mpirun -n 2 mlp --steps 2 --batch 4 --report off --comm-timeout 18000000000000000000s", 2, "too long")
    add(c, "mpirun -n 2 mlp --steps 2 --batch 4 --report off --link latency=1e20s", 2, "--link", within=30)

    # 6. A short --comm-timeout while rank 0 writes large checkpoints and output files.
    c = "save+timeout"
    add(c, "mpirun -n 2 mlp --steps 3 --batch 4 --report off --save ck --save-every 1 --comm-timeout 300ms", 0,
        survive=latest_is("step-00000003"))
    add(c, "mpirun -n 2 mlp --steps 3 --batch 4 --report off --save ck --save-every 1 --comm-timeout 300ms "
           "--all-reduce mpi", 0, survive=latest_is("step-00000003"))
    add(c, "mpirun -n 2 mlp --steps 3 --batch 4 --save-params p.st --trace t.json --timeline t.svg "
           "--write-profile w.json --comm-timeout 300ms", 0,
        survive=files_exist("p.st", "t.json", "t.svg", "w.json"))

    # 7. --comm-only trains nothing: flags about training are refused, as are contradictions.
    c = "comm-only"
    add(c, "mlp --comm-only --steps 1 --save ck", 1, "nothing to do with --save")
    add(c, "mlp --comm-only --steps 1 --data data", 1, "nothing to do with --data")
    add(c, "mlp --comm-only --steps 1 --save ck --save-params p.st --resume ck --data data", 1,
        "nothing to do with --save, --save-params, --resume, --data")
    add(c, "mlp --comm-only --compute-only", 2, "cannot be used with")
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
        signals=[Signal(signal.SIGTERM, "step      3 ")], survive=a_checkpoint())
    add(c, f"mlp {LOOP} --save ck", 130, "stopped by SIGINT after step",
        signals=[Signal(signal.SIGINT, "step      3 ")], survive=a_checkpoint())
    add(c, f"mlp {LOOP}", 143, "no checkpoint (the run does not save)",
        signals=[Signal(signal.SIGTERM, "step      2 ")])
    add(c, f"mlp {LOOP} --save ck", 143,
        signals=[Signal(signal.SIGTERM, "step      3 "), Signal(signal.SIGTERM, delay=0.2)], within=5)
    # The signal lands in the last step: the run has reached --steps, so it ends as a finished run.
    add(c, "mlp --steps 3 --batch 4 --log-every 1 --report off --save ck --save-params p.st", 0,
        signals=[Signal(signal.SIGTERM, "step      3 ")], survive=checks(latest_is("step-00000003"),
                                                                          files_exist("p.st")))
    # mpirun forwards SIGTERM to the ranks (which exit 143) and then reports 1 itself; the README
    # asks for a longer odls_base_sigkill_timeout than OpenMPI's 1 s so that rank 0 can save.
    add(c, f"mpirun --mca odls_base_sigkill_timeout 3 -n 2 mlp {LOOP} --save ck", 1,
        "stopped by SIGTERM after step", signals=[Signal(signal.SIGTERM, "step      3 ")], survive=a_checkpoint())
    # Two SIGINTs 0.1 s apart end mpirun at once, before it passes anything on; the ranks get
    # SIGHUP from the kernel as their launcher dies and stop with a checkpoint, silently.
    add(c, f"mpirun -n 3 custom_layer {LOOP} --save ck", 1, survive=a_checkpoint(),
        signals=[Signal(signal.SIGINT, "step      3 "), Signal(signal.SIGINT, delay=0.1)], within=5)

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
    add(c, rk, 1, "model.safetensors", setup=damaged(lambda s: (s / "model.safetensors").unlink()))
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
    add(c, "mlp --threads 100000 --steps 1 --batch 4 --report off", 0, "note: --threads 100000")
    add(c, "mlp --simulate world=0,link=ib-hdr", 2, "--simulate")
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

    # 15. A parameters file to start from: it must fit the model exactly, as load_state_dict(strict=True).
    c = "init-params"
    model = "ck/step-00000002/model.safetensors"
    add(c, f"mlp --steps 2 --batch 4 --report off --init-params {model}", 1, "does not fit Mlp",
        setup=ck("tower"), forbid="step      1")
    add(c, f"mlp --steps 2 --batch 4 --report off --init-params {model}", 0, setup=ck())
    add(c, "mlp --steps 2 --batch 4 --report off --init-params nowhere.safetensors", 1, "nowhere.safetensors")
    add(c, "mlp --steps 2 --batch 4 --report off --init-params ck --resume ck", 2, "cannot be used with", setup=ck())

    # 16. Language models: texts, token shards, clipping and held-out losses that cannot work.
    c = "language-model"
    text = "python3 -c \"print('to be or not to be, ' * 30)\" > t.txt && "
    add(c, "gpt --clip-grad-norm 0", 2, "must be a finite number greater than 0, got 0")
    add(c, "gpt --clip-grad-norm none", 2, "invalid float literal")
    add(c, "gpt --eval-batches 0", 2, "must be at least 1")
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
    add(c, "printf 'caf\\351' > l.txt && prepare --text l.txt --out shards", 1, "not UTF-8 text (byte 3 is not)")
    return cases


# ---------------------------------------------------------------------------------------------
# Running a case.


@dataclass
class Result:
    rc: Optional[int]
    out: str
    err: str
    killed: bool  # ended by the script after the case's timeout
    late: float  # seconds from the last signal (or the start) to the end
    note: str = ""
    # Processes of the command still running 2 s after it ended (a rank left behind).
    leftover: str = ""


def procs_in(folder: Path):
    """Processes whose working directory is inside `folder`: the ones this case started."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == str(folder) or cwd.startswith(str(folder) + "/"):
            found.append(int(pid))
    return found


def rank_pid(folder: Path, rank: int) -> Optional[int]:
    for pid in procs_in(folder):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return pid
    return None


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def end_all(folder: Path):
    """SIGKILL to every process of this case (a stopped rank included)."""
    for _ in range(3):
        pids = procs_in(folder)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)  # also ends a stopped process
            except OSError:
                pass
        time.sleep(0.2)


class Runner:
    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.env = dict(os.environ)
        self.env.update(MPI_ENV)
        self.env["PATH"] = f"{bin_dir}:{self.env.get('PATH', '')}"
        self.env.pop("OVERLAP_FAULT", None)

    def argv(self, cmd: str):
        real = cmd.replace("mpirun ", "mpirun --oversubscribe ", 1) if cmd.startswith("mpirun ") else cmd
        if any(ch in real for ch in "|>&;'$"):
            return ["bash", "-o", "pipefail", "-c", real]
        return shlex.split(real)

    def start(self, cmd: str, folder: Path):
        return subprocess.Popen(self.argv(cmd), cwd=folder, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    def run(self, case: Case, folder: Path) -> Result:
        background = None
        if case.background:
            background = subprocess.Popen(self.argv(case.background), cwd=folder, env=self.env,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True)
            rel, text = case.background_ready
            deadline = time.monotonic() + case.timeout
            while True:
                try:
                    if text in (folder / rel).read_text():
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or background.poll() is not None:
                    end_all(folder)
                    return Result(None, "", f"the background job `{case.background}` never took {rel}", False, 0,
                                  note="setup failed")
                time.sleep(0.05)
        try:
            return self._run(case, folder, background)
        finally:
            end_all(folder)
            if background is not None:
                background.wait()

    def _run(self, case: Case, folder: Path, background) -> Result:
        started = time.monotonic()
        proc = self.start(case.cmd, folder)
        chunks = {"out": [], "err": []}
        lock = threading.Lock()

        def pump(stream, key):
            for data in iter(lambda: stream.read1(65536), b""):
                with lock:
                    chunks[key].append(data)

        threads = [threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True)]
        for t in threads:
            t.start()

        def text(key=None):
            with lock:
                keys = [key] if key else ["out", "err"]
                return "".join(b"".join(chunks[k]).decode(errors="replace") for k in keys)

        deadline = started + case.timeout
        last_event = started
        notes = []
        def waiting(s: Signal) -> bool:
            if s.file:
                return not (folder / s.file).exists()
            return bool(s.marker) and s.marker not in text()

        for s in case.signals:
            while waiting(s) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002 if s.file else 0.02)
            if proc.poll() is not None or time.monotonic() >= deadline:
                notes.append(f"ended before {SIGNALS.get(s.sig, s.sig)} could be sent")
                break
            time.sleep(s.delay)
            target = proc.pid if s.to == "job" else rank_pid(folder, int(s.to[4:]))
            if target is None:
                notes.append(f"no process for {s.to}")
                break
            os.kill(target, s.sig)
            last_event = time.monotonic()
        killed = False
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            killed = True
            end_all(folder)
            proc.wait()
        ended = time.monotonic()
        for t in threads:
            t.join(timeout=5)
        leftover = ""
        if not killed:
            mine = {background.pid} if background is not None else set()
            until = time.monotonic() + 2
            while (left := [p for p in procs_in(folder) if p not in mine]) and time.monotonic() < until:
                time.sleep(0.1)
            leftover = ", ".join(f"{p} {command_of(p)}" for p in left)
        rc = proc.returncode
        if rc is not None and rc < 0:
            rc = 128 - rc
        return Result(None if killed else rc, text("out"), text("err"), killed, ended - last_event, "; ".join(notes),
                      leftover)


# ---------------------------------------------------------------------------------------------
# Judging a case.


def first_line(res: Result) -> str:
    """The line a person would read first: a panic, else an error, else a warning, else the first
    line of stderr that is not mpirun's decoration, else stdout's first; for a run the script
    ended, the last line it printed (where it stopped)."""

    def lines(s):
        out = []
        for line in s.replace("\r", "\n").splitlines():
            line = line.strip()
            backtrace = line == "stack backtrace:" or line.startswith("at ") or line.split(":")[0].isdigit()
            if line and not backtrace and not set(line) <= set("-=*") and not line.startswith("Primary job"):
                out.append(line)
        return out

    every = lines(res.err) + lines(res.out)
    for needle in ["panicked at", "memory allocation of", "error:", "warning:", "stopped by", "aborting", "note:"]:
        for i, line in enumerate(every):
            if needle in line:
                # A panic's message is on the line after `panicked at FILE:LINE:COLUMN:`.
                if line.endswith(":") and i + 1 < len(every):
                    return f"{line} {every[i + 1]}"
                return line
    if res.killed:
        return (lines(res.out) or lines(res.err) or [""])[-1]
    return (lines(res.err) or lines(res.out) or [""])[0]


def is_panic(res: Result) -> bool:
    return res.rc in (101, 134) or "panicked at" in res.out + res.err


def judge(case: Case, res: Result, folder: Path):
    """(kind, verdict): kind is ok, panic, hang, lost, wrong or documented (a lost result or a
    missed expectation that the case names as another program's documented behaviour)."""
    kind, verdict = judge_strictly(case, res, folder)
    if kind in ("lost", "wrong") and case.documented and case.documented[0] in res.out + res.err:
        return "documented", f"{case.documented[1]}: {verdict.replace('**', '')}"
    return kind, verdict


def judge_strictly(case: Case, res: Result, folder: Path):
    everything = res.out + res.err
    if is_panic(res):
        return "panic", "**PANIC**"
    if res.killed:
        return "hang", f"**HANG** (ended by the script after {case.timeout:.0f} s)"
    if res.leftover:
        return "hang", f"**HANG**: still running after the command ended: {res.leftover}"
    problems = []
    if res.note == "setup failed":
        problems.append(res.err)
    elif res.note:
        problems.append(res.note)
    if res.rc != case.rc:
        problems.append(f"exit {res.rc}, expected {case.rc}")
    if case.msg and case.msg not in everything:
        problems.append(f"no `{case.msg}`")
    if case.check is not None:
        problem = case.check(everything)
        if problem:
            problems.append(problem)
    if case.forbid and case.forbid in everything:
        problems.append(f"`{case.forbid.strip()}` printed: not refused up front")
    if case.within is not None and res.late > case.within:
        problems.append(f"took {res.late:.1f} s, expected under {case.within:.0f} s")
    if case.survive is not None:
        lost = case.survive(folder)
        if lost:
            return "lost", f"**RESULT LOST**: {lost}" + (f"; {'; '.join(problems)}" if problems else "")
    if problems:
        return "wrong", "**WRONG**: " + "; ".join(problems)
    return "ok", "ok"


def md(s: str, limit: int = 140) -> str:
    """`s` for a table cell: the long file name and Rust's source prefix shortened, cut to `limit`."""
    s = s.replace(LONG, f"<{len(LONG)} x a>")
    s = re.sub(r"/rustc/[0-9a-f]+/", "", s)
    s = s if len(s) <= limit else s[: limit - 1] + "…"
    return s.replace("|", "\\|").replace("`", "'")


def ui_cases() -> int:
    return sum(1 for p in (REPO / "tests" / "ui").rglob("*.rs") if p.with_suffix(".stderr").exists())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", default=str(REPO / "target" / "debug" / "examples"),
                    help="where the example binaries are (default: target/debug/examples)")
    ap.add_argument("--only", metavar="CATEGORY", action="append",
                    help="run only this category (repeatable); --only list prints them")
    ap.add_argument("--markdown", metavar="FILE", help="also write the table and totals to FILE")
    args = ap.parse_args()

    cases = catalogue()
    categories = list(dict.fromkeys(c.category for c in cases))
    if args.only and "list" in args.only:
        print("\n".join(f"{c} ({sum(1 for x in cases if x.category == c)})" for c in categories))
        return 0
    if args.only:
        unknown = [o for o in args.only if o not in categories]
        if unknown:
            sys.exit(f"unknown category {', '.join(unknown)}: one of {', '.join(categories)}")
    bin_dir = Path(args.bin_dir).resolve()
    for name in ["mlp", "tower", "custom_layer"]:
        if not (bin_dir / name).is_file():
            sys.exit(f"{bin_dir / name} is missing: build the examples first (cargo build --examples)")
    if shutil.which("mpirun") is None:
        sys.exit("mpirun is missing (make deps installs OpenMPI)")

    runner = Runner(bin_dir)
    fixtures = Fixtures(runner)
    rows, kinds = [], []
    header = "| # | category | command | exit | first line printed | verdict |\n|---|---|---|---|---|---|"
    print(header, flush=True)
    started = time.monotonic()
    try:
        for number, case in enumerate(cases, 1):
            if args.only and case.category not in args.only:
                continue
            folder = Path(tempfile.mkdtemp(prefix=f"bad-input-{number}-"))
            try:
                if case.setup:
                    case.setup(folder, fixtures)
                res = runner.run(case, folder)
                kind, verdict = judge(case, res, folder)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            row = (f"| {number} | {case.category} | `{md(case.cmd, 200)}` | {'killed' if res.killed else res.rc} | "
                   f"{md(first_line(res))} | {md(verdict, 200)} |")
            print(row, flush=True)
            rows.append(row)
            kinds.append(kind)
    finally:
        fixtures.cleanup()

    count = lambda k: kinds.count(k)  # noqa: E731
    totals = [
        "",
        f"Inputs tried: {len(kinds)} ({count('ok')} as expected) in {time.monotonic() - started:.0f} s",
        f"Panics: {count('panic')}",
        f"Hangs: {count('hang')}",
        f"Results lost: {count('lost')}",
        f"Expectations not met: {count('wrong')}",
        f"Documented behaviour of other programs: {count('documented')}",
        f"Malformed models (trybuild UI tests in tests/ui, not run here): {ui_cases()}",
    ]
    print("\n".join(totals))
    if args.markdown:
        Path(args.markdown).write_text("\n".join([header, *rows, *totals]) + "\n")
    bad = sum(count(k) for k in ["panic", "hang", "lost", "wrong"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
