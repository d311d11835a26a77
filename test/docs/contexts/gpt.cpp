// The GPT-style decoder of examples/gpt, for the big-model snippets: `config`, `ids`.
#include <accel/accel.h>
#include <torch/torch.h>

#include "examples/gpt/gpt.h"

int main() {
  gpt::Config config;
  const auto ids = torch::randint(config.vocab, {2, config.context}, torch::kLong);
  // @snippet
  return 0;
}
