# SPDX-License-Identifier: MIT
"""The package's constants (its version and recipe, namespaces, folders, the environment a build
reads) and the layout of a cache root (drawn in docs/ARCHITECTURE.md): the one module that names a
path inside one. Standard library (and _settings) only, and small: every warm start imports it."""

from __future__ import annotations

import importlib.machinery
import os

from . import _settings

# The package
VERSION = "0.1.0"  # jitops.__version__
# How jitops turns an Extension into a library (build file, added flags, manifest): in every key
# instead of jitops' version, so a release that changes none of that keeps entries and prebuilts valid.
RECIPE = 3  # 3: -fvisibility-inlines-hidden (_key.CFLAGS)
# The Python ABI tag, from the import system rather than sysconfig (slow to import, and its lazy
# variables are not thread-safe: load_all() plans in several threads).
PYTHON_SOABI = importlib.machinery.EXTENSION_SUFFIXES[0].split(".")[1]
# Environment variables that change what a build produces (torch's flags, builder/_torch_flags: nvcc's
# -ccbin and the CUDA units' include folders; nvcc's own; the compiler's search paths), then every
# one a key depends on.
CUDA_BUILD_ENVIRONMENT = (
    "CC",
    "PYTORCH_NVCC",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "CUDA_INC_PATH",
    "CUDNN_HOME",
    "CUDNN_PATH",
)
COMPILER_ENVIRONMENT = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH")
TOOLCHAIN_ENVIRONMENT = (
    ("CXX", "PATH", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST") + CUDA_BUILD_ENVIRONMENT + COMPILER_ENVIRONMENT
)


PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))  # jitops/
INCLUDE_DIR = os.path.join(PACKAGE_DIR, "include")  # <jitops/library.h>, on every extension's include path
# The cache namespace of what jitops.load/load_inline build: their C++ picks its own torch.ops
# namespace, so the namespace guard cannot claim this one for a package.
DROP_IN_NAMESPACE = "jitops_load"
OPS_NAMESPACE = "jitops"  # the TORCH_LIBRARY namespace of jitops' own ops (jitops/ops/)
CUDA_SUFFIXES = (".cu",)  # sources built only with CUDA


# A cache root's names
KEY_LENGTH = 16  # hex digits of sha256 in entry names
VARIANT_LENGTH = 16
MANIFEST_NAME = "manifest.json"  # in each entry, written last
BUILD_LOG_NAME = "build.log"
TMP_PREFIX = ".tmp-"  # a folder being written: <TMP_PREFIX>...<pid>-...
REMOVING_PREFIX = f"{TMP_PREFIX}removing-"  # a folder renamed away to be deleted: <REMOVING_PREFIX><pid>-...
RECORD_PREFIX = "warm-"

OBJECTS_DIR = "objects"
OBJECT_NAME = "object.o"
PCH_DIR = "pch"
PCH_HEADER_NAME = "pch.h"
GCH_NAME = PCH_HEADER_NAME + ".gch"  # gcc looks for the compiled header beside the one -include names
RECORD_NAME = "record.json"  # of a stored object or a PCH
PCH_FETCHED_NAME = "fetched"  # in a build's folder for a PCH being downloaded: made once it ended
INLINE_DIR = "inline"

FILE_HASHES_NAME = "file-hashes.json"
TOOLCHAIN_PROBES_NAME = "toolchain.json"
STABLE_REFUSED_NAME = "stable-refused.json"  # stable keys whose library failed the audit: built exactly
STATS_NAME = "stats.json"
LOCATIONS_NAME = "locations.json"
OTHER_ROOTS_NAME = "other-roots.txt"  # the roots of entries built into a build_directory, for the CLI
STATS_LOCK_NAME = "stats.lck"  # not *.lock: those are the entries' build locks

# The parts of a root the store may lose (degraded to compiling more) without refusing the root.
OPTIONAL_PARTS = (OBJECTS_DIR, PCH_DIR)


# The root
def torch_extensions_root() -> str:
    """torch's extension root: TORCH_EXTENSIONS_DIR, else <user cache dir>/torch_extensions (as
    torch's get_default_build_root says, without importing cpp_extension and setuptools)."""
    configured = os.environ.get("TORCH_EXTENSIONS_DIR")
    if configured:
        return configured
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.realpath(os.path.join(user_cache, "torch_extensions"))


def configured_root() -> tuple[str, str]:
    """The cache root asked for, and why (for `jitops-cache dir`)."""
    configured = _settings.get("JITOPS_CACHE_DIR")
    if configured:
        return configured, "JITOPS_CACHE_DIR"
    return os.path.join(torch_extensions_root(), "jitops"), "default: jitops/ under torch's extension root"


# Entries
def is_identifier(text) -> bool:
    """A C identifier (ASCII letters, digits, _; not starting with a digit)."""
    return isinstance(text, str) and text.isidentifier() and text.isascii()


_HEX_DIGITS = frozenset("0123456789abcdef")


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and set(text) <= _HEX_DIGITS


def key_name(name: str, key: str) -> str:
    """<namespace>.<name>-<key>: what the key's lock, failed log and staging folders are named after."""
    return f"{name}-{key}"


def entry_name(name: str, key: str, variant: str | None) -> str:
    return key_name(name, key) + (f"-{variant}" if variant else "")


def parse_entry_name(folder: str) -> tuple[str, str, str | None] | None:
    """(qualified name, key, variant or None) of an entry folder's name; None for any other.
    (No regular expression: compiling one on import slows a warm start.)"""
    rest, _, last = folder.rpartition("-")
    variant = None
    if _is_hex(last, VARIANT_LENGTH):
        head, _, key = rest.rpartition("-")
        if _is_hex(key, KEY_LENGTH) and "." in head:
            rest, last, variant = head, key, last
    namespace, _, short = rest.partition(".")
    if is_identifier(namespace) and is_identifier(short) and _is_hex(last, KEY_LENGTH):
        return rest, last, variant
    return None


LOCK_SUFFIX = ".lock"


def lock_path(root, name: str, key: str) -> str:
    return os.path.join(root, key_name(name, key) + LOCK_SUFFIX)


FAILED_LOG_SUFFIX, FAILED_RECORD_SUFFIX = ".failed.log", ".failed.json"


def failed_log_path(root, name: str, key: str) -> str:
    return os.path.join(root, key_name(name, key) + FAILED_LOG_SUFFIX)


def failed_record_path(root, name: str, key: str) -> str:
    return os.path.join(root, key_name(name, key) + FAILED_RECORD_SUFFIX)


def staging_prefix(name: str, key: str) -> str:
    """A build's staging folder: <prefix><pid>-*, beside the entries (one rename publishes it)."""
    return f"{TMP_PREFIX}{key_name(name, key)}-"


def is_older_entry_name(folder: str) -> bool:
    """An entry folder named <op>-<key>, as jitops named them before extensions had namespaces."""
    op, _, key = folder.rpartition("-")
    return is_identifier(op) and _is_hex(key, KEY_LENGTH)


def parse_staging_name(folder: str) -> tuple[str, str] | None:
    """(qualified name, key) of a build's staging folder's name; None for any other."""
    name, _, rest = folder.removeprefix(TMP_PREFIX).partition("-")
    key = rest.partition("-")[0]
    return (name, key) if folder.startswith(TMP_PREFIX) and parse_entry_name(key_name(name, key)) else None


def owner_path(lock) -> str:
    """Beside a lock, naming its holder while held."""
    return os.path.splitext(lock)[0] + ".owner"


# Warm records
def record_path(root: str, name: str, digest: str) -> str:
    return os.path.join(root, f"{RECORD_PREFIX}{name}-{digest}.json")


def record_entry(root: str, record: dict, name: str | None = None) -> str | None:
    """The entry folder inside root a warm record names (never elsewhere), or None where it names
    none (or, given name, another extension's)."""
    entry = record.get("entry")
    if not isinstance(entry, str) or not (parsed := parse_entry_name(entry)) or name not in (None, parsed[0]):
        return None
    return os.path.join(root, entry)


# Shared parts: stored objects, precompiled headers, inline sources
def objects_dir(root) -> str:
    return os.path.join(root, OBJECTS_DIR)


def pch_dir(root) -> str:
    return os.path.join(root, PCH_DIR)


def pch_lock_path(folder) -> str:
    """A PCH folder's lock: built under it held, compiled with under it shared."""
    return f"{folder}{LOCK_SUFFIX}"


def pch_log_path(folder) -> str:
    return f"{folder}.log"


def foreground_lock_path(root) -> str:
    """Held shared by every build while its compilers run: a background PCH build pauses meanwhile."""
    return os.path.join(root, PCH_DIR, f".foreground{LOCK_SUFFIX}")


def inline_dir(root) -> str:
    return os.path.join(root, INLINE_DIR)


# The remote cache's names (a Redis key or a file under a shared folder): records under entries/,
# objects/ and pch/ (one per variant, PCH compiler), the blobs they name by sha256, a lease per
# key being built, and counters.
REMOTE_ENTRIES, REMOTE_OBJECTS, REMOTE_PCH, REMOTE_BLOBS = "entries", "objects", "pch", "blobs"


def remote_records(kind: str, key: str) -> str:
    """The folder of a key's records: kind is REMOTE_ENTRIES, REMOTE_OBJECTS or REMOTE_PCH."""
    return f"{kind}/{key}"


def remote_record(kind: str, key: str, variant: str) -> str:
    return f"{kind}/{key}/{variant}"


def remote_blob(digest: str) -> str:
    return f"{REMOTE_BLOBS}/{digest}"


def remote_lease(key: str) -> str:
    return f"leases/{key}"


def remote_counter(name: str) -> str:
    return f"stats/{name}"


# Outside any root: this user's folder for what jitops shares across the machine (builder/_jobs.py):
# the job slots, one lock file each, and the one background PCH compile's turn.
MACHINE_DIR_PREFIX = "jitops-"
BACKGROUND_PCH_LOCK_NAME = "background-pch.lock"


def machine_dir_path(temporary: str) -> str:
    return os.path.join(temporary, f"{MACHINE_DIR_PREFIX}{os.getuid()}")


def job_slot_path(machine_dir, slot: int) -> str:
    return os.path.join(machine_dir, "jobs", f"{slot}{LOCK_SUFFIX}")
