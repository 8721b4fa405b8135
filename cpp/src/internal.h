// What the runtime's source files share and users of the library do not see.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "aotc/errors.h"

namespace aotc::detail {

namespace fs = std::filesystem;
using json = nlohmann::json;

// hashing.cpp: lowercase hex sha256 of a file's bytes, or of a string
std::string sha256_file(const fs::path& path);
std::string sha256_bytes(const std::string& bytes);
// a file's bytes (BundleError naming it when it cannot be read)
std::string read_file(const fs::path& path);

// hashing.cpp: whether JSON text nests deeper than Python's parser follows (1000 levels);
// such text is refused before parsing ("nested too deeply"), as a deep one would exhaust
// the stack of a recursive walk.
bool json_nested_too_deeply(const char* begin, const char* end);

// signature.cpp: the trust policy of aotc/bundle/signing.py.
// The public keys configured: `given` when set (an empty list asks for no signature),
// else the paths AOTC_PUBLIC_KEYS lists (separated by ':'); each checked to be an
// elliptic-curve public key in PEM on P-256, P-384 or P-521, else SignatureError.
std::vector<fs::path> configured_keys(const std::optional<std::vector<std::string>>& given);
// With keys, raise SignatureError unless one of them signed exactly the files of the
// bundle at `root` (model.sig, the OpenSSF model-signing format `aotc sign` writes);
// returns the key that signed it. Reads bytes to hash them, nothing more.
fs::path require_signature(const fs::path& root, const std::vector<fs::path>& keys);

// fold.cpp: a package's folded constants (exporters/weight_fold.py), made from the
// graph's inputs by the fold program the package carries as data/aotc/weight_fold.json.
class FoldedConstants {
 public:
  // `program` is the parsed weight_fold.json; `expected` the loader's get_constant_fqns();
  // `where` names the file in errors (BundleError when the program is malformed, names
  // an op outside torch's namespaces, or does not make exactly `expected`).
  FoldedConstants(const json& program, const std::vector<std::string>& expected, std::string where);
  // The constants, computed from the graph's full input list `args`.
  std::unordered_map<std::string, at::Tensor> run(const std::vector<at::Tensor>& args) const;
  // The positions of `args` the program reads (to know when to run it again).
  const std::vector<int64_t>& reads() const { return reads_; }

 private:
  json program_;
  std::string where_;
  std::vector<int64_t> reads_;
};

// archive.cpp: one member of a zip archive (a .pt2 package), or nullopt when absent.
std::optional<std::string> read_archive_member(const fs::path& archive, const std::string& member_suffix);
// archive.cpp: refuse an AOTInductor package with members outside what AOTInductor writes
// (aotc/bundle/archives.py's check_compiled_package, same messages).
void check_compiled_package(const fs::path& path);
// heap.cpp: on the first CPU package loaded, keep glibc's freed heap in the process between
// calls (aotc/runtime/heap.py); aotc::heap_state() says what it did.
void keep_heap();

}  // namespace aotc::detail
