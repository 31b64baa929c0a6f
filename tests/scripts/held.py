"""What this process holds, for the scripts beside this one that count it."""

import os


def held() -> tuple[int, int]:
    """(threads, sockets) of this process, from /proc."""
    sockets = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return len(os.listdir("/proc/self/task")), sockets
