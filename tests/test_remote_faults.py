# SPDX-License-Identifier: MIT
"""The remote tier against what a hostile writer, a broken server or a careless setting does
(reliability review 4's R1, R11, R13, R15-R19, R21-R25): a deeply nested record, a FIFO or a
/dev/zero link in a shared folder, a server that drips its reply or streams a gigabyte, a backend
that raises or returns nonsense, records of the wrong shape, keys in the wrong place. Each load
returns the right value (built here where the remote could not give it) with one warning naming
the op and the server, and never waits past JITOPS_REMOTE_TIMEOUT. Then the operator's commands:
key rotation, doctor on a pod, a pod's failure, read-only pods that write nothing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import children
import pytest
from servers import HostileServer
from test_loader import TIMEOUT_S, TINY_SOURCES, tiny_env
from test_remote import (  # noqa: F401 - fixtures
    cli,
    copy_tree,
    keys,
    pytestmark,  # noqa: F401 - skipped as test_remote is, where it is
    remote_env,
    server,
)
from tiny_extension import MEASURED_LOAD as LOAD


def load(cache: Path, sources: Path, **env: str) -> dict:
    out = children.run(
        [sys.executable, "-c", LOAD, str(sources), str(Path(__file__).parent)],
        env=tiny_env(cache, **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr}


def warnings_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "RuntimeWarning" in line]


def entry_record(server) -> str:
    """The one entry record on the server (its key, without `jitops:`)."""
    import redis

    (record,) = [k.decode() for k in redis.Redis(port=server.port).keys("jitops:entries/*")]
    return record.removeprefix("jitops:")


def test_a_deeply_nested_record_is_skipped_and_the_cli_lists_and_removes_it(tmp_path, server, keys):
    """R23: 100,000 nested brackets under the key a reader looks up, beside the writer's record."""
    sources = copy_tree(tmp_path)
    assert load(tmp_path / "ci", sources, **remote_env(server.url, keys))["how"] == "built"
    import redis

    client, key = redis.Redis(port=server.port), entry_record(server).split("/")[1]
    client.set(f"jitops:entries/{key}/0deep", b"[" * 100_000 + b"]" * 100_000)  # the old framing: plain JSON
    client.set(f"jitops:entries/{key}/1deep", b"jitops-record 2\n-\n-\n" + b"[" * 30_000 + b"]" * 30_000)
    client.sadd(f"jitops:ls:entries/{key}", "0deep", "1deep")
    for trust in ("keys", "server"):
        pod = load(tmp_path / f"pod-{trust}", sources, JITOPS_REMOTE_TRUST=trust, **remote_env(server.url, keys, writer=False))
        assert (pod["how"], pod["value"]) == ("remote", 42), pod["stderr"]
        assert any("jitops_test.tiny" in w and "0deep" in w and "malformed" in w for w in warnings_in(pod["stderr"])), pod
    env = remote_env(server.url, keys)
    listed = cli(tmp_path / "ci", "list", "--remote", "--json", **env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    problems = {e["record"].rsplit("/", 1)[1]: e["problem"] for e in json.loads(listed.stdout)["entries"]}
    assert problems["0deep"] and problems["1deep"] and list(problems.values()).count(None) == 1, problems
    assert cli(tmp_path / "ci", "remote", "status", **env).returncode == 0
    dry = cli(tmp_path / "ci", "prune", "--remote", "--untrusted", **env)
    assert dry.returncode == 0 and "add --yes" in dry.stdout and dry.stdout.count("MALFORMED") == 2, dry.stdout
    gone = cli(tmp_path / "ci", "prune", "--remote", "--untrusted", "--yes", "--json", **env)
    assert sorted(r.rsplit("/", 1)[1] for r in json.loads(gone.stdout)["removed"]) == ["0deep", "1deep"], gone.stdout
    assert load(tmp_path / "pod-after", sources, **remote_env(server.url, keys, writer=False))["stderr"] == ""


def test_a_fifo_or_a_link_to_dev_zero_in_a_shared_folder_never_stalls_a_reader(tmp_path, keys):
    """R24: planted beside the writer's record in a file:// folder; the record stays usable."""
    shared, sources = tmp_path / "shared", copy_tree(tmp_path)
    shared.mkdir()
    url = f"file://{shared}"
    assert load(tmp_path / "ci", sources, **remote_env(url, keys))["how"] == "built"
    (folder,) = (shared / "entries").iterdir()
    os.mkfifo(folder / "0fifo")
    (folder / "0zero").symlink_to("/dev/zero")
    (record,) = [p for p in folder.iterdir() if p.name[0] != "0"]
    blob = shared / "blobs" / json.loads(record.read_bytes().split(b"\n", 3)[3])["library_sha256"]
    pod = load(tmp_path / "pod", sources, JITOPS_REMOTE_TIMEOUT="2", **remote_env(url, keys, writer=False))
    assert (pod["how"], pod["value"]) == ("remote", 42) and pod["seconds"] < 10, pod
    said = warnings_in(pod["stderr"])
    assert len(said) == 2 and all("not a regular file" in w or "link" in w for w in said), said
    # The blob itself a FIFO: skipped, built here.
    blob.unlink()
    os.mkfifo(blob)
    pod = load(tmp_path / "pod2", sources, JITOPS_REMOTE_TIMEOUT="2", **remote_env(url, keys, writer=False))
    assert (pod["how"], pod["value"]) == ("built", 42) and pod["seconds"] < 10, pod
    assert any("its blob cannot be read" in w for w in warnings_in(pod["stderr"])), pod["stderr"]


def test_a_shared_folder_listing_is_bounded_as_a_reply_is(tmp_path, monkeypatch):
    """A folder crammed with names fails the call (the remote off, one warning), as a Redis reply
    longer than LIST_MAX does, instead of filling the reader's memory."""
    from jitops.store import _remote_backends

    (tmp_path / "entries").mkdir()
    for i in range(200):
        (tmp_path / "entries" / f"{i:060d}").touch()
    backend = _remote_backends.FolderBackend(f"file://{tmp_path}", 2)
    assert len(backend.list("entries")) == 200
    monkeypatch.setattr(_remote_backends, "LIST_MAX", 100 * 61)
    with pytest.raises(ValueError, match="more than"):
        backend.list("entries")


@pytest.mark.parametrize("mode", ["drip", "huge", "int", "silent"])
def test_a_server_that_drips_floods_or_answers_nonsense_costs_one_timeout(tmp_path, mode):
    """R21 (one element a second), R22 (a 1 GB reply), R19 (an integer for every reply), and a
    server that never answers: one warning, a local build, the time inside remote calls within the
    timeout plus a second, and the reader's memory within 64 MiB of what it was."""
    hostile = HostileServer(mode)
    sources = copy_tree(tmp_path)
    result = load(
        tmp_path / "cache",
        sources,
        JITOPS_REMOTE_CACHE=hostile.url,
        JITOPS_REMOTE_TIMEOUT="2",
        JITOPS_REMOTE_TRUST="server",
        JITOPS_REMOTE_MODE="read-only",
    )
    hostile.close()
    assert (result["how"], result["value"]) == ("built", 42), result
    assert result["remote_seconds"] <= 3, result
    assert result["grew"] < 64 << 20, result
    said = warnings_in(result["stderr"])
    assert len(said) == 1 and "jitops_test.tiny" in said[0] and hostile.url in said[0], said


BACKENDS = """
import time
from jitops.remote import Backend, FolderBackend

class Raises(Backend):
    def __init__(self, url, timeout):
        raise RuntimeError("credentials missing")

class ListNone(FolderBackend):
    def __init__(self, url, timeout):
        super().__init__("file://" + __import__("os").environ["HOOK_FOLDER"], timeout)
    def list(self, folder):
        return None

class ListInt(ListNone):
    def list(self, folder):
        return 5

class ManyInt(ListNone):
    def get_many(self, names):  # the old signature: no max_bytes
        return 7

class GetStr(ListNone):
    def get(self, name):
        return "text"

class Hangs(ListNone):
    def get(self, name, max_bytes=None):
        time.sleep(60)
"""


@pytest.mark.parametrize("backend", ["Raises", "ListNone", "ListInt", "ManyInt", "GetStr", "Hangs"])
def test_a_backend_that_raises_returns_nonsense_or_hangs_costs_only_the_remote(tmp_path, keys, backend):
    """R17, R18: a third party's backend; a hang is cut at the deadline (a worker thread)."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "bad_backends.py").write_text(BACKENDS)
    (tmp_path / "shared").mkdir()
    sources = copy_tree(tmp_path)
    env = {"HOOK_FOLDER": str(tmp_path / "shared"), "PYTHONPATH": str(tmp_path / "hooks")}
    assert load(tmp_path / "ci", sources, **remote_env(f"file://{tmp_path / 'shared'}", keys))["how"] == "built"
    pod = load(
        tmp_path / "pod", sources, JITOPS_REMOTE_TIMEOUT="2", **env, **remote_env(f"bad_backends:{backend}", keys, writer=False)
    )
    assert (pod["how"], pod["value"]) == ("built", 42), pod
    assert pod["remote_seconds"] <= 3, pod
    said = warnings_in(pod["stderr"])
    assert len(said) == 1, said
    assert ("not loaded" in said[0] or "the remote cache is off" in said[0]) and "bad_backends" in said[0], said


def fifo_header(body: dict, folder: Path) -> dict:
    """A header named by its absolute path that is a FIFO here: hashing it must not block."""
    os.mkfifo(folder / "fifo.h")
    return {**body, "headers": {str(folder / "fifo.h"): "0" * 64}}


@pytest.mark.parametrize(
    "change",
    [
        lambda body, _: {k: v for k, v in body.items() if k != "library_sha256"},
        lambda body, _: {**body, "glibc": 5},
        lambda body, _: {**body, "library_sha256": 12345},
        lambda body, _: {**body, "library_sha256": "../../../../etc/passwd"},
        lambda body, _: {**body, "size": 10**18},
        lambda body, _: {**body, "size": -1},
        lambda body, _: {**body, "headers": ["a.h"]},
        lambda body, _: {**body, "backends": "cuda"},
        fifo_header,
    ],
    ids=[
        "no-sha256",
        "int-glibc",
        "int-sha256",
        "path-sha256",
        "huge-size",
        "negative-size",
        "list-headers",
        "str-backends",
        "fifo-header",
    ],
)
def test_a_record_of_the_wrong_shape_is_skipped_with_one_warning(tmp_path, server, keys, change):
    """R25: with JITOPS_REMOTE_TRUST=server (unsigned records taken), each field's type is checked."""
    from jitops.store._remote_records import seal

    sources = copy_tree(tmp_path)
    assert load(tmp_path / "ci", sources, **remote_env(server.url, keys))["how"] == "built"
    import redis

    client = redis.Redis(port=server.port)
    record = "jitops:" + entry_record(server)
    client.set(record, seal(change(json.loads(client.get(record).split(b"\n", 3)[3]), tmp_path), None))
    pod = load(tmp_path / "pod", sources, JITOPS_REMOTE_TRUST="server", **remote_env(server.url, keys, writer=False))
    assert (pod["how"], pod["value"]) == ("built", 42), pod
    said = warnings_in(pod["stderr"])
    assert len(said) == 1 and any(w in said[0] for w in ("malformed", "JITOPS_REMOTE_MAX_BLOB", "other headers")), said


LOAD_PUBLIC = """
import sys
sys.path.insert(0, sys.argv[2])
from tiny_extension import tiny_extension
tiny_extension(sys.argv[1]).load()
"""


def load_fails(tmp_path: Path, **env: str) -> str:
    """The error of Extension.load() (the public entry point: jitops' own frames left out)."""
    out = children.run(
        [sys.executable, "-c", LOAD_PUBLIC, str(TINY_SOURCES), str(Path(__file__).parent)],
        env=tiny_env(tmp_path / "cache-fails", **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert out.returncode != 0, out.stdout
    assert out.stderr.strip().splitlines()[-1].startswith("jitops.CacheError: jitops: JITOPS_REMOTE_"), out.stderr
    return out.stderr


def test_bad_settings_name_themselves_without_echoing_a_secret(tmp_path, keys):
    """R15 (the private key given as trusted), R16 (a trusted-keys file others can write, a signing
    key others can read), R13 (a bad port), R1 (keygen into a missing folder), R11 (a malformed
    --signed-by)."""
    private = Path(keys["writer"][0])
    secret = private.read_text().splitlines()[1][16:]  # past PKCS#8's prefix, common to every key: the seed
    said = load_fails(tmp_path, JITOPS_REMOTE_CACHE="redis://127.0.0.1:1/0", JITOPS_REMOTE_TRUSTED_KEYS=str(private))
    assert "holds a private key" in said and secret[:8] not in said, said
    writable = tmp_path / "trusted.pub"
    writable.write_text(keys["writer"][1])
    writable.chmod(0o666)
    said = load_fails(tmp_path, JITOPS_REMOTE_CACHE="redis://127.0.0.1:1/0", JITOPS_REMOTE_TRUSTED_KEYS=str(writable))
    assert "writable by others (mode 666)" in said and "chmod go-w" in said, said
    writable.chmod(0o644)
    for port in ("notaport", "99999"):
        said = load_fails(tmp_path, JITOPS_REMOTE_CACHE=f"redis://127.0.0.1:{port}/0")
        assert "JITOPS_REMOTE_CACHE" in said and "port" in said, said
    loose = tmp_path / "loose.key"
    loose.write_bytes(private.read_bytes())
    loose.chmod(0o644)
    pushed = load(
        tmp_path / "c2",
        copy_tree(tmp_path, "src2"),
        JITOPS_REMOTE_CACHE=f"file://{tmp_path}",
        JITOPS_REMOTE_SIGNING_KEY=str(loose),
    )
    assert "can be read by others (mode 644)" in pushed["stderr"], pushed["stderr"]
    keygen = cli(tmp_path / "c", "remote", "keygen", str(tmp_path / "missing" / "k.key"))
    assert keygen.returncode == 2 and "Traceback" not in keygen.stderr and "No such file" in keygen.stderr, keygen.stderr
    made = cli(tmp_path / "c", "remote", "keygen", str(tmp_path / "new.key"))
    assert made.returncode == 0 and (tmp_path / "new.key.pub").read_text().startswith("ed25519:"), made
    for bad in ("nonsense", "ed25519:abc"):
        clear = cli(tmp_path / "c", "clear", "--signed-by", bad)
        assert clear.returncode == 2 and "--signed-by" in clear.stderr, clear.stderr


def test_a_server_with_a_password_and_another_database(tmp_path, keys):
    """jitops' own client speaks AUTH and SELECT as the URL says; a wrong password is one warning."""
    from servers import RedisServer

    server = RedisServer(tmp_path / "redis", None, "--requirepass", "s3cret")
    try:
        url = f"redis://:s3cret@127.0.0.1:{server.port}/3"
        sources = copy_tree(tmp_path)
        assert load(tmp_path / "ci", sources, **remote_env(url, keys))["how"] == "built"
        pod = load(tmp_path / "pod", sources, **remote_env(url, keys, writer=False))
        assert (pod["how"], pod["stderr"]) == ("remote", ""), pod
        wrong = load(tmp_path / "pod2", sources, **remote_env(url.replace("s3cret", "wrong"), keys, writer=False))
        said = warnings_in(wrong["stderr"])
        assert wrong["how"] == "built" and len(said) == 1 and "s3cret" not in wrong["stderr"], wrong
    finally:
        server.stop()


def test_read_only_pods_write_nothing_to_the_server(tmp_path, server, keys):
    """A read-only hit and a read-only miss leave the server's keys as they were (counters too)."""
    import redis

    client = redis.Redis(port=server.port)
    sources = copy_tree(tmp_path)
    assert load(tmp_path / "ci", sources, **remote_env(server.url, keys))["how"] == "built"
    before = {k: client.get(k) for k in client.keys("*") if client.type(k) == b"string"}
    assert load(tmp_path / "pod", sources, **remote_env(server.url, keys, writer=False))["how"] == "remote"
    other = copy_tree(tmp_path, "other")
    (other / "kernels" / "cpu" / "tiny.cpp").write_text((other / "kernels" / "cpu" / "tiny.cpp").read_text() + "\n// miss\n")
    assert load(tmp_path / "pod2", other, **remote_env(server.url, keys, writer=False))["how"] == "built"
    assert {k: client.get(k) for k in client.keys("*") if client.type(k) == b"string"} == before


def test_key_rotation_resigns_what_this_machine_built_and_prunes_what_readers_refuse(tmp_path, server, keys):
    """The operator's path (users-review-4, friction 1): a new key; `remote push` re-signs the
    entries built here; a reader trusting only the new key hits; `prune --remote --untrusted` lists
    a stranger's record and removes it only with --yes."""
    sources = copy_tree(tmp_path)
    old_key, new_key = keys["writer"], keys["stranger"]
    assert load(tmp_path / "ci", sources, **remote_env(server.url, keys))["how"] == "built"
    rotated = {**remote_env(server.url, keys), "JITOPS_REMOTE_SIGNING_KEY": new_key[0], "JITOPS_REMOTE_TRUSTED_KEYS": new_key[1]}
    pushed = cli(tmp_path / "ci", "remote", "push", "--json", **rotated)
    assert pushed.returncode == 0 and len(json.loads(pushed.stdout)["re_signed"]) == 1, pushed.stdout + pushed.stderr
    again = cli(tmp_path / "ci", "remote", "push", "--json", **rotated)
    assert json.loads(again.stdout)["re_signed"] == [], again.stdout  # trusted now: left as it is
    reader = {**rotated, "JITOPS_REMOTE_MODE": "read-only"}
    reader.pop("JITOPS_REMOTE_SIGNING_KEY")
    pod = load(tmp_path / "pod", sources, JITOPS_DISABLE_BUILD="1", **reader)
    assert pod["how"] == "remote" and pod["stderr"] == "", pod
    local = cli(tmp_path / "pod", "list", **reader)
    assert f"signed by {new_key[1]}" in local.stdout, local.stdout
    # A record signed by the old key, of another build: what readers of the new key refuse.
    other = copy_tree(tmp_path, "other")
    (other / "kernels" / "cpu" / "tiny.cpp").write_text(
        (other / "kernels" / "cpu" / "tiny.cpp").read_text() + '\nextern "C" int jitops_tiny_other() { return 7; }\n'
    )
    assert load(tmp_path / "old-writer", other, **remote_env(server.url, keys))["how"] == "built"
    listed = cli(tmp_path / "ci", "list", "--remote", **rotated)
    assert listed.stdout.count("REFUSED here") == 1 and old_key[1][:20] in listed.stdout, listed.stdout
    dry = cli(tmp_path / "ci", "prune", "--remote", "--untrusted", "--json", **rotated)
    assert len(json.loads(dry.stdout)["removed"]) == 1 and json.loads(dry.stdout)["dry_run"], dry.stdout
    gone = cli(tmp_path / "ci", "prune", "--remote", "--signed-by", old_key[1], "--yes", "--json", **rotated)
    assert len(json.loads(gone.stdout)["removed"]) == 1 and json.loads(gone.stdout)["bytes_freed"] > 0, gone.stdout
    status = json.loads(cli(tmp_path / "ci", "remote", "status", "--json", **rotated).stdout)
    assert (status["entries"], status["untrusted_entries"], status["blob_bytes"] > 0) == (1, 0, True), status


DISABLE_BUILD_POD = """
import sys, warnings
sys.path.insert(0, sys.argv[2])
from tiny_extension import tiny_extension
from jitops._errors import BuildError
from jitops.ops._framework import load_all
try:
    load_all(extensions=[tiny_extension(sys.argv[1])])  # its warnings, issued again at this line
except RuntimeError as err:
    print("FAILED", err)
"""


@pytest.mark.parametrize("case", ["unsigned", "down"])
def test_a_pods_failure_says_what_the_remote_said(tmp_path, server, keys, case):
    """JITOPS_DISABLE_BUILD=1: the error names the remote and its answer; the warning points at the
    program's own line, not the thread pool's, and never says "building locally"."""
    sources = copy_tree(tmp_path)
    if case == "unsigned":
        assert load(tmp_path / "ci", sources, JITOPS_REMOTE_CACHE=server.url)["how"] == "built"
        url = server.url
    else:
        url = "redis://127.0.0.1:1/0"
    out = children.run(
        [sys.executable, "-c", DISABLE_BUILD_POD, str(sources), str(Path(__file__).parent)],
        env=tiny_env(tmp_path / "pod", JITOPS_DISABLE_BUILD="1", **remote_env(url, keys, writer=False)),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert "FAILED" in out.stdout and f"the remote cache {url}" in out.stdout, out.stdout + out.stderr
    expected = "it is not signed" if case == "unsigned" else "is off for this process"
    assert expected in out.stdout, out.stdout
    said = warnings_in(out.stderr)
    assert len(said) == 1 and said[0].startswith("<string>:") and "building locally" not in said[0], out.stderr


def test_doctor_on_a_pod_without_a_compiler_counts_what_the_remote_holds(tmp_path, server, keys):
    """users-review-4, friction 2: doctor and info show the remote; an op it holds is available."""
    env = remote_env(server.url, keys)
    build = children.run(
        [sys.executable, "-c", "import torch, jitops; jitops.add2(torch.ones(2), torch.ones(2))"],
        env=tiny_env(tmp_path / "ci", **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert build.returncode == 0, build.stderr
    pod = {**remote_env(server.url, keys, writer=False), "CXX": "/bin/false"}
    doctor = cli(tmp_path / "pod", "doctor", "--json", **pod)
    rows = {r["name"]: r for r in json.loads(doctor.stdout)["extensions"]}
    assert rows["add2"]["how"] == "remote" and rows["add2"]["available"], rows["add2"]
    assert rows["lltm"]["how"] == "unavailable" and "has no entry for it" in rows["lltm"]["detail"], rows["lltm"]
    assert json.loads(doctor.stdout)["remote"]["server"] == server.url
    info = cli(tmp_path / "pod", "info", **pod)
    assert f"remote cache    {server.url} (read-only" in info.stdout, info.stdout
    text = cli(tmp_path / "pod", "doctor", **pod).stdout
    assert "remote cache" in text and "add2" in text, text


def test_a_writer_without_a_signing_key_is_told_once(tmp_path, server):
    sources = copy_tree(tmp_path)
    result = load(tmp_path / "ci", sources, JITOPS_REMOTE_CACHE=server.url)
    said = warnings_in(result["stderr"])
    assert len(said) == 1 and "pushing unsigned records" in said[0] and "JITOPS_REMOTE_SIGNING_KEY" in said[0], said
    # With the server trusted as a whole (its readers take unsigned records), nothing to say.
    other = copy_tree(tmp_path, "other")
    (other / "kernels" / "cpu" / "tiny.cpp").write_text((other / "kernels" / "cpu" / "tiny.cpp").read_text() + "\n// b\n")
    assert (
        load(tmp_path / "ci2", other, JITOPS_REMOTE_CACHE=server.url, JITOPS_REMOTE_TRUST="server")["stderr"].count("Warning")
        == 0
    )


@pytest.mark.slow
def test_a_fault_soak_never_hangs_crashes_or_loads_a_wrong_library(tmp_path):
    """examples/remote_soak.py: 4 pods x 10 loads, each a new process with an empty root, while the
    server is trickled, flooded with a 1 GB reply and restarted, beside a nested record, a stranger's
    record, a FIFO and a /dev/zero link. Every load right; the time inside remote calls within the
    timeout plus a second; memory within 64 MiB."""
    soak = Path(__file__).parent.parent / "examples" / "remote_soak.py"
    out = children.run(
        [sys.executable, str(soak), "--json", str(tmp_path / "soak.json")], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((tmp_path / "soak.json").read_text())
    assert summary["loads"] == 40 and (summary["wrong_values"], summary["hangs"], summary["crashes"]) == (0, 0, 0), out.stdout
    assert summary["remote_seconds_max"] <= summary["timeout_s"] + 1, out.stdout
    assert summary["memory_growth_max_mib"] <= 64, out.stdout
    assert summary["remote_hits"] > 0 and summary["remote_off"] > 0 and summary["records_skipped"] > 0, out.stdout
    assert {"trickle", "flood", "restart", "folder"} <= set(summary["by_phase"]), out.stdout
