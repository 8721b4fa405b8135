// The errors the C++ runtime raises: the same names, and the same message texts, as the
// Python runtime's (aotc/errors.py). aotc-run prints "Error: <what()>" and exits 1 for
// any of them, 2 for anything else (an internal error).
#pragma once

#include <stdexcept>
#include <string>

namespace aotc {

// Base class: a problem with the user's input or bundle, not a bug in aotc.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
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

#undef AOTC_ERROR

}  // namespace aotc
