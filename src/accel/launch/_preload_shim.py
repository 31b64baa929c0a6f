"""Preloaded worker shim: ``python -u _preload_shim.py SOCKET BOOTSTRAP_ARGS...``.

With ``launch.preload`` torch's agent still starts every worker with ``subprocess.Popen``,
but what it starts is this shim: a bare interpreter that imports neither accel nor torch.
It hands its argv, environment, working folder and stdin/stdout/stderr (``SCM_RIGHTS``)
to the template process (``_template.py``), which has imported torch already and forks
the worker from itself. The shim then stands in for the worker towards the agent:

- the termination signals torch and accel send to its process group (SIGTERM, SIGINT,
  SIGHUP, SIGQUIT) go to the worker's process group, SIGUSR1/SIGUSR2 (stack dumps) to
  the worker alone; a SIGKILL of the shim closes its socket, and the template kills the
  worker's group on that;
- it exits with the worker's exit code, or dies by the worker's signal.

When the template cannot be reached or refuses (it has threads: forking it would be
unsafe), the shim execs the plain bootstrap: the worker starts as it would without
preload. Run by path; the template loads it by path too for :func:`send_request` and
:func:`read_request`, so the wire format lives here only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

PR_SET_PDEATHSIG = 1
BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap.py")
GROUP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
OWN_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
STARTED, REFUSED, EXITED = b"P", b"N", b"X"  # the template's replies
_LENGTH = struct.Struct("!I")
_PID = struct.Struct("!q")
_STATUS = struct.Struct("!i")
STDIO = (0, 1, 2)


# -- the wire (shared with the template) -------------------------------------------------


def send_request(sock: socket.socket, args: list[str]) -> None:
    """The worker's argv, environment and folder, with its three standard streams."""
    body = json.dumps({"args": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    payload = _LENGTH.pack(len(body)) + body
    sent = socket.send_fds(sock, [payload], list(STDIO))
    sock.sendall(payload[sent:])


def read_request(sock: socket.socket) -> tuple[dict[str, object], list[int]]:
    """The other end of :func:`send_request`: ``(request, fds)``."""
    data, fds, _, _ = socket.recv_fds(sock, 65536, len(STDIO))
    try:
        if len(fds) != len(STDIO) or len(data) < _LENGTH.size:
            raise ValueError("not a worker request")
        (length,) = _LENGTH.unpack_from(data)
        while len(data) < _LENGTH.size + length:
            chunk = sock.recv(65536)
            if not chunk:
                raise ValueError("truncated worker request")
            data += chunk
        request = json.loads(data[_LENGTH.size : _LENGTH.size + length])
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, fds


def started(pid: int) -> bytes:
    return STARTED + _PID.pack(pid)


def exited(status: int) -> bytes:
    return EXITED + _STATUS.pack(status)


# -- the shim ------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """The launcher's SIGKILL takes the shim along, as it takes an exec'd worker."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


class _Relay:
    """Forwards signals to the worker; those that come before its pid is known wait."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []
        for sig in (*GROUP_SIGNALS, *OWN_SIGNALS):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.pid is None:
            self.pending.append(signum)
        else:
            self._send(signum)

    def start(self, pid: int) -> None:
        self.pid = pid
        for signum in self.pending:
            self._send(signum)

    def _send(self, signum: int) -> None:
        assert self.pid is not None
        try:
            if signum in OWN_SIGNALS:
                os.kill(self.pid, signum)
            else:
                os.killpg(self.pid, signum)
        except OSError:
            pass  # already gone: its status is on its way


def _exec_bootstrap(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-u", BOOTSTRAP, *args])


def _end_like(status: int) -> None:
    """Exit as the worker did: its code, or death by its signal (no core of the shim)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not kill (SIGCHLD...): say it anyway
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    _die_with_parent()
    path, args = argv[0], argv[1:]
    relay = _Relay()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        send_request(sock, args)
        reply = _recv_exactly(sock, 1 + _PID.size)
    except OSError:
        reply = b""
    if not reply.startswith(STARTED) or len(reply) != 1 + _PID.size:
        _exec_bootstrap(args)  # no template (or it refused): start as without preload
    relay.start(_PID.unpack_from(reply, 1)[0])
    end = _recv_exactly(sock, 1 + _STATUS.size)
    if not end.startswith(EXITED) or len(end) != 1 + _STATUS.size:
        # The template died under the worker (only a SIGKILL does that): so did it.
        sys.stderr.write("accel: the preload template ended before the worker\n")
        _end_like(signal.SIGKILL)
    _end_like(_STATUS.unpack_from(end, 1)[0])


if __name__ == "__main__":
    main(sys.argv[1:])
