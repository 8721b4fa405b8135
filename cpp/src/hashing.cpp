// sha256 of files and strings (OpenSSL), whole-file reads, and JSON's nesting depth.
#include <fstream>
#include <memory>

#include <openssl/evp.h>

#include "internal.h"

namespace aotc::detail {

namespace {

using Digest = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

Digest new_digest() {
  Digest ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL could not start a sha256 digest");
  }
  return ctx;
}

std::string hex_of(EVP_MD_CTX* ctx) {
  unsigned char bytes[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, bytes, &length);
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BundleError("cannot read '" + path.string() + "'.");
  Digest ctx = new_digest();
  std::vector<char> block(1 << 20);
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    EVP_DigestUpdate(ctx.get(), block.data(), static_cast<size_t>(in.gcount()));
  }
  return hex_of(ctx.get());
}

std::string sha256_bytes(const std::string& bytes) {
  Digest ctx = new_digest();
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  return hex_of(ctx.get());
}

bool json_nested_too_deeply(const char* begin, const char* end) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char* c = begin; c != end; ++c) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (*c == '\\') {
        escaped = true;
      } else if (*c == '"') {
        in_string = false;
      }
    } else if (*c == '"') {
      in_string = true;
    } else if (*c == '[' || *c == '{') {
      if (++depth > 1000) return true;
    } else if (*c == ']' || *c == '}') {
      --depth;
    }
  }
  return false;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BundleError("cannot read '" + path.string() + "'.");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace aotc::detail
