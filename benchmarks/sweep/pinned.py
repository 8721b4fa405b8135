"""Sweep cells aotc is expected not to pass: (case name pattern, column) -> (the words its
detail must contain, why). A cell that stops failing is noticed in the table's details; a
failure not listed here, or listed with other words, fails the sweep. (A forward+backward
refusal where torch.export of the training-mode model fails too needs no pin: the row
says so, and aotc takes what torch takes.)"""

from __future__ import annotations

_SQUEEZE = ("onnxruntime cannot load the ONNX model",
            "torch.onnx writes `squeeze(1)` of a dim that is not 1 (a no-op in torch) as an ONNX Squeeze, "
            "which onnxruntime rejects on load; torch.onnx's own export of the model fails the same way")
_TIES = ("onnxruntime does not reproduce",
         "its query selection takes the top-k of scores that tie in a randomly initialised tiny model, and "
         "onnxruntime breaks ties in another order than torch; export's check refuses the ONNX model")

_SHARED = ("share memory",
           "two of its outputs are views of one tensor the graph does not return; onnxruntime returns each as a "
           "copy, so a write to one would not show in the other as in eager: aotc refuses rather than drop the "
           "aliasing")

_COMPLEX = ("computes with complex tensors",
            "its rotary embedding multiplies complex numbers in a form torch.onnx cannot lower (its own export "
            "of the model fails at the same step), and ONNX has no complex type")
_COMPLEX_BUFFER = ("takes or returns complex tensors",
                   "its rotary frequencies are complex tensors the graph takes as inputs (Lumina's image_rotary_emb "
                   "argument, the others' constants), and ONNX has no complex type (torch.onnx fails too)")

PINNED: dict[tuple[str, str], tuple[str, str]] = {
    **{(f"diffusers/{c}", "onnx"): _COMPLEX_BUFFER for c in (
        "LuminaNextDiT2DModel", "NucleusMoEImageTransformer2DModel", "QwenImageControlNetModel",
        "QwenImageTransformer2DModel", "ZImageTransformer2DModel")},
    ("diffusers/AllegroTransformer3DModel", "onnx"): _SQUEEZE,
    ("diffusers/PixArtTransformer2DModel", "onnx"): _SQUEEZE,
    ("transformers/afmoe/*", "onnx"): (
        "onnxruntime does not reproduce",
        "its router's top-k over expert scores picks other experts in onnxruntime than in torch (scores "
        "that tie, or lie a rounding apart, in a randomly initialised tiny model); export's check refuses"),
    ("transformers/d_fine/*", "onnx"): _TIES,
    ("transformers/deimv2/*", "onnx"): _TIES,
    **{(f"transformers/{f}/*", "onnx"): _SHARED for f in ("cvt", "pe_audio_encoder", "prophetnet")},
    # RT-DETR's query selection, as D-FINE's (torch.onnx's own ONNX of rt_detr is silently 3.31 off)
    **{(f"transformers/{f}/*", "onnx"): _TIES for f in ("rt_detr", "rt_detr_v2", "pp_doclayout_v3", "pp_doclayout_v4")},
    ("transformers/vjepa2/*", "fwd+bwd"): (
        "VJEPA2Model cannot be captured whole",
        "its predictor repeats the targets a number of times read from the masks' values (modeling_vjepa2.py: "
        "`target.repeat(B, max_patch_num, 1)`); torch.export takes "
        "the training-mode forward, but AOTAutograd's trace of its backward guards on that count "
        "(GuardOnDataDependentSymNode: Eq(u0, 0)): a backward torch cannot trace"),
    **{(f"transformers/{f}/*", "onnx"): (
        "operators without an ONNX translation: aten.cummax.default, aten.cummin.default",
        "its text attention mask is built from the token ids with torch.cummax and torch.cummin over the "
        "sequence (generate_masks_with_special_tokens_and_transfer_map), which ONNX has no operator for; "
        "torch.onnx's own export of the model fails too") for f in ("grounding-dino", "mm-grounding-dino")},
    **{(f"transformers/{f}/*", "onnx"): (
        "Op (Squeeze) [ShapeInferenceError]",
        "torch.onnx writes `squeeze(2)` of a dim that is not 1 (a no-op in torch) as an ONNX Squeeze, which "
        "onnxruntime rejects on load; torch.onnx's own export of the model fails earlier, decomposing the graph")
       for f in ("nemotron3_5_asr", "nemotron_asr_streaming", "parakeet_rnnt", "parakeet_tdt")},
    ("transformers/deepseek_v2/*", "onnx"): _COMPLEX,
    ("transformers/llama4/*", "onnx"): _COMPLEX,
    ("transformers/llama4_text/*", "onnx"): _COMPLEX,
    ("transformers/phimoe/*", "fwd+bwd"): (
        "lose their backward in torch.export",
        "its router's sparsemixer is a custom autograd.Function (PhimoeMultiplier) whose backward torch.export "
        "drops, so its graph would train with other gradients than eager's; AOTAutograd alone, which keeps it, "
        "cannot trace the model's mask code (a size read into Python)"),
    ("transformers/resnet/base", "fwd+bwd"): (
        "does not give eager's results",
        "training-mode BatchNorm over two values per channel (a batch of 2 at 1x1 in the last stage) "
        "outputs bias ± weight·sqrt(var/(var+eps)) whatever its input, and the residual sum of two such "
        "outputs cancels: in channel 13 it is 6.6e-8 in float64, 6e-8 in eager's float32 and 0 in the "
        "graph's, one rounding apart, so the ReLU after it keeps a grad_output eager keeps and the graph "
        "drops; that channel's weight and bias gradients differ by it (0.459), export's check refuses the "
        "bundle, and the same export in float64 passes"),
    ("timm/cpubone", "fwd+bwd"): (
        "does not give eager's results",
        "a dropout after convolutions whose CPU kernels keep a channels-last layout where torch 2.14's "
        "fake kernels say contiguous: its mask is drawn in another memory order than eager's, and "
        "export's check refuses the bundle"),
}
