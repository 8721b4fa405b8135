// CUDA-graph replay of a compiled package (aotc/runtime/cuda_graphs.py, the same rules):
// recorded once per input signature after an unrecorded first run, then replayed with
// the call's user inputs copied into the recording's own; parameters, buffers, optimizer
// state and constants read in place (a call where one moved records again); outputs
// returned as copies. Built only against a libtorch with CUDA (AOTC_WITH_CUDA).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

namespace aotc::detail {

class CudaGraphRun {
 public:
  // `roles`: the signature role of each package input; `max_shapes`: recordings before a
  // new input signature is refused; `what` names the graph in errors.
  CudaGraphRun(const std::vector<std::string>& roles, size_t max_shapes, std::string what);
  ~CudaGraphRun();
  std::vector<at::Tensor> run(torch::inductor::AOTIModelPackageLoader& loader, const std::vector<at::Tensor>& args);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aotc::detail
