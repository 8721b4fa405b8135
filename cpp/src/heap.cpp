// glibc's heap kept between calls of a compiled package on CPU: aotc/runtime/heap.py's
// keep(), same conditions, same thresholds, same state strings. A package allocates its
// buffers on every call and frees them at its end; with glibc's default thresholds that
// memory goes back to the kernel and the next call faults every page in again.
#include <cstdlib>
#include <mutex>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "internal.h"

namespace aotc {

namespace {

std::mutex heap_lock;
std::string heap_status;  // "" until the first CPU package is loaded

std::string keep() {
#if defined(__GLIBC__)
  const char* off = std::getenv("AOTC_KEEP_HEAP");
  if (off && std::string(off) == "0") return "off: AOTC_KEEP_HEAP=0";
  std::string tuned;
  auto add = [&](const std::string& what) { tuned += (tuned.empty() ? "" : ", ") + what; };
  for (const char* name : {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"}) {
    if (std::getenv(name)) add(name);
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::string(tunables).find("glibc.malloc") != std::string::npos) add("GLIBC_TUNABLES");
  const char* preload = std::getenv("LD_PRELOAD");
  for (const char* allocator : {"jemalloc", "tcmalloc", "mimalloc"}) {
    if (preload && std::string(preload).find(allocator) != std::string::npos) {
      add("LD_PRELOAD");
      break;
    }
  }
  if (!tuned.empty()) return "off: the environment sets " + tuned;
  // the mmap threshold at glibc's largest on 64-bit (HEAP_MAX_SIZE / 2); trim at 1 GiB
  if (!mallopt(M_MMAP_THRESHOLD, 32 << 20) || !mallopt(M_TRIM_THRESHOLD, 1 << 30)) return "off: mallopt refused";
  return "kept";
#else
  return "off: not glibc";
#endif
}

}  // namespace

namespace detail {

void keep_heap() {
  std::lock_guard<std::mutex> hold(heap_lock);
  if (heap_status.empty()) heap_status = keep();
}

}  // namespace detail

std::string heap_state() {
  std::lock_guard<std::mutex> hold(heap_lock);
  return heap_status;
}

}  // namespace aotc
