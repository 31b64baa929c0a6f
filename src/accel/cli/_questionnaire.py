"""The interactive ``accel config`` questionnaire (terminal only).

It edits, never wipes: every question starts from the project file's value (or the
default), and only the answers that change something are written, into the existing
file, keeping its comments and the keys not asked about. A value an ``ACCEL_*`` variable
or the user's config sets is named beside its question, never written into the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel.cli import _output
from accel.config.resolve import ResolvedConfig, flag_value
from accel.errors import UsageError

QUESTIONS = (
    ("launch.num_processes", "Worker processes per machine (a number or auto)"),
    ("launch.num_machines", "How many machines"),
    ("launch.use_cpu", "Run on the CPU only (true/false)"),
    ("launch.mixed_precision", "Mixed precision (no/fp16/bf16)"),
    ("checkpoints.keep_last", "Checkpoints to keep per series (a number, or null for all)"),
)
ENDPOINT = ("launch.rdzv_endpoint", "Rendezvous endpoint HOST:PORT")


def ask(current: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
    """Every answer, keyed by config key; ``current`` gives the defaults shown (the
    project file's values), ``overrides`` what sets a key elsewhere for this shell."""
    from rich.prompt import Prompt

    values: dict[str, Any] = {}
    asked = list(QUESTIONS)
    while asked:
        key, question = asked.pop(0)
        if key in overrides:  # said, not silently written into the file git tracks
            _output.raw(f"  note: {overrides[key]} sets {key} for you, whatever the file says")
        values[key] = _ask_one(Prompt, key, question, current.get(key))
        if key == "launch.num_machines" and values[key] > 1:
            asked.append(ENDPOINT)
    return values


def overrides(config: ResolvedConfig) -> dict[str, str]:
    """Keys set by a layer above or beside the project file (an ``ACCEL_*`` variable,
    the user's config), each with where it comes from."""
    return {
        key: str(origin)
        for key, origin in config.origins.items()
        if origin.layer not in ("project", "default")
    }


def changes(answers: Mapping[str, Any], config: ResolvedConfig, fresh: bool) -> dict[str, Any]:
    """The answers to write: all of them into a new file; into an existing one, those
    that change the file's value (``config``: the file over the defaults) or that the
    file already sets."""
    if fresh:
        return dict(answers)
    return {
        key: value
        for key, value in answers.items()
        if value != config.values.get(key) or config.origins[key].layer == "project"
    }


def shown(value: Any) -> str | None:
    """A value as the user would type it back."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _ask_one(prompt: Any, key: str, question: str, default: Any) -> Any:
    while True:
        answer = prompt.ask(question, default=shown(default))
        if answer is None and default is None:
            return None
        try:
            return flag_value(key, answer or "", named=key)
        except UsageError as exc:
            _output.raw(f"  {exc}")
