// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG --implicit-check-not="could not be used"
// RUN: FileCheck %s --input-file=%t.cpp
// The result compiles (a second run parses it) and has nothing left to migrate; the cached
// preamble of <torch/script.h> serves both runs (its headers instantiate LibTorch templates
// with lambdas of their own, which the preamble's parse leaves undefined on purpose).
// RUN: %migrate --check %t.cpp 2>&1 | not grep "could not be used"
//
// A trainer that holds its model and optimizer by raw pointer (`new`), a model that saves itself,
// a TorchScript backbone that saves itself, and a checkpoint read back after it is written.
#include <torch/script.h>
#include <torch/torch.h>

#include <string>

class ConvNet : public torch::nn::Module {
public:
    explicit ConvNet(int64_t classes) { fc = register_module("fc", torch::nn::Linear(4, classes)); }
    // CHECK: {{^}}    explicit ConvNet(int64_t classes) { fc =
    torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
    // The model's own save: guarded by the process's state; no accelerator member, no new
    // constructor parameter.
    void save(const std::string& path) {
        torch::serialize::OutputArchive archive;
        this->torch::nn::Module::save(archive);
        archive.save_to(path);
        torch::save(fc, path + ".fc");
    }
    // CHECK: {{^}}        if (accel::state().is_main_process()) torch::save(fc, path + ".fc");
    torch::nn::Linear fc{nullptr};
};
// CHECK: {{^}}class Trainer {

class Trainer {
public:
    Trainer() {
        model = new ConvNet(3);
        optimizer = new torch::optim::Adam(model->parameters(), 1e-3);
    }
    // The constructor keeps its signature; it binds the process's Accelerator.
    // CHECK: {{^}}    Trainer() {
    // CHECK-NEXT: {{^}}        accel::Accelerator {{&|& }}accelerator = accel::Accelerator::current();
    // CHECK-NEXT: {{^}}        model = new ConvNet(3);
    // CHECK-NEXT: {{^}}        optimizer = accelerator.prepare(new torch::optim::Adam(model->parameters(), 1e-3));
    // CHECK-NEXT: {{^}}        accelerator.prepare(model);
    // CHECK-NEXT: {{^}}    }
    ~Trainer() {
        delete optimizer;
        delete model;
    }
    template <typename Loader>
    void fit(Loader& loader) {
        for (auto& batch : loader) {
            optimizer->zero_grad();
            auto loss = torch::cross_entropy_loss(model->forward(batch.data), batch.target);
            loss.backward();
            optimizer->step();
        }
        model->save("model.pt");
    }
    // CHECK: {{^}}    void fit(Loader& loader) {
    // CHECK-NEXT: {{^}}        accel::Accelerator {{&|& }}accelerator = accel::Accelerator::current();
    // CHECK: {{^ *}}auto step = accelerator.accumulate(model);
    // CHECK: {{^}}            accelerator.backward(loss);

private:
    ConvNet* model;
    torch::optim::Adam* optimizer;
};
// CHECK: {{^}}private:
// CHECK-NEXT: {{^}}    ConvNet* model;
// CHECK-NEXT: {{^}}    torch::optim::Adam* optimizer;

struct Points : torch::data::datasets::Dataset<Points> {
    torch::data::Example<> get(size_t i) override {
        return {torch::full({4}, static_cast<double>(i)), torch::tensor(static_cast<int64_t>(i % 3))};
    }
    torch::optional<size_t> size() const override { return 12; }
};

int main() {
    Trainer trainer;
    // CHECK: {{^}}    Trainer trainer;
    auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 4);
    trainer.fit(*loader);
    torch::jit::Module backbone("Backbone");
    backbone.save("backbone.pt");
    // CHECK: {{^ *}}accelerator.wait_for_everyone();
    // CHECK-NEXT: {{^ *}}if (accelerator.is_main_process()) backbone.save("backbone.pt");
    torch::nn::Linear head(4, 3);
    torch::optim::SGD head_optimizer(head->parameters(), 0.1);
    torch::save(head, "head.pt");
    // CHECK: {{^ *}}accelerator.wait_for_everyone();
    // CHECK-NEXT: {{^ *}}if (accelerator.is_main_process()) torch::save(head, "head.pt");
    torch::load(head, "head.pt");
    // CHECK: {{^ *}}accelerator.wait_for_everyone();
    // CHECK-NEXT: {{^ *}}torch::load(head, "head.pt");
    double best = 0;
    for (int epoch = 0; epoch < 2; ++epoch) {
        double accuracy = epoch * 0.5;
        if (accuracy > best) {
            best = accuracy;
            torch::save(head, "best.pt");
        }
        // A condition that may hold on some processes only: the save is guarded, with no barrier.
        // CHECK: {{^}}            best = accuracy;
        // CHECK-NEXT: {{^}}            if (accelerator.is_main_process()) torch::save(head, "best.pt");
    }
}
// MSG-NOT: warning:
