from __future__ import annotations

import pytest

from accel.config.yamlio import load_yaml_text
from accel.errors import ConfigError


def test_yaml_12_scalars_keep_strings_that_yaml_11_would_mangle() -> None:
    doc = load_yaml_text("a: no\nb: 1:20\nc: on\nd: true\ne: 0x1f\nf: 012\ng: 1.5\n", "f.yaml")
    assert doc.data == {"a": "no", "b": "1:20", "c": "on", "d": True, "e": 31, "f": 12, "g": 1.5}


def test_a_date_is_text_as_in_yaml_12() -> None:
    # YAML 1.1 built a datetime.date: `run_name: 2024-01-01` was refused as `got datetime...`
    doc = load_yaml_text("launch:\n  run_name: 2024-01-01\n  rdzv_id: 2024-01-01 10:00:00\n", "f")
    assert doc.data == {"launch": {"run_name": "2024-01-01", "rdzv_id": "2024-01-01 10:00:00"}}


def test_lines_are_recorded_per_dotted_key() -> None:
    doc = load_yaml_text("launch:\n  num_processes: 2\n\ncache:\n  max_size: 1GB\n", "f.yaml")
    assert doc.lines == {"launch": 1, "launch.num_processes": 2, "cache": 4, "cache.max_size": 5}


def test_duplicate_keys_are_an_error_naming_both_lines() -> None:
    with pytest.raises(
        ConfigError, match=r"f.yaml:3: duplicate key 'launch.x' \(first at line 2\)"
    ):
        load_yaml_text("launch:\n  x: 1\n  x: 2\n", "f.yaml")


def test_syntax_error_names_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"^f.yaml:3: invalid YAML"):
        load_yaml_text("launch:\n  a: [1, 2\nb: 3\n", "f.yaml")


def test_a_tab_indent_says_to_indent_with_spaces() -> None:
    # an editor that indents with tabs: pyyaml says only that '\t' cannot start a token
    with pytest.raises(ConfigError) as refused:
        load_yaml_text("launch:\n\tnum_processes: 2\n", "f.yaml")
    assert str(refused.value) == (
        "f.yaml:2: invalid YAML: found character '\\t' that cannot start any token; "
        "indent with spaces (YAML allows no tabs there)"
    )


def test_object_building_tags_are_refused() -> None:
    with pytest.raises(ConfigError, match="f.yaml:1: unsupported YAML tag"):
        load_yaml_text("a: !!python/object/apply:os.system ['echo hi']\n", "f.yaml")
    with pytest.raises(ConfigError, match="f.yaml:1: invalid YAML.*constructor"):
        load_yaml_text("a: !!python/name:os.system ''\n", "f.yaml")


def test_alias_expansion_is_bounded() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    with pytest.raises(ConfigError, match="aliases expand too far"):
        load_yaml_text("\n".join(lines) + "\n", "bomb.yaml")


def test_empty_document_is_an_empty_mapping() -> None:
    assert load_yaml_text("# only a comment\n", "f.yaml").data == {}
