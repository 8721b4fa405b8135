// Module::train_step (aotc/runtime/joint_step.py): one call of the joint graph, its
// buffers updated by the epilogue, gradients accumulated as loss.backward() leaves them,
// or, with the optimizer in the graph, the new parameters and state copied into place
// (contract/optimizers.py's FusedOptimizer.apply). And the module's accessors.
#include <c10/core/GradMode.h>

#include "program.h"

namespace aotc {

namespace fs = std::filesystem;

at::Tensor Module::train_step(const std::vector<at::Tensor>& inputs) {
  ModuleState& s = *state_;
  auto it = s.programs.find("joint");
  if (it == s.programs.end()) {
    throw ModeError("train_step needs a joint bundle; this one has inference. Export a joint bundle (graphs=(\"joint\",); "
                    "aotc export --joint), or call forward for inference.");
  }
  s.check_inputs(inputs);
  Program& p = it->second->pick(inputs, s.bundle->path);  // a shape profile's package, if one holds
  s.check_aliasing(p, inputs);
  c10::AutoGradMode no_grad(false);
  std::vector<at::Tensor> args = s.graph_inputs(p, inputs);
  std::vector<at::Tensor> outs = s.run(p, args);
  s.epilogue(p, args, outs, inputs);  // buffers (BatchNorm's statistics) and user inputs mutated
  at::Tensor loss;
  std::vector<at::Tensor> targets, values;
  for (size_t o = 0; o < p.sig->outputs.size(); ++o) {
    const Slot& slot = p.sig->outputs[o];
    std::string target = slot.target.value_or("");
    if (slot.role == "loss") {
      loss = outs[o];
    } else if (slot.role == "updated_parameter") {
      targets.push_back(s.state[s.state_index.at(target)].second);
      values.push_back(outs[o]);
    } else if (slot.role == "optimizer_state") {
      for (auto& [name, t] : s.optimizer_state) {
        if (name == target) targets.push_back(t);
      }
      values.push_back(outs[o]);
    } else if (slot.role == "gradient" && !s.bundle->optimizer) {
      const std::string name = slot.name.substr(std::string("grad:").size());
      if (!outs[o].defined()) continue;
      for (const Slot& in : p.sig->inputs) {
        if (in.name != name || in.role != "parameter") continue;
        at::Tensor& grad = s.grads[in.target.value_or("")];
        // a graph output may be an input or share memory with another gradient: .grad gets its own
        grad = grad.defined() ? grad.add_(outs[o]) : outs[o].clone();
      }
    }
  }
  for (size_t k = 0; k < targets.size(); ++k) {
    if (!values[k].is_same(targets[k])) targets[k].copy_(values[k]);  // not written in place by the package
  }
  return loss;
}

const std::vector<std::pair<std::string, at::Tensor>>& Module::named_state() const { return state_->state; }

at::Tensor Module::get(const std::string& name) const {
  auto it = state_->state_index.find(name);
  if (it == state_->state_index.end()) throw InputError("the bundle has no parameter or buffer named '" + name + "'.");
  return state_->state[it->second].second;
}

at::Tensor Module::grad(const std::string& name) const {
  get(name);
  auto it = state_->grads.find(name);
  return it == state_->grads.end() ? at::Tensor() : it->second;
}

void Module::zero_grad() { state_->grads.clear(); }

c10::Device Module::device() const { return state_->device; }

std::string Module::optimizer() const { return state_->bundle->optimizer ? state_->bundle->optimizer->name : ""; }

double Module::hyperparameter(const std::string& name) const {
  auto it = state_->hyper_values.find(name);
  if (it == state_->hyper_values.end() || !state_->bundle->optimizer) {
    throw ModeError("this bundle's graph has no optimizer hyperparameter '" + name + "'" +
                    (state_->bundle->optimizer ? "" : ": export it with --optimizer") + ".");
  }
  return it->second;
}

void Module::set_hyperparameter(const std::string& name, double value) {
  hyperparameter(name);
  state_->hyper_values[name] = value;
  state_->hyper_stale = true;
}

void Module::save_weights(const std::string& path) const { detail::write_safetensors(path, state_->state); }

void Module::save_optimizer_state(const std::string& path) const {
  if (!state_->bundle->optimizer) throw ModeError("this bundle carries no optimizer; export it with --optimizer.");
  detail::write_safetensors(path, state_->optimizer_state);
}

void Module::load_optimizer_state(const std::string& path) {
  if (!state_->bundle->optimizer) throw ModeError("this bundle carries no optimizer; export it with --optimizer.");
  auto loaded = detail::read_safetensors(path);
  std::map<std::string, at::Tensor> by_name(loaded.begin(), loaded.end());
  for (auto& [name, t] : state_->optimizer_state) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw BundleError("'" + path + "': tensor '" + name + "' is missing; the joint graph takes it.");
    if (it->second.sizes() != t.sizes() || it->second.scalar_type() != t.scalar_type()) {
      throw BundleError("'" + path + "': tensor '" + name + "' is " + dtype_name(it->second.scalar_type()) + " " +
                        describe_shape(it->second.sizes()) + "; the joint graph takes " + dtype_name(t.scalar_type()) + " " +
                        describe_shape(t.sizes()) + ".");
    }
  }
  for (auto& [name, t] : state_->optimizer_state) t.copy_(by_name.at(name));
}

}  // namespace aotc
