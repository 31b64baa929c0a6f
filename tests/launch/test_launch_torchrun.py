"""Every flag of torchrun's own parser under ``accel launch``: taken with torchrun's
meaning, or accepted with one line of what accel does instead. The list comes from the
installed torch, so a release that adds a flag fails here until it is placed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
from launchutil import SCRIPTS, dry_run_json, refused

from accel.cli._launch_torchrun import DEFAULT_SIGNALS, NOTED, NUMA_MODES, START_METHODS
from accel.cli.main import main
from run_helpers import Accel

SCRIPT = str(SCRIPTS / "env_dump.py")

# torchrun's dest -> a value it takes (None: a flag without a value).
SAMPLES: dict[str, str | None] = {
    "nnodes": "1",
    "nproc_per_node": "2",
    "rdzv_backend": "c10d",
    "rdzv_endpoint": "localhost:0",
    "rdzv_id": "job-1",
    "rdzv_conf": "join_timeout=900,last_call_timeout=5",
    "standalone": None,
    "max_restarts": "2",
    "monitor_interval": "1",
    "start_method": "fork",
    "event_log_handler": "console",
    "role": "trainer",
    "module": None,
    "no_python": None,
    "run_path": None,
    "tee": "3",
    "redirects": "0:3",
    "log_dir": "/tmp/accel-never-made/logs",  # a dry run makes nothing
    "local_ranks_filter": "0",
    "duplicate_stdout_filters": "loss,step",
    "duplicate_stderr_filters": "Error",
    "node_rank": "0",
    "master_addr": "127.0.0.1",
    "master_port": "29511",
    "local_addr": "127.0.0.1",
    "logs_specs": "default",
    "numa_binding": "node",
    "signals_to_handle": "SIGTERM,SIGUSR1",
    "shutdown_timeout": "20",
    "virtual_local_rank": None,
    "log_line_prefix_template": "${hostname}:${rank}: ",  # torch >= 2.15
    "print_completion": "zsh",  # torch >= 2.15: prints a completion script, exits
}
EAGER = {"print_completion"}  # torchrun's action prints and exits (with shtab installed)


def torchrun_actions() -> list[Any]:
    from torch.distributed.run import get_args_parser

    return [a for a in get_args_parser()._actions if a.option_strings and a.dest != "help"]


def torchrun_parse(*args: str) -> Any:
    from torch.distributed.run import get_args_parser

    return get_args_parser().parse_args([*args, SCRIPT])


def test_every_torchrun_flag_is_placed() -> None:
    theirs = {a.dest for a in torchrun_actions()}
    assert theirs - set(SAMPLES) == set(), "a torchrun flag accel does not place"


@pytest.mark.parametrize(
    "option", sorted({o for a in torchrun_actions() for o in a.option_strings})
)
def test_each_spelling_of_each_flag_is_taken(
    capsys: pytest.CaptureFixture[str], project: Path, option: str
) -> None:
    dest = next(a.dest for a in torchrun_actions() if option in a.option_strings)
    value = SAMPLES[dest]
    args = [option] if value is None else [option, value]
    if dest not in EAGER:
        torchrun_parse(*args)  # torchrun takes it
    script = SCRIPT
    if dest == "module":
        (project / "pkg").mkdir()
        (project / "pkg" / "__init__.py").write_text("")
        script = "pkg"
    if dest == "no_python":
        script = sys.executable
    code = main(["launch", "--dry-run", "--cpu", *args, script])
    out, err = capsys.readouterr()
    if dest in EAGER:
        assert code == 0 and "_accel_completion" in out, err  # accel's script, for zsh
    else:
        assert code == 0, err
        if dest in NOTED:
            assert f"{option.replace('_', '-')} is accepted: {NOTED[dest]}" in out


def legacy_launcher_parser(monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """``python -m torch.distributed.launch``'s parser: torchrun's and what it adds."""
    import torch.distributed.launch as legacy

    parsers: list[argparse.ArgumentParser] = []
    parse = argparse.ArgumentParser.parse_args

    def keep(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        parsers.append(self)
        return parse(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(argparse.ArgumentParser, "parse_args", keep)
        legacy.parse_args([SCRIPT])
    return parsers[0]


def test_the_legacy_launchers_lines_run_unchanged(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m torch.distributed.launch --nproc_per_node=2 --use_env main.py`` (DeiT's,
    DETR's README) with ``accel launch`` in its place: its one flag of its own
    (``--use-env``) is torchrun's behaviour, which accel's is, so the workers get the
    command torch builds for it. (``No such option: --use-env`` until stop 55.)"""
    from torch.distributed.run import config_from_args

    parser = legacy_launcher_parser(monkeypatch)
    theirs = {a.dest for a in parser._actions if a.option_strings} - {"help"}
    assert theirs - {a.dest for a in torchrun_actions()} == {"use_env"}
    for spelling in ("--use_env", "--use-env"):
        args = parser.parse_args(["--nproc_per_node=2", spelling, SCRIPT, "--lr", "1"])
        _, _, their_args = config_from_args(args)
        got = dry_run_json(capsys, "--nproc_per_node=2", spelling, SCRIPT, "--lr", "1")
        assert got["worker_command"][-3:] == their_args[-3:] == [SCRIPT, "--lr", "1"]
        assert not any(a.startswith("--local-rank") for a in got["worker_command"])
        assert got["nproc_per_node"] == 2


def test_rendezvous_conf_is_torchruns(capsys: pytest.CaptureFixture[str]) -> None:
    from torch.distributed.elastic.rendezvous.utils import _parse_rendezvous_config

    conf = "join_timeout=900, last_call_timeout=5,is_host=1"
    got = dry_run_json(capsys, "--rdzv-conf", conf, "--local-addr", "10.1.2.3", SCRIPT)
    assert got["rdzv_conf"] == _parse_rendezvous_config(conf)
    assert got["local_addr"] == "10.1.2.3"


@pytest.mark.parametrize(
    ("conf", "said"),
    [
        ("join_timeout", "join_timeout takes a whole number of seconds"),
        ("join_timeout=soon", "join_timeout takes a whole number of seconds"),
        ("is_host=maybe", "is_host takes 1 or 0"),
        ("store_type=file", "expected KEY=VALUE with KEY one of join_timeout"),
        ("=3", "expected KEY=VALUE with KEY one of"),
    ],
)
def test_a_rendezvous_conf_torch_would_not_read_is_refused(
    capsys: pytest.CaptureFixture[str], conf: str, said: str
) -> None:
    assert said in refused(capsys, "--dry-run", "--rdzv-conf", conf)


def test_local_ranks_filter_and_shutdown_timeout_mean_what_they_mean_to_torchrun(
    capsys: pytest.CaptureFixture[str],
) -> None:
    theirs = torchrun_parse("--local-ranks-filter", "0,2")
    got = dry_run_json(capsys, "--local-ranks-filter", "0,2", "--shutdown-timeout", "20", SCRIPT)
    assert set(got["console_local_ranks"]) == set(map(int, theirs.local_ranks_filter.split(",")))
    if "shutdown_timeout" in {a.dest for a in torchrun_actions()}:  # torch >= 2.10
        assert float(torchrun_parse("--shutdown-timeout", "20").shutdown_timeout) == 20.0
    assert got["stop_grace_period"] == 20.0
    # accel's own spelling wins where both are given
    both = dry_run_json(capsys, "--shutdown-timeout", "20", "--stop-grace-period", "3s", SCRIPT)
    assert both["stop_grace_period"] == 3.0


def test_choices_are_torchruns() -> None:
    actions = {a.dest: a for a in torchrun_actions()}
    assert tuple(actions["start_method"].choices) == START_METHODS
    if "numa_binding" in actions:  # newer torch releases only
        assert tuple(actions["numa_binding"].choices) == NUMA_MODES


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--start-method", "thread"], "invalid value for --start-method"),
        (["--numa-binding", "gpu"], "invalid value for --numa-binding"),
        (["--signals-to-handle", "SIGTERM,SIGNOPE"], "'SIGNOPE' is not a signal name"),
        (["--local-ranks-filter", "first"], "invalid value for --local-ranks-filter"),
        (["--shutdown-timeout", "-1"], "invalid value for --shutdown-timeout"),
        (["--local-addr", "a b"], "invalid value for --local-addr"),
    ],
)
def test_a_bad_value_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    assert said in refused(capsys, "--dry-run", *args)


def test_torchruns_default_signals_say_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    default = getattr(torchrun_parse(), "signals_to_handle", ",".join(DEFAULT_SIGNALS))
    assert set(default.split(",")) == set(DEFAULT_SIGNALS)
    assert dry_run_json(capsys, "--signals-to-handle", default, SCRIPT)["notes"] == []
    notes = dry_run_json(capsys, "--signals-to-handle", "SIGUSR1", SCRIPT)["notes"]
    assert notes == [f"--signals-to-handle is accepted: {NOTED['signals_to_handle']}"]


def test_duplicate_filters_with_a_log_dir_say_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With --log-dir the filtered files are written, as torchrun writes them: nothing to
    say; without it (torchrun's files then go to a temporary folder) one line."""
    flags = ["--duplicate-stdout-filters", "loss", "--duplicate-stderr-filters", "Error"]
    notes = dry_run_json(capsys, *flags, "--log-dir", str(tmp_path / "logs"), SCRIPT)["notes"]
    assert notes == []
    notes = dry_run_json(capsys, *flags, SCRIPT)["notes"]
    assert notes == [
        f"--duplicate-{stream}-filters is accepted: {NOTED[f'duplicate_{stream}_filters']}"
        for stream in ("stdout", "stderr")
    ]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_torchtitans_line_runs_and_the_console_shows_the_filtered_rank(
    accel: Accel, project: Path
) -> None:
    """torchtitan's run_train.sh line, unchanged but for the launcher's name."""
    out = project / "out"
    out.mkdir()
    done = accel(
        "launch", "--nproc_per_node=2", "--rdzv_backend", "c10d", "--rdzv_endpoint=localhost:0",
        "--local-ranks-filter", "1", "--role", "rank", "--tee", "3",
        "--rdzv-conf", "join_timeout=120", "--local-addr", "127.0.0.1",
        SCRIPT, str(out), "--all-reduce", timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[rank1] hello from rank 1" in done.stdout
    assert "[rank0]" not in done.stdout + done.stderr  # the console shows local rank 1 only
    logs = sorted((project / ".accelerate" / "logs" / "runs").glob("*/rank-0.log"))
    assert "hello from rank 0" in logs[-1].read_text()  # its log keeps it
