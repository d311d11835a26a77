// A trainer class in the older C++ style: the model and the optimizer are raw pointers made with
// `new` and deleted by the destructor, the model saves itself, gradients are accumulated by hand
// over 4 batches, the learning rate halves after each epoch (StepLR stepped outside the batch
// loop), and the epoch's mean loss is a sum over a count.
#include <torch/torch.h>

#include <cstdio>
#include <sstream>
#include <string>

class ConvNet : public torch::nn::Module {
public:
    explicit ConvNet(int64_t classes) {
        fc1 = register_module("fc1", torch::nn::Linear(10, 32));
        fc2 = register_module("fc2", torch::nn::Linear(32, classes));
    }
    torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
    void save(const std::string& path) {
        torch::save(fc1, path + ".fc1");
        torch::save(fc2, path + ".fc2");
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// Three Gaussian blobs in 10 dimensions; every process builds the same set.
class Blobs : public torch::data::datasets::Dataset<Blobs> {
public:
    explicit Blobs(int64_t count) {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
        labels = torch::randint(0, 3, {count}, gen);
        auto centers = torch::randn({3, 10}, gen) * 1.5;
        inputs = centers.index_select(0, labels) + torch::randn({count, 10}, gen);
    }
    torch::data::Example<> get(size_t i) override { return {inputs[i], labels[i]}; }
    torch::optional<size_t> size() const override { return labels.size(0); }
    torch::Tensor inputs, labels;
};

class Trainer {
public:
    Trainer() {
        model = new ConvNet(3);
        optimizer = new torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.2));
    }
    ~Trainer() {
        delete optimizer;
        delete model;
    }
    ConvNet* net() { return model; }
    torch::optim::SGD* sgd() { return optimizer; }

    template <typename Loader>
    void trainEpoch(int epoch, Loader& loader) {
        const int accumulation = 4;
        double lossSum = 0;
        int64_t batches = 0;
        int64_t i = 0;
        for (auto& batch : loader) {
            auto loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
            (loss / accumulation).backward();
            if ((i + 1) % accumulation == 0) {
                optimizer->step();
                optimizer->zero_grad();
            }
            ++i;
            lossSum += loss.template item<double>();
            ++batches;
        }
        std::printf("epoch %d: mean loss %.4f\n", epoch, lossSum / batches);
    }

private:
    ConvNet* model;
    torch::optim::SGD* optimizer;
};

int main() {
    torch::manual_seed(0);
    Trainer trainer;
    torch::optim::StepLR scheduler(*trainer.sgd(), 1, 0.5);
    auto loader = torch::data::make_data_loader(Blobs(640).map(torch::data::transforms::Stack<>()), 16);
    for (int epoch = 1; epoch <= 3; ++epoch) {
        trainer.trainEpoch(epoch, *loader);
        scheduler.step();
        std::printf("epoch %d: learning rate %.6f\n", epoch,
                    trainer.sgd()->param_groups()[0].options().get_lr());
    }
    trainer.net()->save("final");
    // One line of every weight's sum, on standard error, so that a test can compare processes.
    std::ostringstream line;
    line.precision(9);
    line << "weights:";
    for (const auto& p : trainer.net()->parameters())
        line << " " << p.sum().item<double>() << " " << p.square().sum().item<double>();
    std::fprintf(stderr, "%s\n", line.str().c_str());
}
