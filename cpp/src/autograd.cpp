// Forward+backward bundles from C++ (runtime/autograd_fn.py's GraphFunction without
// autograd): forward() keeps the forward graph's saved activations, backward() feeds them
// and the outputs' gradients to the backward graph, accumulates the parameters' gradients
// into grad(name) as loss.backward() would, and returns the user inputs'.
#include <c10/core/GradMode.h>

#include "program.h"

namespace aotc {

void ModuleState::stash_for_backward(const Program& forward, const std::vector<at::Tensor>& args,
                                     const std::vector<at::Tensor>& outs) {
  saved.clear();
  visible.clear();
  std::vector<std::pair<const char*, const char*>> mutated;  // storages the epilogue writes into
  for (const Mutation& m : forward.mutations) {
    const at::Tensor& t = args[m.input];
    auto begin = static_cast<const char*>(t.storage().data());
    mutated.emplace_back(begin, begin + t.storage().nbytes());
  }
  for (size_t o = 0; o < forward.sig->outputs.size(); ++o) {
    if (forward.sig->outputs[o].role != "saved") {
      visible.push_back(outs[o]);
      continue;
    }
    at::Tensor t = outs[o];
    if (t.defined() && t.has_storage()) {
      auto p = static_cast<const char*>(t.data_ptr());
      for (const auto& [a, b] : mutated) {
        if (a <= p && p <= b) {
          t = t.clone();  // the mutation would change it under the backward graph
          break;
        }
      }
    }
    saved.push_back(t);
  }
  backward_pending = true;
  backward_profile = forward.profile;
}

std::vector<at::Tensor> Module::backward(const std::vector<at::Tensor>& grad_outputs) {
  ModuleState& s = *state_;
  auto it = s.programs.find("backward");
  if (it == s.programs.end()) {
    throw ModeError("backward needs a forward+backward bundle (aotc export --autograd); this one has " +
                    s.bundle->graph_kinds.front() + ".");
  }
  if (!s.backward_pending) {
    throw ModeError("backward needs a forward call first: each forward's saved activations serve one backward.");
  }
  Program& p = it->second->at(s.backward_profile, s.bundle->path);  // the package of the forward's profile
  const Program& forward = *s.programs.at("forward");
  if (grad_outputs.size() != forward.outputs.size()) {
    throw InputError("backward takes one gradient per output (" + std::to_string(forward.outputs.size()) +
                     ", undefined for those without one); got " + std::to_string(grad_outputs.size()) + ".");
  }
  // the user output each graph output position is, and which of them take a gradient
  std::map<size_t, size_t> user_of;
  for (size_t i = 0; i < forward.outputs.size(); ++i) user_of[forward.outputs[i].output] = i;
  std::vector<bool> takes(grad_outputs.size(), false), given(p.tangent_outputs.size(), false);
  std::vector<at::Tensor> tangents;
  for (size_t k = 0; k < p.tangent_outputs.size(); ++k) {
    size_t user = user_of.at(p.tangent_outputs[k]);
    takes[user] = true;
    const at::Tensor& g = grad_outputs[user];
    given[k] = g.defined();
    const at::Tensor& out = s.visible.at(p.tangent_outputs[k]);  // saved activations come after the outputs
    if (g.defined() && (!g.sizes().equals(out.sizes()) || g.scalar_type() != out.scalar_type() || g.device() != out.device())) {
      throw InputError("the gradient of output '" + forward.output_names[user] + "' is " + dtype_name(g.scalar_type()) + " " +
                       describe_shape(g.sizes()) + "; the output is " + dtype_name(out.scalar_type()) + " " +
                       describe_shape(out.sizes()) + ".");
    }
    tangents.push_back(g.defined() ? g.contiguous() : at::zeros_like(out, at::MemoryFormat::Contiguous));
  }
  for (size_t i = 0; i < grad_outputs.size(); ++i) {
    if (grad_outputs[i].defined() && !takes[i]) {
      throw InputError("output '" + forward.output_names[i] + "' takes no gradient: in eager it does not require grad.");
    }
  }
  c10::AutoGradMode no_grad(false);
  std::vector<at::Tensor> args;
  for (const Source& src : p.sources) {
    args.push_back(src.kind == Source::kSaved ? s.saved.at(src.index)
                   : src.kind == Source::kTangent ? tangents[src.index] : s.constants[src.index].second);
  }
  std::vector<at::Tensor> outs = s.run(p, args);
  s.saved.clear();
  s.visible.clear();
  s.backward_pending = false;
  std::vector<at::Tensor> input_grads(s.bundle->user_input_names.size());
  for (size_t o = 0; o < outs.size() && o < p.grad_targets.size(); ++o) {
    const auto& reached = p.reached_from[o];
    bool reaches = !reached || std::any_of(reached->begin(), reached->end(), [&](size_t k) { return given[k]; });
    if (!outs[o].defined() || !reaches) continue;  // eager leaves such a .grad as it was
    const Source& target = forward.sources[p.grad_targets[o]];
    if (target.kind == Source::kUser) {
      input_grads[target.index] = outs[o];
    } else if (target.kind == Source::kState) {
      at::Tensor& grad = s.grads[s.state[target.index].first];
      grad = grad.defined() ? grad.add_(outs[o]) : outs[o].clone();
    }
  }
  return input_grads;
}

}  // namespace aotc
