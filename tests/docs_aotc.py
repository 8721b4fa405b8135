"""`aotc` for the docs' shell examples (tests/test_docs.py): each command runs in a fork of
one process that has already imported torch and aotc, which saves the second or two of
imports every command would spend (a page runs up to twenty of them).

`python tests/docs_aotc.py serve SOCKET` imports and serves; `docs_aotc.py` as `aotc` (the
page runner puts a link to it first on PATH) sends its argv, folder, environment and its
standard streams themselves (their file descriptors) to the server, and exits with the
command's status. Each command is a fresh fork of the same imported process, so nothing one
command does reaches the next. Without the server (AOTC_DOCS_SERVER unset, or no answer),
the real `aotc` runs instead.
"""

from __future__ import annotations

import json
import os
import socket
import sys

PRELOAD = ["torch", "torch.export", "torch._dynamo", "aotc.cli.main", "aotc.api", "aotc.tools.verify"]


def serve(path: str) -> None:
    import importlib
    import traceback

    for name in PRELOAD:
        importlib.import_module(name)
    from aotc.cli.main import main

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    while True:
        conn, _ = server.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(message)
        if os.fork() == 0:  # the command's own process
            server.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = ["aotc", *request["argv"]]
            status = 0
            try:
                main()
            except SystemExit as e:
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                traceback.print_exc()
                status = 1
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(str(status).encode())
            os._exit(status)
        for fd in fds:
            os.close(fd)
        conn.close()
        while True:  # reap the commands that have ended
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def client(argv: list[str]) -> int:
    path = os.environ.get("AOTC_DOCS_SERVER")
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path or "")
    except OSError:
        real = os.path.join(os.path.dirname(sys.executable), "aotc")
        os.execv(real, [real, *argv])
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    answer = b""
    while chunk := conn.recv(64):
        answer += chunk
    return int(answer or b"1")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[1:]))
