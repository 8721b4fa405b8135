"""Hugging Face folders as models: what `save_pretrained` writes, read offline.

`aotc export FOLDER [--task TASK]` builds the model from `config.json` through
transformers' Auto classes, loads `model.safetensors` (or a sharded index), makes example
inputs for the task with dynamic batch and sequence, and copies the tokenizer and
processor files into the bundle (under `hf/`) untouched. Nothing is downloaded, no code
from the folder runs (`trust_remote_code` stays off), and pickled `.bin` weights are
refused: safetensors only.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aotc.errors import ModelFileError

if TYPE_CHECKING:  # torch is imported where it is used: the CLI lists TASKS without it
    import torch

# task -> (transformers Auto class, kind of inputs)
TASKS: dict[str, tuple[str, str]] = {
    "text-generation": ("AutoModelForCausalLM", "text"),
    "fill-mask": ("AutoModelForMaskedLM", "text"),
    "text-classification": ("AutoModelForSequenceClassification", "text"),
    "token-classification": ("AutoModelForTokenClassification", "text"),
    "feature-extraction": ("AutoModel", "text"),
    "image-classification": ("AutoModelForImageClassification", "vision"),
    "text2text-generation": ("AutoModelForSeq2SeqLM", "seq2seq"),
}

# architecture name suffix -> task, for folders whose config names its architecture
_SUFFIX_TASK = [
    ("ForCausalLM", "text-generation"),
    ("LMHeadModel", "text-generation"),
    ("ForMaskedLM", "fill-mask"),
    ("ForSequenceClassification", "text-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForImageClassification", "image-classification"),
    ("ForConditionalGeneration", "text2text-generation"),
]

# files a tokenizer or processor reads; copied into the bundle as they are
_ASSETS = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt",
    "spiece.model", "tokenizer.model", "sentencepiece.bpe.model", "preprocessor_config.json",
    "processor_config.json", "chat_template.jinja", "chat_template.json",
)

EXAMPLE_BATCH, EXAMPLE_SEQUENCE = 2, 8
MAX_BATCH = 64


@dataclass
class FolderModel:
    """A model built from a folder, with everything an export needs."""

    task: str
    module: "torch.nn.Module"
    kwargs: dict[str, "torch.Tensor"]
    dynamic_shapes: dict[str, Any]
    assets: dict[str, Path]  # path in the bundle -> file in the folder


def _transformers():
    try:
        import transformers  # optional (aotc[hf]), and heavy: only for HF folders
    except ImportError as e:
        raise ModelFileError(
            "Exporting a Hugging Face folder needs transformers: pip install 'aotc[hf]' "
            "(with torch==2.13.0 in the same command)."
        ) from e
    return transformers


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise ModelFileError(
            f"'{folder}' is a folder but has no config.json; give a folder written by "
            "save_pretrained (config.json and model.safetensors), or a model file."
        )
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelFileError(f"'{path}' is not valid JSON ({e}); write it again with save_pretrained.") from e


def infer_task(config: dict) -> str:
    """The task named by the config's first architecture (feature-extraction when none fits)."""
    architectures = config.get("architectures") or []
    for arch in architectures:
        for suffix, task in _SUFFIX_TASK:
            if arch.endswith(suffix):
                return task
    return "feature-extraction"


def _check_weights(folder: Path) -> None:
    if (folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file():
        return
    pickled = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
    found = f"; it has {', '.join(sorted(pickled))}, which aotc does not unpickle" if pickled else ""
    raise ModelFileError(
        f"'{folder}' has no model.safetensors (or model.safetensors.index.json){found}. Save the "
        "model with save_pretrained(..., safe_serialization=True)."
    )


def load_folder(folder: str | Path, task: str | None = None) -> FolderModel:
    """Build the model saved in `folder` for `task` (inferred from the config when None)."""
    folder = Path(folder)
    config_json = _read_config(folder)
    if config_json.get("auto_map"):
        raise ModelFileError(
            f"'{folder / 'config.json'}' names custom code (auto_map); aotc never runs code from a "
            "model folder. Export the model from a model file that builds it instead."
        )
    task = task or infer_task(config_json)
    if task not in TASKS:
        raise ModelFileError(f"unknown task '{task}'; aotc knows {', '.join(TASKS)}.")
    _check_weights(folder)
    transformers = _transformers()
    transformers.utils.logging.disable_progress_bar()
    auto_name, modality = TASKS[task]
    auto = getattr(transformers, auto_name)
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        module = auto.from_pretrained(folder, config=config, local_files_only=True, use_safetensors=True,
                                      trust_remote_code=False)
    except (ValueError, KeyError, OSError) as e:
        raise ModelFileError(
            f"transformers could not build {auto_name} for task '{task}' from '{folder}': "
            f"{str(e).strip().splitlines()[0]}. Pick another --task ({', '.join(TASKS)})."
        ) from e
    module.eval()
    kwargs, dynamic = example_inputs(module.config, modality, _text_inputs(folder, module, modality))
    assets = {f"hf/{name}": folder / name for name in _ASSETS if (folder / name).is_file()}
    return FolderModel(task=task, module=module, kwargs=kwargs, dynamic_shapes=dynamic, assets=assets)


def _text_inputs(folder: Path, module, modality: str) -> tuple[str, ...]:
    """The text inputs the folder's own preprocessing gives, so `model(**tokenizer(...))`
    runs unchanged on the bundle: what the folder's tokenizer returns, among the inputs
    forward takes. Without a tokenizer, input_ids and attention_mask (what every text
    tokenizer returns; token_type_ids stay at the model's default)."""

    if modality not in ("text", "seq2seq"):
        return ()
    accepted = set(inspect.signature(module.forward).parameters)
    produced = _tokenizer_outputs(folder) or ["input_ids", "attention_mask"]
    return tuple(n for n in produced if n in accepted)


def _tokenizer_outputs(folder: Path) -> list[str] | None:
    """The names of the tensors the folder's tokenizer returns; None when it has none."""
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                                                       "vocab.json", "spiece.model", "tokenizer.model")):
        return None
    transformers = _transformers()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except (ValueError, KeyError, OSError, TypeError) as e:
        raise ModelFileError(
            f"'{folder}' has tokenizer files, but transformers could not load them: "
            f"{str(e).strip().splitlines()[0]}. Fix or remove the tokenizer files."
        ) from e
    return list(tokenizer(["aotc"], return_tensors="pt").keys())


def _max_positions(config) -> int:
    for attr in ("max_position_embeddings", "n_positions", "max_target_positions"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return 512


def example_inputs(config, modality: str, text_inputs: tuple[str, ...] = ("input_ids", "attention_mask"),
                   ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Keyword example inputs for the task and their dynamic shapes (batch and sequence from
    1); a text model takes `text_inputs`, in that order."""
    import torch  # here, not at the top: the CLI reads TASKS at import, without torch
    from torch.export import Dim

    batch = Dim("batch", min=1, max=MAX_BATCH)
    g = torch.Generator().manual_seed(0)
    if modality == "vision":
        size = getattr(config, "image_size", 224)
        channels = getattr(config, "num_channels", 3)
        pixels = torch.randn(EXAMPLE_BATCH, channels, size, size, generator=g)
        return {"pixel_values": pixels}, {"pixel_values": {0: batch}}
    vocab = getattr(config, "vocab_size", None) or 100
    sequence = Dim("sequence", min=1, max=_max_positions(config))
    shape = (EXAMPLE_BATCH, EXAMPLE_SEQUENCE)
    values = {
        "input_ids": lambda: torch.randint(0, vocab, shape, generator=g),
        "attention_mask": lambda: torch.ones(shape, dtype=torch.long),
        "token_type_ids": lambda: torch.zeros(shape, dtype=torch.long),
    }
    unknown = [n for n in text_inputs if n not in values]
    if unknown:
        raise ModelFileError(
            f"the folder's tokenizer returns {', '.join(unknown)}, for which aotc cannot make example "
            f"inputs (it makes {', '.join(values)}). Export from a model file with your own example_inputs()."
        )
    kwargs = {name: values[name]() for name in text_inputs}
    dynamic = {name: {0: batch, 1: sequence} for name in text_inputs}
    if modality == "seq2seq":
        kwargs["decoder_input_ids"] = torch.randint(0, vocab, (EXAMPLE_BATCH, EXAMPLE_SEQUENCE // 2), generator=g)
        dynamic["decoder_input_ids"] = {0: batch, 1: Dim("target", min=1, max=_max_positions(config))}
    return kwargs, dynamic


BUNDLE_CONFIG = "hf/config.json"  # where export copies a folder's config.json in the bundle


def has_bundle_config(bundle) -> bool:
    """Whether `bundle` (a Bundle) was exported from a Hugging Face folder: it holds the
    folder's config.json and the task the model was built for."""
    return bundle.manifest.model.task in TASKS and any(f.path == BUNDLE_CONFIG for f in bundle.manifest.files)


def build_from_bundle_config(bundle) -> "torch.nn.Module":
    """The architecture of a bundle exported from a Hugging Face folder, with fresh weights:
    transformers' class for the recorded task, built from the bundle's own hf/config.json
    (no code from the folder runs: trust_remote_code stays off, and a config that names
    custom code is refused). aotc.tools.rebuild loads the bundle's weights into it."""
    config_json = _read_config(bundle.path / "hf")
    if config_json.get("auto_map"):
        raise ModelFileError(
            f"'{bundle.path / BUNDLE_CONFIG}' names custom code (auto_map); aotc never runs code a bundle "
            "names. Give the model file that builds it with --model."
        )
    transformers = _transformers()
    task = bundle.manifest.model.task
    auto = getattr(transformers, TASKS[task][0])
    try:
        config = transformers.AutoConfig.from_pretrained(bundle.path / "hf", local_files_only=True,
                                                         trust_remote_code=False)
        return auto.from_config(config, trust_remote_code=False).eval()
    except (ValueError, KeyError, OSError) as e:
        raise ModelFileError(
            f"transformers could not build {TASKS[task][0]} for task '{task}' from '{bundle.path / BUNDLE_CONFIG}': "
            f"{str(e).strip().splitlines()[0]}. Give the model file with --model."
        ) from e
