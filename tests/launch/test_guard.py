"""The guard's pieces: the process tree, and freeze-then-kill that spares recycled pids."""

from __future__ import annotations

import subprocess
import sys

import pytest
from launchutil import pid_alive, wait_for

from accel.launch.guard import descendants, end_processes, process_table


def test_descendants_follow_the_tree_and_skip_what_started_before() -> None:
    table = {
        10: (1, 100),  # the launcher
        11: (10, 90),  # a child older than the run: not the run's
        12: (10, 150),
        13: (12, 160),  # a grandchild
        14: (13, 170),
        20: (1, 150),  # someone else's
    }
    assert descendants(10, table, since=100) == {12: 150, 13: 160, 14: 170}
    assert descendants(12, table) == {13: 160, 14: 170}


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_end_processes_kills_a_tree_but_never_a_recycled_pid() -> None:
    code = (
        "import subprocess, sys, time;"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        "print('up', flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "up\n"
        table = process_table()
        child = next(p for p, (ppid, _) in table.items() if ppid == parent.pid)
        # `other` is known with another start time: a pid the kernel gave out again
        killed = end_processes({parent.pid: table[parent.pid][1], other.pid: -1})
        assert killed == {parent.pid, child}
        parent.wait(timeout=10)
        wait_for(lambda: not pid_alive(child), 5, "the child to die")
        assert other.poll() is None
    finally:
        for proc in (parent, other):
            proc.kill()
            proc.wait()
