"""Preload template: ``python -u _template.py FD LAUNCHER_PID PATH0 SIGNALS AGAIN [MODULE...]``.

Started once per run by the launcher (``launch.preload``), with the workers' environment
(their ``OMP_NUM_THREADS``, ...) and folder. It imports torch and the listed modules
(with ``sys.path[0]`` the script's folder, as in a worker), then serves the listening
Unix socket ``FD``: each worker's shim (``_preload_shim.py``) sends its argv,
environment, folder and standard streams, and the template forks the worker from
itself. Once the first workers started, it also imports ``torch._dynamo`` (which every
optimizer imports on first use) for the restarts (:func:`_preload_dynamo`), when the run
can restart its workers (AGAIN is ``restarts``: ``--max-restarts`` above 0, or an elastic
node range; ``once`` otherwise, and the template forks no other workers). A fork of a
process that has imported torch costs milliseconds, an import seconds.

Fork safety: the template runs no thread and never touches torch beyond the import (the
intra-op pool, CUDA and the allocator start lazily, in the worker). Before each fork it
checks that it has one thread (an imported module may start one); if not it refuses,
says so once, and the shims exec the plain bootstrap instead.

Each worker, in the child, becomes what an exec'd worker is: a session of its own
(torch's ``start_new_session``), the shim's stdin/stdout/stderr on 0/1/2, its
environment (``os.environ`` and the C environment), its folder, fresh seeds for
``random``, numpy's and torch's global generators (:func:`_reseed`), then the
bootstrap (:mod:`_bootstrap`, loaded by path) runs the script as ``__main__``. The
template reaps each worker (a pidfd says when) and sends its wait status to its shim,
which exits the same way; when a shim dies first (SIGKILL), the template kills the
worker's process group.

Run by path; imports nothing from accel.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

HERE = os.path.dirname(os.path.abspath(__file__))
PIDS = "pids"  # beside the socket: shim pid -> worker pid (preload.worker_pids reads it)
WARM = "warm"  # in PIDS once the work put off until the first workers started is done
QUIET = 1.0  # seconds without a request after a fork: the attempt's workers all started
_CREDS = struct.Struct("3i")  # struct ucred: pid, uid, gid
IMPORT_THREADS = os.environ.get("OMP_NUM_THREADS")  # what torch's OpenMP was loaded with


def _load(name: str, filename: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, filename))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


wire = _load("_accel_preload_shim", "_preload_shim.py")


@dataclass
class Request:
    """A worker to start: what its shim sent."""

    args: list[str]
    env: dict[str, str]
    cwd: str
    fds: list[int]


# -- preloading ---------------------------------------------------------------------------


def preload(path0: str, modules: list[str]) -> int:
    """Import torch and ``modules`` as a worker would (a failure is the worker's to meet).

    Returns the threads the template may have when it forks: numpy's OpenBLAS starts
    its pool at import (unless OMP_NUM_THREADS=1) and is fork-safe (its atfork handler
    stops the pool before a fork; a worker starts its own on first use). So numpy is
    imported first, as torch would import it, and its threads are allowed; any other
    thread makes forking unsafe.
    """
    sys.path[0] = path0
    with _quiet_import():
        importlib.import_module("numpy")
    allowed = thread_count()
    global _torch_import_seed
    for name in ("torch", *modules):
        try:
            importlib.import_module(name)
            if name == "torch":
                _torch_import_seed = sys.modules["torch"].initial_seed()
        except BaseException as exc:  # noqa: BLE001 - SystemExit at import time included
            _warn(
                f"launch.preload_modules: importing {name} failed ({type(exc).__name__}: "
                f"{exc}); each worker imports it itself"
            )
    return allowed


def _preload_dynamo() -> None:
    """Import ``torch._dynamo``, which a worker otherwise imports at its first optimizer.

    torch's optimizers guard ``__init__``, ``zero_grad``, ``state_dict`` and
    ``load_state_dict`` with ``torch._disable_dynamo``, which imports ``torch._dynamo`` on
    first use: 1.2-1.4 s of CPU in every worker that builds an optimizer, at every start.
    The template pays it once, when the first workers have started (:class:`Server`'s
    quiet moment): before, it would hold back their start (a script that builds no
    optimizer never pays it), and it creates torch's cache folders (the workers'
    ``TORCHINDUCTOR_CACHE_DIR``, in the workspace) before the launcher made the
    workspace. Its import starts no thread (2.6, 2.13, 2.15). A release where it fails to
    import leaves it to the worker, as torch would.
    """
    try:
        importlib.import_module("torch._dynamo")
    except Exception:  # noqa: BLE001 - the worker meets it, if it ever uses it
        pass


class _quiet_import:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, ImportError)


def _warn(message: str) -> None:
    sys.stderr.write(f"accel: warning: {message}\n")
    sys.stderr.flush()


def thread_count() -> int:
    """Threads of this process, native ones included (``threading`` sees only Python's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


# -- serving --------------------------------------------------------------------------------


class Server:
    """The template's loop: accept requests, fork workers, reap them, report their ends."""

    def __init__(
        self,
        listener: socket.socket,
        allowed_threads: int,
        later: tuple[Callable[[], None], ...] = (),
    ) -> None:
        self.listener = listener
        self.allowed_threads = allowed_threads
        self.later = list(later)  # for the first quiet moment after a fork
        self.forked = False
        self.warm = False  # that moment came
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, self._accept)
        self.conns: dict[int, socket.socket] = {}  # worker pid -> its shim's socket
        self.warned = False

    def serve(self) -> Request:
        """Loop forever in the template; return the request in each forked worker."""
        while True:
            events = self.selector.select(QUIET if self.forked and not self.warm else None)
            if not events:
                self._quiet_moment()
            for key, _ in events:
                request: Request | None = key.data(key)
                if request is not None:
                    return request

    def _quiet_moment(self) -> None:
        """No request for :data:`QUIET` seconds since a fork: the attempt's workers all
        started. Run the work put off for it, then say so (``pids/warm``: what it ran)."""
        done = []
        while self.later:
            work = self.later.pop(0)
            work()
            done.append(work.__name__)
        gc.freeze()  # what it built is the workers' too, read-only
        self.warm = True
        with _quiet(), open(os.path.join(self._pids_folder(), WARM), "w") as told:
            told.write(",".join(done))

    def _pids_folder(self) -> str:
        """``pids/`` beside the socket (made if missing): what the template tells others."""
        folder = os.path.join(os.path.dirname(self.listener.getsockname()), PIDS)
        os.makedirs(folder, exist_ok=True)
        return folder

    def _accept(self, key: selectors.SelectorKey) -> Request | None:
        conn, _ = self.listener.accept()
        try:
            conn.settimeout(10)
            raw, fds = wire.read_request(conn)
            request = Request(list(raw["args"]), dict(raw["env"]), str(raw["cwd"]), fds)
        except (OSError, ValueError, KeyError, TypeError):
            conn.close()
            return None
        if not self._fork_safe():
            self._refuse(conn, request)
            return None
        return self._fork(conn, request)

    def _fork_safe(self) -> bool:
        threads = thread_count()
        if threading.active_count() == 1 and threads <= self.allowed_threads:
            return True
        if not self.warned:
            self.warned = True
            _warn(
                f"launch.preload: the template has {threads} threads after its imports, "
                "and forking it is unsafe; the workers start by exec instead"
            )
        return False

    def _refuse(self, conn: socket.socket, request: Request) -> None:
        with _quiet():
            conn.sendall(wire.REFUSED)
        conn.close()
        _close(request.fds)

    def _fork(self, conn: socket.socket, request: Request) -> Request | None:
        pid = os.fork()
        if pid == 0:
            self._leave()
            conn.close()
            return request
        self.forked = True
        _close(request.fds)
        with _quiet():
            conn.sendall(wire.started(pid))
        self._publish(conn, pid)
        self.conns[pid] = conn
        pidfd = os.pidfd_open(pid)
        self.selector.register(pidfd, selectors.EVENT_READ, lambda key: self._reap(key, pid))
        conn.setblocking(False)
        self.selector.register(conn, selectors.EVENT_READ, lambda key: self._shim_gone(key, pid))
        return None

    def _publish(self, conn: socket.socket, pid: int) -> None:
        """``pids/<shim pid>`` holds the worker's pid: telemetry reads the worker's /proc."""
        with _quiet():
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDS.size)
            shim = _CREDS.unpack(creds)[0]
            folder = self._pids_folder()
            temp = os.path.join(folder, f".{shim}.tmp")
            with open(temp, "w", encoding="ascii") as fh:
                fh.write(str(pid))
            os.replace(temp, os.path.join(folder, str(shim)))

    def _reap(self, key: selectors.SelectorKey, pid: int) -> None:
        self.selector.unregister(key.fileobj)
        os.close(key.fd)
        _, status = os.waitpid(pid, 0)
        conn = self.conns.pop(pid)
        with _quiet():
            self.selector.unregister(conn)
        with _quiet():
            conn.setblocking(True)
            conn.sendall(wire.exited(status))
        conn.close()

    def _shim_gone(self, key: selectors.SelectorKey, pid: int) -> None:
        try:
            data = self.conns[pid].recv(1)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            return  # the shim says nothing after its request: ignore stray bytes
        self.selector.unregister(key.fileobj)  # SIGKILLed: its worker goes too
        with _quiet():
            os.killpg(pid, signal.SIGKILL)

    def _leave(self) -> None:
        """In the child: drop every descriptor of the template's loop."""
        for key in list(self.selector.get_map().values()):
            if isinstance(key.fileobj, socket.socket):
                key.fileobj.close()
            else:
                os.close(key.fd)
        self.selector.close()
        self.listener.close()


class _quiet:
    """Suppress OSError: a shim that went away changes nothing for the template."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, (OSError, KeyError, ValueError))


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


# -- becoming the worker --------------------------------------------------------------------


def become(request: Request) -> None:
    """In the forked child: the state an exec'd worker starts with."""
    os.setsid()
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
    _close([fd for fd in request.fds if fd not in wire.STDIO])
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    _signals_as_after_exec()
    _reseed()
    _threads_as_told(request.env.get("OMP_NUM_THREADS"))


# The signals the launcher catches while its agent runs (launch/_host.HANDLED_SIGNALS,
# given by name on the template's command line): an exec'd worker starts with them at
# their default, whatever the launcher inherited (nohup and `cmd &` in a script ignore
# SIGHUP, SIGINT and SIGQUIT), and Python then turns SIGINT into KeyboardInterrupt. The
# template inherited them before the launcher caught them: set them as exec would.
_caught_by_launcher: tuple[signal.Signals, ...] = ()


def _signals_as_after_exec() -> None:
    for sig in _caught_by_launcher:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _threads_as_told(wanted: str | None) -> None:
    # libgomp read OMP_NUM_THREADS when the template loaded torch; a template started
    # from a provisional plan (-n auto) may have had another value than this worker.
    torch = sys.modules.get("torch")
    if torch is not None and wanted != IMPORT_THREADS and wanted and wanted.isdigit():
        torch.set_num_threads(int(wanted))


# The seed torch's default CPU generator got when the template imported torch (or None).
_torch_import_seed: int | None = None


def _reseed() -> None:
    """The global generators as a fresh interpreter has them: seeded in the template, at
    import, they would draw the same numbers on every rank.

    - ``random``: seeded from ``os.urandom`` at import (Python's own at-fork hook does
      it again in every child; said here too);
    - numpy's legacy global ``RandomState``: a fresh ``RandomState()`` at import (a
      ``SeedSequence`` from the OS): the worker gets the state of a new one;
    - torch's default CPU generator: seeded from ``std::random_device`` when libtorch
      creates it, at ``import torch``: reseeded the same way (``Generator.seed()``),
      unless a preloaded module seeded it on purpose (``torch.manual_seed``), as it
      would have in every exec'd worker too. CUDA's default generators are created,
      and seeded from the same source, when CUDA starts, in the worker (never in the
      template: CUDA starts threads, and a template with threads is never forked);
    - multiprocessing's authentication key (its Listener's and Manager's default): drawn
      from ``os.urandom`` when ``multiprocessing`` is imported (torch imports it), so
      each worker draws its own again rather than share the template's.
    """
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        process.current_process().authkey = os.urandom(32)
    if "random" in sys.modules:
        sys.modules["random"].seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.set_state(numpy_random.RandomState().get_state())
    torch = sys.modules.get("torch")
    if torch is not None and torch.initial_seed() == _torch_import_seed:
        torch.default_generator.seed()


def run_worker(request: Request, template_pid: int) -> int:
    become(request)
    bootstrap = _load("_accel_bootstrap", "_bootstrap.py")
    code: int = bootstrap.main(request.args, parent=template_pid)
    return code


def main(argv: list[str]) -> int:
    global _caught_by_launcher
    fd, launcher, path0, caught = int(argv[0]), int(argv[1]), argv[2], argv[3]
    again, modules = argv[4] == "restarts", argv[5:]
    _caught_by_launcher = tuple(signal.Signals[name] for name in caught.split(","))
    wire._die_with_parent()
    if os.getppid() != launcher:
        return 1  # the launcher died before prctl took effect
    listener = socket.socket(fileno=fd)
    allowed = preload(path0, modules)
    # What the imports built is read-only for the workers: out of the collector's
    # sight, a worker's collections neither walk it nor copy its pages (copy-on-write).
    gc.freeze()
    template_pid = os.getpid()
    try:
        # A run that never restarts forks no other worker: its dynamo is each worker's.
        later = (_preload_dynamo,) if again else ()
        request = Server(listener, allowed, later=later).serve()
    except KeyboardInterrupt:
        return 130
    return run_worker(request, template_pid)


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except BaseException:  # noqa: BLE001 - only the template gets here, never a worker
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
