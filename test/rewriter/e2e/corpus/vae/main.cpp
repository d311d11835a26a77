// A variational autoencoder in the style of the PyTorch VAE example ported to LibTorch: tab
// indentation, a TORCH_MODULE holding the model, a loss function of its own, the summed loss
// divided by the dataset size each epoch, and a test loss accumulated as a double.
#include <torch/torch.h>

#include <iomanip>
#include <iostream>
#include <tuple>

struct VAEImpl : torch::nn::Module {
	VAEImpl(int64_t features, int64_t latent)
		: fc1(register_module("fc1", torch::nn::Linear(features, 32))),
		  fc21(register_module("fc21", torch::nn::Linear(32, latent))),
		  fc22(register_module("fc22", torch::nn::Linear(32, latent))),
		  fc3(register_module("fc3", torch::nn::Linear(latent, 32))),
		  fc4(register_module("fc4", torch::nn::Linear(32, features))) {}

	std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
		auto h = torch::relu(fc1->forward(x));
		auto mu = fc21->forward(h);
		auto logvar = fc22->forward(h);
		auto std = torch::exp(0.5 * logvar);
		auto z = mu + torch::randn_like(std) * std;
		auto recon = torch::sigmoid(fc4->forward(torch::relu(fc3->forward(z))));
		return {recon, mu, logvar};
	}

	torch::nn::Linear fc1, fc21, fc22, fc3, fc4;
};
TORCH_MODULE(VAE);

// Points in [0, 1]^16 that lie near a 2-dimensional surface.
class Surface : public torch::data::datasets::Dataset<Surface> {
public:
	Surface(int64_t count, uint64_t seed) {
		auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
		auto t = torch::rand({count, 2}, gen);
		auto basis = torch::rand({2, 16}, at::make_generator<at::CPUGeneratorImpl>(99));
		data_ = torch::sigmoid(4 * (t.matmul(basis) - 0.5) + 0.1 * torch::randn({count, 16}, gen));
	}
	torch::data::Example<> get(size_t index) override { return {data_[index], torch::zeros({})}; }
	torch::optional<size_t> size() const override { return data_.size(0); }

private:
	torch::Tensor data_;
};

static torch::Tensor loss_function(const torch::Tensor &recon, const torch::Tensor &x,
				   const torch::Tensor &mu, const torch::Tensor &logvar) {
	auto bce = torch::binary_cross_entropy(recon, x, {}, torch::Reduction::Sum);
	auto kld = -0.5 * torch::sum(1 + logvar - mu.pow(2) - logvar.exp());
	return bce + kld;
}

int main() {
	torch::manual_seed(7);
	const size_t train_size = 800, test_size = 200;
	auto train_loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
		Surface(train_size, 1).map(torch::data::transforms::Stack<>()), 40);
	auto test_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
		Surface(test_size, 2).map(torch::data::transforms::Stack<>()), 40);

	VAE model(16, 2);
	torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));

	for (int epoch = 1; epoch <= 5; ++epoch) {
		model->train();
		double train_loss = 0;
		for (auto &batch : *train_loader) {
			optimizer.zero_grad();
			torch::Tensor recon, mu, logvar;
			std::tie(recon, mu, logvar) = model->forward(batch.data);
			auto loss = loss_function(recon, batch.data, mu, logvar);
			loss.backward();
			train_loss += loss.item<double>();
			optimizer.step();
		}
		std::cout << "====> Epoch: " << epoch << " Average loss: " << std::fixed
			  << std::setprecision(4) << train_loss / train_size << std::endl;

		model->eval();
		double test_loss = 0;
		torch::NoGradGuard no_grad;
		for (const auto &batch : *test_loader) {
			auto [recon, mu, logvar] = model->forward(batch.data);
			test_loss += loss_function(recon, batch.data, mu, logvar).item<double>();
		}
		test_loss /= test_size;
		std::cout << "====> Test set loss: " << test_loss << std::endl;
	}
}
