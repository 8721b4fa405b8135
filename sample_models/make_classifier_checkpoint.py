"""Write classifier.safetensors (deterministic weights for classifier.py) next to this script."""
import importlib.util
import math
import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_classifier_module():
    spec = importlib.util.spec_from_file_location("classifier", os.path.join(HERE, "classifier.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    mod = _load_classifier_module()
    model = mod.build_model()
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    path = os.path.join(HERE, mod.CHECKPOINT)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(state)} tensors)")


if __name__ == "__main__":
    main()
