// The bundle's JSON as the runtime uses it (aotc/bundle/schema.py is the reference: the
// fields here are the ones the C++ runtime reads), parsed and validated by bundle.cpp.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "internal.h"

namespace aotc {

struct FileEntry {
  std::string path, kind, sha256;
  int64_t size = 0;
  std::optional<std::string> graph, device;
  std::map<std::string, std::string> build;
  bool has_build = false;
};

struct DynamicDim {
  std::string symbol;
  int64_t min = 0;
  std::optional<int64_t> max;
};

struct TensorMeta {
  std::vector<int64_t> shape, stride;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::string dtype_name, device;
  std::map<int64_t, DynamicDim> dynamic_dims;
};

struct Slot {
  std::string name, role;
  std::optional<std::string> target;
  std::optional<int64_t> index;
};

struct GraphSignature {
  std::vector<Slot> inputs, outputs;
  // a backward graph's: per gradient output, the tangents whose gradient reaches it in
  // eager (absent: always computed)
  std::map<std::string, std::vector<std::string>> reached_from;
};

struct Layout {
  std::vector<int64_t> shape, stride;
  int64_t storage_offset = 0;
};

struct InputMeta {
  std::string kind, name, mutation_type;
  std::optional<TensorMeta> tensor;
  bool mutates_data = false, mutates_metadata = false, mutates_storage = false;
  std::optional<Layout> layout_after;
};

struct OutputMeta {
  int64_t index = 0;
  std::string output_type;
  std::optional<int64_t> base_idx, view_offset, same_as_output, view_of_output;
  std::optional<TensorMeta> tensor;
  bool not_a_tensor = false;  // a constant or a Python number the model returned
};

struct ProgramMeta {
  std::vector<InputMeta> inputs;
  std::vector<OutputMeta> outputs;
  std::map<int64_t, int64_t> duplicate_user_inputs, outputs_same_as_inputs;
  size_t aliased_input_groups = 0;
};

struct OptimizerInfo {
  std::string name;
  std::map<std::string, double> hyperparameters;
  std::map<std::string, bool> options;
  std::vector<std::string> parameters, state;
};

struct BundleData {
  std::string path;
  detail::json manifest_raw;
  std::vector<FileEntry> files;
  std::vector<std::string> graph_kinds;
  std::string torch_version, signed_by;
  bool generation = false;
  // signature.json
  std::vector<std::string> user_input_names, user_input_kinds;
  std::map<std::string, GraphSignature> graphs;
  // metadata.json
  std::vector<TensorMeta> user_inputs;
  std::map<std::string, ProgramMeta> programs;
  bool subclasses = false;
  std::vector<std::string> ambient_refusals;  // ambient state the C++ runtime cannot reproduce
  std::optional<OptimizerInfo> optimizer;

  const FileEntry* file(const std::string& rel) const;
  // "" when the C++ runtime runs `kind`, else why not
  std::string cpp_refusal(const std::string& kind) const;
};

// The C++ runtime's spelling of a dtype name ("float32" -> Float); nullopt if unknown.
std::optional<c10::ScalarType> dtype_from_name(const std::string& name);
std::string dtype_name(c10::ScalarType dtype);

}  // namespace aotc
