"""Write what this worker sees to OUT/rank-N.json: exec and preload must agree, except
where docs/commands/launch.md says they differ (tests/launch/test_preload.py)."""

import gc
import json
import multiprocessing
import os
import signal
import sys
import threading

preloaded = "torch" in sys.modules  # before the script imported anything
dynamo_preloaded = "torch._dynamo" in sys.modules  # an optimizer's first use imports it
frozen = gc.get_freeze_count()
import random  # noqa: E402

import numpy  # noqa: E402
import torch  # noqa: E402

try:
    import import_probe  # a module that reads RANK at import (if given)

    rank_at_import = import_probe.RANK
except ImportError:
    rank_at_import = "no module"


def _program(pid: int | str) -> str:
    """The accel script a process runs, by its command line (what `ps` shows)."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        args = [os.path.basename(a.decode()) for a in fh.read().split(b"\0")]
    return next((a for a in args if a in ("_template.py", "_bootstrap.py")), "launcher")


handlers = {
    name: repr(signal.getsignal(getattr(signal, name)))
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR2", "SIGPIPE", "SIGCHLD")
}
data = {
    "preloaded": preloaded,
    "name": __name__,
    "file": __file__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "cwd": os.getcwd(),
    "env": dict(os.environ),
    "c_env_rank": os.popen("echo $RANK").read().strip(),
    "handlers": handlers,
    "session_leader": os.getsid(0) == os.getpid(),
    "group_leader": os.getpgid(0) == os.getpid(),
    "threads": threading.active_count(),
    "stdin_isatty": os.isatty(0),
    "stdout_fd_target": os.readlink("/proc/self/fd/1"),
    "flags": repr(sys.flags),
    "stdout_write_through": sys.stdout.write_through,
    "main_module": sys.modules["__main__"].__dict__.get("__file__"),
    # documented differences (launch.md, "What differs from exec")
    "parent": "template" if _program(os.getppid()) == "_template.py" else "launcher",
    "program": _program("self"),
    "hash": hash("accel"),
    "gc_frozen": frozen > 0,
    "dynamo_preloaded": dynamo_preloaded,
    "rank_at_import": rank_at_import,
    # the global generators: each worker's own, under exec and preload alike
    "rng": {
        "torch_seed": torch.initial_seed(),
        "torch_draw": torch.randint(2**62, (1,)).item(),
        "random": random.getrandbits(64),
        "numpy": int(numpy.random.randint(2**62)),
        "numpy_key": [int(k) for k in numpy.random.get_state()[1][1:5]],
        "multiprocessing_authkey": multiprocessing.current_process().authkey.hex(),
    },
}
with open(os.path.join(sys.argv[1], f"rank-{os.environ['RANK']}.json"), "w") as fh:
    json.dump(data, fh)
print(f"probe {os.environ['RANK']}", flush=False)
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
