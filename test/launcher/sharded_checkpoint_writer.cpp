// Writes what `accel merge-weights` reads, for test/launcher/merge_weights_test.cpp: a few
// training steps under a parameter-sharding strategy with SHARDED_STATE_DICT, then save_state
// (each process its shards, the main one the index) and save_model (the same weights gathered
// whole: what merging the shards must give). STRATEGY TENSOR_PARALLEL instead splits the first
// two Linears over all processes (tp), whose save_state writes the weights whole.
//
//   accel launch --num_processes N sharded_checkpoint_writer STRATEGY CHECKPOINT_DIR WHOLE_DIR

#include <accel/accel.h>

#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s STRATEGY CHECKPOINT_DIR WHOLE_DIR\n", argv[0]);
    return 2;
  }
  const std::string strategy = argv[1], checkpoint_dir = argv[2], whole_dir = argv[3];
  const bool tensor_parallel = strategy == "TENSOR_PARALLEL";
  auto options = accel::AcceleratorOptions().cpu(true).gradient_accumulation_steps(2);
  if (tensor_parallel) {
    options.parallelism_config(
        accel::ParallelismConfig().tp_size(std::atoll(std::getenv("WORLD_SIZE"))));
  } else {
    options.sharding_strategy(strategy)
        .fsdp_transformer_layer_cls_to_wrap({"Linear"})
        .fsdp_state_dict_type("SHARDED_STATE_DICT");
  }
  accel::Accelerator accelerator(options);
  torch::manual_seed(17);
  // Parameter counts (5*7 + 7, 7*3 + 3, 3 + 1) that divide by neither 2 nor 3 nor 4: the last
  // shard of each unit ends in padding, which merging must drop. Split by tp: 12 features.
  const int64_t hidden = tensor_parallel ? 12 : 7;
  torch::nn::Sequential net(torch::nn::Linear(5, hidden), torch::nn::Tanh(),
                            torch::nn::Linear(hidden, 3), torch::nn::Tanh(),
                            torch::nn::Linear(3, 1));
  if (tensor_parallel) {
    accelerator.prepare(net, accel::TensorParallelPlan{{"0", "colwise"}, {"2", "rowwise"}});
  } else {
    accelerator.prepare(net);
  }
  auto optimizer = accelerator.prepare(torch::optim::AdamW(net->parameters(), 0.01));
  for (int64_t step = 0; step < 6; ++step) {
    auto scope = accelerator.accumulate(net);
    auto generator =
        at::make_generator<at::CPUGeneratorImpl>(1000 * step + accelerator.process_index());
    auto x = torch::randn({8, 5}, generator);
    accelerator.backward(torch::mse_loss(net->forward(x), torch::sin(x.sum(1, true))));
    optimizer.step();
    optimizer.zero_grad();
  }
  accelerator.save_state(checkpoint_dir);
  accelerator.save_model(net, whole_dir);
  return 0;
}
