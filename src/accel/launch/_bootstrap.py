"""Worker bootstrap: ``python -u _bootstrap.py [-m | --accel-exec] TARGET [ARGS...]``.

Every worker of ``accel launch`` starts here, then runs the user's script in-process
exactly as ``python script.py`` would (``__file__``, ``sys.argv``, ``sys.path``: see
:func:`_run_script`), a module as ``python -m`` would (:mod:`runpy`), or, with
``--no-python``, execs the program. Around it:

- the worker dies with its launcher: a parent-death signal (Linux ``prctl``), so even
  a SIGKILLed ``accel launch`` leaves no worker behind;
- an uncaught exception is written to ``TORCHELASTIC_ERROR_FILE`` in the format of
  torch's ``@record``, so the launcher shows the failing rank's traceback even when
  the script does not use ``@record``;
- when the script has returned (or called ``sys.exit``), a small file next to the error
  file says so, with its exit code (and the message of a ``sys.exit("...")``, its
  secrets hidden by ``accel/_redact.py``, loaded by path, before it is cut), and again
  once the exit handlers have run: a worker that torch's teardown then hangs or aborts
  has still finished, and one that exited non-zero failed then (see
  ``accel/launch/teardown.py``);
- ``SIGUSR1`` dumps every thread's Python stack into ``$ACCEL_RUN_DIR/stacks/`` (for
  ``accel stack`` and ``--hang-timeout``), through faulthandler set up by
  ``accel/_worker_hooks.py``, loaded by path.

This file is run by path and imports nothing from accel (or torch): worker start-up
stays as cheap as a bare interpreter. It is the seam for later worker-side hooks
(stack dumps on a signal, heartbeats): add them to :func:`_install_hooks`.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import runpy
import signal
import sys
import time
import traceback
from collections.abc import Mapping
from types import TracebackType
from typing import Any

PR_SET_PDEATHSIG = 1
EXEC = "--accel-exec"  # then PROGRAM ARGS: run PROGRAM itself (launch --no-python)
_SKIP_FILES = {os.path.abspath(__file__), os.path.abspath(runpy.__file__ or "")}
RETURNED = ".returned"  # suffix of the error file's path: the script returned, with its code
MESSAGE_MOST = 500  # characters of a sys.exit message the launcher reports
_ACCEL = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # _worker_hooks, _redact


def _die_with_launcher(parent: int | None = None) -> None:
    """``parent``: the preload template that forked this worker (else the launcher)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    launcher = str(parent) if parent is not None else os.environ.get("ACCEL_LAUNCHER_PID", "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        os._exit(1)  # the launcher died before prctl took effect: nobody to report to


def _load(name: str) -> Any:
    """``accel/<name>.py``, loaded by path: importing the accel package would cost every
    worker ~100 ms. Such a module imports nothing of accel."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"_accel{name}", os.path.join(_ACCEL, f"{name}.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclass-free, but keep the import protocol
    spec.loader.exec_module(module)
    return module


def _install_stack_dumps() -> None:
    try:
        _load("_worker_hooks").install_stack_dump_handler()
    except Exception:  # noqa: BLE001 - a worker must start even without stack dumps
        return


def _install_hooks(parent: int | None) -> None:
    """Worker-side hooks that need no cooperation from the script."""
    _die_with_launcher(parent)
    _install_stack_dumps()
    _local_rank_from_scheduler()


def _local_rank_from_scheduler() -> None:
    """A rank that a scheduler started itself (``srun -n 8``, a custom launcher) keeps the
    local rank it was given: the agent numbers its one worker 0, which on a node of 8
    GPUs would put every rank on the first (``accel.launch.plan``, ACCEL_LOCAL_RANK)."""
    local = os.environ.pop("ACCEL_LOCAL_RANK", None)
    if local is not None and local.isdigit():
        os.environ["LOCAL_RANK"] = local


def _is_ours(filename: str) -> bool:
    return filename.startswith("<frozen runpy") or os.path.abspath(filename) in _SKIP_FILES


def _user_traceback(exc: BaseException) -> traceback.TracebackException:
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return traceback.TracebackException(type(exc), exc, tb)


def _record_error(exc: BaseException, formatted: str) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):  # @record in the script already wrote it
        return
    message = f"{type(exc).__name__}: {exc}"
    data = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": formatted, "timestamp": str(int(time.time()))},
        },
        "accel": {
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": formatted,
            "rank": os.environ.get("RANK"),
            "time": time.time(),
        },
    }
    _write_whole(path, data)


def _write_whole(path: str, data: Mapping[str, object]) -> None:
    """``data`` as JSON at ``path``, whole or not at all (a temporary, then a rename): the
    launcher may stop this worker while it writes, and reads the file once it is gone."""
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def _run(argv: list[str]) -> None:
    if argv and argv[0] == EXEC:
        _exec(argv[1], argv[2:])
    elif argv and argv[0] == "-m":
        module, args = argv[1], argv[2:]
        sys.argv = [module, *args]
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        _run_script(argv[0], argv[1:])


def _run_script(typed: str, args: list[str]) -> None:
    """Run a script as ``python script.py`` does (and so torchrun).

    ``__file__`` is absolute (the current folder joined with the path as typed, not
    normalised), ``sys.argv[0]`` is the path as typed, ``sys.path[0]`` is the script's
    real folder (links resolved). ``runpy.run_path`` would put the absolute path in
    ``sys.argv[0]`` too, so the script runs in a fresh ``__main__`` here instead.
    """
    import builtins
    import importlib.machinery
    import types

    path = os.path.join(os.getcwd(), typed)
    sys.argv = [typed, *args]
    if os.path.isdir(path) or (not typed.endswith(".py") and _is_zip(path)):
        _run_main_of(path)
        return
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=path,
        __cached__=None,
        __builtins__=builtins,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
    )
    sys.modules["__main__"] = main
    with io.open_code(path) as fh:
        code = compile(fh.read(), path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _is_zip(path: str) -> bool:
    import zipfile

    return zipfile.is_zipfile(path)


def _run_main_of(path: str) -> None:
    """A folder or a zipapp holding ``__main__.py``, run as python (and so torchrun) runs
    it: ``sys.path[0]`` is the folder or archive, ``sys.argv`` as typed, its
    ``__main__.py`` in a fresh ``__main__`` module. ``runpy._run_module_as_main`` is
    what the interpreter itself calls for one (Modules/main.c)."""
    import builtins
    import runpy
    import types

    sys.path[0] = path
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    runpy._run_module_as_main("__main__", alter_argv=False)  # type: ignore[attr-defined]


def _exec(program: str, args: list[str]) -> None:
    """``--no-python``: become ``program`` (the hooks above survive exec: no orphans)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(program, [program, *args])
    except OSError as exc:
        sys.stderr.write(f"accel: cannot run {program}: {exc.strerror}\n")
        raise SystemExit(127 if isinstance(exc, FileNotFoundError) else 126) from None


def returned_path(error_file: str) -> str:
    """Where a worker notes that its script returned (the launcher reads it there)."""
    return error_file + RETURNED


def _note_returned(code: int, returned_at: float, handlers_done_at: float | None) -> None:
    """Write that the script returned ``code``, and when."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not error_file:
        return
    path = returned_path(error_file)
    data: dict[str, object] = {"code": code, "pid": os.getpid(), "returned_at": returned_at}
    if handlers_done_at is not None:
        data["handlers_done_at"] = handlers_done_at
    if _message:
        data["message"] = _message[0]
    _write_whole(path, data)


_returned: list[tuple[int, float]] = []  # (code, when) once the script has returned
_message: list[str] = []  # what the script's sys.exit said, when it said a text


def _after_exit_handlers() -> None:
    for code, at in _returned:
        _note_returned(code, at, time.time())


def main(argv: list[str], parent: int | None = None) -> int:
    _install_hooks(parent)
    # Registered before the script's exit handlers, so run after them (atexit is LIFO):
    # it marks when every exit handler of the script, and accel's, has run.
    atexit.register(_after_exit_handlers)
    code, returned = _main(argv)
    if returned:
        _returned.append((code, time.time()))
        _note_returned(code, _returned[0][1], None)
    return code


def _exit_message(said: object) -> str:
    """What ``sys.exit("...")`` said, as the launcher reports it: one line, bounded, its
    secrets hidden first (cut, a secret would keep its start, which no scrub finds)."""
    text = " ".join(_redacted(str(said)).split())
    return text if len(text) <= MESSAGE_MOST else text[: MESSAGE_MOST - 3] + "..."


def _redacted(text: str) -> str:
    """``text`` redacted, scrubbed of the secret values the launcher scrubs from this
    worker's logs (those of its environment and command line)."""
    try:
        redact = _load("_redact")
    except Exception:  # noqa: BLE001 - the launcher still scrubs the secrets it holds whole
        return text
    return str(
        redact.redact_text(redact.scrub(text, redact.secret_values(os.environ, argv=sys.argv)))
    )


def _main(argv: list[str]) -> tuple[int, bool]:
    """The script's exit code, and whether it returned (or exited) rather than raised."""
    try:
        _run(argv)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            # the status the OS gives it: sys.exit(-1) is 255 (not a signal), 256 is 0
            return int(exc.code or 0) & 0xFF, True
        print(exc.code, file=sys.stderr)
        _message.append(_exit_message(exc.code))
        return 1, True
    except KeyboardInterrupt:
        # Die by the signal, as python would, so the launcher sees -2.
        sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130, False
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher
        formatted = "".join(_user_traceback(exc).format())
        _record_error(exc, formatted)
        sys.stderr.write(formatted)
        # As the interpreter does for an exception it prints: exit handlers can tell a
        # crash from a return (accel's leaves the group of a crashed rank standing).
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
        return 1, False
    return 0, True


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
