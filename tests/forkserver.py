"""A fork server for the tests' `python -m tidewise` processes (tests/conftest.py `run_cli`).

A `python -m tidewise` spends ~2.5 s of CPU importing pandas, scikit-learn and scipy before it reads
its first argument, and the suite starts a few hundred of them: most of the suite's time went into
those imports. This process imports those third-party libraries once, then forks one child per
command. Each child is a real process running `python -m tidewise ARGS` (`runpy`, as `-m` does) with
its own argv, environment, working folder, stdin from /dev/null and stdout/stderr into pipes: exit
code, output, tracebacks and at-exit handlers are a fresh interpreter's. Tidewise's own modules are
not imported here, so each command still imports its own code as a user's process does (a missing
import of ours fails here as it would there). What the held libraries read from the environment when
they are imported (OpenMP's thread count, say) is the server's: a test that sets such a variable for
a command runs it with TIDEWISE_TEST_SPAWN=1.

Protocol, one JSON object per line: request {"argv" (the arguments after `tidewise`), "env", "cwd",
"fsize" (RLIMIT_FSIZE, optional)} on stdin; reply {"pid"} when the child starts, then {"code", "stdout",
"stderr"} when it ends, on stdout. Run by conftest, never by hand; `TIDEWISE_TEST_SPAWN=1` makes
`run_cli` start a fresh interpreter for every command instead.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import traceback

# what a command imports before it reads an argument; ours (tidewise, predictor, ...) are not here
WARM = ("numpy", "pandas", "pyarrow", "pyarrow.csv", "pyarrow.parquet", "scipy.stats", "sklearn.base",
        "sklearn.ensemble", "joblib", "yaml", "psutil")


def _child(req: dict, fd_out: int, fd_err: int) -> None:
    """In the forked child: become `python -m tidewise ARGV` and exit as it would."""
    import runpy

    fd_in = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((fd_in, 0), (fd_out, 1), (fd_err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    if req.get("fsize") is not None:  # a full disk as the writer sees it
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (req["fsize"], req["fsize"]))
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = ["-m", *req["argv"]]
    sys.path[0] = req["cwd"]  # `python -m` puts the working folder first
    code: int | str | None = 0
    try:
        runpy.run_module("tidewise", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # as the interpreter: the traceback on stderr, exit 1
        traceback.print_exc()
        code = 1
    if isinstance(code, str) or (code is not None and not isinstance(code, int)):  # as the interpreter does
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()  # what the command registered
    sys.stdout.flush()
    sys.stderr.flush()
    # no interpreter teardown of the server's ~2,000 modules (~0.5 s, nothing a command sees)
    os._exit(code or 0)


def main() -> None:
    for name in WARM:
        __import__(name)
    if threading.active_count() != 1:  # forking a process with threads is not safe: say so, serve nothing
        print(json.dumps({"error": f"{threading.active_count()} threads after the imports"}), flush=True)
        return
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        pipes = [os.pipe(), os.pipe()]  # the child's stdout and stderr, read here to their end
        pid = os.fork()
        if pid == 0:
            for r, _ in pipes:
                os.close(r)
            _child(req, pipes[0][1], pipes[1][1])
        for _, w in pipes:
            os.close(w)
        print(json.dumps({"pid": pid}), flush=True)
        out, err = _read_all(pipes[0][0], pipes[1][0])
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status), "stdout": out, "stderr": err}), flush=True)


def _read_all(*fds: int) -> list[str]:
    """Everything written to `fds` until each is closed (by the child and whatever it started)."""
    import selectors

    got: dict[int, list[bytes]] = {fd: [] for fd in fds}
    with selectors.DefaultSelector() as sel:
        for fd in fds:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select():
                chunk = os.read(key.fd, 65536)
                if chunk:
                    got[key.fd].append(chunk)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    return [b"".join(got[fd]).decode("utf-8", errors="replace") for fd in fds]


if __name__ == "__main__":
    main()
