"""Write what this worker sees to OUT/rank-N.json: exec and preload must agree."""

import json
import os
import signal
import sys
import threading

preloaded = "torch" in sys.modules  # before the script imported anything
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
}
with open(os.path.join(sys.argv[1], f"rank-{os.environ['RANK']}.json"), "w") as fh:
    json.dump(data, fh)
print(f"probe {os.environ['RANK']}", flush=False)
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
