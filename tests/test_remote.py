# SPDX-License-Identifier: MIT
"""The remote tier (jitops/store/_remote.py) against a real redis-server on a free port, and a shared
folder (file://): a fresh machine (a cache root of its own) loads what another built; signatures
refuse every tampered part; machines that cannot run a library never share its entry; every
server fault leaves a load that builds locally and a cache `verify` finds sound; 8 machines that
miss one key together build it once. Real builds of tiny_ext, real processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import children
import pytest
from conftest import needs_cuda
from servers import Proxy, RedisServer, redis_binary
from test_loader import TIMEOUT_S, TINY_SOURCES, finish, load_tiny, slow_compiler, start_tiny, tiny_env

# What these tests need: the remote extra and a redis-server. Where one is missing they skip with
# the reason, except under CI, which must run them.
for _module in ("cryptography", "redis"):
    if os.environ.get("CI"):
        __import__(_module)
    pytest.importorskip(_module, reason="the remote extra (pip install 'jitops[remote]')")
pytestmark = []
if redis_binary() is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI must run the remote cache's tests: install redis-server (apt-get install redis-server)")
    pytestmark = [pytest.mark.skip(reason="no redis-server on PATH (Debian: apt-get install redis-server)")]


@pytest.fixture
def server(tmp_path):
    started = RedisServer(tmp_path / "redis")
    yield started
    started.stop()


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict:
    """Two signing keys made by the CLI: the writer's, and another nobody trusts."""
    folder = tmp_path_factory.mktemp("keys")
    made = {}
    for name in ("writer", "stranger"):
        out = cli(folder / "unused", "remote", "keygen", str(folder / name), "--json")
        assert out.returncode == 0, out.stderr
        made[name] = (str(folder / name), json.loads(out.stdout)["public_key"])
    assert (os.stat(folder / "writer").st_mode & 0o777) == 0o600
    return made


def remote_env(url: str, keys: dict, writer: bool = True, **extra: str) -> dict:
    """A writer (the CI: signs its pushes) or a reader (a pod: read-only, trusts the writer's key)."""
    env = {"JITOPS_REMOTE_CACHE": url, "JITOPS_REMOTE_TRUSTED_KEYS": keys["writer"][1]}
    if writer:
        env["JITOPS_REMOTE_SIGNING_KEY"] = keys["writer"][0]
    else:
        env["JITOPS_REMOTE_MODE"] = "read-only"
    return {**env, **extra}


def cli(cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return children.run(
        [sys.executable, "-m", "jitops", *args], env=tiny_env(cache, **env), capture_output=True, text=True, timeout=TIMEOUT_S
    )


def verify_sound(cache: Path) -> None:
    """The local cache after a fault: every entry re-hashes against its manifest."""
    out = cli(cache, "verify", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["problems"] == 0, out.stdout


def copy_tree(tmp_path: Path, name: str = "src") -> Path:
    copy = tmp_path / name
    shutil.copytree(TINY_SOURCES, copy)
    return copy


def test_a_fresh_root_loads_what_another_machine_built_without_compiling(tmp_path, server, keys):
    sources = copy_tree(tmp_path)
    built = load_tiny(tmp_path / "a", sources, **remote_env(server.url, keys))
    assert built["how"] == "built"
    fetched = load_tiny(tmp_path / "b", sources, **remote_env(server.url, keys, writer=False))
    assert (fetched["how"], fetched["value"]) == ("remote", built["value"]), fetched["stderr"]
    assert not [s for s in fetched["spawned"] if "ninja" in s], fetched["spawned"]  # (a compiler's --version probe at most)
    assert fetched["build_code"] == [], "a remote hit goes through the store alone: no module of the build wing"
    assert "warn" not in fetched["stderr"].lower(), fetched["stderr"]
    warm = load_tiny(tmp_path / "b", sources, **remote_env(server.url, keys, writer=False))
    assert warm["how"] in ("cache", "warm"), warm
    verify_sound(tmp_path / "b")
    # The fetched entry names where it came from; clear --signed-by removes it, and only it.
    manifest = json.loads(next((tmp_path / "b").glob("jitops_test.tiny-*/manifest.json")).read_text())
    assert manifest["remote"]["signed_by"] == keys["writer"][1]
    assert cli(tmp_path / "a", "clear", "--signed-by", keys["writer"][1]).returncode == 0
    assert list((tmp_path / "a").glob("jitops_test.tiny-*/manifest.json")), "a's own build was removed"
    assert cli(tmp_path / "b", "clear", "--signed-by", keys["writer"][1]).returncode == 0
    assert not list((tmp_path / "b").glob("jitops_test.tiny-*/manifest.json"))


def test_the_folder_tier_shares_between_two_roots_and_disable_build_still_downloads(tmp_path, keys):
    shared, sources = tmp_path / "shared", copy_tree(tmp_path)
    shared.mkdir()
    url = f"file://{shared}"
    assert load_tiny(tmp_path / "a", sources, **remote_env(url, keys))["how"] == "built"
    fetched = load_tiny(tmp_path / "b", sources, JITOPS_DISABLE_BUILD="1", **remote_env(url, keys, writer=False))
    assert fetched["how"] == "remote", fetched["stderr"]
    assert fetched["build_code"] == [], "a remote hit is the store's alone: no module of the build wing"
    assert list((shared / "entries").iterdir()) and not list(shared.rglob(".upload-*"))


def test_an_extension_edited_in_one_unit_downloads_the_other_objects_and_compiles_one(tmp_path, server, keys):
    sources = copy_tree(tmp_path)
    assert load_tiny(tmp_path / "a", sources, **remote_env(server.url, keys))["how"] == "built"
    second = sources / "kernels" / "cpu" / "tiny_second.cpp"
    second.write_text(second.read_text() + "\n// edited\n")
    edited = load_tiny(tmp_path / "b", sources, **remote_env(server.url, keys))
    assert edited["how"] == "built"
    assert "compiled 1 of 3 units" in edited["stderr"], edited["stderr"]


@pytest.mark.slow
def test_untrusted_unsigned_and_tampered_entries_are_never_loaded(tmp_path, server, keys):
    """Each tampering is a miss with one warning: the reader builds its own library."""
    sources = copy_tree(tmp_path)
    assert load_tiny(tmp_path / "writer", sources, **remote_env(server.url, keys))["how"] == "built"
    import redis

    client = redis.Redis(port=server.port)
    (record,) = [k for k in client.keys("jitops:entries/*") if not k.startswith(b"jitops:ls:")]
    original = client.get(record)
    head, signer, signature, text = original.split(b"\n", 3)
    body = json.loads(text)
    blob = f"jitops:blobs/{body['library_sha256']}".encode()
    library = client.get(blob)

    def framed(signer: bytes = signer, signature: bytes = signature, text: bytes = text) -> bytes:
        return b"\n".join([head, signer, signature, text])

    def reader(name: str, **extra: str) -> dict:
        return load_tiny(tmp_path / name, sources, **remote_env(server.url, keys, writer=False, **extra))

    # An untrusted reader: the writer's key is not in its list.
    untrusted = reader("stranger", JITOPS_REMOTE_TRUSTED_KEYS=keys["stranger"][1])
    assert untrusted["how"] == "built" and "is not in JITOPS_REMOTE_TRUSTED_KEYS" in untrusted["stderr"]
    tampered = {
        "blob": lambda: client.set(blob, library[:-1] + bytes([library[-1] ^ 1])),
        "signature": lambda: client.set(record, framed(signature=signature[::-1])),
        "manifest": lambda: client.set(record, framed(text=text.replace(b'"size":', b'"size":1'))),
        "key": lambda: client.set(record, framed(signer=keys["stranger"][1].encode())),
        "unsigned": lambda: client.set(record, framed(b"-", b"-")),
    }
    for part, tamper in tampered.items():
        tamper()
        result = reader(f"reader-{part}")
        assert result["how"] == "built", (part, result["stderr"])
        assert result["stderr"].count("RuntimeWarning") == 1, (part, result["stderr"])
        client.set(record, original)
        client.set(blob, library)
    # Replayed under another lookup key: the signature covers the key, so it is refused there.
    other = copy_tree(tmp_path, "other")
    (other / "kernels" / "cpu" / "tiny.cpp").write_text((other / "kernels" / "cpu" / "tiny.cpp").read_text() + "\n// other\n")
    planned_key = other_key(other)
    client.set(f"jitops:entries/{planned_key}/{record.decode().rsplit('/', 1)[1]}", original)
    client.sadd(f"jitops:ls:entries/{planned_key}", record.decode().rsplit("/", 1)[1])
    replayed = load_tiny(tmp_path / "replay", other, **remote_env(server.url, keys, writer=False))
    assert replayed["how"] == "built" and "for another entry" in replayed["stderr"], replayed["stderr"]
    # Trusting the server instead takes the unsigned record.
    client.set(record, framed(b"-", b"-"))
    trusting = reader("trusting", JITOPS_REMOTE_TRUST="server", JITOPS_REMOTE_TRUSTED_KEYS="")
    assert trusting["how"] == "remote", trusting["stderr"]


def other_key(sources: Path) -> str:
    """The remote lookup key of tiny built from `sources`, as the loader computes it."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]); from tiny_extension import tiny_extension; "
        "from jitops.store._key import PlannedEntry; from jitops.store._remote_records import lookup_key; "
        "print(lookup_key(PlannedEntry(tiny_extension(sys.argv[1])).components))"
    )
    out = children.run([sys.executable, "-c", code, str(sources), str(Path(__file__).parent)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_read_only_readers_take_entries_and_push_nothing(tmp_path, server, keys):
    sources = copy_tree(tmp_path)
    reader = load_tiny(tmp_path / "pod", sources, JITOPS_REMOTE_MODE="read-only", **remote_env(server.url, keys))
    assert reader["how"] == "built"
    out = cli(tmp_path / "pod", "list", "--remote", "--json", **remote_env(server.url, keys))
    assert json.loads(out.stdout)["entries"] == [], out.stdout
    assert load_tiny(tmp_path / "ci", sources, **remote_env(server.url, keys))["how"] == "built"
    # A pod without a compiler at all.
    env = remote_env(server.url, keys, writer=False, JITOPS_REMOTE_MODE="read-only", CXX=str(tmp_path / "no-compiler"))
    pod = load_tiny(tmp_path / "pod2", sources, **env)
    assert pod["how"] == "remote", pod["stderr"]


def test_another_compiler_of_one_abi_shares_an_entry(tmp_path, server, keys):
    """The pod's compiler (another path, another binary) is not in what it looks up: it hits."""
    sources = copy_tree(tmp_path)
    assert load_tiny(tmp_path / "ci", sources, **remote_env(server.url, keys))["how"] == "built"
    other = slow_compiler(tmp_path, 0)
    pod = load_tiny(tmp_path / "pod", sources, CXX=other, **remote_env(server.url, keys))
    assert pod["how"] == "remote", pod["stderr"]


# Another machine's torch build or Python: the process's ABI as the key reads it, changed.
OTHER_ABI = """
import os, jitops.store._key
_abi = jitops.store._key.process_abi
jitops.store._key.process_abi = lambda: {{**_abi(), {field!r}: {value!r}}}
"""


@pytest.mark.parametrize("field, value", [("torch_git", "another-build"), ("python_soabi", "cpython-399-x86_64-linux-gnu")])
def test_machines_with_another_torch_build_or_python_never_share_an_entry(tmp_path, server, keys, field, value):
    sources = copy_tree(tmp_path)
    assert load_tiny(tmp_path / "ci", sources, **remote_env(server.url, keys))["how"] == "built"
    other = finish(
        start_tiny(
            tmp_path / "other", sources, prelude=OTHER_ABI.format(field=field, value=value), **remote_env(server.url, keys)
        )
    )
    assert other["how"] == "built", other["stderr"]
    assert "warn" not in other["stderr"].lower(), other["stderr"]  # a plain miss: another key
    entries = json.loads(cli(tmp_path / "x", "list", "--remote", "--json", **remote_env(server.url, keys)).stdout)["entries"]
    assert len({e["record"].split("/")[1] for e in entries}) == 2, entries  # two lookup keys, one entry each


def test_torch_builds_python_abis_archs_and_glibc_that_do_not_fit_never_share(tmp_path):
    """What is looked up holds torch, Python ABI and C++ ABI; a record for other archs, or a newer
    glibc, is refused by the reader."""
    from jitops.store import _remote_records
    from jitops.store._key import portable_components

    components = {
        "name": "ns.op",
        "recipe": 1,
        "torch": "2.13.0+cpu",
        "torch_git": "abc",
        "torch_cuda": "13.0",
        "python_soabi": "cpython-311-x86_64-linux-gnu",
        "cxx11_abi": True,
        "sources_sha256": "0" * 64,
        "cxx": "/usr/bin/g++: g++ 12.2",
        "nvcc": "/usr/local/cuda/bin/nvcc: release 13.0",
        "cuda_arch_list": "9.0",
        "environment": {"CC": "gcc"},
        "environment_tools": ["/usr/bin/gcc: gcc 12.2"],
        "ldflags": ["-Wl,--as-needed", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"],
    }
    key = _remote_records.lookup_key(components)
    other_compiler = {**components, "cxx": "/opt/clang/bin/clang++: clang 18", "environment": {}, "environment_tools": []}
    other_compiler["ldflags"] = ["-Wl,--as-needed", "/opt/conda/lib/libstdc++.so.6"]
    assert _remote_records.lookup_key(other_compiler) == key
    for field, value in [
        ("torch", "2.14.1+cpu"),
        ("torch_git", "def"),
        ("python_soabi", "cpython-312-x86_64-linux-gnu"),
        ("cxx11_abi", False),
        ("torch_cuda", "12.8"),
    ]:
        assert _remote_records.lookup_key({**components, field: value}) != key, field
    assert "cuda_arch_list" not in portable_components(components)
    from jitops.store import _prebuilt

    assert _prebuilt.missing_archs("8.0", [(9, 0)]) == ["9.0"]
    assert _prebuilt.missing_archs("8.0;9.0", [(9, 0)]) == []
    assert _remote_records.glibc_needed(b"\0GLIBC_2.17\0GLIBC_2.34\0GLIBC_2.4\0") == "2.34"
    assert _remote_records.numbers("2.99") > _remote_records.numbers(_remote_records.glibc_here())


def resigned_record(server: RedisServer, keys: dict, change) -> None:
    """The server's one entry record replaced by change(writer, body), signed again by the writer:
    a record the reader trusts, whose contents the test chose."""
    import redis

    from jitops.store import _remote, _remote_records

    client = redis.Redis(port=server.port)
    (record,) = [k for k in client.keys("jitops:entries/*") if not k.startswith(b"jitops:ls:")]
    body = json.loads(client.get(record).split(b"\n", 3)[3])
    writer = _remote.Remote({**remote_env(server.url, keys), "JITOPS_REMOTE_TRUST": "keys"})
    client.set(record, _remote_records.seal(change(writer, body), writer.signer))


@pytest.mark.parametrize(
    "change, expected",
    [
        # The reader checks the record's glibc: a newer one than its own is a miss.
        (lambda writer, body: {**body, "glibc": "2.99"}, "newer than this machine's"),
        # A library that passes every check but does not dlopen here (not an ELF file at all): removed
        # and built here, never a failed load.
        (
            lambda writer, body: {**body, "library_sha256": writer.put_blob(b"not a library" * 100, "tiny"), "size": 1300},
            "does not open here",
        ),
    ],
    ids=["newer-glibc", "does-not-open"],
)
def test_a_trusted_record_that_cannot_run_here_is_built_here(tmp_path, server, keys, change, expected):
    sources = copy_tree(tmp_path)
    assert load_tiny(tmp_path / "a", sources, **remote_env(server.url, keys))["how"] == "built"
    resigned_record(server, keys, change)
    result = load_tiny(tmp_path / "reader", sources, **remote_env(server.url, keys, writer=False))
    assert result["how"] == "built" and expected in result["stderr"], result["stderr"]
    assert result["stderr"].count("RuntimeWarning") == 1, result["stderr"]
    verify_sound(tmp_path / "reader")


def test_a_machine_with_cuda_torch_but_no_nvcc_looks_up_the_cuda_build_first(monkeypatch):
    """A pod without a toolkit would build for the CPU alone: it looks up what a writer with nvcc
    built for its GPUs (here TORCH_CUDA_ARCH_LIST) first, then its own CPU-only key."""
    from jitops.ops._framework import extension
    from jitops.store import _remote_records
    from jitops.store._key import CudaPlan, PlannedEntry, key_components

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    planned = PlannedEntry(extension("add2"))  # then as planned on a machine without a toolkit:
    planned.cuda = CudaPlan(False, None, None, "no CUDA toolkit (nvcc) was found: set CUDA_HOME")
    planned.components = key_components(planned.extension, planned.cxx, planned.cuda)
    first, own = _remote_records.candidates(planned)
    assert own is planned.components
    assert first["backends"] == ["cpu", "cuda"] and any(s.endswith(".cu") for s in first["sources"])
    assert _remote_records.lookup_key(first) != _remote_records.lookup_key(own)
    planned.cuda = CudaPlan(False, None, None, "torch 2.13.0+cpu is a CPU-only build")
    assert _remote_records.candidates(planned) == [planned.components]


# A pod without nvcc: no toolkit is found.
NO_TOOLKIT = "import jitops.store._key\njitops.store._key.find_cuda_home = lambda: None\n"
LOAD_ADD2 = """
import json, torch, jitops
import jitops.warm
x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
ok = torch.equal(jitops.add2(x, y), x + y)
loaded = jitops.warm.loaded["jitops.add2"]
print(json.dumps({"how": loaded.how, "with_cuda": loaded.with_cuda, "ok": bool(ok)}))
"""


@needs_cuda
def test_a_pod_without_nvcc_runs_the_cuda_kernels_a_writer_built(tmp_path, server, keys):
    def add2(cache: str, prelude: str = "", **env: str) -> dict:
        out = children.run(
            [sys.executable, "-c", prelude + LOAD_ADD2], env=tiny_env(tmp_path / cache, **env), capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    writer = add2("ci", **remote_env(server.url, keys))
    assert writer == {"how": "built", "with_cuda": True, "ok": True}
    pod = add2("pod", NO_TOOLKIT, **remote_env(server.url, keys, writer=False, JITOPS_REMOTE_MODE="read-only"))
    assert pod == {"how": "remote", "with_cuda": True, "ok": True}


def test_a_record_without_code_for_the_wanted_archs_is_refused():
    """A reader takes an entry whose code covers its GPUs (or TORCH_CUDA_ARCH_LIST, without one)."""
    from types import SimpleNamespace

    from jitops.store import _remote_records

    planned = SimpleNamespace(cuda=SimpleNamespace(arch_list="8.0;9.0"), stable=False)
    body = {"backends": ["cpu", "cuda"], "cuda_arch_list": "8.0", "glibc": None}
    assert "without code for compute capability 9.0" in _remote_records.unfit(body, planned)
    assert "without code" not in _remote_records.unfit({**body, "cuda_arch_list": "8.0;9.0"}, planned)
    # A stable library's record (one for every torch) names the floor it needs: a newer one is refused.
    stable = SimpleNamespace(cuda=planned.cuda, stable=True)
    newer = {**body, "cuda_arch_list": "8.0;9.0", "built_under": {"torch_floor": "2.99", "torch": "2.99.0"}}
    assert _remote_records.unfit(newer, stable).startswith("it needs torch >= 2.99, and this is torch ")


@pytest.mark.slow
def test_a_server_that_is_down_slow_full_or_cut_mid_transfer_costs_only_a_local_build(tmp_path, server, keys):
    sources = copy_tree(tmp_path)
    env = remote_env(server.url, keys, JITOPS_REMOTE_TIMEOUT="1")
    # Down: connection refused.
    server.stop()
    down = load_tiny(tmp_path / "down", sources, **env)
    assert down["how"] == "built" and down["stderr"].count("the remote cache is off") == 1, down["stderr"]
    verify_sound(tmp_path / "down")
    server.start()
    # Slow: the server stops answering (SIGSTOP); each call gives up after JITOPS_REMOTE_TIMEOUT.
    server.stop(signal.SIGSTOP)
    started = time.monotonic()
    slow = load_tiny(tmp_path / "slow", sources, **env)
    server.stop(signal.SIGCONT)
    assert slow["how"] == "built" and "TimeoutError" in slow["stderr"], slow["stderr"]
    assert time.monotonic() - started < 30
    verify_sound(tmp_path / "slow")
    # Full: every write refused (maxmemory with noeviction); the load goes on.
    server.command("CONFIG", "SET", "maxmemory", "1")
    server.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
    full = load_tiny(tmp_path / "full", sources, **env)
    assert full["how"] == "built" and "OOM command not allowed" in full["stderr"], full["stderr"]
    verify_sound(tmp_path / "full")
    server.command("CONFIG", "SET", "maxmemory", "0")
    # Cut mid-upload (the connection drops while a blob is sent: nothing is half-visible), then,
    # with an entry on the server, mid-download.
    for moment in ("upload", "download"):
        proxy = Proxy(server.port, watch=b"blobs/")
        proc = start_tiny(tmp_path / moment, sources, **{**env, "JITOPS_REMOTE_CACHE": proxy.url})
        assert proxy.seen.wait(TIMEOUT_S)
        server.stop()
        proxy.cut()
        cut = finish(proc)
        assert cut["how"] == "built" and cut["stderr"].count("the remote cache is off") == 1, (moment, cut["stderr"])
        verify_sound(tmp_path / moment)
        server.start()
        if moment == "upload":
            assert load_tiny(tmp_path / "a", sources, **env)["how"] == "built"
    # Garbage where a record should be: a miss with one warning.
    server.command("SET", "jitops:entries/x/y", "garbage")
    assert load_tiny(tmp_path / "b", sources, **env)["how"] == "built"
    key = json.loads(cli(tmp_path / "b", "list", "--remote", "--json", **env).stdout)["entries"][0]["record"].split("/")[1]
    server.command("SET", f"jitops:entries/{key}/!bad", "{not json")  # listed first
    server.command("SADD", f"jitops:ls:entries/{key}", "!bad")
    garbage = load_tiny(tmp_path / "garbage", sources, **env)
    assert garbage["how"] == "remote" and "it is malformed (not a jitops record)" in garbage["stderr"], garbage["stderr"]
    verify_sound(tmp_path / "garbage")


RESTART_BETWEEN = """
import sys, os, time
sys.path.insert(0, sys.argv[2])
from tiny_extension import tiny_extension
from jitops import _resolution
first = _resolution.resolve(tiny_extension(sys.argv[1], namespace="first_ns"))
open(os.environ["MARK"], "w").close()
while not os.path.exists(os.environ["MARK"] + ".go"):
    time.sleep(0.05)
second = _resolution.resolve(tiny_extension(sys.argv[1], namespace="second_ns"))
print(first.how, second.how)
"""


def test_a_server_restarted_between_two_loads_of_one_process(tmp_path, server, keys):
    sources = copy_tree(tmp_path)
    mark = tmp_path / "mark"
    env = tiny_env(tmp_path / "cache", MARK=str(mark), **remote_env(server.url, keys))
    proc = children.popen(
        [sys.executable, "-c", RESTART_BETWEEN, str(sources), str(Path(__file__).parent)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    server.restart()
    (tmp_path / "mark.go").touch()
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0 and stdout.split() == ["built", "built"], stdout + stderr
    assert "the remote cache is off" not in stderr, stderr
    out = cli(tmp_path / "x", "list", "--remote", "--json", **remote_env(server.url, keys))
    assert [e["name"] for e in json.loads(out.stdout)["entries"]] == ["second_ns.tiny"], out.stdout
    verify_sound(tmp_path / "cache")


def test_two_writers_of_one_key_at_once_are_harmless(tmp_path, server, keys):
    """Two machines that built one key push it at the same moment: one record stays, whole, and a
    reader loads it."""
    sources = copy_tree(tmp_path)
    for machine in ("a", "b"):
        assert load_tiny(tmp_path / machine, sources)["how"] == "built"  # no remote yet
    env = tiny_env(tmp_path / "a", **remote_env(server.url, keys))
    pushes = [
        children.popen(
            [sys.executable, "-m", "jitops", "remote", "push", "--json"],
            env={**env, "JITOPS_CACHE_DIR": str(tmp_path / m)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for m in ("a", "b")
    ]
    outputs = [p.communicate(timeout=TIMEOUT_S) for p in pushes]
    assert [p.returncode for p in pushes] == [0, 0], outputs
    assert sum(len(json.loads(out)["pushed"]) for out, _ in outputs) == 1, outputs
    assert load_tiny(tmp_path / "reader", sources, **remote_env(server.url, keys, writer=False))["how"] == "remote"


@pytest.mark.slow
def test_eight_machines_missing_one_key_build_it_once(tmp_path, server, keys):
    """8 processes, each with a cache root of its own (8 machines: no local lock is shared), miss
    one key together: one builds and pushes, the others download its entry."""
    sources = copy_tree(tmp_path)
    env = remote_env(server.url, keys, CXX=slow_compiler(tmp_path, 1))
    procs = [start_tiny(tmp_path / f"machine{i}", sources, **env) for i in range(8)]
    results = [finish(p) for p in procs]
    hows = sorted(r["how"] for r in results)
    assert hows == ["built"] + ["remote"] * 7, [r["stderr"] for r in results]
    assert len({r["value"] for r in results}) == 1


@pytest.mark.slow
def test_cli_remote_status_push_list_and_prune(tmp_path, server, keys):
    sources = copy_tree(tmp_path)
    local_only = load_tiny(tmp_path / "cache", sources)  # built with no remote set
    assert local_only["how"] == "built"
    env = remote_env(server.url, keys)
    pushed = cli(tmp_path / "cache", "remote", "push", "--json", **env)
    assert pushed.returncode == 0 and len(json.loads(pushed.stdout)["pushed"]) == 1, pushed.stdout + pushed.stderr
    status = json.loads(cli(tmp_path / "cache", "remote", "status", "--json", **env).stdout)
    assert (status["entries"], status["untrusted_entries"], status["pushes"]) == (1, 0, 1), status
    assert load_tiny(tmp_path / "pod", sources, **env)["how"] == "remote"
    status = json.loads(cli(tmp_path / "cache", "remote", "status", "--json", **env).stdout)
    assert status["hits"] == 1 and status["bytes_down"] > 0, status
    listed = cli(tmp_path / "cache", "list", "--remote", **env)
    assert "jitops_test.tiny" in listed.stdout and "trusted" in listed.stdout, listed.stdout
    assert cli(tmp_path / "cache", "prune", "--remote", "--older-than", "1d", **env).stdout.count("removed 0 entries") == 1
    pruned = cli(tmp_path / "cache", "prune", "--remote", "--max-size", "0", "--json", **env)
    assert len(json.loads(pruned.stdout)["removed"]) == 1, pruned.stdout
    status = json.loads(cli(tmp_path / "cache", "remote", "status", "--json", **env).stdout)
    assert status["entries"] == 0
    assert (
        server.command("EXISTS", f"jitops:blobs/{_sha256(next((tmp_path / 'cache').glob('jitops_test.tiny-*/*.so')))}") == b":0"
    )
    # A read-only consumer pushes nothing; bad settings name themselves.
    refused = cli(tmp_path / "cache", "remote", "push", JITOPS_REMOTE_MODE="read-only", **env)
    assert refused.returncode == 2 and "read-only" in refused.stderr, refused.stderr
    bad = cli(tmp_path / "cache", "remote", "status", JITOPS_REMOTE_CACHE="ftp://x", JITOPS_REMOTE_TRUSTED_KEYS="")
    assert bad.returncode == 2 and "JITOPS_REMOTE_CACHE" in bad.stderr, bad.stderr
    bad = cli(tmp_path / "cache", "remote", "status", **{**env, "JITOPS_REMOTE_TRUSTED_KEYS": "ed25519:nope"})
    assert bad.returncode == 2 and "JITOPS_REMOTE_TRUSTED_KEYS" in bad.stderr, bad.stderr


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_third_party_backend_plugs_in_as_module_class(tmp_path, keys):
    """JITOPS_REMOTE_CACHE=module:Class (tests/remote_hook.py, a FolderBackend of its own)."""
    (tmp_path / "shared").mkdir()
    sources = copy_tree(tmp_path)
    env = remote_env("remote_hook:SharedFolder", keys, HOOK_FOLDER=str(tmp_path / "shared"))
    assert load_tiny(tmp_path / "a", sources, **env)["how"] == "built"
    assert load_tiny(tmp_path / "b", sources, **env)["how"] == "remote"
    assert list((tmp_path / "shared" / "entries").iterdir())


@pytest.mark.slow
def test_distributed_nodes_that_hit_the_remote_never_build_and_one_whose_remote_fails_still_loads(tmp_path, server, keys):
    """jitops.distributed.load_all asks the remote first: two nodes (tests/test_distributed.py's
    job), the entry on the server; node 1's remote is down, so it gets the entry from node 0 through
    the job's own protocol. Nothing is built, and no rank waits."""
    from test_distributed import builds_in, finish_job, rank_results, start_job

    job_env = {"JOB_EXTENSIONS": "tiny", "JOB_TINY_ROOT": str(TINY_SOURCES)}
    assert load_tiny(tmp_path / "ci", TINY_SOURCES, **remote_env(server.url, keys))["how"] == "built"
    dead = RedisServer(tmp_path / "dead")
    dead.stop()
    node_env = [
        {**job_env, **remote_env(server.url, keys, writer=False)},
        {**job_env, **remote_env(dead.url, keys, writer=False, JITOPS_REMOTE_TIMEOUT="1")},
    ]
    out, nodes = start_job(tmp_path, node_env, ops=[])
    logs = finish_job(nodes)
    assert [node.returncode for node in nodes] == [0, 0], logs
    assert all(r["ok"] for r in rank_results(out).values()) and len(rank_results(out)) == 4
    assert builds_in(logs) == {}, logs
    assert "the remote cache is off" in logs[1] and "the remote cache is off" not in logs[0], logs


def test_a_fresh_machine_builds_a_new_extension_with_the_fleets_precompiled_header(tmp_path, server, keys):
    """A writer's PCH travels in compressed chunks under a signed record; a fresh root of the same
    image and checkout path builds an extension the remote has no entry for with it, compiling no
    header. A chunk changed on the server is refused (the unit compiles from text)."""
    from test_edit_loop import edit, load, logging_compiler, pch_tree

    from jitops.store._remote_backends import open_backend

    root = pch_tree(tmp_path)
    compiler, log = logging_compiler(tmp_path)
    writer = load(tmp_path / "a", root, CXX=compiler, JITOPS_PCH="wait", **remote_env(server.url, keys))
    assert "1 with a PCH" in writer["stderr"], writer["stderr"]
    backend = open_backend(server.url, 10.0)
    (record_name,) = [f"pch/{key}/{variant}" for key in backend.list("pch") for variant in backend.list(f"pch/{key}")]
    record = json.loads(backend.read(record_name, 1 << 16).split(b"\n", 3)[3])
    assert record["chunks"] and all(chunk["size"] <= 64 << 20 for chunk in record["chunks"])
    headers_before = sum("c++-header" in line for line in log.read_text().splitlines())
    edit(root / "bindings" / "tiny.cpp", "jitops_tiny_units() {", "jitops_tiny_units() { /* a new edit */")
    reader = load(tmp_path / "b", root, CXX=compiler, JITOPS_PCH="1", **remote_env(server.url, keys, writer=False))
    assert "1 with a PCH" in reader["stderr"] and "in the background" not in reader["stderr"], reader["stderr"]
    assert sum("c++-header" in line for line in log.read_text().splitlines()) == headers_before
    assert len(list((tmp_path / "b" / "pch").glob("*/pch.h.gch"))) == 1
    # A chunk changed on the server: refused with one warning, compiled from text.
    blob = f"blobs/{record['chunks'][0]['sha256']}"
    backend.put(blob, b"x" * 100, False)
    edit(root / "bindings" / "tiny.cpp", "/* a new edit */", "/* another */")
    tampered = load(tmp_path / "d", root, CXX=compiler, JITOPS_PCH="1", **remote_env(server.url, keys, writer=False))
    assert "does not match its size and sha256" in tampered["stderr"] and "with a PCH" not in tampered["stderr"], tampered[
        "stderr"
    ]
    assert not list((tmp_path / "d" / "pch").glob("*/pch.h.gch")) and not list((tmp_path / "d" / "pch").glob(".tmp-*"))


@pytest.mark.parametrize("inflater", ["zlib", "isal.isal_zlib"])
def test_a_pch_chunk_inflates_to_exactly_its_stated_length_with_either_inflater(tmp_path, monkeypatch, inflater):
    """ISA-L's inflate (the remote extra) and zlib's read the same chunks: exactly the stated length
    lands at its offset; a chunk that inflates longer, shorter or past a bad checksum is refused."""
    import zlib

    from jitops.store import _remote_pch

    monkeypatch.setattr(_remote_pch, "inflating", pytest.importorskip(inflater))
    raw = os.urandom(1 << 16) + bytes(1 << 16)
    packed = zlib.compress(raw, 1)
    corrupt = packed[:-1] + bytes([packed[-1] ^ 1])  # the stream's adler32
    out = tmp_path / "pch.h.gch"
    fd = os.open(out, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        for n, (data, length, expected) in enumerate(
            [(packed, len(raw), True), (packed, len(raw) - 1, False), (packed, len(raw) + 1, False), (corrupt, len(raw), False)]
        ):
            chunk = tmp_path / f"chunk-{n}"
            chunk.write_bytes(data)
            assert _remote_pch._inflate(chunk, length, fd, 10) is expected, (n, inflater)
            assert not chunk.exists()
            if n == 0:
                assert out.read_bytes() == bytes(10) + raw
    finally:
        os.close(fd)
