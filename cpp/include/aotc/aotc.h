// aotc's C++ runtime: serve and train aotc bundles with no Python.
//
//   aotc::Bundle bundle = aotc::Bundle::open("bundle/");   // hashes (and signature) checked
//   aotc::Module model = bundle.load(torch::kCPU);          // compiled packages loaded
//   aotc::Outputs out = model.forward({x});                 // out["output[0]"], out.values[0]
//   at::Tensor loss = trainer.train_step({batch});          // a joint bundle: one whole step
//
// It reads the same files as the Python runtime (aotc.load), applies the same checks in
// the same order and raises the same errors (errors.h) with the same messages. What it
// does not replay (tensor subclasses, regional and generation bundles, inputs captured as
// views of one tensor, non-tensor inputs or outputs, forward+backward graphs) is refused
// by name when the bundle is loaded: `Bundle::cpp_support()` says which graphs run.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include "aotc/errors.h"

namespace aotc {

struct BundleData;   // the parsed manifest, signature and metadata (src/bundle_data.h)
struct ModuleState;  // a loaded module's weights, packages and plans (src/module.cpp)
class Module;

// Options of Bundle::open.
struct OpenOptions {
  // PEM public keys of the trust policy. Unset: those AOTC_PUBLIC_KEYS lists (':'-separated);
  // an empty list asks for no signature. With keys, the bundle is used only when one of them
  // signed exactly its files, checked before any other file is read.
  std::optional<std::vector<std::string>> public_keys;
};

// Options of Bundle::load.
struct LoadOptions {
  // Replay each compiled CUDA package as a CUDA graph, recorded once per input signature
  // (at most `max_graph_shapes` of them per graph), as aotc.load(..., cuda_graphs=True):
  // CudaGraphError where a recording could not replay eager (not CUDA, random ops, CPU
  // inputs, a signature past the limit).
  bool cuda_graphs = false;
  size_t max_graph_shapes = 8;
};

// A bundle directory, opened: every listed file's size and sha256 checked, the JSON parsed
// and validated. Runs nothing.
class Bundle {
 public:
  static Bundle open(const std::string& path, const OpenOptions& options = {});

  const std::string& path() const;
  std::vector<std::string> graph_kinds() const;
  // the flat user inputs forward()/train_step() take, in order
  std::vector<std::string> input_names() const;
  // graph kind -> "" when the C++ runtime can run it, else why not
  std::map<std::string, std::string> cpp_support() const;
  // the devices a graph kind has a compiled package for
  std::vector<std::string> compiled_devices(const std::string& kind) const;
  // the key that signed the bundle, when keys were configured
  const std::string& signed_by() const;

  // Load the bundle's compiled packages for `device` (BundleError naming what is missing).
  Module load(c10::Device device = c10::Device(c10::kCPU), const LoadOptions& options = {}) const;

  std::shared_ptr<const BundleData> data() const { return data_; }

 private:
  std::shared_ptr<const BundleData> data_;
};

// What the first CPU package loaded did with glibc's heap (aotc/runtime/heap.py): "kept"
// (memory a call frees stays in the process for the next call instead of being faulted in
// anew), "off: <why>" (AOTC_KEEP_HEAP=0, the environment's own malloc settings, not
// glibc), or "" before any CPU package was loaded.
std::string heap_state();

// A call's outputs, named as the bundle's signature names them ("output[0]", "logits", ...).
struct Outputs {
  std::vector<std::string> names;
  std::vector<at::Tensor> values;
  const at::Tensor& operator[](const std::string& name) const;
  size_t size() const { return values.size(); }
};

// A loaded bundle: owns its parameters and buffers (read from weights.safetensors, mapped),
// and, for a joint bundle that carries its optimizer, the optimizer's state.
class Module {
 public:
  // Run the inference graph on the flat user inputs (input_names() order). Inputs are
  // checked (count, dtype, device, shapes within the exported ranges); input and buffer
  // mutations are applied to the caller's tensors; outputs that alias inputs are views.
  Outputs forward(const std::vector<at::Tensor>& inputs);

  // One whole training step of a joint bundle; returns the loss. Parameters and buffers
  // are updated in place; with an optimizer in the graph, its state too. Without one,
  // gradients accumulate into grad(name), as loss.backward() would.
  at::Tensor train_step(const std::vector<at::Tensor>& inputs);

  // A forward+backward bundle: forward() runs the forward graph (train mode: BatchNorm's
  // batch statistics, dropout) and keeps its saved activations; backward() takes one
  // gradient per output (undefined for an output without one, as a None grad) and runs the
  // backward graph: the parameters' gradients accumulate into grad(name), as
  // loss.backward() leaves .grad; the user inputs' gradients are returned (undefined where
  // an input takes none). Each forward serves one backward.
  std::vector<at::Tensor> backward(const std::vector<at::Tensor>& grad_outputs);

  // Parameters and buffers by fully qualified name, as weights.safetensors names them.
  const std::vector<std::pair<std::string, at::Tensor>>& named_state() const;
  at::Tensor get(const std::string& name) const;
  // The gradient train_step accumulated for a parameter (undefined before any step, and
  // always for a bundle whose graph runs the optimizer, as eager's zero_grad leaves it).
  at::Tensor grad(const std::string& name) const;
  void zero_grad();

  // Optimizer of a joint bundle that carries one ("sgd", "adamw"); "" otherwise.
  std::string optimizer() const;
  // Its hyperparameters (lr, momentum, weight_decay / lr, beta1, beta2, eps, weight_decay),
  // settable between steps as a scheduler does.
  double hyperparameter(const std::string& name) const;
  void set_hyperparameter(const std::string& name, double value);

  // Parameters and buffers as safetensors (aotc.load(...).load_state_dict reads them), and
  // the optimizer's state as '<fqn>/<key>' tensors (the bundle's optimizer.safetensors
  // format). Writes are atomic.
  void save_weights(const std::string& path) const;
  void save_optimizer_state(const std::string& path) const;
  void load_optimizer_state(const std::string& path);

  c10::Device device() const;

 private:
  friend class Bundle;
  friend struct ModuleAccess;  // src/program.h: the state, for aotc-run's --bench
  explicit Module(std::shared_ptr<ModuleState> state) : state_(std::move(state)) {}
  std::shared_ptr<ModuleState> state_;
};

// safetensors files, as the bundle's weights are stored: read mapped (copy-on-write, checked
// as the Python side checks them), written atomically.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
NamedTensors load_safetensors(const std::string& path);
void save_safetensors(const std::string& path, const NamedTensors& tensors);

}  // namespace aotc
