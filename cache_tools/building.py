# SPDX-License-Identifier: MIT
"""The commands that build or diagnose: doctor, and build (the only one that compiles)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import jitops
from jitops import _files, _layout
from jitops._errors import BuildError, CacheError
from jitops.store import PchStore, Store, floor_text, plan_cuda, staged

from . import doctor, registry
from .output import EXIT_OK, EXIT_PROBLEM, emit
from .selection import check_names, check_package


def cmd_doctor(args: argparse.Namespace) -> int:

    check_package(args.package, set(registry.broken()))
    report = doctor.report(args.package)
    emit(args, report, lambda: doctor.print_report(report))
    return EXIT_OK if all(row["available"] for row in report["extensions"]) else EXIT_PROBLEM


def chosen_extensions(names: list[str], package: str | None) -> list[tuple[str, jitops.Extension]]:
    """(owner, Extension) of each name (`op` of ours, else <namespace>.<name>), or of every
    extension declared here (of one package with --package)."""
    check_names(names)
    check_package(package)
    chosen = []
    for qualified, (owner, extension) in registry.declared().items():
        short = qualified.partition(".")[2] if owner == registry.OWN else qualified
        if (not names or short in names or qualified in names) and package in (None, owner):
            chosen.append((owner, extension))
    return chosen


def cmd_build(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    if args.arch:
        import torch

        os.environ["TORCH_CUDA_ARCH_LIST"] = args.arch
        if torch.version.cuda is None:
            print(
                f"jitops-cache build: --arch {args.arch} has no effect: torch {torch.__version__} is a CPU-only "
                "build, so no CUDA kernels are built (install a CUDA build of torch to build them)",
                file=sys.stderr,
            )
    chosen = chosen_extensions(args.names, args.package)
    if args.out:
        chosen = [(owner, beside(extension, Path(args.out))) for owner, extension in chosen]
    with ThreadPoolExecutor(max_workers=len(chosen) or 1) as pool:  # builds run in parallel, as load_all's
        futures = [(owner, extension, pool.submit(extension.load)) for owner, extension in chosen]
    errors = [f"  {extension.qualified_name}: {f.exception()}" for _, extension, f in futures if f.exception()]
    failure = f"{len(errors)} of {len(chosen)} failed:\n" + "\n".join(errors) if errors else None
    results = []
    for owner, extension, future in futures:
        if future.exception() is not None:
            continue
        loaded = future.result()
        name = extension.name if owner == registry.OWN else extension.qualified_name
        result = {
            "name": name,
            "owner": owner,
            "how": loaded.how,
            "with_cuda": loaded.with_cuda,
            "library": str(loaded.library),
            "sources": extension.root,
        }
        if args.out:
            result["prebuilt"] = str(export_prebuilt(loaded.library.parent, Path(args.out)))
            built = json.loads((loaded.library.parent / _layout.MANIFEST_NAME).read_text())["components"]
            result["fits"] = "any" if built.get("abi") == "stable" else "this"  # which torch and Python
        results.append(result)
    fits = {r["fits"] for r in results if "fits" in r}

    def human():
        for r in results:
            where = f" -> {r['prebuilt']}" if "prebuilt" in r else ""
            print(f"{r['name']:<24} {r['how']:<8} {'cpu+cuda' if r['with_cuda'] else 'cpu':<8} {r['library']}{where}")
            if "prebuilt" in r:
                print(f"{'':<24} from the sources in {r['sources']}")
        if fits == {"any"}:  # docs/extensions.md, "Prebuilt libraries in a wheel"
            print(f"these libraries fit every torch >= {floor_text()} and any Python: tag the wheel py3-none-<platform>")
        elif fits:
            import torch  # loaded by the builds already

            print(
                f"these libraries fit torch {torch.__version__} and Python {sys.version_info.major}.{sys.version_info.minor} alone: tag the wheel for both"
            )
        if failure:
            print(failure, file=sys.stderr)

    emit(args, {"built": results, "error": failure}, human)
    return EXIT_PROBLEM if failure else EXIT_OK


def beside(extension: jitops.Extension, out: Path) -> jitops.Extension:
    """The extension as declared in the source tree --out lies in, where that is not the copy the
    entry point found: `build --out src/pkg/prebuilt` in an author's checkout builds the checkout's
    sources (which the next wheel ships), not an installed, older copy of them."""
    if extension.prebuilt_dir is None:
        return extension
    shipped_as = os.path.relpath(extension.prebuilt_dir, extension.root)
    out = out.resolve()
    if shipped_as.startswith("..") or not str(out).endswith(os.sep + shipped_as):
        return extension
    tree = str(out)[: -len(shipped_as) - 1]
    if os.path.realpath(tree) == os.path.realpath(extension.root) or not all(
        os.path.isfile(os.path.join(tree, source)) for source in extension.sources
    ):
        return extension
    return jitops.Extension(
        extension.name,
        extension.sources,
        namespace=extension.namespace,
        root=tree,
        include_dirs=extension.include_dirs,
        cflags=extension.cflags,
        cuda_cflags=extension.cuda_cflags,
        ldflags=extension.ldflags,
        cuda=extension.cuda,  # type: ignore[arg-type]
        cuda_archs=extension.cuda_archs,
        version=extension.version,
        python_module=extension.python_module,
        stable_abi=extension.stable_abi,
        cache_dir=extension.cache_dir,
        prebuilt_dir=shipped_as,
    )


def export_prebuilt(entry_dir: Path, out: Path) -> Path:
    """Copy a published entry (.so and manifest) into out/<its folder name>/ for JITOPS_PREBUILT_DIR,
    in one rename, so a reader never sees half of it. A copy there already (the same key and
    headers) is kept, never replaced: a process may be loading it. Everything it creates is
    readable by all and writable by its owner alone, whatever the umask: the loader refuses a
    prebuilt entry that anyone else could write (_prebuilt.untrusted_prebuilt)."""
    if not out.exists():
        out.mkdir(parents=True)
        os.chmod(out, 0o755)
    target = out / entry_dir.name
    manifest = json.loads((entry_dir / _layout.MANIFEST_NAME).read_text())
    if os.path.lexists(target):
        _check_exported(target)
        return target
    with staged(out, target, mode=0o755) as staging:
        shutil.copy2(entry_dir / manifest["library"], staging.path / manifest["library"])
        _files.write_json_atomic(staging.path / _layout.MANIFEST_NAME, manifest)
        os.chmod(staging.path / manifest["library"], 0o755)
        os.chmod(staging.path / _layout.MANIFEST_NAME, 0o644)
    if not staging.published:  # another export of the same entry won
        _check_exported(target)
    return target


def _check_exported(target: Path) -> None:
    """A copy exported earlier must still be sound, as the loader reads a prebuilt (its sha256 in
    full): else an error naming it (it is never replaced)."""
    parsed = _layout.parse_entry_name(target.name)
    assert parsed is not None  # named by export_entry
    name, key, variant = parsed
    try:
        sound = (
            Store(target.parent).entry(name, key, variant=variant).verified_library(touch=False, private=False, full_hash=True)
        )
    except (CacheError, OSError):
        sound = None
    if sound is None:
        raise BuildError(f"jitops: {target} is there already and damaged; remove it (`rm -r {target}`) and export again")


# The header jitops.load's extensions start with, as torch's tutorials write them.
EXTENSION_HEADER = "#include <torch/extension.h>\n"


def cmd_pch(args: argparse.Namespace) -> int:
    """Build now the precompiled headers of torch/extension.h that jitops.load's extensions (default
    flags, no extra include paths) use under this machine's compiler and torch: one for C++-only
    extensions and, where CUDA builds here, one for extensions with CUDA sources. For an image."""
    import tempfile
    import time

    os.environ["JITOPS_PCH"] = "wait"  # the PCH is built before the unit that uses it
    pch_dir = Path(_layout.pch_dir(Store.shared_root(None)))
    before = {folder.name for folder in pch_dir.glob("*") if (folder / _layout.GCH_NAME).is_file()}
    results: list[dict[str, Any]] = []
    failure = None
    with tempfile.TemporaryDirectory(prefix="jitops-pch-") as folder:
        binding = Path(folder, "pch_binding.cpp")
        binding.write_text(EXTENSION_HEADER + 'extern "C" int jitops_pch_binding() { return 0; }\n')
        kernel = Path(folder, "pch_kernel.cu")
        kernel.write_text("__global__ void jitops_pch_kernel() {}\n")
        variants = [("c++", [str(binding)])]
        probe = jitops.Extension("jitops_pch_cuda", [kernel.name], namespace=_layout.DROP_IN_NAMESPACE, root=folder)
        if plan_cuda(probe).enabled:
            variants.append(("c++ beside CUDA sources", [str(binding), str(kernel)]))
        for label, sources in variants:
            began = time.time()
            try:
                jitops.load(
                    f"jitops_pch_{len(results)}",
                    sources,
                    build_directory=os.path.join(folder, str(len(results))),
                    is_python_module=False,
                )
            except (BuildError, CacheError) as err:
                failure = f"{label}: {err}"
                break
            results.append({"for": label, "seconds": round(time.time() - began, 1)})
    found: list[dict[str, Any]] = []
    for pch in sorted(pch_dir.glob("*")):
        gch = pch / _layout.GCH_NAME
        if gch.is_file() and PchStore.same_header(pch, EXTENSION_HEADER):
            found.append({"path": str(gch), "bytes": gch.stat().st_size, "new": pch.name not in before})

    def human():
        for result in results:
            print(f"torch/extension.h for {result['for']}: ready ({result['seconds']} s, with the unit that uses it)")
        for pch in found:
            print(f"  {pch['bytes'] / 1e6:,.0f} MB  {pch['path']}{'' if pch['new'] else ' (there before)'}")
        if failure:
            print(f"jitops-cache pch: {failure}", file=sys.stderr)

    emit(args, {"built": results, "pch": found, "error": failure}, human)
    return EXIT_PROBLEM if failure else EXIT_OK
