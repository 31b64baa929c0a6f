"""accel.telemetry: /proc parsing, CPU %, summaries, and the sampler on real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from accel.telemetry import (
    GpuStats,
    RankStats,
    ResourceSampler,
    ResourceSummary,
    Sample,
    _gpu,
    _proc,
    read_samples,
    summarize,
)

STAT = "4242 (py (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 0 2560 ..."


def test_parse_stat_survives_a_command_name_with_parentheses() -> None:
    r = _proc.parse_stat(STAT, uptime=40.0, ticks=100, page_size=4096, pid=4242)
    assert r is not None
    assert (r.cpu_seconds, r.age, r.rss_bytes, r.threads) == (3.0, 30.0, 2560 * 4096, 7)
    zombie = STAT.replace(") S ", ") Z ")
    assert _proc.parse_stat(zombie, uptime=40.0, ticks=100, page_size=4096, pid=4242) is None


def test_parse_stat_skips_a_process_whose_memory_is_already_released() -> None:
    # Between exit_mm() and becoming a zombie, an exiting process still shows R or D
    # with RSS 0; CI once sampled a rank in exactly that window and recorded 0 bytes.
    exiting = STAT.replace(" 2560 ...", " 0 ...")
    assert exiting != STAT
    assert _proc.parse_stat(exiting, uptime=40.0, ticks=100, page_size=4096, pid=4242) is None


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_real_process_tearing_down_never_reads_as_zero_memory() -> None:
    # Freeing 256 MiB takes long enough that a tight loop catches the exit window
    # (state R, RSS 0) every time; each reading must be the live process or nothing.
    read = _proc.reader()
    code = "b = bytearray(256 << 20); print(flush=True); input()"
    readings: list[_proc.ProcReading] = []
    for _ in range(3):
        with subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        ) as proc:
            assert proc.stdout is not None and proc.stdin is not None
            proc.stdout.readline()
            proc.stdin.close()
            while proc.poll() is None:
                reading = read(proc.pid)
                if reading is not None:
                    readings.append(reading)
    assert readings, "the reader never saw the live process"
    assert min(r.rss_bytes for r in readings) > 2**20


def test_cpu_percent_between_readings_since_start_and_on_pid_reuse() -> None:
    first = _proc.ProcReading(1, cpu_seconds=5.0, age=10.0, rss_bytes=0, threads=1)
    later = _proc.ProcReading(1, cpu_seconds=7.0, age=12.0, rss_bytes=0, threads=1)
    assert _proc.cpu_percent(None, first) == 50.0
    assert _proc.cpu_percent(first, later) == 100.0
    reused = _proc.ProcReading(1, cpu_seconds=0.5, age=1.0, rss_bytes=0, threads=1)
    assert _proc.cpu_percent(later, reused) == 50.0
    assert _proc.cpu_percent(None, _proc.ProcReading(1, 0.0, 0.0, 0, 1)) == 0.0


def test_linux_and_psutil_readers_agree_on_this_process() -> None:
    pytest.importorskip("psutil")
    linux = _proc._read_linux(os.getpid())
    ps = _proc._read_psutil(os.getpid())
    assert linux is not None and ps is not None
    assert abs(linux.rss_bytes - ps.rss_bytes) < 64 * 2**20
    assert linux.threads >= 1 and ps.threads >= 1
    assert _proc._read_linux(2**22 + 12345) is None and _proc._read_psutil(2**22 + 12345) is None


def _sample(t: float, cpu: float, rss: int, gpu_util: float | None = None) -> Sample:
    gpus = (GpuStats(0, "G", gpu_util, 10, 100, 50.0, None),) if gpu_util is not None else ()
    return Sample(time=t, ranks={0: RankStats(11, cpu, rss, 4)}, gpus=gpus)


def test_summary_peaks_and_means_skip_missing_values_and_round_trip() -> None:
    summary = summarize([_sample(1, 50.0, 100, 10.0), _sample(2, 150.0, 300, 30.0)])
    assert summary.samples == 2 and (summary.first, summary.last) == (1, 2)
    cpu = summary.ranks[0]["cpu_percent"]
    assert (cpu.peak, cpu.mean, cpu.count) == (150.0, 100.0, 2)
    assert summary.ranks[0]["rss_bytes"].peak == 300
    assert "gpu_memory_bytes" not in summary.ranks[0]
    assert summary.gpus[0]["util_percent"].mean == 20.0 and "power_w" not in summary.gpus[0]
    assert summary.gpu_memory_total == {0: 100}
    data = json.loads(json.dumps(summary.to_json()))
    assert ResourceSummary.from_json(data) == summary
    assert summarize([]) == ResourceSummary()
    assert ResourceSummary.from_json({"ranks": "garbage"}) == ResourceSummary()


def test_reading_skips_torn_and_foreign_lines(tmp_path: Path) -> None:
    path = tmp_path / "resources.jsonl"
    good = json.dumps(_sample(1, 1.0, 2).to_json())
    path.write_text(f'{good}\n\n[1, 2]\n{{"time": "x"}}\n{good[:20]}')
    assert read_samples(path) == [_sample(1, 1.0, 2)]
    assert read_samples(tmp_path / "missing.jsonl") == []


@pytest.fixture
def workers() -> Iterator[dict[int, subprocess.Popen[bytes]]]:
    busy = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    procs = {
        0: subprocess.Popen([sys.executable, "-c", busy]),
        1: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]),
    }
    yield procs
    for proc in procs.values():
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_sampler_records_real_workers_and_survives_one_exiting(
    tmp_path: Path, workers: dict[int, subprocess.Popen[bytes]]
) -> None:
    path = tmp_path / "run" / "resources.jsonl"
    pids = {rank: p.pid for rank, p in workers.items()}
    sampler = ResourceSampler(lambda: pids, path, interval=0.1, gpus=())
    with sampler:
        while sampler.count < 4:
            sampler._stop.wait(0.05)
        workers[1].kill()
        workers[1].wait()
        seen = sampler.count
        while sampler.count < seen + 2:
            sampler._stop.wait(0.05)
    samples = read_samples(path)
    assert len(samples) == sampler.count >= 6
    both = [s for s in samples if set(s.ranks) == {0, 1}]
    assert both and set(samples[-1].ranks) == {0}
    for sample in both:
        for rank, stats in sample.ranks.items():
            assert stats.pid == pids[rank] and stats.threads >= 1
            assert 1 * 2**20 < stats.rss_bytes < 4 * 2**30
            assert 0.0 <= stats.cpu_percent <= 100.0 * (os.cpu_count() or 1) + 50
    summary = summarize(samples)
    assert summary.ranks[0]["cpu_percent"].mean > summary.ranks[1]["cpu_percent"].mean


@pytest.mark.timeout(10)
def test_sampler_never_raises_on_a_broken_pid_source_or_an_unwritable_file(
    tmp_path: Path,
) -> None:
    def boom() -> dict[int, int]:
        raise RuntimeError("mid-restart")

    blocker = tmp_path / "file"
    blocker.write_text("")
    with ResourceSampler(boom, tmp_path / "r.jsonl", interval=0.05, gpus=()) as s:
        assert s.sample().ranks == {}
    with ResourceSampler(lambda: {0: os.getpid()}, blocker / "r.jsonl", 0.05, gpus=()) as s:
        assert s.sample().ranks[0].pid == os.getpid()
    assert s.count == 0


def test_no_gpu_here_means_no_gpu_readings() -> None:
    # This machine has no NVIDIA driver: NVML must quietly give nothing.
    if Path("/dev/nvidiactl").exists():
        pytest.skip("a GPU machine")
    assert _gpu.open_nvml() is None
    with ResourceSampler(lambda: {}, Path("unused"), 1.0) as sampler:
        assert sampler.sample().gpus == ()


class _NotSupported(Exception):
    pass


def _fake_pynvml(devices: int) -> types.ModuleType:
    def unsupported(*_: object) -> None:
        raise _NotSupported

    nv = types.ModuleType("pynvml")
    nv.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    nv.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nv.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    nv.nvmlDeviceGetCount = lambda: devices  # type: ignore[attr-defined]
    nv.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"  # type: ignore[attr-defined]
    nv.nvmlDeviceGetName = lambda h: b"Fake GPU"  # type: ignore[attr-defined]
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=87)  # type: ignore[attr-defined]
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=3 * 2**30, total=80 * 2**30)  # type: ignore[attr-defined]
    nv.nvmlDeviceGetTemperature = lambda h, kind: 61  # type: ignore[attr-defined]
    nv.nvmlDeviceGetPowerUsage = unsupported  # type: ignore[attr-defined]
    nv.nvmlDeviceGetComputeRunningProcesses = lambda h: [  # type: ignore[attr-defined]
        types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=2**30)
    ]
    return nv


def test_nvml_readings_with_a_fake_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(2))
    nvml = _gpu.open_nvml([1, 5])
    assert nvml is not None and nvml.indices == [1]
    (gpu,) = nvml.read()
    assert gpu == GpuStats(1, "Fake GPU", 87.0, 3 * 2**30, 80 * 2**30, 61.0, None)
    sampler = ResourceSampler(lambda: {0: os.getpid()}, Path("unused"), 1.0, gpus=[1]).start()
    sample = sampler.sample()
    sampler.stop()
    assert sample.ranks[0].gpu_memory_bytes == 2**30 and sample.gpus == (gpu,)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(0))
    assert _gpu.open_nvml() is None
