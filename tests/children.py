# SPDX-License-Identifier: MIT
"""New Python processes for the tests, forked from one that has already imported torch.

Most of a test child's start is `import torch` (about 1.5 s of CPU on a 2-core VM), and the suite
starts a few hundred children. So each pytest process keeps one "zygote": this Python, started
once, that imports torch (and nothing of jitops or the tests) and then only forks. `popen` and
`run` below, shaped like subprocess.Popen and subprocess.run, start `python -c CODE ARGS...` or
`python -m MODULE ARGS...` as a fork of it, with the arguments, environment, working directory,
umask and standard streams asked for. The child is a real process of its own: its own pid, real
signals, its own exit status (-N when a signal ended it), its own files and locks.

Anything else (another interpreter, another program) starts with subprocess as before.
"""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

# The zygote: imports torch, then for each request on its control socket forks a keeper, which
# forks the child, reports the child's pid and then its exit status on the request's own socket.
# serve() returns only in a child; the child then runs its code as `python -c` / `-m` would, and
# this interpreter ends as that would (atexit, threads, an uncaught exception or signal).
_ZYGOTE = r"""
import json, os, socket, sys, warnings
import torch
# fork() warns in a process with native threads (3.12+); torch's are idle until an op runs.
warnings.filterwarnings("ignore", message=".*use of fork\(\) may lead to deadlocks", category=DeprecationWarning)
control = socket.socket(fileno=int(sys.argv[1]))
import gc; gc.freeze()

def serve():
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
        except OSError:
            os._exit(0)
        if not message:  # the test process has gone
            os._exit(0)
        if os.fork() == 0:  # the keeper
            control.close()
            reply = socket.socket(fileno=fds[0])
            pid = os.fork()
            if pid == 0:
                reply.close()
                return json.loads(message), fds[1:]
            try:
                for fd in fds[1:]:
                    os.close(fd)
                reply.sendall(b"%d\n" % pid)
                _, status = os.waitpid(pid, 0)
                reply.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            finally:  # the test process may have stopped listening: the keeper ends all the same
                os._exit(0)
        for fd in fds:
            os.close(fd)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # keepers that ended
                pass
        except ChildProcessError:
            pass

request, streams = serve()
control.close()
for target, fd in enumerate(streams):
    os.dup2(fd, target)
for fd in set(streams) - {0, 1, 2}:
    os.close(fd)
os.environ.clear()
os.environ.update(request["env"])
if request["cwd"] is not None:
    os.chdir(request["cwd"])
if request["umask"] >= 0:
    os.umask(request["umask"])
import tempfile, types
tempfile.tempdir = None  # gettempdir() reads this child's TMPDIR, not the zygote's
sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
sys.stdout.reconfigure(line_buffering=sys.stdout.isatty())
# sys.path as a new interpreter would have it: the script's entry, then PYTHONPATH, then the rest.
pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
sys.path[:1] = [os.getcwd() if request["module"] else ""] + pythonpath
main = types.ModuleType("__main__")
sys.modules["__main__"] = main
if request["module"]:
    import runpy
    sys.argv = [request["module"], *request["args"]]
    del request, pythonpath, main, types, tempfile
    runpy._run_module_as_main(sys.argv[0])  # what `python -m` itself calls
else:
    sys.argv = ["-c", *request["args"]]
    code = compile(request["code"], "<string>", "exec")
    del request, pythonpath, types, tempfile
    exec(code, main.__dict__)
"""

_zygote_lock = threading.Lock()
_zygote: tuple[subprocess.Popen, socket.socket] | None = None


def _control() -> socket.socket:
    """This process's zygote's control socket, starting the zygote on first use (or after it died)."""
    global _zygote
    if _zygote is None or _zygote[0].poll() is not None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # No PYTHONPATH: each child puts its own on sys.path.
        env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
        zygote = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE, str(theirs.fileno())], pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL
        )
        theirs.close()
        _zygote = zygote, ours
    return _zygote[1]


def forkable(args) -> bool:
    """Whether args start this Python with -c or -m, which a fork of the zygote can run."""
    return len(args) >= 2 and str(args[0]) == sys.executable and args[1] in ("-c", "-m")


class Child:
    """A child forked from the zygote: the part of subprocess.Popen's interface the tests use."""

    def __init__(self, args, reply: socket.socket, stdin, stdout, stderr):
        self.args = args
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode = None
        self._reply = reply
        self._received = b""
        self.pid = int(self._line(None))
        self._readers: list[threading.Thread] = []
        self._output: dict[str, str | bytes] = {}  # by stream name, once read to its end

    def _line(self, timeout: float | None) -> bytes | None:
        """The keeper's next line (the pid, then the exit status), or None if none came in timeout."""
        while b"\n" not in self._received:
            if not select.select([self._reply], [], [], timeout)[0]:
                return None
            chunk = self._reply.recv(64)
            if not chunk:
                raise RuntimeError(f"the zygote's keeper of {self.args[:2]} ended without reporting")
            self._received += chunk
        line, self._received = self._received.split(b"\n", 1)
        return line

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is None:
            line = self._line(timeout)
            if line is None:
                if timeout == 0:
                    return None
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = int(line)
            self._reply.close()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never signal a pid that may have been reused
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, input=None, timeout: float | None = None):
        """As Popen.communicate: feed input, read stdout and stderr to their ends, wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._readers:
            if self.stdin is not None:
                self._start(self._feed, self.stdin, input)
            for name in ("stdout", "stderr"):
                if getattr(self, name) is not None:
                    self._start(self._drain, name)
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()) or 0.001)
        return self._output.get("stdout"), self._output.get("stderr")

    def _start(self, target, *args) -> None:
        reader = threading.Thread(target=target, args=args, daemon=True)
        reader.start()
        self._readers.append(reader)

    @staticmethod
    def _feed(stream, data) -> None:
        try:
            if data:
                stream.write(data)
        except BrokenPipeError:
            pass
        finally:
            stream.close()

    def _drain(self, name: str) -> None:
        stream = getattr(self, name)
        self._output[name] = stream.read()
        stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


Process = Child | subprocess.Popen  # what popen returns


def popen(args, *, env=None, cwd=None, stdin=None, stdout=None, stderr=None, text=False, umask=-1, **rest) -> Process:
    """subprocess.Popen(args, ...), forked from the zygote where args are `python -c/-m ...`."""
    if not forkable(args) or rest:
        kwargs = dict(env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=text, umask=umask, **rest)
        return subprocess.Popen(args, **kwargs)
    ours, close_after = {}, []

    def child_end(name: str, how, readable: bool) -> int:
        """The descriptor the child gets for a stream; a pipe's other end is kept in `ours`."""
        if how is None:
            return {"stdin": 0, "stdout": 1, "stderr": 2}[name]
        if how == subprocess.PIPE:
            read, write = os.pipe()
            mine, theirs = (write, read) if readable else (read, write)
            ours[name] = open(mine, ("w" if readable else "r") + ("" if text else "b"))
            close_after.append(theirs)
            return theirs
        if how == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            close_after.append(fd)
            return fd
        return how if isinstance(how, int) else how.fileno()

    fds = [child_end("stdin", stdin, True), child_end("stdout", stdout, False)]
    fds.append(fds[1] if stderr == subprocess.STDOUT else child_end("stderr", stderr, False))
    module = args[1] == "-m"
    request = {
        "code": None if module else str(args[2]),
        "module": str(args[2]) if module else None,
        "args": [str(a) for a in args[3:]],
        "env": dict(os.environ if env is None else env),
        "cwd": None if cwd is None else str(cwd),
        "umask": umask,
    }
    mine, theirs = socket.socketpair()
    try:
        with _zygote_lock:
            socket.send_fds(_control(), [json.dumps(request).encode()], [theirs.fileno(), *fds])
    finally:
        theirs.close()
        for fd in close_after:
            os.close(fd)
    return Child(args, mine, ours.get("stdin"), ours.get("stdout"), ours.get("stderr"))


def run(args, *, input=None, capture_output=False, timeout=None, check=False, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(args, ...), forked from the zygote where args are `python -c/-m ...`."""
    if not forkable(args):
        return subprocess.run(args, input=input, capture_output=capture_output, timeout=timeout, check=check, **kwargs)
    if capture_output:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    child = popen(args, **kwargs)
    try:
        stdout, stderr = child.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise
    result = subprocess.CompletedProcess(args, child.returncode, stdout, stderr)
    if check:
        result.check_returncode()
    return result
