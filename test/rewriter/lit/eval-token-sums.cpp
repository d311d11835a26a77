// RUN: cp %s %t.cpp
// RUN: %migrate %t.cpp 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: FileCheck %s --input-file=%t.cpp
// RUN: %migrate --check %t.cpp
//
// Sums over the tokens of a sequence batch (packed, or flattened to one row per token) are
// reduced after the loop with the counts that divide them: the rows are tokens, whose number
// differs between processes, so gathering them would stop the collective ("Received data size
// doesn't match expected size") and cutting a gathered last batch to its samples would cut
// tokens. The shapes of prabhuomkar/pytorch-cpp's image captioning validation (packed
// sequences) and of a masked per-token loss over a padded batch. What is read per sample (the
// predictions of every position against the batch) is still gathered.
#include <torch/torch.h>
#include <cstdio>

struct Sentences : torch::data::datasets::Dataset<Sentences> {
  explicit Sentences(int64_t n)
      : tokens(torch::randint(1, 16, {n, 8})), lengths(torch::randint(2, 9, {n})) {}
  torch::data::Example<> get(size_t i) override { return {tokens[i], lengths[i]}; }
  torch::optional<size_t> size() const override { return tokens.size(0); }
  torch::Tensor tokens, lengths;
};

int main() {
  torch::nn::Embedding embed(16, 8);
  torch::nn::Linear head(8, 16);
  torch::optim::Adam optimizer(head->parameters(), 1e-2);
  auto loader =
      torch::data::make_data_loader(Sentences(64).map(torch::data::transforms::Stack<>()), 16);
  torch::NoGradGuard no_grad;
  double running_loss = 0;
  size_t num_correct = 0;
  size_t packed_length_sum = 0;
  for (auto& batch : *loader) {
    auto lengths = std::get<0>(batch.target.sort(0, true));
    auto tokens = batch.data.index_select(0, std::get<1>(batch.target.sort(0, true)));
    auto targets = torch::nn::utils::rnn::pack_padded_sequence(tokens, lengths, true).data();
    auto outputs = head->forward(embed->forward(tokens));
    auto packed_outputs = torch::nn::utils::rnn::pack_padded_sequence(outputs, lengths, true).data();
    auto loss = torch::nn::functional::cross_entropy(packed_outputs, targets);
    running_loss += loss.item<double>() * packed_outputs.size(0);
    num_correct += packed_outputs.argmax(1).eq(targets).sum().item<int64_t>();
    packed_length_sum += packed_outputs.size(0);
  }
  // CHECK-NOT: {{^ *}}auto {{.*}}gather_for_metrics(packed_outputs
  // CHECK: {{^}}    num_correct += packed_outputs.argmax(1).eq(targets).sum().item<int64_t>();
  // CHECK-NEXT: {{^}}    packed_length_sum += packed_outputs.size(0);
  // CHECK-NEXT: {{^}}  }
  // CHECK-NEXT: {{^}}  running_loss = accelerator.reduce(running_loss);
  // CHECK-NEXT: {{^}}  num_correct = accelerator.reduce(num_correct);
  // CHECK-NEXT: {{^}}  packed_length_sum = accelerator.reduce(packed_length_sum);
  std::printf("packed loss %.6f accuracy %.4f\n", running_loss / packed_length_sum,
              static_cast<double>(num_correct) / packed_length_sum);

  double masked_loss = 0, tokens_counted = 0;
  int64_t correct = 0;
  for (auto& batch : *loader) {
    auto logits = head->forward(embed->forward(batch.data));
    auto mask =
        torch::arange(8).unsqueeze(0).lt(batch.target.unsqueeze(1)).to(torch::kFloat).view({-1});
    auto per_token = torch::nn::functional::cross_entropy(
        logits.view({-1, 16}), batch.data.view({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    masked_loss += (per_token * mask).sum().item<double>();
    tokens_counted += mask.sum().item<double>();
    correct += logits.argmax(2).eq(batch.data).sum().item<int64_t>();
  }
  // CHECK: {{^}}    masked_loss += (per_token * mask).sum().item<double>();
  // CHECK-NEXT: {{^}}    tokens_counted += mask.sum().item<double>();
  // CHECK-NEXT: {{^}}    auto [all_logits, all_data] = accelerator.gather_for_metrics(logits, batch.data);
  // CHECK-NEXT: {{^}}    correct += all_logits.argmax(2).eq(all_data).sum().item<int64_t>();
  // CHECK-NEXT: {{^}}  }
  // CHECK-NEXT: {{^}}  masked_loss = accelerator.reduce(masked_loss);
  // CHECK-NEXT: {{^}}  tokens_counted = accelerator.reduce(tokens_counted);
  // CHECK-NOT: {{^ *}}correct = accelerator.reduce
  std::printf("masked loss %.6f accuracy %.4f\n", masked_loss / tokens_counted, correct / 512.0);
}
// MSG-NOT: error
