"""accel.accelerator._metrics: metrics.jsonl (which sync uploads) holds no secret in clear."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from accel._redact import REDACTED


def test_a_logged_text_never_holds_a_secret_in_clear(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import accel

    secret, flag_secret = "mysekrit-value-1", "mysekrit-flag-2"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setattr(sys, "argv", ["train.py", "--wandb-api-key", flag_secret])
    acc = accel.Accelerator()
    acc.log(
        {
            "loss": 1.0,
            "hf_token": secret,
            "note": f"auth with {secret} and {flag_secret}",
            "empty_token": "",
            "tokens": 7,
        },
        step=1,
    )
    text = acc._metrics.file.read_text()
    assert "mysekrit" not in text
    record = json.loads(text)
    assert record["hf_token"] == REDACTED and record["empty_token"] == ""
    assert record["note"] == f"auth with {REDACTED} and {REDACTED}"
    assert record["loss"] == 1.0 and record["tokens"] == 7
