# SPDX-License-Identifier: MIT
"""The remote cache's records: the lookup key (torch, Python and C++ ABI, CUDA, sources and flags; not
the compiler, nor the archs), sealing and opening (ed25519: _signing), and whether a record's library
can run here."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from .. import _files
from .._errors import CacheError
from ..warm import cuda_arch_list
from . import _entries, _prebuilt, _signing
from ._key import CudaPlan, PlannedEntry, key_components, portable_components
from ._remote_backends import RECORD_MAX, Unreadable
from ._stable import numbers, unfit_here

if TYPE_CHECKING:
    from .._records import KeyComponents, Manifest, RemoteRecordBody

# Of the records and the lookup key: bump when their meaning changes (2: records framed as below,
# their signature checked before their body is parsed; 3: stable-ABI keys, without torch's or
# Python's version, and built_under). Readers of another format miss its records.
FORMAT = 3
MAGIC = b"jitops-record"
SHA256 = re.compile(r"[0-9a-f]{64}")


def lookup_key(components: KeyComponents) -> str:
    """The remote's key of a build: sha256 of its portable components."""
    return _files.json_digest({"format": FORMAT, **portable_components(components)}, 32)


def record_variant(arch_list: str | None, headers: dict) -> str:
    """A record's name under its key: the archs and the headers it was built with."""
    return _files.json_digest({"cuda_arch_list": arch_list, "headers": headers}, 16)


def glibc_needed(library: bytes) -> str | None:
    """The newest glibc symbol version a library needs ("2.34"), or None."""
    versions = {tuple(map(int, v)) for v in re.findall(rb"GLIBC_(\d+)\.(\d+)", library)}
    return ".".join(map(str, max(versions))) if versions else None


def glibc_here() -> str | None:
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"; None where unknown
    except (ValueError, OSError, AttributeError):
        return None
    return version.split()[-1] if version else None


# A record: a header line, the signer's public key, the signature of the body's bytes (each "-"
# where unsigned), then the body as canonical JSON. The signature is checked on the raw bytes, and
# only a record of at most RECORD_MAX bytes is read at all, before any JSON is parsed.
def seal(body: dict, signer: _signing.Signer | None) -> bytes:
    """A record of body, signed where there is a signer."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    public, signature = (signer.public, signer.sign(text)) if signer else ("-", "-")
    return b"%s %d\n%s\n%s\n" % (MAGIC, FORMAT, public.encode(), signature.encode()) + text


class Unsealed(NamedTuple):
    signer: str | None  # the public key it names (None: unsigned), whether trusted or not
    trusted: bool  # its signature verifies under a key in the trusted set
    body: dict | None  # parsed where trusted or asked for; None where malformed or not parsed
    problem: str  # why it is malformed ("" where it is not)


def unseal(data: object, trusted: set[bytes], parse_untrusted: bool = False) -> Unsealed:
    """A record's signer, whether it is trusted, and its body: parsed only where its signature
    verifies (or parse_untrusted, for a server trusted as a whole or the CLI's listing)."""
    if not isinstance(data, bytes):
        return Unsealed(None, False, None, f"not bytes but {type(data).__name__}")
    if len(data) > RECORD_MAX:
        return Unsealed(None, False, None, f"longer than {RECORD_MAX >> 10} KiB")
    parts = data.split(b"\n", 3)
    if len(parts) < 4 or parts[0] != b"%s %d" % (MAGIC, FORMAT):
        if data.startswith(b'{"body"') or parts[0].startswith(MAGIC):
            return Unsealed(None, False, None, "written by a jitops of another record format")
        return Unsealed(None, False, None, "not a jitops record")
    try:
        public, signature = parts[1].decode("ascii"), parts[2].decode("ascii")
    except UnicodeDecodeError:
        return Unsealed(None, False, None, "its signer is not text")
    signer = public if public != "-" else None
    signed = bool(signer) and _signing.verified(parts[3], signature, public, trusted)
    if not (signed or parse_untrusted):
        return Unsealed(signer, False, None, "")
    try:
        body = json.loads(parts[3])
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
        return Unsealed(signer, signed, None, "its body is not JSON")
    if not isinstance(body, dict):
        return Unsealed(signer, signed, None, "its body is not an object")
    return Unsealed(signer, signed, body, "")


def _optional(kind):
    return lambda value: value is None or isinstance(value, kind)


def _texts(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _hashes(value) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _size(value) -> bool:
    return type(value) is int and value > 0


def _sha256(value) -> bool:
    return isinstance(value, str) and SHA256.fullmatch(value) is not None


def _chunk(value) -> bool:  # one compressed piece of a PCH (_remote_pch)
    return isinstance(value, dict) and _sha256(value.get("sha256")) and _size(value.get("size")) and _size(value.get("raw"))


_COMMON = {"format": lambda v: v == FORMAT, "kind": _optional(str), "key": _optional(str), "size": _size}
_COMMON["pushed_at"] = _optional((int, float))
SHAPES = {
    "entry": {
        **_COMMON,
        "name": lambda v: isinstance(v, str),
        "library": lambda v: isinstance(v, str) and os.path.basename(v) == v and v.endswith(".so"),
        "library_sha256": _sha256,
        "headers": _hashes,
        "cuda_arch_list": _optional(str),
        "backends": lambda v: v is None or _texts(v),
        "glibc": _optional(str),
        "built_by": _optional(dict),
        "built_under": _optional(dict),
        "built_at": _optional((int, float)),
    },
    "object": {**_COMMON, "source": _optional(str), "headers": _hashes, "object_sha256": _sha256},
    "pch": {
        **_COMMON,
        "header": lambda v: isinstance(v, str),
        "gch_sha256": _sha256,
        "chunks": lambda v: isinstance(v, list) and all(_chunk(c) for c in v),
        "compiler_sha256": _sha256,
        "built_at": _optional((int, float)),
    },
}


def shape_problem(body: Mapping[str, Any], kind: str) -> str:
    """The first field of a record's body that is missing or of the wrong type ('' where none)."""
    for field, fits in SHAPES[kind].items():
        if field not in body:
            return f"it has no {field!r}"
        if not fits(body[field]):
            return f"its {field!r} is {type(body[field]).__name__} {str(body[field])[:40]!r}"
    return ""


def judge(
    data, kind: str, key: str, trusted: set[bytes], trust_server: bool, max_blob: int
) -> tuple[RemoteRecordBody | None, str | None, str]:
    """(body, signer, "") of a record a reader takes: signed by a trusted key (or trust_server),
    well formed, of this kind and key, its blob within max_blob; else (None, signer, why). None
    for data is a record gone meanwhile: no reason."""
    if data is None:
        return None, None, ""
    if isinstance(data, Unreadable):
        return None, None, f"it cannot be read ({data})"
    sealed = unseal(bytes(data) if isinstance(data, bytearray) else data, trusted, trust_server)
    if sealed.problem:
        return None, sealed.signer, f"it is malformed ({sealed.problem})"
    if not (sealed.trusted or trust_server):
        return None, sealed.signer, _untrusted_why(sealed.signer, trusted)
    body = sealed.body
    if body is None:  # unseal parses a trusted record's body, and every one where trust_server: never here
        return None, sealed.signer, "it has no body"
    if problem := shape_problem(body, kind):
        return None, sealed.signer, f"it is malformed ({problem})"
    if body["kind"] != kind or body["key"] != key:
        return None, sealed.signer, f"it is for another {kind}"
    if body["size"] > max_blob:
        return None, sealed.signer, f"its blob's {body['size']} bytes exceed JITOPS_REMOTE_MAX_BLOB"
    taken = {**body, "signed_by": sealed.signer if sealed.trusted else None}
    return cast("RemoteRecordBody", taken), sealed.signer, ""


def _untrusted_why(signer: str | None, trusted: set[bytes]) -> str:
    if signer is None:
        return (
            "it is not signed (its writer has no JITOPS_REMOTE_SIGNING_KEY); sign the writer's pushes, "
            "or trust the server as a whole: JITOPS_REMOTE_TRUST=server"
        )
    try:
        known = _signing.parse_public(signer) in trusted
    except CacheError:
        known = False
    if known:
        return "its signature does not verify under its signer's key, which is trusted: the record was changed after signing"
    return "its signer is not in JITOPS_REMOTE_TRUSTED_KEYS; add that key there if it is your writer's"


def candidates(planned: PlannedEntry) -> list[KeyComponents]:
    """The key components to look up: this machine's, and first, where torch has CUDA but no toolkit
    is found, those of a CUDA build for its GPUs: what a writer with a toolkit built."""

    cuda, extension = planned.cuda, planned.extension
    toolkit_missing = not cuda.enabled and cuda.cuda_home is None and cuda.reason.startswith("no CUDA toolkit")
    arch_list = (extension.cuda_archs or cuda_arch_list()) if toolkit_missing else ""
    if not arch_list:
        return [planned.components]
    with_cuda = key_components(extension, planned.cxx, CudaPlan(True, arch_list, None, ""))
    return [with_cuda, planned.components]


def unfit(body: RemoteRecordBody, planned: PlannedEntry) -> str:
    """Why a remote entry's library cannot run here ('' where it can): the glibc it needs, the GPUs
    it has no code for, a header that differs here."""
    needed, here = body.get("glibc"), glibc_here()
    if needed and here and numbers(needed) > numbers(here):
        return f"built against glibc {needed}, newer than this machine's {here}"
    if planned.stable and (problem := unfit_here(body.get("built_under") or {})):
        return problem
    if "cuda" in (body.get("backends") or []):
        arch_list = planned.cuda.arch_list or os.environ.get("TORCH_CUDA_ARCH_LIST", "")
        wanted = _prebuilt.visible_capabilities() or [(int(a), int(b)) for a, b in re.findall(r"(\d+)\.(\d+)", arch_list)]
        if missing := _prebuilt.missing_archs(body.get("cuda_arch_list"), wanted):
            return f"built for {body.get('cuda_arch_list')}, without code for compute capability {', '.join(missing)}"
    library = body.get("library")
    if not (isinstance(library, str) and os.path.basename(library) == library and library.endswith(".so")):
        return f"a record naming no valid library ({library!r})"
    if not isinstance(body.get("headers"), dict):
        return "a record without its header list"
    probe = _entries.Entry(planned.entry.root, planned.entry.name, planned.entry.key, planned.extension.root)
    try:
        probe.check_headers(body["headers"], save=True)
    except _entries.StaleEntry as err:
        return f"built from other headers ({err})"
    return ""


def local_manifest(server: str, planned: PlannedEntry, body: RemoteRecordBody, variant: str) -> Manifest:
    """The local manifest of a fetched entry: this machine's key and components (with the archs the
    library has), and where it came from (`jitops-cache clear --signed-by` reads signed_by)."""
    manifest: Manifest = {
        "name": planned.entry.name,
        "key": planned.entry.key,
        "components": {**planned.components, "cuda_arch_list": body.get("cuda_arch_list"), "backends": body.get("backends")},
        "library": body["library"],
        "headers": body["headers"],
        "built_at": body.get("built_at"),
        "remote": {
            "server": server,
            "key": body["key"],
            "variant": variant,
            "signed_by": body.get("signed_by"),
            "built_by": body.get("built_by"),
            "fetched_at": time.time(),
        },
    }
    if built_under := body.get("built_under"):
        manifest["built_under"] = built_under
    return manifest
