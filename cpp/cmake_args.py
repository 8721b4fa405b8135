"""Print the CMake flags that build cpp/ against the running Python's torch.

A CPU wheel needs only its prefix path. A CUDA wheel's CMake config (Caffe2's cuda.cmake)
also wants a CUDA toolkit, found from CUDA_HOME (default /usr/local/cuda), and NVRTC,
which a toolkit without it lacks: the wheel's own library is named. The runtime's CUDA
code (CUDA-graph replay, src/cuda_graphs.cpp) goes through ATen's CUDAGraph and streams;
libtorch's CUDA libraries come from the wheel at run time.
"""

import glob
import os
from pathlib import Path

import torch

flags = [f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"]
if torch.version.cuda:
    flags.append(f"-DCUDA_TOOLKIT_ROOT_DIR={os.environ.get('CUDA_HOME', '/usr/local/cuda')}")
    nvrtc = sorted(glob.glob(str(Path(torch.__file__).parents[1] / "nvidia" / "*" / "lib" / "libnvrtc.so*")))
    nvrtc = [p for p in nvrtc if "builtins" not in p]
    if nvrtc:
        flags.append(f"-DCUDA_nvrtc_LIBRARY={nvrtc[0]}")
print(" ".join(flags))
