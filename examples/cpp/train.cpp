// Train from C++ with a joint bundle that carries its optimizer: each train_step is the
// forward, the backward and the optimizer's update in one compiled call. The learning rate
// decays between steps as a scheduler's would; the trained weights are written as
// safetensors that Python's aotc.load(...).load_state_dict takes.
//
//   aotc export sample_models/mlp.py --joint --optimizer sgd --lr 0.1 --momentum 0.9 -o mlp-joint/
//   aotc compile mlp-joint/
//   ./train mlp-joint/ batches.safetensors 10 trained.safetensors
//
// batches.safetensors holds, per input name, the batches stacked on a new first dim.
#include <iostream>

#include <ATen/ATen.h>
#include <aotc/aotc.h>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: train BUNDLE BATCHES.safetensors STEPS TRAINED.safetensors\n";
    return 2;
  }
  try {
    aotc::Bundle bundle = aotc::Bundle::open(argv[1]);
    aotc::Module model = bundle.load(c10::Device(c10::kCPU));
    std::map<std::string, at::Tensor> batches;
    for (auto& [name, tensor] : aotc::load_safetensors(argv[2])) batches[name] = tensor;

    const int steps = std::stoi(argv[3]);
    const double lr = model.hyperparameter("lr");
    for (int step = 0; step < steps; ++step) {
      model.set_hyperparameter("lr", lr * (1.0 - 0.5 * step / steps));  // linear decay to half
      at::manual_seed(step);  // dropout draws as torch.manual_seed(step) would make it
      std::vector<at::Tensor> inputs;
      for (const std::string& name : bundle.input_names()) {
        const at::Tensor& all = batches.at(name);
        inputs.push_back(all[step % all.size(0)].clone());
      }
      at::Tensor loss = model.train_step(inputs);
      std::cout << "step " << step + 1 << ": loss " << loss.item<double>() << "\n";
    }
    model.save_weights(argv[4]);
  } catch (const aotc::Error& e) {
    std::cerr << e.name() << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
