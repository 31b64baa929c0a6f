"""How long work reports how far it got, without knowing who is watching.

The CLI passes a rich progress bar on a terminal; everything else gets :data:`SILENT`.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["SILENT", "Progress"]


class Progress(Protocol):
    def stage(self, label: str, total: int | None) -> None:
        """A new stage of ``total`` units (bytes), None when it cannot be counted."""

    def advance(self, amount: int) -> None:
        """``amount`` more units of the current stage are done."""


class _Silent:
    def stage(self, label: str, total: int | None) -> None:
        pass

    def advance(self, amount: int) -> None:
        pass


SILENT: Progress = _Silent()
