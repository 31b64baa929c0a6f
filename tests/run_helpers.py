"""The one way tests run the installed ``accel`` in a project and read its run back.

The ``accel`` and ``start_accel`` fixtures of tests/conftest.py are built on
:func:`accel`; tests that need more (their own executable, a ``preexec_fn``) call it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

Accel = Callable[..., subprocess.CompletedProcess[str]]  # the ``accel`` fixture
Start = Callable[..., subprocess.Popen[str]]  # the ``start_accel`` fixture


def accel_command() -> list[str]:
    """The installed ``accel`` executable (the path users take), else ``python -m accel``."""
    exe = Path(sys.executable).parent / "accel"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "accel"]


def alone_env(folder: Path) -> dict[str, str]:
    """The environment for a process a module fixture starts, outside any test's
    ``isolated`` fixture: this one without accel's variables, HOME in ``folder``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    env.update(HOME=str(folder), XDG_CONFIG_HOME=str(folder / ".config"))
    return env


def accel(
    project: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 110,
    exe: list[str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``accel ARGS`` run in ``project`` to its end, output captured; ``env`` is added to
    this process's environment. A launch still running after ``timeout`` fails with the
    Python stacks of its live ranks (``accel stack``): a hang in CI says where it hung."""
    command = [*(exe or accel_command()), *args]
    full_env = {**os.environ, **(env or {})}
    with subprocess.Popen(
        command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=full_env, preexec_fn=preexec,
    ) as proc:  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = (
                _live_stacks(project, command[: -len(args)], full_env)
                if args[:1] == ("launch",)
                else ""
            )
            proc.kill()
            out, err = proc.communicate()
            raise Hung(command, timeout, output=out, stderr=err, stacks=stacks) from None
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


class Hung(subprocess.TimeoutExpired):
    """A command past its timeout; its message ends with what it printed last and the
    live ranks' stacks."""

    def __init__(self, *args: Any, stacks: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stacks = stacks

    def __str__(self) -> str:
        said = "\n".join(s for s in (self.output, self.stderr) if isinstance(s, str))[-4000:]
        return f"{super().__str__()}\n--- it printed last:\n{said}\n--- stacks:\n{self.stacks}"


def _live_stacks(project: Path, exe: list[str], env: dict[str, str]) -> str:
    try:
        done = subprocess.run(
            [*exe, "stack"], cwd=project, capture_output=True, text=True, timeout=30, env=env
        )
    except subprocess.TimeoutExpired:
        return "(accel stack did not answer in 30 s)"
    return done.stdout + done.stderr


def start(project: Path, *args: str, exe: list[str] | None = None) -> subprocess.Popen[str]:
    """``accel ARGS`` started in ``project`` in the background, output piped."""
    return subprocess.Popen(
        [*(exe or accel_command()), *args],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# Ports the tests hand out for rendezvous endpoints: outside the kernel's ephemeral range,
# so that no outgoing connection of another test (whose source port the kernel picks from
# that range) and no listener bound to port 0 (gloo's, a TCPStore's) takes one between its
# check and its bind; clear of torch's default 29500. Each xdist worker draws from a band
# of its own. 20000-28999 where the ephemeral range is Linux's default (32768-60999);
# elsewhere the widest stretch outside it: stop 41's CI machine handed out 21203 from
# inside its ephemeral range, and a rank met EADDRINUSE there.
DEFAULT_PORTS = range(20000, 29000)
MIN_PORTS = 1200  # three pytest runs side by side, two xdist workers each: 200 a band


def _ephemeral() -> range:
    with contextlib.suppress(OSError, ValueError, IndexError):
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2]
        return range(int(low), int(high) + 1)
    return range(32768, 61000)


def ports_outside(ephemeral: range) -> range:
    """The ports tests hand out on a machine with that ephemeral range: empty where no
    stretch of :data:`MIN_PORTS` lies outside it (then :func:`free_port` asks the kernel)."""
    if DEFAULT_PORTS.stop <= ephemeral.start or DEFAULT_PORTS.start >= ephemeral.stop:
        return DEFAULT_PORTS
    below = range(10000, max(10000, ephemeral.start))  # above the well-known services
    above = range(min(ephemeral.stop, 65536), 65536)
    widest = max(below, above, key=len)
    return widest if len(widest) >= MIN_PORTS else range(0)


PORTS = ports_outside(_ephemeral())
_handed_out: set[int] = set()


SHARE_ENV = "ACCEL_TEST_PORT_SHARE"  # "K/N": this pytest run's share of PORTS, of N


def port_band() -> range:
    """This test process's share of :data:`PORTS`: its pytest run's (``K/N`` in
    ``ACCEL_TEST_PORT_SHARE``, for runs side by side on one machine, as .ci/run's torch
    releases; the whole range without it), split among its xdist workers. Without
    shares, CI66's torch 2.6 run and the 2.15 run beside it drew from the same ports: a
    rank could meet another run's store between free_port() and its bind (a hang)."""
    ports = PORTS
    share = re.fullmatch(r"(\d+)/(\d+)", os.environ.get(SHARE_ENV, ""))
    if share and 0 <= int(share[1]) < int(share[2]):
        width = len(ports) // int(share[2])
        ports = range(
            ports.start + int(share[1]) * width, ports.start + (int(share[1]) + 1) * width
        )
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    width = len(ports) // count
    start = ports.start + (index % count) * width
    return range(start, start + width)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and stays so until the test binds it (for
    a rendezvous endpoint): drawn from :func:`port_band`, outside the ephemeral range, never
    the same twice in one process. (A port the kernel handed out with ``bind(0)`` comes
    from the ephemeral range, where another test's outgoing connection could take it
    before the launcher bound it: a flake under load.)"""
    band = port_band()
    if not band:  # a machine with no room outside its ephemeral range
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    for _ in range(200):
        port = random.randrange(band.start, band.stop)
        if port in _handed_out or port == 29500:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or in TIME_WAIT
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {band.start}-{band.stop - 1}")


def torch_threads() -> dict[str, str]:
    """torch's own threads in this process by id (named ``pt_*``): a TCPStore's server,
    a gloo process group's workers. Every thread counts where /proc cannot say."""
    from accel.accelerator._gloo_idle import threads

    found = threads(lambda name: name.startswith(b"pt_"))
    if found is None:
        return {"?": "unknown"}
    return {tid: name.decode(errors="replace") for tid, name in found.items()}


def collect_before_fork() -> None:
    """Registered to run before every fork of a test process (tests/conftest.py).

    A TCPStore or process group an earlier test left in a reference cycle is garbage
    the collector has not reached yet. Collected in a forked child, its destructor joins
    a torch thread the child does not have: once the child has started a thread of its
    own (which takes the dead one's cached stack), the join fails and the child aborts
    (``std::system_error: Invalid argument``, SIGABRT; a crash-point child in CI on
    a0e63af). So it is collected here, in the parent, where its threads are; only while
    torch runs threads here (a collection costs ~50 ms, a look at /proc ~0.1 ms)."""
    if torch_threads():
        gc.collect()


def aborted_in_teardown(done: subprocess.CompletedProcess[str]) -> bool:
    """A reference launcher's run (torchrun, Accelerate's) that failed only because a
    worker aborted after its script had finished: torch's gloo sometimes does, in the
    interpreter's teardown ("terminate called without an active exception", SIGABRT,
    with no Python frame left: 10 of 82 runs of Accelerate's memory example on torch 2.13).
    accel's bootstrap records such a rank as finished (accel.launch.teardown); the
    baselines' launchers report the run as failed, so their tests ask them again, and
    ranks a test starts without any launcher are judged by the same rule."""
    return done.returncode != 0 and "terminate called without an active exception" in (
        done.stderr or ""
    )


def two_ranks(
    script: Path, args: list[str], env: dict[str, str], errors: Path | None = None
) -> list[int]:
    """Two ranks of ``script`` with the torchrun environment, without the elastic agent;
    with ``errors``, rank N's stderr goes to ``errors/err-N.txt``. A rank still running
    after 120 s prints its Python stacks (faulthandler, on SIGABRT) before it is killed:
    a hang in CI says where it hung. Ranks whose rank 0 could not listen on its port
    (EADDRINUSE: taken between free_port() and the bind by a process that does not draw
    from the tests' bands; stop 41's CI) are started again on another port, as torch's own
    tests do (``retry_on_connect_failures``); nothing else is retried."""
    with contextlib.ExitStack() as stack:
        if errors is None:  # rank 0's stderr is read for EADDRINUSE, then shown as before
            errors = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            stack.callback(_show_errors, errors)
        for _ in range(3):
            codes, in_use = _two_ranks_once(script, args, env, errors)
            if not in_use:
                return codes
        return codes


def _show_errors(errors: Path) -> None:
    for rank in range(2):
        sys.stderr.write((errors / f"err-{rank}.txt").read_text(errors="replace"))


def _address_in_use(stderr: Path) -> bool:
    text = stderr.read_text(errors="replace")
    return "EADDRINUSE" in text or "address already in use" in text.lower()


def _two_ranks_once(
    script: Path, args: list[str], env: dict[str, str], errors: Path
) -> tuple[list[int], bool]:
    """The ranks' exit codes, and whether rank 0 met EADDRINUSE (rank 1 is then killed)."""
    port = str(free_port())
    procs = []
    for rank in range(2):
        rank_env = dict(env)
        rank_env.update(
            RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
        )  # fmt: skip
        cmd = [sys.executable, "-X", "faulthandler", str(script), *args]
        with (errors / f"err-{rank}.txt").open("w") as err:
            procs.append(subprocess.Popen(cmd, env=rank_env, stderr=err))
    try:
        deadline = time.monotonic() + 120
        first = procs[0].wait(timeout=120)
        if first != 0 and _address_in_use(errors / "err-0.txt"):
            return [first, -signal.SIGKILL], True  # rank 1 waits on a store nobody serves
        return [first, procs[1].wait(timeout=max(0.1, deadline - time.monotonic()))], False
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGABRT)  # faulthandler prints the stacks
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        raise
    finally:
        for p in procs:
            p.kill()  # a no-op for those that exited
            p.wait()


def run_folder(project: Path) -> Path:
    """The folder of the project's only run."""
    (folder,) = (project / ".accelerate" / "logs" / "runs").iterdir()
    return folder


def run_json(project: Path) -> dict[str, Any]:
    """The run.json of the project's only run."""
    data: dict[str, Any] = json.loads((run_folder(project) / "run.json").read_text())
    return data


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> None:
    """Poll ``predicate`` every ``every`` seconds (a scheduler client call: less often)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def write_run(
    ws: Any,
    run_id: str,
    record: dict[str, Any],
    metrics: list[Any] | None = None,
    resources: list[Any] | None = None,
) -> Path:
    """A finished run's folder as a launcher leaves it: a failed 2-rank run.json (with
    ``record`` on top), and metrics.jsonl / resources.jsonl when given (a row is a JSON
    value, or a line written as it is)."""
    from accel import runs

    folder = runs.run_dir(ws.layout, run_id)
    folder.mkdir(parents=True)
    base = {
        "id": run_id,
        "name": "default",
        "command": ["accel", "launch", "-n", "2", "train.py"],
        "status": "failed",
        "exit_code": 1,
        "failed_rank": 1,
        "world_size": 2,
        "started_at": "2026-11-29T10:00:00+00:00",
        "ended_at": "2026-11-29T10:05:30+00:00",
    }
    (folder / "run.json").write_text(json.dumps({**base, **record}))
    for name, rows in (("metrics.jsonl", metrics), ("resources.jsonl", resources)):
        if rows is not None:
            lines = (row if isinstance(row, str) else json.dumps(row) for row in rows)
            (folder / name).write_text("".join(line + "\n" for line in lines))
    return folder


@contextlib.contextmanager
def tiny_tmpfs(folder: Path, size: str = "1m") -> Iterator[Path]:
    """A real tmpfs of ``size`` mounted at ``folder`` (root only: the test skips elsewhere)."""
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root: " + mounted.stderr.decode().strip())
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


WATCHDOG = 3.0  # seconds a call may take before it is deemed blocked on a FIFO (and freed)


@contextlib.contextmanager
def unblocked_after(fifo: Path, seconds: float = WATCHDOG) -> Iterator[list[bool]]:
    """Frees a call blocked on ``fifo`` after ``seconds`` (by opening its other end), so
    a hang fails the test instead of hanging the suite; the list says whether it had to."""
    fired: list[bool] = []
    stop = threading.Event()
    fds: list[int] = []

    def watch() -> None:
        if not stop.wait(seconds):
            fired.append(True)
            fds.append(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))  # both ends: frees either

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield fired
    finally:
        stop.set()
        thread.join()
        for fd in fds:
            os.close(fd)
