"""What a crash costs: kill one rank, restart, time it to the first trained step.

    python benchmarks/bench_recovery.py [--rounds 5] [--steps 30] [--kill-at 25] [--quick]
        [--launcher NAME ...]

One job (benchmarks/_recovery_train.py: 2 ranks on the CPU, gloo, 5 x Linear(2048),
about 21M parameters, Adam) under three launchers, each with ``--max-restarts 1``:

- ``torchrun``, resuming as pytorch/examples does: ``torch.save`` of the model and the
  optimizer every 10 steps, ``torch.load`` on start;
- ``accel launch`` with ``checkpoints.snapshot_every: 1`` (a snapshot of every step in
  the launcher's shared memory, which it commits as a checkpoint when the rank dies);
- ``accel launch --preload``, the same, workers forked from a template holding torch.

In each round rank 1 SIGKILLs itself as step ``--kill-at`` begins; the launchers take
turns (the order rotated each round). Per launcher: the seconds from the kill to rank
0's first trained step after the restart (median and p90 over the rounds), the steps
lost (trained before the kill and trained again), and whether the final weights equal,
bit for bit, those of an uninterrupted run of the same script; and where that time goes
(rank 0 of the restart: from the kill to the script's start, then the process group, the
model built, DDP or ``prepare``, the state loaded, the first step). In the same run, the physical floors: a bare
interpreter start and ``import torch`` (a restart that execs), and writing rank 0's
state to a new file with fsync (a restart that commits the snapshot to disk first).

Goals (issue 28): kill -> training <= 1.0 s and <= 0.15 x torchrun's; at most 1 step
lost; every round bitwise identical. Exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _timing import accel_exe, p90

SCRIPT = Path(__file__).with_name("_recovery_train.py")
LAUNCHERS = ["torchrun", "accel launch", "accel launch --preload"]
PHASE_MARKS = ("start", "group", "built", "model", "loaded")  # by _recovery_train.py
PHASES = (
    "kill -> script starts",  # failure seen, persist, stop, rendezvous, exec or fork
    "process group",
    "model built",  # the script's own net(): the same under every launcher
    "DDP / prepare",
    "state loaded",
    "first step",
)


def command(
    launcher: str, out: Path, args: argparse.Namespace, kill_at: int, name: str
) -> list[str]:
    job = [str(SCRIPT), "plain" if launcher == "torchrun" else "accel", str(out)]
    job += [str(args.steps), str(kill_at)]
    if launcher == "torchrun":
        torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
        return [torchrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", *job]
    preload = ["--preload"] if "preload" in launcher else []
    return [
        accel_exe(),
        "launch",
        "-n",
        "2",
        "--max-restarts",
        "1",
        "--run-name",
        name,
        *preload,
        *job,
    ]


def run(launcher: str, args: argparse.Namespace, project: Path, kill_at: int, name: str) -> dict:
    out = project / "out" / name
    out.mkdir(parents=True)
    env = {
        **os.environ,
        "HOME": str(project),
        "ACCEL_WORKSPACE": str(project / ".accelerate"),
        "ACCEL_CHECKPOINTS_SNAPSHOT_EVERY": "1",
        "OMP_NUM_THREADS": "1",
    }
    if launcher == "torchrun":
        # torch's agent keeps one TCPStore across attempts and does not prefix the
        # workers' keys per attempt: restarted gloo ranks dial their predecessors' stale
        # addresses and fail or hang (torch 2.13: every quick round here). This is the
        # setting accel launch makes for restarts (_torch_compat.agent_environment).
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    try:
        done = subprocess.run(
            command(launcher, out, args, kill_at, name),
            cwd=project, env=env, capture_output=True, text=True, timeout=args.timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"hung": True}
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-4000:])
        return {"failed": done.returncode}
    result: dict = {"weights": (out / "weights").read_bytes()}
    if kill_at:
        kill = float((out / "kill").read_text())
        result["recovery"] = float((out / "first").read_text()) - kill
        result["lost"] = (kill_at - 1) - int((out / "resumed").read_text())
        phases = json.loads((out / "phases").read_text())
        marks = [kill, *(phases[name] for name in PHASE_MARKS), float((out / "first").read_text())]
        result["phases"] = [b - a for a, b in itertools.pairwise(marks)]
    return result


def write_floor(folder: Path, size: int, runs: int = 3) -> float:
    """Median seconds to write ``size`` bytes to a new file in ``folder`` and fsync it:
    the physical floor of committing the state to disk before a restart."""
    data = os.urandom(1 << 20) * (size >> 20)
    times = []
    for i in range(runs):
        path = folder / f"floor-{i}.bin"
        start = time.perf_counter()
        with path.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        times.append(time.perf_counter() - start)
        path.unlink()
    return statistics.median(times)


def floor(runs: int = 3) -> tuple[float, float]:
    """Median seconds of a bare interpreter start and of ``import torch``."""

    def timed(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - start

    bare = statistics.median(timed("pass") for _ in range(runs))
    torch = statistics.median(timed("import torch") for _ in range(runs))
    return bare, torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--kill-at", type=int, default=25)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true", help="1 round, 12 steps, kill at 8")
    parser.add_argument(
        "--launcher", action="append", choices=LAUNCHERS,
        help="only this launcher (repeatable; the trials of many rounds: --rounds 100)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps, args.kill_at = 1, 12, 8
    launchers = [name for name in LAUNCHERS if name in (args.launcher or LAUNCHERS)]
    results: dict[str, list[dict]] = {name: [] for name in launchers}
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        subprocess.run(
            [accel_exe(), "config", "--default"], cwd=project, check=True, capture_output=True,
            env={**os.environ, "HOME": folder, "ACCEL_WORKSPACE": f"{folder}/.accelerate"},
        )  # fmt: skip
        reference = {
            script: run(launcher, args, project, 0, f"ref-{script}")
            for script, launcher in (("plain", "torchrun"), ("accel", "accel launch"))
            if script == "accel" or "torchrun" in launchers
        }
        bare, torch_import = floor()
        # rank 0's state: 5 x Linear(2048) parameters and Adam's two moments, float32
        state_bytes = 3 * 4 * 5 * (2048 * 2048 + 2048)
        disk = write_floor(project, state_bytes)
        for round_ in range(args.rounds):
            turn = round_ % len(launchers)
            for launcher in launchers[turn:] + launchers[:turn]:
                name = f"r{round_}-{LAUNCHERS.index(launcher)}"
                results[launcher].append(run(launcher, args, project, args.kill_at, name))
                print(f"round {round_ + 1}: {launcher}: done", file=sys.stderr)
    return 0 if report(results, reference, args, (bare, torch_import, disk, state_bytes)) else 1


def report(
    results: dict[str, list[dict]], reference: dict[str, dict], args: argparse.Namespace,
    floors: tuple[float, float, float, int],
) -> bool:  # fmt: skip
    bare, torch_import, disk, state_bytes = floors
    print(
        f"\n2 ranks, 5 x Linear(2048) + Adam (CPU, gloo), {args.steps} steps, rank 1 "
        f"SIGKILLed as step {args.kill_at} begins, --max-restarts 1; {args.rounds} round(s)"
    )
    print(f"{'launcher':<26}{'kill->trained median':>21}{'p90':>8}{'steps lost':>12}"
          f"{'bitwise':>9}{'hung/failed':>13}")  # fmt: skip
    medians = {}
    ok = True
    for launcher, rounds in results.items():
        good = [r for r in rounds if "recovery" in r]
        bad = len(rounds) - len(good)
        ref = reference["plain" if launcher == "torchrun" else "accel"].get("weights")
        same = sum(r["weights"] == ref for r in good)
        times = [r["recovery"] for r in good]
        losses = sorted(r["lost"] for r in good)
        lost = losses[-1] if losses else -1
        medians[launcher] = statistics.median(times) if times else float("nan")
        shown = f"{medians[launcher]:18.2f} s{p90(times):7.2f}s" if times else " " * 28
        each = ",".join(map(str, losses)) or "-"
        if len(losses) > 10:  # the trials: how many rounds lost how many steps
            each = " ".join(f"{n}:{losses.count(n)}x" for n in sorted(set(losses)))
        print(f"{launcher:<26}{shown}{each:>12}{f'{same}/{len(rounds)}':>9}{bad:>13}")
        if launcher != "torchrun":
            ok &= bool(times) and lost <= 1 and same == len(rounds) and not bad
    print(f"{'a bare interpreter start':<26}{bare:18.2f} s")
    print(f"{'python -c import torch':<26}{torch_import:18.2f} s")
    print(f"{'write+fsync of the state':<26}{disk:18.2f} s  ({state_bytes >> 20} MiB, rank 0's)")
    print("\nwhere the time goes after the kill, medians (s), rank 0 of the restart")
    print(f"{'launcher':<26}" + "".join(f"{name:>24}" for name in PHASES))
    for launcher, rounds in results.items():
        spans = [r["phases"] for r in rounds if "phases" in r]
        if spans:
            cells = [statistics.median(s[i] for s in spans) for i in range(len(PHASES))]
            print(f"{launcher:<26}" + "".join(f"{c:24.2f}" for c in cells))
    best = medians.get("accel launch --preload", float("nan"))
    goals = [("kill -> trained, accel launch --preload (s)", best, 1.0)]
    if "torchrun" in medians:
        goals.append(("the same / torchrun's", best / medians["torchrun"], 0.15))
    print("\ngoals")
    for name, value, goal in goals:
        met = value <= goal
        ok &= met
        print(f"  {name:<46} {value:7.3f}   goal <= {goal:.3f}  {'ok' if met else 'MISSED'}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
