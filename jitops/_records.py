# SPDX-License-Identifier: MIT
"""The shapes of the records jitops writes and reads (JSON objects on disk or on a server), for the
reader and the type checker. Imported only under `if TYPE_CHECKING:`: a record is a plain dict at
run time, and a warm start pays nothing for its type."""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class KeyComponents(TypedDict, total=False):
    """What an entry's key is the hash of (store/_key.key_components): what a built library must
    share with the process that loads it, then what it is built from."""

    name: str  # <namespace>.<name>
    recipe: str
    torch: str  # an exact entry's torch, git revision, CUDA and Python; a stable entry has none
    torch_git: str
    torch_cuda: str | None
    python_soabi: str
    abi: Literal["stable"]  # a stable entry's: its floor, standard, platform and CUDA major instead
    torch_floor: str
    cxx_standard: str
    platform: str
    torch_cuda_major: str | None
    cxx11_abi: bool
    version: str  # the Extension's
    sources_sha256: dict[str, str]
    cuda_arch_list: str | None
    backends: list[str] | None  # "cpu", "cuda"; None: a fetched entry's record named none
    sources: list[str]
    include_dirs: list[str]
    cflags: list[str]
    cuda_cflags: list[str]
    ldflags: list[str]
    cxx: str | None  # the compiler's path and version line
    nvcc: str | None
    environment: dict[str, str]  # the variables that change what a build makes
    environment_tools: list[str]
    python_module: bool


class UnitRecord(TypedDict):
    """One unit of an entry's build, in its manifest."""

    source: str
    object_key: str
    object_variant: str
    portable_key: str


class Manifest(TypedDict, total=False):
    """An entry's manifest.json (store/_entries.make_manifest), written last: an entry without one
    is not published."""

    name: str
    key: str
    components: KeyComponents
    library: str  # the .so's file name, in the entry's folder
    library_sha256: str
    library_identity: list[int]  # the identity the hash was taken at: a load that finds it skips hashing
    headers: dict[str, str]  # every header the build read but the toolchain's, with its sha256
    source_hashes: dict[str, str]
    built_at: float | None  # None: a fetched entry's record said not when
    build_seconds: float
    unit_seconds: dict[str, float]
    reused_units: list[str]
    units: list[UnitRecord]
    built_under: dict[str, Any]  # a stable entry's: the torch it was built under and its audit
    remote: dict[str, Any]  # a fetched entry's: the server, the signer, when


class WarmRecord(TypedDict):
    """A warm record (warm-<name>-<hash>.json): what a warm start checks by stat calls alone."""

    settings: str  # the process's settings the record holds for (warm.settings)
    checked: list[Any]  # each file the key read, with the identity it had
    entry: str  # the entry folder's name
    library: str
    library_identity: list[int]
    manifest_identity: list[int] | None
    with_cuda: bool
    cuda_reason: str
    torch_libraries: list[str]  # the TORCH_LIBRARY namespaces it defines


class RemoteRecordBody(TypedDict, total=False):
    """The body of a remote record (store/_remote_records: sealed and signed; every field's type
    checked by shape_problem before it is used). kind: "entry", "object" or "pch"."""

    format: int
    kind: str
    key: str
    size: int  # the blob's, which a download never exceeds
    pushed_at: float
    name: str  # an entry's
    library: str
    library_sha256: str
    headers: dict[str, str]
    cuda_arch_list: str | None
    backends: list[str] | None
    glibc: str | None
    built_by: dict[str, Any] | None
    built_under: dict[str, Any] | None
    built_at: float | None
    source: str | None  # an object's
    object_sha256: str
    header: str  # a PCH's
    gch_sha256: str
    chunks: list[dict[str, Any]]
    compiler_sha256: str
    signed_by: str | None  # set by the reader (judge): the trusted key that signed it


class PchJob(TypedDict):
    """One precompiled header to build (builder/_pch.spec_for), in the build or as the background
    process's argument (JSON)."""

    root: str  # the cache root whose pch/ holds it
    key: str
    header: str  # the header's text: torch's include lines
    command: str  # the compile, with @header@, @gch@ and @deps@ to fill in
    ignored: list[str]  # the toolchain's folders, whose headers a PCH may read
    compiler: str
