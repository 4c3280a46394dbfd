# SPDX-License-Identifier: MIT
"""Build one extension's library (imported only on a miss in every tier of the store), in named
steps: plan the units (reused, fetched or to compile), plan the PCHs, compile, check the inputs and
store the objects, the load check, and the manifest the store publishes."""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from .. import _files, _layout, _settings, warm
from .._errors import BuildError, NamespaceConflict
from .._layout import CUDA_SUFFIXES, DROP_IN_NAMESPACE
from ..store import CudaPlan, Found, PlannedEntry, Store, built_under, demangled
from ..warm import _namespaces
from . import _buildfile, _jobs, _ninja, _pch, _pch_fetch, _progress, _torch_flags

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._records import Manifest
    from ..extension import Extension


class BuildAgain(Exception):
    """Not a failure: what was built is not published under this key, and the loader plans the
    extension again and builds it (not a BuildError, so no `except BuildError` can take it)."""


class InputsChanged(BuildAgain):
    """A source or header changed while the build ran: nothing was published under the old key."""

    def __init__(self, paths: list[str]):
        self.paths = list(dict.fromkeys(paths))  # a header is named once, however many units read it
        super().__init__(f"jitops: {', '.join(self.paths)} changed while the build ran")


class NotStable(BuildAgain):
    """A library built under a stable key that failed the audit: its key is refused in this root and
    the loader builds it again under the exact key (its objects reused), with one warning."""

    def __init__(self, planned: PlannedEntry, offending: list[str]):
        self.planned, self.offending = planned, offending
        super().__init__(
            f"jitops: {planned.entry.name} was to be on torch's stable ABI, but its library needs " + ", ".join(offending[:3])
        )


def build(planned: PlannedEntry, store: Store) -> Found:
    """The entry built here (once per key across processes, and machines with a remote), or a
    prebuilt library standing in where it cannot be built, or an error saying why and what to do."""
    cuda, entry = planned.cuda, planned.entry
    why, advice = _why_not_build(planned)
    if why and (remote := store.remote) is not None:  # a pod's failure says what the remote said for this op
        why += f"; the remote cache {remote.server} {remote.said.get(entry.name, 'was not asked')}"
        advice += " Or fill the remote: `jitops-cache remote status` and `list --remote` show what it holds and why a reader refuses it."
    if why:
        return store.prebuilt(planned, why, required=True, advice=advice)  # type: ignore[return-value]
    # torch has CUDA but no toolkit is found: a build here would be CPU-only; a prebuilt may have the CUDA kernels.
    toolkit_missing = not cuda.enabled and cuda.cuda_home is None and cuda.reason.startswith("no CUDA toolkit")
    if toolkit_missing and (prebuilt := store.prebuilt(planned, cuda.reason, required=False)):
        return prebuilt
    can_stand_in = store.prebuilt_can_stand_in(planned)
    if can_stand_in and (failed := store.remembered_failure(planned)):
        return store.prebuilt(planned, failed, required=True)  # type: ignore[return-value]
    try:
        return store.build_once(planned, lambda: _build(planned, store))
    except _ninja.BuildInterrupted:
        os.kill(os.getpid(), signal.SIGTERM)  # cleaned up on the way here; now end as SIGTERM would have
        raise
    except BuildError as err:
        if not can_stand_in:
            raise  # no prebuilt library could stand in: the build's own error, alone
        return store.prebuilt(planned, str(err).removeprefix("jitops: "), required=True)  # type: ignore[return-value]


def _why_not_build(planned: PlannedEntry) -> tuple[str, str]:
    """Why this entry cannot be built here, and what to do; ("", "") where it can."""
    if _settings.get("JITOPS_DISABLE_BUILD"):  # images that must never compile at run time
        why = f"JITOPS_DISABLE_BUILD is set, and the cache has no entry {planned.entry.path} for this key"
        # `jitops-cache build` builds jitops' ops and packages' extensions, never a program's jitops.load (RELIABILITY N21).
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


# How a build that stopped on purpose ends its status line (RELIABILITY N47, N14).
STOPPED = {
    InputsChanged: "stopped building {label} after {seconds}: an input changed while it compiled",
    NotStable: "built {label} in {seconds}, off the stable ABI: building it for this torch",
    NamespaceConflict: "built {label} in {seconds}, but did not load it (a namespace conflict)",
}


def _build(planned: PlannedEntry, store: Store) -> Path:
    """One build, step by step, in a folder the store stages and publishes. Returns the library."""
    with store.staged(planned) as staged:
        build = Build(planned, staged.path, store)
        build.plan_units()
        build.plan_pch()
        try:
            failure = build.compile()
            if failure is None:
                build.check_inputs_and_store()
                failure = build.load_check()
        except BaseException as err:
            build.status.finish(ok=False, instead=STOPPED.get(type(err), ""))
            raise
        if failure is not None:
            build.fail(failure)
        staged.manifest = build.finish()
    for spec in build.pch_jobs:  # published: the PCHs it left for later start now
        _pch.start_background(spec)
    return planned.entry.path / build.library_file


class Build:
    """One build of an entry in its staging folder, asking the store for what it keeps (objects, the
    failure memory, the manifest). Each step sets what the next one reads."""

    def __init__(self, planned: PlannedEntry, staging: Path, store: Store):
        self.planned, self.staging, self.store = planned, staging, store
        self.entry, self.extension, self.cuda = planned.entry, planned.extension, planned.cuda
        self.build_dir = staging / "build"
        self.build_dir.mkdir()
        assert planned.cxx is not None  # no build starts without a compiler (_why_not_build)
        self.flags = _buildfile.torch_flags(self.extension, self.cuda, planned.components, planned.cxx)
        self.library_file = f"{self.extension.library_name}.so"
        self.log_path = staging / _layout.BUILD_LOG_NAME
        self.left_out = tuple(s for s in self.extension.sources if s.endswith(CUDA_SUFFIXES)) if not self.cuda.enabled else ()

    def plan_units(self) -> None:
        """Each unit reused from the object store, fetched from the remote's, or left to compile."""
        planned, store = self.planned, self.store
        self.units = _buildfile.plan_units(self.staging, self.extension, self.cuda, planned.components, self.flags)
        # PCHs live in the cache root even for an extension with a cache_dir (build_directory) of
        # its own: one .gch serves every extension, wherever its entries are.
        self.pch_root = store.pch_root(planned)
        # The build folder's own headers too: a PCH being downloaded is -included from there.
        build_dir = os.path.join(os.path.realpath(self.build_dir), "")
        self.ignored = (*toolchain_prefixes(planned.cxx, self.cuda, self.pch_root), build_dir)
        store.remove_dead_object_staging()
        for unit in self.units:
            unit.key, unit.name_free_key, unit.portable_key = store.object_keys(planned, unit)
            if (reused := store.reuse_object(unit, self.build_dir)) is not None:
                unit.key, unit.headers = reused
                unit.reused = True
            elif (headers := store.fetch_object(planned, unit, self.build_dir)) is not None:
                unit.headers = headers  # kept in the object store and reused, as a local one would be
                unit.key = store.keep_object(unit, self.build_dir)
                unit.reused = True
        self.compiled = [unit for unit in self.units if not unit.reused]

    def plan_pch(self) -> None:
        """Each C++ unit's PCH: ready, the fleet's (downloaded beside the compiles), built now
        (JITOPS_PCH=wait), or wanted in the background (pch_jobs); and the status line, whose time counts it."""
        extension, entry = self.extension, self.entry
        stem = _buildfile.renamed_from(extension)
        self.previous = self.store.previous_manifest(self.planned, stem and f"{extension.namespace}.{stem}")
        # A header changed under the entry is an edit too; a rebuild an upgrade caused is not.
        wanted = bool(entry.stale_because) or _pch.worth_building(extension, self.previous, self.planned.components)
        began = time.time()  # JITOPS_PCH=wait builds a PCH here: part of the build's time (RELIABILITY C4)
        self.fetches = _pch_fetch.Fetches(self.build_dir)
        identity = self.planned.toolchain_components  # objects and PCHs: torch's exact identity, always
        args = (self.pch_root, extension, self.compiled, identity, self.ignored, wanted, self.flags.gcc_heap, self.fetches)
        self.pch_jobs = _pch.plan(*args)
        why = entry.stale_because or _progress.why_built(self.planned.components, self.planned.source_hashes, self.previous)
        self.verbose = _settings.get("JITOPS_VERBOSE")
        self.status = _progress.BuildStatus(extension.qualified_name, self.cuda, self.verbose, why, self.left_out, began)

    def compile(self) -> str | None:
        """ninja over the units left to compile (the PCHs wanted in the background beside it where
        a CPU is idle); None, or the first compiler error or the timeout."""
        _buildfile.write_build_file(self.build_dir, self.units, self.flags, self.library_file)
        self.log_path.write_text("".join(f"jitops: reused {u.relative} ({u.object})\n" for u in self.units if u.reused))
        self.known_before = dict(self.store.file_hashes().records)  # each hash with the identity it was read at
        self.started, self.started_ns = time.time(), time.time_ns()
        compiled = self.compiled
        kind = "cuda" if any(unit.cuda for unit in compiled) else "c++"
        # Where the machine has a CPU this build leaves idle, its PCHs start now (at idle
        # priority), ready for the build that follows; else after it, and paused while it runs.
        beside = self.pch_jobs and len(compiled) < _jobs.limits().cpus
        if beside:
            self.pch_jobs = [spec for spec in self.pch_jobs if not _pch.start_background(spec)]
        try:
            with _pch.in_use([unit.pch for unit in compiled if unit.pch]), _pch.foreground(self.pch_root, pause=not beside):
                failure = _ninja.run_ninja(self.build_dir, self.log_path, self.status, self.verbose, kind)
        finally:
            self.fetches.close()
        for unit in compiled:  # a download that brought no PCH: compiled from the header's text
            if unit.pch_fetched and unit.pch and not os.path.exists(unit.pch + ".gch"):
                unit.pch = None
        return failure

    def check_inputs_and_store(self) -> None:
        """Each compiled unit's headers from its depfile; its object stored where no input changed
        while it compiled (else InputsChanged); a stable key's library audited (else NotStable).
        Both before the load check: such a library is never opened (a second TORCH_LIBRARY block of
        its namespace, from the next attempt, would abort)."""
        changed = _check_inputs(self.build_dir, self.compiled, self.planned, self.ignored, self.known_before, self.started_ns)
        for unit in self.compiled:
            if unit.headers is not None:
                unit.key = self.store.keep_object(unit, self.build_dir)
        self.store.file_hashes().save()  # the stored (and fetched) objects' hashes
        if changed:
            raise InputsChanged(changed)
        self.built_under = _built_under(self.planned, self.build_dir / self.library_file)
        if self.planned.stable and self.built_under["audit"]["offending"]:
            raise NotStable(self.planned, self.built_under["audit"]["offending"])

    def load_check(self) -> str | None:
        """Open the library in this process (it stays open: the published file is this one renamed),
        its namespaces guarded first (one defined already would abort it); None, or why it does not load."""
        built = self.build_dir / self.library_file
        namespaces = _namespaces.defined_in(built)
        _namespaces.check(namespaces, built, self.extension.qualified_name)
        failure = _load_check(built, self.log_path, self.left_out, self.cuda.reason)
        if failure is None:
            _namespaces.record(namespaces, built)
        return failure

    def fail(self, failure: str) -> NoReturn:
        """A compile or load that failed: the log kept beside the entry, the failure remembered where
        the same inputs would fail again, and the error naming both."""
        self.status.finish(ok=False)
        log = self.log_path.read_text(errors="replace")
        if "No space left on device" in log:
            raise OSError(errno.ENOSPC, failure)  # a compiler's write failed (entry_lock says so)
        shutil.copyfile(self.log_path, self.entry.failed_log_path)
        failure += f"\nfull log: {self.entry.failed_log_path}"
        self.store.remember_failure(self.planned, failure, log)
        raise BuildError(f"jitops: building {self.entry.name} failed: {failure}")

    def finish(self) -> Manifest:
        """The status line's summary, the library moved beside its manifest, the build folder gone;
        returns the manifest."""
        units, compiled = self.units, self.compiled
        with_pch = sum(1 for unit in compiled if unit.pch)
        # gcc's -Winvalid-pch: it compiled those units from the header's text instead.
        refused = self.log_path.read_text(errors="replace").count(".gch: not used because") if with_pch else 0
        if len(compiled) < len(units) or with_pch:  # a first build compiles every unit
            self.status.summary = f"compiled {len(compiled)} of {len(units)} units"
            if with_pch:
                refusal = f", {refused} refused by the compiler: see the log" if refused else ""
                self.status.summary += f" ({with_pch} with a PCH{refusal})"
        self.status.finish(ok=True)
        self.store.forget_failure(self.planned)
        library = self.staging / self.library_file
        os.replace(self.build_dir / self.library_file, library)
        unit_seconds = _ninja.unit_seconds(self.build_dir)
        shutil.rmtree(self.build_dir)
        shutil.rmtree(self.staging / "src")
        return self._manifest(library, unit_seconds)

    def _manifest(self, library: Path, unit_seconds: dict) -> Manifest:
        included = {path: digest for unit in self.units for path, digest in unit.headers.items()}
        units = [
            {
                "source": unit.relative,
                "object_key": unit.key,
                "object_variant": Store.object_variant(unit.headers),
                "portable_key": unit.portable_key,
            }
            for unit in self.units
        ]
        return Store.manifest(
            self.entry,
            self.planned.components,
            library,
            _named_from_root(self.extension, included, included.__getitem__),
            source_hashes=self.planned.source_hashes,
            built_at=self.started,
            build_seconds=round(time.time() - self.started, 3),
            unit_seconds=unit_seconds,
            reused_units=[unit.relative for unit in self.units if unit.reused],
            **({"built_under": self.built_under} if self.built_under else {}),
            units=units,
        )


def _built_under(planned: PlannedEntry, library: Path) -> dict:
    """What a stable entry's manifest says of its build (the store's built_under); empty for an exact entry."""
    if not planned.stable and not planned.exact_because:
        return {}
    torch_headers = _torch_flags.include_paths(None)
    return built_under(planned.components, library, planned.cxx, torch_headers, planned.exact_because)


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
        if Store.settled_before(started_ns, known_before, unit.source) != planned.source_hashes[unit.relative]:
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
            digest = Store.settled_before(started_ns, known_before, path)
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
    installs = [os.path.dirname(os.path.dirname(os.path.realpath(c))) for c in [cxx, *cuda.environment_tools()] if c]
    prefixes = [os.path.dirname(torch.__file__), "/usr/include", "/usr/lib", "/usr/lib64", cuda.cuda_home]
    prefixes += [install for install in installs if os.path.isdir(os.path.join(install, "include", "c++"))]
    prefixes += [_layout.pch_dir(cache_root)] if cache_root else []
    return tuple(os.path.join(os.path.realpath(p), "") for p in prefixes if p and os.path.realpath(p) not in ("/", "/usr"))


def included_headers(
    build_dir: Path, extension: Extension, cxx: Path | None, cuda: CudaPlan, targets: Sequence[str] = ()
) -> dict:
    """The headers the units (ninja's `targets`, or all) of a build folder included, as the manifest
    names them (setup.py's ahead-of-time build)."""
    ignored = toolchain_prefixes(cxx, cuda)
    found = {path for files in _ninja.deps(build_dir, list(targets)).values() for path in files}
    kept = [path for path in found if not path.startswith(ignored) and os.path.isfile(path)]
    return _named_from_root(extension, kept, _files.sha256_file)


def _load_check(library: Path, log_path: Path, left_out: tuple[str, ...], why_left_out: str) -> str | None:
    """None if the new library loads, else why not (naming the CUDA sources left out where a symbol is
    missing). It stays loaded: the published file is this one renamed (one inode)."""
    try:
        warm.open_library(library)
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
    return demangled([symbol])[0]
