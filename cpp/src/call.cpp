// A call of a loaded module: the input checks of aotc/runtime/inputs.py, the package run
// (folded constants kept in step with the weights; a joint graph's in-place updates), and
// the epilogue of aotc/runtime/epilogue.py. Messages are the Python runtime's.
#include <c10/core/GradMode.h>

#include "program.h"

namespace aotc {

namespace {

std::string torch_dtype(c10::ScalarType t) { return "torch." + dtype_name(t); }

std::string describe_dims(const TensorMeta& m) {
  std::string out = "(";
  for (size_t i = 0; i < m.shape.size(); ++i) {
    auto d = m.dynamic_dims.find(static_cast<int64_t>(i));
    out += (i ? ", " : "") + (d != m.dynamic_dims.end() ? d->second.symbol : std::to_string(m.shape[i]));
  }
  return out + ")";
}

// The strides of dims longer than 1 (the others say nothing about memory).
std::vector<int64_t> significant(at::IntArrayRef size, at::IntArrayRef stride) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] != 1) out.push_back(stride[i]);
  }
  return out;
}

std::vector<int64_t> dense_strides(at::IntArrayRef shape, const std::vector<int64_t>& order) {
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    strides[*d] = step;
    step *= std::max<int64_t>(shape[*d], 1);
  }
  return strides;
}

bool has_size_one(const at::Tensor& t) {
  for (int64_t n : t.sizes()) {
    if (n == 1) return true;
  }
  return false;
}

std::pair<int64_t, int64_t> byte_span(const at::Tensor& t) {
  int64_t lo = t.storage_offset(), hi = lo;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo * static_cast<int64_t>(t.element_size()), (hi + 1) * static_cast<int64_t>(t.element_size())};
}

bool may_overlap(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || !a.has_storage() || !b.has_storage()) return false;
  if (a.storage().data() != b.storage().data()) return false;
  auto [a_lo, a_hi] = byte_span(a);
  auto [b_lo, b_hi] = byte_span(b);
  return a_lo < b_hi && b_lo < a_hi;
}

// epilogue.py's _view_of: `raw` as a view of `base`, laid out as eager's output was.
at::Tensor view_of(const at::Tensor& base, const at::Tensor& raw, const OutputPlan& plan) {
  std::vector<int64_t> size, stride;
  int64_t start;
  if (raw.has_storage() && raw.storage().data() == base.storage().data()) {
    size = raw.sizes().vec();
    stride = raw.strides().vec();
    start = raw.storage_offset();
  } else {
    if (plan.base_stride && significant(base.sizes(), base.strides()) != significant(base.sizes(), *plan.base_stride)) {
      throw InputError("an input is laid out with strides " + describe_shape(base.strides()) + ", unlike at export " +
                       describe_shape(*plan.base_stride) + ", and output " + std::to_string(plan.output) +
                       " is a view of it that the compiled graph cannot rebuild for that layout. Pass the input laid "
                       "out as at export, or load the bundle with backend='fx'.");
    }
    start = base.storage_offset() + (plan.view_offset ? *plan.view_offset : raw.storage_offset());
    size = plan.size ? *plan.size : raw.sizes().vec();
    stride = plan.stride ? *plan.stride : raw.strides().vec();
  }
  return base.as_strided(size, stride, start);
}

}  // namespace

void ModuleState::check_inputs(const std::vector<at::Tensor>& flat) const {
  const BundleData& b = *bundle;
  const auto& names = b.user_input_names;
  if (flat.size() != names.size()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw InputError("expected " + std::to_string(names.size()) + " input(s) (" + list + "); got " +
                     std::to_string(flat.size()) + ".");
  }
  // the size each dynamic symbol took first in this call: (symbol, size, input, dim);
  // no strings are built unless a check fails (this runs on every call)
  struct Seen {
    const std::string* symbol;
    int64_t size;
    size_t input;
    int64_t dim;
  };
  c10::SmallVector<Seen, 8> sizes;
  for (size_t k = 0; k < flat.size(); ++k) {
    const std::string& name = names[k];
    const TensorMeta& m = b.user_inputs[k];
    const at::Tensor& value = flat[k];
    if (!value.defined()) throw InputError("input '" + name + "' is an undefined tensor; the bundle expects a tensor.");
    if (value.scalar_type() != m.dtype) {
      throw InputError("input '" + name + "' has dtype " + dtype_name(value.scalar_type()) + "; the bundle expects " +
                       m.dtype_name + ". Convert it with .to(" + torch_dtype(m.dtype) + ").");
    }
    if (value.device() != device) {
      throw InputError("input '" + name + "' is on " + value.device().str() + "; the bundle was loaded for " + device.str() +
                       ". Move it with .to('" + device.str() + "').");
    }
    if (m.dynamic_dims.empty()) {
      if (!value.sizes().equals(m.shape)) {
        throw InputError("input '" + name + "' has shape " + describe_shape(value.sizes()) + "; the bundle expects " +
                         describe_shape(m.shape) + " (no dynamic dims were exported; export with dynamic_shapes=, or aotc "
                         "export --dynamic NAME:DIM).");
      }
      continue;
    }
    if (value.dim() != static_cast<int64_t>(m.shape.size())) {
      throw InputError("input '" + name + "' has shape " + describe_shape(value.sizes()) + "; the bundle expects " +
                       describe_dims(m) + ".");
    }
    for (int64_t i = 0; i < value.dim(); ++i) {
      int64_t size = value.size(i);
      auto d = m.dynamic_dims.find(i);
      if (d == m.dynamic_dims.end()) {
        if (size != m.shape[i]) {
          throw InputError("input '" + name + "' has shape " + describe_shape(value.sizes()) + "; the bundle expects " +
                           describe_dims(m) + " (dim " + std::to_string(i) + " is static).");
        }
        continue;
      }
      const DynamicDim& dim = d->second;
      if (size < dim.min || (dim.max && size > *dim.max)) {
        throw InputError("input '" + name + "' dim " + std::to_string(i) + " is " + std::to_string(size) +
                         ", outside the exported range [" + std::to_string(dim.min) + ", " +
                         (dim.max ? std::to_string(*dim.max) : "inf") + "] of " + dim.symbol + ". Re-export with a wider range.");
      }
      auto seen = std::find_if(sizes.begin(), sizes.end(), [&](const Seen& x) { return *x.symbol == dim.symbol; });
      if (seen == sizes.end()) {
        sizes.push_back({&dim.symbol, size, k, i});
      } else if (seen->size != size) {
        throw InputError("input '" + name + "' dim " + std::to_string(i) + " is " + std::to_string(size) + ", but " +
                         names[seen->input] + " dim " + std::to_string(seen->dim) + " is " + std::to_string(seen->size) +
                         "; both are " + dim.symbol + " in the bundle and must be equal.");
      }
    }
  }
}

void ModuleState::check_aliasing(const Program& p, const std::vector<at::Tensor>& flat) const {
  const auto& names = bundle->user_input_names;
  for (const auto& [j, i] : p.meta->duplicate_user_inputs) {
    if (!flat[j].is_same(flat[i])) {
      throw InputError("input '" + names[j] + "' was the same tensor as '" + names[i] + "' when the bundle was captured, "
                       "and the graph treats them as one. Pass the same tensor for both, or re-export with distinct example inputs.");
    }
  }
  for (size_t meta_index : p.mutated_user_inputs) {
    size_t m = *p.sig->inputs[p.model_inputs[meta_index]].index;
    for (size_t k = 0; k < flat.size(); ++k) {
      auto dup = [&](size_t a, size_t b) {
        auto it = p.meta->duplicate_user_inputs.find(static_cast<int64_t>(a));
        return it != p.meta->duplicate_user_inputs.end() && it->second == static_cast<int64_t>(b);
      };
      if (k == m || dup(k, m) || dup(m, k)) continue;
      if (may_overlap(flat[m], flat[k])) {
        throw InputError("inputs '" + names[m] + "' and '" + names[k] + "' share memory, and '" + names[m] +
                         "' is mutated in place. The bundle was captured with separate tensors, so it cannot reproduce "
                         "eager here. Pass separate tensors (e.g. " + names[k] + ".clone()), or export with example inputs "
                         "that share memory the same way.");
      }
    }
  }
}

std::vector<at::Tensor> ModuleState::graph_inputs(Program& p, const std::vector<at::Tensor>& flat) {
  if (hyper_stale && !hyper_names.empty()) {
    hyper_tensors.clear();
    for (const std::string& name : hyper_names) {
      hyper_tensors.push_back(at::scalar_tensor(hyper_values.at(name), at::TensorOptions().dtype(at::kDouble).device(device)));
    }
    hyper_stale = false;
  }
  std::vector<at::Tensor> args;
  args.reserve(p.sources.size());
  for (const Source& s : p.sources) {
    switch (s.kind) {
      case Source::kState: args.push_back(state[s.index].second); break;
      case Source::kUser: {
        // the layout the compiled code indexes with (contract/aliasing.py's StrideGuard)
        const at::Tensor& t = flat[s.index];
        const auto& exact = p.static_strides[s.index];
        if (exact ? t.strides().equals(*exact) : p.row_major[s.index] && t.is_contiguous() && !has_size_one(t)) {
          args.push_back(t);  // laid out as compiled: the common case, decided without allocating
          break;
        }
        std::vector<int64_t> want = exact ? *exact : dense_strides(t.sizes(), p.dense_order[s.index]);
        if (t.strides().equals(want) || t.numel() <= 1) {
          args.push_back(t);
        } else {
          args.push_back(at::empty_strided(t.sizes(), want, t.options()).copy_(t));
        }
        break;
      }
      case Source::kOptimizerState: args.push_back(optimizer_state[s.index].second); break;
      case Source::kHyperparameter: args.push_back(hyper_tensors[s.index]); break;
      case Source::kConstant: args.push_back(constants[s.index].second); break;
      case Source::kSaved:
      case Source::kTangent: throw std::logic_error("a backward graph's inputs come from Module::backward");
    }
  }
  return args;
}

// runtime/module.py's _failure, for a graph that raised on inputs that passed the checks
std::string ModuleState::run_failure(const std::string& kind, const std::string& what) const {
  std::string first = what.substr(what.find_first_not_of(" \n"));
  first = first.substr(0, first.find('\n'));
  return "the " + kind + " graph of '" + bundle->path + "' failed at run time: RuntimeError: " + first + ".";
}

std::vector<at::Tensor> ModuleState::run(Program& p, std::vector<at::Tensor>& args) {
  try {
    if (p.fold) {  // run the fold program again when a weight it reads changed or was replaced
      bool same = p.fold_seen.size() == p.fold->reads().size();
      for (size_t k = 0; same && k < p.fold_seen.size(); ++k) {
        const at::Tensor& t = args[p.fold->reads()[k]];
        same = p.fold_seen[k].first == t.unsafeGetTensorImpl() && p.fold_seen[k].second == t._version();
      }
      if (!same) {
        p.folded = p.fold->run(args);
        p.loader->load_constants(p.folded, false, true, true);  // (use_inactive, check_full_update, user_managed)
        p.fold_seen.clear();
        for (int64_t i : p.fold->reads()) p.fold_seen.emplace_back(args[i].unsafeGetTensorImpl(), args[i]._version());
      }
    }
    std::vector<at::Tensor> pass;  // frozen and folded packages take the user inputs alone
    for (size_t i : p.package_inputs) pass.push_back(args[i]);
    if (p.updates) {  // written in place: no other input may share their memory
      std::vector<const void*> pointers;
      for (const at::Tensor& a : args) pointers.push_back(a.defined() ? a.data_ptr() : nullptr);
      if (pointers != p.checked_pointers) {
        for (const auto& [o, w] : p.updates->writes) {
          for (size_t k = 0; k < args.size(); ++k) {
            if (k != w && may_overlap(args[w], args[k])) {
              throw GraphRunError("inputs " + std::to_string(std::min(k, w)) + " and " + std::to_string(std::max(k, w)) +
                                  " of the joint graph share memory and the compiled step updates one of them in place; "
                                  "give each parameter, buffer and optimizer state tensor memory of its own (e.g. .clone() "
                                  "a tied one), or load with backend='fx'.");
            }
          }
        }
        p.checked_pointers = pointers;
      }
    }
    // run, not boxed_run: it costs less per call, and args stay for the epilogue
    std::vector<at::Tensor> returned = p.cuda_graph ? p.cuda_graph->run(*p.loader, p.takes_all ? args : pass)
                                                    : p.loader->run(p.takes_all ? args : pass);
    if (!p.updates) return returned;
    std::vector<at::Tensor> full(p.updates->num_outputs);
    for (size_t k = 0; k < p.updates->kept.size() && k < returned.size(); ++k) full[p.updates->kept[k]] = returned[k];
    for (const auto& [o, i] : p.updates->writes) full[o] = args[i];
    return full;
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {  // torch's errors, which Python sees as RuntimeError
    throw GraphRunError(run_failure(p.kind, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw GraphRunError(run_failure(p.kind, e.what()));
  }
}

std::vector<at::Tensor> ModuleState::epilogue(const Program& p, const std::vector<at::Tensor>& args,
                                              const std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& flat) const {
  for (const Mutation& m : p.mutations) {
    at::Tensor target = args[m.input];
    const at::Tensor& value = outs[m.output];
    if (p.sources[m.input].kind == Source::kUser) target = flat[p.sources[m.input].index];  // not a layout copy
    if (value.is_same(target)) continue;  // written in place by the compiled graph
    if (m.metadata) {
      if (m.layout) {
        target.as_strided_(m.layout->shape, m.layout->stride, m.layout->storage_offset);
      } else {
        target.as_strided_(value.sizes(), value.strides(), value.storage_offset());
      }
    }
    if (m.data) target.copy_(value);
  }
  std::vector<at::Tensor> results(p.outputs.size());
  for (size_t i : p.plain_outputs) results[i] = outs[p.outputs[i].output];
  auto model_input = [&](int64_t k) {
    size_t position = p.model_inputs[k];
    const Source& s = p.sources[position];
    return s.kind == Source::kUser ? flat[s.index] : args[position];
  };
  for (size_t i : p.aliases_in_order) {
    const OutputPlan& plan = p.outputs[i];
    const at::Tensor& raw = outs[plan.output];
    if (plan.kind == "is_input") {
      results[i] = model_input(*plan.base);
    } else if (plan.kind == "alias_of_input") {
      results[i] = view_of(model_input(*plan.base), raw, plan);
    } else if (plan.kind == "alias_of_intermediate_base_is_user_output") {
      results[i] = view_of(results.at(*plan.base), raw, plan);
    } else if (plan.kind != "non_alias" && plan.kind != "unsafe_view_alias" && plan.kind != "custom_function_view") {
      results[i] = view_of(outs.at(p.bases.at(*plan.base)), raw, plan);  // alias_of_intermediate...
    } else if (plan.same_as) {
      results[i] = results[*plan.same_as];
    } else if (plan.view_of) {
      results[i] = view_of(results[*plan.view_of], raw, plan);
    }
  }
  for (const auto& [i, user] : p.meta->outputs_same_as_inputs) results.at(i) = flat.at(user);
  return results;
}

const at::Tensor& Outputs::operator[](const std::string& name) const {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return values[i];
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  throw InputError("no output named '" + name + "'; the outputs are " + list + ".");
}

Outputs Module::forward(const std::vector<at::Tensor>& inputs) {
  ModuleState& s = *state_;
  auto it = s.programs.find("inference");
  if (it == s.programs.end()) it = s.programs.find("forward");  // a forward+backward bundle
  if (it == s.programs.end()) {
    throw ModeError("This is a joint bundle: it runs whole training steps. Call module.train_step(inputs), which "
                    "returns the loss and updates the weights.");
  }
  s.check_inputs(inputs);
  Program& p = it->second->pick(inputs, s.bundle->path);  // a shape profile's package, if one holds
  s.check_aliasing(p, inputs);
  c10::AutoGradMode no_grad(false);
  std::vector<at::Tensor> args = s.graph_inputs(p, inputs);
  std::vector<at::Tensor> outs = s.run(p, args);
  if (p.kind == "forward") s.stash_for_backward(p, args, outs);
  Outputs out;
  out.values = s.epilogue(p, args, outs, inputs);
  out.names = p.output_names;
  return out;
}

}  // namespace aotc
