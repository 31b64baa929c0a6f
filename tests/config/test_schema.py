from __future__ import annotations

from pathlib import Path

import pytest

from accel.config import schema
from accel.config.resolve import validate_document
from accel.config.yamlio import load_yaml_text
from accel.errors import ConfigError, UsageError


def check(text: str) -> dict[str, object]:
    values, _ = validate_document(load_yaml_text(text, "c.yaml"), "c.yaml")
    return values


def test_valid_file_is_normalised() -> None:
    values = check(
        "version: 1\nlaunch:\n  num_processes: auto\n  mixed_precision: no\n  gpu_ids: [0, 1]\n"
        "  env: {A: 1}\n  rdzv_endpoint: 10.0.0.1:29500\ncache:\n  max_size: 20GB\n"
        "checkpoints:\n  keep_last: null\nlogs:\n  rotate_max_bytes: 1MiB\n"
    )
    assert values == {
        "launch.num_processes": "auto",
        "launch.mixed_precision": "no",
        "launch.gpu_ids": [0, 1],
        "launch.env": {"A": "1"},
        "launch.rdzv_endpoint": "10.0.0.1:29500",
        "cache.max_size": 20 * 10**9,
        "checkpoints.keep_last": None,
        "logs.rotate_max_bytes": 2**20,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "launch:\n  num_procs: 2\n",
            r"c.yaml:2: unknown key 'launch.num_procs'; did you mean 'launch.num_processes'\?",
        ),
        (
            "lanch:\n  num_processes: 2\n",
            r"c.yaml:1: unknown section 'lanch'; did you mean 'launch'\?",
        ),
        (
            "launch:\n  num_processes: two\n",
            r"c.yaml:2: launch.num_processes: expected an integer from 1 to 1024 or 'auto', got 'two'",
        ),
        (
            "launch:\n  num_processes: -1\n",
            r"c.yaml:2: launch.num_processes: expected an integer from 1 to 1024",
        ),
        (
            "launch:\n  max_restarts: -3\n",
            r"c.yaml:2: launch.max_restarts: expected an integer from 0 to 10000",
        ),
        (
            "launch:\n  mixed_precision: fp8\n",
            r"c.yaml:2: launch.mixed_precision: expected one of no, fp16, bf16",
        ),
        (
            "launch:\n  use_cpu: maybe\n",
            r"c.yaml:2: launch.use_cpu: expected true or false, got 'maybe'",
        ),
        ("launch:\n  machine_rank: 1:20\n", r"c.yaml:2: launch.machine_rank: expected an integer"),
        (
            "launch:\n  rdzv_endpoint: host:99999\n",
            r"c.yaml:2: launch.rdzv_endpoint: expected HOST:PORT",
        ),
        ("launch:\n  gpu_ids: [0, 0]\n", r"c.yaml:2: launch.gpu_ids"),
        ("launch:\n  env: {1BAD: x}\n", r"c.yaml:2: launch.env: invalid environment variable name"),
        ("cache:\n  max_size: 10QB\n", r"c.yaml:2: cache.max_size: expected a size"),
        ("store:\n  lock_timeout: 7dd\n", r"c.yaml:2: store.lock_timeout: expected a duration"),
        ("launch: 3\n", r"c.yaml:1: section 'launch' must be a mapping"),
        ("- a\n- b\n", r"c.yaml: expected a mapping of sections"),
        ("version: 99\n", r"c.yaml:1: config version 99 was written by a newer accel"),
        ("version: x\n", r"c.yaml:1: version: expected 1"),
        (  # a folder named by blanks alone: passed validate, then read as the data folder
            'workspace:\n  path: "   "\n',
            r"c.yaml:2: workspace.path: expected a folder path or null, got '   ', which is only",
        ),
    ],
)
def test_each_validation_error_names_file_line_key_and_expectation(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check(text)


def test_every_field_has_a_documented_valid_default() -> None:
    for f in schema.FIELDS:
        assert f.help
        assert schema.coerce(f, f.default) == f.default


def test_env_twin_names() -> None:
    assert schema.field("launch.num_processes").env_var == "ACCEL_LAUNCH_NUM_PROCESSES"
    assert schema.field("cache.max_size").env_var == "ACCEL_CACHE_MAX_SIZE"


def test_unknown_key_suggests() -> None:
    with pytest.raises(UsageError, match="did you mean 'checkpoints.keep_last'"):
        schema.field("checkpoints.keep_lst")


@pytest.mark.parametrize("key", ["launch.1", "launch.", "launch.x"])
def test_a_dotted_key_is_never_told_to_be_a_section(key: str) -> None:
    with pytest.raises(UsageError) as refused:
        schema.field(key)
    assert "did you mean 'launch'?" not in str(refused.value)


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("launch.nproc_per_node", "launch.num_processes"),  # torchrun's flag, as a key
        ("nproc-per-node", "launch.num_processes"),
        ("launch.nnodes", "launch.num_machines"),
        ("launch.node_rank", "launch.machine_rank"),
        ("launch.master_port", "launch.rdzv_endpoint"),
        ("checkpoints.save_total_limit", "checkpoints.keep_last"),  # HF Trainer's
        ("launch.fp16", "launch.mixed_precision"),
    ],
)
def test_an_other_launchers_name_suggests_the_key_it_means(typed: str, meant: str) -> None:
    with pytest.raises(UsageError, match=f"unknown config key '{typed}'; did you mean '{meant}'"):
        schema.field(typed)


def test_every_alias_names_a_real_key_and_shadows_none() -> None:
    assert set(schema.ALIASES.values()) <= set(schema.BY_KEY)
    short = {f.key.split(".", 1)[1] for f in schema.FIELDS}
    assert not set(schema.ALIASES) & (short | set(schema.SECTIONS))


def test_parse_text_reads_env_style_values() -> None:
    assert schema.parse_text(schema.field("launch.env"), "A=1,B=two") == {"A": "1", "B": "two"}
    assert schema.parse_text(schema.field("launch.env"), '{"A": "1"}') == {"A": "1"}
    # the form the project file writes it in, as `config set` is told it
    assert schema.parse_text(schema.field("launch.env"), "{A: x, B: 2}") == {"A": "x", "B": "2"}
    assert schema.parse_text(schema.field("launch.gpu_ids"), "0,2") == [0, 2]
    assert schema.parse_text(schema.field("launch.use_cpu"), "yes") is True
    assert schema.parse_text(schema.field("cache.max_size"), "none") is None


def test_a_malformed_mapping_never_quotes_its_text() -> None:
    with pytest.raises(ValueError) as refused:
        schema.parse_text(schema.field("launch.env"), "{TOKEN: hunter2, [}")
    assert "hunter2" not in str(refused.value)
    assert str(refused.value).startswith("expected a JSON object, a YAML mapping")


def test_json_schema_covers_every_key(tmp_path: Path) -> None:
    js = schema.json_schema()
    for f in schema.FIELDS:
        section, name = f.key.split(".", 1)
        assert name in js["properties"][section]["properties"]
