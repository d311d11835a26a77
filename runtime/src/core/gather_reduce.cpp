// The Accelerator's collective operations (declared in accelerator.h; the types they share are in
// operations.h): gather, reduce, broadcast, padding and splitting across processes. Tensors go
// over the group where they live (the device group); sizes and pickled values over the CPU group.

#include <accel/accelerator.h>
#include <accel/operations.h>

#include "accelerator_impl.h"
#include "distributed/collectives.h"
#include "distributed/distributed_state.h"
#include "util/collective_label.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace accel {

torch::Tensor Accelerator::gather(const torch::Tensor& tensor) {
  return gather_over(tensor, detail::GatherOver::all_processes);
}

torch::Tensor Accelerator::gather_over(const torch::Tensor& tensor, detail::GatherOver over) {
  ACCEL_METHOD_LABEL("gather");
  if (!impl_->distributed()) return tensor;
  const auto input = tensor.dim() == 0 ? tensor.unsqueeze(0) : tensor;
  return torch::cat(distributed::all_gather(*impl_->tensor_gather_group(over), input), 0);
}

std::vector<torch::Tensor> Accelerator::gather_together(const std::vector<torch::Tensor>& tensors,
                                                        detail::GatherOver over) {
  if (!impl_->distributed()) return tensors;
  // Each tensor's bytes, one after the other, in one buffer per process: one all-gather.
  std::vector<torch::Tensor> parts;
  std::vector<int64_t> offsets{0};
  for (const auto& tensor : tensors) {
    TORCH_CHECK(tensor.device() == tensors[0].device(),
                "gather_for_metrics: the tensors gathered together must be on one device (",
                tensors[0].device(), " and ", tensor.device(), ")");
    if (impl_->options.debug) distributed::check_same_shapes(impl_->host_group(), "gather", tensor);
    parts.push_back(tensor.contiguous().flatten().view(torch::kUInt8));
    offsets.push_back(offsets.back() + parts.back().numel());
    // Each tensor starts 16-byte aligned, so its bytes can be viewed as its dtype again.
    if (const int64_t pad = (16 - offsets.back() % 16) % 16; pad > 0) {
      parts.push_back(torch::zeros({pad}, parts.back().options()));
      offsets.back() += pad;
    }
  }
  const auto per_process =
      distributed::all_gather(*impl_->tensor_gather_group(over), torch::cat(parts));
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto shape = tensors[i].dim() == 0 ? std::vector<int64_t>{1} : tensors[i].sizes().vec();
    std::vector<torch::Tensor> pieces;
    for (const auto& bytes : per_process) {
      const int64_t length = tensors[i].numel() * tensors[i].element_size();
      pieces.push_back(
          bytes.narrow(0, offsets[i], length).view(tensors[i].scalar_type()).view(shape));
    }
    out.push_back(torch::cat(pieces, 0));
  }
  return out;
}

double Accelerator::reduce_number(double value, Reduction reduction) {
  ACCEL_METHOD_LABEL("reduce");
  if (!impl_->distributed()) return value;
  auto tensor = torch::tensor({value}, torch::kFloat64);
  distributed::all_reduce(impl_->host_group(), tensor, reduction);
  return tensor.item<double>();
}

int64_t Accelerator::reduce_number(int64_t value, Reduction reduction) {
  ACCEL_METHOD_LABEL("reduce");
  if (!impl_->distributed()) return value;
  auto tensor = torch::tensor({value}, torch::kInt64);
  distributed::all_reduce(impl_->host_group(), tensor, reduction);
  return tensor.item<int64_t>();
}

int64_t Accelerator::remainder_to_keep() const {
  return impl_->loop->loader.last_batch_remainder();
}

torch::Tensor Accelerator::gather_for_metrics(const torch::Tensor& tensor, bool use_gather_object) {
  ACCEL_METHOD_LABEL("gather_for_metrics");
  // Once per data rank: on a device mesh, over the processes of one tp and cp coordinate.
  const auto over = detail::GatherOver::data_ranks;
  if (!use_gather_object) return truncate_to_remainder(gather_over(tensor, over));
  // As objects, through the host group: the first dimensions may differ between processes.
  std::vector<torch::Tensor> parts;
  for (auto& part : all_gather_ivalue(c10::IValue(tensor.detach().cpu()), over)) {
    parts.push_back(part.toTensor());
    if (parts.back().dim() == 0) parts.back() = parts.back().unsqueeze(0);
  }
  return truncate_to_remainder(torch::cat(parts).to(tensor.device()));
}

torch::Tensor Accelerator::truncate_to_remainder(torch::Tensor gathered) const {
  const int64_t keep = remainder_to_keep();
  if (keep < 0 || gathered.dim() == 0 || gathered.size(0) <= keep) return gathered;
  return gathered.narrow(0, 0, keep);
}

torch::Tensor Accelerator::reduce(const torch::Tensor& tensor, Reduction reduction) {
  ACCEL_METHOD_LABEL("reduce");
  auto out = tensor.clone();
  if (!impl_->distributed()) return out;
  distributed::all_reduce(impl_->device_group(), out, reduction);
  return out;
}

torch::Tensor Accelerator::pad_across_processes(const torch::Tensor& tensor,
                                                const PadOptions& options) {
  ACCEL_METHOD_LABEL("pad_across_processes");
  int64_t dim = options.dim();
  if (!impl_->distributed() || tensor.dim() == 0) return tensor;
  TORCH_CHECK(dim >= -tensor.dim() && dim < tensor.dim(),
              "accel: invalid dim for pad_across_processes: ", dim, " (tensor has ", tensor.dim(),
              " dimensions)");
  if (dim < 0) dim += tensor.dim();
  auto sizes = torch::tensor(tensor.sizes().vec(), torch::kInt64);
  int64_t longest = 0;
  for (const auto& s : distributed::all_gather(impl_->host_group(), sizes)) {  // CPU sizes
    longest = std::max(longest, s[dim].item<int64_t>());
  }
  if (longest == tensor.size(dim)) return tensor;
  auto shape = tensor.sizes().vec();
  shape[dim] = longest;
  auto padded = torch::full(shape, options.pad_index(), tensor.options());
  const int64_t offset = options.pad_first() ? longest - tensor.size(dim) : 0;
  padded.narrow(dim, offset, tensor.size(dim)).copy_(tensor);
  return padded;
}

torch::Tensor Accelerator::broadcast(const torch::Tensor& tensor, int64_t from) {
  ACCEL_METHOD_LABEL("broadcast");
  if (!impl_->distributed()) return tensor;
  auto target = tensor;
  TORCH_CHECK(target.is_contiguous(), "accel: broadcast needs a contiguous tensor");
  distributed::broadcast(impl_->device_group(), target, from);
  return target;
}

std::vector<c10::IValue> Accelerator::all_gather_ivalue(const c10::IValue& value,
                                                        detail::GatherOver over) {
  ACCEL_METHOD_LABEL("gather_object");
  if (!impl_->distributed()) return {value};
  return distributed::all_gather_ivalues(*impl_->object_gather_group(over), value);
}

c10::IValue Accelerator::broadcast_ivalue(const c10::IValue& value, int64_t from) {
  ACCEL_METHOD_LABEL("broadcast_object");
  if (!impl_->distributed()) return value;
  return distributed::broadcast_ivalue(impl_->host_group(), value, from);
}

torch::Tensor Accelerator::split_between_processes(const torch::Tensor& values,
                                                   bool apply_padding) const {
  TORCH_CHECK(values.dim() > 0, "accel: split_between_processes needs a tensor with a dim 0");
  const auto range = detail::split_range(static_cast<size_t>(values.size(0)), num_processes(),
                                         process_index(), apply_padding);
  auto out = values.narrow(0, static_cast<int64_t>(range.begin),
                           static_cast<int64_t>(range.end - range.begin));
  const auto missing = static_cast<int64_t>(range.padded_size) - out.size(0);
  if (apply_padding && missing > 0 && values.size(0) > 0) {
    // This process's last item; a process left none (fewer items than processes) repeats the
    // last item of all, so that no process gets an empty share.
    auto last = out.size(0) > 0 ? out.narrow(0, out.size(0) - 1, 1)
                                : values.narrow(0, values.size(0) - 1, 1);
    std::vector<int64_t> repeats(static_cast<size_t>(values.dim()), 1);
    repeats[0] = missing;
    out = torch::cat({out, last.repeat(repeats)}, 0);
  }
  return out;
}

}  // namespace accel
