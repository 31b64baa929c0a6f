"""Worker bootstrap: ``python -u _bootstrap.py [-m] TARGET [ARGS...]``.

Every worker of ``accel launch`` starts here, then runs the user's script (or module)
in-process with :mod:`runpy`, exactly as ``python script.py`` would. Around it:

- the worker dies with its launcher: a parent-death signal (Linux ``prctl``), so even
  a SIGKILLed ``accel launch`` leaves no worker behind;
- an uncaught exception is written to ``TORCHELASTIC_ERROR_FILE`` in the format of
  torch's ``@record``, so the launcher shows the failing rank's traceback even when
  the script does not use ``@record``;
- ``SIGUSR1`` dumps every thread's Python stack into ``$ACCEL_RUN_DIR/stacks/`` (for
  ``accel stack`` and ``--hang-timeout``), through faulthandler set up by
  ``accel/hang/worker.py``, loaded by path.

This file is run by path and imports nothing from accel (or torch): worker start-up
stays as cheap as a bare interpreter. It is the seam for later worker-side hooks
(stack dumps on a signal, heartbeats): add them to :func:`_install_hooks`.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
import traceback
from types import TracebackType

PR_SET_PDEATHSIG = 1
_SKIP_FILES = {os.path.abspath(__file__), os.path.abspath(runpy.__file__ or "")}
_HANG_WORKER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hang", "worker.py"
)


def _die_with_launcher() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    launcher = os.environ.get("ACCEL_LAUNCHER_PID", "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        os._exit(1)  # the launcher died before prctl took effect: nobody to report to


def _install_stack_dumps() -> None:
    # Loaded by path: importing the accel package would cost every worker ~100 ms.
    import importlib.util

    try:
        spec = importlib.util.spec_from_file_location("_accel_hang_worker", _HANG_WORKER)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclass-free, but keep the import protocol
        spec.loader.exec_module(module)
        module.install_stack_dump_handler()
    except Exception:  # noqa: BLE001 - a worker must start even without stack dumps
        return


def _install_hooks() -> None:
    """Worker-side hooks that need no cooperation from the script."""
    _die_with_launcher()
    _install_stack_dumps()


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
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
    except OSError:
        pass


def _run(argv: list[str]) -> None:
    if argv and argv[0] == "-m":
        module, args = argv[1], argv[2:]
        sys.argv = [module, *args]
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = argv[0], argv[1:]
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


def main(argv: list[str]) -> int:
    _install_hooks()
    try:
        _run(argv)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Die by the signal, as python would, so the launcher sees -2.
        sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the launcher
        formatted = "".join(_user_traceback(exc).format())
        _record_error(exc, formatted)
        sys.stderr.write(formatted)
        return 1
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
