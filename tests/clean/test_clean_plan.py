"""The planner is pure: these tests build scans by hand, with no filesystem."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel.clean import DEBRIS_GRACE, Item, Policy, WorkspaceScan, make_plan, parse_policy
from accel.errors import UsageError

NOW = 1_800_000_000.0
DAY = 86400.0


def entry(name: str, age: float, size: int = 10, run_id: str | None = None) -> Item:
    return Item(
        "cache",
        "entry",
        f"/ws/cache/entries/{name}.entry",
        size,
        NOW - age,
        marker="meta.json",
        name=name,
        run_id=run_id,
    )


def ckpt(series: str, step: int, age: float, size: int = 10) -> Item:
    return Item(
        "checkpoints",
        "checkpoint",
        f"/ws/checkpoints/{series}/step-{step:012d}",
        size,
        NOW - age,
        marker="manifest.json",
        name=f"{series}/{step}",
        series=series,
        step=step,
    )


def debris(name: str, age: float, series: str | None = None) -> Item:
    category = "checkpoints" if series else "cache"
    return Item(category, "debris", f"/ws/tmp/{name}", 5, NOW - age, name=name, series=series)


def run(run_id: str, age: float, status: str | None = "succeeded") -> Item:
    return Item(
        "runs",
        "run",
        f"/ws/logs/runs/{run_id}",
        10,
        NOW - age,
        marker="run.json",
        name=run_id,
        run_id=run_id,
        status=status,
    )


def scan(
    *items: Item, live: tuple[str, ...] = (), held: tuple[str, ...] = (), other: int = 0
) -> WorkspaceScan:
    return WorkspaceScan(Path("/ws"), NOW, tuple(items), other, frozenset(live), frozenset(held))


def planned(plan: object) -> dict[str, str]:
    return {p.item.name: p.reason for p in plan.items}  # type: ignore[attr-defined]


def test_older_than_uses_recorded_last_use_and_a_future_time_is_young() -> None:
    s = scan(entry("old", 8 * DAY), entry("young", 6 * DAY), entry("future", -30 * DAY))
    assert planned(make_plan(s, Policy(older_than=7 * DAY))) == {"old": "older_than"}


def test_newest_checkpoint_is_kept_unless_keep_last_zero() -> None:
    s = scan(ckpt("a", 1, 30 * DAY), ckpt("a", 2, 20 * DAY), ckpt("b", 5, 40 * DAY))
    assert planned(make_plan(s, Policy(older_than=DAY))) == {"a/1": "older_than"}
    plan = make_plan(s, Policy(keep_last=0))
    assert set(planned(plan)) == {"a/1", "a/2", "b/5"}


def test_keep_last_counts_by_step_per_series() -> None:
    # step order, not age order, decides which are the newest
    s = scan(ckpt("a", 1, 1), ckpt("a", 2, 50), ckpt("a", 3, 40), ckpt("b", 1, 100))
    plan = make_plan(s, Policy(keep_last=2))
    assert planned(plan) == {"a/1": "keep_last"}
    assert {k.item.name: k.reason for k in plan.kept} == {
        "a/3": "newest checkpoint",
        "a/2": "among the last 2",
        "b/1": "newest checkpoint",
    }


def test_keep_last_with_older_than_needs_both() -> None:
    s = scan(ckpt("a", 1, 10 * DAY), ckpt("a", 2, DAY), ckpt("a", 3, 0))
    assert planned(make_plan(s, Policy(keep_last=1, older_than=5 * DAY))) == {"a/1": "keep_last"}


def test_max_size_evicts_least_recently_used_first_until_it_fits() -> None:
    items = [entry(f"e{i}", age=i * DAY, size=100) for i in range(5)]  # e4 is the oldest
    plan = make_plan(scan(*items, other=50), Policy(max_size=300))
    assert [p.item.name for p in plan.items] == ["e4", "e3", "e2"]
    assert plan.size_after == 250
    assert all(p.reason == "max_size" for p in plan.items)


def test_max_size_never_evicts_what_is_protected_and_says_so() -> None:
    s = scan(
        entry("live", 9 * DAY, 500, run_id="r1"),
        ckpt("a", 1, 9 * DAY, 500),
        entry("e", DAY, 100),
        live=("r1",),
    )
    plan = make_plan(s, Policy(max_size=10))
    assert planned(plan) == {"e": "max_size"}
    assert plan.warnings and "stays over --max-size" in plan.warnings[0]


def test_live_runs_and_held_series_are_never_selected() -> None:
    s = scan(
        entry("mine", 99 * DAY, run_id="live"),
        run("live", 99 * DAY, "running"),
        run("dead", 99 * DAY, "running"),
        ckpt("s", 1, 99 * DAY),
        ckpt("s", 2, 99 * DAY),
        debris(".tmp-x", 99 * DAY, series="s"),
        live=("live",),
        held=("s",),
    )
    plan = make_plan(s, Policy(older_than=0.0, keep_last=0))
    assert planned(plan) == {"dead": "older_than"}
    reasons = {k.item.name: k.reason for k in plan.kept}
    assert reasons["mine"] == reasons["live"] == "live run"
    assert reasons["s/1"] == reasons[".tmp-x"] == "series in use"


def test_debris_goes_once_past_the_grace_period_whatever_the_selectors() -> None:
    s = scan(debris("old", DEBRIS_GRACE + 1), debris("fresh", 1), debris("future", -DAY))
    assert planned(make_plan(s, Policy())) == {"old": "debris"}


def test_only_limits_the_categories() -> None:
    s = scan(entry("e", 9 * DAY), run("r", 9 * DAY), debris("d", DAY))
    assert planned(make_plan(s, Policy(older_than=DAY, only=frozenset({"runs"})))) == {
        "r": "older_than"
    }


def test_total_bytes_and_size_after() -> None:
    s = scan(entry("a", 9 * DAY, 100), entry("b", 0, 30), other=7)
    plan = make_plan(s, Policy(older_than=DAY))
    assert (plan.total_bytes, plan.size_after, s.total_size) == (100, 37, 137)


def test_parse_policy_without_selectors_applies_the_configured_retention() -> None:
    policy = parse_policy(defaults={"checkpoints.keep_last": 3, "cache.max_size": 1000})
    assert (policy.keep_last, policy.max_size, policy.explicit) == (3, 1000, False)
    explicit = parse_policy(older_than="7d", defaults={"checkpoints.keep_last": 3})
    assert (explicit.older_than, explicit.keep_last, explicit.explicit) == (7 * DAY, None, True)


def test_parse_policy_reads_sizes_durations_and_categories() -> None:
    policy = parse_policy(older_than="1h30m", keep_last="0", max_size="2KiB", only=["cache"])
    assert (policy.older_than, policy.keep_last, policy.max_size) == (5400.0, 0, 2048)
    assert policy.only == frozenset({"cache"})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"older_than": "7x"},
        {"older_than": "-1d"},
        {"older_than": ""},
        {"max_size": "10QB"},
        {"max_size": "-5"},
        {"keep_last": "-1"},
        {"keep_last": "two"},
        {"keep_last": "1.5"},
        {"only": ["everything"]},
    ],
)
def test_bad_selectors_are_usage_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        parse_policy(**kwargs)  # type: ignore[arg-type]
