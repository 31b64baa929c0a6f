"""Every flag of ``accelerate launch`` under ``accel launch``: with Accelerate's meaning
(the variables its launcher gives the workers), accepted with a note, or refused in one
line. The list comes from the installed Accelerate's parser, so a release that adds a
flag fails here until it is placed in accel.cli._launch_accelerate.FLAGS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from launchutil import SCRIPTS, dry_run_json, refused

from accel.cli._launch_accelerate import FLAGS, REFUSED, RETIRED, checked, markdown
from accel.cli.main import main
from run_helpers import Accel, free_port

pytest.importorskip(
    "accelerate.commands.launch",
    reason="Hugging Face Accelerate is not installed (pytest -m clients installs it)",
)
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(SCRIPTS / "env_dump.py")

# A value Accelerate takes for each flag that takes one (refused ones: any value).
SAMPLES = {
    "mixed_precision": "bf16", "num_processes": "2", "num_machines": "1",
    "num_cpu_threads_per_process": "2", "dynamo_backend": "inductor", "dynamo_mode": "default",
    "gpu_ids": "all", "machine_rank": "0", "main_process_ip": "127.0.0.1",
    "main_process_port": "29511", "tee": "3", "log_dir": "/tmp/logs", "role": "trainer",
    "rdzv_backend": "static", "rdzv_conf": "join_timeout=60", "max_restarts": "1",
    "monitor_interval": "1", "env": "A=1", "main_training_function": "main",
    "fsdp_version": "2", "fsdp_offload_params": "false", "fsdp_min_num_params": "1000",
    "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_reshard_after_forward": "true",
    "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "fsdp_transformer_layer_cls_to_wrap": "Block", "fsdp_backward_prefetch": "BACKWARD_PRE",
    "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_forward_prefetch": "false",
    "fsdp_use_orig_params": "true", "fsdp_cpu_ram_efficient_loading": "true",
    "fsdp_sync_module_states": "true", "fsdp_activation_checkpointing": "false",
    "fsdp_activation_checkpointing_offload": "false",
}  # fmt: skip
HF_LINE = (
    "--use_fsdp", "--fsdp_version", "2", "--fsdp_sharding_strategy", "FULL_SHARD",
    "--fsdp_state_dict_type", "SHARDED_STATE_DICT", "--fsdp_auto_wrap_policy",
    "TRANSFORMER_BASED_WRAP", "--fsdp_transformer_layer_cls_to_wrap", "Linear",
    "--fsdp_cpu_ram_efficient_loading", "false", "--enable_cpu_affinity",
)  # fmt: skip


@cache
def actions() -> tuple[Any, ...]:
    from accelerate.commands.launch import launch_command_parser

    parser = launch_command_parser()
    return tuple(a for a in parser._actions if a.option_strings and a.dest != "help")


def name_of(action: Any) -> str:
    """The table's key: the flag's long name with underscores (``--no_tpu_cluster``)."""
    return next(o for o in action.option_strings if o.startswith("--"))[2:].replace("-", "_")


@pytest.mark.parametrize("lane", ["dev", pytest.param("clients", marks=pytest.mark.clients)])
def test_every_accelerate_flag_is_placed(lane: str) -> None:
    theirs = {name_of(a) for a in actions()}
    assert theirs - set(FLAGS) == set(), "an accelerate launch flag accel does not place"
    assert set(FLAGS) - theirs <= set(RETIRED), "the table places a flag Accelerate never had"


@pytest.mark.parametrize("option", sorted({o for a in actions() for o in a.option_strings}))
def test_each_spelling_of_each_flag_is_taken_or_refused(
    capsys: pytest.CaptureFixture[str], project: Path, option: str
) -> None:
    from accelerate.commands.launch import launch_command_parser

    action = next(a for a in actions() if option in a.option_strings)
    name = name_of(action)
    value = None if FLAGS[name].switch else SAMPLES.get(name, (action.choices or ["1"])[0])
    if name == "config_file":
        (project / "hf.yaml").write_text("distributed_type: MULTI_CPU\nnum_processes: 2\n")
        value = "hf.yaml"
    args = [option] if value is None else [option, value]
    launch_command_parser().parse_args([*args, SCRIPT])  # Accelerate takes it
    if FLAGS[name].kind == REFUSED:
        line = refused(capsys, "--dry-run", "--cpu", *args)
        assert FLAGS[name].says in line
        return
    script = sys.executable if name == "no_python" else SCRIPT
    if name == "module":
        (project / "pkg").mkdir()
        (project / "pkg" / "__init__.py").write_text("")
        script = "pkg"
    code = main(["launch", "--dry-run", "--cpu", *args, script])
    assert code == 0, capsys.readouterr().err


def accelerates_env(monkeypatch: pytest.MonkeyPatch, *line: str) -> dict[str, str]:
    """The variables ``accelerate launch LINE`` gives its workers (its own functions)."""
    import accelerate.commands.launch as hf
    from accelerate.utils.launch import prepare_multi_gpu_env

    monkeypatch.setattr(hf, "default_config_file", "/nonexistent/default_config.yaml")
    args = hf.launch_command_parser().parse_args([*line, SCRIPT])
    args = hf._validate_launch_command(args)[0]
    return prepare_multi_gpu_env(args)


def both_envs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, line: tuple[str, ...]
) -> tuple[dict[str, str], dict[str, str]]:
    """The workers' variables for ``LINE`` on 2 ranks: Accelerate's, then accel's."""
    theirs = accelerates_env(monkeypatch, "--num_processes", "2", *line)
    ours = dry_run_json(capsys, "--cpu", "--num_processes", "2", *line, SCRIPT)["worker_env"]
    return theirs, ours


FSDP_VARS = ("ACCELERATE_USE_FSDP", "ACCELERATE_CPU_AFFINITY")


@pytest.mark.parametrize(
    "line",
    [
        HF_LINE,
        ("--use_fsdp", "--fsdp_version", "2"),
        ("--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "SIZE_BASED_WRAP",
         "--fsdp_min_num_params", "1000", "--fsdp_reshard_after_forward", "false",
         "--fsdp_backward_prefetch", "BACKWARD_POST", "--fsdp_use_orig_params", "false",
         "--fsdp_sync_module_states", "false", "--fsdp_forward_prefetch", "true"),
    ],
)  # fmt: skip
def test_the_workers_get_accelerates_fsdp_variables(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, line: tuple[str, ...]
) -> None:
    theirs, ours = both_envs(capsys, monkeypatch, line)

    def fsdp(env: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if k.startswith("FSDP_") or k in FSDP_VARS}

    theirs = {k: v for k, v in fsdp(theirs).items() if os.environ.get(k) != v}
    theirs.setdefault("FSDP_AUTO_WRAP_POLICY", "NO_WRAP")  # what Accelerate reads for none
    assert fsdp(ours) == theirs


@pytest.mark.parametrize(
    "line",
    [
        ("--dynamo_backend", "inductor", "--dynamo_mode", "max-autotune"),
        ("--dynamo_backend", "inductor", "--dynamo_use_fullgraph"),
        ("--dynamo_backend", "inductor", "--dynamo_use_dynamic"),
        ("--dynamo_backend", "eager", "--dynamo_use_regional_compilation", "--debug"),
    ],
)
def test_the_workers_get_accelerates_dynamo_variables(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, line: tuple[str, ...]
) -> None:
    """What Accelerate's own ``Accelerator`` in the script reads to compile the model."""
    from accelerate.commands.launch import launch_command_parser

    theirs, ours = both_envs(capsys, monkeypatch, line)

    def dynamo(env: dict[str, str]) -> dict[str, str]:
        return {
            k: v for k, v in env.items() if k.startswith(("ACCELERATE_DYNAMO", "ACCELERATE_DEBUG"))
        }

    old = launch_command_parser().get_default("dynamo_use_dynamic") is False
    if old and "--dynamo_use_dynamic" not in line:
        # Accelerate 1.15 and older forced static shapes unless asked; accel leaves
        # torch.compile's default, as 1.16 does
        del theirs["ACCELERATE_DYNAMO_USE_DYNAMIC"]
    assert dynamo(ours) == dynamo(theirs)


def test_a_line_without_a_wrap_policy_wraps_nothing_as_accelerate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    got = dry_run_json(capsys, "--cpu", "--use_fsdp", "--fsdp_version", "2", SCRIPT)
    assert got["worker_env"]["FSDP_AUTO_WRAP_POLICY"] == "NO_WRAP"  # Accelerate's default
    assert got["notes"] == []


def test_use_fsdp_without_a_version_says_accel_shards_with_fsdp2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    got = dry_run_json(capsys, "--cpu", "--use_fsdp", SCRIPT)
    assert got["worker_env"]["FSDP_VERSION"] == "2"
    assert any("Accelerate's default is FSDP1" in note for note in got["notes"])


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--use_fsdp", "--fsdp_offload_params", "true"], "does not offload parameters"),
        (["--use-fsdp", "--fsdp-activation-checkpointing", "true"], "checkpoint activations"),
        (["--use_deepspeed"], "DeepSpeed is not supported by accel"),
        (["--zero_stage", "3"], "DeepSpeed is not supported by accel"),
        (["--use_megatron_lm", "--megatron_lm_tp_degree", "2"], "Megatron-LM is not supported"),
        (["--fp8_backend", "te"], "fp8 backends"),
        (["--mixed_precision", "fp8"], "fp8 backends"),
        (["--tpu"], "TPU pod launching (accelerate's --tpu family) is not supported"),
        (["--parallelism_config_tp_size", "2"], "parallel sizes"),
        (["--aws_access_key_id", "x"], "SageMaker"),
    ],
)
def test_what_accel_does_not_run_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    line = refused(capsys, "--dry-run", "--cpu", *args)
    assert said in line and "accelerate launch" in line


def test_quiet_has_accelerates_meaning_on_an_accelerate_line() -> None:
    assert checked({"quiet": True}, {}).quiet  # accel's --quiet: no worker output
    hf = checked({"quiet": True, "num_processes": "2"}, {})
    assert not hf.quiet and hf.notes == [f"--quiet is accepted: {FLAGS['quiet'].says}"]
    assert not checked({"quiet": True}, {"same_network": True}).quiet
    assert not checked({}, {"short_quiet": True}).quiet  # -q: Accelerate's spelling only
    shared = {"quiet": True, "cpu": True, "tee": "3", "nnodes": "1", "node_rank": 0}
    assert checked(shared, {}).quiet  # torchrun's and accel's flags: accel's --quiet


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quiet_on_an_accelerate_line_keeps_the_workers_output(accel: Accel, project: Path) -> None:
    out = project / "out"
    out.mkdir()
    hf = accel("launch", "--cpu", "--quiet", "--num_processes", "2", SCRIPT, str(out))
    assert hf.returncode == 0, hf.stdout + hf.stderr
    assert "hello from rank 1" in hf.stdout and "--quiet is accepted" in hf.stdout + hf.stderr
    ours = accel("launch", "--cpu", "--quiet", "-n", "2", SCRIPT, str(out))
    assert ours.returncode == 0, ours.stdout + ours.stderr
    assert "hello from rank" not in ours.stdout + ours.stderr  # accel's --quiet


def test_the_docs_table_is_the_code() -> None:
    text = (ROOT / "docs" / "commands" / "launch.md").read_text()
    begin, end = "<!-- accelerate-flags: begin -->\n", "<!-- accelerate-flags: end -->"
    assert begin in text and end in text
    shown = text.split(begin, 1)[1].split(end, 1)[0]
    assert shown == markdown(), "regenerate: from accel.cli._launch_accelerate import markdown"


@pytest.mark.slow
@pytest.mark.clients
@pytest.mark.timeout(300)
def test_an_fsdp_line_gives_accelerates_accelerator_what_accelerate_launch_gives(
    project: Path,
) -> None:
    """A typical HF FSDP line: the FSDP plugin Accelerate builds from the workers'
    variables is the same under both launchers."""
    probe = str(SCRIPTS / "hf_fsdp_probe.py")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HOME": str(project / "hf")}

    def seen(*argv: str) -> list[dict[str, Any]]:
        done = subprocess.run(
            [*argv, "--num_processes", "2", "--main_process_port", str(free_port()), *HF_LINE,
             probe],
            cwd=project, env=env, capture_output=True, text=True, timeout=140,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        # Accelerate's workers share the launcher's stdout, and with PYTHONUNBUFFERED
        # print writes a line and its newline apart: two ranks' lines can arrive merged.
        decode = json.JSONDecoder().raw_decode
        parts = done.stdout.split("PROBE ")[1:]
        return sorted((decode(part)[0] for part in parts), key=lambda d: d["rank"])

    bin_dir = Path(sys.executable).parent
    ours = seen(str(bin_dir / "accel"), "launch", "--cpu")
    theirs = seen(str(bin_dir / "accelerate"), "launch")
    assert [d["rank"] for d in ours] == [0, 1] and ours[0]["world"] == 2
    # Accelerate without a GPU starts each worker alone; the plugin is what is compared.
    drop = ("rank", "world", "distributed_type")
    assert {json.dumps({k: v for k, v in d.items() if k not in drop}) for d in ours} == {
        json.dumps({k: v for k, v in d.items() if k not in drop}) for d in theirs
    }
    assert ours[0]["state_dict_type"] == "StateDictType.SHARDED_STATE_DICT"
