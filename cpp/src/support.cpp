// What the C++ runtime replays, and dtype names. The rules of cpp_refusal are mirrored, word
// for word, by aotc/bundle/cpp_support.py, which `aotc inspect` reports from.
#include "bundle_data.h"

namespace aotc {

std::string BundleData::cpp_refusal(const std::string& kind) const {
  if (generation) return "a generation bundle: its decoding loop and KV cache run in Python (aotc generate)";
  if (kind != "inference" && kind != "joint" && kind != "forward" && kind != "backward") return "a " + kind + " graph";
  if (subclasses) return "tensor subclasses, which only trusted Python classes rebuild";
  if (!ambient_refusals.empty()) return "captured under " + ambient_refusals[0] + ", which the C++ runtime does not set";
  for (const std::string& k : user_input_kinds) {
    if (k != "tensor") return "an int input, which the Python runtime turns into a tensor";
  }
  // a backward graph is described by its forward's metadata
  auto program = programs.find(kind == "backward" ? "forward" : kind);
  if (program == programs.end()) return "no metadata for the " + kind + " graph";
  if (program->second.aliased_input_groups) return "inputs captured as views of one tensor (a synthetic base)";
  for (const InputMeta& i : program->second.inputs) {
    if (i.mutates_storage) return "an input whose storage the graph swaps (set_ or a .data assignment)";
  }
  for (const OutputMeta& o : program->second.outputs) {
    if (o.not_a_tensor) return "outputs that are not tensors (constants or Python numbers)";
    if (o.output_type == "custom_function_view") return "outputs of custom autograd.Functions that view an input";
  }
  auto backward = graphs.find("backward");
  if ((kind == "forward" || kind == "backward") && backward != graphs.end()) {
    const GraphSignature& fw = graphs.at("forward");
    for (const Slot& s : backward->second.inputs) {
      if (s.role != "tangent") continue;
      bool user_output = false;
      for (const Slot& o : fw.outputs) user_output |= o.name == s.target && o.role == "user_output";
      if (!user_output) return "a gradient for an input the forward mutates in place, which C++ callers cannot give";
    }
  }
  return "";
}

namespace {

const std::vector<std::pair<std::string, c10::ScalarType>>& dtypes() {
  static const std::vector<std::pair<std::string, c10::ScalarType>> table = {
      {"float32", c10::kFloat},  {"float64", c10::kDouble}, {"float16", c10::kHalf}, {"bfloat16", c10::kBFloat16},
      {"int64", c10::kLong},     {"int32", c10::kInt},      {"int16", c10::kShort},  {"int8", c10::kChar},
      {"uint8", c10::kByte},     {"bool", c10::kBool},      {"complex64", c10::kComplexFloat},
      {"complex128", c10::kComplexDouble}, {"float8_e4m3fn", c10::ScalarType::Float8_e4m3fn},
      {"float8_e5m2", c10::ScalarType::Float8_e5m2}, {"uint16", c10::ScalarType::UInt16},
      {"uint32", c10::ScalarType::UInt32}, {"uint64", c10::ScalarType::UInt64}};
  return table;
}

}  // namespace

std::optional<c10::ScalarType> dtype_from_name(const std::string& name) {
  for (const auto& [n, t] : dtypes()) {
    if (n == name) return t;
  }
  return std::nullopt;
}

std::string dtype_name(c10::ScalarType dtype) {
  for (const auto& [n, t] : dtypes()) {
    if (t == dtype) return n;
  }
  return c10::toString(dtype);
}

}  // namespace aotc
