// The weight-fold program a folded package carries (exporters/weight_fold.py): checked
// as FoldProgram.runner checks it, with the same messages, and run as it runs, each op
// called boxed through the dispatcher with its arguments converted as torch.ops converts
// Python values.
#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <algorithm>
#include <limits>
#include <set>

#include "internal.h"

namespace aotc::detail {
namespace {

// the op namespaces a fold program may name: torch's own kernels, never a custom op
const char* const kNamespaces[] = {"aten", "prims", "mkldnn", "mkl", "quantized", "onednn"};
// prims ops are defined in Python (torch/_prims), so libtorch's dispatcher lacks them; this
// one, which freezing records for a weight cast in forward (w.float()), is run here
const char* const kConvertElementType = "prims::convert_element_type.default";

// Python's repr of a JSON value, as the Python messages quote it
std::string py_repr(const json& v) {
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
    std::string out(1, quote);
    for (char c : s) {
      if (c == '\\' || c == quote) out += '\\';
      out += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
    }
    return out + quote;
  }
  if (v.is_array() || v.is_object()) {
    std::string out;
    for (const auto& [key, value] : v.items()) {
      out += (out.empty() ? "" : ", ") + (v.is_object() ? py_repr(key) + ": " : "") + py_repr(value);
    }
    return v.is_array() ? "[" + out + "]" : "{" + out + "}";
  }
  return v.dump();  // a number
}

// The dtype, layout or memory format torch names `name` (getattr(torch, name)), as the
// IValue an op takes for it; nullopt when `tag` is none of those or torch has no such name.
std::optional<c10::IValue> torch_enum(const std::string& tag, const std::string& name) {
  using S = c10::ScalarType;
  static const std::unordered_map<std::string, S> dtypes = {
      {"uint8", S::Byte}, {"int8", S::Char}, {"int16", S::Short}, {"short", S::Short}, {"int32", S::Int},
      {"int", S::Int}, {"int64", S::Long}, {"long", S::Long}, {"float16", S::Half}, {"half", S::Half},
      {"float32", S::Float}, {"float", S::Float}, {"float64", S::Double}, {"double", S::Double},
      {"complex32", S::ComplexHalf}, {"chalf", S::ComplexHalf}, {"complex64", S::ComplexFloat},
      {"cfloat", S::ComplexFloat}, {"complex128", S::ComplexDouble}, {"cdouble", S::ComplexDouble},
      {"bool", S::Bool}, {"qint8", S::QInt8}, {"quint8", S::QUInt8}, {"qint32", S::QInt32}, {"bfloat16", S::BFloat16},
      {"quint4x2", S::QUInt4x2}, {"quint2x4", S::QUInt2x4}, {"bits1x8", S::Bits1x8}, {"bits2x4", S::Bits2x4},
      {"bits4x2", S::Bits4x2}, {"bits8", S::Bits8}, {"bits16", S::Bits16}, {"float8_e5m2", S::Float8_e5m2},
      {"float8_e4m3fn", S::Float8_e4m3fn}, {"float8_e5m2fnuz", S::Float8_e5m2fnuz},
      {"float8_e4m3fnuz", S::Float8_e4m3fnuz}, {"float8_e8m0fnu", S::Float8_e8m0fnu},
      {"float4_e2m1fn_x2", S::Float4_e2m1fn_x2}, {"uint16", S::UInt16}, {"uint32", S::UInt32}, {"uint64", S::UInt64},
      {"bit", S::UInt1}, {"uint1", S::UInt1}, {"uint2", S::UInt2}, {"uint3", S::UInt3}, {"uint4", S::UInt4},
      {"uint5", S::UInt5}, {"uint6", S::UInt6}, {"uint7", S::UInt7}, {"int1", S::Int1}, {"int2", S::Int2},
      {"int3", S::Int3}, {"int4", S::Int4}, {"int5", S::Int5}, {"int6", S::Int6}, {"int7", S::Int7}};
  static const std::unordered_map<std::string, c10::Layout> layouts = {
      {"strided", c10::kStrided}, {"sparse_coo", c10::kSparse}, {"sparse_csr", c10::kSparseCsr},
      {"sparse_csc", c10::kSparseCsc}, {"sparse_bsr", c10::kSparseBsr}, {"sparse_bsc", c10::kSparseBsc},
      {"_mkldnn", c10::kMkldnn}, {"jagged", c10::kJagged}};
  static const std::unordered_map<std::string, c10::MemoryFormat> formats = {
      {"contiguous_format", c10::MemoryFormat::Contiguous}, {"legacy_contiguous_format", c10::MemoryFormat::Contiguous},
      {"preserve_format", c10::MemoryFormat::Preserve}, {"channels_last", c10::MemoryFormat::ChannelsLast},
      {"channels_last_3d", c10::MemoryFormat::ChannelsLast3d}};
  auto find = [&](const auto& table) -> std::optional<c10::IValue> {
    auto it = table.find(name);
    return it == table.end() ? std::nullopt : std::optional<c10::IValue>(c10::IValue(it->second));
  };
  if (tag == "dtype") return find(dtypes);
  if (tag == "layout") return find(layouts);
  if (tag == "memory_format") return find(formats);
  return std::nullopt;
}

// A tagged argument {"tag": x}: the tag and x, or nullptr when `v` is not one.
const json* tagged(const json& v, std::string& tag) {
  if (!v.is_object() || v.size() != 1) return nullptr;
  tag = v.begin().key();
  return &v.begin().value();
}

// The value of a tagged argument that is no reference ({"float": "inf"}, a device, an
// enum), or nullopt when the program's format has no such argument.
std::optional<c10::IValue> tagged_value(const std::string& tag, const json& x) {
  if (tag == "float" && x.is_string()) {
    const auto& s = x.get_ref<const std::string&>();
    double inf = std::numeric_limits<double>::infinity();
    if (s == "inf" || s == "-inf") return c10::IValue(s == "inf" ? inf : -inf);
    if (s == "nan") return c10::IValue(std::numeric_limits<double>::quiet_NaN());
    return std::nullopt;
  }
  if (tag == "device" && x.is_string()) {
    try {
      return c10::IValue(c10::Device(x.get<std::string>()));
    } catch (const c10::Error&) {
      return std::nullopt;
    }
  }
  return x.is_string() ? torch_enum(tag, x.get<std::string>()) : std::nullopt;
}

// Every argument is one the program's format has (weight_fold.py's _decode).
void check_argument(const json& v, const std::string& where) {
  if (v.is_primitive()) return;  // None, a bool, a number or a string
  if (v.is_array()) {
    for (const auto& x : v) check_argument(x, where);
    return;
  }
  std::string tag;
  const json* x = tagged(v, tag);
  // (a negative input, which Python would count from the end, is refused)
  if (x && (tag == "node" || tag == "input") && x->is_number_integer() && x->get<int64_t>() >= 0) return;
  if (x && tagged_value(tag, *x)) return;
  throw BundleError(where + ": argument " + py_repr(v) + " is not one a fold program has.");
}

// Every {"node": i} in `v` names a node before `limit` (weight_fold.py's _check_refs).
void check_refs(const json& v, size_t limit, const std::string& where) {
  if (v.is_object() && v.size() == 1 && v.contains("node")) {
    const json& i = v["node"];
    if (!(i.is_number_integer() && i.get<int64_t>() >= 0 && i.get<uint64_t>() < limit)) {
      throw BundleError(where + ": a reference to node " + py_repr(i) + " comes before that node.");
    }
  }
  if (v.is_structured()) {
    for (const auto& x : v) check_refs(x, limit, where);
  }
}

// The op a node names, or nullopt for "getitem" and kConvertElementType, which Run runs
// itself; only in kNamespaces (weight_fold.py's _resolve_op).
std::optional<c10::OperatorHandle> resolve_op(const json& name, const std::string& where) {
  if (name == "getitem" || name == kConvertElementType) return std::nullopt;
  size_t colons = name.is_string() ? name.get_ref<const std::string&>().find("::") : std::string::npos;
  if (colons == std::string::npos) throw BundleError(where + ": " + py_repr(name) + " does not name an op.");
  const auto& full = name.get_ref<const std::string&>();
  std::string ns = full.substr(0, colons), rest = full.substr(colons + 2);
  if (std::find(std::begin(kNamespaces), std::end(kNamespaces), ns) == std::end(kNamespaces)) {
    throw BundleError(where + ": op " + py_repr(name) + " is outside the namespaces a fold program may use "
                      "(aten, prims, mkldnn, mkl, quantized, onednn).");
  }
  // Python's "default" overload (and a bare op name, its only overload: the ops inductor's
  // freezing passes call so, like mkldnn::_reorder_convolution_weight) is "" here
  size_t dot = rest.find('.');
  std::string overload = dot == std::string::npos ? "" : rest.substr(dot + 1);
  auto op = c10::Dispatcher::singleton().findSchema(
      {ns + "::" + rest.substr(0, dot), overload == "default" ? "" : overload});
  if (!op) throw BundleError(where + ": this torch has no op " + py_repr(name) + "; compile the bundle again with it.");
  return op;
}

// One run of a program: the values of its nodes so far, over the graph's inputs.
class Run {
 public:
  Run(const std::vector<at::Tensor>& inputs, const std::string& where) : inputs_(inputs), where_(where) {}

  void call(const json& node, size_t i) {
    const auto& op_name = node["op"].get_ref<const std::string&>();
    try {
      values_.push_back(op_name == "getitem"               ? getitem(node)
                        : op_name == kConvertElementType ? convert_element_type(node)
                                                         : call_op(*resolve_op(node["op"], where_), node));
    } catch (const c10::Error& e) {
      throw BundleError(where_ + ": node " + std::to_string(i) + " (" + op_name + ") failed: " +
                        e.what_without_backtrace());
    }
  }

  at::Tensor constant(const std::string& name, const json& ref) {
    c10::IValue value = decode(ref, c10::AnyType::get(), std::nullopt);
    if (!value.isTensor()) throw BundleError(where_ + ": constant '" + name + "' is not a tensor.");
    return value.toTensor();
  }

 private:
  // A single result as it is, several as a tuple (as the op returns them to Python).
  c10::IValue call_op(const c10::OperatorHandle& op, const json& node) {
    std::vector<c10::IValue> stack = stack_for(op.schema(), node);
    op.callBoxed(stack);
    if (stack.size() == 1) return std::move(stack[0]);
    return stack.empty() ? c10::IValue() : c10::IValue(c10::ivalue::Tuple::create(std::move(stack)));
  }

  // The stack built as torch.ops builds it from Python's arguments (createStackForSchema):
  // the positional ones, then each later parameter from the keyword arguments or its default.
  std::vector<c10::IValue> stack_for(const c10::FunctionSchema& schema, const json& node) {
    const auto& params = schema.arguments();
    const json& args = node["args"];
    const json& kwargs = node["kwargs"];
    TORCH_CHECK(args.size() <= params.size(), schema.name(), "() takes at most ", params.size(), " arguments, the "
                "program gives ", args.size());
    std::vector<c10::IValue> stack;
    for (size_t j = 0; j < args.size(); ++j) stack.push_back(argument(args[j], params[j], schema));
    size_t used = 0;
    for (size_t j = args.size(); j < params.size(); ++j) {
      const auto& param = params[j];
      if (kwargs.contains(param.name())) {
        stack.push_back(argument(kwargs[param.name()], param, schema));
        ++used;
      } else {
        TORCH_CHECK(param.default_value().has_value(), schema.name(), "() is missing value for argument '",
                    param.name(), "'");
        stack.push_back(*param.default_value());
      }
    }
    if (used != kwargs.size()) {
      std::vector<std::string> names;
      for (const auto& item : kwargs.items()) names.push_back(item.key());
      TORCH_CHECK(false, schema.findErrorInKwargs(names));
    }
    return stack;
  }

  // prims::convert_element_type as torch/_prims runs it (_convert_element_type_aten): a
  // tensor like `a` (its strides kept) of the new dtype, `a` copied into it
  c10::IValue convert_element_type(const json& node) {
    static const c10::FunctionSchema schema =
        torch::jit::parseSchema("prims::convert_element_type(Tensor a, ScalarType dtype) -> Tensor");
    std::vector<c10::IValue> stack = stack_for(schema, node);
    const at::Tensor& a = stack[0].toTensor();
    return at::empty_like(a, a.options().dtype(stack[1].toScalarType())).copy_(a);
  }

  // A parameter's value, of its type (but a bool is a Scalar too, as in Python), for an
  // error of Python's words rather than the kernel's unboxing failing an assert.
  c10::IValue argument(const json& v, const c10::Argument& param, const c10::FunctionSchema& schema) {
    c10::IValue value = decode(v, param.type(), param.N());
    const c10::TypePtr& type = param.type()->kind() == c10::TypeKind::OptionalType
                                   ? param.type()->expectRef<c10::OptionalType>().getElementType() : param.type();
    bool fits = value.type()->isSubtypeOf(*param.type()) || (value.isBool() && type->kind() == c10::TypeKind::NumberType);
    TORCH_CHECK(fits, schema.name(), "() expected a value of type '", param.type()->repr_str(), "' for argument '",
                param.name(), "' but instead found type '", value.type()->repr_str(), "'.");
    return value;
  }

  // operator.getitem(node value, index) over a tuple or list result
  c10::IValue getitem(const json& node) {
    const json& args = node["args"];
    TORCH_CHECK(args.size() == 2 && node["kwargs"].empty() && args[1].is_number_integer(),
                "getitem takes a value and an index");
    c10::IValue from = decode(args[0], c10::AnyType::get(), std::nullopt);
    TORCH_CHECK(from.isTuple() || from.isList(), "getitem of a ", from.tagKind());
    int64_t size = from.isTuple() ? from.toTupleRef().elements().size() : from.toListRef().size();
    int64_t k = args[1].get<int64_t>();
    TORCH_CHECK(-size <= k && k < size, "getitem index ", k, " of ", size, " values");
    k = k < 0 ? k + size : k;
    return from.isTuple() ? from.toTupleRef().elements()[k] : from.toListRef()[k];
  }

  // A JSON argument as the IValue the op expects for an argument of `type` (its fake
  // type: an int for a dtype, int[] for SymInt[]), converted as torch.ops converts Python
  // values (toIValue): a number where a Tensor goes becomes a wrapped-number tensor, an
  // int where a float goes a double, one int fills an int[N], a list takes its element type.
  c10::IValue decode(const json& v, const c10::TypePtr& type, std::optional<int32_t> n) {
    std::string tag;
    if (const json* x = tagged(v, tag); x && (tag == "node" || tag == "input")) return reference(tag, x->get<int64_t>());
    if (v.is_null()) return c10::IValue();
    switch (type->kind()) {
      case c10::TypeKind::OptionalType:
        return decode(v, type->expectRef<c10::OptionalType>().getElementType(), n);
      case c10::TypeKind::TensorType:
        if (v.is_number() || v.is_boolean() || (v.is_object() && tag == "float")) {
          return at::native::wrapped_scalar_tensor(decode(v, c10::NumberType::get(), n).toScalar());
        }
        break;
      case c10::TypeKind::ListType:
        if (v.is_array() || (n && v.is_number())) return list(v, type->expectRef<c10::ListType>().getElementType(), n);
        break;
      case c10::TypeKind::FloatType:
        if (v.is_number()) return c10::IValue(v.get<double>());
        break;
      default:
        break;
    }
    return literal(v);
  }

  c10::IValue list(const json& v, const c10::TypePtr& element, std::optional<int32_t> n) {
    c10::impl::GenericList out(element);
    for (size_t j = 0; j < (v.is_array() ? v.size() : size_t(*n)); ++j) {
      out.push_back(decode(v.is_array() ? v[j] : v, element, std::nullopt));
    }
    return out;
  }

  // A value the schema does not type further (a Scalar, an int, a string...), as itself.
  c10::IValue literal(const json& v) {
    if (v.is_boolean()) return c10::IValue(v.get<bool>());
    if (v.is_number_integer()) return c10::IValue(v.get<int64_t>());
    if (v.is_number()) return c10::IValue(v.get<double>());
    if (v.is_string()) return c10::IValue(v.get<std::string>());
    if (v.is_array()) return list(v, c10::AnyType::get(), std::nullopt);
    std::string tag;
    const json* x = tagged(v, tag);
    return *tagged_value(tag, *x);  // checked when the program was read
  }

  c10::IValue reference(const std::string& tag, int64_t i) {
    if (tag == "node") return values_[i];  // checked: an earlier node
    if (i < 0 || size_t(i) >= inputs_.size()) {
      throw BundleError(where_ + ": the program reads graph input " + std::to_string(i) + " of " +
                        std::to_string(inputs_.size()) + ".");
    }
    return inputs_[i];
  }

  const std::vector<at::Tensor>& inputs_;
  const std::string& where_;
  std::vector<c10::IValue> values_;
};

// The graph inputs a program reads: every {"input": i} in it (FoldProgram.inputs).
void collect_inputs(const json& v, std::set<int64_t>& found) {
  if (v.is_object() && v.size() == 1 && v.contains("input") && v["input"].is_number_integer()) {
    found.insert(v["input"].get<int64_t>());
  }
  if (v.is_structured()) {
    for (const auto& x : v) collect_inputs(x, found);
  }
}

}  // namespace

FoldedConstants::FoldedConstants(const json& program, const std::vector<std::string>& expected, std::string where)
    : program_(program), where_(std::move(where)) {
  if (!(program_.is_object() && program_.value("version", json()) == 1 && program_.value("nodes", json()).is_array() &&
        program_.value("constants", json()).is_object())) {
    throw BundleError(where_ + " is not a version 1 weight fold program.");
  }
  const json& nodes = program_["nodes"];
  const json& constants = program_["constants"];
  std::set<std::string> wanted(expected.begin(), expected.end()), made;
  for (const auto& item : constants.items()) made.insert(item.key());
  if (made != wanted) {
    std::vector<std::string> missing;
    std::set_difference(wanted.begin(), wanted.end(), made.begin(), made.end(), std::back_inserter(missing));
    std::string names;
    for (size_t k = 0; k < std::min<size_t>(missing.size(), 3); ++k) names += (k ? ", " : "") + missing[k];
    throw BundleError(where_ + " does not make the constants the package expects" +
                      (missing.empty() ? "" : " (missing " + names + ")") + "; compile the bundle again.");
  }
  // in FoldProgram.runner's order, for the same first error
  for (size_t i = 0; i < nodes.size(); ++i) {
    const json& node = nodes[i];
    if (!(node.is_object() && node.size() == 3 && node.contains("op") && node.value("args", json()).is_array() &&
          node.value("kwargs", json()).is_object())) {
      throw BundleError(where_ + ": node " + std::to_string(i) + " is not {op, args, kwargs}.");
    }
    check_refs(node, i, where_);
    for (const auto& x : node["kwargs"]) check_argument(x, where_);
    resolve_op(node["op"], where_);
    check_argument(node["args"], where_);
  }
  for (const auto& ref : constants) {
    check_refs(ref, nodes.size(), where_);
    check_argument(ref, where_);
  }
  std::set<int64_t> found;
  collect_inputs(nodes, found);
  collect_inputs(constants, found);
  reads_.assign(found.begin(), found.end());
}

std::unordered_map<std::string, at::Tensor> FoldedConstants::run(const std::vector<at::Tensor>& args) const {
  at::NoGradGuard no_grad;  // the constants are values, never part of a graph being trained
  Run run(args, where_);
  const json& nodes = program_["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i) run.call(nodes[i], i);
  std::unordered_map<std::string, at::Tensor> out;
  for (const auto& [name, ref] : program_["constants"].items()) out.emplace(name, run.constant(name, ref));
  return out;
}

}  // namespace aotc::detail
