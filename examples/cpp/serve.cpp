// Serve an aotc bundle from C++: open it (every file's hash checked, and its signature when
// AOTC_PUBLIC_KEYS names keys), load its compiled graph once, and answer requests.
//
//   aotc compile sample_models/mlp.py -o mlp/
//   ./serve mlp/ request.safetensors response.safetensors
//
// A request is one tensor per input name (aotc inspect lists them); the response holds the
// outputs by name. A real server would call model.forward once per request, from here.
#include <iostream>

#include <aotc/aotc.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: serve BUNDLE REQUEST.safetensors RESPONSE.safetensors\n";
    return 2;
  }
  try {
    aotc::Bundle bundle = aotc::Bundle::open(argv[1]);
    aotc::Module model = bundle.load(c10::Device(c10::kCPU));

    std::map<std::string, at::Tensor> request;
    for (auto& [name, tensor] : aotc::load_safetensors(argv[2])) request[name] = tensor;
    std::vector<at::Tensor> inputs;
    for (const std::string& name : bundle.input_names()) inputs.push_back(request.at(name));

    aotc::Outputs out = model.forward(inputs);
    aotc::NamedTensors response;
    for (size_t i = 0; i < out.size(); ++i) {
      std::cout << out.names[i] << ": " << out.values[i].sizes() << "\n";
      response.emplace_back(out.names[i], out.values[i]);
    }
    aotc::save_safetensors(argv[3], response);
  } catch (const aotc::Error& e) {  // the bundle or the request was refused, with the reason
    std::cerr << e.name() << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
