"""What the cases are built from: fixtures made once per run of the script (MNIST-like files, a
trained checkpoint), scratch-folder setups, damaged checkpoints, and the checks a result must
pass after a case (files left, checkpoints whole)."""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable

from harness import Runner

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
