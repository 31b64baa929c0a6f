"""What ``accel runs show`` displays about one run, as frozen data (no formatting).

:func:`build_view` is pure: a run record, the current config, the metric views and
the resource summary in, a :class:`RunView` out. :func:`load_view` is the IO edge that
reads them from the run folder, streaming its files (a long run's metrics.jsonl and
resources.jsonl are gigabytes), so memory stays bounded whatever their size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from accel.layout import Layout
from accel.runs.failures import EXITED, STOPPED, Verdict, headline, recorded_verdict
from accel.runs.metrics import METRICS_FILE, MetricView, read_metric_views
from accel.runs.record import RunRecord, read_run, resolve_run_id
from accel.runs.status import RunStatus
from accel.telemetry import RESOURCES_FILE, ResourceSummary, iter_samples, summarize

_MISSING = "(unset)"
OTHER_NODE = "on another node"  # a rank of a multi-node job that this node did not run


@dataclass(frozen=True)
class ConfigChange:
    """A key whose value in the run differs from the current configuration."""

    key: str
    run: Any
    current: Any


@dataclass(frozen=True)
class RankView:
    rank: int
    status: str  # running | succeeded | failed | stopped | interrupted | hung | crashed | ...
    exit_code: int | None = None
    detail: str | None = None


@dataclass(frozen=True)
class RunView:
    record: RunRecord
    config_diff: tuple[ConfigChange, ...] | None  # None: no current config to compare with
    ranks: tuple[RankView, ...]
    resources: ResourceSummary
    metrics: tuple[MetricView, ...]
    hangs: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    restarts: tuple[tuple[int, str], ...] = ()  # (attempt that failed, why)
    nonfinite: tuple[Mapping[str, Any], ...] = ()  # metrics that became NaN or infinite
    teardown: tuple[Mapping[str, Any], ...] = ()  # ranks that finished, then hung or died

    @property
    def error_summary(self) -> str | None:
        verdict = last_verdict(self.record)
        said = headline(verdict) if verdict is not None else None
        if said:
            return said
        error = self.record.error
        if not error:
            return None
        kind, message = error.get("type"), error.get("message")
        if kind:
            return f"{kind}: {message}" if message else str(kind)
        return str(error.get("explanation") or error.get("message") or "") or None

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {
            "id": r.id,
            "name": r.name,
            "status": r.status,
            "command": list(r.command),
            "started_at": r.started_at,
            "ended_at": r.ended_at,
            "duration": r.duration,
            "exit_code": r.exit_code,
            "restarts": r.restarts,
            "spare": r.spare,
            "failed_rank": r.failed_rank,
            "error": dict(r.error) if r.error else None,
            "config_diff": None
            if self.config_diff is None
            else [asdict(c) for c in self.config_diff],
            "ranks": [asdict(v) for v in self.ranks],
            "resources": self.resources.to_json(),
            "metrics": [_metric_json(m) for m in self.metrics],
            "hangs": [dict(h) for h in self.hangs],
            "restart_reasons": [{"attempt": a, "reason": why} for a, why in self.restarts],
            "nonfinite": [dict(n) for n in self.nonfinite],
            "teardown": [dict(t) for t in self.teardown],
        }


def _metric_json(m: MetricView) -> dict[str, Any]:
    data = asdict(m)
    data.pop("values")
    return data


def flatten(config: Mapping[str, Any]) -> dict[str, Any]:
    """``{"launch": {"num_processes": 2}}`` -> ``{"launch.num_processes": 2}`` (two levels:
    a value that is itself a mapping, like ``launch.env``, stays whole)."""
    out: dict[str, Any] = {}
    for section, values in config.items():
        if isinstance(values, Mapping):
            out.update({f"{section}.{key}": value for key, value in values.items()})
        else:
            out[section] = values
    return out


def config_diff(run: Mapping[str, Any], current: Mapping[str, Any]) -> list[ConfigChange]:
    """Keys of the run's resolved config whose value is different (or gone) now.

    Keys the run did not record (added by a later accel) are not differences.
    """
    a, b = flatten(run), flatten(current)
    return [
        ConfigChange(key, a[key], b.get(key, _MISSING))
        for key in sorted(a)
        if a[key] != b.get(key, _MISSING) and key != "version"
    ]


def rank_views(record: RunRecord) -> list[RankView]:
    """Each rank's fate in the last attempt, as the launcher's blame decided it."""
    verdict = last_verdict(record)
    fated = {f.rank: f for f in verdict.failures} if verdict is not None else {}
    failures = _last_failures(record.raw)
    here = set(record.rank_logs())
    ranks = set(failures) | set(range(record.world_size or 0)) | here
    # Of a job of several nodes, this node's record knows its own ranks (they have a log
    # here): the others' fate is their node's record's to tell, not a guess from this one.
    elsewhere = int(record.raw.get("nnodes") or 1) > 1
    out = []
    for rank in sorted(ranks):
        failure = failures.get(rank)
        if elsewhere and rank not in here and rank not in failures and rank not in fated:
            out.append(RankView(rank, OTHER_NODE))
        elif record.live:
            hung = record.raw.get("status") == RunStatus.HUNG
            out.append(RankView(rank, RunStatus.HUNG if hung else RunStatus.RUNNING))
        elif rank in fated:
            f = fated[rank]
            detail = f.summary if f.fate != STOPPED else f.explanation
            out.append(RankView(rank, str(f.fate), f.exitcode, detail))
        elif verdict is not None:  # not among the failures: it ended normally
            out.append(RankView(rank, EXITED, 0))
        elif failure is not None:
            out.append(_failed(rank, failure, record.failed_rank))
        elif record.status == RunStatus.FAILED and record.failed_rank is not None:
            out.append(_failed(rank, record.error or {}, record.failed_rank))
        else:
            code = 0 if record.status == RunStatus.SUCCEEDED else None
            out.append(RankView(rank, record.status, code))
    return out


def last_verdict(record: RunRecord) -> Verdict | None:
    """The last attempt's verdict when it failed (records older than fates: None)."""
    attempts = [a for a in record.raw.get("attempts") or () if isinstance(a, Mapping)]
    if not attempts or record.status in (RunStatus.SUCCEEDED, RunStatus.RUNNING):
        return None
    return recorded_verdict(attempts[-1])


def restarts(record: RunRecord) -> list[tuple[int, str]]:
    """Why each restart happened: ``(attempt that failed, who is to blame)``."""
    out = []
    attempts = [a for a in record.raw.get("attempts") or () if isinstance(a, Mapping)]
    for entry in attempts[:-1]:
        verdict = recorded_verdict(entry)
        said = headline(verdict) if verdict is not None else None
        if said is None and entry.get("failures"):
            said = _legacy_reason(entry["failures"])
        if said:
            out.append((int(entry.get("attempt") or 0), said))
    return out


def _legacy_reason(failures: Any) -> str | None:
    """For records older than fates: the first failure listed."""
    for f in failures if isinstance(failures, list) else ():
        if isinstance(f, Mapping) and isinstance(f.get("rank"), int):
            kind, message = f.get("type"), f.get("message")
            what = f"{kind}: {message}" if kind else f.get("explanation") or "failed"
            return f"rank {f['rank']} failed: {what}"
    return None


def _last_failures(raw: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    attempts = [a for a in raw.get("attempts") or () if isinstance(a, Mapping)]
    failures = attempts[-1].get("failures") if attempts else None
    out = {}
    for f in failures or ():
        if isinstance(f, Mapping) and isinstance(f.get("rank"), int):
            out[int(f["rank"])] = f
    return out


def _failed(rank: int, failure: Mapping[str, Any], failed_rank: int | None) -> RankView:
    """Records written before the launcher decided fates: the old labels."""
    code = failure.get("exitcode")
    code = code if isinstance(code, int) else None
    collateral = bool(failure.get("collateral")) or (
        failed_rank is not None and rank != failed_rank
    )
    if collateral:
        return RankView(rank, STOPPED, code, "stopped because another rank failed")
    kind, message = failure.get("type"), failure.get("message")
    detail = f"{kind}: {message}" if kind else failure.get("explanation")
    return RankView(rank, RunStatus.FAILED, code, None if detail is None else str(detail))


def build_view(
    record: RunRecord,
    current_config: Mapping[str, Any] | None,
    metrics: Sequence[MetricView],
    resources: ResourceSummary,
) -> RunView:
    run_config = record.raw.get("config")
    diff = None
    if current_config is not None and isinstance(run_config, Mapping):
        diff = tuple(config_diff(run_config, current_config))
    hangs = tuple(h for h in record.raw.get("hangs") or () if isinstance(h, Mapping))
    nonfinite = tuple(n for n in record.raw.get("nonfinite") or () if isinstance(n, Mapping))
    teardown = tuple(t for t in record.raw.get("teardown") or () if isinstance(t, Mapping))
    return RunView(
        record=record,
        config_diff=diff,
        ranks=tuple(rank_views(record)),
        resources=resources,
        metrics=tuple(metrics),
        hangs=hangs,
        restarts=tuple(restarts(record)),
        nonfinite=nonfinite,
        teardown=teardown,
    )


def run_resources(record: RunRecord) -> ResourceSummary:
    """run.json's summary once the run ended; summarised from resources.jsonl before."""
    stored = record.raw.get("resources")
    if isinstance(stored, Mapping) and not record.live:
        return ResourceSummary.from_json(stored)
    return summarize(iter_samples(record.path / RESOURCES_FILE))


def load_view(layout: Layout, ref: str | None, config: Callable[[], Mapping[str, Any]]) -> RunView:
    """The view of run ``ref`` (id, prefix, ``latest``/None) from its folder; ``config``
    gives the workspace's effective config (nested) to compare the run's with."""
    record = read_run(layout, resolve_run_id(layout, ref))
    return build_view(
        record,
        current_config(config),
        read_metric_views(record.path / METRICS_FILE),
        run_resources(record),
    )


def current_config(config: Callable[[], Mapping[str, Any]]) -> dict[str, Any] | None:
    """The effective config, or None when it is invalid (the diff is skipped).

    Redacted like run.json, so the two compare and no view shows a secret.
    """
    from accel._redact import redact_mapping
    from accel.errors import AccelError

    try:
        return redact_mapping(config())
    except AccelError:
        return None
