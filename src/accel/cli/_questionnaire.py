"""The interactive ``accel config`` questionnaire (terminal only)."""

from __future__ import annotations

from typing import Any

from accel.config import schema
from accel.config.resolve import flag_value
from accel.errors import UsageError

QUESTIONS = (
    ("launch.num_processes", "Worker processes per machine (a number or auto)"),
    ("launch.num_machines", "How many machines"),
    ("launch.use_cpu", "Run on the CPU only (true/false)"),
    ("launch.mixed_precision", "Mixed precision (no/fp16/bf16)"),
    ("checkpoints.keep_last", "Checkpoints to keep per series"),
)


def ask() -> dict[str, Any]:
    from rich.prompt import Prompt

    values: dict[str, Any] = {}
    for key, question in QUESTIONS:
        values[key] = _ask_one(Prompt, key, question)
    if values.get("launch.num_machines", 1) > 1:
        values["launch.rdzv_endpoint"] = _ask_one(
            Prompt, "launch.rdzv_endpoint", "Rendezvous endpoint HOST:PORT"
        )
    return values


def _ask_one(prompt: Any, key: str, question: str) -> Any:
    default = schema.BY_KEY[key].default
    shown = None if default is None else str(default)
    if isinstance(default, bool):
        shown = str(default).lower()
    while True:
        answer = prompt.ask(question, default=shown)
        try:
            return flag_value(key, answer or "")
        except UsageError as exc:
            print(f"  {exc}")
