"""Every example in README.md and docs/ runs (issue 49), and the site builds without a warning.

Each page's `bash` and `python` blocks run in order, in a temporary folder holding a copy of
sample_models/, as a reader would type them: shell blocks under `bash -euo pipefail`, with
aotc's virtualenv and the C++ runtime's build first on PATH; Python blocks in one namespace
per page, so a later block sees an earlier one's names. The shell's `aotc` commands run in
forks of one process that has imported torch and aotc (tests/docs_aotc.py), which saves
each command its seconds of imports. A block in any other language
(`text`, `cpp`, `json`) is not run, and every fence must name its language.

Markers are HTML comments, which the site does not show, on the line before a fence:
- `<!-- docs: skip REASON -->` leaves the block out, and the suite lists it as skipped with
  its reason (a CUDA GPU, a second machine);
- `<!-- docs: exit N -->` expects the shell block to exit with status N (a refusal shown);
- `<!-- docs: file NAME -->` writes the block to the file NAME, for a later block to run
  (a script `torchrun` starts);
- a comment `<!-- docs: setup` ... `-->` spanning lines holds shell lines that run there
  unseen (a signing key, a Hugging Face folder to export from).

`python tests/test_docs.py PAGE FOLDER` runs one page's blocks, as the tests do.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = {"bash": "shell", "python": "python"}
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARK = re.compile(r"^<!-- docs: (skip|exit|file) ?(.*?) ?-->$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    kind: str  # "shell", "python", or "" for a block not run (text, cpp, ...)
    language: str
    code: str
    skip: str | None = None  # the reason it does not run here
    exit_status: int = 0
    file: str | None = None  # written to this file rather than run


def pages() -> list[Path]:
    # docs/reference/ is generated from the code at build time and holds no examples
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The page's fenced blocks and setup comments, in order."""
    lines = path.read_text().splitlines()
    page = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    out: list[Block] = []
    mark: dict = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == "<!-- docs: setup":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "-->")
            out.append(Block(page, i + 1, "shell", "setup", "\n".join(lines[i + 1:end])))
            i = end + 1
            continue
        m = MARK.match(line.strip())
        if m:
            key, value = m.groups()
            mark = {"exit_status": int(value)} if key == "exit" else {key: value}
            i += 1
            continue
        fence = FENCE.match(line)
        if fence:
            indent, language = fence.groups()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            code = "\n".join(text[len(indent):] for text in lines[i + 1:end])
            out.append(Block(page, i + 1, RUN.get(language, ""), language, code, **mark))
            mark = {}
            i = end + 1
            continue
        if line.strip():
            mark = {}  # a marker belongs to the fence right after it
        i += 1
    return out


def prepare(folder: Path) -> dict[str, str]:
    """The reader's folder: the sample models, and build/cpp as `make cpp` leaves it."""
    shutil.copytree(ROOT / "sample_models", folder / "sample_models",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "build").mkdir()
    cpp = Path(os.environ.get("AOTC_CPP_BUILD", ROOT / "build" / "cpp"))
    (folder / "build" / "cpp").symlink_to(cpp)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    return env


def start_aotc_server(env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    """tests/docs_aotc.py serving the page's `aotc` commands, and a link to it named `aotc`
    first on the page's PATH. Should the server not start, the real `aotc` runs."""
    where = Path(tempfile.mkdtemp(prefix="aotc-docs-"))  # short: a socket's path has a limit
    (where / "bin").mkdir()
    shim = where / "bin" / "aotc"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{ROOT / "tests" / "docs_aotc.py"}" "$@"\n')
    shim.chmod(0o755)
    env["AOTC_DOCS_SERVER"] = str(where / "socket")
    env["PATH"] = os.pathsep.join([str(where / "bin"), env["PATH"]])
    server = subprocess.Popen([sys.executable, ROOT / "tests" / "docs_aotc.py", "serve", env["AOTC_DOCS_SERVER"]],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (where / "socket").exists() and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return server, where


def run_page(path: Path, folder: Path) -> int:
    """Runs the page's blocks in `folder`; on the first failure, says which and returns 1."""
    env = prepare(folder)
    server, where = start_aotc_server(env)
    try:
        return _run_blocks(path, folder, env)
    finally:
        server.kill()
        shutil.rmtree(where, ignore_errors=True)


def _run_blocks(path: Path, folder: Path, env: dict[str, str]) -> int:
    os.environ.update(env)
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    namespace: dict = {"__name__": "__docs__"}
    for b in blocks(path):
        if b.skip or not b.kind:
            continue
        where = f"{b.page}:{b.line} ({b.language} block)"
        if b.file:
            (folder / b.file).write_text(b.code + "\n")
            continue
        print(f"--- {where}", flush=True)
        if b.kind == "python":
            try:
                exec(compile(b.code, where, "exec"), namespace)
            except BaseException:
                traceback.print_exc()
                print(f"FAILED: {where}\n{b.code}", flush=True)
                return 1
            continue
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", b.code], cwd=folder, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(proc.stdout[-3000:], flush=True)
        if proc.returncode != b.exit_status:
            print(f"FAILED: {where} exited {proc.returncode}, expected {b.exit_status}\n{b.code}", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_page(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()))


# ---------------------------------------------------------------------------------- tests

import pytest  # noqa: E402 (the runner above needs only the standard library)

RUNNABLE = [p for p in pages() if any(b.kind and not b.skip for b in blocks(p))]
SKIPPED = [b for p in pages() for b in blocks(p) if b.skip]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_runs(page, tmp_path):
    proc = subprocess.run([sys.executable, __file__, str(page), str(tmp_path)], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]


@pytest.mark.parametrize("block", SKIPPED, ids=lambda b: f"{b.page}:{b.line}")
def test_a_block_not_run_here_says_why(block):
    # a reason a reader can act on: what the block needs that this machine lacks
    assert block.kind and len(block.skip.split()) >= 3, f"{block.page}:{block.line}: skipped without a reason"
    pytest.skip(f"{block.page}:{block.line}: {block.skip}")


def test_every_fence_names_its_language():
    unnamed = [f"{b.page}:{b.line}" for p in pages() for b in blocks(p) if not b.language]
    assert not unnamed, f"say bash, python or text on these fences: {unnamed}"


def test_a_marker_belongs_to_a_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- docs: skip no GPU here -->\n```bash\nnvidia-smi\n```\n\n<!-- docs: exit 1 -->\n\ntext\n"
                    "```bash\nfalse\n```\n<!-- docs: setup\ntouch key\n-->\n```python\nx = 1\n```\n")
    found = blocks(page)
    assert [(b.kind, b.skip, b.exit_status) for b in found] == [
        ("shell", "no GPU here", 0), ("shell", None, 0), ("shell", None, 0), ("python", None, 0)]


def test_a_failing_example_fails_its_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nimport torch\nassert torch.ones(2).sum() == 3\n```\n")
    proc = subprocess.run([sys.executable, __file__, str(page), str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 1 and "FAILED" in proc.stdout


def test_the_readme_links_to_pages_that_exist():
    # the site's own links are checked by its build (-n); README.md is not one of its pages
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    assert targets, "README.md links to no page"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to {missing}, which do not exist"


@pytest.mark.slow
def test_the_site_builds_without_a_warning(tmp_path):
    pytest.importorskip("sphinx", reason="the docs extra (make test installs it)")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
                           str(ROOT / "docs"), str(tmp_path / "site")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
