// A classifier trained by a class that owns the model and its optimizer, as larger programs
// are organised: four-space indentation, `Type* name`, the loaders built after the trainer,
// per-epoch training accuracy kept in plain integers, and evaluation in a const-free method.
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <memory>

struct MlpImpl : torch::nn::Module {
    explicit MlpImpl(int64_t inputs) {
        net = register_module("net", torch::nn::Sequential(
            torch::nn::Linear(inputs, 64), torch::nn::ReLU(), torch::nn::Dropout(0.1),
            torch::nn::Linear(64, 3)));
    }
    torch::Tensor forward(torch::Tensor x) { return net->forward(x); }
    torch::nn::Sequential net{nullptr};
};
TORCH_MODULE(Mlp);

// Three Gaussian blobs in 10 dimensions.
class Blobs : public torch::data::datasets::Dataset<Blobs> {
public:
    Blobs(int64_t count, uint64_t seed) {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
        labels_ = torch::randint(0, 3, {count}, gen);
        auto centers = torch::randn({3, 10}, at::make_generator<at::CPUGeneratorImpl>(5)) * 1.5;
        inputs_ = centers.index_select(0, labels_) + torch::randn({count, 10}, gen);
    }
    torch::data::Example<> get(size_t index) override { return {inputs_[index], labels_[index]}; }
    torch::optional<size_t> size() const override { return labels_.size(0); }

private:
    torch::Tensor inputs_, labels_;
};

class Trainer {
public:
    Trainer(int64_t inputs, double lr)
        : model_(inputs), optimizer_(model_->parameters(), torch::optim::SGDOptions(lr).momentum(0.9)) {}

    template <typename Loader>
    void train_epoch(int epoch, Loader& loader, size_t dataset_size) {
        model_->train();
        size_t correct = 0;
        double loss_sum = 0;
        for (auto& batch : loader) {
            optimizer_.zero_grad();
            auto output = model_->forward(batch.data);
            auto loss = torch::nn::functional::cross_entropy(output, batch.target);
            loss.backward();
            optimizer_.step();
            loss_sum += loss.template item<double>() * batch.data.size(0);
            correct += output.argmax(1).eq(batch.target).sum().template item<int64_t>();
        }
        std::printf("epoch %d: train loss %.4f, train accuracy %.4f\n", epoch,
                    loss_sum / dataset_size, static_cast<double>(correct) / dataset_size);
    }

    template <typename Loader>
    double evaluate(Loader& loader) {
        torch::NoGradGuard no_grad;
        model_->eval();
        int64_t correct = 0, total = 0;
        for (const auto& batch : loader) {
            auto prediction = model_->forward(batch.data).argmax(1);
            correct += prediction.eq(batch.target).sum().template item<int64_t>();
            total += batch.target.size(0);
        }
        std::printf("evaluated %lld samples\n", static_cast<long long>(total));
        return static_cast<double>(correct) / total;
    }

private:
    Mlp model_;
    torch::optim::SGD optimizer_;
};

int main() {
    torch::manual_seed(0);
    Trainer* trainer = new Trainer(10, 0.05);

    const size_t train_size = 1200;
    auto train_loader = torch::data::make_data_loader(
        Blobs(train_size, 1).map(torch::data::transforms::Stack<>()),
        torch::data::DataLoaderOptions().batch_size(64));
    auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
        Blobs(300, 2).map(torch::data::transforms::Stack<>()), 50);

    for (int epoch = 1; epoch <= 3; ++epoch) {
        trainer->train_epoch(epoch, *train_loader, train_size);
        std::printf("epoch %d: test accuracy %.4f\n", epoch, trainer->evaluate(*test_loader));
    }
    delete trainer;
}
