// A small CNN on 12x12 images drawn on demand by a custom dataset (each get() renders one
// image from a generator seeded by its index, so reading costs time), read by a loader with
// two workers. Four-space indent, `Type *name`, the CUDA-if-available device idiom with
// explicit .to(device) of the model and of each batch.
#include <torch/torch.h>

#include <iostream>

class Bars : public torch::data::datasets::Dataset<Bars> {
public:
    Bars(size_t count, uint64_t seed) : count_(count), seed_(seed) {}

    // Class 0: a horizontal bar, 1: a vertical bar, 2: a diagonal; plus noise.
    torch::data::Example<> get(size_t index) override {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ * 100003 + index);
        const int64_t label = torch::randint(0, 3, {1}, gen).item<int64_t>();
        const int64_t at = torch::randint(2, 10, {1}, gen).item<int64_t>();
        auto image = torch::randn({1, 12, 12}, gen) * 0.5;
        for (int64_t i = 0; i < 12; ++i) {
            if (label == 0)
                image[0][at][i] += 2.0;
            else if (label == 1)
                image[0][i][at] += 2.0;
            else
                image[0][i][(i + at) % 12] += 2.0;
        }
        return {image, torch::tensor(label)};
    }
    torch::optional<size_t> size() const override { return count_; }

private:
    size_t count_;
    uint64_t seed_;
};

struct NetImpl : torch::nn::Module {
    NetImpl()
        : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3)))),
          fc(register_module("fc", torch::nn::Linear(8 * 5 * 5, 3))) {}

    torch::Tensor forward(torch::Tensor x) {
        x = torch::max_pool2d(torch::relu(conv->forward(x)), 2);
        return fc->forward(x.view({x.size(0), -1}));
    }

    torch::nn::Conv2d conv;
    torch::nn::Linear fc;
};
TORCH_MODULE(Net);

int main() {
    torch::manual_seed(1);
    torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

    auto train_loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
        Bars(960, 1).map(torch::data::transforms::Stack<>()),
        torch::data::DataLoaderOptions().batch_size(32).workers(2));
    auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
        Bars(300, 2).map(torch::data::transforms::Stack<>()),
        torch::data::DataLoaderOptions().batch_size(50).workers(2));

    Net net;
    net->to(device);
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

    for (int epoch = 1; epoch <= 3; ++epoch) {
        net->train();
        double loss_sum = 0;
        int64_t correct = 0;
        for (auto &batch : *train_loader) {
            auto data = batch.data.to(device);
            auto target = batch.target.to(device);
            optimizer.zero_grad();
            auto output = net->forward(data);
            auto loss = torch::nn::functional::cross_entropy(output, target);
            loss.backward();
            optimizer.step();
            loss_sum += loss.item<double>() * data.size(0);
            correct += output.argmax(1).eq(target).sum().item<int64_t>();
        }
        std::cout << "epoch " << epoch << ": loss " << loss_sum / 960 << ", accuracy "
                  << static_cast<double>(correct) / 960 << std::endl;
    }

    torch::NoGradGuard no_grad;
    net->eval();
    int64_t correct = 0, total = 0;
    for (const auto &batch : *test_loader) {
        auto output = net->forward(batch.data.view({-1, 1, 12, 12}).to(device));
        correct += output.argmax(1).eq(batch.target.to(device)).sum().item<int64_t>();
        total += batch.data.size(0);
    }
    std::cout << "test accuracy " << static_cast<double>(correct) / total << " (" << total
              << " images)" << std::endl;
}
