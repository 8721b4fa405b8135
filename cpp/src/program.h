// One loaded graph of a bundle, and the module state it runs on (module.cpp builds them,
// train.cpp runs joint steps with them).
#pragma once

#include <memory>

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "aotc/aotc.h"
#include "bundle_data.h"
#include "cuda_graphs.h"
#include "safetensors.h"

namespace aotc {

// Where a graph input comes from.
struct Source {
  enum Kind { kState, kUser, kOptimizerState, kHyperparameter, kConstant, kSaved, kTangent } kind;
  // into ModuleState::state, the flat user inputs, optimizer_state, hyper_names, constants;
  // a backward graph's: the forward's saved activations, the tangents in backward's order
  size_t index;
};

// A mutated input the epilogue writes back (aotc/runtime/epilogue.py's Mutation).
struct Mutation {
  size_t output;  // graph output holding the new value
  size_t input;   // graph input position of the mutated tensor
  bool data, metadata;
  std::optional<Layout> layout;
};

// One user output (epilogue.py's OutputPlan): how to make it from the graph's outputs.
struct OutputPlan {
  std::string kind;  // output_type
  int64_t output = -1;
  std::optional<int64_t> base, view_offset, same_as, view_of;
  std::optional<std::vector<int64_t>> size, stride, base_stride;
};

// The joint graph compiled to write new parameters, optimizer state and buffers into its
// inputs (exporters/aoti_updates.py): which outputs it no longer returns.
struct InPlaceUpdates {
  std::vector<std::pair<size_t, size_t>> writes;  // (output, input) of the full graph
  std::vector<size_t> kept;                        // outputs the package still returns
  size_t num_outputs = 0;
};

struct Program {
  std::string kind;
  const GraphSignature* sig = nullptr;
  const ProgramMeta* meta = nullptr;
  std::vector<Source> sources;        // per graph input
  std::vector<size_t> model_inputs;   // graph input position of each metadata input
  // the layout each user input must have: exact strides (static) or a dense order
  std::vector<std::optional<std::vector<int64_t>>> static_strides;
  std::vector<std::vector<int64_t>> dense_order;
  std::vector<bool> row_major;  // dense_order is 0, 1, ..., n-1
  std::vector<std::string> output_names;
  // a backward graph's: per tangent, the forward output it is the gradient of; per
  // gradient output, the forward input it belongs to and the tangents that reach it in eager
  std::vector<size_t> tangent_outputs;
  std::vector<size_t> grad_targets;
  std::vector<std::optional<std::vector<size_t>>> reached_from;
  std::vector<Mutation> mutations;
  std::vector<OutputPlan> outputs;
  std::vector<size_t> plain_outputs;     // user outputs taken as the graph returns them
  std::vector<size_t> aliases_in_order;  // user outputs that are rebuilt as views, dependencies first
  std::vector<size_t> bases;              // graph outputs that are intermediate bases
  std::vector<size_t> mutated_user_inputs;

  // the package
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  std::string workdir;
  std::vector<size_t> package_inputs;  // frozen or folded packages take these graph inputs only
  bool takes_all = true;
  std::optional<InPlaceUpdates> updates;
  std::unique_ptr<detail::FoldedConstants> fold;
  std::unordered_map<std::string, at::Tensor> folded;  // kept alive: the package was told they are user-managed
  std::vector<std::pair<c10::TensorImpl*, uint32_t>> fold_seen;
  std::vector<const void*> checked_pointers;  // of the last call that passed the disjointness check
  std::unique_ptr<detail::CudaGraphRun> cuda_graph;  // the package's runs replayed as CUDA graphs
  bool has_package = true;  // false: compiled for shape profiles alone (--no-generic)

  // shape profiles (aotc/profiles.py): each its own package, run when every size holds;
  // checked in order, as Python's ProfiledGraph does
  struct SizeCheck {
    size_t user_input;
    int64_t dim, lo, hi;
  };
  struct Profiled {
    std::vector<SizeCheck> checks;
    std::string label;  // the build's "profile", for errors
    std::unique_ptr<Program> program;
  };
  std::vector<Profiled> profiles;
  std::string profile;  // this program's profile label ("" for the generic package)

  // the program to run for these flat user inputs: a profile's, else this one
  Program& pick(const std::vector<at::Tensor>& flat, const std::string& bundle_path);
  // the program of profile `label` ("": this one): a backward runs its forward's profile
  Program& at(const std::string& label, const std::string& bundle_path);

  ~Program();
};

struct ModuleState {
  std::shared_ptr<const BundleData> bundle;
  c10::Device device = c10::Device(c10::kCPU);
  detail::NamedTensors state;  // parameters and buffers by fqn, on device
  std::map<std::string, size_t> state_index;
  std::map<std::string, at::Tensor> grads;
  detail::NamedTensors constants;
  std::map<std::string, std::unique_ptr<Program>> programs;
  // a joint bundle that carries its optimizer
  detail::NamedTensors optimizer_state;  // '<fqn>/<key>'
  std::vector<std::string> hyper_names;
  std::map<std::string, double> hyper_values;
  std::vector<at::Tensor> hyper_tensors;  // 0-d float64, remade when a value changes
  bool hyper_stale = true;
  // a forward+backward bundle: what the last forward left for backward
  std::vector<at::Tensor> saved, visible;  // its saved activations; its outputs (for zero gradients)
  bool backward_pending = false;
  std::string backward_profile;  // the shape profile that forward ran, whose backward package takes them

  // Keep what the backward graph needs from a forward call's outputs, before the epilogue
  // mutates the inputs (an activation saved from a mutated input is copied first).
  void stash_for_backward(const Program& forward, const std::vector<at::Tensor>& args, const std::vector<at::Tensor>& outs);

  // The full graph input list of `p` for the flat user inputs (checked already).
  std::vector<at::Tensor> graph_inputs(Program& p, const std::vector<at::Tensor>& flat);
  // Run the package: the full graph's outputs (inputs where it wrote new values in place).
  std::vector<at::Tensor> run(Program& p, std::vector<at::Tensor>& args);
  std::string run_failure(const std::string& kind, const std::string& what) const;
  // Checks of layer 1 (runtime/inputs.py): count, dtype, device, shapes within ranges.
  void check_inputs(const std::vector<at::Tensor>& flat) const;
  void check_aliasing(const Program& p, const std::vector<at::Tensor>& flat) const;
  // Epilogue: mutations applied to the caller's tensors, aliased outputs as views.
  std::vector<at::Tensor> epilogue(const Program& p, const std::vector<at::Tensor>& args,
                                   const std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& flat) const;
};

std::string describe_shape(at::IntArrayRef shape);

// package.cpp: load the compiled package of `program` for `device` into it (BundleError when
// the bundle has none for the device, or it was built for another machine or changed).
void attach_package(Program& program, const BundleData& b, const c10::Device& device, const LoadOptions& options,
                    const std::string& rel = "");
// The packages of the shape profiles compiled for `kind` on `device`: (path, build's "profile"), in order.
std::vector<std::pair<std::string, std::string>> profile_packages(const BundleData& b, const std::string& kind,
                                                                  const c10::Device& device);
std::vector<Program::SizeCheck> size_checks(const BundleData& b, const std::string& profile);

// A module's state, for tools in this repo that time its parts (aotc-run --bench).
struct ModuleAccess {
  static ModuleState& state(Module& m) { return *m.state_; }
};

}  // namespace aotc
