// Bundle::load: weights read (mapped) and checked, the per-call plans of each graph built
// once from the metadata, and its package loaded (package.cpp).
#include <set>

#include <ATen/detail/CUDAHooksInterface.h>

#include "program.h"

namespace aotc {

namespace fs = std::filesystem;

namespace {

const std::set<std::string> kModelRoles = {"parameter", "buffer", "user_input", "synthetic_base"};

std::vector<int64_t> dense_order_of(const std::vector<int64_t>& stride) {
  std::vector<int64_t> order(stride.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int64_t>(d);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::make_pair(-stride[a], -a) < std::make_pair(-stride[b], -b);
  });
  return order;
}

void plan_epilogue(Program& p) {
  const GraphSignature& sig = *p.sig;
  const ProgramMeta& meta = *p.meta;
  auto output_named = [&](const std::string& name) -> size_t {
    for (size_t o = 0; o < sig.outputs.size(); ++o) {
      if (sig.outputs[o].name == name) return o;
    }
    throw BundleError("signature.json: the " + p.kind + " graph has no output '" + name + "' that metadata.json names.");
  };
  for (size_t k = 0; k < meta.inputs.size(); ++k) {
    const InputMeta& info = meta.inputs[k];
    if (info.kind == "user_input" && info.mutation_type != "NOT_MUTATED") p.mutated_user_inputs.push_back(k);
    if (info.mutation_type != "MUTATED_OUT_GRAPH") continue;
    size_t input = p.model_inputs[k];
    p.mutations.push_back(Mutation{output_named("mutated:" + sig.inputs[input].name), input, info.mutates_data,
                                   info.mutates_metadata, info.layout_after});
  }
  std::map<int64_t, size_t> user;
  for (size_t o = 0; o < sig.outputs.size(); ++o) {
    const Slot& s = sig.outputs[o];
    if ((s.role == "user_output" || s.role == "loss") && s.index) user[*s.index] = o;
    if (s.role == "intermediate_base") p.bases.push_back(o);
  }
  std::vector<size_t> dependent;
  for (size_t i = 0; i < meta.outputs.size(); ++i) {
    const OutputMeta& o = meta.outputs[i];
    OutputPlan plan;
    plan.kind = o.output_type;
    if (!user.count(o.index)) throw BundleError("signature.json: no graph output is user output " + std::to_string(o.index) + ".");
    plan.output = static_cast<int64_t>(user[o.index]);
    plan.base = o.base_idx;
    plan.view_offset = o.view_offset;
    plan.same_as = o.same_as_output;
    plan.view_of = o.view_of_output;
    if (o.tensor && o.tensor->dynamic_dims.empty()) {
      plan.size = o.tensor->shape;
      plan.stride = o.tensor->stride;
      if (o.output_type == "alias_of_input" && o.base_idx && *o.base_idx < static_cast<int64_t>(meta.inputs.size())) {
        const InputMeta& base = meta.inputs[*o.base_idx];
        if (base.mutates_metadata) {
          if (base.layout_after) plan.base_stride = base.layout_after->stride;
        } else if (base.tensor && base.tensor->dynamic_dims.empty()) {
          plan.base_stride = base.tensor->stride;
        }
      }
    }
    if (plan.kind == "alias_of_input" || plan.kind == "is_input") {
      if (!plan.base || *plan.base >= static_cast<int64_t>(p.model_inputs.size())) {
        throw BundleError("metadata.json: output " + std::to_string(i) + " of the " + p.kind + " graph aliases no input.");
      }
    }
    bool plain = plan.kind == "non_alias" || plan.kind == "unsafe_view_alias" || plan.kind == "custom_function_view";
    bool depends = plan.kind == "alias_of_intermediate_base_is_user_output" || plan.same_as || plan.view_of;
    if (plain) p.plain_outputs.push_back(i);
    if (!plain || plan.same_as || plan.view_of) (depends ? dependent : p.aliases_in_order).push_back(i);
    p.outputs.push_back(std::move(plan));
  }
  p.aliases_in_order.insert(p.aliases_in_order.end(), dependent.begin(), dependent.end());
}

// The backward graph's inputs (saved activations, tangents, constants) and where each of
// its gradients goes (runtime/autograd_fn.py's TrainingGraphs.build).
void plan_backward(Program& p, const BundleData& b, std::map<std::string, size_t>& constant_index, ModuleState& state) {
  const GraphSignature& fw = b.graphs.at("forward");
  auto position = [](const std::vector<Slot>& slots, const std::string& name) -> std::optional<size_t> {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].name == name) return i;
    }
    return std::nullopt;
  };
  std::map<std::string, size_t> tangent_of;
  for (const Slot& s : p.sig->inputs) {
    if (s.role == "saved") {
      p.sources.push_back({Source::kSaved, static_cast<size_t>(s.index.value_or(0))});
    } else if (s.role == "tangent") {
      auto out = position(fw.outputs, s.target.value_or(""));
      if (!out || fw.outputs[*out].role != "user_output") {
        throw BundleError("Bundle '" + b.path + "': the backward graph takes a gradient for '" + s.target.value_or("") +
                          "', which is not an output of the forward graph the C++ runtime can give it.");
      }
      tangent_of[s.name] = p.tangent_outputs.size();
      p.sources.push_back({Source::kTangent, p.tangent_outputs.size()});
      p.tangent_outputs.push_back(*out);
    } else if (s.role == "constant") {
      std::string target = s.target.value_or("");
      auto it = state.state_index.find(target);
      if (it == state.state_index.end()) {
        throw BundleError("'" + b.path + "/weights.safetensors': tensor '" + target +
                          "' is missing; the backward graph takes it as a constant.");
      }
      if (!constant_index.count(target)) {
        constant_index[target] = state.constants.size();
        state.constants.emplace_back(target, state.state[it->second].second);
      }
      p.sources.push_back({Source::kConstant, constant_index[target]});
    } else {
      throw BundleError("Bundle '" + b.path + "': the backward graph's input '" + s.name + "' has role '" + s.role +
                        "', which the C++ runtime does not feed.");
    }
  }
  for (const Slot& s : p.sig->outputs) {
    auto target = position(fw.inputs, s.name.substr(std::min(s.name.size(), std::string("grad:").size())));
    if (!target) throw BundleError("Bundle '" + b.path + "': the backward graph's output '" + s.name + "' is the gradient of no input.");
    p.grad_targets.push_back(*target);
    auto reached = p.sig->reached_from.find(s.name);
    if (reached == p.sig->reached_from.end()) {
      p.reached_from.push_back(std::nullopt);
      continue;
    }
    std::vector<size_t> tangents;
    for (const std::string& t : reached->second) {
      if (tangent_of.count(t)) tangents.push_back(tangent_of[t]);
    }
    p.reached_from.push_back(tangents);
  }
}

}  // namespace

std::string describe_shape(at::IntArrayRef shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

Module Bundle::load(c10::Device device, const LoadOptions& options) const {
  const BundleData& b = *data_;
  if (device.is_cuda() && !at::hasCUDA()) {
    throw DeviceError("device '" + device.str() + "' is not available here: this libtorch has no CUDA, or no GPU is present.");
  }
  if (!device.is_cpu() && !device.is_cuda()) throw DeviceError("device '" + device.str() + "' is not supported; use cpu or cuda.");
  if (device.is_cuda()) {
    // "cuda" is the first GPU, as tensors made for it say: cuda:0
    if (!device.has_index()) device = c10::Device(c10::kCUDA, 0);
    if (device.index() >= at::detail::getCUDAHooks().deviceCount()) {
      throw DeviceError("device '" + device.str() + "' is not present: this machine has " +
                        std::to_string(at::detail::getCUDAHooks().deviceCount()) + " GPU(s).");
    }
  }
  if (options.cuda_graphs && !device.is_cuda()) {
    throw CudaGraphError("cuda_graphs records CUDA kernels; this module is loaded for '" + device.str() +
                         "'. Load it for cuda.");
  }
  if (options.cuda_graphs && options.max_graph_shapes < 1) {
    throw CudaGraphError("max_graph_shapes must be at least 1 with cuda_graphs.");
  }
  auto state = std::make_shared<ModuleState>();
  state->bundle = data_;
  state->device = device;
  for (const std::string& kind : b.graph_kinds) {
    std::string why = b.cpp_refusal(kind);
    if (!why.empty()) {
      throw BundleError("Bundle '" + b.path + "': its " + kind + " graph cannot run from C++: " + why + ".");
    }
  }
  // weights, once for every graph, checked against what the graphs take
  for (auto& [name, t] : detail::read_safetensors(fs::path(b.path) / "weights.safetensors")) {
    state->state_index[name] = state->state.size();
    state->state.emplace_back(name, device.is_cpu() ? t : t.to(device));
  }
  std::map<std::string, size_t> constant_index;
  for (const std::string& kind : b.graph_kinds) {
    auto p = std::make_unique<Program>();
    p->kind = kind;
    p->sig = &b.graphs.at(kind);
    if (kind == "backward") {
      plan_backward(*p, b, constant_index, *state);
      attach_package(*p, b, device, options);
      // a package per shape profile, run after a forward of that profile (Program::at)
      for (const auto& [rel, profile] : profile_packages(b, kind, device)) {
        auto q = std::make_unique<Program>();
        q->kind = kind;
        q->sig = p->sig;
        plan_backward(*q, b, constant_index, *state);
        attach_package(*q, b, device, options, rel);
        q->profile = profile;
        p->profiles.push_back({{}, profile, std::move(q)});
      }
      state->programs[kind] = std::move(p);
      continue;
    }
    auto wire = [&](Program& q) {
      q.kind = kind;
      q.sig = &b.graphs.at(kind);
      q.meta = &b.programs.at(kind);
      for (size_t i = 0; i < q.sig->inputs.size(); ++i) {
        const Slot& s = q.sig->inputs[i];
        std::string target = s.target.value_or("");
        if (kModelRoles.count(s.role)) q.model_inputs.push_back(i);
        if (s.role == "parameter" || s.role == "buffer") {
          auto it = state->state_index.find(target);
          if (it == state->state_index.end()) {
            throw BundleError("'" + b.path + "/weights.safetensors': tensor '" + target + "' is missing; the " + kind + " graph takes it.");
          }
          const InputMeta& info = q.meta->inputs[q.model_inputs.size() - 1];
          const at::Tensor& t = state->state[it->second].second;
          if (info.tensor && (t.scalar_type() != info.tensor->dtype || t.sizes().vec() != info.tensor->shape)) {
            throw BundleError("'" + b.path + "/weights.safetensors': tensor '" + target + "' is " + dtype_name(t.scalar_type()) +
                              " " + describe_shape(t.sizes()) + ", metadata.json says " + info.tensor->dtype_name + " " +
                              describe_shape(info.tensor->shape) + ".");
          }
          q.sources.push_back({Source::kState, it->second});
        } else if (s.role == "user_input") {
          q.sources.push_back({Source::kUser, static_cast<size_t>(*s.index)});
        } else if (s.role == "constant") {
          if (!constant_index.count(target)) {
            auto it = state->state_index.find(target);
            if (it == state->state_index.end()) {
              throw BundleError("'" + b.path + "/weights.safetensors': tensor '" + target + "' is missing; the " + kind +
                                " graph takes it as a constant.");
            }
            constant_index[target] = state->constants.size();
            state->constants.emplace_back(target, state->state[it->second].second);
          }
          q.sources.push_back({Source::kConstant, constant_index[target]});
        } else if (s.role == "optimizer_state" || s.role == "hyperparameter") {
          q.sources.push_back({s.role == "optimizer_state" ? Source::kOptimizerState : Source::kHyperparameter, 0});
        } else {
          throw BundleError("Bundle '" + b.path + "': the " + kind + " graph's input '" + s.name + "' has role '" + s.role +
                            "', which the C++ runtime does not feed.");
        }
      }
      for (const TensorMeta& t : b.user_inputs) {
        q.static_strides.push_back(t.dynamic_dims.empty() ? std::optional<std::vector<int64_t>>(t.stride) : std::nullopt);
        q.dense_order.push_back(dense_order_of(t.stride));
        const auto& order = q.dense_order.back();
        q.row_major.push_back(std::is_sorted(order.begin(), order.end()));
      }
      plan_epilogue(q);
      for (const OutputPlan& plan : q.outputs) q.output_names.push_back(q.sig->outputs[plan.output].name);
    };
    wire(*p);
    attach_package(*p, b, device, options);
    // each shape profile (aotc/profiles.py): the same program on its own package
    for (const auto& [rel, profile] : profile_packages(b, kind, device)) {
      auto q = std::make_unique<Program>();
      wire(*q);
      attach_package(*q, b, device, options, rel);
      q->profile = profile;
      p->profiles.push_back({size_checks(b, profile), profile, std::move(q)});
    }
    state->programs[kind] = std::move(p);
  }
  if (b.optimizer) {
    const OptimizerInfo& info = *b.optimizer;
    auto stored = detail::read_safetensors(fs::path(b.path) / "optimizer.safetensors");
    std::map<std::string, at::Tensor> by_name(stored.begin(), stored.end());
    const Program& joint = *state->programs.at("joint");
    for (size_t i = 0; i < joint.sig->inputs.size(); ++i) {
      const Slot& s = joint.sig->inputs[i];
      if (s.role != "optimizer_state") continue;
      auto it = by_name.find(s.target.value_or(""));
      if (it == by_name.end()) {
        throw BundleError("'" + b.path + "/optimizer.safetensors': tensor '" + s.target.value_or("") +
                          "' is missing; the joint graph takes it.");
      }
      state->optimizer_state.emplace_back(it->first, it->second.to(device).clone());
    }
    for (const Slot& s : joint.sig->inputs) {
      if (s.role == "hyperparameter") state->hyper_names.push_back(s.target.value_or(""));
    }
    state->hyper_values = info.hyperparameters;
    for (const std::string& name : state->hyper_names) {
      if (!state->hyper_values.count(name)) {
        throw BundleError("Bundle '" + b.path + "': metadata.json gives the optimizer no hyperparameter '" + name + "'.");
      }
    }
    // number the optimizer inputs in their order among the graph's inputs
    Program& generic = *state->programs.at("joint");
    std::vector<Program*> joints = {&generic};
    for (auto& profiled : generic.profiles) joints.push_back(profiled.program.get());
    for (Program* j : joints) {
      size_t next_state = 0, next_hyper = 0;
      for (Source& src : j->sources) {
        if (src.kind == Source::kOptimizerState) src.index = next_state++;
        if (src.kind == Source::kHyperparameter) src.index = next_hyper++;
      }
    }
  }
  return Module(state);
}

}  // namespace aotc
