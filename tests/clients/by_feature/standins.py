"""Offline stand-ins for what Hugging Face's ``by_feature`` examples download.

The examples load GLUE MRPC (``datasets.load_dataset``), the ``bert-base-cased``
tokenizer and model (``transformers.Auto*.from_pretrained``) and the GLUE metric
(``evaluate.load``) from the Hub. The ported copies beside this file import these
instead, with the same call shapes, so nothing else in them changes:

- ``load_dataset("nyu-mll/glue", "mrpc")``: a small deterministic paraphrase set
  (``sentence1``, ``sentence2``, ``label``, ``idx``) with ``map``/``rename_column``;
- ``AutoTokenizer``: words ``w<N>`` to ids; ``pad`` returns a batch with ``.to()``;
- ``AutoModelForSequenceClassification``: a tiny model built from the current torch
  seed (embeddings, dropout, two linear layers) whose output has ``.loss``/``.logits``.
  ``BY_FEATURE_MAX_ROWS`` gives it a simulated device limit: a training forward over
  more rows raises the out-of-memory error ``find_executable_batch_size`` retries on;
- ``evaluate.load("glue", "mrpc")``: accuracy and F1 over ``add_batch`` calls.

``BY_FEATURE_OUT`` names a folder for what the test compares: each rank's metric
results (``metrics-rank<N>.jsonl``) and simulated out-of-memory errors
(``oom-rank<N>.jsonl``) and, from ``save_final_weights``, the main process's final
weights (``weights.pt``).
"""

from __future__ import annotations

import json
import os
import random
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

VOCAB = 40
TRAIN_ROWS = 100
VALIDATION_ROWS = 40
CLS, SEP, PAD = 1, 2, 0
FIRST_WORD = 3


def _rows(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for idx in range(count):
        first = [rng.randrange(VOCAB - FIRST_WORD) for _ in range(rng.randint(2, 7))]
        label = rng.randint(0, 1)
        second = [
            w if label or rng.random() < 0.3 else rng.randrange(VOCAB - FIRST_WORD) for w in first
        ]
        rows.append(
            {
                "sentence1": " ".join(f"w{w}" for w in first),
                "sentence2": " ".join(f"w{w}" for w in second[: rng.randint(1, len(second))]),
                "label": label,
                "idx": idx,
            }
        )
    return rows


class Dataset:
    """A table of rows with the two ``datasets.Dataset`` calls the examples make."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]

    def map(self, function: Any, batched: bool = False, remove_columns: Any = ()) -> Dataset:
        assert batched, "the examples map in batches"
        columns = {key: [row[key] for row in self.rows] for key in self.rows[0]}
        added = function(columns)
        rows = [
            {
                **{k: v for k, v in row.items() if k not in remove_columns},
                **{k: v[i] for k, v in added.items()},
            }
            for i, row in enumerate(self.rows)
        ]
        return Dataset(rows)

    def rename_column(self, old: str, new: str) -> Dataset:
        return Dataset([{(new if k == old else k): v for k, v in row.items()} for row in self.rows])


class DatasetDict(dict[str, Dataset]):
    def map(self, function: Any, **kwargs: Any) -> DatasetDict:
        return DatasetDict({name: split.map(function, **kwargs) for name, split in self.items()})

    def rename_column(self, old: str, new: str) -> DatasetDict:
        return DatasetDict({name: split.rename_column(old, new) for name, split in self.items()})


def load_dataset(path: str, name: str) -> DatasetDict:
    assert (path, name) == ("nyu-mll/glue", "mrpc"), "the examples load GLUE MRPC"
    return DatasetDict(
        train=Dataset(_rows(TRAIN_ROWS, seed=1)), validation=Dataset(_rows(VALIDATION_ROWS, seed=2))
    )


class Batch(dict[str, torch.Tensor]):
    """What ``tokenizer.pad(..., return_tensors="pt")`` returns: a mapping with ``.to``."""

    def to(self, device: Any, non_blocking: bool = False) -> Batch:
        for key, value in self.items():
            self[key] = value.to(device, non_blocking=non_blocking)
        return self


class Tokenizer:
    def __call__(
        self, first: list[str], second: list[str], truncation: bool = True, max_length: Any = None
    ) -> dict[str, list[list[int]]]:
        ids, types = [], []
        for a, b in zip(first, second, strict=True):
            left = [CLS, *self._ids(a), SEP]
            right = [*self._ids(b), SEP]
            ids.append(left + right)
            types.append([0] * len(left) + [1] * len(right))
        return {
            "input_ids": ids,
            "token_type_ids": types,
            "attention_mask": [[1] * len(row) for row in ids],
        }

    @staticmethod
    def _ids(sentence: str) -> list[int]:
        return [FIRST_WORD + int(word[1:]) for word in sentence.split()]

    def pad(
        self,
        examples: list[dict[str, Any]],
        padding: str = "longest",
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        return_tensors: str = "pt",
    ) -> Batch:
        length = max_length or max(len(e["input_ids"]) for e in examples)
        if pad_to_multiple_of:
            length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
        batch = Batch()
        for key in examples[0]:
            if key == "labels":
                batch[key] = torch.tensor([e[key] for e in examples])
            else:
                fill = PAD if key == "input_ids" else 0
                batch[key] = torch.tensor(
                    [e[key] + [fill] * (length - len(e[key])) for e in examples]
                )
        return batch


class AutoTokenizer:
    @staticmethod
    def from_pretrained(name: str) -> Tokenizer:
        return Tokenizer()


class TinyClassifier(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.words = nn.Embedding(FIRST_WORD + VOCAB, width, padding_idx=PAD)
        self.dropout = nn.Dropout(0.1)
        self.hidden = nn.Linear(width, width)
        self.classifier = nn.Linear(width, 2, bias=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> SimpleNamespace:
        limit = os.environ.get("BY_FEATURE_MAX_ROWS")
        if limit and torch.is_grad_enabled() and len(input_ids) > int(limit):
            _record(f"oom-rank{os.environ.get('RANK', '0')}.jsonl", {"rows": len(input_ids)})
            # the sentence Accelerate's find_executable_batch_size retries on
            raise RuntimeError(f"simulated device out of memory. ({len(input_ids)} > {limit} rows)")
        tokens = self.dropout(self.words(input_ids))
        words = attention_mask * (input_ids >= FIRST_WORD)  # special tokens would dominate
        mask = words.unsqueeze(-1).to(tokens.dtype)
        pooled = (tokens * mask).sum(1) / mask.sum(1).sqrt()
        logits = self.classifier(self.dropout(torch.tanh(self.hidden(pooled))))
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
        return SimpleNamespace(loss=loss, logits=logits)


class AutoModelForSequenceClassification:
    @staticmethod
    def from_pretrained(name: str, return_dict: bool = True) -> TinyClassifier:
        return TinyClassifier()


class Metric:
    """GLUE MRPC's metric: accuracy and F1 of the positive class."""

    def __init__(self) -> None:
        self.predictions: list[int] = []
        self.references: list[int] = []

    def add_batch(self, predictions: torch.Tensor, references: torch.Tensor) -> None:
        self.predictions += predictions.tolist()
        self.references += references.tolist()

    def compute(self) -> dict[str, float]:
        pairs = list(zip(self.predictions, self.references, strict=True))
        hits = sum(p == r for p, r in pairs)
        true_pos = sum(p == r == 1 for p, r in pairs)
        positive = sum(p for p, _ in pairs) + sum(r for _, r in pairs)
        result = {
            "accuracy": hits / len(pairs),
            "f1": 2 * true_pos / positive if positive else 0.0,
            "count": len(pairs),
        }
        self.predictions, self.references = [], []
        _record(f"metrics-rank{os.environ.get('RANK', '0')}.jsonl", result)
        return result


evaluate = SimpleNamespace(load=lambda path, name: Metric())


def _record(name: str, result: dict[str, Any]) -> None:
    out = os.environ.get("BY_FEATURE_OUT")
    if out:
        with open(os.path.join(out, name), "a") as fh:
            fh.write(json.dumps(result) + "\n")


def save_final_weights(accelerator: Any, model: Any) -> None:
    """The main process writes the trained weights to ``$BY_FEATURE_OUT/weights.pt``."""
    out = os.environ.get("BY_FEATURE_OUT")
    if out and accelerator.is_main_process:
        torch.save(accelerator.unwrap_model(model).state_dict(), os.path.join(out, "weights.pt"))
