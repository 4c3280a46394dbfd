# SPDX-License-Identifier: MIT
"""The Extension declaration and what is built around it: identity by (namespace, name), header
dependencies from the compiler, modules layered without import cycles, public errors."""

import ast
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import children
import pytest
from tiny_extension import NAMESPACE, tiny_extension

import jitops
import jitops.ops._framework
from jitops import _errors, _layout
from jitops.extension import flag_words

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
TIMEOUT_S = 300


def run_child(code: str, cache: Path, *args: str) -> dict:
    """code in a new process with its own cache; its last stdout line, parsed as JSON."""
    env = {**__import__("os").environ, "JITOPS_CACHE_DIR": str(cache)}
    env.pop("JITOPS_VERBOSE", None)
    proc = children.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(TESTS)!r})\n" + code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


# ---------------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------------


def imported_modules(path: Path, module: str, package: str) -> set[str]:
    """The jitops modules a file imports anywhere in it (inside functions too), resolved. Imports
    under `if TYPE_CHECKING:` never run (annotations only), so they are left out."""
    found = set()
    tree = ast.parse(path.read_text())
    for node in list(ast.walk(tree)):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("jitops")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            if not origin.startswith("jitops"):
                continue
            for alias in node.names:  # `from . import _root` names a module; `from ._core import X` does not
                candidate = f"{origin}.{alias.name}"
                found.add(candidate if candidate in MODULES else origin)
    return found - {module}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in (REPO / "jitops").rglob("*.py")}


def test_jitops_modules_import_each_other_without_cycles():
    graph = {}
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = imported_modules(path, name, package) & set(MODULES)
    # The core stands on nothing but four leaves: the errors, the namespace guard (checked before
    # a warm dlopen too; it asks torch's dispatcher through the one door to torch's private names),
    # the package's constants and the cache's layout (the warm path reads its records by those
    # names; the settings name its root) and the file primitives.
    leaves = {"jitops._errors", "jitops.warm._namespaces", "jitops._layout", "jitops._files"}
    door = {"jitops._errors", "jitops._torch_private", "jitops._settings"}
    assert graph["jitops._torch_private"] <= {"jitops._errors"} and graph["jitops._settings"] <= {"jitops._errors"}
    assert graph["jitops.warm"] <= leaves and all(graph[leaf] <= door for leaf in leaves), "the core stands on nothing"
    cycles = []

    def visit(node, stack):
        for target in sorted(graph[node]):
            if target in stack:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in done:
                visit(target, stack + [target])
        done.add(node)

    done: set[str] = set()
    for node in sorted(graph):
        if node not in done:
            visit(node, [node])
    assert cycles == [], f"import cycles: {cycles}"


# The wings in their order (docs/ARCHITECTURE.md): a module imports only modules of its own rank or
# below, inside functions too. The ground is six leaves every wing stands on; the public modules
# are on top, jitops.extension (the declaration the compat wing makes) just below the compat wing.
WINGS = ("ground", "warm", "store", "builder", "extension", "compat", "top")
GROUND = {"jitops._errors", "jitops._torch_private", "jitops._layout", "jitops._flock", "jitops._settings", "jitops._files"}


def wing_of(module: str) -> str:
    if module in GROUND:
        return "ground"
    if module in ("jitops.extension", "jitops._resolution"):  # the declaration, and how it is resolved
        return "extension"
    wing = module.split(".")[1] if module.count(".") else ""
    return wing if wing in ("warm", "store", "builder", "compat") else "top"


def test_every_import_follows_the_order_of_the_wings():
    upward = []
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in sorted(imported_modules(path, name, package) & set(MODULES)):
            if WINGS.index(wing_of(target)) > WINGS.index(wing_of(name)):
                upward.append(f"{name} ({wing_of(name)}) imports {target} ({wing_of(target)})")
    assert upward == [], "imports against the order of the wings:\n" + "\n".join(upward)
    assert {wing_of(name) for name in MODULES} == set(WINGS)


# What names a path inside a cache root: its folders' and files' names, as string literals.

# The loader and the CLI in pieces a newcomer can hold: no module over 450 lines, no function over
# 60 lines of code (its docstring, comments and blank lines not counted). Branches are ruff's to hold
# (C901, PLR0912: 15; pyproject.toml). Not a cap on the whole: a feature that needs code has it, in
# the wing it belongs to.
MODULE_LINES, FUNCTION_LINES = 450, 60
HELD = [*sorted((REPO / "jitops").rglob("*.py")), *sorted((REPO / "cache_tools").rglob("*.py"))]


def code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    """The lines of a function's body that hold code: its docstring, comments and blank lines left out."""
    body = function.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    spanned = {n for node in body for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    return sum(1 for n in spanned if lines[n - 1].strip() and not lines[n - 1].lstrip().startswith("#"))


def test_no_module_or_function_of_the_loader_or_the_cli_is_too_long():
    long_modules, long_functions = [], []
    for path in HELD:
        text = path.read_text()
        lines = text.splitlines()
        if len(lines) > MODULE_LINES:
            long_modules.append(f"{path.relative_to(REPO)}: {len(lines)} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (n := code_lines(node, lines)) > FUNCTION_LINES:
                long_functions.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {n} lines of code")
    assert long_modules == [], f"over {MODULE_LINES} lines: {long_modules}"
    assert long_functions == [], f"over {FUNCTION_LINES} lines of code: {long_functions}"


def test_the_length_rule_counts_code_not_docstrings_or_comments():
    text = 'def f():\n    """A doc\n    string."""\n    # a comment\n\n    a = 1\n    return (a,\n            2)\n'
    (function,) = ast.parse(text).body
    assert code_lines(function, text.splitlines()) == 3


def test_a_function_local_import_of_jitops_says_why_on_its_line():
    """Imports go at the top, where a reader looks for them; one inside a function is there for the
    warm path's (or a command's) speed, a cycle or an optional part, and its line says which."""
    silent = []
    for path in HELD:
        text = path.read_text()
        lines = text.splitlines()
        for function in ast.walk(ast.parse(text)):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (
                    node.level or (node.module or "").split(".")[0] in ("jitops", "cache_tools")
                ):
                    if "#" not in lines[node.lineno - 1]:
                        silent.append(f"{path.relative_to(REPO)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert silent == [], "hoist these, or say why on the line:\n" + "\n".join(silent)


def private_store_imports(path: Path) -> set[str]:
    """The private modules of jitops.store a file outside it imports (annotations apart)."""
    relative = path.relative_to(REPO)
    tree = ast.parse(path.read_text())
    for node in list(ast.walk(tree)):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = list(relative.with_suffix("").parts[:-1])
            base = parts[: len(parts) - node.level + 1] if node.level else []
            origin = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module or ""
            if origin == "jitops.store":
                found |= {alias.name for alias in node.names if alias.name.startswith("_")}
            elif origin.startswith("jitops.store._"):
                found.add(origin.split(".")[2])
    return found


# The programs that reach past the door on purpose, each with what it needs there. (A child's code
# given as a string is not read: examples/unmodified_program.py names the store's steps to profile
# them, scripts/dlopen_floor.py's child adds a flag to the key's.)
STORE_INSIDES = {
    "examples/remote_soak.py": {"_remote_records", "_signing"},  # seals a stranger's hostile record
    "scripts/budget_cost.py": {"_budget"},  # times the budget's walk
    "scripts/stats_cost.py": {"_usage"},  # times the counters' writes
}


def test_outside_the_store_no_module_imports_a_private_module_of_the_store():
    """The store's door (jitops.store.__all__, listed in docs/ARCHITECTURE.md) is the only way in, for
    the loader, the CLI, setup.py's ahead-of-time build, CI's checks and the examples alike; only the
    programs that time or break the store's insides reach past it (STORE_INSIDES)."""
    programs = [*REPO.glob("examples/*.py"), *REPO.glob("scripts/*.py"), *REPO.glob(".ci/*.py")]
    found = {
        str(path.relative_to(REPO)): imported
        for path in [*HELD, REPO / "setup.py", *programs]
        if path.relative_to(REPO).parts[:2] != ("jitops", "store") and (imported := private_store_imports(path))
    }
    assert found == STORE_INSIDES, "go through jitops.store's door (Store, or a name added to it and to ARCHITECTURE)"


def test_the_doors_names_are_the_ones_architecture_lists():
    import jitops.store

    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    listed = text[text.index("The door's public names") :].split(":", 1)[1].split(". ", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", listed)) == sorted(jitops.store.__all__)
    assert all(hasattr(jitops.store, name) for name in jitops.store.__all__)
    assert sorted(jitops.store.__all__) == sorted(jitops.store._HOLDERS), "each door name has one holder"


CACHE_NAMES = ("manifest.json", "build.log", "record.json", "object.o", "pch.h", "warm-", ".tmp-", ".lock", ".owner")
CACHE_NAMES += (".failed.log", "file-hashes.json", "toolchain.json", "stats.json", "stats.lck")
CACHE_NAMES += ("locations.json", "objects", "pch", "inline")
REMOTE_NAMES = ("blobs/", "entries/", "objects/", "pch/", "leases/", "stats/")


def test_only_the_store_names_a_path_inside_the_cache():
    """The layout of a cache root, and of the remote cache, has one owner: jitops/_layout.py names
    every folder and file in it (the store, jitops/store/_root.py, and everything else ask it). A string literal elsewhere in the
    package or the CLI that spells one of those names is a second owner."""
    offenders = []
    for path in sorted([*(REPO / "jitops").rglob("*.py"), *(REPO / "cache_tools").rglob("*.py")]):
        if path.name == "_layout.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node) is not None
        }
        # A bare word ("pch") names a path where it is joined into one (`root / "pch"`, os.path.join).
        in_path = {
            id(part)
            for node in ast.walk(tree)
            for part in (
                [node.left, node.right]
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                else node.args
                if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "join"
                else []
            )
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                words = node.value in CACHE_NAMES and ("." in node.value or id(node) in in_path)
                words = words or any(n in node.value for n in CACHE_NAMES if "." in n or "-" in n)
                words = words or node.value.startswith(REMOTE_NAMES)  # the remote's: "blobs/...", f"entries/{key}"
                if words:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    assert offenders == [], "paths inside the cache named outside jitops/_layout.py:\n" + "\n".join(offenders)


def test_the_errors_users_catch_are_public():
    assert jitops.BuildError is _errors.BuildError and jitops.CacheError is _errors.CacheError
    assert jitops.NamespaceConflict is _errors.NamespaceConflict
    with pytest.raises(jitops.BuildError, match="missing sources"):
        from jitops import _resolution

        _resolution.resolve(tiny_extension(TESTS / "no_such_folder"))


# ---------------------------------------------------------------------------------------------
# The declaration
# ---------------------------------------------------------------------------------------------


def test_the_package_shows_its_ops_to_help_dir_and_type_checkers():
    """help(), dir(), __all__ and `from jitops import *` give every op module's names, found in
    jitops/ops/ (they are imported on first use), and the loader's, nothing else; a misspelt name
    gets a suggestion."""
    from jitops.ops._framework import available_ops

    exported = {name for op in available_ops() for name in __import__(f"jitops.ops.{op}", fromlist=["_"]).__all__}
    assert set(jitops.__all__) == set(jitops.LOADER_NAMES) | exported, "no list to keep: the ops' names are found"
    assert not {"importlib", "pkgutil", "annotations", "TYPE_CHECKING"} & set(dir(jitops))
    assert exported <= set(dir(jitops))
    star: dict = {}
    exec("from jitops import *", star)
    assert exported <= set(star) and all(star[name] is getattr(jitops, name) for name in exported)
    text = children.run(
        [sys.executable, "-c", "import jitops; help(jitops)"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PAGER": "cat"},
    ).stdout
    for op in available_ops():
        assert op in text, op
    with pytest.raises(AttributeError, match="did you mean 'bias_act'"):
        jitops.bias_activation  # noqa: B018
    assert "default_alpha=0.2" in repr(jitops.ACTIVATIONS["lrelu"])


def test_declaring_is_frozen_and_checks_its_arguments():
    extension = tiny_extension()
    assert extension.qualified_name == f"{NAMESPACE}.tiny" and extension.library_name == f"{NAMESPACE}_tiny"
    with pytest.raises(AttributeError, match="frozen"):
        extension.name = "other"
    assert extension == tiny_extension() and hash(extension) == hash(tiny_extension())
    with pytest.raises(ValueError, match="namespace must be a C identifier, got 'my-ns'"):
        jitops.Extension("x", ["a.cpp"], namespace="my-ns", root=".")
    with pytest.raises(ValueError, match="name must be a C identifier"):
        jitops.Extension("x.y", ["a.cpp"], namespace="ns", root=".")
    with pytest.raises(TypeError, match="sources must be a list of strings, got 'a.cpp'"):
        jitops.Extension("x", "a.cpp", namespace="ns", root=".")
    with pytest.raises(ValueError, match="sources is empty"):
        jitops.Extension("x", [], namespace="ns", root=".")
    with pytest.raises(ValueError, match="cuda must be one of"):
        jitops.Extension("x", ["a.cpp"], namespace="ns", root=".", cuda="sometimes")
    # Its entries and warm records would change, on every load, a folder whose identity the key reads.
    for folder in ("src", "include", "src/"):
        with pytest.raises(ValueError, match="cache_dir .* holds its sources or headers"):
            jitops.Extension(
                "x", ["src/a.cpp"], namespace="ns", root="/pkg", include_dirs=["include"], cache_dir=os.path.join("/pkg", folder)
            )
    assert (
        jitops.Extension("x", ["src/a.cpp"], namespace="ns", root="/pkg", cache_dir="/pkg/src/build").cache_dir
        == "/pkg/src/build"
    )


def test_a_python_module_in_a_file_no_import_loader_takes_is_an_import_error_naming_it(tmp_path):
    """LoadedLibrary.module where python has no loader for the file's name (a .so always has one)."""
    declared = jitops.Extension("odd", ["a.cpp"], namespace="ns", root=str(tmp_path), python_module=True)
    library = jitops.LoadedLibrary(declared, tmp_path / "odd.txt", False, "", "cache")
    with pytest.raises(ImportError, match="odd.txt cannot be imported as a module"):
        library.module  # noqa: B018 (the property imports it)


def test_only_namespace_name_key_is_an_entry_name():
    """Entry folders, warm records and prebuilt folders are all recognised by this one rule."""
    key = "0123456789abcdef"
    variant = "fedcba9876543210"
    assert _layout.parse_entry_name(f"jitops.add2-{key}") == ("jitops.add2", key, None)  # a prebuilt folder
    assert _layout.parse_entry_name(f"jitops.add2-{key}-{variant}") == ("jitops.add2", key, variant)  # a cache entry
    for name in [
        f"jitops.add2-{key}-{variant[:-1]}",
        f"jitops.add2-{key}-{variant}-{key}",
        f"add2-{key}",
        f"jitops.add2-{key.upper()}",
        f"jitops.add2-{key[:-1]}",
        f"jitops.a.b-{key}",
        f"../x.add2-{key}",
        f"jitops.\u00e4dd-{key}",
        f"jitops.add2-{key}.tmp",
        f".tmp-jitops.add2-{key}-12-x",
        "",
    ]:
        assert _layout.parse_entry_name(name) is None, name


def test_every_op_declares_one_extension_in_the_jitops_namespace():
    import jitops.ops._framework

    for op in jitops.available_ops():
        extension = jitops.ops._framework.extension(op)
        assert (extension.namespace, extension.name) == ("jitops", op)
        assert all((Path(extension.root) / source).is_file() for source in extension.sources), op


# ---------------------------------------------------------------------------------------------
# Identity is (namespace, name)
# ---------------------------------------------------------------------------------------------

LOAD_IN_TWO_NAMESPACES = f"""
import json, sys
import jitops.warm
from jitops import _resolution
from tiny_extension import tiny_extension
first = _resolution.resolve(tiny_extension(sys.argv[1], namespace="{NAMESPACE}"))
second = _resolution.resolve(tiny_extension(sys.argv[1], namespace="{NAMESPACE}_other"))
print(json.dumps({{"libraries": [str(first.library), str(second.library)], "how": [first.how, second.how],
                  "loaded": sorted(jitops.warm.loaded)}}))
"""


def test_two_extensions_of_one_name_in_two_namespaces_live_side_by_side(tmp_path):
    cache = tmp_path / "cache"
    cold = run_child(LOAD_IN_TWO_NAMESPACES, cache, str(TESTS / "tiny_ext"))
    assert cold["how"] == ["built", "built"]
    assert cold["loaded"] == [f"{NAMESPACE}.tiny", f"{NAMESPACE}_other.tiny"]
    first, second = map(Path, cold["libraries"])
    assert first.parent.name.startswith(f"{NAMESPACE}.tiny-") and second.parent.name.startswith(f"{NAMESPACE}_other.tiny-")
    assert first.name == f"{NAMESPACE}_tiny.so" and second.name == f"{NAMESPACE}_other_tiny.so"
    assert sorted(p.name.rpartition("-")[0] for p in cache.glob("warm-*.json")) == [
        f"warm-{NAMESPACE}.tiny",
        f"warm-{NAMESPACE}_other.tiny",
    ]
    assert sorted(p.name.rpartition("-")[0] for p in cache.glob("*.lock")) == [f"{NAMESPACE}.tiny", f"{NAMESPACE}_other.tiny"]
    for library in (first, second):
        assert (
            json.loads((library.parent / _layout.MANIFEST_NAME).read_text())["name"]
            == _layout.parse_entry_name(library.parent.name)[0]
        )
    warm = run_child(LOAD_IN_TWO_NAMESPACES, cache, str(TESTS / "tiny_ext"))
    assert warm["how"] == ["cache", "cache"] and warm["libraries"] == cold["libraries"]


LOAD_TWO_VERSIONS = f"""
import ctypes, json, sys, torch
import jitops
import jitops.warm
from tiny_extension import tiny_extension
first = tiny_extension(sys.argv[1]).load()
errors = []
for other in (tiny_extension(sys.argv[2]), tiny_extension(sys.argv[1], name="tiny_renamed"),
              jitops.Extension("tiny", first.extension.sources, namespace="{NAMESPACE}", root=sys.argv[1], version="2")):
    try:
        other.load()
    except jitops.NamespaceConflict as err:
        errors.append(str(err))
print(json.dumps({{"errors": errors, "loaded": sorted(jitops.warm.loaded), "libraries": sorted(torch.ops.loaded_libraries),
                  "value": ctypes.CDLL(str(first.library)).jitops_tiny_value()}}))
"""


def test_two_versions_of_one_namespace_raise_before_dlopen_and_the_process_lives_on(tmp_path):
    """The same namespace from another copy of the package (another root) or another version: a
    NamespaceConflict naming both, before the second library is opened (torch would abort the
    process from a static initialiser on a second TORCH_LIBRARY block); the first one keeps working."""
    first, other = tmp_path / "package", tmp_path / "other_copy"
    shutil.copytree(TESTS / "tiny_ext", first)
    shutil.copy(first / "kernels/cpu/tiny.cpp", first / "kernels/cpu/tiny_renamed.cpp")
    shutil.copy(first / "bindings/tiny.cpp", first / "bindings/tiny_renamed.cpp")
    shutil.copytree(TESTS / "tiny_ext", other)
    result = run_child(LOAD_TWO_VERSIONS, tmp_path / "cache", str(first), str(other))
    assert len(result["errors"]) == 2, result
    assert str(first) in result["errors"][0] and str(other) in result["errors"][0]
    assert "version 2" in result["errors"][1] and "version 0" in result["errors"][1]
    # The same root and version under another name is the same package splitting its namespace: loaded.
    assert result["loaded"] == [f"{NAMESPACE}.tiny", f"{NAMESPACE}.tiny_renamed"]
    assert not any(str(other) in library for library in result["libraries"]), "the conflicting library was never opened"
    assert result["value"] == 42


REGISTER_UNKNOWN_OPS = """
import json, sys
import jitops
errors = []
for name, namespace, op in [("typo", "jitops_test_fake", "cubee"), ("wrong", "jitops_test_right", "cube")]:
    extension = jitops.Extension(name, [name + ".cpp"], namespace=namespace, root=sys.argv[1])
    extension.register_fake(op)(lambda x: x)
    try:
        extension.load()
    except ValueError as err:
        errors.append(str(err))
print(json.dumps({"errors": errors}))
"""


@pytest.mark.slow  # two builds against torch's headers
def test_a_registration_for_an_op_the_library_lacks_fails_at_load_naming_what_it_has(tmp_path):
    """register_fake("cubee") for the op cube, and a C++ block in another namespace than the
    Extension's: each a ValueError when the library loads, naming the ops or the namespace it has."""
    schema = 'm.def("cube(Tensor x) -> Tensor");'
    (tmp_path / "typo.cpp").write_text(f"#include <jitops/library.h>\nJITOPS_LIBRARY(m) {{ {schema} }}\n")
    (tmp_path / "wrong.cpp").write_text(
        f"#include <torch/library.h>\nTORCH_LIBRARY_FRAGMENT(jitops_test_elsewhere, m) {{ {schema} }}\n"
    )
    typo, wrong = run_child(REGISTER_UNKNOWN_OPS, tmp_path / "cache", str(tmp_path))["errors"]
    assert "register_fake('cubee')" in typo and "the namespace has: cube. Is 'cubee' a typo?" in typo, typo
    assert "its C++ registers ops in 'jitops_test_elsewhere' instead" in wrong, wrong
    assert "namespace='jitops_test_elsewhere'" in wrong and "JITOPS_LIBRARY(m)" in wrong, wrong


DISABLE_BUILD = """
import json, sys
import jitops
from tiny_extension import tiny_extension
try:
    print(json.dumps({"how": tiny_extension().load().how}))
except jitops.BuildError as err:
    print(json.dumps({"error": str(err)}))
"""


def test_disable_build_fails_at_once_naming_the_extension_and_what_is_missing(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("JITOPS_DISABLE_BUILD", "1")
    refused = run_child(DISABLE_BUILD, cache)
    assert f"{NAMESPACE}.tiny" in refused["error"] and "JITOPS_DISABLE_BUILD" in refused["error"]
    assert "has no entry" in refused["error"] and not list(cache.glob(f"{NAMESPACE}.*")), "nothing was compiled"
    monkeypatch.delenv("JITOPS_DISABLE_BUILD")
    assert run_child(DISABLE_BUILD, cache)["how"] == "built"
    monkeypatch.setenv("JITOPS_DISABLE_BUILD", "1")
    assert run_child(DISABLE_BUILD, cache)["how"] == "cache", "what is in the cache still loads"


DISABLE_BUILD_LOAD = """
import json, sys
import jitops
try:
    jitops.load("n21", [sys.argv[1]])
except jitops.BuildError as err:
    print(json.dumps({"error": str(err)}))
"""


def test_disable_build_advises_a_programs_load_only_what_can_build_it(tmp_path, monkeypatch):
    # N21: `jitops-cache build` builds jitops' ops and packages' extensions, never a program's load().
    monkeypatch.setenv("JITOPS_DISABLE_BUILD", "1")
    refused = run_child(DISABLE_BUILD_LOAD, tmp_path / "cache", str(TESTS / "tiny_ext" / "kernels" / "cpu" / "tiny.cpp"))
    assert "JITOPS_DISABLE_BUILD is set" in refused["error"]
    assert "Run the program once where compiling is allowed" in refused["error"]
    assert "(`jitops-cache build`, or a first run)" not in refused["error"]


# ---------------------------------------------------------------------------------------------
# Header dependencies from the compiler
# ---------------------------------------------------------------------------------------------

LOAD_TINY_WITH_INCLUDES = """
import ctypes, json, sys
from jitops import Extension
from jitops import _resolution
root, include = sys.argv[1], sys.argv[2]
sources = ["kernels/cpu/tiny.cpp", "kernels/cpu/tiny_second.cpp", "bindings/tiny.cpp"]
loaded = _resolution.resolve(Extension("tiny", sources, namespace="jitops_test", root=root, include_dirs=[include]))
print(json.dumps({"how": loaded.how, "value": ctypes.CDLL(str(loaded.library)).jitops_tiny_value(),
                  "headers": json.load(open(loaded.library.parent / "manifest.json"))["headers"]}))
"""


def test_a_header_from_another_folder_is_tracked_and_an_unused_one_is_not(tmp_path):
    root, include, cache = tmp_path / "tiny", tmp_path / "elsewhere", tmp_path / "cache"
    shutil.copytree(TESTS / "tiny_ext", root)
    include.mkdir()
    (include / "tiny_offset.h").write_text("#define TINY_OFFSET 1\n")
    (include / "unused.h").write_text("#define UNUSED 1\n")
    source = root / "kernels" / "cpu" / "tiny.cpp"
    source.write_text(
        source.read_text()
        .replace('#include "../tiny.h"', '#include "../tiny.h"\n#include <tiny_offset.h>')
        .replace("return TINY_VALUE;", "return TINY_VALUE + TINY_OFFSET;")
    )
    first = run_child(LOAD_TINY_WITH_INCLUDES, cache, str(root), str(include))
    assert first["how"] == "built" and first["value"] == 43
    # The headers each unit included, and no others: relative to the root where under it.
    assert set(first["headers"]) == {"kernels/tiny.h", str(include / "tiny_offset.h")}, first["headers"]
    (include / "unused.h").write_text("#define UNUSED 2\n")
    assert run_child(LOAD_TINY_WITH_INCLUDES, cache, str(root), str(include))["how"] == "cache"
    (include / "tiny_offset.h").write_text("#define TINY_OFFSET 2\n")
    edited = run_child(LOAD_TINY_WITH_INCLUDES, cache, str(root), str(include))
    assert edited["how"] == "built" and edited["value"] == 44


LOAD_TWO_OPS_FROM = """
import json, sys
from jitops import Extension
from jitops import _resolution
from jitops.ops.add2 import EXTENSION as add2
from jitops.ops.bias_act import EXTENSION as bias_act
how = {}
for d in (add2, bias_act):  # the same declarations, over a copy of the sources
    copy = Extension(d.name, d.sources, namespace=d.namespace, root=sys.argv[1], cflags=d.cflags,
                     cuda_cflags=d.cuda_cflags, version=d.version)
    how[d.name] = _resolution.resolve(copy).how
print(json.dumps(how))
"""


@pytest.mark.slow
def test_an_edit_to_bias_act_h_rebuilds_bias_act_and_nothing_else(tmp_path):
    root, cache = tmp_path / "sources", tmp_path / "cache"
    for folder in ("kernels", "bindings"):
        shutil.copytree(Path(jitops.ops._framework.SOURCE_ROOT) / folder, root / folder)
    first = run_child(LOAD_TWO_OPS_FROM, cache, str(root))
    assert (first["add2"], first["bias_act"]) == ("built", "built"), first["stderr"]
    header = root / "kernels" / "bias_act.h"
    header.write_text(header.read_text() + "\n// edited\n")
    again = run_child(LOAD_TWO_OPS_FROM, cache, str(root))
    assert (again["add2"], again["bias_act"]) == ("cache", "built"), again["stderr"]
    entries = [_layout.parse_entry_name(p.name) for p in cache.glob("jitops.bias_act-*") if p.is_dir()]
    assert len(entries) == 2 and len({e[:2] for e in entries}) == 1, "one key (the declared sources), two variants"


# torch's and pybind11's private names: spelt only in jitops/_torch_private.py (comments aside), in
# the loader, the ops and the CLI.
PRIVATE_NAMES = re.compile(
    r"torch\._C\b|cpp_extension\._\w|_cpp_extension_versioner|torch\._appdirs|__pybind11_|PyInterpreterState_"
)


def test_only_the_one_door_uses_torchs_and_pybind11s_private_names():
    offenders = []
    for path in sorted([*(REPO / "jitops").rglob("*.py"), *(REPO / "cache_tools").rglob("*.py"), REPO / "_jitops_drop_in.py"]):
        if path.name == "_torch_private.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE_NAMES.search(line.split("#", 1)[0]):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == [], offenders


# ---------------------------------------------------------------------------------------------
# Flags are data, never shell code
# ---------------------------------------------------------------------------------------------

SHELL_CODE = ["; touch {file}", "| touch {file}", "&& touch {file}", "`touch {file}`", "$(touch {file})", "-O2\ntouch {file}"]


@pytest.mark.parametrize(
    "argument, payload",
    [(argument, payload) for argument in ("cflags", "cuda_cflags", "ldflags") for payload in SHELL_CODE]
    # An include path is quoted, never split: only what a build file cannot hold is refused (the
    # next test builds with the others as folders).
    + [("include_dirs", payload) for payload in SHELL_CODE if "$" in payload or "\n" in payload],
)
def test_a_flag_holding_shell_code_is_refused_naming_it_and_nothing_runs(tmp_path, argument, payload):
    flag = "-DX=1 " + payload.format(file=tmp_path / "ran")
    with pytest.raises(ValueError) as raised:
        jitops.Extension("tiny", ["kernels/cpu/tiny.cpp"], namespace=NAMESPACE, root=TESTS / "tiny_ext", **{argument: [flag]})
    assert f"{argument} (torch's extra_" in str(raised.value) and repr(flag) in str(raised.value)
    torch_name = {"cflags": "extra_cflags", "cuda_cflags": "extra_cuda_cflags", "ldflags": "extra_ldflags"}
    if argument in torch_name:  # the drop-in's load() refuses it too, before any build
        with pytest.raises(ValueError, match=re.escape(repr(flag))):
            jitops.load(
                "tiny_shell", [str(TESTS / "tiny_ext" / "kernels" / "cpu" / "tiny.cpp")], **{torch_name[argument]: [flag]}
            )
    # and it is the RuntimeError a failed compile is (PyTorch's test_pch_command_injection catches that)
    try:
        jitops.load_inline(
            "tiny_shell", cpp_sources="int f() { return 1; }", **{torch_name.get(argument, "extra_include_paths"): [flag]}
        )
    except RuntimeError as caught:
        assert repr(flag)[1:-1] in str(caught)  # include paths are made absolute
    else:
        raise AssertionError("load_inline built an extension whose flags hold shell code")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    "flag", ["-O3", "-DX=1", "-I/a/b", "--std=c++17", "", "-DX=a#b", "-O3 -g", "-DX='a b'", "-DX=\\q", "-O1\t-g0"]
)
def test_a_flag_is_split_into_the_words_a_shell_makes(flag):
    assert list(flag_words("tiny", "cflags", [flag])) == shlex.split(flag)


def test_an_unbalanced_quote_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match=r"cflags \(torch's extra_cflags\) entry '-DX=\"a' cannot be split"):
        jitops.Extension("tiny", ["kernels/cpu/tiny.cpp"], namespace=NAMESPACE, root=TESTS / "tiny_ext", cflags=['-DX="a'])


FLAGS_AS_WORDS = """
import ctypes, json, sys
import jitops
from tiny_extension import NAMESPACE, SOURCES, tiny_extension
tiny = tiny_extension()
folders = json.loads(sys.argv[1])
# Quotes group words as a shell would; one entry of two flags is two words; include paths are data.
extension = jitops.Extension("tiny", tiny.sources, namespace=NAMESPACE, root=str(SOURCES),
                             cflags=['-DJITOPS_GREETING="two words"', "-O1 -g0"], include_dirs=folders)
loaded = extension.load()
print(json.dumps({"value": ctypes.CDLL(str(loaded.library)).jitops_tiny_value(), "cflags": extension.cflags}))
"""


def test_flags_reach_the_compiler_as_words_and_no_path_or_quote_reaches_a_shell(tmp_path):
    ran = tmp_path / "ran"
    folders = [str(tmp_path / code.format(file=ran).replace("/", "_")) for code in SHELL_CODE[:4]] + [str(tmp_path / "it's")]
    for folder in folders:
        os.makedirs(folder)
    built = run_child(FLAGS_AS_WORDS, tmp_path / "cache", json.dumps(folders))
    assert built["value"] == 42 and built["cflags"] == ["-DJITOPS_GREETING=two words", "-O1", "-g0"]
    assert not ran.exists() and not list(tmp_path.glob("*/ran")), "no flag or path ran as a command"
