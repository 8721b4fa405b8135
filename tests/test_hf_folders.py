"""Hugging Face folders (what save_pretrained writes) as models, and generation bundles:
prefill + decode over a static KV cache, compared token for token with eager generate."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

import aotc
from aotc.cli.main import cli
from aotc.errors import InputError, ModelFileError

transformers = pytest.importorskip("transformers", reason="the hf extra (make test installs it)")

from hf_models import CASES  # noqa: E402


def _tokenizer(folder):
    """A small word-level tokenizer, saved as a user's folder would have it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "[EOS]", "the", "cat", "sat", "on", "mat"])}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]", eos_token="[EOS]").save_pretrained(folder)


@pytest.fixture(scope="session")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-folders")
    made = {}
    for name in ("gpt2", "bert", "vit"):
        CASES[name].build().save_pretrained(root / name)
        made[name] = root / name
    _tokenizer(made["gpt2"])
    return made


def _export(folder, out, *extra):
    result = CliRunner().invoke(cli, ["export", str(folder), "-o", str(out), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _auto(folder, auto_name):
    return getattr(transformers, auto_name).from_pretrained(folder).eval()


@pytest.mark.slow
@pytest.mark.parametrize("name, auto_name, task", [
    ("bert", "AutoModelForSequenceClassification", "text-classification"),
    ("vit", "AutoModelForImageClassification", "image-classification"),
])
def test_folder_exports_the_task_its_config_names(folders, tmp_path, name, auto_name, task):
    _export(folders[name], tmp_path / "b")
    bundle = aotc.Bundle.open(tmp_path / "b")
    assert bundle.manifest.model.task == task
    eager = _auto(folders[name], auto_name)
    loaded = aotc.load(tmp_path / "b")
    for batch in (1, 3):  # dynamic batch from 1 by default
        if name == "vit":
            inputs = {"pixel_values": torch.randn(batch, 3, 32, 32)}
        else:
            inputs = {"input_ids": torch.randint(0, 96, (batch, 5)), "attention_mask": torch.ones(batch, 5, dtype=torch.long)}
        with torch.no_grad():
            torch.testing.assert_close(loaded(**inputs)["logits"], eager(**inputs).logits)


@pytest.fixture(scope="session")
def bert_bundle(folders, tmp_path_factory):
    out = tmp_path_factory.mktemp("bert") / "bert"
    _export(folders["bert"], out)
    return out


def test_verify_and_bench_a_folder_bundle_with_no_flags(bert_bundle):
    """The bundle holds the folder's config and its weights: verify's random samples and
    bench's baselines rebuild eager from them with transformers' class, no --model."""
    result = CliRunner().invoke(cli, ["verify", str(bert_bundle), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    sampled = [c for c in report["checks"] if "vs eager (sample" in c["artifact"]]
    assert sampled and all(c["passed"] for c in report["checks"]) and report["skipped"] == []
    result = CliRunner().invoke(cli, ["bench", str(bert_bundle), "--baselines", "eager", "--iters", "2",
                                      "--warmup", "0", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["variant"]: r for r in json.loads(result.stdout)["results"]}
    assert rows["eager"]["error"] == "" and rows["eager"]["median_us"] > 0, rows["eager"]


def test_a_folder_bundle_whose_config_names_code_is_refused(bert_bundle, tmp_path):
    """The rebuild runs transformers' own classes only: a config edited to name custom code
    (auto_map), even with every hash recomputed, is refused before anything is built."""
    from conftest import rehash

    bundle = tmp_path / "b"
    shutil.copytree(bert_bundle, bundle)
    config = json.loads((bundle / "hf/config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "evil.Model"}
    (bundle / "hf/config.json").write_text(json.dumps(config))
    rehash(bundle)
    result = CliRunner().invoke(cli, ["verify", str(bundle)])
    assert result.exit_code == 1
    assert "names custom code (auto_map); aotc never runs code a bundle names" in result.stderr


@pytest.fixture(scope="session")
def gpt2_generation(folders, tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "gpt2"
    summary = _export(folders["gpt2"], out, "--max-cache-len", "40")
    return out, summary


@pytest.mark.slow
def test_text_generation_folder_writes_prefill_and_decode_and_copies_tokenizer(folders, gpt2_generation):
    out, summary = gpt2_generation
    assert set(summary["graphs"]) == {"prefill", "decode"}
    bundle = aotc.Bundle.open(out)
    assert bundle.manifest.generation.max_cache_len == 40
    copied = {f.path for f in bundle.manifest.files if f.kind == "hf"}
    assert {"hf/tokenizer.json", "hf/tokenizer_config.json", "hf/config.json"} <= copied
    for rel in copied:  # untouched
        assert (out / rel).read_bytes() == (folders["gpt2"] / rel.removeprefix("hf/")).read_bytes()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out / "hf")
    assert tokenizer("the cat sat")["input_ids"] == [2, 3, 4]
    shown = CliRunner().invoke(cli, ["inspect", str(out)])
    assert shown.exit_code == 0 and "KV cache of 40 tokens" in shown.output and "text-generation" in shown.output
    # the decode graph mutates the cache buffers; nothing else
    decode = bundle.metadata.programs["decode"]
    mutated = {i.name for i in decode.inputs if i.mutation_type != "NOT_MUTATED"}
    assert mutated and all(n.startswith(("key_cache_", "value_cache_", "cumulative_length_")) for n in mutated)


@pytest.mark.slow
def test_verify_rebuilds_the_model_over_its_static_cache(folders, gpt2_generation):
    out, _ = gpt2_generation
    result = CliRunner().invoke(cli, ["verify", str(out), "--samples", "2", "--json", "--model", str(folders["gpt2"])])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert any("vs eager (sample 2)" in c["artifact"] for c in report["checks"])


@pytest.mark.slow
def test_greedy_generation_equals_eager_generate_from_folder(folders, gpt2_generation):
    out, _ = gpt2_generation
    eager = _auto(folders["gpt2"], "AutoModelForCausalLM")
    module = aotc.load(out)
    for prompt in ([5, 17, 33, 2], [60]):  # the same module twice: a new prompt starts a new cache
        ids = torch.tensor([prompt])
        want = eager.generate(ids, max_new_tokens=20, do_sample=False, attention_mask=torch.ones_like(ids))
        assert aotc.generate(module, ids, 20).tolist() == want.tolist()


@pytest.mark.slow
def test_generation_runs_on_aoti(folders, gpt2_generation, tmp_path, monkeypatch):
    """Compiled with a shape profile of short prompts beside the generic package: a prompt of
    3 tokens prefills with the profile's package, one of 12 with the generic one, and decode
    (one token, compiled for that already) keeps its one package; tokens are eager's."""
    from aotc.exporters.aoti_profiles import ProfiledGraph

    out, _ = gpt2_generation
    compiled = tmp_path / "b"
    shutil.copytree(out, compiled)
    bundle = aotc.compile(compiled, profiles=("input_ids:1=2..8",))
    assert sorted(f.path for f in bundle.manifest.files if f.kind == "compiled") == [
        "compiled/cpu/decode.pt2", "compiled/cpu/prefill.pt2", "compiled/cpu/prefill_p0.pt2"]
    ran = []
    label = ProfiledGraph.label
    monkeypatch.setattr(ProfiledGraph, "label", lambda graph, args: ran.append(label(graph, args)) or ran[-1])
    module = aotc.load(compiled, backend="aoti")
    eager = _auto(folders["gpt2"], "AutoModelForCausalLM")
    wants = []
    for prompt in ([7, 8, 9], list(range(3, 15))):
        ids = torch.tensor([prompt])
        wants.append(eager.generate(ids, max_new_tokens=16, do_sample=False, attention_mask=torch.ones_like(ids)))
        assert aotc.generate(module, ids, 16).tolist() == wants[-1].tolist()
    assert [r.split("=")[1] if r else None for r in ran] == ["2..8", None]  # prefill alone picks
    want = wants[0]
    result = CliRunner().invoke(cli, ["run", str(compiled), "--prompt-ids", "7,8,9", "--max-new-tokens", "16", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["backend"] == "aoti" and report["new_ids"] == want[0, 3:].tolist()


@pytest.mark.slow
def test_llama_greedy_generation_equals_eager(tmp_path):
    model = CASES["llama"].build()
    bundle = aotc.export_generation(model, tmp_path / "b", max_cache_len=32)
    ids = torch.tensor([[11, 42, 7, 80, 3]])
    want = model.generate(ids, max_new_tokens=24, do_sample=False, attention_mask=torch.ones_like(ids))
    got = aotc.generate(bundle.path, ids, 24)
    assert got.tolist() == want.tolist()
    assert not model.training  # export leaves the model as it found it


@pytest.mark.slow
def test_sampling(gpt2_generation):
    out, _ = gpt2_generation
    module = aotc.load(out)
    ids = torch.tensor([[5, 6]])
    greedy = aotc.generate(module, ids, 12)
    # keeping only the most likely token is greedy decoding
    assert aotc.generate(module, ids, 12, do_sample=True, top_k=1, seed=3).tolist() == greedy.tolist()
    a = aotc.generate(module, ids, 12, do_sample=True, temperature=1.5, seed=3)
    b = aotc.generate(module, ids, 12, do_sample=True, temperature=1.5, seed=3)
    assert a.tolist() == b.tolist()  # a seed makes sampling repeatable


@pytest.mark.slow
def test_generation_refuses_what_does_not_fit(gpt2_generation, tmp_path):
    out, _ = gpt2_generation
    with pytest.raises(InputError, match="does not fit the bundle's cache of 40 tokens"):
        aotc.generate(out, torch.tensor([[1] * 30]), 11)
    with pytest.raises(InputError, match="batch size 1"):
        aotc.generate(out, torch.tensor([[1, 2], [3, 4]]), 3)
    module = aotc.load(out)
    with pytest.raises(InputError, match="the decode graph takes"):
        module.run_graph("decode", input_ids=torch.tensor([[1, 2]]), cache_position=torch.tensor([0, 1]))


def test_folder_without_safetensors_is_refused_and_nothing_unpickled(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ModelFileError, match=r"no model.safetensors.*pytorch_model.bin, which aotc does not unpickle"):
        aotc.load_model(str(folder))


def test_folder_with_custom_code_is_refused(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "modeling_x.X"}}))
    with pytest.raises(ModelFileError, match="never runs code from a model folder"):
        aotc.load_model(str(folder))


def test_prompt_ids_need_a_generation_bundle(tmp_path):
    aotc.export(torch.nn.Linear(3, 3), (torch.randn(2, 3),), tmp_path / "b")
    result = CliRunner().invoke(cli, ["run", str(tmp_path / "b"), "--prompt-ids", "1,2"])
    assert result.exit_code == 1
    assert "needs a generation bundle" in result.output
