"""What every comparison script needs to run the examples: the repository's root, the
environment mpirun needs as root, and one way to run a command (under mpirun on several ranks)
that stops the script with the command's output when it fails."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# OpenMPI refuses to run as root (CI containers) unless told it is intended.
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

# Some machines set OPENBLAS_CORETYPE for every process; the examples keep a value they inherit,
# so a benchmark would measure the kernels it forces (Haswell's AVX2 ones on an AVX-512 CPU ran
# the GPT's step 1.65x slower). The benchmarks measure what the examples choose by themselves,
# unless KEEP_OPENBLAS_CORETYPE=1 asks for the inherited choice.
if "OPENBLAS_CORETYPE" in ENV and ENV.get("KEEP_OPENBLAS_CORETYPE") != "1":
    inherited = ENV.pop("OPENBLAS_CORETYPE")
    if "OVERLAP_CORETYPE_NOTED" not in os.environ:  # once, not again in each worker a script spawns
        os.environ["OVERLAP_CORETYPE_NOTED"] = "1"
        print(f"note: running the examples without the inherited OPENBLAS_CORETYPE={inherited}, so that they "
              "run the kernels this CPU runs (KEEP_OPENBLAS_CORETYPE=1 keeps it)", file=sys.stderr)


# More mpirun arguments, from the environment: `MPIRUN_ARGS="--bind-to none"` lets each rank's
# threads use any core (mpirun binds each of two ranks to one core by default, so a rank's
# communication thread takes turns with its compute thread even where cores are free).
MPIRUN_ARGS = os.environ.get("MPIRUN_ARGS", "").split()


def on_ranks(ranks, cmd):
    """`cmd` under mpirun on `ranks` ranks; as it is for one (no launcher)."""
    return ["mpirun", "--oversubscribe", *MPIRUN_ARGS, "-n", str(ranks), *cmd] if ranks > 1 else list(cmd)


def run(cmd, timeout=900):
    """Runs `cmd`; exits with its output if it fails. Returns the finished process."""
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    return done


def report(cmd, timeout=900):
    """The JSON report (`--report json`) `cmd` prints last."""
    return json.loads(run(cmd, timeout).stdout.strip().splitlines()[-1])


def verdict(failures):
    """A script's exit status: 0, or 1 after listing `failures`."""
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    return 0
