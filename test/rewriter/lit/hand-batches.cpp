// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
//
// A training loop that slices its batches by hand from in-memory tensors, by its counter along
// their first dimension, gives each process its share of every batch: the loop runs as often on
// every process (every backward is every process's, so nothing hangs), one process gets the batch
// itself (the original program's numbers), and N processes train on the whole batch between them.
// The sums it prints are summed across processes after it. Slicing any other way (windows along
// time, whose rows are streams carrying a hidden state) or a batch size that also shapes another
// tensor is left as written and reported.
#include <torch/torch.h>
#include <cstdio>

int main() {
  torch::manual_seed(0);
  const int64_t n = 96, batch_size = 16;
  auto X = torch::randn({n, 4});
  auto Y = X.sum(1, true);
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  for (int epoch = 0; epoch < 3; ++epoch) {
    double total = 0;
    int64_t seen = 0;
    for (int64_t i = 0; i < n; i += batch_size) {
      auto x = X.slice(0, i, i + batch_size);
      auto y = Y.index({torch::indexing::Slice(i, i + batch_size)});
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      loss.backward();
      optimizer.step();
      total += loss.item<double>() * x.size(0);
      seen += x.size(0);
    }
    // CHECK: {{^}}      auto x = accelerator.split_between_processes(
    // CHECK-SAME: X.slice(0, i, i + batch_size)
    // CHECK: /*apply_padding=*/true);
    // CHECK-NEXT: {{^}}      auto y = accelerator.split_between_processes(
    // CHECK-SAME: Y.index({torch::indexing::Slice(i, i + batch_size)}),
    // CHECK: /*apply_padding=*/true);
    // CHECK: {{^}}    }
    // CHECK-NEXT: {{^}}    total = accelerator.reduce(total);
    // CHECK-NEXT: {{^}}    seen = accelerator.reduce(seen);
    std::printf("epoch %d loss %.6f\n", epoch, total / seen);
  }
  // MSG-DAG: hand-batches.cpp{{.*}}:{{[0-9]+}}:5: warning: backward() is called in a loop that does not iterate a prepared data loader, {{.*}}; each process takes its share of every batch the loop slices (accel-migrate-hand-batches)

  // Windows along time of rows that are streams: not batches of rows.
  auto ids = torch::randint(0, 8, {4, 40});
  torch::nn::Embedding embed(8, 4);
  torch::optim::SGD embed_optimizer(embed->parameters(), 0.05);
  for (int64_t t = 0; t + 5 < ids.size(1); t += 5) {
    auto window = ids.index({torch::indexing::Slice(), torch::indexing::Slice(t, t + 5)});
    embed_optimizer.zero_grad();
    embed->forward(window).pow(2).mean().backward();
    embed_optimizer.step();
  }
  // CHECK: {{^}}    auto window = ids.index({torch::indexing::Slice(), torch::indexing::Slice(t, t + 5)});
  // MSG-DAG: hand-batches.cpp{{.*}}:{{[0-9]+}}:3: warning: backward() is called in a loop {{.*}}every process trains on all of the data (to give each process its share of the batch dimension, add before the loop: 'ids = accelerator.split_between_processes(ids);')

  // The batch size also shapes a hidden state: a share of a batch would not fit it.
  auto h = torch::zeros({batch_size, 1});
  for (int64_t i = 0; i < n; i += batch_size) {
    auto x = X.narrow(0, i, batch_size);
    optimizer.zero_grad();
    (model->forward(x) + h).pow(2).mean().backward();
    optimizer.step();
  }
  // CHECK: {{^}}    auto x = X.narrow(0, i, batch_size);
  // MSG-DAG: hand-batches.cpp{{.*}}:{{[0-9]+}}:3: warning: 'batch_size' sizes the batches this loop slices by hand and is also used at line {{[0-9]+}}; a process's share of a batch would not fit it; give each process its share by hand (accelerator.split_between_processes) [accel-migrate-hand-batches]
}
// MSG-NOT: error
