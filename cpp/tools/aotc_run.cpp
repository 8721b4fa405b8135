// aotc-run: serve or train an aotc bundle from C++, no Python.
//
//   aotc-run BUNDLE --inputs in.safetensors --output out.safetensors [--json]
//   aotc-run BUNDLE --train-steps N --data batches.safetensors --output trained.safetensors
//   aotc-run BUNDLE --check [--json]
//
// Exit codes as the aotc CLI's: 0 done, 1 a bundle or input aotc refused (Error: ...),
// 2 a usage error or an internal error.
#include <chrono>
#include <iostream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "aotc/aotc.h"
#include "../src/program.h"
#include "../src/safetensors.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* kUsage =
    "Usage: aotc-run BUNDLE [OPTIONS]\n"
    "\n"
    "  Run an aotc bundle's compiled graphs with the C++ runtime (no Python).\n"
    "\n"
    "  aotc-run model/ --inputs in.safetensors --output out.safetensors\n"
    "  aotc-run model-joint/ --train-steps 10 --data batches.safetensors --output trained.safetensors\n"
    "\n"
    "Options:\n"
    "  --inputs FILE          the user inputs, one tensor per input name (inference)\n"
    "  --output FILE          outputs by name, and 'after:NAME' for each input the call mutated;\n"
    "                         with --train-steps, the trained parameters and buffers\n"
    "  --backward FILE        a forward+backward bundle: after the call, run backward with these\n"
    "                         gradients (by output name) and write 'grad:NAME' of the parameters\n"
    "                         and inputs to --output\n"
    "  --train-steps N        run N train_steps of a joint bundle\n"
    "  --data FILE            per input name, the batches stacked on a new first dim (step k takes k mod count)\n"
    "  --lr X                 the optimizer's learning rate for every step (joint bundles with --optimizer)\n"
    "  --seed S               seed the random generator with S (dropout), as torch.manual_seed(S)\n"
    "                         would; with --train-steps, with S + k before step k\n"
    "  --optimizer-state FILE load the optimizer's state from FILE, and save it there after training\n"
    "  --device DEVICE        cpu (default) or cuda[:N]\n"
    "  --cuda-graphs          replay the compiled CUDA packages as CUDA graphs (one recording per\n"
    "                         input shape), as aotc.load(..., cuda_graphs=True)\n"
    "  --warmup N             before the call, N calls on copies of the inputs, the parameters and\n"
    "                         buffers restored after them (with --cuda-graphs the call replays)\n"
    "  --public-key PEM       require a signature by this key (repeatable; default: AOTC_PUBLIC_KEYS)\n"
    "  --check                open and load the bundle, run nothing\n"
    "  --bench N              time N calls of Module::forward and of the bare AOTInductor run\n"
    "  --json                 a JSON summary on stdout\n"
    "  --help                 show this message\n";

struct Options {
  std::string bundle, inputs, output, data, optimizer_state, backward, device = "cpu";
  std::vector<std::string> keys;
  bool keys_given = false, json = false, check = false, cuda_graphs = false;
  int train_steps = 0, bench = 0, warmup = 0;
  std::optional<double> lr;
  std::optional<int64_t> seed;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError("option " + a + " needs a value");
      return argv[++i];
    };
    auto number = [&](const std::string& v) {
      try {
        size_t used = 0;
        int n = std::stoi(v, &used);
        if (used != v.size() || n < 1) throw std::invalid_argument(v);
        return n;
      } catch (const std::exception&) {
        throw UsageError("option " + a + " takes a positive integer, not '" + v + "'");
      }
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a == "--inputs") {
      o.inputs = value();
    } else if (a == "--output") {
      o.output = value();
    } else if (a == "--backward") {
      o.backward = value();
    } else if (a == "--data") {
      o.data = value();
    } else if (a == "--optimizer-state") {
      o.optimizer_state = value();
    } else if (a == "--device") {
      o.device = value();
    } else if (a == "--public-key") {
      o.keys.push_back(value());
      o.keys_given = true;
    } else if (a == "--train-steps") {
      o.train_steps = number(value());
    } else if (a == "--bench") {
      o.bench = number(value());
    } else if (a == "--warmup") {
      o.warmup = number(value());
    } else if (a == "--cuda-graphs") {
      o.cuda_graphs = true;
    } else if (a == "--lr") {
      std::string v = value();
      try {
        o.lr = std::stod(v);
      } catch (const std::exception&) {
        throw UsageError("option --lr takes a number, not '" + v + "'");
      }
    } else if (a == "--seed") {
      std::string v = value();
      try {
        o.seed = std::stoll(v);
      } catch (const std::exception&) {
        throw UsageError("option --seed takes an integer, not '" + v + "'");
      }
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--check") {
      o.check = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("no such option: " + a);
    } else if (o.bundle.empty()) {
      o.bundle = a;
    } else {
      throw UsageError("got an extra argument '" + a + "'");
    }
  }
  if (o.bundle.empty()) throw UsageError("missing argument BUNDLE");
  if (!o.check) {
    if (o.train_steps ? o.data.empty() : o.inputs.empty()) {
      throw UsageError(o.train_steps ? "--train-steps needs --data" : "give --inputs (or --train-steps with --data, or --check)");
    }
    if (o.output.empty() && !o.bench && !o.train_steps) throw UsageError("give --output FILE");
  }
  return o;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<at::Tensor> inputs_from(const std::string& file, const std::vector<std::string>& names,
                                    const c10::Device& device, std::optional<int64_t> batch) {
  std::map<std::string, at::Tensor> by_name;
  for (auto& [name, t] : aotc::detail::read_safetensors(file)) by_name[name] = t;
  std::vector<at::Tensor> out;
  for (const std::string& name : names) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw aotc::InputError("'" + file + "' has no tensor '" + name + "'; the bundle takes " + list + ".");
    }
    at::Tensor t = it->second;
    if (batch) {
      if (t.dim() == 0 || t.size(0) == 0) {
        throw aotc::InputError("'" + file + "': tensor '" + name + "' holds no batches (stack them on a new first dim).");
      }
      t = t[*batch % t.size(0)];
    }
    out.push_back(t.to(device).clone());  // the caller's own tensors, as a user program holds them
  }
  return out;
}

json tensor_json(const at::Tensor& t) {
  return {{"shape", t.sizes().vec()}, {"dtype", aotc::dtype_name(t.scalar_type())}};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// What an output shares memory with: an input (by name) or an earlier output, or null.
json views_of(const at::Tensor& t, const std::vector<at::Tensor>& inputs, const std::vector<std::string>& names,
              const aotc::Outputs& out, size_t index) {
  auto same = [&](const at::Tensor& other) { return other.defined() && t.storage().data() == other.storage().data(); };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (same(inputs[i])) return "input " + names[i];
  }
  for (size_t i = 0; i < index; ++i) {
    if (same(out.values[i])) return "output " + out.names[i];
  }
  return nullptr;
}

// Module::forward against the bare AOTInductor run of the same package on the same graph
// inputs (what AOTIModelPackageLoader::run costs alone), interleaved so that both see the
// same machine; medians.
void bench(aotc::Module& module, const std::vector<at::Tensor>& inputs, int n, json& summary) {
  aotc::ModuleState& state = aotc::ModuleAccess::state(module);
  aotc::Program& program = *state.programs.at("inference");
  std::vector<at::Tensor> args = state.graph_inputs(program, inputs);
  std::vector<at::Tensor> pass;
  if (program.takes_all) {
    pass = args;
  } else {
    for (size_t i : program.package_inputs) pass.push_back(args[i]);
  }
  std::vector<double> ours, bare;
  for (int k = 0; k < n + 10; ++k) {  // the first 10 of each: warm-up
    auto t0 = Clock::now();
    module.forward(inputs);
    double a = seconds_since(t0);
    t0 = Clock::now();
    program.loader->run(pass);
    double b = seconds_since(t0);
    if (k >= 10) {
      ours.push_back(a);
      bare.push_back(b);
    }
  }
  summary["bench"] = {{"calls", n}, {"forward_us", median(ours) * 1e6}, {"package_run_us", median(bare) * 1e6}};
}

// --warmup: calls on copies of the inputs (and backward, for a forward+backward bundle),
// then the parameters and buffers put back as they were and the gradients cleared.
void warm_up(aotc::Module& module, const Options& o, const c10::Device& device, const std::vector<std::string>& names) {
  std::vector<at::Tensor> saved;
  for (const auto& [name, t] : module.named_state()) saved.push_back(t.clone());
  std::map<std::string, at::Tensor> given;
  if (!o.backward.empty()) {
    for (auto& [name, t] : aotc::detail::read_safetensors(o.backward)) given[name] = t.to(device);
  }
  for (int k = 0; k < o.warmup; ++k) {
    aotc::Outputs out = module.forward(inputs_from(o.inputs, names, device, std::nullopt));
    if (!o.backward.empty()) {
      std::vector<at::Tensor> grads;
      for (const std::string& name : out.names) grads.push_back(given.count(name) ? given[name] : at::Tensor());
      module.backward(grads);
    }
  }
  size_t i = 0;
  for (const auto& [name, t] : module.named_state()) t.copy_(saved[i++]);
  module.zero_grad();
}

int run(const Options& o) {
  json summary = {{"bundle", o.bundle}};
  auto start = Clock::now();
  aotc::OpenOptions open;
  if (o.keys_given) open.public_keys = o.keys;
  aotc::Bundle bundle = aotc::Bundle::open(o.bundle, open);
  summary["open_seconds"] = seconds_since(start);
  if (!bundle.signed_by().empty()) summary["signed_by"] = bundle.signed_by();
  c10::Device device(o.device);
  start = Clock::now();
  aotc::LoadOptions load_options;
  load_options.cuda_graphs = o.cuda_graphs;
  aotc::Module module = bundle.load(device, load_options);
  summary["load_seconds"] = seconds_since(start);
  summary["heap"] = aotc::heap_state();
  if (o.check) {
    summary["graphs"] = bundle.graph_kinds();
    summary["inputs"] = bundle.input_names();
  } else if (o.train_steps) {
    if (!o.optimizer_state.empty() && std::filesystem::exists(o.optimizer_state)) module.load_optimizer_state(o.optimizer_state);
    if (o.lr) module.set_hyperparameter("lr", *o.lr);
    std::vector<double> losses, step_seconds;
    start = Clock::now();
    for (int step = 0; step < o.train_steps; ++step) {
      auto inputs = inputs_from(o.data, bundle.input_names(), device, step);
      if (o.seed) at::manual_seed(static_cast<uint64_t>(*o.seed + step));
      auto t0 = Clock::now();
      losses.push_back(module.train_step(inputs).item<double>());
      step_seconds.push_back(seconds_since(t0));
      if (!o.json) std::cerr << "step " << step + 1 << "/" << o.train_steps << ": loss " << losses.back() << "\n";
    }
    summary["train_seconds"] = seconds_since(start);
    summary["losses"] = losses;
    summary["step_seconds"] = step_seconds;
    if (!o.output.empty()) module.save_weights(o.output);
    if (!o.optimizer_state.empty()) module.save_optimizer_state(o.optimizer_state);
  } else {
    if (o.warmup) warm_up(module, o, device, bundle.input_names());
    auto inputs = inputs_from(o.inputs, bundle.input_names(), device, std::nullopt);
    if (o.seed) at::manual_seed(static_cast<uint64_t>(*o.seed));
    start = Clock::now();
    aotc::Outputs out = module.forward(inputs);
    summary["run_seconds"] = seconds_since(start);
    aotc::detail::NamedTensors written;
    auto names = bundle.input_names();
    for (size_t i = 0; i < out.size(); ++i) {
      written.emplace_back(out.names[i], out.values[i]);
      json& facts = summary["outputs"][out.names[i]] = tensor_json(out.values[i]);
      facts["views"] = views_of(out.values[i], inputs, names, out, i);
    }
    auto given = inputs_from(o.inputs, names, device, std::nullopt);
    for (size_t i = 0; i < names.size(); ++i) {
      if (!at::equal(given[i], inputs[i]) || given[i].sizes() != inputs[i].sizes()) {
        written.emplace_back("after:" + names[i], inputs[i]);  // the call mutated this input
      }
    }
    if (!o.backward.empty()) {
      std::map<std::string, at::Tensor> given;
      for (auto& [name, t] : aotc::detail::read_safetensors(o.backward)) given[name] = t.to(device);
      std::vector<at::Tensor> grads;
      for (const std::string& name : out.names) grads.push_back(given.count(name) ? given[name] : at::Tensor());
      std::vector<at::Tensor> input_grads = module.backward(grads);
      for (const auto& [name, t] : module.named_state()) {
        if (module.grad(name).defined()) written.emplace_back("grad:" + name, module.grad(name));
      }
      for (size_t i = 0; i < names.size(); ++i) {
        if (input_grads[i].defined()) written.emplace_back("grad:" + names[i], input_grads[i]);
      }
    }
    if (!o.output.empty()) aotc::detail::write_safetensors(o.output, written);
    if (o.bench) bench(module, inputs, o.bench, summary);
  }
  if (o.json) std::cout << summary.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << kUsage << "\nError: " << e.what() << "\n";
    return 2;
  }
  try {
    return run(options);
  } catch (const aotc::Error& e) {
    if (options.json) std::cout << json{{"error", e.what()}, {"type", e.name()}}.dump(2) << "\n";
    std::cerr << "Error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::string first = e.what();
    std::cerr << "Internal error (aotc's bug; please report it): " << first.substr(0, first.find('\n')) << "\n";
    return 2;
  }
}
