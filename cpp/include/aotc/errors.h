// The errors the C++ runtime raises: the same names, and the same message texts, as the
// Python runtime's (aotc/errors.py). aotc-run prints "Error: <what()>" and exits 1 for
// any of them, 2 for anything else (an internal error).
#pragma once

#include <stdexcept>
#include <string>

namespace aotc {

// `text` as valid UTF-8: a byte outside a well-formed sequence (a damaged file's, quoted
// by a parser) is written \xNN, so that a message can always be printed and parsed.
inline std::string valid_utf8(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    auto byte = static_cast<unsigned char>(text[i]);
    size_t length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xe ? 3 : (byte >> 3) == 0x1e ? 4 : 0;
    bool whole = length > 0 && i + length <= text.size();
    for (size_t k = 1; whole && k < length; ++k) whole = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (whole) {
      out.append(text, i, length);
      i += length;
    } else {
      static const char* digits = "0123456789abcdef";
      out += "\\x";
      out += digits[byte >> 4];
      out += digits[byte & 15];
      ++i;
    }
  }
  return out;
}

// Base class: a problem with the user's input or bundle, not a bug in aotc.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(valid_utf8(message)) {}
  virtual const char* name() const noexcept { return "AotcError"; }
};

#define AOTC_ERROR(Name)                                                   \
  class Name : public Error {                                              \
   public:                                                                 \
    explicit Name(const std::string& message) : Error(message) {}          \
    const char* name() const noexcept override { return #Name; }           \
  };

// A bundle on disk is missing a file, corrupted, from an unknown format, or needs
// something this runtime does not replay.
AOTC_ERROR(BundleError)
// A bundle's signature does not verify against the configured public keys.
AOTC_ERROR(SignatureError)
// A call got inputs that do not match the bundle's signature.
AOTC_ERROR(InputError)
// A bundle was asked for something its graphs cannot do (train_step on an inference bundle).
AOTC_ERROR(ModeError)
// A graph failed at run time on inputs that passed the checks.
AOTC_ERROR(GraphRunError)
// A device that is not supported or not present here.
AOTC_ERROR(DeviceError)
// CUDA-graph replay asked for where a recording would not replay what eager does.
AOTC_ERROR(CudaGraphError)

#undef AOTC_ERROR

}  // namespace aotc
