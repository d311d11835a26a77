#include "collectives.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <sstream>

namespace accel {
namespace distributed {

std::vector<torch::Tensor> all_gather(c10d::ProcessGroup& group, const torch::Tensor& tensor) {
  auto input = tensor.contiguous();
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int i = 0; i < group.getSize(); ++i) outputs[0].push_back(torch::empty_like(input));
  std::vector<torch::Tensor> inputs{input};
  group.allgather(outputs, inputs)->wait();
  return outputs[0];
}

void all_reduce(c10d::ProcessGroup& group, torch::Tensor& tensor, Reduction reduction) {
  c10d::AllreduceOptions options;
  switch (reduction) {
    case Reduction::Sum:
    case Reduction::Mean:
      options.reduceOp = c10d::ReduceOp::SUM;
      break;
    case Reduction::Max:
      options.reduceOp = c10d::ReduceOp::MAX;
      break;
    case Reduction::Min:
      options.reduceOp = c10d::ReduceOp::MIN;
      break;
  }
  std::vector<torch::Tensor> tensors{tensor};
  group.allreduce(tensors, options)->wait();
  if (reduction == Reduction::Mean) {
    // Integer tensors stay integers (rounded toward zero), as a C++ division would.
    if (c10::isIntegralType(tensor.scalar_type(), /*includeBool=*/false)) {
      tensor.div_(group.getSize(), "trunc");
    } else {
      tensor.div_(group.getSize());
    }
  }
}

void broadcast(c10d::ProcessGroup& group, torch::Tensor& tensor, int64_t root) {
  TORCH_CHECK(root >= 0 && root < group.getSize(), "accel: invalid broadcast source: ", root,
              " (expected a rank in [0, ", group.getSize(), "))");
  c10d::BroadcastOptions options;
  options.rootRank = root;
  std::vector<torch::Tensor> tensors{tensor};
  group.broadcast(tensors, options)->wait();
}

void barrier(c10d::ProcessGroup& group) { group.barrier()->wait(); }

std::vector<std::string> all_gather_bytes(c10d::ProcessGroup& group, const std::string& bytes) {
  auto length = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kInt64);
  auto lengths = all_gather(group, length);
  int64_t longest = 0;
  for (const auto& l : lengths) longest = std::max(longest, l.item<int64_t>());
  auto buffer = torch::zeros({std::max<int64_t>(longest, 1)}, torch::kUInt8);
  std::memcpy(buffer.data_ptr(), bytes.data(), bytes.size());
  auto gathered = all_gather(group, buffer);
  std::vector<std::string> out;
  for (size_t r = 0; r < gathered.size(); ++r) {
    out.emplace_back(static_cast<const char*>(gathered[r].data_ptr()),
                     static_cast<size_t>(lengths[r].item<int64_t>()));
  }
  return out;
}

std::vector<c10::IValue> all_gather_ivalues(c10d::ProcessGroup& group, const c10::IValue& value) {
  const auto pickled = torch::pickle_save(value);
  std::vector<c10::IValue> out;
  for (const auto& part : all_gather_bytes(group, std::string(pickled.begin(), pickled.end()))) {
    out.push_back(torch::pickle_load(std::vector<char>(part.begin(), part.end())));
  }
  return out;
}

c10::IValue broadcast_ivalue(c10d::ProcessGroup& group, const c10::IValue& value, int64_t root) {
  const auto pickled = torch::pickle_save(value);
  auto length = torch::tensor({static_cast<int64_t>(pickled.size())}, torch::kInt64);
  broadcast(group, length, root);
  auto buffer = torch::zeros({std::max<int64_t>(length.item<int64_t>(), 1)}, torch::kUInt8);
  if (group.getRank() == root) std::memcpy(buffer.data_ptr(), pickled.data(), pickled.size());
  broadcast(group, buffer, root);
  const char* data = static_cast<const char*>(buffer.data_ptr());
  return torch::pickle_load(std::vector<char>(data, data + length.item<int64_t>()));
}

void check_same_collective(const std::vector<std::string>& descriptions,
                           const std::string& collective) {
  if (std::all_of(descriptions.begin(), descriptions.end(),
                  [&](const std::string& d) { return d == descriptions[0]; })) {
    return;
  }
  std::ostringstream message;
  message << "accel: collective " << collective
          << " differs between processes (found by ACCEL_DEBUG): they would wait in it forever "
             "or exchange the wrong data;";
  for (size_t r = 0; r < descriptions.size(); ++r) {
    message << " rank " << r << " is in " << descriptions[r] << ";";
  }
  TORCH_CHECK(false, message.str());
}

std::string describe_tensors(const std::vector<at::Tensor>& tensors) {
  std::ostringstream out;
  for (size_t i = 0; i < tensors.size() && i < 4; ++i) {
    if (i > 0) out << ' ';
    const auto& t = tensors[i];
    if (!t.defined()) {
      out << "undefined";
      continue;
    }
    out << c10::toString(t.scalar_type()) << t.sizes();
  }
  if (tensors.size() > 4) out << " +" << tensors.size() - 4;
  return out.str();
}

void check_same_shapes(c10d::ProcessGroup& group, const std::string& op,
                       const torch::Tensor& tensor) {
  check_same_collective(all_gather_bytes(group, op + " [" + describe_tensors({tensor}) + "]"), op);
}

}  // namespace distributed
}  // namespace accel
