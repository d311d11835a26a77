// The counted (and capped) host allocator that memory bounds are measured with: it counts what
// LibTorch's CPU tensors hold, and a cap gives a clear out-of-memory error naming it.

#include <accel/accel.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "util/counting_allocator.h"

#include <string>

namespace {

TEST(CountingAllocator, CountsLiveAndPeakBytesOfCpuTensors) {
  accel::util::CountingCpuAllocator counter;
  EXPECT_EQ(counter.live_bytes(), 0);
  {
    auto a = torch::empty({1024}, torch::kFloat);
    EXPECT_EQ(counter.live_bytes(), 4096);
    auto b = torch::empty({256}, torch::kDouble);
    EXPECT_EQ(counter.live_bytes(), 4096 + 2048);
  }
  EXPECT_EQ(counter.live_bytes(), 0);
  EXPECT_EQ(counter.peak_bytes(), 4096 + 2048);
  counter.reset_peak();
  EXPECT_EQ(counter.peak_bytes(), 0);
}

TEST(CountingAllocator, TensorsMayOutliveItAndTheDefaultComesBack) {
  torch::Tensor survivor;
  {
    accel::util::CountingCpuAllocator counter;
    survivor = torch::ones({100});
  }
  EXPECT_EQ(survivor.sum().item<float>(), 100.0f);
  survivor = torch::Tensor();  // freed through the counter's deleter, after it is gone
  accel::util::CountingCpuAllocator again;
  auto t = torch::empty({10});
  EXPECT_EQ(again.live_bytes(), 40);
}

TEST(CountingAllocator, TrainingOverTheCapFailsNamingIt) {
  // A 1M-parameter model under NO_SHARD: AdamW's state alone (8 MB) is over a 6 MB cap.
  torch::manual_seed(0);
  auto model = torch::nn::Linear(1000, 1000);
  accel::Accelerator accelerator(accel::AcceleratorOptions().cpu(true));
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::AdamW(model->parameters(), {}));
  accel::util::CountingCpuAllocator counter(6 << 20);
  try {
    accelerator.backward(model->forward(torch::randn({8, 1000})).pow(2).mean());
    optimizer.step();
    FAIL() << "expected the cap to stop the step";
  } catch (const c10::OutOfMemoryError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("under the cap of 6291456 bytes"), std::string::npos) << message;
    EXPECT_TRUE(accel::detail::is_out_of_memory(e));
  }
  EXPECT_LE(counter.peak_bytes(), 6 << 20);
}

}  // namespace
