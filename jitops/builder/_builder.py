# SPDX-License-Identifier: MIT
"""Build one extension's library (imported only on a miss): under the entry's lock, in a private
staging folder, compiling only the units the object store lacks, then a load check, the inputs'
check and an atomic publish."""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .. import _layout, _settings
from .._errors import BuildError, NamespaceConflict
from ..store import _budget, _entries, _failures, _object_store, _prebuilt, _root, _stable
from ..store._key import CudaPlan, PlannedEntry, environment_tools
from ..store._lock import under_entry_lock
from ..warm import _libraries, _namespaces
from ..warm._libraries import CUDA_SUFFIXES, DROP_IN_NAMESPACE
from . import _buildfile, _jobs, _ninja, _pch, _pch_fetch, _progress, _torch_flags

if TYPE_CHECKING:
    from ..extension import Extension


def build_or_prebuilt(planned: PlannedEntry) -> tuple[Path, list[str], str]:
    """Steps 3 to 5 for an entry not in the cache: the library, its backends, and how it was got
    ("built", "cache": another process published it meanwhile, "remote", "prebuilt")."""
    extension, cuda, components, entry = planned.extension, planned.cuda, planned.components, planned.entry
    # A bad setting is an error of its own before any build, not a reason to fall back.
    _settings.check("JITOPS_LOCK_TIMEOUT", "JITOPS_BUILD_TIMEOUT", "JITOPS_PCH", "JITOPS_CACHE_MAX_SIZE", "JITOPS_VERBOSE")
    remote = _pch.remote_tier()
    # A package's shipped prebuilt first: whoever installed a binary wheel expects no compile.
    library, manifest, refused = _prebuilt.find_prebuilt(extension, components, shipped_only=True)
    if library is not None:
        return library, list(manifest["components"].get("backends", [])), "prebuilt"
    _prebuilt.warn_refused_once(extension, refused)
    # The remote tier next: a download is not a build (JITOPS_DISABLE_BUILD still takes it).
    library, how = fetch_remote(planned)
    if library is not None:
        return library, entry.backends or cuda.backends, how
    why, advice = _why_not_build(planned)
    if why and remote is not None:  # a pod's failure says what the remote said for this op
        why += f"; the remote cache {remote.server} {remote.said.get(entry.name, 'was not asked')}"
        advice += " Or fill the remote: `jitops-cache remote status` and `list --remote` show what it holds and why a reader refuses it."
    if why:
        return *_prebuilt.prebuilt_or_error(extension, components, why, required=True, advice=advice), "prebuilt"
    # torch has CUDA but no toolkit is found: a build here would be CPU-only; a prebuilt may have the CUDA kernels.
    toolkit_missing = not cuda.enabled and cuda.cuda_home is None and cuda.reason.startswith("no CUDA toolkit")
    if toolkit_missing and (prebuilt := _prebuilt.prebuilt_or_error(extension, components, cuda.reason, required=False)):
        return *prebuilt, "prebuilt"
    can_stand_in = any(folder.is_dir() for folder in _prebuilt.prebuilt_dirs(extension))
    if can_stand_in and (remembered := _failures.recall(planned)):
        failure, age = remembered
        why = (
            f"building {entry.name} failed {age / 60:.0f} min ago with these same sources, headers and toolchain, "
            f"and is not tried again for {_failures.REMEMBERED_S // 60} min unless one of them changes: {failure}"
        )
        return *_prebuilt.prebuilt_or_error(extension, components, why, required=True), "prebuilt"
    try:
        if remote is not None:  # one build per key in the fleet: another machine's may come meanwhile
            fetched: list[bool] = []
            library, how = under_entry_lock(entry, "building", lambda: _remote_or_built(remote, planned, fetched))
            how = "remote" if fetched == [True] else how
        else:
            library, how = under_entry_lock(entry, "building", lambda: _build(planned))
        if how in ("built", "remote"):  # after the key's lock is released: its older variants may go too
            _budget.enforce_budget(entry.root)
        return library, entry.backends or cuda.backends, how
    except _ninja.BuildInterrupted:
        os.kill(os.getpid(), signal.SIGTERM)  # cleaned up on the way here; now end as SIGTERM would have
        raise
    except (_object_store.InputsChanged, NotStable):  # the loader builds these again
        raise
    except BuildError as err:
        if not can_stand_in:
            raise  # no prebuilt library could stand in: the build's own error, alone
        why = str(err).removeprefix("jitops: ")
    return *_prebuilt.prebuilt_or_error(extension, components, why, required=True), "prebuilt"


def _why_not_build(planned: PlannedEntry) -> tuple[str, str]:
    """Why this entry cannot be built here, and what to do; ("", "") where it can."""
    if _settings.get("JITOPS_DISABLE_BUILD"):  # images that must never compile at run time
        why = f"JITOPS_DISABLE_BUILD is set, and the cache has no entry {planned.entry.path} for this key"
        # `jitops-cache build` builds jitops' ops and packages' extensions, never a program's jitops.load (N21).
        if planned.extension.namespace == DROP_IN_NAMESPACE:
            where = "Run the program once where compiling is allowed (its jitops.load builds it; `jitops-cache build` cannot)"
        else:
            where = "Build it where compiling is allowed (`jitops-cache build`, or a first run)"
        return why, f"{where}, with this same torch, toolchain and sources, or unset JITOPS_DISABLE_BUILD."
    if missing := _ninja.missing_tools(planned.cxx):
        return "; ".join(missing), (
            "Install the missing tools, or point JITOPS_PREBUILT_DIR at libraries made by "
            "`jitops-cache build --out DIR` under this same torch."
        )
    return "", ""


def fetch_remote(planned: PlannedEntry) -> tuple[Path | None, str]:
    """The entry from the remote cache, published here under the key's lock: (library, "remote"), or
    (library, "cache") where another process published it meanwhile; else (None, "")."""
    remote = _pch.remote_tier()
    if remote is None:
        return None, ""
    library, how = under_entry_lock(planned.entry, "downloading", lambda: remote.fetch(planned))
    if library is None:
        return None, ""
    _budget.enforce_budget(planned.entry.root)
    return library, "cache" if how == "cache" else "remote"


def refuse_remote(planned: PlannedEntry, err: OSError) -> None:
    """A library fetched from the remote cache that does not open here (a C++ runtime older than
    its writer's, say): removed, with one warning, and its key not fetched again by this process."""
    remote = _pch.remote_tier()
    if remote is not None:
        remote.refuse(planned, f"{err.__cause__ or err}")
    planned.entry.discard()


def _remote_or_built(remote, planned: PlannedEntry, fetched: list[bool]) -> Path:
    """Under the key's lock: the library built here (and pushed), or fetched where another machine
    built it meanwhile (fetched gets which)."""
    library, how = remote.build_once(planned, lambda: _build(planned, remote))
    fetched.append(how == "remote")
    return library


def publish_received(entry: _entries.Entry, manifest: dict, library_bytes: bytes) -> Path:
    """Publish an entry built elsewhere (jitops.distributed) as a local build would, its sha256
    checked, under the entry's lock. Returns the library."""
    if manifest.get("name") != entry.name or manifest.get("key") != entry.key:
        raise BuildError(
            f"jitops: the entry received for {entry.name} is for {manifest.get('name')!r} key {manifest.get('key')!r}, not key {entry.key!r}"
        )
    if _root.sha256_bytes(library_bytes) != manifest.get("library_sha256"):
        raise BuildError(f"jitops: the library received for {entry.name} does not match its manifest's sha256")

    def write(path: Path) -> bool:
        path.write_bytes(library_bytes)
        return True

    return under_entry_lock(entry, "receiving", lambda: _entries.publish_library(entry, manifest, write))[0]


def _build(planned: PlannedEntry, remote=None) -> Path:
    entry, extension, cuda, components = planned.entry, planned.extension, planned.cuda, planned.components
    staging = _entries.new_build_dir(entry)
    published = False
    try:
        build_dir = staging / "build"
        build_dir.mkdir()
        flags = _buildfile.torch_flags(extension, cuda, components, planned.cxx)
        units = _buildfile.plan_units(staging, extension, cuda, components, flags)
        # PCHs live in the cache root even for an extension with a cache_dir (build_directory) of
        # its own: one .gch serves every extension, wherever its entries are.
        pch_root = _root.shared_root(extension.cache_dir)
        # The build folder's own headers too: a PCH being downloaded is -included from there.
        ignored = (*toolchain_prefixes(planned.cxx, cuda, pch_root), os.path.join(os.path.realpath(build_dir), ""))
        _root.remove_dead_staging(Path(_layout.objects_dir(entry.root)))  # killed stores' staging folders
        identity = planned.toolchain_components  # objects and PCHs: torch's exact identity, always
        for unit in units:
            _object_store.plan_keys(unit, identity, planned.source_hashes[unit.relative])
            if not _object_store.reuse(entry.root, unit, build_dir) and remote is not None:
                _fetch_object(remote, entry, unit, build_dir)
        compiled = [unit for unit in units if not unit.reused]
        stem = _buildfile.renamed_from(extension)
        previous = _progress.newest_manifest(entry, stem and f"{extension.namespace}.{stem}")
        # A header changed under the entry is an edit too; a rebuild an upgrade caused is not.
        wanted = bool(entry.stale_because) or _pch.worth_building(extension, previous, components)
        began = time.time()  # JITOPS_PCH=wait builds a PCH here: part of the build's time (C4)
        fetches = _pch_fetch.Fetches(build_dir)
        pch_jobs = _pch.plan(pch_root, extension, compiled, identity, ignored, wanted, flags.gcc_heap, fetches)
        library_file = f"{extension.library_name}.so"
        _buildfile.write_build_file(build_dir, units, flags, library_file)
        why = entry.stale_because or _progress.why_built(components, planned.source_hashes, previous)
        log_path = staging / _layout.BUILD_LOG_NAME
        log_path.write_text("".join(f"jitops: reused {u.relative} ({u.object})\n" for u in units if u.reused))
        verbose = _settings.get("JITOPS_VERBOSE")
        left_out = tuple(s for s in extension.sources if s.endswith(CUDA_SUFFIXES)) if not cuda.enabled else ()
        status = _progress.BuildStatus(extension.qualified_name, cuda, verbose, why, left_out, began)
        known_before = dict(_root.known_file_hashes(entry.root).records)  # each hash with the identity it was read at
        started, started_ns = time.time(), time.time_ns()
        built = build_dir / library_file
        try:
            kind = "cuda" if any(unit.cuda for unit in compiled) else "c++"
            # Where the machine has a CPU this build leaves idle, its PCHs start now (at idle
            # priority), ready for the build that follows; else after it, and paused while it runs.
            beside = pch_jobs and len(compiled) < _jobs.limits().cpus
            if beside:
                pch_jobs = [spec for spec in pch_jobs if not _pch.start_background(spec)]
            try:
                with _pch.in_use([unit.pch for unit in compiled if unit.pch]), _pch.foreground(pch_root, pause=not beside):
                    failure = _ninja.run_ninja(build_dir, log_path, status, verbose, kind)
            finally:
                fetches.close()
            for unit in compiled:  # a download that brought no PCH: compiled from the header's text
                if unit.pch_fetched and not os.path.exists(unit.pch + ".gch"):
                    unit.pch = None
            if failure is None:
                # Before the load check: a library whose inputs changed is never opened (a second
                # TORCH_LIBRARY block of its namespace, from the next attempt, would abort).
                changed = _check_inputs(build_dir, compiled, planned, ignored, known_before, started_ns)
                for unit in compiled:
                    if unit.headers is not None:
                        _object_store.store(entry.root, unit, build_dir)
                _root.known_file_hashes(entry.root).save()  # the stored (and fetched) objects' hashes
                if changed:
                    raise _object_store.InputsChanged(changed)
                # Before the load check: a library that is not what its stable key promises is never
                # opened here, so its exact-key build (the same objects, linked again) can be.
                built_under = _built_under(planned, built)
                if planned.stable and built_under["audit"]["offending"]:
                    raise NotStable(planned, built_under["audit"]["offending"])
                # The load check opens it in this process: a namespace defined already would abort it.
                namespaces = _namespaces.defined_in(built)
                _namespaces.check(namespaces, built, extension.qualified_name)
                failure = _load_check(built, log_path, left_out, cuda.reason)
                if failure is None:
                    _namespaces.record(namespaces, built)
        except _object_store.InputsChanged:  # not a failure: the loader plans and builds it again (N47)
            status.finish(ok=False, instead="stopped building {label} after {seconds}: an input changed while it compiled")
            raise
        except NotStable:  # not a failure: the loader builds it again under its exact key
            status.finish(ok=False, instead="built {label} in {seconds}, off the stable ABI: building it for this torch")
            raise
        except NamespaceConflict:  # it compiled; the guard keeps it out of this process (N14)
            status.finish(ok=False, instead="built {label} in {seconds}, but did not load it (a namespace conflict)")
            raise
        except BaseException:
            status.finish(ok=False)
            raise
        seconds = time.time() - started
        if failure is not None:
            status.finish(ok=False)
            if "No space left on device" in log_path.read_text(errors="replace"):
                raise OSError(errno.ENOSPC, failure)  # a compiler's write failed (under_entry_lock says so)
            failed_log = entry.failed_log_path
            shutil.copyfile(log_path, failed_log)
            failure += f"\nfull log: {failed_log}"
            if not _failures.may_pass_next_time(log_path.read_text(errors="replace")):
                _failures.remember(planned, failure)
            raise BuildError(f"jitops: building {entry.name} failed: {failure}")
        with_pch = sum(1 for unit in compiled if unit.pch)
        # gcc's -Winvalid-pch: it compiled those units from the header's text instead.
        refused = log_path.read_text(errors="replace").count(".gch: not used because") if with_pch else 0
        if len(compiled) < len(units) or with_pch:  # a first build compiles every unit
            status.summary = f"compiled {len(compiled)} of {len(units)} units"
            if with_pch:
                refusal = f", {refused} refused by the compiler: see the log" if refused else ""
                status.summary += f" ({with_pch} with a PCH{refusal})"
        status.finish(ok=True)
        _failures.forget(planned)
        library = staging / library_file
        os.replace(built, library)
        included = {path: digest for unit in units for path, digest in unit.headers.items()}
        headers = _named_from_root(extension, included, included.__getitem__)
        unit_seconds = _ninja.unit_seconds(build_dir)
        shutil.rmtree(build_dir)
        shutil.rmtree(staging / "src")
        manifest = _entries.make_manifest(
            entry,
            components,
            library,
            headers,
            source_hashes=planned.source_hashes,
            built_at=started,
            build_seconds=round(seconds, 3),
            unit_seconds=unit_seconds,
            reused_units=[unit.relative for unit in units if unit.reused],
            **({"built_under": built_under} if built_under else {}),
            units=[
                {
                    "source": unit.relative,
                    "object_key": unit.key,
                    "object_variant": _object_store.variant_of(unit.headers),
                    "portable_key": unit.portable_key,
                }
                for unit in units
            ],
        )
        _entries.publish(entry, staging, manifest)
        published = True
        for spec in pch_jobs:
            _pch.start_background(spec)
        return entry.path / library.name
    finally:
        if not published:
            shutil.rmtree(staging, ignore_errors=True)


class NotStable(BuildError):
    """A library built under a stable key that failed the audit: its key is refused in this root and
    the loader builds it again under the exact key (its objects reused), with one warning."""

    def __init__(self, planned: PlannedEntry, offending: list[str]):
        self.planned, self.offending = planned, offending
        BuildError.__init__(
            self,
            f"jitops: {planned.entry.name} was to be on torch's stable ABI, but its library needs " + ", ".join(offending[:3]),
        )


def _built_under(planned: PlannedEntry, library: Path) -> dict:
    """What a stable entry's manifest says of its build (_stable.built_under); empty for an exact entry."""
    if not planned.stable and not planned.exact_because:
        return {}
    torch_headers = _torch_flags.include_paths(None)
    return _stable.built_under(planned.components, library, planned.cxx, torch_headers, planned.exact_because)


def _fetch_object(remote, entry: _entries.Entry, unit, build_dir: Path) -> None:
    """The unit's object from the remote cache, where it has one whose headers all hold here: kept
    in the object store and reused, as a local one would be."""
    headers = remote.fetch_object(entry.root, unit.portable_key, build_dir / unit.object, entry.name)
    if headers is not None:
        unit.headers = headers
        _object_store.store(entry.root, unit, build_dir)
        unit.reused = True


def _check_inputs(
    build_dir: Path, compiled: list, planned: PlannedEntry, ignored, known_before: dict, started_ns: int
) -> list[str]:
    """Set each compiled unit's headers (sha256 of each, from its depfile) and return the inputs that
    changed while it compiled (ccache's "modified during compilation"): such a unit's object is not stored."""
    found = _ninja.deps(build_dir, [unit.object for unit in compiled]) if compiled else {}
    changed = []
    for unit in compiled:
        skip = {os.path.realpath(unit.wrapper), unit.source}
        unit_changed = []
        if _object_store.settled_before(started_ns, known_before, unit.source) != planned.source_hashes[unit.relative]:
            unit_changed.append(unit.source)
        headers = {}
        for path in found.get(unit.object, []):
            if path in skip or path.startswith(ignored):
                continue
            if not os.path.lexists(path):
                raise BuildError(
                    f"jitops: the compiler's dependency list of {unit.relative} names {path!r}, which does not "
                    "exist: removed while it was compiled, or a path a depfile cannot spell (a backslash?)"
                )
            digest = _object_store.settled_before(started_ns, known_before, path)
            if digest is None:
                unit_changed.append(path)
            headers[path] = digest
        unit.headers = None if unit_changed else dict(sorted(headers.items()))
        changed += unit_changed
    return changed


def _named_from_root(extension: Extension, paths, sha256) -> dict:
    """The headers the manifest checks at every load (name -> sha256(path)): less the declared
    sources (the key hashes those), named relative to the extension's root where under it."""
    root = os.path.join(os.path.realpath(extension.root), "")
    sources = {os.path.realpath(path) for path in extension.paths()}
    named = {path[len(root) :] if path.startswith(root) else path: sha256(path) for path in paths if path not in sources}
    return dict(sorted(named.items()))


def toolchain_prefixes(cxx: Path | None, cuda: CudaPlan, cache_root: Path | None = None) -> tuple[str, ...]:
    """The folders whose headers are not recorded: torch's, the CUDA toolkit's, the compilers' and the
    system's (the key names their versions; a stat of each at every load would cost hundreds), and the PCHs'."""
    import torch  # loaded by the caller already: this module imports without it

    # A compiler's installation: the folder above its bin/, where that holds its C++ headers.
    installs = [os.path.dirname(os.path.dirname(os.path.realpath(c))) for c in [cxx, *environment_tools(cuda)] if c]
    prefixes = [os.path.dirname(torch.__file__), "/usr/include", "/usr/lib", "/usr/lib64", cuda.cuda_home]
    prefixes += [install for install in installs if os.path.isdir(os.path.join(install, "include", "c++"))]
    prefixes += [_layout.pch_dir(cache_root)] if cache_root else []
    return tuple(os.path.join(os.path.realpath(p), "") for p in prefixes if p and os.path.realpath(p) not in ("/", "/usr"))


def included_headers(build_dir: Path, extension: Extension, cxx: Path | None, cuda: CudaPlan, targets: list[str] = ()) -> dict:
    """The headers the units (ninja's `targets`, or all) of a build folder included, as the manifest
    names them (setup.py's ahead-of-time build)."""
    ignored = toolchain_prefixes(cxx, cuda)
    found = {path for files in _ninja.deps(build_dir, list(targets)).values() for path in files}
    kept = [path for path in found if not path.startswith(ignored) and os.path.isfile(path)]
    return _named_from_root(extension, kept, _root.sha256_file)


def _load_check(library: Path, log_path: Path, left_out: tuple[str, ...], why_left_out: str) -> str | None:
    """None if the new library loads, else why not (naming the CUDA sources left out where a symbol is
    missing). It stays loaded: the published file is this one renamed (one inode)."""
    try:
        _libraries.open_library(library)
    except (OSError, RuntimeError) as err:
        # torch's message only names the file; dlopen's own ("undefined symbol: ...") is its cause.
        reason = str(err.__cause__ or err)
        with open(log_path, "a") as log:
            log.write(f"\nloading the built library failed: {reason}\n")
        missing = re.search(r"undefined symbol: (\S+)", reason)
        if missing:
            reason = f"undefined symbol {_demangle(missing.group(1))}"
            if left_out:
                reason += f"; {', '.join(left_out)} may define it, and was left out of this build ({why_left_out})"
        return f"the built library does not load: {reason}"
    return None


def _demangle(symbol: str) -> str:
    """A C++ symbol as written in the source (binutils' c++filt, where it is installed), else as it is."""
    return _stable.demangled([symbol])[0]
