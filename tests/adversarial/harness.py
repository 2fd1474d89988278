"""Running one adversarial case: what a case states (`Case`, `Signal`), how the script runs it
in its scratch folder with the example binaries on the PATH (`Runner`), and how its outcome is
judged: panic, hang, lost result, expectation met or not (`judge`)."""

import os
import re
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional


REPO = Path(__file__).resolve().parents[2]
DEFAULT_TIMEOUT = 60.0
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# A file name longer than any file system takes (shortened in the table).
LONG = "a" * 300
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
