# SPDX-License-Identifier: MIT
"""The remote cache's records: the lookup key (torch, Python and C++ ABI, CUDA, sources and flags; not
the compiler, nor the archs), sealing and opening (ed25519: _signing), and whether a record's library
can run here."""

from __future__ import annotations

import json
import os
import re
import time

from . import _entries, _prebuilt, _root, _signing
from ._key import PlannedEntry, portable_components

FORMAT = 1  # of the records and the lookup key: bump when their meaning changes


def lookup_key(components: dict) -> str:
    """The remote's key of a build: sha256 of its portable components."""
    return _root.json_digest({"format": FORMAT, **portable_components(components)}, 32)


def record_variant(arch_list: str | None, headers: dict) -> str:
    """A record's name under its key: the archs and the headers it was built with."""
    return _root.json_digest({"cuda_arch_list": arch_list, "headers": headers}, 16)


def glibc_needed(library: bytes) -> str | None:
    """The newest glibc symbol version a library needs ("2.34"), or None."""
    versions = {tuple(map(int, v)) for v in re.findall(rb"GLIBC_(\d+)\.(\d+)", library)}
    return ".".join(map(str, max(versions))) if versions else None


def glibc_here() -> str | None:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]  # "glibc 2.36"
    except (ValueError, OSError, AttributeError):
        return None


def _version(text: str | None) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text or ""))


# A record: its body as canonical JSON, the signature of those bytes and the signer's public key.
def seal(body: dict, signer: _signing.Signer | None) -> bytes:
    """A record of body, signed where there is a signer."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    signature = signer.sign(text.encode()) if signer else None
    return json.dumps({"body": text, "signature": signature, "key": signer.public if signer else None}).encode()


def inspect(data: bytes, trusted: set[bytes]) -> tuple[dict, str | None, bool]:
    """A record's body, its signer's public key (None: unsigned) and whether that signature
    verifies under a key in `trusted`. Raises ValueError where it is malformed."""
    try:
        envelope = json.loads(data)
        text, signature, public = envelope["body"], envelope.get("signature"), envelope.get("key")
        body = json.loads(text)
    except (TypeError, KeyError) as err:
        raise ValueError(f"no {err}") from None
    if not isinstance(body, dict):
        raise ValueError("not an object")
    signed = isinstance(signature, str) and isinstance(public, str)
    return body, public if signed else None, signed and _signing.verified(text.encode(), signature, public, trusted)


def candidates(planned: PlannedEntry) -> list[dict]:
    """The key components to look up: this machine's, and first, where torch has CUDA but no toolkit
    is found, those of a CUDA build for its GPUs: what a writer with a toolkit built."""
    from ..warm._libraries import cuda_arch_list
    from ._key import CudaPlan, key_components

    cuda, extension = planned.cuda, planned.extension
    toolkit_missing = not cuda.enabled and cuda.cuda_home is None and cuda.reason.startswith("no CUDA toolkit")
    arch_list = (extension.cuda_archs or cuda_arch_list()) if toolkit_missing else ""
    if not arch_list:
        return [planned.components]
    with_cuda = key_components(extension, planned.cxx, CudaPlan(True, arch_list, None, ""))
    return [with_cuda, planned.components]


def unfit(body: dict, planned: PlannedEntry) -> str:
    """Why a remote entry's library cannot run here ('' where it can): the glibc it needs, the GPUs
    it has no code for, a header that differs here."""
    needed, here = body.get("glibc"), glibc_here()
    if needed and here and _version(needed) > _version(here):
        return f"built against glibc {needed}, newer than this machine's {here}"
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


def local_manifest(server: str, planned: PlannedEntry, body: dict, variant: str) -> dict:
    """The local manifest of a fetched entry: this machine's key and components (with the archs the
    library has), and where it came from (`jitops-cache clear --signed-by` reads signed_by)."""
    return {
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
