"""Fuzzing bundles: random corruptions, each run through open / inspect / load / call /
verify in a child process, classified by how it ended.

    .venv/bin/python tests/fuzz.py --trials 10000 --seed 7      (also: make fuzz N=10000)

A trial copies a pristine sample bundle, corrupts it one way (half the time re-hashing
the result, as a hostile editor would, so the edit reaches the deeper parsers), then runs
every step. A trial passes when it ends in a named aotc error (AotcError) at some step,
or runs with results equal to the pristine bundle's, or runs with other results that
`verify` reports as failing. It fails on any other exception, a silent wrong result, a
file written or left outside the bundle, a followed symlink, a hang or a crash of the
process. The seed and trial number reproduce any trial: `--seed S --only N`.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import multiprocessing
import os
import random
import shutil
import struct
import sys
import tempfile
import time
import traceback
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# as in conftest: compiler caches in the repo's ignored build dir
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(HERE.parent / "build" / "inductor-cache"))
os.environ.setdefault("AOTC_CACHE_DIR", str(HERE.parent / "build" / "aotc-cache"))

# ------------------------------------------------------------------ sample bundles


def build_samples(root: Path, compile_aoti: bool = True) -> dict[str, tuple[Path, str]]:
    """name -> (pristine bundle, backend to load it with). The mlp bundle has fx, aoti
    and onnx artifacts; the inplace one mutates and aliases inputs (forward+backward)."""
    import aotc
    from aotc.exporters.onnx import add_to_bundle
    from conftest import fresh_sample

    samples = {}
    mlp = fresh_sample("mlp")
    aotc.export(mlp.module, mlp.args, root / "mlp", force=True)
    add_to_bundle(root / "mlp")
    if compile_aoti:
        aotc.compile(root / "mlp")
    for backend in ("fx", "onnx") + (("aoti",) if compile_aoti else ()):
        samples[f"mlp-{backend}"] = (root / "mlp", backend)
    inplace = fresh_sample("inplace")
    aotc.export(inplace.module, inplace.args, root / "inplace", graphs=("forward", "backward"), force=True)
    samples["inplace-autograd-fx"] = (root / "inplace", "fx")
    joint = fresh_sample("mlp")
    aotc.export(joint.module, joint.args, root / "mlp-joint", graphs=("joint",), loss=joint.loss, force=True)
    samples["mlp-joint-fx"] = (root / "mlp-joint", "fx")
    return samples


# ------------------------------------------------------------------ corruptions

ABSOLUTE_MEMBER = Path("/tmp/aotc-fuzz-absolute.txt")
KINDS = ("byte_flip", "truncate", "delete", "extra_file", "malformed_json", "json_value", "deep_json",
         "symlink", "safetensors_header", "safetensors_values", "zip_member")


@dataclass
class Corruption:
    kind: str
    target: str
    rehashed: bool
    detail: str = ""


def _files(bundle: Path) -> list[str]:
    return sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file())


def _random_value(rng: random.Random):
    return rng.choice([
        -1, 0, 1, 7, 2**31, 2**62, -(2**40), 10**30, 0.5, True, None, "", "x", "../../etc/passwd", "float32",
        "int64", "cuda:0", "MUTATED_OUT_GRAPH", "alias_of_input", "user_input", "parameter", [], [0], [-1, 2],
        [2**40, 1], {}, {"a": 1}, "output[0]", "mutated:x", "grad:x", "torch.float32", "Tensor",
    ])


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, path + (i,))
    yield path


def _set(obj, path, value):
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


def corrupt(bundle: Path, outside: Path, rng: random.Random) -> Corruption:
    """Apply one random corruption to `bundle` in place."""
    files = _files(bundle)
    kind = rng.choice(KINDS)
    rehashed = rng.random() < 0.5
    jsons = [f for f in files if f.endswith(".json")]
    zips = [f for f in files if f.endswith(".pt2")]
    tensors = [f for f in files if f.endswith(".safetensors")]
    target = rng.choice(files)
    path = bundle / target
    detail = ""
    if kind == "byte_flip":
        data = bytearray(path.read_bytes())
        for _ in range(rng.randint(1, 8)):
            if data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
    elif kind == "truncate":
        size = path.stat().st_size
        os.truncate(path, rng.randrange(size) if size else 0)
    elif kind == "delete":
        path.unlink()
        detail = "entry dropped too" if rehashed else ""
    elif kind == "extra_file":
        target = rng.choice(["extra.bin", "graphs/extra.pt2", "compiled/cpu/evil.so", "evil.py"])
        (bundle / target).parent.mkdir(parents=True, exist_ok=True)
        (bundle / target).write_bytes(os.urandom(64))
        detail = "listed too" if rehashed else ""
    elif kind == "malformed_json":
        target = rng.choice(jsons)
        text = (bundle / target).read_text()
        cut = rng.randrange(len(text))
        (bundle / target).write_text(text[:cut] + rng.choice(["", "{", "]", "\x00", "\ufffd", '"', ",,"]) + text[cut + 1:])
    elif kind == "json_value":
        target = rng.choice(jsons)
        data = json.loads((bundle / target).read_text())
        leaf = rng.choice([p for p in _leaves(data) if p])
        value = _random_value(rng)
        _set(data, leaf, value)
        detail = f"{'.'.join(map(str, leaf))} = {value!r:.40}"
        (bundle / target).write_text(json.dumps(data))
    elif kind == "deep_json":
        target = rng.choice(jsons)
        data = json.loads((bundle / target).read_text())
        leaf = rng.choice([p for p in _leaves(data) if p])
        depth = rng.choice([50, 5000, 200000])
        text = json.dumps(data)
        marker = '"__DEEP__"'
        _set(data, leaf, "__DEEP__")
        text = json.dumps(data).replace(marker, "[" * depth + "]" * depth, 1)
        (bundle / target).write_text(text)
        detail = f"{depth} levels at {'.'.join(map(str, leaf))}"
    elif kind == "symlink":
        if rng.random() < 0.5 or not (bundle / "graphs").is_dir():
            path.unlink()
            secret = outside / "secret.bin"
            path.symlink_to(secret)
        else:
            target = "graphs"
            copy = outside / "graphs"
            if not copy.exists():
                shutil.copytree(bundle / "graphs", copy)
            shutil.rmtree(bundle / "graphs")
            (bundle / "graphs").symlink_to(copy, target_is_directory=True)
    elif kind == "safetensors_header":
        target = rng.choice(tensors)
        data = bytearray((bundle / target).read_bytes())
        choice = rng.choice(["huge", "short", "dtype", "offsets"])
        (length,) = struct.unpack("<Q", data[:8])
        if choice in ("huge", "short"):
            data[:8] = struct.pack("<Q", rng.choice([2**63, 2**40, len(data) + 1]) if choice == "huge" else max(length - 3, 0))
        else:
            header = json.loads(data[8:8 + length])
            name = rng.choice([k for k in header if k != "__metadata__"])
            if choice == "dtype":
                header[name]["dtype"] = rng.choice(["F32", "I64", "F16", "XX", "BOOL"])
            else:
                header[name]["data_offsets"] = [0, rng.choice([0, 4, 2**40])]
            raw = json.dumps(header).encode()
            raw += b" " * ((8 - len(raw) % 8) % 8)
            data = bytearray(struct.pack("<Q", len(raw)) + raw + data[8 + length:])
        (bundle / target).write_bytes(bytes(data))
        detail = choice
    elif kind == "safetensors_values":
        target = rng.choice(tensors)
        from safetensors.torch import load_file, save_file

        tensors_ = load_file(str(bundle / target))
        name = rng.choice(sorted(tensors_))
        t = tensors_[name]
        if t.is_floating_point() and t.numel():
            t.view(-1)[rng.randrange(t.numel())] += rng.choice([1e-3, 1.0, float("nan")])
        elif t.numel():
            t.view(-1)[rng.randrange(t.numel())] += 1
        save_file(tensors_, str(bundle / target))
        detail = name
    elif kind == "zip_member":
        target = rng.choice(zips)
        detail = _edit_zip(bundle / target, rng)
    if rehashed:
        _rehash(bundle, kind, target)
    return Corruption(kind, target, rehashed, detail)


def _edit_zip(path: Path, rng: random.Random) -> str:
    import io

    import torch

    choice = rng.choice(["zip_slip", "absolute", "shared_library", "pickled_inputs", "opaque_constant", "drop_member"])
    with zipfile.ZipFile(path) as src:
        members = [(i, src.read(i.filename)) for i in src.infolist()]
    prefix = members[0][0].filename.split("/")[0]
    out = []
    for info, data in members:
        if choice == "pickled_inputs" and info.filename.endswith("sample_inputs/model.pt"):
            payload = io.BytesIO()
            torch.save((os.getcwd,), payload)
            data = payload.getvalue()
        if choice == "opaque_constant" and info.filename.endswith("constants/model_constants_config.json"):
            data = json.dumps({"config": {"c": {"path_name": "c", "tensor_meta": None, "value_type": "opaque"}}}).encode()
        out.append((info.filename, data))
    if choice == "zip_slip":
        out.append((f"{prefix}/data/aotinductor/model/../../../../../zipslip.txt", b"escaped"))
    elif choice == "absolute":
        out.append((str(ABSOLUTE_MEMBER), b"escaped"))
    elif choice == "shared_library":
        out.append((f"{prefix}/data/aotinductor/model/evil.so", b"\x7fELF" + os.urandom(60)))
    elif choice == "drop_member":
        out.pop(rng.randrange(len(out)))
    with zipfile.ZipFile(path, "w") as dst:
        for name, data in out:
            dst.writestr(zipfile.ZipInfo(name), data)
    return choice


def _rehash(bundle: Path, kind: str, target: str) -> None:
    """Make the manifest agree with the edit, as far as a hostile editor can."""
    from aotc.bundle import manifest_checksum, sha256_file

    try:
        manifest = json.loads((bundle / "manifest.json").read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return  # the edit broke or removed the manifest itself
    if not isinstance(files, list):
        return
    if kind == "delete":
        manifest["files"] = files = [f for f in files if not (isinstance(f, dict) and f.get("path") == target)]
    if kind == "extra_file":
        files.append({"path": target, "kind": "other", "size": 0, "sha256": "", "graph": None, "device": None,
                      "build": None})
    for f in files:
        if isinstance(f, dict) and isinstance(f.get("path"), str):
            p = bundle / f["path"]
            if p.is_file() and not p.is_symlink():
                f["size"], f["sha256"] = p.stat().st_size, sha256_file(p)
            elif p.is_symlink() and p.exists():
                f["size"], f["sha256"] = p.stat().st_size, sha256_file(p)
    manifest["checksum"] = manifest_checksum(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


# ------------------------------------------------------------------ one trial


@dataclass
class Outcome:
    trial: int
    sample: str
    corruption: Corruption
    result: str  # "refused:<step>:<Error>", "correct", "wrong, caught by verify", or "FAIL: ..."
    message: str = ""

    @property
    def failed(self) -> bool:
        return self.result.startswith("FAIL")


STEPS = ("open", "inspect", "load", "call", "verify")


def _snapshot(paths: list[Path]) -> set[str]:
    seen = set()
    for root in paths:
        for p in root.rglob("*"):
            seen.add(str(p))
    return seen


def run_trial(trial: int, seed: int, samples: dict, baseline: dict, work: Path) -> Outcome:
    from click.testing import CliRunner

    from aotc.bundle import Bundle
    from aotc.cli.main import cli
    from aotc.errors import AotcError
    from aotc.tools.verify import run_artifact, verify

    rng = random.Random(f"{seed}:{trial}")
    name = rng.choice(sorted(samples))
    pristine, backend = samples[name]
    box = work / f"trial-{trial}"
    bundle, outside = box / "bundle", box / "outside"
    shutil.copytree(pristine, bundle)
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"secret")
    corruption = corrupt(bundle, outside, rng)
    watched = [work]  # this worker's folder: its trials and its TMPDIR
    before = _snapshot(watched) - {str(p) for p in box.rglob("*")}
    inputs, golden, expected, tolerances = baseline[name]
    step = "open"
    result, message = "correct", ""
    try:
        opened = Bundle.open(bundle)
        step = "inspect"
        shown = CliRunner().invoke(cli, ["inspect", str(bundle), "--json"])
        if shown.exit_code == 1 and shown.stderr.startswith("Error: "):
            raise _Refused(shown.stderr.strip())
        if shown.exit_code != 0:
            raise AssertionError(f"inspect exit {shown.exit_code}: {shown.stderr.strip()[-300:]}")
        step = "load"  # run_artifact loads and calls: errors from it say which
        actual = run_artifact(opened, backend, "cpu", inputs, golden)
        step = "verify"
        report = verify(bundle, samples=0)
        wrong = _differences(expected, actual, tolerances)
        if wrong:
            result = "wrong, caught by verify" if not report.ok else "FAIL: silent wrong result"
            message = ", ".join(wrong[:5])
        elif not report.ok:
            result = "correct; verify failed (reference changed)"
        if corruption.kind == "symlink" and not result.startswith("FAIL"):
            result = "FAIL: followed a symlink"
    except _Refused as e:
        result, message = f"refused:{step}:cli", str(e)
    except AotcError as e:
        result, message = f"refused:{step}:{type(e).__name__}", str(e)
    except Exception as e:
        result = f"FAIL: {type(e).__name__} at {step}"
        message = "".join(traceback.format_exception(e))[-1500:]
    gc.collect()  # loaded modules release their extraction directories
    leaked = _snapshot(watched) - before - {str(p) for p in box.rglob("*")}
    if leaked:
        result, message = "FAIL: wrote or left files outside the bundle", ", ".join(sorted(leaked)[:5])
    if ABSOLUTE_MEMBER.exists():
        result, message = "FAIL: an archive member was written at its absolute path", str(ABSOLUTE_MEMBER)
    if (outside / "secret.bin").read_bytes() != b"secret":
        result = "FAIL: changed a file outside the bundle"
    if not result.startswith("FAIL"):
        shutil.rmtree(box, ignore_errors=True)
    return Outcome(trial, name, corruption, result, message)


class _Refused(Exception):
    """The CLI turned a named error into `Error: ...` and exit 1."""


def _differences(expected: dict, actual: dict, tolerances: dict) -> list[str]:
    """Entries where `actual` is not the pristine bundle's result within the tolerances
    verify applies (the bundle's own, per entry): what "correct" means for a bundle."""
    from aotc.tools.verify import compare

    missing = sorted(set(actual) - set(expected))
    checks = compare("fuzz", expected, actual, tolerances, None)
    return missing + [f"{c.name} (max abs {c.max_abs:.3g})" for c in checks if not c.passed]


def baselines(samples: dict) -> dict:
    from aotc.bundle import Bundle
    from aotc.tools.verify import _golden, _golden_inputs, run_artifact

    out = {}
    for name, (path, backend) in samples.items():
        bundle = Bundle.open(path)
        golden = _golden(bundle)
        inputs = _golden_inputs(bundle, golden)
        out[name] = (inputs, golden, run_artifact(bundle, backend, "cpu", inputs, golden), bundle.manifest.tolerances)
    return out


# ------------------------------------------------------------------ the child process


def _worker(samples: dict, seed: int, trials: list[int], work: str, tmp: str, conn) -> None:
    os.environ["TMPDIR"] = tmp  # this worker's temp files: watched for leftovers
    tempfile.tempdir = None
    import torch

    torch.set_num_threads(1)
    work_path = Path(work)
    base = baselines(samples)
    conn.send(("ready", None))
    for trial in trials:
        conn.send(("start", trial))
        try:
            outcome = run_trial(trial, seed, samples, base, work_path)
        except Exception as e:  # a bug in this harness, not in aotc: say so
            outcome = Outcome(trial, "?", Corruption("?", "?", False), f"FAIL: fuzz harness {type(e).__name__}",
                              traceback.format_exc()[-1500:])
        conn.send(("done", outcome))
    conn.send(("finished", None))


def _supervise(samples: dict, seed: int, todo: list[int], work: Path, timeout: float, report) -> None:
    """Run `todo` in a child process, replacing it when it crashes or hangs (that trial
    is recorded as a failure)."""
    ctx = multiprocessing.get_context("spawn")
    todo = list(todo)
    restarts = 0
    while todo:
        tmp = work / f"tmp-{restarts}"
        tmp.mkdir(parents=True, exist_ok=True)
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(samples, seed, todo, str(work), str(tmp), child), daemon=True)
        proc.start()
        child.close()  # so that a dead child reads as EOF here
        restarts += 1
        current, deadline = None, time.monotonic() + 600
        while True:
            if not parent.poll(max(0.0, deadline - time.monotonic())):
                proc.kill()
                proc.join()
                dead = "FAIL: hang" if current is not None else "FAIL: worker did not start"
                break
            try:
                what, value = parent.recv()
            except EOFError:
                proc.join()
                dead = f"FAIL: process died (exit code {proc.exitcode})"
                break
            if what == "start":
                current, deadline = value, time.monotonic() + timeout
            elif what == "done":
                todo.remove(value.trial)
                current = None
                report(value)
            elif what == "ready":
                deadline = time.monotonic() + timeout
            elif what == "finished":
                proc.join()
                dead = None
                break
        if dead is not None:
            if current is None:
                raise RuntimeError(dead)
            todo.remove(current)
            report(Outcome(current, "?", Corruption("?", "?", False), dead))


def run_fuzz(samples: dict, trials: int, seed: int, work: Path, timeout: float = 120.0,
             only: list[int] | None = None, on_outcome=None, workers: int = 2) -> list[Outcome]:
    """Run `trials` trials (or the trial numbers `only`) in `workers` child processes at
    once, each in its own folder under `work`; returns the outcomes by trial number."""
    import threading

    todo = list(only if only is not None else range(trials))
    outcomes: list[Outcome] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def report(outcome: Outcome) -> None:
        with lock:
            outcomes.append(outcome)
            if on_outcome:
                on_outcome(outcome)

    def supervise(k: int) -> None:
        try:
            _supervise(samples, seed, todo[k::workers], work / f"worker-{k}", timeout, report)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=supervise, args=(k,)) for k in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sorted(outcomes, key=lambda o: o.trial)


def summarize(outcomes: list[Outcome]) -> str:
    """Outcomes per corruption kind, as a table."""
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        key = o.corruption.kind + (" (re-hashed)" if o.corruption.rehashed else "")
        label = o.result.split(":")[0] + (":" + o.result.split(":")[1] if o.result.startswith("refused") else "")
        table[key][label] += 1
    lines = [f"{len(outcomes)} trials, {sum(o.failed for o in outcomes)} failed"]
    for key in sorted(table):
        lines.append(f"  {key:32} " + ", ".join(f"{k} {v}" for k, v in table[key].most_common()))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="run these trial numbers only")
    parser.add_argument("--no-aoti", action="store_true", help="skip the compiled sample (no g++ needed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aotc-fuzz-") as tmp:
        work = Path(tmp)
        samples = build_samples(work / "samples", compile_aoti=not args.no_aoti)
        done = [0]

        def progress(o: Outcome) -> None:
            done[0] += 1
            if o.failed:
                print(f"trial {o.trial}: {o.result} ({o.corruption})\n{o.message}", file=sys.stderr)
            elif done[0] % 100 == 0:
                print(f"{done[0]} trials", file=sys.stderr)

        outcomes = run_fuzz(samples, args.trials, args.seed, work / "trials", only=args.only, on_outcome=progress)
    print(summarize(outcomes))
    return 1 if any(o.failed for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
