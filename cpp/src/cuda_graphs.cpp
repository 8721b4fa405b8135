#include "cuda_graphs.h"

#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "aotc/errors.h"

#ifdef AOTC_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace aotc::detail {

namespace {

// graph inputs that live in the loaded module, read (and written) in place by a replay
const std::set<std::string> kFixedRoles = {"parameter", "buffer", "optimizer_state", "constant"};

std::string shape_text(at::IntArrayRef s) {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < s.size(); ++i) out << (i ? ", " : "") << s[i];
  out << (s.size() == 1 ? ",)" : ")");
  return out.str();
}

}  // namespace

struct CudaGraphRun::Impl {
  std::vector<size_t> fixed, copied;
  size_t max_shapes;
  std::string what;
  std::mutex lock;
#ifdef AOTC_WITH_CUDA
  struct Recording {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    std::vector<at::Tensor> inputs, outputs;
    std::vector<const void*> fixed;
  };
  // key: sizes, strides and dtype of each copied input, flattened
  std::map<std::vector<int64_t>, Recording> recordings;
  std::optional<at::cuda::MempoolId_t> pool;
  std::optional<c10::cuda::CUDAStream> stream;
#endif
};

CudaGraphRun::CudaGraphRun(const std::vector<std::string>& roles, size_t max_shapes, std::string what)
    : impl_(std::make_unique<Impl>()) {
  for (size_t i = 0; i < roles.size(); ++i) (kFixedRoles.count(roles[i]) ? impl_->fixed : impl_->copied).push_back(i);
  impl_->max_shapes = max_shapes;
  impl_->what = std::move(what);
#ifndef AOTC_WITH_CUDA
  throw CudaGraphError("this aotc runtime was built against a libtorch without CUDA; CUDA graphs need one.");
#endif
}

CudaGraphRun::~CudaGraphRun() = default;

std::vector<at::Tensor> CudaGraphRun::run(torch::inductor::AOTIModelPackageLoader& loader,
                                          const std::vector<at::Tensor>& args) {
#ifndef AOTC_WITH_CUDA
  return loader.run(args);
#else
  Impl& m = *impl_;
  std::vector<int64_t> key;
  for (size_t i : m.copied) {
    const at::Tensor& a = args[i];
    if (!a.defined()) {  // an input the package takes as undefined stays so
      key.push_back(-1);
      continue;
    }
    key.push_back(a.dim());
    key.insert(key.end(), a.sizes().begin(), a.sizes().end());
    key.insert(key.end(), a.strides().begin(), a.strides().end());
    key.push_back(static_cast<int64_t>(a.scalar_type()));
    key.push_back(a.device().index());
  }
  std::vector<const void*> fixed;
  for (size_t i : m.fixed) fixed.push_back(args[i].defined() ? args[i].data_ptr() : nullptr);
  std::lock_guard<std::mutex> hold(m.lock);
  auto it = m.recordings.find(key);
  if (it != m.recordings.end() && it->second.fixed == fixed) {
    Impl::Recording& rec = it->second;
    for (size_t i : m.copied) {
      if (args[i].defined()) rec.inputs[i].copy_(args[i]);
    }
    rec.graph->replay();
    std::vector<at::Tensor> out;
    out.reserve(rec.outputs.size());
    for (const at::Tensor& o : rec.outputs) out.push_back(o.defined() ? o.clone() : o);
    return out;
  }
  // the first call of this signature: unrecorded, then recorded for the calls after it
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].defined() && !args[i].is_cuda()) {
      throw CudaGraphError("input " + std::to_string(i) + " of " + m.what + " is a tensor on " + args[i].device().str() +
                           "; a CUDA graph replays kernels on CUDA memory alone. Give every input on the module's "
                           "CUDA device, or load without cuda_graphs.");
    }
  }
  if (it == m.recordings.end() && m.recordings.size() >= m.max_shapes) {
    std::string shapes;
    for (size_t i : m.copied) {
      shapes += (shapes.empty() ? "" : ", ") + (args[i].defined() ? shape_text(args[i].sizes()) : std::string("None"));
    }
    throw CudaGraphError(m.what + " has recorded " + std::to_string(m.recordings.size()) +
                         " input shapes, its limit; this call's [" + shapes + "] would be another. A CUDA graph holds "
                         "fixed sizes: pad inputs to the sizes recorded, load with more recordings, or without "
                         "cuda_graphs for a dynamic shape.");
  }
  std::vector<at::Tensor> result = loader.run(args);
  Impl::Recording rec;
  rec.fixed = fixed;
  rec.inputs = args;
  for (size_t i : m.copied) {
    if (args[i].defined()) rec.inputs[i] = at::empty_strided(args[i].sizes(), args[i].strides(), args[i].options()).copy_(args[i]);
  }
  c10::Device device(c10::kCUDA, 0);
  for (const at::Tensor& a : args) {
    if (a.defined()) {
      device = a.device();
      break;
    }
  }
  c10::cuda::CUDAGuard device_guard(device);
  if (!m.pool) m.pool = at::cuda::graph_pool_handle();
  if (!m.stream) m.stream = c10::cuda::getStreamFromPool();
  c10::cuda::getCurrentCUDAStream().synchronize();
  {
    c10::cuda::CUDAStreamGuard on(*m.stream);  // cuBLAS's workspace for this stream, made outside the recording
    at::Tensor one = at::ones({1, 1}, at::TensorOptions().device(device).dtype(at::kFloat));
    at::mm(one, one);
    m.stream->synchronize();
  }
  rec.graph = std::make_unique<at::cuda::CUDAGraph>();
  {
    c10::cuda::CUDAStreamGuard on(*m.stream);  // capture never runs on the default stream
    try {
      rec.graph->capture_begin(*m.pool);
      rec.outputs = loader.run(rec.inputs);
      rec.graph->capture_end();
    } catch (const std::exception& e) {
      try {
        rec.graph->capture_end();  // the stream leaves capture mode; the broken recording is dropped
      } catch (const std::exception&) {
      }
      std::string first = e.what();
      first = first.substr(0, first.find('\n'));
      throw CudaGraphError(m.what + " could not be recorded as a CUDA graph (" + first + "): its compiled code does "
                           "something a recording cannot hold, such as a copy to the CPU or a size read from a "
                           "tensor's values. Load it without cuda_graphs.");
    }
  }
  m.recordings[key] = std::move(rec);
  return result;
#endif
}

}  // namespace aotc::detail
