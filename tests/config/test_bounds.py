"""Bounded, total validation: every hostile value is refused with one clear line, and
every number the schema accepts has a documented upper bound."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from accel.config import schema
from accel.config._yamlparse import MAX_DEPTH
from accel.config.resolve import env_values, flag_value, validate_document
from accel.config.yamlio import load_yaml_text
from accel.errors import ConfigError, UsageError
from tests_paths import ROOT

DIGITS_400 = "9" * 400
HOSTILE_FILES = [
    (f"store:\n  lock_timeout: {DIGITS_400}\n", "a number of 400 digits"),
    (f"store:\n  lock_timeout: {'9' * 5000}\n", "a number of 5000 digits"),
    (f"store:\n  lock_timeout: {DIGITS_400}s\n", "store.lock_timeout: expected a duration"),
    ("launch:\n  stop_grace_period: 1e999\n", "at most 1h), got inf"),
    ("store:\n  lock_timeout: 1e999\n", "store.lock_timeout: expected a duration"),
    ("store:\n  lock_timeout: .inf\n", "store.lock_timeout: expected a duration"),
    ("launch:\n  stop_grace_period: .nan\n", "launch.stop_grace_period: expected a duration"),
    ("launch:\n  stop_grace_period: 2h\n", "(at most 1h), got '2h'"),
    ("store:\n  lock_timeout: 3w\n", "(at most 1d)"),
    ("launch:\n  hang_timeout: 5w\n", "launch.hang_timeout: expected a duration"),
    ("logs:\n  resource_interval: 0\n", "(from 0.1s to 1d), got 0"),
    ("launch:\n  num_processes: 100000\n", "from 1 to 1024 or 'auto', got 100000"),
    ("launch:\n  num_machines: 70000\n", "from 1 to 65536"),
    ("launch:\n  machine_rank: 65536\n", "from 0 to 65535"),
    (f"launch:\n  max_restarts: {'9' * 90}\n", "(90 characters)"),
    ("checkpoints:\n  keep_last: 1000001\n", "from 1 to 1000000"),
    ("logs:\n  backup_count: 1001\n", "from 0 to 1000"),
    ("logs:\n  rotate_max_bytes: 2TiB\n", "(at most 1 TiB)"),
    ("cache:\n  max_size: 9EB\n", "cache.max_size: expected a size"),
    ("launch:\n  gpu_ids: [5000]\n", "(0 to 1023)"),
    ("launch:\n  env:\n    A: " + "x" * 140_000 + "\n", "longer than 131071 bytes"),
    ("launch:\n  rdzv_id: " + "x" * 5000 + "\n", "at most 4096 characters"),
    # a line break in an id or a path: `config get` printed it raw, set failed 'safely'
    ('launch:\n  rdzv_id: "job\\nother"\n', "launch.rdzv_id: expected a string or null on one"),
    (
        'workspace:\n  path: "data\\u0085x"\n',
        "workspace.path: expected a folder path or null on one",
    ),
    ("a: " + "[" * 2000 + "]" * 2000 + "\n", f"nested more than {MAX_DEPTH} levels deep"),
    ("a:" + "".join(f"\n{'  ' * i}k{i}:" for i in range(1, 200)) + " 1\n", "levels deep"),
    # an alias inside its own anchor: the walk followed it until Python's recursion limit
    ("a: &x [*x]\n", "an alias refers to its own anchor"),
    ("a: &x {b: *x}\n", "an alias refers to its own anchor"),
    ("a: &x\n  b:\n    - c: *x\n", "an alias refers to its own anchor"),
    ("? &k [*k]\n: 1\n", "keys must be plain strings"),
    # aliases nest without brackets: each adds a level the parser's events never show
    (
        "".join(f"a{i}: &a{i} [{f'*a{i - 1}' if i else 1}]\n" for i in range(40)),
        f"nested more than {MAX_DEPTH} levels deep",
    ),
]


@pytest.mark.parametrize(("text", "message"), HOSTILE_FILES, ids=range(len(HOSTILE_FILES)))
def test_hostile_files_are_refused_with_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_document(load_yaml_text(text, "c.yaml"), "c.yaml")
    shown = str(caught.value)
    assert message in shown and shown.startswith("c.yaml:")
    assert "\n" not in shown and len(shown) < 300, shown


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("ACCEL_STORE_LOCK_TIMEOUT", f"{DIGITS_400}s"),
        ("ACCEL_STORE_LOCK_TIMEOUT", "2d"),
        ("ACCEL_LAUNCH_MAX_RESTARTS", DIGITS_400),
        ("ACCEL_LAUNCH_NUM_PROCESSES", "2000"),
        ("ACCEL_LOGS_BACKUP_COUNT", "1" * 5000),
    ],
)
def test_hostile_environment_values_are_refused(var: str, value: str) -> None:
    with pytest.raises(ConfigError, match=var):
        env_values({var: value})


@pytest.mark.parametrize(
    ("var", "value", "reason"),
    [
        # json's parser recurses: 100,000 brackets (2000 before Python 3.13) were a
        # RecursionError, a crash in every command
        (
            "ACCEL_LAUNCH_ENV",
            '{"a":' + "[" * 100_000 + "]" * 100_000 + "}",
            "expected a JSON object",
        ),
        (
            "ACCEL_LAUNCH_ENV",
            '{"A": 1.5e400}',
            "value of A must be a string, got a number that is not finite",
        ),
        # a reason, not a blank after the colon
        (
            "ACCEL_LAUNCH_GPU_IDS",
            "cuda:0",
            "list of GPU indices like [0, 1] (0 to 1023), got 'cuda:0'",
        ),
        ("ACCEL_LAUNCH_GPU_IDS", "[0, x]", "got '[0, x]'"),
        ("ACCEL_LAUNCH_GPU_IDS", "1.5", "got '1.5'"),
    ],
)
def test_a_malformed_environment_value_says_what_is_wrong(
    var: str, value: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        env_values({var: value})
    shown = str(caught.value)
    assert reason in shown and var in shown and "\n" not in shown, shown


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("launch.stop_grace_period", "2h"),
        ("launch.max_restarts", DIGITS_400),
        ("launch.max_restarts", 10**400),
        ("launch.num_machines", 65537),
    ],
)
def test_hostile_flags_are_refused(key: str, value: object) -> None:
    with pytest.raises(UsageError):
        flag_value(key, value)


def test_every_number_has_an_upper_bound_and_the_docs_state_it() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    for f in schema.FIELDS:
        if f.kind in ("int", "int_or_auto", "duration", "size"):
            assert f.maximum is not None, f.key
            assert schema.coerce(f, f.default) == f.default
            row = next(line for line in page.splitlines() if line.startswith(f"| `{f.key}`"))
            assert f.bounds in row, (f.key, f.bounds)


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("args", [["config", "show"], ["status"], ["launch", "t.py"]])
def test_commands_refuse_a_hostile_config_in_one_line(
    project: Path, accel_exe: list[str], args: list[str]
) -> None:
    config = project / ".accelerate" / "config" / "accelerate_config.yaml"
    config.parent.mkdir(parents=True)
    (project / "t.py").write_text("print(1)\n")
    for text, message in HOSTILE_FILES[:2] + HOSTILE_FILES[3:5] + HOSTILE_FILES[-2:]:
        config.write_text(text)
        done = subprocess.run(
            [*accel_exe, *args],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
        )
        err = done.stderr.strip()
        # status only reads: it shows the workspace anyway, the error as its warning
        assert done.returncode == (0 if args == ["status"] else 2), (args, err)
        assert message in err and len(err.splitlines()) == 1, err
        assert "unexpected" not in err


@pytest.mark.parametrize("name", ["a" * 128, "_private", "exp.1-b_2", "7"])
def test_a_run_name_is_any_series_name(name: str) -> None:
    from accel.store.series import check_series

    # the config took 100 characters from a letter or digit, the store 128 from '_' too
    assert flag_value("launch.run_name", name) == check_series(name) == name


@pytest.mark.parametrize("name", ["a" * 129, "", "-x", ".hidden", "my exp"])
def test_a_run_name_that_is_no_series_name_says_the_rule(name: str) -> None:
    with pytest.raises(UsageError) as caught:
        flag_value("launch.run_name", name)
    assert "1 to 128 letters, digits, '.', '_' or '-', not starting with '.' or '-'" in str(
        caught.value
    )
    assert "4096" not in str(caught.value)  # a string's limit, not this name's


@pytest.mark.parametrize("text", ["30", "2.5", " 7 "])
def test_a_typed_duration_without_a_unit_asks_for_one(text: str) -> None:
    # it said only "expected a duration like 30s, ...", while the file takes 30 as seconds
    with pytest.raises(UsageError, match=re.escape(f"add a unit ({text.strip()}s)")):
        flag_value("launch.hang_timeout", text)
