"""Checkpoint save and load against the disk's limit and their peers, in one run.

    python benchmarks/bench_checkpoint.py [--mib 256] [--saves 8] [--rounds 2]
        [--pause 0.5] [--dir PATH] [--device cpu|cuda] [--profile]

The state is ``--mib`` MiB of float32 tensors of 16 MiB on ``--device`` (the raw
baseline writes the same bytes from a host copy made once). In one process, on one
filesystem (``--dir``, default a temp folder):

- save, back to back: each contender saves ``--saves`` times in a row, the contenders
  in turn, ``--rounds`` times; median and p90 of every save:
  raw ``write()`` of the state's bytes + fsync, overwriting one file (the disk's limit),
  ``torch.save`` + fsync, ``safetensors.torch.save_file`` + fsync and
  ``torch.distributed.checkpoint.save`` (which fsyncs its files) when installed, and
  ``ws.checkpoints.save`` (temp folder, xxh3 checksums, fsync of every file, manifest,
  rename, folder fsyncs) with retention ``keep_last: 2`` and ``keep_last: null``
  (after each block, untimed, accel's last background delete is waited for, so that
  it does not land on the next contender);
- save with pauses: the same, ``--pause`` seconds between saves (raw, torch.save,
  accel with ``keep_last: 2``);
- load, warm (every file read once just before) and cold (its pages dropped from the
  page cache first with ``posix_fadvise(POSIX_FADV_DONTNEED)`` after fsync):
  ``torch.load(weights_only=True)``, ``safetensors.torch.load_file``,
  ``ws.checkpoints.load`` (sizes and checksums verified);
- async: the time ``save(async_save=True)`` blocks the caller (the first one, which
  allocates the snapshot buffers, not counted) against a sync save's median, and
  against its physical limit: a consistent snapshot of CPU tensors is one copy of
  their bytes, timed here as the bare memcpy of the same bytes into buffers already
  touched, on every core (8 MiB ``numpy.copyto`` pieces).

``--profile`` adds where accel's save time goes, per phase (:mod:`accel.store._trace`).
Prints the ratios against the named baselines; exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MiB = 1 << 20
Saver = Callable[[int], None]


# -- filesystem helpers ---------------------------------------------------------------


def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _drop_cache(path: Path) -> None:
    """Cold: the files' (clean, fsynced) pages leave the page cache."""
    for file in _files(path):
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _warm_cache(path: Path) -> None:
    for file in _files(path):
        with open(file, "rb", buffering=0) as fh:
            while fh.read(16 * MiB):
                pass


def _fs_of(path: Path) -> str:
    best = ("?", "")
    with open("/proc/mounts", encoding="utf-8") as fh:
        for line in fh:
            _, mount, fstype, options, *_ = line.split()
            if str(path).startswith(mount) and len(mount) >= len(best[1]):
                best = (f"{fstype} ({options})", mount)
    return best[0]


# -- the contenders ---------------------------------------------------------------------


def _raw(state: dict[str, Any], path: Path) -> Saver:
    import torch

    views = [t.cpu().reshape(-1).view(torch.uint8).numpy() for t in state.values()]

    def save(_: int) -> None:
        with open(path, "wb", buffering=0) as fh:
            for view in views:
                data = memoryview(view)
                while data.nbytes:
                    data = data[fh.write(data) :]
            os.fsync(fh.fileno())

    return save


def _torch(state: dict[str, Any], path: Path) -> Saver:
    import torch

    def save(_: int) -> None:
        torch.save(state, path)
        _fsync(path)

    return save


def _safetensors(state: dict[str, Any], path: Path) -> Saver | None:
    try:
        from safetensors.torch import save_file
    except ImportError:
        return None

    def save(_: int) -> None:
        save_file(state, str(path))
        _fsync(path)

    return save


def _dcp(state: dict[str, Any], folder: Path) -> Saver | None:
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:
        return None

    # One process, no process group: say so once instead of warning at every save.
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.distributed")

    def save(_: int) -> None:  # its writer fsyncs every file
        writer = dcp.FileSystemWriter(str(folder), sync_files=True, overwrite=True)
        dcp.save(state, storage_writer=writer, no_dist=True)

    return save


def _accel(ws: Any, state: dict[str, Any], steps: Iterator[int]) -> Saver:
    return lambda _: ws.checkpoints.save(state, next(steps), async_save=False)


# -- measuring --------------------------------------------------------------------------


class Profile:
    """Per-phase seconds of each timed accel save (``--profile``)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.saves: dict[str, list[dict[str, float]]] = defaultdict(list)

    @contextlib.contextmanager
    def save(self, name: str) -> Iterator[None]:
        if not self.enabled or not name.startswith("accel"):
            yield
            return
        from accel.store._trace import recording

        with recording() as spans:
            start = time.perf_counter()
            yield
            total = time.perf_counter() - start
        phases: dict[str, float] = defaultdict(float, total=total)
        for span in spans:
            phases[span.name] += span.seconds
        self.saves[name].append(phases)


def _time_saves(
    savers: dict[str, Saver],
    count: int,
    pause: float,
    samples: dict[str, list[float]],
    prof: Profile,
    settle: Callable[[], Any],
) -> None:
    for name, save in savers.items():
        for i in range(count):
            with prof.save(name):
                start = time.perf_counter()
                save(i)
                samples[name].append(time.perf_counter() - start)
            if pause:
                time.sleep(pause)
        settle()  # the last retention delete must not land on the next contender


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


# -- the run ----------------------------------------------------------------------------


def _state(mib: int, device: str) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    count = max(1, mib // 16)
    return {f"layer{i}.weight": torch.randn(4 * MiB, device=device) for i in range(count)}


def _workspace(root: Path, keep: str) -> Any:
    from accel import Workspace

    env = {**os.environ, "ACCEL_CHECKPOINTS_KEEP_LAST": keep}
    return Workspace(root / ".accelerate", env=env).ensure()


def run(args: argparse.Namespace, scratch: Path) -> bool:
    import torch

    state = _state(args.mib, args.device)
    mib = sum(t.numel() * t.element_size() for t in state.values()) / MiB
    steps = iter(range(1, 10**9))
    ws2, ws_null = _workspace(scratch / "keep2", "2"), _workspace(scratch / "keepnull", "null")
    savers: dict[str, Saver | None] = {
        "raw write+fsync": _raw(state, scratch / "raw.bin"),
        "torch.save+fsync": _torch(state, scratch / "torch.pt"),
        "safetensors save_file+fsync": _safetensors(state, scratch / "st.safetensors"),
        "torch.distributed.checkpoint.save": _dcp(state, scratch / "dcp"),
        "accel keep_last=2": _accel(ws2, state, steps),
        "accel keep_last=null": _accel(ws_null, state, steps),
    }
    present = {name: s for name, s in savers.items() if s is not None}
    prof = Profile(args.profile)

    def settle() -> None:
        ws2.checkpoints.wait()
        ws_null.checkpoints.wait()

    for save in present.values():  # warm-up: first files, the lease, imports
        save(0)
    settle()
    b2b: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.rounds):
        _time_saves(present, args.saves, 0.0, b2b, prof, settle)
    paused: dict[str, list[float]] = defaultdict(list)
    names = ("raw write+fsync", "torch.save+fsync", "accel keep_last=2")
    paused_savers = {k: present[k] for k in names}
    _time_saves(paused_savers, args.saves, args.pause, paused, Profile(False), settle)

    loads = _time_loads(scratch, ws2, args.saves)
    blocked = _time_async(ws2, state, steps, args.saves)

    where = args.device if args.device == "cpu" else torch.cuda.get_device_name()
    print(
        f"state {mib:.0f} MiB ({len(state)} float32 tensors on {where}), torch {torch.__version__}"
    )
    print(f"scratch on {_fs_of(scratch)}")
    ok = _report_saves("save, back to back", b2b, mib, goals=True)
    _report_saves(f"save, {args.pause:g} s pause between saves", paused, mib, goals=False)
    ok &= _report_loads(loads, mib)
    ratio = statistics.median(blocked) / statistics.median(b2b["accel keep_last=2"])
    ok &= _line("async save: blocked / sync save", ratio, 0.10, higher=False)
    floor = _time_memcpy(state, args.saves) if args.device == "cpu" else []
    print(f"  (blocked median {statistics.median(blocked) * 1000:.0f} ms, p90 ", end="")
    print(f"{_p90(blocked) * 1000:.0f} ms)")
    if floor:
        low = statistics.median(floor)
        print(
            f"  memcpy of the same bytes (the limit of a snapshot): median {low * 1000:.0f} ms"
            f" = {low / statistics.median(b2b['accel keep_last=2']):.2f} of a sync save;"
            f" blocked / memcpy {statistics.median(blocked) / low:.2f}"
        )
    if args.profile:
        _report_profile(prof)
    return ok


def _time_loads(scratch: Path, ws: Any, count: int) -> dict[str, list[float]]:
    import torch

    step = ws.checkpoints.latest().step
    readers: dict[str, tuple[Path, Callable[[], Any]]] = {
        "torch.load(weights_only=True)": (
            scratch / "torch.pt",
            lambda: torch.load(scratch / "torch.pt", weights_only=True, map_location="cpu"),
        ),
        "accel checkpoints.load": (
            ws.checkpoints.latest().path,
            lambda: ws.checkpoints.load(step),
        ),
    }
    with contextlib.suppress(ImportError):
        from safetensors.torch import load_file

        path = scratch / "st.safetensors"
        readers["safetensors load_file"] = (path, lambda: load_file(str(path)))
    samples: dict[str, list[float]] = defaultdict(list)
    for _ in range(count):
        for name, (path, load) in readers.items():
            for kind, prepare in (("warm", _warm_cache), ("cold", _drop_cache)):
                prepare(path)
                start = time.perf_counter()
                loaded = load()
                samples[f"{name}|{kind}"].append(time.perf_counter() - start)
                del loaded
    return samples


def _time_async(ws: Any, state: dict[str, Any], steps: Iterator[int], count: int) -> list[float]:
    blocked = []
    for i in range(count + 1):
        start = time.perf_counter()
        ws.checkpoints.save(state, next(steps), async_save=True)
        if i:  # the first allocates the snapshot buffers every later save reuses
            blocked.append(time.perf_counter() - start)
        ws.checkpoints.wait()
    return blocked


def _time_memcpy(state: dict[str, Any], count: int) -> list[float]:
    """The bare copy of the state's bytes into buffers already touched, on every core."""
    from _timing import memcpy_times

    return memcpy_times(list(state.values()), count)


# -- reporting --------------------------------------------------------------------------


def _line(name: str, ratio: float, goal: float, *, higher: bool) -> bool:
    met = ratio >= goal if higher else ratio <= goal
    sign = ">=" if higher else "<="
    print(f"  {name:<52} {ratio:5.2f}  goal {sign} {goal:.2f}  {'ok' if met else 'MISSED'}")
    return met


def _report_saves(title: str, samples: dict[str, list[float]], mib: float, *, goals: bool) -> bool:
    raw = statistics.median(samples["raw write+fsync"])
    bare = statistics.median(samples["torch.save+fsync"])
    print(f"\n{title} ({len(samples['raw write+fsync'])} saves each)")
    print(
        f"  {'':<36} {'median':>7} {'p90':>7} {'MiB/s':>6} {'p90/med':>7} {'vs raw':>6} {'vs torch':>8}"
    )
    for name, values in samples.items():
        med, p90 = statistics.median(values), _p90(values)
        print(
            f"  {name:<36} {med * 1000:5.0f}ms {p90 * 1000:5.0f}ms {mib / med:6.0f} "
            f"{p90 / med:7.2f} {raw / med:6.2f} {bare / med:8.2f}"
        )
    ok = True
    for name in ("accel keep_last=2", "accel keep_last=null") if goals else ():
        values = samples[name]
        med = statistics.median(values)
        ok &= _line(f"{name}: throughput / raw write+fsync", raw / med, 0.80, higher=True)
        ok &= _line(f"{name}: p90 / median", _p90(values) / med, 1.25, higher=False)
        ok &= _line(f"{name}: throughput / torch.save+fsync", bare / med, 1.20, higher=True)
    return ok


def _report_loads(samples: dict[str, list[float]], mib: float) -> bool:
    ok = True
    for kind, goal in (("warm", 1.20), ("cold", 1.00)):
        base = statistics.median(samples[f"torch.load(weights_only=True)|{kind}"])
        print(f"\nload, {kind} page cache" + (" (posix_fadvise DONTNEED first)" * (kind == "cold")))
        for key, values in samples.items():
            name, _, which = key.partition("|")
            if which == kind:
                med = statistics.median(values)
                print(f"  {name:<36} {med * 1000:5.0f}ms {mib / med:6.0f} MiB/s  {base / med:5.2f}")
        accel = statistics.median(samples[f"accel checkpoints.load|{kind}"])
        ok &= _line(f"accel load throughput / torch.load, {kind}", base / accel, goal, higher=True)
    return ok


def _report_profile(prof: Profile) -> None:
    for name, saves in prof.saves.items():
        keys = sorted(
            {k for s in saves for k in s}, key=lambda k: -statistics.median(s[k] for s in saves)
        )
        print(f"\nwhere the time of '{name}' goes, ms per save: median (max)")
        for key in keys:
            values = [s[key] * 1000 for s in saves]
            print(f"  {key:<16} {statistics.median(values):6.1f} ({max(values):6.1f})")


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="the state's")
    parser.add_argument("--saves", type=int, default=8, help="saves in a row per contender")
    parser.add_argument("--rounds", type=int, default=2, help="turns of the back-to-back blocks")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between paused saves")
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--profile", action="store_true", help="per-phase time of accel saves")
    args = parser.parse_args()
    if args.saves < 2:
        parser.error("--saves must be at least 2 (a p90 needs samples)")
    if args.device == "cuda" and not _has_cuda():
        parser.error("--device cuda: torch sees no CUDA device here")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    scratch = Path(tempfile.mkdtemp(prefix="accel-bench-ckpt-", dir=args.dir))
    try:
        ok = run(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
