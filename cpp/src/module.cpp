// Bundle::load: weights read (mapped) and checked, each graph's package loaded after its
// hash checks out once more, and the per-call plans built once from the metadata.
#include <cstdlib>
#include <mutex>
#include <set>

#include <torch/headeronly/version.h>

#include "program.h"

namespace aotc {

namespace fs = std::filesystem;

namespace {

const std::set<std::string> kModelRoles = {"parameter", "buffer", "user_input", "synthetic_base"};

std::string this_torch() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

std::set<std::string> cpu_flags() {
  std::set<std::string> flags;
  std::istringstream text(detail::read_file("/proc/cpuinfo"));
  for (std::string line; std::getline(text, line);) {
    if (line.rfind("flags", 0) == 0 || line.rfind("Features", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      for (std::string w; words >> w;) flags.insert(w);
      break;
    }
  }
  return flags;
}

// aotc/bundle/fingerprint.py's check_fingerprint
void check_fingerprint(const FileEntry& entry, const c10::Device& device, const std::string& what) {
  if (!entry.has_build) throw BundleError(what + " records no build fingerprint; compile the bundle again with aotc compile.");
  const auto& fp = entry.build;
  auto at = [&](const char* k) { return fp.count(k) ? fp.at(k) : std::string("None"); };
  std::string recorded = at("torch");
  if (recorded.substr(0, recorded.find('+')) != this_torch()) {
    throw BundleError(what + " was built for torch " + recorded + ", this is torch " + this_torch() +
                      ". Compile the bundle again (aotc compile BUNDLE), or use backend='fx'.");
  }
  std::string type = device.is_cuda() ? "cuda" : "cpu";
  if (at("device") != type) throw BundleError(what + " was built for " + at("device") + ", not " + type + ".");
  if (device.is_cpu() && fp.count("cpu_flags")) {
    std::set<std::string> have = cpu_flags();
    std::vector<std::string> missing;
    std::istringstream needed(fp.at("cpu_flags"));
    for (std::string f; std::getline(needed, f, ',');) {
      if (!f.empty() && !have.empty() && !have.count(f)) missing.push_back(f);
    }
    if (!missing.empty()) {
      std::string list;
      for (const auto& f : missing) list += (list.empty() ? "" : ", ") + f;
      throw BundleError(what + " was built for CPU instruction set " + at("cpu_isa") + ", but this CPU lacks " + list +
                        ". Compile the bundle on this machine, or use backend='fx'.");
    }
  }
}

// The loader extracts the package under $TMPDIR and leaves it there when loading fails:
// point $TMPDIR at a directory of our own meanwhile, removed when the program goes.
std::mutex tmpdir_lock;

std::unique_ptr<torch::inductor::AOTIModelPackageLoader> load_package(const fs::path& path, const c10::Device& device,
                                                                      std::string& workdir) {
  fs::path base = fs::temp_directory_path();
  std::string pattern = (base / "aotc-load-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw BundleError("cannot make a directory under " + base.string());
  workdir = pattern;
  std::lock_guard<std::mutex> hold(tmpdir_lock);
  const char* previous = std::getenv("TMPDIR");
  std::string saved = previous ? previous : "";
  setenv("TMPDIR", workdir.c_str(), 1);
  try {
    auto loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path.string(), "model", false, 1, device.has_index() ? device.index() : -1);
    previous ? setenv("TMPDIR", saved.c_str(), 1) : unsetenv("TMPDIR");
    return loader;
  } catch (const std::exception& e) {
    previous ? setenv("TMPDIR", saved.c_str(), 1) : unsetenv("TMPDIR");
    fs::remove_all(workdir);
    std::string first = e.what();
    first = first.substr(0, first.find('\n'));
    throw BundleError("'" + path.string() + "' could not be loaded as an AOTInductor package (" + first + ").");
  }
}

// exporters/aoti_updates.py's plan(): what of the joint graph's outputs the package
// compiled "in place" writes into its inputs instead of returning.
InPlaceUpdates in_place_plan(const BundleData& b, const GraphSignature& sig, const ProgramMeta& meta) {
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> slots;
  for (size_t i = 0; i < sig.inputs.size(); ++i) slots[{sig.inputs[i].role, sig.inputs[i].target.value_or("")}].push_back(i);
  auto single = [&](const std::string& role, const std::string& target) -> std::optional<size_t> {
    auto it = slots.find({role, target});
    if (it == slots.end() || it->second.size() != 1) return std::nullopt;  // tied: one tensor for two inputs
    return it->second[0];
  };
  InPlaceUpdates u;
  u.num_outputs = sig.outputs.size();
  std::set<size_t> gone;
  for (size_t o = 0; o < sig.outputs.size(); ++o) {
    const Slot& s = sig.outputs[o];
    std::string target = s.target.value_or("");
    std::optional<size_t> i;
    if (s.role == "updated_parameter") {
      i = single("parameter", target);
    } else if (s.role == "optimizer_state") {
      i = single("optimizer_state", target);
    } else if (s.role == "input_mutation") {
      std::string name = s.name.substr(std::string("mutated:").size());
      for (size_t k = 0; k < meta.inputs.size(); ++k) {
        const InputMeta& info = meta.inputs[k];
        if (sig.inputs[k].name == name && info.kind == "buffer" && info.mutates_data && !info.mutates_metadata) {
          i = single(sig.inputs[k].role, sig.inputs[k].target.value_or(""));
        }
      }
    }
    if (i) {
      u.writes.emplace_back(o, *i);
      gone.insert(o);
    }
  }
  if (b.optimizer) {  // the graph's optimizer took the parameters' gradients: not returned
    std::set<std::string> updated;
    for (const Slot& s : sig.outputs) {
      if (s.role == "updated_parameter") updated.insert(s.target.value_or(""));
    }
    for (size_t o = 0; o < sig.outputs.size(); ++o) {
      const Slot& s = sig.outputs[o];
      if (s.role != "gradient") continue;
      std::string name = s.name.substr(std::string("grad:").size());
      for (const Slot& in : sig.inputs) {
        if (in.name == name && in.role == "parameter" && updated.count(in.target.value_or(""))) gone.insert(o);
      }
    }
  }
  for (size_t o = 0; o < u.num_outputs; ++o) {
    if (!gone.count(o)) u.kept.push_back(o);
  }
  return u;
}

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

}  // namespace

Program::~Program() {
  loader.reset();  // its own extraction directory first, then ours
  if (!workdir.empty()) {
    std::error_code ignored;
    fs::remove_all(workdir, ignored);
  }
}

std::string describe_shape(at::IntArrayRef shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

Module Bundle::load(c10::Device device) const {
  const BundleData& b = *data_;
  if (device.is_cuda() && !at::hasCUDA()) {
    throw DeviceError("device '" + device.str() + "' is not available here: this libtorch has no CUDA, or no GPU is present.");
  }
  if (!device.is_cpu() && !device.is_cuda()) throw DeviceError("device '" + device.str() + "' is not supported; use cpu or cuda.");
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
    p->meta = &b.programs.at(kind);
    for (size_t i = 0; i < p->sig->inputs.size(); ++i) {
      const Slot& s = p->sig->inputs[i];
      std::string target = s.target.value_or("");
      if (kModelRoles.count(s.role)) p->model_inputs.push_back(i);
      if (s.role == "parameter" || s.role == "buffer") {
        auto it = state->state_index.find(target);
        if (it == state->state_index.end()) {
          throw BundleError("'" + b.path + "/weights.safetensors': tensor '" + target + "' is missing; the " + kind + " graph takes it.");
        }
        const InputMeta& info = p->meta->inputs[p->model_inputs.size() - 1];
        const at::Tensor& t = state->state[it->second].second;
        if (info.tensor && (t.scalar_type() != info.tensor->dtype || t.sizes().vec() != info.tensor->shape)) {
          throw BundleError("'" + b.path + "/weights.safetensors': tensor '" + target + "' is " + dtype_name(t.scalar_type()) +
                            " " + describe_shape(t.sizes()) + ", metadata.json says " + info.tensor->dtype_name + " " +
                            describe_shape(info.tensor->shape) + ".");
        }
        p->sources.push_back({Source::kState, it->second});
      } else if (s.role == "user_input") {
        p->sources.push_back({Source::kUser, static_cast<size_t>(*s.index)});
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
        p->sources.push_back({Source::kConstant, constant_index[target]});
      } else if (s.role == "optimizer_state" || s.role == "hyperparameter") {
        p->sources.push_back({s.role == "optimizer_state" ? Source::kOptimizerState : Source::kHyperparameter, 0});
      } else {
        throw BundleError("Bundle '" + b.path + "': the " + kind + " graph's input '" + s.name + "' has role '" + s.role +
                          "', which the C++ runtime does not feed.");
      }
    }
    for (const TensorMeta& t : b.user_inputs) {
      p->static_strides.push_back(t.dynamic_dims.empty() ? std::optional<std::vector<int64_t>>(t.stride) : std::nullopt);
      p->dense_order.push_back(dense_order_of(t.stride));
      const auto& order = p->dense_order.back();
      p->row_major.push_back(std::is_sorted(order.begin(), order.end()));
    }
    plan_epilogue(*p);
    for (const OutputPlan& plan : p->outputs) p->output_names.push_back(p->sig->outputs[plan.output].name);

    // the compiled package, loaded only after its members and hash check out
    std::string type = device.is_cuda() ? "cuda" : "cpu";
    std::string rel = "compiled/" + type + "/" + kind + ".pt2";
    const FileEntry* entry = b.file(rel);
    if (entry == nullptr) {
      std::set<std::string> have;
      for (const FileEntry& e : b.files) {
        if (e.kind == "compiled" && e.device) have.insert(*e.device);
      }
      std::string list;
      for (const auto& d : have) list += (list.empty() ? "" : ", ") + d;
      throw BundleError("Bundle '" + b.path + "' has no compiled " + kind + " graph for " + type +
                        (have.empty() ? "; it has no compiled artifacts." : "; it has compiled artifacts for " + list + ".") +
                        " Run: aotc compile " + b.path + " --device " + type);
    }
    check_fingerprint(*entry, device, "'" + rel + "' in bundle '" + b.path + "'");
    fs::path path = fs::path(b.path) / rel;
    detail::check_compiled_package(path);
    if (detail::sha256_file(path) != entry->sha256) {
      throw BundleError("Bundle '" + b.path + "': " + rel + " has sha256 " + detail::sha256_file(path).substr(0, 12) +
                        "..., the manifest says " + entry->sha256.substr(0, 12) + ".... The file was modified; export the bundle again.");
    }
    p->loader = load_package(path, device, p->workdir);
    auto build = [&](const char* k) { return entry->build.count(k) ? entry->build.at(k) : std::string(); };
    if (build("frozen") == "true" || build("weights") == "folded") {
      p->takes_all = false;
      for (size_t i = 0; i < p->sig->inputs.size(); ++i) {
        const std::string& role = p->sig->inputs[i].role;
        if (role != "parameter" && role != "buffer" && role != "constant") p->package_inputs.push_back(i);
      }
    }
    if (build("weights") == "folded") {
      std::string where = "'" + path.string() + "' (data/aotc/weight_fold.json)";
      auto program = detail::read_archive_member(path, "data/aotc/weight_fold.json");
      if (!program) {
        throw BundleError("'" + path.string() + "' was compiled without its weights but has no data/aotc/weight_fold.json "
                          "to fold them; compile the bundle again.");
      }
      detail::json parsed;
      try {
        parsed = detail::json::parse(*program);
      } catch (const detail::json::exception& e) {
        throw BundleError(where + " is not valid JSON (" + e.what() + ").");
      }
      p->fold = std::make_unique<detail::FoldedConstants>(parsed, p->loader->get_constant_fqns(), where);
    } else if (build("updates") == "in_place") {
      p->updates = in_place_plan(b, *p->sig, *p->meta);
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
    Program& j = *state->programs.at("joint");
    size_t next_state = 0, next_hyper = 0;
    for (Source& src : j.sources) {
      if (src.kind == Source::kOptimizerState) src.index = next_state++;
      if (src.kind == Source::kHyperparameter) src.index = next_hyper++;
    }
  }
  return Module(state);
}

}  // namespace aotc
