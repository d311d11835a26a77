// Accelerate's spellings of the data-parallel options (accel/ddp_options.h).

#include <accel/ddp_options.h>

#include <accel_common/contract.h>
#include <accel_common/name_table.h>

#include <c10/util/Exception.h>

#include <array>
#include <utility>

namespace accel {

namespace {

// contract::ddp_comm_hook_choices() in this order (OptionSpellings tests both ways).
constexpr std::array<std::pair<DdpCommHook, const char*>, 3> kCommHooks = {{
    {DdpCommHook::No, "no"},
    {DdpCommHook::Fp16, "fp16"},
    {DdpCommHook::Bf16, "bf16"},
}};

}  // namespace

const char* to_string(DdpCommHook hook) { return name_in(kCommHooks, hook); }

std::optional<DdpCommHook> parse_ddp_comm_hook(std::string_view name) {
  return value_in<DdpCommHook>(kCommHooks, name);
}

DistributedDataParallelOptions& DistributedDataParallelOptions::comm_hook(std::string_view name) {
  const auto hook = parse_ddp_comm_hook(name);
  TORCH_CHECK(hook.has_value(), "accel: invalid ddp.comm_hook: '", name, "' (expected one of ",
              contract::join(contract::ddp_comm_hook_choices()), "; accel has no PowerSGD hook)");
  return comm_hook(*hook);
}

}  // namespace accel
