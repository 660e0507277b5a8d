"""Shared helpers of the gantry Python tests: a temp-dir test case with a hang watchdog, a
gantry-agent to serve a folder, a proxy that holds chosen requests, and a way to run Python
scripts in child processes with the same module path."""

import faulthandler
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(TESTS_DIR)
SOURCE_DIR = os.path.dirname(PYTHON_DIR)

# A test that hangs dumps every thread's stack and exits instead of waiting for ctest's timeout.
WATCHDOG_SECONDS = 120


class TempDirTestCase(unittest.TestCase):
    """Gives each test a fresh temp directory (self.tmp) and a hang watchdog."""

    def setUp(self):
        super().setUp()
        self._tmp = tempfile.TemporaryDirectory(prefix="gantry-py-")
        self.tmp = self._tmp.name
        faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)

    def tearDown(self):
        faulthandler.cancel_dump_traceback_later()
        self._tmp.cleanup()
        super().tearDown()

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def start_agent(self, root):
        """A gantry-agent serving `root` over HTTP on loopback: (its process, its URL). Skips
        the test where the agent is not built."""
        from gantry import _native
        agent = os.path.join(os.path.dirname(os.path.dirname(_native.load().__file__)),
                             "apps", "gantry-agent", "gantry-agent")
        if not os.access(agent, os.X_OK):
            self.skipTest(f"{agent} is not built")
        port_file = self.path("agent-port-" + os.path.basename(root))
        proc = subprocess.Popen([agent, "--root", root, "--listen", "127.0.0.1:0",
                                 "--port-file", port_file, "--allow-unauthenticated"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (proc.terminate(), proc.wait(timeout=30)))
        for _ in range(500):
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                break
            time.sleep(0.01)
        with open(port_file) as f:
            return proc, f"http://127.0.0.1:{f.read().strip()}"


class HeldRequests:
    """A TCP proxy on loopback to `port` that holds every request whose bytes contain `marker`
    until release(): `entered` is set once such a request has arrived, so a test knows the
    client is waiting inside its call. A request split across reads so that the marker is
    never whole in one read is not held (loopback delivers a short request in one piece)."""

    def __init__(self, port, marker):
        self.target = port
        self.marker = marker
        self.entered = threading.Event()
        self.released = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def release(self):
        self.released.set()

    def close(self):
        self.release()
        self.listener.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source, sink, requests):
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                if requests and self.marker in data:
                    self.entered.set()
                    self.released.wait()
                sink.sendall(data)
        except OSError:
            return


def in_forked_child(fn, timeout=30):
    """Runs fn() in a child made by os.fork() (this process's threads are not in it) and
    returns what it returned, an int from 0 to 255, as the child's exit code; None where the
    child ran past `timeout` seconds (it is killed) or died of a signal. An exception in fn is
    printed and returns 255, as does a result that is not an int from 0 to 255: the child
    never leaves this function (it would run the parent's tests on)."""
    pid = os.fork()
    if pid == 0:
        code = 255
        try:
            result = int(fn())
            code = result if 0 <= result <= 255 else 255
        except BaseException:  # noqa: B036 -- reported by the exit code, whatever it was
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.01)


def child_env(**extra):
    """The environment for a child Python: this process's module path first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_python(args, timeout=60, **popen_kwargs):
    """Runs `python3 args...` to completion; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable] + list(args), env=child_env(), capture_output=True,
                          text=True, timeout=timeout, check=False, **popen_kwargs)


def split_rows(global_rows, world_size, rank):
    """(row_offset, rows) of `rank` when `global_rows` rows are split as evenly as possible
    (the first global_rows % world_size ranks get one more)."""
    base, extra = divmod(global_rows, world_size)
    offset = rank * base + min(rank, extra)
    return offset, base + (1 if rank < extra else 0)
