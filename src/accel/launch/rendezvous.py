"""A rendezvous that talks: check the endpoint before torch, report while waiting.

torch's c10d rendezvous, given an endpoint that does not resolve or does not answer,
retries in C++ for minutes, prints stack traces and does not notice Ctrl-C. Before
handing over, :func:`check_resolves` resolves the host (exit 2 when it does not: a
typo) and, on the nodes that join rather than host, :func:`wait_for_host` connects to
the port until node 0 answers, saying so every ``report`` seconds and giving up with
one line after ``connect_timeout``. All of it in Python on the main thread, so a
signal acts at once.

While the nodes wait for each other, :class:`WaitReporter` prints how many are still
missing every ``report`` seconds.

An elastic job (``--nnodes MIN:MAX``) starts once MIN nodes have joined and another
``last_call`` seconds have passed without reaching MAX (torch's ``last_call_timeout``).

The times come from the environment so tests stay fast:
``ACCEL_RDZV_CONNECT_TIMEOUT`` (default 50 s: with start-up, the answer comes within
a minute), ``ACCEL_RDZV_REPORT_INTERVAL`` (default 30 s) and ``ACCEL_RDZV_LAST_CALL``
(default 30 s, as torchrun).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from accel.errors import JobFailed, UsageError

CONNECT_TIMEOUT_ENV = "ACCEL_RDZV_CONNECT_TIMEOUT"
REPORT_INTERVAL_ENV = "ACCEL_RDZV_REPORT_INTERVAL"
LAST_CALL_ENV = "ACCEL_RDZV_LAST_CALL"
CONNECT_TIMEOUT = 50.0
REPORT_INTERVAL = 30.0
LAST_CALL = 30.0  # torch's last_call_timeout

Notify = Callable[[str], None]


@dataclass(frozen=True)
class Timing:
    connect_timeout: float = CONNECT_TIMEOUT
    report: float = REPORT_INTERVAL
    last_call: float = LAST_CALL

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Timing:
        return cls(
            _seconds(env, CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT),
            _seconds(env, REPORT_INTERVAL_ENV, REPORT_INTERVAL),
            _seconds(env, LAST_CALL_ENV, LAST_CALL),
        )


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{name}={text!r} is not a number of seconds") from None
    if not value > 0:
        raise UsageError(f"{name}={text!r} must be more than 0 seconds")
    return value


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port)."""
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def _as_given(endpoint: str, named: str) -> str:
    """The endpoint as a refusal names it: ``named`` (the plan's ``rdzv_named``: the
    flag, a variable, the config file's line, a scheduler), else as the flag."""
    return named or f"--rdzv-endpoint {endpoint}"


def check_resolves(endpoint: str, named: str = "") -> None:
    """:class:`UsageError` (exit 2) when the endpoint's host name does not resolve.
    ``named``: the endpoint as given (default ``--rdzv-endpoint ENDPOINT``)."""
    host, _ = split_endpoint(endpoint)
    reason = _unresolved(host)
    if reason is not None:
        raise UsageError(
            f"the rendezvous host {host!r} ({_as_given(endpoint, named)}) does not resolve "
            f"({reason}); give node 0's host name or IP address"
        )


def check_local_addr(addr: str, timing: Timing) -> None:
    """:class:`UsageError` (exit 2) when ``--local-addr`` does not resolve, or is not an
    address of this machine and does not lead back to it.

    torch hands this node's address to its workers as ``MASTER_ADDR`` when the node is
    the rendezvous' first, and to the other nodes: at a typo or another machine's
    address they dialled for minutes in C++, the launcher deaf to SIGTERM meanwhile.
    """
    host = addr.strip("[]")
    reason = _unresolved(host)
    if reason is not None:
        raise UsageError(
            f"--local-addr {addr!r} does not resolve ({reason}); give this machine's host "
            "name or IP address, as the other nodes reach it"
        )
    if not _reaches_here(host, 0, timing):  # any free port: nothing listens there yet
        raise UsageError(
            f"--local-addr {addr} is not an address of this machine: give one the other "
            "nodes reach this machine at, or leave --local-addr out"
        )


def _unresolved(host: str) -> str | None:
    """Why ``host`` does not resolve, or None when it does."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
    return None


def check_hosted_here(endpoint: str, timing: Timing, named: str = "") -> None:
    """On node 0, told to host (``--node-rank 0``): :class:`UsageError` (exit 2) when
    ``endpoint`` does not lead back to this machine.

    Node 0 hosts the rendezvous store and dials it at the endpoint like every node. At
    another machine's address (a cluster's config imported on a laptop, a node's address
    typed on the wrong node) torch dialled for a minute in C++, deaf to Ctrl-C, and then
    blamed "the node that hosts it (node 0)": this one. An address of another machine
    that still leads here (a NAT's own public address) is tried once, in Python.
    """
    host, port = split_endpoint(endpoint)
    if _reaches_here(host, port, timing):
        return
    raise UsageError(
        f"{_as_given(endpoint, named)}: this is node 0, which hosts the rendezvous, and "
        f"{host} is not an address of this machine: give node 0's own address on every "
        "node, or start node 0 on that machine"
    )


def _reaches_here(host: str, port: int, timing: Timing) -> bool:
    """Whether ``host`` is this machine: one of its addresses, or one that leads back to
    it (a NAT's public address), tried once, up to 5 s."""
    return names_this_machine(host) or leads_here(host, port, min(timing.connect_timeout, 5.0))


def names_this_machine(host: str) -> bool:
    """Whether ``host`` resolves to an address of this machine: one a socket binds to."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    for family, kind, proto, _, address in found:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.bind((address[0], 0, *address[2:]))
        except OSError:
            continue
        return True
    return False


def leads_here(host: str, port: int, timeout: float) -> bool:
    """Whether a connection to ``host:port`` reaches this machine: a listener of ours on
    that port takes it. True when the port is taken here (something of this machine's
    listens; torch will say what), False when nothing or another machine answers. Port 0:
    a free one."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, UnicodeError, IndexError):
        return False
    listener = socket.socket(family, socket.SOCK_STREAM)
    with listener:
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("::" if family == socket.AF_INET6 else "", port))
            listener.listen(1)
        except OSError:
            return True
        port = listener.getsockname()[1]  # the one bound: port 0 picks a free one
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError:
            return False
        listener.settimeout(timeout)
        try:
            accepted, _ = listener.accept()
        except OSError:  # answered, but not by us: another machine
            return False
        accepted.close()
        return True


def wait_for_host(
    endpoint: str, timing: Timing, notify: Notify, clock: Callable[[], float] = time.monotonic
) -> None:
    """On a joining node: wait until node 0 listens at ``endpoint``, or fail with one line.

    torch would retry in C++ (deaf to Ctrl-C) and print traces; this connects in
    Python, every half second, so a signal acts at once.
    """
    host, port = split_endpoint(endpoint)
    start = clock()
    next_report = start + timing.report
    while True:
        reason = _try_connect(host, port, min(1.0, timing.connect_timeout))
        if reason is None:
            return
        now = clock()
        if now - start >= timing.connect_timeout:
            raise JobFailed(
                f"cannot reach the rendezvous at {endpoint} after {now - start:.0f} s "
                f"({reason}): start node 0 (`accel launch --node-rank 0 ...`) there first, "
                "or check --rdzv-endpoint and the firewall"
            )
        if now >= next_report:
            notify(f"accel: waiting for node 0 at {endpoint} ({reason}), {now - start:.0f} s")
            next_report += timing.report
        time.sleep(max(0.0, min(0.5, start + timing.connect_timeout - clock())))


def _try_connect(host: str, port: int, timeout: float) -> str | None:
    """None once something listens at host:port, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return "no answer"
    except OSError as exc:
        return exc.strerror or type(exc).__name__


SPARE = "spare"  # joined a job at its most nodes: in ``redundancy_list`` until one leaves
NEXT_ROUND = "next round"  # joined a running job below its most: in ``wait_list`` until the
# job's nodes restart their workers for it (or, when they have ended, never)


class WaitReporter:
    """While the nodes rendezvous, say every ``interval`` how many are still missing.

    ``joined`` returns how many nodes have joined so far (None when unknown).
    ``nnodes`` is how many the job needs to start; ``most``, of an elastic job, how
    many it can take.
    """

    def __init__(
        self,
        endpoint: str,
        nnodes: int,
        joined: Callable[[], int | None],
        notify: Notify,
        interval: float,
        most: int | None = None,
        role: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.endpoint = endpoint
        self.nnodes = nnodes
        self.most = most if most is not None else nnodes
        self._joined = joined
        self._role = role
        self._notify = notify
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> WaitReporter:
        if self.most > 1 and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._loop, name="accel-rdzv-report", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(self._interval):
            waited = time.monotonic() - start
            self._notify(self.message(self._joined(), waited, role=self._role()))

    def message(self, joined: int | None, waited: float, role: str | None = None) -> str:
        """``role``: how this node waits on a job that runs without it (``spare``: the job
        has its most nodes; ``next round``: torch restarts the job's workers for it)."""
        if role == SPARE:
            return (
                f"accel: the job at {self.endpoint} has its {self.most} nodes; this node "
                f"waits as a spare and joins when one leaves, {waited:.0f} s"
            )
        if role == NEXT_ROUND:
            running = f" with {joined} node(s)" if joined else ""
            return (
                f"accel: the job at {self.endpoint} is running{running}; this node joins "
                f"when its nodes restart their workers for it, {waited:.0f} s"
            )
        if joined is None:
            return f"accel: waiting for the other nodes at {self.endpoint}, {waited:.0f} s"
        if self.most > self.nnodes and joined >= self.nnodes:
            return (
                f"accel: {joined} of at most {self.most} nodes have joined at {self.endpoint}; "
                f"starting unless more join soon, {waited:.0f} s"
            )
        more = max(1, self.nnodes - max(joined, 1))
        nodes = "node" if more == 1 else "nodes"
        more_text = f"at least {more}" if self.most > self.nnodes else str(more)
        return f"accel: waiting for {more_text} more {nodes} at {self.endpoint}, {waited:.0f} s"
