// Bundle::open: the checks of aotc/bundle/files.py's Bundle.open, in its order and with its
// messages: the signature (with keys configured) before anything else is read, then the
// manifest (format version, checksum), the listing (exactly the files it lists, no links),
// each file's size and sha256, and signature.json and metadata.json parsed and validated.
#include <algorithm>
#include <sys/stat.h>

#include <set>

#include "aotc/aotc.h"
#include "bundle_data.h"

namespace aotc {

using detail::json;
namespace fs = std::filesystem;

namespace {

constexpr int kFormatVersion = 4;
constexpr int kOldestFormatRead = 2;
constexpr uintmax_t kMaxJsonBytes = 256ull << 20;
const char* kManifest = "manifest.json";
const char* kSignatureFile = "model.sig";

json read_json(const fs::path& path, const std::string& where) {
  if (fs::file_size(path) > kMaxJsonBytes) {
    throw BundleError(where + ": " + std::to_string(fs::file_size(path)) + " bytes is more JSON than aotc reads.");
  }
  std::string text = detail::read_file(path);
  if (detail::json_nested_too_deeply(text.data(), text.data() + text.size())) {
    throw BundleError(where + " is not valid JSON (nested too deeply).");
  }
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw BundleError(where + " is not valid JSON (" + e.what() + ").");
  }
}

// sha256 of the manifest's JSON without its checksum field, serialized as Python's
// json.dumps(sort_keys=True, separators=(",", ":")) does (nlohmann's objects are sorted maps)
std::string manifest_checksum(json raw) {
  raw.erase("checksum");
  return detail::sha256_bytes(raw.dump(-1, ' ', true));
}

// A schema violation in one of the bundle's JSON files, named as Python's from_json does.
[[noreturn]] void schema_error(const std::string& where, const std::string& what) {
  throw BundleError(where + " does not match aotc's bundle schema: " + what + ". Export the bundle again.");
}

template <typename T>
T get(const json& j, const char* key, const std::string& where) {
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    schema_error(where, std::string("'") + key + "' (" + e.what() + ")");
  }
}

template <typename T>
std::optional<T> get_optional(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return get<T>(j, key, where);
}

TensorMeta parse_tensor(const json& j, const std::string& where) {
  TensorMeta t;
  t.shape = get<std::vector<int64_t>>(j, "shape", where);
  t.stride = get<std::vector<int64_t>>(j, "stride", where);
  t.dtype_name = get<std::string>(j, "dtype", where);
  t.device = get<std::string>(j, "device", where);
  auto dtype = dtype_from_name(t.dtype_name);
  if (!dtype) schema_error(where, "dtype '" + t.dtype_name + "' is not a torch dtype");
  t.dtype = *dtype;
  if (t.shape.size() != t.stride.size()) schema_error(where, "shape and stride differ in length");
  if (j.contains("dynamic_dims")) {
    for (auto& [dim, d] : j.at("dynamic_dims").items()) {
      int64_t k = -1;
      try {
        k = std::stoll(dim);
      } catch (const std::exception&) {
      }
      if (k < 0 || k >= static_cast<int64_t>(t.shape.size())) schema_error(where, "dynamic dim '" + dim + "'");
      t.dynamic_dims[k] = DynamicDim{get<std::string>(d, "symbol", where), get<int64_t>(d, "min", where),
                                     get_optional<int64_t>(d, "max", where)};
    }
  }
  return t;
}

std::optional<TensorMeta> parse_optional_tensor(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return parse_tensor(j.at(key), where);
}

Slot parse_slot(const json& j, const std::string& where) {
  return Slot{get<std::string>(j, "name", where), get<std::string>(j, "role", where),
              get_optional<std::string>(j, "target", where), get_optional<int64_t>(j, "index", where)};
}

std::map<int64_t, int64_t> parse_int_map(const json& j, const char* key, const std::string& where) {
  std::map<int64_t, int64_t> out;
  if (!j.contains(key)) return out;
  for (auto& [k, v] : j.at(key).items()) {
    try {
      out[std::stoll(k)] = v.get<int64_t>();
    } catch (const std::exception& e) {
      schema_error(where, std::string("'") + key + "' (" + e.what() + ")");
    }
  }
  return out;
}

ProgramMeta parse_program(const json& j, const std::string& where) {
  ProgramMeta p;
  for (const json& i : j.at("inputs")) {
    InputMeta m;
    m.kind = get<std::string>(i, "kind", where);
    m.name = get<std::string>(i, "name", where);
    m.mutation_type = get<std::string>(i, "mutation_type", where);
    m.tensor = parse_optional_tensor(i, "tensor", where);
    m.mutates_data = get<bool>(i, "mutates_data", where);
    m.mutates_metadata = get<bool>(i, "mutates_metadata", where);
    m.mutates_storage = get<bool>(i, "mutates_storage_metadata", where);
    if (i.contains("layout_after") && !i.at("layout_after").is_null()) {
      const json& l = i.at("layout_after");
      m.layout_after = Layout{get<std::vector<int64_t>>(l, "shape", where), get<std::vector<int64_t>>(l, "stride", where),
                              get<int64_t>(l, "storage_offset", where)};
    }
    p.inputs.push_back(std::move(m));
  }
  for (const json& o : j.at("outputs")) {
    OutputMeta m;
    m.index = get<int64_t>(o, "index", where);
    m.output_type = get<std::string>(o, "output_type", where);
    m.base_idx = get_optional<int64_t>(o, "base_idx", where);
    m.view_offset = get_optional<int64_t>(o, "view_offset", where);
    m.same_as_output = get_optional<int64_t>(o, "same_as_output", where);
    m.view_of_output = get_optional<int64_t>(o, "view_of_output", where);
    m.tensor = parse_optional_tensor(o, "tensor", where);
    m.not_a_tensor = (o.contains("constant") && !o.at("constant").is_null()) ||
                     (o.contains("scalar") && !o.at("scalar").is_null());
    p.outputs.push_back(std::move(m));
  }
  p.duplicate_user_inputs = parse_int_map(j, "duplicate_user_inputs", where);
  p.outputs_same_as_inputs = parse_int_map(j, "outputs_same_as_inputs", where);
  p.aliased_input_groups = j.contains("aliased_inputs") ? j.at("aliased_inputs").size() : 0;
  return p;
}

void read_manifest(BundleData& b, const fs::path& root) {
  fs::path path = root / kManifest;
  if (fs::is_symlink(path) || !fs::is_regular_file(path)) {
    throw BundleError("Bundle '" + b.path + "' has no manifest.json. It is incomplete or not an aotc bundle; export it again.");
  }
  json raw = read_json(path, b.path + "/" + kManifest);
  std::string where = b.path + "/" + kManifest;
  if (raw.is_object() && raw.contains("format_version") && raw["format_version"].is_number_integer()) {
    int64_t version = raw["format_version"].get<int64_t>();
    if (version > kFormatVersion) {
      throw BundleError("Bundle '" + b.path + "' has format_version " + std::to_string(version) +
                        ", newer than this aotc reads (" + std::to_string(kFormatVersion) + "). Upgrade aotc to open it.");
    }
    if (version < kOldestFormatRead) {
      throw BundleError("Bundle '" + b.path + "' has format_version " + std::to_string(version) +
                        ": it predates hashing every file of a bundle, and this aotc reads versions " +
                        std::to_string(kOldestFormatRead) + " to " + std::to_string(kFormatVersion) +
                        ". Export it again with this aotc.");
    }
  }
  if (!raw.is_object()) schema_error(where, "not an object");
  if (get<std::string>(raw, "checksum", where) != manifest_checksum(raw)) {
    throw BundleError("Bundle '" + b.path + "': manifest.json does not match its checksum; it was changed or damaged. "
                      "Export the bundle again.");
  }
  b.manifest_raw = raw;
  b.graph_kinds = get<std::vector<std::string>>(raw, "graph_kinds", where);
  b.torch_version = get<std::string>(raw, "torch_version", where);
  b.generation = raw.contains("generation") && !raw["generation"].is_null();
  for (const json& f : raw.at("files")) {
    FileEntry e;
    e.path = get<std::string>(f, "path", where);
    e.kind = get<std::string>(f, "kind", where);
    e.size = get<int64_t>(f, "size", where);
    e.sha256 = get<std::string>(f, "sha256", where);
    e.graph = get_optional<std::string>(f, "graph", where);
    e.device = get_optional<std::string>(f, "device", where);
    if (f.contains("build") && f["build"].is_object()) {
      e.has_build = true;
      for (auto& [k, v] : f["build"].items()) e.build[k] = v.is_string() ? v.get<std::string>() : v.dump();
    }
    b.files.push_back(std::move(e));
  }
}

bool plain_relative(const std::string& rel) {
  if (rel.empty() || rel[0] == '/' || rel.find('\\') != std::string::npos || rel.find('\0') != std::string::npos) {
    return false;
  }
  size_t start = 0;
  while (true) {
    size_t end = rel.find('/', start);
    std::string part = rel.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (end == std::string::npos) return true;
    start = end + 1;
  }
}

void check_listing(const BundleData& b, const fs::path& root) {
  std::string where = b.path + "/" + kManifest;
  std::map<std::string, const FileEntry*> listed;
  for (const FileEntry& e : b.files) {
    if (!plain_relative(e.path)) {
      throw BundleError(where + ": file path '" + e.path + "' is not a plain relative path inside the bundle; refusing it.");
    }
    if (listed.count(e.path) || e.path == kManifest) throw BundleError(where + ": '" + e.path + "' is listed twice.");
    listed[e.path] = &e;
  }
  std::map<std::string, std::string> required = {
      {"signature.json", "signature"}, {"metadata.json", "metadata"}, {"weights.safetensors", "weights"}};
  for (const std::string& kind : b.graph_kinds) {
    required["graphs/" + kind + ".pt2"] = "graph";
    required["graphs/" + kind + ".py"] = "graph_code";
  }
  for (const auto& [rel, kind] : required) {
    auto it = listed.find(rel);
    if (it == listed.end() || it->second->kind != kind) {
      throw BundleError(where + ": '" + rel + "' is not listed as a " + kind + " file; the manifest is incomplete.");
    }
  }
  for (const FileEntry& e : b.files) {
    if ((e.kind == "signature" || e.kind == "metadata") && !required.count(e.path)) {
      throw BundleError(where + ": '" + e.path + "' is listed as " + e.kind + "; only signature.json/metadata.json are.");
    }
  }
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    // lexically: fs::relative would resolve the entry, following a link (ELOOP on one to itself)
    std::string rel = it->path().lexically_relative(root).generic_string();
    struct stat st;
    lstat(it->path().c_str(), &st);
    if (S_ISLNK(st.st_mode)) {
      throw BundleError("Bundle '" + b.path + "': '" + rel + "' is a symbolic link; a bundle holds plain files only.");
    }
    if (S_ISDIR(st.st_mode) || rel == kManifest || rel == kSignatureFile) continue;
    if (!S_ISREG(st.st_mode)) throw BundleError("Bundle '" + b.path + "': '" + rel + "' is not a regular file.");
    if (!listed.count(rel)) {
      throw BundleError("Bundle '" + b.path + "': '" + rel + "' is not listed in manifest.json; a bundle holds only the files "
                        "it lists. Remove it, or export the bundle again.");
    }
  }
}

void read_signature(BundleData& b, const fs::path& root) {
  std::string where = b.path + "/signature.json";
  json j = read_json(root / "signature.json", where);
  for (const json& u : j.at("user_inputs")) {
    b.user_input_names.push_back(get<std::string>(u, "name", where));
    b.user_input_kinds.push_back(u.contains("kind") && u["kind"].is_string() ? u["kind"].get<std::string>() : "tensor");
  }
  for (auto& [kind, g] : j.at("graphs").items()) {
    GraphSignature sig;
    for (const json& s : g.at("inputs")) sig.inputs.push_back(parse_slot(s, where));
    for (const json& s : g.at("outputs")) sig.outputs.push_back(parse_slot(s, where));
    if (g.contains("backward") && g["backward"].is_object() && g["backward"].contains("reached_from") &&
        g["backward"]["reached_from"].is_object()) {
      sig.reached_from = get<std::map<std::string, std::vector<std::string>>>(g["backward"], "reached_from", where);
    }
    b.graphs[kind] = std::move(sig);
  }
}

void read_metadata(BundleData& b, const fs::path& root) {
  std::string where = b.path + "/metadata.json";
  json j = read_json(root / "metadata.json", where);
  for (const json& u : j.at("user_inputs")) b.user_inputs.push_back(parse_tensor(u, where));
  for (auto& [kind, p] : j.at("programs").items()) b.programs[kind] = parse_program(p, where);
  b.subclasses = j.contains("subclasses") && !j["subclasses"].is_null();
  if (j.contains("ambient") && j["ambient"].is_object()) {
    const json& a = j["ambient"];
    if (a.contains("autocast") && !a["autocast"].empty()) b.ambient_refusals.push_back("autocast");
    if (a.contains("torch_function_modes") && !a["torch_function_modes"].empty()) {
      b.ambient_refusals.push_back("torch-function modes");
    }
  }
  if (j.contains("optimizer") && !j["optimizer"].is_null()) {
    const json& o = j["optimizer"];
    OptimizerInfo info;
    info.name = get<std::string>(o, "name", where);
    info.hyperparameters = get<std::map<std::string, double>>(o, "hyperparameters", where);
    info.options = get<std::map<std::string, bool>>(o, "options", where);
    info.parameters = get<std::vector<std::string>>(o, "parameters", where);
    info.state = get<std::vector<std::string>>(o, "state", where);
    b.optimizer = std::move(info);
  }
}

// what the Python side's check_consistency checks that this runtime relies on
void check_consistency(const BundleData& b) {
  std::string where = b.path + "/metadata.json";
  for (const std::string& kind : b.graph_kinds) {
    auto sig = b.graphs.find(kind);
    if (sig == b.graphs.end()) schema_error(b.path + "/signature.json", "no graph '" + kind + "'");
    auto meta = b.programs.find(kind);
    if (meta == b.programs.end()) continue;  // backward: described by the forward program
    const GraphSignature& s = sig->second;
    const ProgramMeta& p = meta->second;
    size_t model_inputs = 0;
    for (const Slot& slot : s.inputs) {
      if (slot.role != "constant" && slot.role != "optimizer_state" && slot.role != "hyperparameter") ++model_inputs;
      if (slot.role == "user_input" && (!slot.index || *slot.index < 0 ||
                                        *slot.index >= static_cast<int64_t>(b.user_input_names.size()))) {
        schema_error(b.path + "/signature.json", "input '" + slot.name + "' has no user input index");
      }
    }
    if (model_inputs != p.inputs.size()) schema_error(where, "programs." + kind + ".inputs differ from signature.json");
    for (const OutputMeta& o : p.outputs) {
      auto in_range = [&](const std::optional<int64_t>& i, size_t n) { return !i || (*i >= 0 && *i < static_cast<int64_t>(n)); };
      if (!in_range(o.base_idx, std::max(p.inputs.size(), s.outputs.size())) ||
          !in_range(o.same_as_output, p.outputs.size()) || !in_range(o.view_of_output, p.outputs.size())) {
        schema_error(where, "an output of programs." + kind + " refers past the program's inputs or outputs");
      }
    }
  }
  if (b.user_inputs.size() != b.user_input_names.size()) schema_error(where, "user_inputs differ from signature.json");
}

}  // namespace

const FileEntry* BundleData::file(const std::string& rel) const {
  for (const FileEntry& e : files) {
    if (e.path == rel) return &e;
  }
  return nullptr;
}

Bundle Bundle::open(const std::string& path, const OpenOptions& options) {
  auto b = std::make_shared<BundleData>();
  fs::path root(path);
  b->path = path;
  if (!fs::is_directory(root)) throw BundleError("Bundle '" + path + "' not found: no such directory.");
  if (!fs::exists(root / kManifest) && fs::is_regular_file(root / "regions.json")) {
    throw BundleError("Bundle '" + path + "' is a regional bundle: its regions run inside the user's Python model "
                      "(aotc.apply). The C++ runtime runs whole-model bundles; export the model whole to serve it from C++.");
  }
  std::vector<fs::path> keys = detail::configured_keys(options.public_keys);
  if (!keys.empty()) b->signed_by = detail::require_signature(root, keys).string();
  read_manifest(*b, root);
  check_listing(*b, root);
  for (const FileEntry& e : b->files) {
    fs::path file = root / e.path;
    if (!fs::is_regular_file(file)) {
      throw BundleError("Bundle '" + path + "' is missing " + e.path + " (listed in manifest.json). "
                        "The bundle is incomplete; export it again.");
    }
    auto size = static_cast<int64_t>(fs::file_size(file));
    if (size != e.size) {
      throw BundleError("Bundle '" + path + "': " + e.path + " is " + std::to_string(size) + " bytes, the manifest says " +
                        std::to_string(e.size) + ". The file was changed or truncated; export the bundle again.");
    }
    std::string digest = detail::sha256_file(file);
    if (digest != e.sha256) {
      throw BundleError("Bundle '" + path + "': " + e.path + " has sha256 " + digest.substr(0, 12) +
                        "..., the manifest says " + e.sha256.substr(0, 12) +
                        ".... The file was modified; export the bundle again.");
    }
  }
  read_signature(*b, root);
  read_metadata(*b, root);
  check_consistency(*b);
  Bundle bundle;
  bundle.data_ = b;
  return bundle;
}

const std::string& Bundle::path() const { return data_->path; }
std::vector<std::string> Bundle::graph_kinds() const { return data_->graph_kinds; }
std::vector<std::string> Bundle::input_names() const { return data_->user_input_names; }
const std::string& Bundle::signed_by() const { return data_->signed_by; }

std::map<std::string, std::string> Bundle::cpp_support() const {
  std::map<std::string, std::string> out;
  for (const std::string& kind : data_->graph_kinds) out[kind] = data_->cpp_refusal(kind);
  return out;
}

std::vector<std::string> Bundle::compiled_devices(const std::string& kind) const {
  std::vector<std::string> out;  // once each, though shape profiles give a device several packages
  for (const FileEntry& e : data_->files) {
    if (e.kind == "compiled" && e.graph == kind && e.device && std::find(out.begin(), out.end(), *e.device) == out.end()) {
      out.push_back(*e.device);
    }
  }
  return out;
}

}  // namespace aotc
