"""A real single-node SLURM cluster for the tests: Debian's ``slurm-wlm`` with munge.

munged, slurmctld and slurmd run in the foreground as children of the test session,
each with its own files under one scratch folder and its own ports, so nothing of the
machine's (``/etc/slurm``, ``/run/munge``) is read or changed and two sessions side by
side never meet. The node has this machine's CPUs and takes up to 4 jobs on each
(``OverSubscribe=FORCE:4``: a test's job and the jobs it starts inside its allocation).
Clients find it through ``SLURM_CONF``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from run_helpers import free_port, wait_for

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue")


def missing() -> str | None:
    """Why a cluster cannot run here, or None."""
    absent = [name for name in DAEMONS if shutil.which(name) is None]
    if absent:
        return (
            f"{', '.join(absent)} not found: Debian's slurm-wlm and munge "
            "(apt-get install slurm-wlm munge) make a real SLURM; .ci/run installs them"
        )
    if os.geteuid() != 0:
        return "slurmd runs jobs as their user and must start as root"
    return None


CONF = """\
ClusterName=accel-tests
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


@contextmanager
def cluster(folder: Path) -> Iterator[dict[str, str]]:
    """Start the cluster in ``folder``; yields the environment its clients need."""
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    conf = folder / "slurm.conf"
    host = socket.gethostname()
    conf.write_text(
        CONF.format(
            host=host, dir=folder, ctld_port=free_port(), d_port=free_port(),
            cpus=os.cpu_count() or 1,
        )
    )  # fmt: skip
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen[bytes]] = []
    log = (folder / "daemons.out").open("ab")
    try:
        daemons.append(
            subprocess.Popen(
                ["munged", "--foreground", "--force", f"--socket={folder}/munge.socket",
                 f"--key-file={key}", f"--pid-file={folder}/munged.pid",
                 f"--log-file={folder}/munged.log", f"--seed-file={folder}/munged.seed"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        wait_for(lambda: (folder / "munge.socket").exists(), 30, "munged's socket")
        for daemon in (["slurmctld", "-D", "-c", "-i"], ["slurmd", "-D", "-c"]):
            daemons.append(
                subprocess.Popen([*daemon, "-f", str(conf)], env=env, stdout=log, stderr=log)
            )
        wait_for(
            lambda: _idle(env, daemons), 60, f"the SLURM node to be idle ({folder}/slurmd.log)"
        )
        yield {"SLURM_CONF": str(conf)}
    finally:
        for proc in reversed(daemons):
            proc.terminate()
        deadline = time.monotonic() + 30
        for proc in reversed(daemons):
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def _idle(env: dict[str, str], daemons: list[subprocess.Popen[bytes]]) -> bool:
    for proc in daemons:  # a daemon that exited never makes the node idle: say which
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited with {proc.returncode}")
    done = subprocess.run(
        ["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=30
    )
    return done.returncode == 0 and done.stdout.strip() == "idle"
