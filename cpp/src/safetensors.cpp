// safetensors: an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the bytes.
#include "safetensors.h"

#include "aotc/aotc.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

namespace aotc::detail {

namespace {

constexpr uint64_t kMaxHeaderBytes = 256ull << 20;

struct Dtype {
  const char* name;
  c10::ScalarType type;
  int64_t size;
};

const std::vector<Dtype>& dtypes() {
  static const std::vector<Dtype> table = {
      {"BOOL", c10::kBool, 1},  {"U8", c10::kByte, 1},   {"I8", c10::kChar, 1},
      {"F8_E5M2", c10::ScalarType::Float8_e5m2, 1}, {"F8_E4M3", c10::ScalarType::Float8_e4m3fn, 1},
      {"I16", c10::kShort, 2},  {"U16", c10::ScalarType::UInt16, 2}, {"F16", c10::kHalf, 2},
      {"BF16", c10::kBFloat16, 2}, {"I32", c10::kInt, 4}, {"U32", c10::ScalarType::UInt32, 4},
      {"F32", c10::kFloat, 4},  {"F64", c10::kDouble, 8}, {"I64", c10::kLong, 8},
      {"U64", c10::ScalarType::UInt64, 8}, {"C64", c10::kComplexFloat, 8}};
  return table;
}

// A private, writable mapping of a whole file: pages are read on first touch and copied
// on first write.
struct Mapping {
  void* data = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (data != MAP_FAILED) munmap(data, size);
  }
};

std::shared_ptr<Mapping> map_file(const fs::path& path, size_t size) {
  auto m = std::make_shared<Mapping>();
  m->size = size;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw BundleError("'" + path.string() + "' cannot be opened.");
  m->data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m->data == MAP_FAILED) throw BundleError("'" + path.string() + "' cannot be mapped.");
  return m;
}

bool non_negative_ints(const json& v) {
  if (!v.is_array()) return false;
  for (const json& x : v) {
    if (!x.is_number_unsigned()) return false;
  }
  return true;
}

}  // namespace

NamedTensors read_safetensors(const fs::path& path) {
  const std::string p = "'" + path.string() + "'";
  const uint64_t size = fs::file_size(path);
  if (size < 8) {
    throw BundleError(p + " is not a safetensors file: " + std::to_string(size) + " bytes is shorter than its header.");
  }
  auto mapping = map_file(path, size);
  const auto* bytes = static_cast<const char*>(mapping->data);
  uint64_t length = 0;
  std::memcpy(&length, bytes, 8);  // little-endian, as is every machine this runs on
  if (length > std::min(size - 8, kMaxHeaderBytes)) {
    throw BundleError(p + ": its header claims " + std::to_string(length) + " bytes; the file has " +
                      std::to_string(size - 8) + " after it.");
  }
  json header;
  if (json_nested_too_deeply(bytes + 8, bytes + 8 + length)) throw BundleError(p + " header is not valid JSON (nested too deeply).");
  try {
    header = json::parse(bytes + 8, bytes + 8 + length);
  } catch (const json::exception& e) {
    throw BundleError(p + " header is not valid JSON (" + e.what() + ").");
  }
  if (!header.is_object()) throw BundleError(p + ": the safetensors header is not an object.");
  const uint64_t data_size = size - 8 - length;
  char* data = static_cast<char*>(mapping->data) + 8 + length;
  NamedTensors out;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    std::string where = p + ": tensor '" + name + "'";
    if (!info.is_object() || info.size() != 3 || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets")) {
      throw BundleError(where + " is not described by dtype, shape and data_offsets.");
    }
    const Dtype* dtype = nullptr;
    for (const Dtype& d : dtypes()) {
      if (info["dtype"].is_string() && info["dtype"].get<std::string>() == d.name) dtype = &d;
    }
    if (dtype == nullptr) {
      throw BundleError(where + " has dtype " + info["dtype"].dump() + "; expected one of the safetensors dtypes.");
    }
    const json& shape = info["shape"];
    const json& offsets = info["data_offsets"];
    if (!non_negative_ints(shape) || !non_negative_ints(offsets) || offsets.size() != 2) {
      throw BundleError(where + ": shape and data_offsets must be non-negative integers.");
    }
    std::vector<int64_t> sizes;
    uint64_t numel = 1;
    for (const json& n : shape) {
      sizes.push_back(n.get<int64_t>());
      numel *= n.get<uint64_t>();
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (!(begin <= end && end <= data_size) || end - begin != numel * static_cast<uint64_t>(dtype->size)) {
      throw BundleError(where + ": bytes " + std::to_string(begin) + ".." + std::to_string(end) + " do not hold its " +
                        std::to_string(numel) + " elements inside the file's " + std::to_string(data_size) + ".");
    }
    spans.emplace_back(begin, end);
    auto options = at::TensorOptions().dtype(dtype->type);
    void* start = data + begin;
    // compiled kernels (oneDNN's especially) may round differently on unaligned data:
    // a tensor the file does not lay out on 64 bytes is copied into memory that is
    if (reinterpret_cast<uintptr_t>(start) % 64 != 0 || numel == 0) {
      out.emplace_back(name, at::from_blob(start, sizes, options).clone());
    } else {
      out.emplace_back(name, at::from_blob(start, sizes, [mapping](void*) {}, options));
    }
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) throw BundleError(p + ": two tensors share bytes; the file is damaged.");
  }
  return out;
}

void write_safetensors(const fs::path& path, const NamedTensors& tensors) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const Dtype* dtype = nullptr;
    for (const Dtype& d : dtypes()) {
      if (d.type == t.scalar_type()) dtype = &d;
    }
    if (dtype == nullptr) throw std::invalid_argument("safetensors has no dtype for " + std::string(c10::toString(t.scalar_type())));
    uint64_t bytes = t.numel() * dtype->size;
    header[name] = {{"dtype", dtype->name}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  fs::path staged = path.parent_path() / ("." + path.filename().string() + ".tmp");
  {
    std::ofstream out(staged, std::ios::binary | std::ios::trunc);
    uint64_t length = text.size();
    out.write(reinterpret_cast<const char*>(&length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const at::Tensor& t : data) out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    if (!out) {
      fs::remove(staged);
      throw std::runtime_error("could not write '" + path.string() + "'");
    }
  }
  fs::rename(staged, path);
}

}  // namespace aotc::detail

namespace aotc {

NamedTensors load_safetensors(const std::string& path) { return detail::read_safetensors(path); }

void save_safetensors(const std::string& path, const NamedTensors& tensors) { detail::write_safetensors(path, tensors); }

}  // namespace aotc
