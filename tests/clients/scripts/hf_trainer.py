"""A transformers Trainer on a tiny randomly initialised BERT, on CPU (no downloads).

argv: OUT NAME. Rank 0 writes OUT/NAME.json: the final weights' sha256 and the losses.
"""

import hashlib
import json
import os
import sys

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

out, name = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
config = BertConfig(
    vocab_size=64,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,
    num_labels=2,
)
model = BertForSequenceClassification(config)
data = torch.Generator().manual_seed(1)
ids = torch.randint(0, 64, (64, 12), generator=data)
labels = torch.randint(0, 2, (64,), generator=data)
dataset = [
    {"input_ids": i, "attention_mask": torch.ones_like(i), "labels": y}
    for i, y in zip(ids, labels, strict=True)
]
args = TrainingArguments(
    output_dir=os.path.join(out, f"trainer-{name}"),
    per_device_train_batch_size=4,
    max_steps=8,
    learning_rate=1e-3,
    logging_steps=1,
    save_strategy="no",
    report_to=[],
    use_cpu=True,
    seed=0,
    dataloader_num_workers=0,
)
trainer = Trainer(model=model, args=args, train_dataset=dataset)
trainer.train()
if trainer.is_world_process_zero():
    digest = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        digest.update(key.encode() + value.detach().contiguous().numpy().tobytes())
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    world = int(os.environ["WORLD_SIZE"])
    with open(os.path.join(out, f"{name}.json"), "w") as fh:
        json.dump({"sha256": digest.hexdigest(), "losses": losses, "world_size": world}, fh)
