# SPDX-License-Identifier: MIT
"""The store's root: which root, the parts it can do without (objects/, pch/), folders staged,
published and removed, and records that only save work. Standard library only, and nothing here
compiles: the CLI imports it where the toolchain is broken."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _layout
from .._errors import CacheError, warn
from .._files import file_identity, private_dir_problem, read_regular, sha256_file, unsafe_path_problem, write_json_atomic
from .._flock import flocked
from .._layout import REMOVING_PREFIX, TMP_PREFIX, configured_root

if TYPE_CHECKING:
    from .._records import KeyComponents


# Folders: staged beside their place, published in one rename, removed by renaming away first
def remove_dead_staging(folder: Path, prefix: str = TMP_PREFIX) -> None:
    """Remove the `<prefix><pid>-*` staging folders in folder whose process is gone (killed while
    writing): nothing in one is ever read."""
    try:
        with os.scandir(folder) as found:
            names = [f.name for f in found if f.name.startswith(prefix)]
    except OSError:
        return
    for name in names:
        if staging_is_dead(name, prefix):
            stop_processes_in(Path(folder) / name)
            shutil.rmtree(Path(folder) / name, ignore_errors=True)


def stop_processes_in(folder: Path) -> None:
    """SIGKILL this user's processes working in folder: a killed build's ninja and compilers run on as
    orphans, burning CPU and writing into the folder while it is removed (RELIABILITY N24)."""
    inside = os.path.join(os.path.realpath(folder), "")
    for _ in range(3):  # a dying ninja may start one more compiler
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if os.path.join(cwd, "").startswith(inside) and int(pid) != os.getpid():
                found.append(int(pid))
        if not found:
            return
        for compiler in found:
            with contextlib.suppress(OSError):
                os.kill(compiler, signal.SIGKILL)
        time.sleep(0.01)


def staging_is_dead(name: str, prefix: str = TMP_PREFIX) -> bool:
    """Whether the `<prefix><pid>-*` staging folder `name` belongs to a process that is gone."""
    pid = name[len(prefix) :].partition("-")[0]
    return pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}")


def remove_tree(path: Path | str) -> None:
    """Delete a directory (or a file or link in its place) so that no reader sees it half deleted.
    One removed meanwhile (by another remover) is no error."""
    # Not named after path: an entry's name may already be near the file system's 255 bytes.
    trash = Path(path).parent / f"{REMOVING_PREFIX}{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.unlink(trash)


def remove_locked(tree: Path | str | None, lock: Path | str | None) -> bool:
    """Remove tree (None: only the lock) and its lock file under its lock; False where another
    process holds the lock (nothing removed). Raises OSError where tree cannot be removed."""
    with flocked(lock, blocking=False) if lock else contextlib.nullcontext(True) as free:
        if not free:
            return False
        if tree is not None:
            remove_tree(tree)
        if lock:
            with contextlib.suppress(OSError):
                os.unlink(lock)
    return True


def foreign_problem(folders: list, files: list) -> str | None:
    """Why what a build would reuse from the store (its folders and files) may hold another
    user's code: a link, or owned or writable by someone else (RELIABILITY A14); None where all is yours."""
    for paths, directory in ((folders, True), (files, False)):
        for path in paths:
            try:
                problem = unsafe_path_problem(str(path), "stored file", (os.getuid(),), directory)
            except FileNotFoundError:
                continue  # what is missing is a miss, found by the reader
            if problem:
                return problem
    return None


# The root
def check_private_dir(path: Path) -> None:
    """Refuse a directory another user could write into: loading a .so from it runs their code."""
    problem = private_dir_problem(str(path))
    if problem:
        raise CacheError(problem)


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (0700, as each missing parent, whatever the umask) or check an existing one."""
    if not os.path.lexists(path):  # one system call when it exists, as it does on every warm load
        missing = []
        parent = Path(os.path.abspath(path))
        while not os.path.lexists(parent):
            missing.append(parent)
            parent = parent.parent
        for folder in reversed(missing):
            try:
                folder.mkdir(mode=0o700)
                os.chmod(folder, 0o700)  # mkdir's mode is cut by the umask; this one is not
            except FileExistsError:
                pass  # made by another process meanwhile
    check_private_dir(path)
    return path


_fallback_root: Path | None = None


def fallback_root() -> Path:
    """Where builds go when the configured root is refused: one per-user folder in the temp dir,
    reused by every process, checked like any root."""
    return Path(tempfile.gettempdir()) / f"jitops-cache-{os.getuid()}"


def cache_root(cache_dir: str | None = None) -> Path:
    """The usable cache root, else (reported once) fallback_root(), else a private temporary one removed
    at exit. cache_dir: an extension's own root (build_directory), used as given or refused."""
    global _fallback_root
    if cache_dir is not None:
        try:
            return usable_root(Path(cache_dir))
        except (OSError, CacheError) as err:
            raise CacheError(f"jitops: cannot use the cache directory {cache_dir} (build_directory): {err}") from err
    if _fallback_root is not None:
        return _fallback_root
    root = Path(configured_root()[0])
    try:
        return usable_root(root)
    except (OSError, CacheError) as err:
        problem = f"cannot use the cache at {root} ({err})"
    try:
        _fallback_root = usable_root(fallback_root())
        warn(f"{problem}; using the per-user fallback cache {_fallback_root}. Set JITOPS_CACHE_DIR to a directory you own.")
    except (OSError, CacheError) as err:
        import atexit  # only for the last-resort temporary root

        _fallback_root = Path(tempfile.mkdtemp(prefix="jitops-cache-"))
        atexit.register(shutil.rmtree, _fallback_root, ignore_errors=True)
        warn(
            f"{problem}, nor the fallback {fallback_root()} ({err}); building into the private temporary "
            f"cache {_fallback_root}, removed at exit. Set JITOPS_CACHE_DIR to a directory you own."
        )
    return _fallback_root


def usable_root(root: Path) -> Path:
    ensure_private_dir(root)
    if not os.access(root, os.W_OK | os.X_OK):
        raise CacheError(f"cache directory {root} is not writable")
    return root


def shared_root(cache_dir: str | None) -> Path:
    """The root of what every extension shares (PCHs): the cache root; for an extension with its own
    (build_directory), that one where the configured root is unusable, without a warning."""
    if cache_dir is None:
        return cache_root()
    try:
        return usable_root(Path(configured_root()[0]))
    except (OSError, CacheError):
        return Path(cache_dir)


def configured_roots() -> list[str]:
    """Every root JITOPS_CACHE_DIR decides: the configured one and its fallbacks."""
    return [configured_root()[0], str(fallback_root()), *([str(_fallback_root)] if _fallback_root else [])]


def note_other_root(root: Path) -> None:
    """Add root, an extension's own (build_directory), to the configured root's list of other
    roots, which the CLI's `list` reads too. Only informs: a failure to write is ignored."""
    configured = Path(configured_root()[0])
    if os.path.realpath(root) == os.path.realpath(configured) or str(root) in other_roots():
        return
    with contextlib.suppress(OSError, CacheError):
        usable_root(configured)
        # One short O_APPEND write: lines of concurrent builds never interleave.
        fd = os.open(configured / _layout.OTHER_ROOTS_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, f"{root}\n".encode())
        finally:
            os.close(fd)


def other_roots() -> list[str]:
    """The roots note_other_root() listed, each once, in order (some may be gone since)."""
    try:
        lines = (Path(configured_root()[0]) / _layout.OTHER_ROOTS_NAME).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return list(dict.fromkeys(line for line in lines if os.path.isabs(line)))


# The parts a root can do without (objects/, pch/): unusable, they cost compiles, never a load.
_parts_warned: set[str] = set()


def part_problem(root: Path | str, part: str, write: bool = True, create: bool = True) -> str | None:
    """Why root's optional `part` cannot be used (made 0700 where missing, unless not create), or
    None. write=False: reading is enough (a read-only store still serves objects)."""
    path = Path(root) / part
    if not create and not os.path.lexists(path):
        return None
    try:
        ensure_private_dir(path)
    except (OSError, CacheError) as err:
        return str(err)
    if not os.access(path, (os.W_OK if write else os.R_OK) | os.X_OK):
        return f"cache directory {path} is not {'writable' if write else 'readable'}"
    return None


def usable_part(root: Path | str, part: str, write: bool = True) -> Path | None:
    """root/part where it can be used, else None, with one warning per process and problem: the
    build goes on without it (`jitops-cache doctor` names it too)."""
    problem = part_problem(root, part, write)
    if problem is None:
        return Path(root) / part
    if problem not in _parts_warned:
        _parts_warned.add(problem)
        what = "stored objects" if part == _layout.OBJECTS_DIR else "precompiled headers"
        warn(f"{problem}; building without {what} there (more compiles, nothing else)")
    return None


# Records that only save work
RECORD_FILE_MAX = 64 << 20  # a root's record of file hashes grows with the headers it has seen


class RecordFile:
    """A JSON object in the cache root that only saves work: a lost, stale or unreadable record
    costs recomputing what it held, never a wrong result."""

    def __init__(self, path: Path | None):
        self.path = path
        self.records: dict = {}
        self.changed = False
        if path is not None:
            try:
                loaded = json.loads(read_regular(path, RECORD_FILE_MAX))
                self.records = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):  # a FIFO or a folder there too: never waited on
                pass

    def put(self, key: str, value) -> None:
        self.records[key] = value
        self.changed = True

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        try:
            write_json_atomic(self.path, self.records, durable=False)
            self.changed = False
        except OSError:
            pass  # recomputing next time is only slower


class KnownFileHashes(RecordFile):
    """sha256 of files as last hashed, each with the identity it had then (<root>/file-hashes.json)."""

    def sha256(self, path: str) -> str:
        identity = file_identity(path)
        record = self.records.get(path)
        if isinstance(record, list) and len(record) == 2 and record[0] == identity:
            return record[1]
        digest = sha256_file(path)
        # Recorded with the identity read before hashing: a write during the hash changes the
        # identity, so the next load hashes again rather than trusting a torn read.
        self.put(path, [identity, digest])
        return digest


_root_records: dict[tuple[Path, str], RecordFile] = {}


def _root_record(kind: type[RecordFile], name: str, root: Path | str | None) -> RecordFile:
    """The record file `name` of a root (an extension's own, else the cache root), read once per
    process: a caller who chose a folder finds nothing written elsewhere."""
    root = Path(root) if root is not None else cache_root()
    if (root, name) not in _root_records:
        _root_records[root, name] = kind(root / name)
    return _root_records[root, name]


def known_file_hashes(root: Path | str | None = None) -> KnownFileHashes:
    record = _root_record(KnownFileHashes, _layout.FILE_HASHES_NAME, root)
    assert isinstance(record, KnownFileHashes)  # the one kind stored under its name
    return record


def binary_identity(path: Path) -> tuple[str, str]:
    """The binary's resolved path, and that path with its file identity: the identity changes
    whenever the binary is replaced or rewritten."""
    resolved = os.path.realpath(path)
    return resolved, "|".join(map(str, [resolved, *file_identity(resolved)]))


def toolchain_probes(root: Path | str | None = None) -> RecordFile:
    """Each compiler's `--version` line, by its binary_identity (<root>/toolchain.json): a warm
    load must start no process, and `c++ --version` costs one."""
    return _root_record(RecordFile, _layout.TOOLCHAIN_PROBES_NAME, root)


def stable_refused(root: Path | str | None = None) -> RecordFile:
    """Why each stable key's library failed the stable-ABI audit, by that key (<root>/stable-refused.json):
    such an extension is planned under its exact key at once, without building the stable one again."""
    return _root_record(RecordFile, _layout.STABLE_REFUSED_NAME, root)


def hash_files(
    paths: list[str] | list[Path], relative_to: Path, known: KnownFileHashes | None = None, each: dict | None = None
) -> str:
    """sha256 over each file's name relative to relative_to and its sha256 (a rename changes it).
    each: filled with every file's sha256, by its relative name."""
    known = known or KnownFileHashes(None)
    prefix = os.path.join(str(relative_to), "")
    digest = hashlib.sha256()
    for path in sorted(map(str, paths)):
        if not path.startswith(prefix):
            raise ValueError(f"{path} is not under {relative_to}")
        file_digest = known.sha256(path)
        if each is not None:
            each[path[len(prefix) :]] = file_digest
        digest.update(path[len(prefix) :].encode())
        digest.update(b"\0")
        digest.update(file_digest.encode())
        digest.update(b"\0")
    known.save()
    return digest.hexdigest()


def compute_key(components: KeyComponents) -> str:
    canonical = json.dumps(components, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[: _layout.KEY_LENGTH]
