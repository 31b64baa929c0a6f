"""The table of configuration keys: each key's type, default, bounds and documentation.

Pure data. :mod:`accel.config.coerce` checks values against a :class:`Field`;
:mod:`accel.config.schema` is the interface the rest of accel uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accel._locks import DEFAULT_TIMEOUT
from accel.units import DURATION_HELP, SIZE_HELP

SCHEMA_VERSION = 1
HOUR, DAY = 3600.0, 86400.0


@dataclass(frozen=True)
class Field:
    """One configuration key. ``kind`` names its checker in :mod:`accel.config.coerce`."""

    key: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None  # every number has one: see docs/configuration.md
    nullable: bool = False

    @property
    def env_var(self) -> str:
        return "ACCEL_" + self.key.replace(".", "_").upper()

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def expected(self) -> str:
        text = _EXPECTED[self.kind]
        if self.choices and self.kind == "names":
            text = "a list of names from " + ", ".join(self.choices)
        elif self.choices:
            text = "one of " + ", ".join(self.choices)
        if self.kind in ("int", "int_or_auto") and self.maximum is not None:
            text = text.replace("an integer", f"an integer {self.bounds}")
        elif self.kind in ("duration", "size") and self.maximum is not None:
            text += f" ({self.bounds})"
        return text + (" or null" if self.nullable else "")

    @property
    def bounds(self) -> str:
        """The range of a number, for people: ``from 1 to 1024``, ``at most 1h``."""
        if self.maximum is None:
            return ""
        if self.kind not in ("duration", "size"):
            return f"from {int(self.minimum or 0)} to {int(self.maximum)}"
        high = _format(self, self.maximum)
        return (
            f"from {_format(self, self.minimum)} to {high}" if self.minimum else f"at most {high}"
        )


def _format(f: Field, value: float | None) -> str:
    from accel.units import format_duration

    number = value or 0
    if f.kind == "duration":
        return format_duration(number)
    if number >= 2**63 - 1:
        return "8 EiB"  # what a signed 64-bit byte count holds
    unit, name = next((u, n) for u, n in _BINARY if number % u == 0)
    return f"{int(number) // unit} {name}"


_BINARY = ((1024**4, "TiB"), (1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"), (1, "B"))


_EXPECTED = {
    "int": "an integer",
    "int_or_auto": "an integer or 'auto'",
    "bool": "true or false",
    "str": "a string",
    "name": "a name of 1 to 128 letters, digits, '.', '_' or '-', not starting with '.' or '-'",
    "enum": "one of the allowed values",
    "endpoint": "HOST:PORT",
    "gpu_ids": "'all' or a list of GPU indices like [0, 1]",
    "env": "a mapping of environment variable names to strings",
    "size": SIZE_HELP,
    "duration": DURATION_HELP,
    "path": "a folder path",
    "names": "a list of names (Python identifiers)",
}


FIELDS: tuple[Field, ...] = (
    Field(
        "launch.num_processes",
        "int_or_auto",
        1,
        "Worker processes per machine; `auto` = one per visible GPU, else 1.",
        minimum=1,
        maximum=1024,
    ),
    Field(
        "launch.num_machines", "int", 1, "Machines (nodes) in the job.", minimum=1, maximum=65536
    ),
    Field(
        "launch.min_machines",
        "int",
        None,
        "Elastic jobs (torchrun's --nnodes MIN:MAX): start once this many machines have "
        "joined, up to num_machines; null: exactly num_machines.",
        minimum=1,
        maximum=65536,
        nullable=True,
    ),
    Field(
        "launch.machine_rank",
        "int",
        0,
        "This machine's rank among num_machines.",
        minimum=0,
        maximum=65535,
    ),
    Field(
        "launch.rdzv_endpoint",
        "endpoint",
        None,
        "HOST:PORT of the c10d rendezvous for multi-node jobs.",
        nullable=True,
    ),
    Field(
        "launch.rdzv_id", "str", None, "Rendezvous id shared by all nodes of a job.", nullable=True
    ),
    Field(
        "launch.max_restarts",
        "int",
        0,
        "Restarts of the workers after a failure.",
        minimum=0,
        maximum=10000,
    ),
    Field(
        "launch.mixed_precision",
        "enum",
        "no",
        "Autocast precision for the workers.",
        choices=("no", "fp16", "bf16"),
    ),
    Field("launch.use_cpu", "bool", False, "Run on the CPU even when GPUs are present."),
    Field(
        "launch.gpu_ids",
        "gpu_ids",
        "all",
        "GPUs to use: `all` or a list of device indices such as [0, 1].",
    ),
    Field("launch.env", "env", {}, "Extra environment variables for every worker."),
    Field(
        "launch.run_name",
        "name",
        "default",
        "Name of the run series; checkpoints are kept per series.",
    ),
    Field(
        "launch.dynamo_backend",
        "str",
        "no",
        "torch.compile backend exported as ACCELERATE_DYNAMO_BACKEND (`no` = off).",
    ),
    Field(
        "launch.fsdp",
        "bool",
        False,
        "Shard models with FSDP2 (fully_shard) in Accelerator.prepare(); exported as "
        "ACCELERATE_USE_FSDP.",
    ),
    Field(
        "launch.fsdp_wrap",
        "enum",
        "transformer",
        "Modules FSDP shards one by one before the root: `transformer` (each layer of "
        "fsdp_layer_classes), `size` (fsdp_min_params), `none` (the root only).",
        choices=("transformer", "size", "none"),
    ),
    Field(
        "launch.fsdp_layer_classes",
        "names",
        [],
        "Class names of the layers fsdp_wrap `transformer` shards; empty: the model's "
        "_no_split_modules, else every module of an nn.ModuleList.",
    ),
    Field(
        "launch.fsdp_min_params",
        "int",
        100_000_000,
        "fsdp_wrap `size`: shard each module holding this many parameters (0: the root only).",
        maximum=10**15,
    ),
    Field(
        "launch.fsdp_reshard_after_forward",
        "bool",
        True,
        "Free the gathered parameters after forward (less memory, one more all-gather).",
    ),
    Field(
        "launch.stop_grace_period",
        "duration",
        10.0,
        "How long workers get after SIGTERM before they are killed.",
        maximum=HOUR,
    ),
    Field(
        "launch.hang_timeout",
        "duration",
        None,
        "Declare the run hung when no rank printed, logged a metric or beat for this long.",
        maximum=30 * DAY,
        nullable=True,
    ),
    Field(
        "launch.hang_action",
        "enum",
        "warn",
        "On a hang: dump stacks and `warn`, or also `kill` the workers like a failure.",
        choices=("warn", "kill"),
    ),
    Field(
        "launch.preload",
        "bool",
        False,
        "Start workers from a template process that has imported torch already (fork, "
        "not exec): seconds less per launch.",
    ),
    Field(
        "launch.preload_modules",
        "names",
        [],
        "With launch.preload: modules the template imports besides torch (the script's "
        "heavy imports, e.g. transformers).",
    ),
    Field(
        "checkpoints.keep_last",
        "int",
        3,
        "Committed checkpoints kept per series; null keeps all.",
        minimum=1,
        maximum=1_000_000,
        nullable=True,
    ),
    Field(
        "checkpoints.async_save",
        "bool",
        False,
        "Write checkpoints in the background after a snapshot to CPU memory.",
    ),
    Field(
        "checkpoints.collective_timeout",
        "duration",
        300.0,
        "How long a rank waits for the others inside save_state/load_state before failing.",
        maximum=DAY,
    ),
    Field(
        "checkpoints.arrival_timeout",
        "duration",
        60.0,
        "How long save_state/load_state wait for every rank to call them before failing "
        "(a rank that never calls them: `if is_main_process: save_state()`).",
        maximum=DAY,
    ),
    Field(
        "checkpoints.snapshot_every",
        "int",
        None,
        "Under accel launch: snapshot the training state into shared memory every this "
        "many optimizer steps (1: every step), overlapped with the next step; null: off.",
        minimum=1,
        maximum=1_000_000,
        nullable=True,
    ),
    Field(
        "checkpoints.persist_every",
        "int",
        None,
        "With snapshot_every: the launcher commits the snapshot of every this many "
        "optimizer steps as a checkpoint (a multiple of snapshot_every); null: only when a "
        "worker fails.",
        minimum=1,
        maximum=1_000_000,
        nullable=True,
    ),
    Field(
        "cache.max_size",
        "size",
        None,
        "Size budget of the workspace; least recently used entries are evicted.",
        maximum=2**63 - 1,
        nullable=True,
    ),
    Field(
        "cache.framework_caches",
        "names",
        ["inductor", "triton"],
        "Framework caches `accel launch` keeps in cache/frameworks/ (inductor, triton, hf, "
        "torch_hub); a variable the user already set wins.",
        choices=("inductor", "triton", "hf", "torch_hub"),
    ),
    Field(
        "logs.level",
        "enum",
        "info",
        "Level of logs/training.log.",
        choices=("debug", "info", "warning", "error"),
    ),
    Field(
        "logs.rotate_max_bytes",
        "size",
        10 * 1024**2,
        "Size at which logs/training.log rotates.",
        maximum=1024**4,
    ),
    Field(
        "logs.backup_count", "int", 5, "Rotated training.log files kept.", minimum=0, maximum=1000
    ),
    Field(
        "logs.resource_interval",
        "duration",
        10.0,
        "How often the launcher samples CPU, memory and GPU use into resources.jsonl.",
        minimum=0.1,
        maximum=DAY,
    ),
    Field(
        "logs.on_nonfinite",
        "enum",
        "warn",
        "When a logged metric becomes NaN or infinite: `warn` once per metric, or `stop` "
        "the run (exit 1).",
        choices=("warn", "stop"),
    ),
    Field(
        "store.lock_timeout",
        "duration",
        DEFAULT_TIMEOUT,  # the lock primitive's, also what an invalid config falls back to
        "How long to wait for a workspace lock before giving up.",
        maximum=DAY,
    ),
    Field(
        "workspace.path",
        "path",
        None,
        "Keep the workspace data (cache, checkpoints, logs, state) in this folder.",
        nullable=True,
    ),
)

BY_KEY: dict[str, Field] = {f.key: f for f in FIELDS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(f.section for f in FIELDS))
