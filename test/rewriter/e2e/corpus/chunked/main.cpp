// A line fitted on a corpus read in chunks, as LibTorch's ChunkDataset reads one too large for
// memory: a ChunkDataReader (each chunk is generated from its index here; a real reader opens a
// file), chunks in a random order, the examples of a chunk in order, batches stacked by hand.
// Written the way LibTorch's own chunk dataset tests are.
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <vector>

class LineChunks : public torch::data::datasets::ChunkDataReader<torch::data::Example<>> {
 public:
  using BatchType = std::vector<torch::data::Example<>>;

  BatchType read_chunk(size_t index) override {
    auto generator = torch::make_generator<torch::CPUGeneratorImpl>(100 + index);
    auto x = torch::rand({32, 1}, generator) * 2 - 1;
    auto y = 3 * x + 2 + 0.01 * torch::randn({32, 1}, generator);
    BatchType examples;
    for (int64_t i = 0; i < 32; ++i) examples.push_back({x[i], y[i]});
    return examples;
  }
  size_t chunk_count() override { return 16; }
  void reset() override {}
};

int main() {
  torch::manual_seed(0);
  using LineData =
      torch::data::datasets::ChunkDataset<LineChunks, torch::data::samplers::RandomSampler,
                                          torch::data::samplers::SequentialSampler>;
  auto dataset = torch::data::datasets::make_shared_dataset<LineData>(
      LineChunks(), torch::data::samplers::RandomSampler(0),
      torch::data::samplers::SequentialSampler(0),
      torch::data::datasets::ChunkDatasetOptions(/*preloader_count=*/1, /*batch_size=*/16));
  auto loader = torch::data::make_data_loader(dataset, torch::data::DataLoaderOptions(16));

  torch::nn::Linear model(1, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int epoch = 1; epoch <= 5; ++epoch) {
    for (auto& batch : *loader) {
      std::vector<torch::Tensor> xs, ys;
      for (const auto& example : batch) {
        xs.push_back(example.data);
        ys.push_back(example.target);
      }
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(torch::stack(xs)), torch::stack(ys));
      loss.backward();
      optimizer.step();
    }
    std::cout << "epoch " << epoch << " done" << std::endl;
  }
  std::printf("learned: w=%.2f b=%.2f\n", model->weight.item<float>(), model->bias.item<float>());
  return 0;
}
