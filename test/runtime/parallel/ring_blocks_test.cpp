// Ring attention's parts that run without a ring (parallel/ring_blocks.h, ring_exchange.h): the
// blocks merged into the whole attention and its gradients, by the CPU's kernel and by the
// definition (the identity FlashAttention's and the memory-efficient kernel's backward rely on:
// a block's gradients from the merged output and log-sum-exp), and the exchange with the two
// neighbours as one grouped call where the backend groups (NCCL) and two calls where it does not.

#include "parallel/ring_blocks.h"
#include "parallel/ring_exchange.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace {

using accel::parallel::BlockKernel;

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  EXPECT_TRUE(at::allclose(got.to(at::kDouble), want, 1e-4, 1e-5))
      << what << ": largest difference " << (got.to(at::kDouble) - want).abs().max().item<double>();
}

TEST(RingBlocks, KeyBlocksMergedAreTheWholeAttentionAndTheirGradientsItsGradients) {
  torch::manual_seed(0);
  const double scale = 0.25;
  for (auto kernel : {BlockKernel::cpu_flash, BlockKernel::definition}) {
    for (bool causal : {false, true}) {
      // Causal: the second key block is the queries' own chunk (causal), the first earlier (full).
      auto q = torch::randn({2, 3, 8, 16}), k = torch::randn({2, 3, 16, 16}),
           v = torch::randn({2, 3, 16, 16}), dout = torch::randn({2, 3, 8, 16});
      at::Tensor out, lse;
      for (int b = 0; b < 2; ++b) {
        auto [block_out, block_lse] = accel::parallel::block_forward(
            kernel, q, k.narrow(2, 8 * b, 8), v.narrow(2, 8 * b, 8), causal && b == 1, scale);
        accel::parallel::merge(out, lse, block_out, block_lse);
      }
      // Whole: the queries sit at the second chunk's places, so causal masks the keys after them.
      auto mask_k =
          causal ? torch::cat({torch::zeros({8, 8}), torch::ones({8, 8}).triu(1)}, 1).to(at::kBool)
                 : torch::zeros({8, 16}, at::kBool);
      auto qd = q.to(at::kDouble).requires_grad_(), kd = k.to(at::kDouble).requires_grad_(),
           vd = v.to(at::kDouble).requires_grad_();
      auto scores = (at::matmul(qd, kd.transpose(-2, -1)) * scale)
                        .masked_fill(mask_k, -std::numeric_limits<double>::infinity());
      auto whole = at::matmul(at::softmax(scores, -1), vd);
      whole.backward(dout.to(at::kDouble));
      const std::string name =
          std::string(kernel == BlockKernel::cpu_flash ? "cpu_flash" : "definition") +
          (causal ? ", causal" : "");
      expect_close(out, whole.detach(), name + ": output");
      expect_close(lse, at::logsumexp(scores.detach(), -1), name + ": log-sum-exp");

      auto dq = torch::zeros_like(q);
      std::vector<at::Tensor> dk, dv;
      const auto merged_out = out.to(q.scalar_type());
      for (int b = 0; b < 2; ++b) {
        auto [dq_b, dk_b, dv_b] = accel::parallel::block_backward(
            kernel, dout, q, k.narrow(2, 8 * b, 8).contiguous(), v.narrow(2, 8 * b, 8).contiguous(),
            merged_out, lse.contiguous(), causal && b == 1, scale);
        dq += dq_b;
        dk.push_back(dk_b);
        dv.push_back(dv_b);
      }
      expect_close(dq, qd.grad(), name + ": dQ");
      expect_close(torch::cat(dk, 2), kd.grad(), name + ": dK");
      expect_close(torch::cat(dv, 2), vd.grad(), name + ": dV");
    }
  }
}

/// A backend that records the calls it is given, and whose works count their waits.
class CallRecorder final : public c10d::Backend {
 public:
  CallRecorder(int rank, int size) : Backend(rank, size) {}
  const std::string getBackendName() const override { return "recorder"; }
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override { calls.push_back("start"); }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    calls.push_back("end");
    return work();
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& /*tensors*/, int dst,
                                      int tag) override {
    calls.push_back("send to " + std::to_string(dst) + " tag " + std::to_string(tag));
    return work();
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& /*tensors*/, int src,
                                      int tag) override {
    calls.push_back("recv from " + std::to_string(src) + " tag " + std::to_string(tag));
    return work();
  }
  std::vector<std::string> calls;
  int waits = 0;

 private:
  class CountedWork final : public c10d::Work {
   public:
    explicit CountedWork(int* waits) : waits_(waits) {}
    bool wait(std::chrono::milliseconds /*timeout*/) override {
      ++*waits_;
      return true;
    }

   private:
    int* waits_;
  };
  c10::intrusive_ptr<c10d::Work> work() { return c10::make_intrusive<CountedWork>(&waits); }
};

TEST(RingExchange, GroupedItIsOneCoalescedCallWithOneWorkElseASendAndAReceive) {
  for (bool grouped : {true, false}) {
    auto backend = c10::make_intrusive<CallRecorder>(1, 3);
    auto group =
        c10::make_intrusive<c10d::ProcessGroup>(c10::make_intrusive<c10d::HashStore>(), 1, 3);
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::CUSTOM, backend);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
    accel::parallel::RingTransfer transfer(*group, torch::ones({4}), torch::zeros({4}), 7, grouped);
    const std::vector<std::string> expected =
        grouped ? std::vector<std::string>{"start", "send to 2 tag 7", "recv from 0 tag 7", "end"}
                : std::vector<std::string>{"send to 2 tag 7", "recv from 0 tag 7"};
    EXPECT_EQ(backend->calls, expected);
    transfer.wait();
    EXPECT_EQ(backend->waits, grouped ? 1 : 2);
  }
  // Gloo, and any group on the CPU, exchanges with two calls; NCCL's CUDA tensors with one.
  auto gloo = c10::make_intrusive<c10d::ProcessGroup>(c10::make_intrusive<c10d::HashStore>(), 0, 1);
  gloo->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  EXPECT_FALSE(accel::parallel::groups_point_to_point(*gloo, c10::DeviceType::CPU));
  EXPECT_FALSE(accel::parallel::groups_point_to_point(*gloo, c10::DeviceType::CUDA));
  auto nccl = c10::make_intrusive<c10d::ProcessGroup>(c10::make_intrusive<c10d::HashStore>(), 0, 1);
  nccl->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
  EXPECT_TRUE(accel::parallel::groups_point_to_point(*nccl, c10::DeviceType::CUDA));
  EXPECT_FALSE(accel::parallel::groups_point_to_point(*nccl, c10::DeviceType::CPU));
}

}  // namespace
