# SPDX-License-Identifier: MIT
"""`jitops-cache doctor`: what this machine has for building and loading jitops' ops, in the spirit
of DeepSpeed's ds_report. Runs version probes (`c++ --version`, `nvcc --version`) and has the C++
compiler check one line of C++, never a build."""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from jitops import _layout, _settings, warm
from jitops._errors import CacheError
from jitops.builder import _ninja
from jitops.store import (
    Fault,
    PlannedEntry,
    Store,
    active_remote,
    compute_key,
    find_cuda_home,
    find_cxx,
    find_prebuilt,
    key_components,
    missing_sources,
    plan_cuda,
    prebuilt_dirs,
    public_key_text,
    remote_holds,
    tool_probe,
)

from . import inventory, registry


def _cuda_major(version: str | None) -> str | None:
    match = re.search(r"(\d+)\.\d+", version or "")
    return match.group(1) if match else None


def report(package: str | None = None) -> dict:
    """The environment, and each extension (of one owner, with package) as it can be had here. A
    package whose entry point or extension cannot be inspected is a row saying why, not a crash."""
    import torch

    cxx = find_cxx()
    cuda = plan_cuda()
    nvcc = find_cuda_home()
    nvcc_version = None
    if nvcc is not None and (nvcc / "bin" / "nvcc").exists():
        nvcc_version = tool_probe(nvcc / "bin" / "nvcc")[1]
    nvcc_release = re.search(r"release (\d+\.\d+)", nvcc_version or "")
    root_text, root_reason = _layout.configured_root()
    root = Path(root_text)
    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            gpus.append({"index": index, "name": torch.cuda.get_device_name(index), "arch": f"{major}.{minor}"})
    data: dict[str, Any] = {
        "python": f"{sys.version.split()[0]} ({_layout.PYTHON_SOABI}) at {sys.executable}",
        "torch": f"{torch.__version__} at {os.path.dirname(torch.__file__)}",
        "torch_cuda": torch.version.cuda,
        "nvcc": {
            "path": str(nvcc / "bin" / "nvcc") if nvcc else None,
            "release": nvcc_release.group(1) if nvcc_release else None,
            # nvcc must share torch's CUDA major version: objects of another major do not link
            # against torch's CUDA runtime (torch's own load() refuses that too).
            "major_matches_torch": (
                _cuda_major(nvcc_release.group(1)) == _cuda_major(torch.version.cuda)
                if nvcc_release and torch.version.cuda
                else None
            ),
        },
        "ninja": _ninja.find_ninja(),
        "cxx": {"path": str(cxx) if cxx else None, "version": tool_probe(cxx)[1] if cxx else None},
        "gpus": gpus,
        "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST"),
        "cuda_build": f"on, arch {cuda.arch_list}" if cuda.enabled else f"off: {cuda.reason}",
        "cache_root": _root_report(root, root_reason),
        "prebuilt_dirs": [str(d) for d in prebuilt_dirs(None)],
        "remote": remote_settings(),
        "extensions": [],
    }
    missing = _ninja.missing_tools(cxx) + _compiler_problem(cxx)
    remote = _remote_or_none()
    for qualified, (owner, declared) in registry.declared().items():
        if package not in (None, owner):
            continue
        try:
            row = _op_report(declared, cxx, missing, remote)
        except Exception as err:  # noqa: BLE001 - a package's missing source, say: its row says so
            row = {"name": declared.name, "how": "broken", "available": False, "detail": f"{type(err).__name__}: {err}"}
        data["extensions"].append({"owner": owner, **row})
        if owner != registry.OWN:
            data["extensions"][-1]["name"] = qualified
    for owner, why in registry.broken().items():
        if package in (None, owner):
            data["extensions"].append({"owner": owner, "name": "-", "how": "broken", "available": False, "detail": why})
    return data


def _remote_or_none():

    try:
        return active_remote()
    except Exception:  # noqa: BLE001 - a bad setting: remote_settings() says which
        return None


def remote_settings() -> dict | None:
    """The remote cache the settings name (None: none), for doctor and info; a bad setting's error."""

    if not _settings.get("JITOPS_REMOTE_CACHE"):
        return None
    try:
        remote = active_remote()
    except Exception as err:  # noqa: BLE001 - CacheError, or BuildError for a timeout
        return {"error": str(err).removeprefix("jitops: ")}
    if remote is None:
        return None

    return {
        "server": remote.server,
        "mode": remote.mode,
        "trust": "server" if remote.trust_server else "keys",
        "trusted_keys": sorted(public_key_text(k) for k in remote.trusted),
        "signing_key": remote.signer.public if remote.signer else None,
        "timeout_s": remote.timeout,
        "max_blob": remote.max_blob,
        "off": remote.disabled or None,
    }


def remote_line(settings: dict | None) -> str:
    if settings is None:
        return "none (JITOPS_REMOTE_CACHE unset)"
    if "error" in settings:
        return f"UNUSABLE: {settings['error']}"
    keys = (
        "the server (JITOPS_REMOTE_TRUST=server)"
        if settings["trust"] == "server"
        else (", ".join(k[:20] + "..." for k in settings["trusted_keys"]) or "NO KEY: every record is refused")
    )
    signing = f", signing as {settings['signing_key'][:20]}..." if settings["signing_key"] else ""
    off = f"; OFF: {settings['off']}" if settings["off"] else ""
    return f"{settings['server']} ({settings['mode']}, timeout {settings['timeout_s']:g} s; trusts {keys}{signing}){off}"


def _compiler_problem(cxx: Path | None) -> list[str]:
    """Why the C++ compiler cannot build (CXX=/bin/false answers --version too), or nothing."""
    import subprocess

    if cxx is None:
        return []
    try:
        checked = subprocess.run(
            [str(cxx), "-x", "c++", "-fsyntax-only", "-"],
            input="int main() { return 0; }\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as err:
        return [f"the C++ compiler {cxx} does not run: {err}"]
    if checked.returncode == 0:
        return []
    said = next((line.strip() for line in (checked.stderr + checked.stdout).splitlines() if line.strip()), "printing nothing")
    return [f"the C++ compiler {cxx} does not compile one line of C++ (exit {checked.returncode}): {said}"]


def _root_report(root, reason: str) -> dict:
    info = {"path": str(root), "reason": reason, "exists": root.is_dir(), "usable": False, "problem": ""}
    if not root.exists():
        info["problem"] = "does not exist yet (created 0700 on first build)"
        info["usable"] = os.access(_nearest_existing(root), os.W_OK)
        return info
    try:
        Store(root).ensure_private()
        info["mode"] = oct(stat.S_IMODE(root.stat().st_mode))
        info["usable"] = os.access(root, os.W_OK | os.X_OK)
        if not info["usable"]:
            info["problem"] = f"not writable: builds go to the per-user fallback cache {Store.fallback_root()}"
    except (OSError, CacheError) as err:
        info["problem"] = f"{err}; builds go to the per-user fallback cache {Store.fallback_root()}"
        return info
    parts = [p for part in _layout.OPTIONAL_PARTS if (p := Store(root).part_problem(part))]
    if parts:  # the root is used without them: every build compiles more
        info["problem"] = "; ".join(parts) + ": builds there go without it (more compiles); fix or remove it"
    return info


def _nearest_existing(path):
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _op_report(declared, cxx, missing: list[str], remote) -> dict:

    problem = missing_sources(declared)
    if problem:
        return {"name": declared.name, "how": "broken", "available": False, "detail": problem}
    plan = plan_cuda(declared)
    components = key_components(declared, cxx, plan)
    store = Store(Path(warm.extension_root(declared)))
    entry = store.entry(declared.qualified_name, compute_key(components), declared.root)
    cached = store.sound(entry)
    # In the loader's order: a package's shipped prebuilt before a build, JITOPS_PREBUILT_DIR's after.
    prebuilt, _, refused = find_prebuilt(declared, components, shipped_only=True)
    shipped = prebuilt is not None
    if not shipped:  # then JITOPS_PREBUILT_DIR's (each library is hashed: not twice)
        prebuilt, _, refused = find_prebuilt(declared, components)
    buildable = not missing
    held, said = False, ""
    if remote is not None and not (cached or shipped):  # the loader's order: the remote before a build
        try:
            held, said = remote_holds(remote, PlannedEntry(declared))
        except Fault:
            said = f"the remote cache is off: {remote.disabled}"
    if cached:
        how, reason = "cached", str(entry.path)
        reason += f" (torch {inventory.torch_text(components)})" if components.get("abi") == "stable" else ""
    elif shipped and prebuilt is not None:
        how, reason = "prebuilt", str(prebuilt.parent)
    elif held:
        how, reason = "remote", said
    elif buildable:
        how, reason = "buildable", "+".join(plan.backends) + ("" if plan.enabled else f" (CUDA off: {plan.reason})")
    elif prebuilt is not None:
        how, reason = "prebuilt", str(prebuilt.parent)
    else:
        how, reason = "unavailable", "; ".join(missing + refused + [said] * bool(said)) or "no prebuilt library found"
    return {
        "name": declared.name,
        "how": how,
        "available": how != "unavailable",
        "detail": reason,
        "cached": cached,
        "prebuilt": str(prebuilt.parent) if prebuilt is not None else None,
        "buildable": buildable,
    }


def existing_or_absent(folders: list[str]) -> str:
    """The folders, each that does not exist marked so (a source-only wheel has no prebuilt/)."""
    return ", ".join(folder if os.path.isdir(folder) else f"{folder} (absent)" for folder in folders) or "none"


def print_report(data: dict) -> None:
    nvcc = data["nvcc"]
    major = {
        True: "same major as torch's CUDA",
        False: "MAJOR VERSION DIFFERS FROM TORCH'S CUDA",
        None: "torch has no CUDA to compare with",
    }[nvcc["major_matches_torch"]]
    lines = [
        ("python", data["python"]),
        ("torch", data["torch"]),
        ("torch CUDA", data["torch_cuda"] or "none (CPU-only build)"),
        ("nvcc", f"{nvcc['path']} (release {nvcc['release']}, {major})" if nvcc["path"] else "not found (set CUDA_HOME)"),
        ("ninja", data["ninja"] or "NOT FOUND (pip install ninja)"),
        ("C++ compiler", f"{data['cxx']['path']}: {data['cxx']['version']}" if data["cxx"]["path"] else "NOT FOUND"),
        ("GPUs", ", ".join(f"{g['index']}: {g['name']} (sm {g['arch']})" for g in data["gpus"]) or "none visible"),
        ("TORCH_CUDA_ARCH_LIST", data["TORCH_CUDA_ARCH_LIST"] or "unset"),
        ("CUDA kernels", data["cuda_build"]),
        ("cache root", f"{data['cache_root']['path']} ({data['cache_root']['reason']})"),
        ("cache root state", data["cache_root"]["problem"] or f"ok, mode {data['cache_root'].get('mode', '-')}"),
        ("prebuilt dirs", existing_or_absent(data["prebuilt_dirs"])),
        ("remote cache", remote_line(data["remote"])),
    ]
    for name, value in lines:
        print(f"{name:<21} {value}")
    print()
    for row in data["extensions"]:
        print(f"{row['name']:<24} {row['how']:<12} {row['detail']}")
