// safetensors files: read mapped (not copied), written atomically.
#pragma once

#include "internal.h"

namespace aotc::detail {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The tensors of a safetensors file, checked as aotc/bundle/archives.py's
// check_safetensors checks them (same messages). Each views a private copy-on-write mapping
// of the file that lives as long as any of them; writing to one never touches the file.
NamedTensors read_safetensors(const fs::path& path);

// `tensors` (contiguous copies are written for others) as a safetensors file, written to
// a temporary file beside `path` and renamed over it.
void write_safetensors(const fs::path& path, const NamedTensors& tensors);

}  // namespace aotc::detail
