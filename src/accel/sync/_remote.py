"""The remote side, through fsspec: the index file and streamed, verified transfers.

Object stores (s3, gcs, azure) make a PUT visible whole, so files go straight to
their names there. Elsewhere (``file://``, sftp, ...) a file is written under a temp
name beside its target and renamed, so a reader never sees half of one.

Everything read from a remote is bounded: the index by :data:`INDEX_MAX_BYTES`, a file by
the size its index records (one byte more at most, then it is refused). A local remote
(``file://``) is someone else's folder too: its files are read only if they are regular
files (a FIFO would block the read, a device never end it), and nothing is written or
cleaned through a link in it.

Credentials come only from the backend's usual sources (environment, profiles,
instance metadata) or ``--storage-option``; none of it is written anywhere, and URLs
are shown with their credentials redacted.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import secrets
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from accel._fs import TMP_PREFIX, link_below, open_regular
from accel._redact import redact_url
from accel._version import __version__, extra, install_extra
from accel.errors import DamagedFile, IntegrityError, JobFailed, UsageError, hint, unreachable
from accel.layout import DATA_MARKER, LAYOUT_FILE
from accel.store.entry import is_utf8
from accel.store.hashing import CHUNK, hash_file, new_hasher
from accel.sync._checksum import (
    DEFAULT_ALGORITHM,
    algorithm_of,
    checksum_problem,
    format_checksum,
)
from accel.sync._model import FileEntry

INDEX_NAME = "accel-sync.json"
INDEX_FORMAT = "accel-sync"
INDEX_VERSION = 1
INDEX_VERSIONS_READ = frozenset({INDEX_VERSION})  # what this accel reads; a newer one: upgrade
# About 600,000 files' entries: far beyond a workspace's, and a bound on what a hostile
# index (a link to /dev/zero, a server's endless answer) can make a read hold in memory.
INDEX_MAX_BYTES = 64 << 20
TMP_MARK = TMP_PREFIX  # a file being written, on the remote as on disk
ENDPOINT_VARS = ("ACCEL_SYNC_ENDPOINT_URL", "AWS_ENDPOINT_URL")
_ATOMIC_PUT = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "memory"}
_LOCAL = ("file", "local")
# Protocols fsspec only reads: a pull works from them (a pushed folder served over HTTP),
# a push is refused before anything is read or written.
_READ_ONLY = {"http", "https", "github", "zip", "tar", "libarchive"}
_EXTRAS = {
    "s3": extra("s3"), "s3a": extra("s3"), "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
    "http": "aiohttp", "https": "aiohttp",
}  # fmt: skip

Progress = Callable[[int], None]


def parse_storage_options(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` flags -> options; ``true``/``false`` and integers are typed."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()):
            raise UsageError(f"invalid --storage-option {key!r}: expected KEY=VALUE")
        options[key.strip()] = _typed(value)
    return options


def _typed(value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return int(value) if re.fullmatch(r"-?[0-9]+", value) else value


def storage_options_for(
    protocol: str, options: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, Any]:
    """The flags' options, plus an S3 endpoint from the environment when none was given."""
    out = dict(options)
    if protocol in ("s3", "s3a") and "endpoint_url" not in out:
        endpoint = next((env[v] for v in ENDPOINT_VARS if env.get(v)), None)
        if endpoint:
            out["endpoint_url"] = endpoint
    return out


class Remote:
    """A remote folder (``root`` on ``fs``) holding a synced workspace."""

    def __init__(self, fs: Any, root: str, url: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = redact_url(url)
        # a str, a tuple, or a list (s3fs before 2023.9: ['s3', 's3a'])
        protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        self.atomic_put = any(p in _ATOMIC_PUT for p in protocols)
        # fsspec reads these over plain requests; a push would POST into a web server
        self.read_only = any(p in _READ_ONLY for p in protocols)
        self.local = any(p in _LOCAL for p in protocols)
        self._made: set[str] = set()

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    # -- the index ------------------------------------------------------------------------

    def read_index(self) -> dict[str, FileEntry] | None:
        """The files the remote holds, None when nothing was ever pushed there."""
        too_large = f"{self.url}/{INDEX_NAME} is larger than any index accel writes"
        try:
            with self._open(INDEX_NAME) as src:
                raw = b"".join(_chunks(src, INDEX_MAX_BYTES, too_large))
        except FileNotFoundError as exc:
            hidden = _hidden_error(exc)
            if hidden is not None:
                raise hidden from None
            return None
        return parse_index(raw, self.url)

    def workspace_marker(self) -> str | None:
        """The marker that makes the remote folder an accel workspace (or a workspace's
        data folder), or None: a push there would replace its config and write into its
        series without their leases."""
        return next((n for n in (LAYOUT_FILE, DATA_MARKER) if self.fs.exists(self.path(n))), None)

    def write_index(self, files: Mapping[str, FileEntry]) -> None:
        """Merge ``files`` into the remote index (a concurrent push's entries survive)."""
        merged = dict(self.read_index() or {})
        merged.update(files)
        payload = {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "accel_version": __version__,
            "updated_at": time.time(),
            "files": {rel: merged[rel].to_json() for rel in sorted(merged)},
        }
        data = (json.dumps(payload, indent=1) + "\n").encode()
        # Checked with the reader every later push and pull applies: an index it would
        # refuse is never written (it would lock every sync of this remote out).
        try:
            parse_index(data, self.url)
        except IntegrityError as exc:
            raise IntegrityError(f"{INDEX_NAME} not written: {exc}") from None
        self._write_whole(INDEX_NAME, lambda target: self.fs.pipe_file(target, data))

    # -- transfers ------------------------------------------------------------------------

    def upload(
        self,
        local: Path,
        rel: str,
        expected: str | None,
        progress: Progress,
        *,
        verify: bool = False,
    ) -> FileEntry:
        """Copy ``local`` to ``rel`` with the backend's own ``put_file`` (a kernel copy for
        ``file://``, parallel multipart uploads for S3).

        A file with a known checksum (from its manifest) is sent as it is, unless
        ``verify``: then it is hashed first and, when it fails, IntegrityError and nothing
        written. A file without one is hashed for the index.
        """
        if expected and not verify:
            got = (expected, local.stat().st_size)
        else:
            got = hash_file(
                local, algorithm=algorithm_of(expected) if expected else DEFAULT_ALGORITHM
            )
            if expected and got[0] != expected:
                raise IntegrityError(f"{local} fails its manifest checksum; not pushed")
        problem = checksum_problem(got[0])
        if problem is not None:  # the index would refuse it: nothing is sent
            raise IntegrityError(f"{local} has {problem}; not pushed")
        callback = _Callback(progress)
        self._write_whole(
            rel, lambda target: self.fs.put_file(str(local), target, callback=callback)
        )
        if callback.sent < got[1]:
            progress(got[1] - callback.sent)
        return FileEntry(got[1], got[0])

    def download(
        self, rel: str, dest: Path, expected: FileEntry, progress: Progress, *, perms: int = 0o666
    ) -> None:
        """Write ``rel`` to the new file ``dest``, fsynced; IntegrityError unless it matches.

        ``perms``: the new file's mode before the umask, from its creation on (0o600: no
        moment where another user can open it)."""
        hasher = new_hasher(algorithm_of(expected.checksum))
        size = 0
        where = f"{self.url}/{rel}"
        too_large = f"{where} is larger than the remote index records"
        with self._open(rel) as src, _create(dest, perms) as dst:
            for chunk in _chunks(src, expected.size, too_large):
                hasher.update(chunk)
                dst.write(chunk)
                size += len(chunk)
                progress(len(chunk))
            dst.flush()
            os.fsync(dst.fileno())
        got = format_checksum(algorithm_of(expected.checksum), hasher)
        if size != expected.size or got != expected.checksum:
            raise IntegrityError(
                f"{where} does not match the remote index ({size} bytes, {got}; "
                f"expected {expected.size} bytes, {expected.checksum}): refused"
            )

    def _open(self, rel: str) -> IO[bytes]:
        """``rel`` opened for reading; on a local remote only a regular file, opened
        without blocking (:func:`accel._fs.open_regular`): IntegrityError otherwise."""
        if not self.local:
            try:
                src: IO[bytes] = self.fs.open(self.path(rel), "rb")
            except FileNotFoundError as exc:
                hidden = _hidden_error(exc)
                if hidden is not None:
                    raise hidden from None
                raise
            return src
        try:
            return os.fdopen(open_regular(self.path(rel), follow=True), "rb")
        except DamagedFile as exc:
            raise IntegrityError(f"{self.url}/{rel} {exc.why}; refused") from None

    def remove_debris(self, unit: str) -> None:
        """Temp files an interrupted push left in ``unit`` (never on object stores)."""
        if self.atomic_put:
            return
        if self.local:
            self._refuse_links(unit)
            found = _local_files(self.path(unit))
        else:
            try:
                found = self.fs.find(self.path(unit))
            except (FileNotFoundError, NotADirectoryError):
                return
        for path in found:
            if path.rsplit("/", 1)[-1].startswith(TMP_MARK):
                try:
                    self.fs.rm_file(path)
                except FileNotFoundError:
                    pass

    def _write_whole(self, rel: str, write: Callable[[str], Any]) -> None:
        """``write(path)`` creates the file; it appears at ``rel`` whole or not at all."""
        final = self.path(rel)
        if self.atomic_put:
            write(final)
            return
        parent, _, name = final.rpartition("/")
        if self.local:
            self._refuse_links(rel)
        self._mkdir(parent)
        tmp = f"{parent}/{TMP_MARK}{secrets.token_hex(4)}-{name}"
        try:
            write(tmp)
            self.fs.mv(tmp, final)
        except BaseException:
            try:
                self.fs.rm_file(tmp)
            except Exception:  # noqa: BLE001 - the original error matters, not this one
                pass
            raise

    def _mkdir(self, folder: str) -> None:
        if folder and folder not in self._made:
            self.fs.makedirs(folder, exist_ok=True)
            self._made.add(folder)

    def _refuse_links(self, rel: str) -> None:
        """A local remote is written and cleaned only through its own folders: a link in
        it (planted by anyone who can write there) could lead the write anywhere."""
        link = link_below(self.root, self.path(rel))
        if link is not None:
            shown = f"{self.url}/{link[len(self.root) + 1 :]}"
            raise JobFailed(
                f"{shown} is a symbolic link; push never writes or cleans through a link "
                "in the remote: remove it"
            )


def _chunks(src: IO[bytes], limit: int, too_large: str) -> Iterator[bytes]:
    """What ``src`` holds, chunk by chunk, ``limit`` bytes at most: one byte more (no more
    is read) is IntegrityError ``too_large``."""
    seen = 0
    while chunk := src.read(min(CHUNK, limit + 1 - seen)):
        seen += len(chunk)
        if seen > limit:
            raise IntegrityError(f"{too_large} ({limit} bytes); refused")
        yield chunk


def _hidden_error(exc: FileNotFoundError) -> BaseException | None:
    """The error ``exc`` stands for, when it is no "not found": fsspec's http:// asks for a
    file's size before it opens it, and turns every failure of that request (a server's
    500 or 403, a refused connection, a storage option aiohttp does not take: a TypeError,
    a port out of range: a ValueError) into FileNotFoundError; only a 404 means nothing is
    there. (s3fs's "not found" has botocore's error as its cause: left as it is.)"""
    cause = exc.__cause__
    if isinstance(cause, (TypeError, ValueError)):
        return cause
    if cause is None or type(cause).__module__.split(".")[0] != "aiohttp":
        return None
    return None if getattr(cause, "status", None) == 404 else cause


def _local_files(folder: str) -> Iterator[str]:
    """The files (and links) under ``folder``, never entering a linked folder."""
    for parent, _, names in os.walk(folder):
        yield from (os.path.join(parent, name) for name in names)


def _create(dest: Path, perms: int) -> IO[bytes]:
    """The new file ``dest`` (FileExistsError when it is there), mode ``perms`` & ~umask."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    return os.fdopen(os.open(dest, flags, perms), "wb")


class _Callback:
    """Forwards the bytes a backend reports to ``progress`` (fsspec's callback protocol)."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self.sent = 0

    def set_size(self, size: int | None) -> None:
        pass

    def relative_update(self, inc: int = 1) -> None:
        self.sent += inc
        self._progress(inc)

    def absolute_update(self, value: int) -> None:
        self.relative_update(value - self.sent)

    def branched(self, path_1: str, path_2: str, **kwargs: Any) -> _Callback:
        return self

    def call(self, *args: Any, **kwargs: Any) -> None:
        pass


def parse_index(raw: bytes, url: str) -> dict[str, FileEntry]:
    try:
        data = json.loads(raw)
        if data.get("format") != INDEX_FORMAT:
            raise ValueError
    except (ValueError, AttributeError, RecursionError):
        raise IntegrityError(f"{url}/{INDEX_NAME} is not an accel sync index") from None
    version = data.get("version")
    if type(version) is int and version > INDEX_VERSION:  # a bool is no version
        raise UsageError(f"{url} was written by a newer accel; upgrade accel to sync with it")
    if type(version) is not int or version not in INDEX_VERSIONS_READ:
        raise IntegrityError(f"{url}/{INDEX_NAME} is damaged (no version accel writes)")
    files = data.get("files")
    if not isinstance(files, dict):
        raise IntegrityError(f"{url}/{INDEX_NAME} is damaged (no file list)")
    return {str(rel): _entry(rel, raw_entry, url) for rel, raw_entry in files.items()}


def _entry(rel: str, raw: Any, url: str) -> FileEntry:
    from accel.sync._inventory import manifest_entry

    entry = manifest_entry(raw)
    if entry is None or not 0 <= entry.size < 2**63:
        raise IntegrityError(f"{url}/{INDEX_NAME} is damaged at {rel[:200]!r}; refused")
    problem = checksum_problem(entry.checksum)
    if problem is not None:
        raise IntegrityError(f"{url}/{INDEX_NAME} lists {rel[:200]!r} with {problem}; refused")
    return entry


def open_remote(url: str, options: Mapping[str, Any], env: Mapping[str, str]) -> Remote:
    """The remote at ``url``; a missing backend or bad URL is one line, exit 2."""
    try:
        import fsspec
    except ImportError:
        raise UsageError(f"remote sync needs fsspec: {install_extra('sync')}") from None
    shown = redact_url(url)
    problem = url_problem(url, fsspec.available_protocols())
    if problem is not None:
        raise UsageError(f"{shown!r}: {problem}" if url else problem)
    protocol = url.split("://", 1)[0].lower()
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options_for(protocol, options, env))
    except ImportError:
        backend = _EXTRAS.get(protocol, f"the fsspec backend for {protocol}://")
        raise UsageError(f"{shown}: {protocol}:// needs a backend: install {backend}") from None
    except ValueError as exc:
        raise UsageError(f"{shown}: {_first_line(exc)}") from None
    except TypeError as exc:
        raise UsageError(f"{shown}: bad --storage-option ({_first_line(exc)})") from None
    except OSError as exc:  # a backend that connects as it is made (ftp://, sftp://)
        raise _cannot_reach(shown, exc) from None
    return Remote(fs, root, url)


def _cannot_reach(shown: str, exc: OSError) -> JobFailed:
    reason = exc.strerror or _first_line(exc)
    return JobFailed(f"{shown}: cannot reach the remote: {reason}; {hint(exc)}")


_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)
_LOCAL = ("file", "local")
# Protocols whose URL names a host, protocol://[user[:password]@]host[:port]/path.
_HOSTED = {"http", "https", "ftp", "sftp", "ssh", "smb", "webdav", "webhdfs"}
_FORMS = "file:///absolute/path or s3://bucket/prefix (any fsspec protocol)"


def url_problem(url: str, protocols: Collection[str]) -> str | None:
    """What is wrong with a remote URL, or None. The forms accepted (an allowlist):
    ``file:///absolute/path``, and ``<protocol>://<bucket or host>/...`` for a protocol
    fsspec knows (a host's URL with its host and a port 1 to 65535 if any). Not a bare
    path, not ``file://`` with a host or a relative path (which fsspec reads as a folder
    under the current one), not the filesystem root (``file:///``: a push would spread a
    workspace over ``/``), not a chained ``a::b`` URL."""
    if not url.strip():
        return f"the remote URL is empty: write {_FORMS}"
    if not is_utf8(url):  # bytes that are no text, which Python keeps as lone surrogates
        return f"the remote URL is not valid UTF-8: write {_FORMS}"
    if not url.isprintable():
        return f"a remote URL has no control characters: write {_FORMS}"
    if "::" in url:
        return f"chained fsspec URLs (a::b) are not accepted: write {_FORMS}"
    match = _URL.fullmatch(url)
    if match is None:
        form = f"file://{url}" if url.startswith("/") else _FORMS
        return f"not a URL: write {form}"
    protocol, rest = match.group(1).lower(), match.group(2)
    if "?" in rest or "#" in rest:  # fsspec took them as part of a folder's name
        return (
            f"a remote URL names a folder and takes no query or fragment ('?', '#'): "
            f"write {_FORMS}; a backend's options go in -o KEY=VALUE"
        )
    if protocol in _LOCAL:
        if not rest.startswith("/"):
            what = "no folder" if not rest else f"the host {rest.split('/')[0]!r}, not a folder"
            return f"a {protocol}:// URL names {what}: write file:///absolute/path (three slashes)"
        if posixpath.normpath(rest).strip("/") == "":  # '/', '//', '/tmp/..'
            return (
                f"a {protocol}:// URL names the filesystem root, not a folder of its own: "
                "write file:///absolute/path to a folder for the remote"
            )
        return _dot_parts(rest, "file:///absolute/path")
    if protocol not in protocols:
        return f"{protocol}:// is not a protocol fsspec knows: write {_FORMS}"
    bucket = rest.split("/", 1)[0]
    if not bucket:
        return f"a {protocol}:// URL names no bucket or host: write {protocol}://bucket/prefix"
    if "@" in bucket and protocol in _BUCKET_CREDENTIALS:  # no bucket name holds an '@'
        return (
            f"{protocol}:// URLs carry no credentials: write {protocol}://bucket/prefix "
            f"and {_BUCKET_CREDENTIALS[protocol]}"
        )
    if protocol in _HOSTED:
        return _host_problem(protocol, bucket) or _dot_parts(rest, f"{protocol}://host/path")
    return _dot_parts(rest, f"{protocol}://bucket/prefix")


def _host_problem(protocol: str, authority: str) -> str | None:
    """What is wrong with the ``[user[:password]@]host[:port]`` of a URL that names a host:
    no host (``https://user:pw@/x``: fsspec asked the folder's server for nothing, or DNS
    for an empty name), a port no host has. Nothing of it is quoted: a password may be in
    any part of a URL written wrong, and the URL is shown redacted beside this."""
    hostport = authority.rpartition("@")[2]
    if hostport.startswith("["):  # an IPv6 literal, [::1]:8080
        host, _, port = hostport.partition("]")
        port = port.removeprefix(":")  # '[::1]x': 'x', no port either
    else:
        host, _, port = hostport.partition(":")
    if host.strip("[") == "":
        return f"a {protocol}:// URL names no host: write {protocol}://host/path"
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        return f"a {protocol}:// URL's port is 1 to 65535: write {protocol}://host:port/path"
    return None


def _dot_parts(path: str, form: str) -> str | None:
    """A '.' or '..' part: a folder on one backend (file://), a literal key on another
    (s3://): a URL that means the folder it names on every backend has none."""
    if any(part in (".", "..") for part in path.split("/")):
        return f"a remote URL's path has no '.' or '..' parts: write {form}, the folder itself"
    return None


def _first_line(exc: BaseException) -> str:
    """An exception's first line, with the next one when it only leads in ("Parameter
    validation failed:"; the reason follows on the line below)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def from_backend(exc: BaseException) -> bool:
    """An error of the remote's backend: an OSError, RuntimeError or ValueError, or any
    exception of a package other than Python's and accel's (aiohttp's ClientResponseError
    for an HTTP 500, ...). A bug of accel's own (a TypeError, a KeyError) is not one: it
    stays a crash, with its traceback saved for the report."""
    if isinstance(exc, (OSError, RuntimeError, ValueError)):
        return True
    package = type(exc).__module__.split(".")[0]
    if package not in ("builtins", "accel"):
        return isinstance(exc, Exception)
    # a TypeError s3fs raises for a storage option it does not take (-o bogus=1) is the
    # backend's too: the newest frame that is neither Python's own nor accel's says so
    return isinstance(exc, Exception) and not _raised_in_accel(exc)


def _raised_in_accel(exc: BaseException) -> bool:
    import sysconfig

    accel_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    stdlib = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
    newest = accel_dir
    tb = exc.__traceback__
    while tb is not None:
        path = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not path.startswith(stdlib) or "site-packages" in path:
            newest = path
        tb = tb.tb_next
    return newest.startswith(accel_dir)


# A backend's errors about credentials (by name: the backends are optional packages),
# and what to give it instead.
_S3_CREDENTIALS = (
    "give S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE "
    "(a public bucket: -o anon=true)"
)
_GCS_CREDENTIALS = (
    "give GCS credentials: GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth "
    "application-default login` (a public bucket: set the storage option token to anon)"
)
CREDENTIALS_FIX = {
    "NoCredentialsError": _S3_CREDENTIALS,  # botocore
    "PartialCredentialsError": _S3_CREDENTIALS,
    "DefaultCredentialsError": _GCS_CREDENTIALS,  # google.auth
}
# The object stores whose URL names a bucket, where 'user:secret@' is never a form
# (azure's abfs://container@account is one: not here).
_BUCKET_CREDENTIALS = {
    "s3": _S3_CREDENTIALS,
    "s3a": _S3_CREDENTIALS,
    "gs": _GCS_CREDENTIALS,
    "gcs": _GCS_CREDENTIALS,
}


def backend_error(remote_url: str, exc: BaseException) -> JobFailed:
    """A transfer error as one line (the URL already redacted); a host the backend could
    not reach (http://, s3:// connect at the first request) as :func:`open_remote` says it;
    missing or refused credentials with what to give."""
    if isinstance(exc, OSError) and unreachable(exc):
        return _cannot_reach(remote_url, exc)
    said = f"{remote_url}: {type(exc).__name__}: {_first_line(exc)}"
    fix = CREDENTIALS_FIX.get(type(exc).__name__)
    if fix is None and isinstance(exc, PermissionError) and not remote_url.startswith("file:"):
        fix = "the credentials in use are refused there: check which are used and what they may do"
    return JobFailed(f"{said}; {fix}" if fix else said)
