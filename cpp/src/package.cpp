// A graph's compiled package: found for the device, its build fingerprint checked against
// this machine (aotc/bundle/fingerprint.py), its archive members and hash checked once more,
// then loaded; and how the runtime calls it (weights folded or frozen in, updates in place).
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>

#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif

#include "program.h"

namespace aotc {

namespace fs = std::filesystem;

namespace {

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
                                                                      std::string& workdir, bool single_threaded) {
  if (device.is_cpu()) detail::keep_heap();  // its buffers stay in the process between calls
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
        path.string(), "model", single_threaded, 1, device.has_index() ? device.index() : -1);
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

}  // namespace

Program::~Program() {
  loader.reset();  // its own extraction directory first, then ours
  if (!workdir.empty()) {
    std::error_code ignored;
    fs::remove_all(workdir, ignored);
  }
}

std::vector<std::pair<std::string, std::string>> profile_packages(const BundleData& b, const std::string& kind,
                                                                  const c10::Device& device) {
  std::string prefix = std::string("compiled/") + (device.is_cuda() ? "cuda" : "cpu") + "/" + kind + "_p";
  std::vector<std::pair<size_t, std::pair<std::string, std::string>>> found;
  for (const FileEntry& e : b.files) {
    auto profile = e.build.find("profile");
    if (e.kind != "compiled" || profile == e.build.end() || e.path.rfind(prefix, 0) != 0) continue;
    std::string k = e.path.substr(prefix.size(), e.path.size() - prefix.size() - 4);  // "<k>" of "<k>.pt2"
    if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos) continue;
    found.push_back({std::stoul(k), {e.path, profile->second}});
  }
  std::sort(found.begin(), found.end());
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::vector<Program::SizeCheck> size_checks(const BundleData& b, const std::string& profile) {
  // "s33=2..2,s50=1..64": per symbol, its first user input and dim (Python's size_checks)
  std::vector<Program::SizeCheck> out;
  size_t start = 0;
  while (start <= profile.size()) {
    size_t end = profile.find(',', start);
    std::string item = profile.substr(start, end == std::string::npos ? std::string::npos : end - start);
    size_t eq = item.find('='), dots = item.find("..");
    if (eq == std::string::npos || dots == std::string::npos) {
      throw BundleError("Bundle '" + b.path + "': a compiled package's profile '" + profile + "' is not SYMBOL=LO..HI.");
    }
    std::string symbol = item.substr(0, eq);
    bool found = false;
    for (size_t i = 0; i < b.user_inputs.size() && !found; ++i) {
      for (const auto& [dim, d] : b.user_inputs[i].dynamic_dims) {
        if (d.symbol == symbol) {
          out.push_back({i, dim, std::stoll(item.substr(eq + 1, dots - eq - 1)), std::stoll(item.substr(dots + 2))});
          found = true;
          break;
        }
      }
    }
    if (!found) throw BundleError("Bundle '" + b.path + "': profile '" + profile + "' names " + symbol + ", no dim of its inputs.");
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

Program& Program::pick(const std::vector<at::Tensor>& flat, const std::string& bundle_path) {
  for (Profiled& p : profiles) {
    bool holds = true;
    for (const SizeCheck& c : p.checks) {
      int64_t size = flat[c.user_input].size(c.dim);
      holds = holds && c.lo <= size && size <= c.hi;
    }
    if (holds) return *p.program;
  }
  if (!has_package) {
    std::string names;
    for (const Profiled& p : profiles) names += (names.empty() ? "" : ", ") + p.label;
    throw InputError("the sizes of this call lie in no shape profile of the " + kind + " graph of bundle '" + bundle_path +
                     "' (" + names + "), which was compiled without the package for every size (--no-generic). Call "
                     "it with sizes in a profile, or compile it again with the generic package (aotc compile " +
                     bundle_path + ")");
  }
  return *this;
}

Program& Program::at(const std::string& label, const std::string& bundle_path) {
  if (label.empty()) return *this;
  for (Profiled& p : profiles) {
    if (p.label == label) return *p.program;
  }
  throw BundleError("Bundle '" + bundle_path + "': the forward graph ran shape profile " + label + ", and the " + kind +
                    " graph has no package for it; compile the bundle again with its profiles.");
}

void attach_package(Program& program, const BundleData& b, const c10::Device& device, const LoadOptions& options,
                    const std::string& given) {
  const std::string& kind = program.kind;
    // the compiled package, loaded only after its members and hash check out
    std::string type = device.is_cuda() ? "cuda" : "cpu";
    std::string rel = given.empty() ? "compiled/" + type + "/" + kind + ".pt2" : given;
    const FileEntry* entry = b.file(rel);
    if (entry == nullptr) {
      std::set<std::string> have;
      bool profiles_only = false;
      for (const FileEntry& e : b.files) {
        if (e.kind == "compiled" && e.device) have.insert(*e.device);
        profiles_only |= e.kind == "compiled" && e.graph == kind && e.device == type;
      }
      if (profiles_only) {  // compiled with --no-generic: the profiles' programs run every call
        program.has_package = false;
        return;
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
    auto build = [&](const char* k) { return entry->build.count(k) ? entry->build.at(k) : std::string(); };
    if (options.cuda_graphs) {  // exporters/aoti.py's fingerprint names the ops that draw random numbers
      if (build("random_ops").empty()) {
        throw CudaGraphError("Bundle '" + b.path + "': " + rel + " was compiled before aotc recorded which ops draw "
                             "random numbers, which a CUDA graph cannot replay. Run: aotc compile " + b.path +
                             " --device cuda");
      }
      if (build("random_ops") != "none") {
        throw CudaGraphError("Bundle '" + b.path + "': the " + kind + " graph draws random numbers (" +
                             build("random_ops") + "); a CUDA graph would replay the recording's place in the random "
                             "stream, not eager's draws. Load it without cuda_graphs, or export the model "
                             "deterministic (eval-mode dropout).");
      }
    }
    program.loader = load_package(path, device, program.workdir, options.cuda_graphs);
    if (build("frozen") == "true" || build("weights") == "folded") {
      program.takes_all = false;
      for (size_t i = 0; i < program.sig->inputs.size(); ++i) {
        const std::string& role = program.sig->inputs[i].role;
        if (role != "parameter" && role != "buffer" && role != "constant") program.package_inputs.push_back(i);
      }
    }
    if (build("weights") == "folded") {
      std::string where = "'" + path.string() + "' (data/aotc/weight_fold.json)";
      auto text = detail::read_archive_member(path, "data/aotc/weight_fold.json");
      if (!text) {
        throw BundleError("'" + path.string() + "' was compiled without its weights but has no data/aotc/weight_fold.json "
                          "to fold them; compile the bundle again.");
      }
      detail::json parsed;
      if (detail::json_nested_too_deeply(text->data(), text->data() + text->size())) {
        throw BundleError(where + " is not valid JSON (nested too deeply).");
      }
      try {
        parsed = detail::json::parse(*text);
      } catch (const detail::json::exception& e) {
        throw BundleError(where + " is not valid JSON (" + e.what() + ").");
      }
      program.fold = std::make_unique<detail::FoldedConstants>(parsed, program.loader->get_constant_fqns(), where);
    } else if (build("updates") == "in_place") {
      program.updates = in_place_plan(b, *program.sig, *program.meta);
    }
    if (options.cuda_graphs) {
      std::vector<std::string> roles;
      for (size_t i = 0; i < program.sig->inputs.size(); ++i) roles.push_back(program.sig->inputs[i].role);
      if (!program.takes_all) {
        std::vector<std::string> taken;
        for (size_t i : program.package_inputs) taken.push_back(roles[i]);
        roles = taken;
      }
      program.cuda_graph = std::make_unique<detail::CudaGraphRun>(roles, options.max_graph_shapes,
                                                                   "the " + kind + " graph of bundle '" + b.path + "'");
    }
}

}  // namespace aotc
