// Device maps with Accelerate's semantics (accelerate/utils/modeling.py): the same greedy
// allocation, reserve for the largest layer, balancing buffer and cleaning, on LibTorch modules.

#include <accel/device_map.h>

#include "sharding/module_tensors.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <set>
#include <sstream>

#ifdef ACCEL_WITH_CUDA
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#endif

namespace accel {
namespace {

bool is_cuda_device(const std::string& device) { return device.rfind("cuda:", 0) == 0; }

int cuda_index(const std::string& device) { return std::stoi(device.substr(5)); }

/// GPUs by index, then "cpu", then "disk": the order devices are filled in.
std::vector<std::string> ordered_devices(const MaxMemory& max_memory) {
  std::vector<std::string> gpus;
  for (const auto& entry : max_memory) {
    if (is_cuda_device(entry.first)) gpus.push_back(entry.first);
  }
  std::sort(gpus.begin(), gpus.end(), [](const std::string& a, const std::string& b) {
    return cuda_index(a) < cuda_index(b);
  });
  for (const char* other : {"cpu", "disk"}) {
    if (max_memory.count(other) != 0) gpus.push_back(other);
  }
  return gpus;
}

void check_device_name(const std::string& device) {
  bool valid = device == "cpu" || device == "disk";
  if (is_cuda_device(device)) {
    const std::string index = device.substr(5);
    valid = !index.empty() && index.size() < 4 &&
            std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; });
  }
  TORCH_CHECK(valid, "accel: device '", device,
              "' is not recognised; devices are cuda:N, cpu and disk");
}

int64_t available_cpu_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

/// A module's class as users name it: "torch::nn::LinearImpl" answers to "LinearImpl", "Linear"
/// and the full name.
bool is_class(const torch::nn::Module& module, const std::vector<std::string>& classes) {
  if (classes.empty()) return false;
  std::string full = module.name();
  const auto colon = full.rfind("::");
  std::string shortname = colon == std::string::npos ? full : full.substr(colon + 2);
  std::string plain = shortname;
  if (plain.size() > 4 && plain.compare(plain.size() - 4, 4, "Impl") == 0)
    plain.resize(plain.size() - 4);
  return std::any_of(classes.begin(), classes.end(), [&](const std::string& c) {
    return c == full || c == shortname || c == plain;
  });
}

/// A module, or a parameter or buffer (module == nullptr), by qualified name.
struct Part {
  std::string name;
  const torch::nn::Module* module;
};

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

/// The parts a module splits into: its own parameters, its children, and (with `buffers`) its
/// own buffers.
std::vector<Part> parts_of(const torch::nn::Module& module, const std::string& prefix,
                           bool buffers) {
  std::vector<Part> parts;
  for (const auto& p : module.named_parameters(/*recurse=*/false))
    parts.push_back({join(prefix, p.key()), nullptr});
  for (const auto& c : module.named_children())
    parts.push_back({join(prefix, c.key()), c.value().get()});
  if (buffers) {
    for (const auto& b : module.named_buffers(/*recurse=*/false))
      parts.push_back({join(prefix, b.key()), nullptr});
  }
  return parts;
}

/// True when `name` is `scope` or lies under it ("a.b" is within "a", "ab" is not).
bool is_within(const std::string& name, const std::string& scope) {
  return name == scope || (name.size() > scope.size() &&
                           name.compare(0, scope.size(), scope) == 0 && name[scope.size()] == '.');
}

/// Names of parameters registered more than once (tied weights), grouped by tensor: each group
/// holds the first name and the others, sorted (Accelerate's find_tied_parameters).
std::vector<std::vector<std::string>> tied_parameter_groups(const torch::nn::Module& model) {
  std::vector<std::pair<const c10::TensorImpl*, std::vector<std::string>>> groups;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    const c10::TensorImpl* impl = p.value().unsafeGetTensorImpl();
    auto group =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == impl; });
    if (group == groups.end()) {
      groups.push_back({impl, {p.key()}});
    } else {
      group->second.push_back(p.key());
    }
  }
  std::vector<std::vector<std::string>> tied;
  for (auto& group : groups) {
    if (group.second.size() < 2) continue;
    std::sort(group.second.begin(), group.second.end());
    tied.push_back(std::move(group.second));
  }
  return tied;
}

int64_t size_of(const std::map<std::string, int64_t>& sizes, const std::string& name) {
  auto it = sizes.find(name);
  return it == sizes.end() ? 0 : it->second;  // a tied weight's second name has no size
}

/// The largest part that cannot be split further, and the names of all parts that large.
std::pair<int64_t, std::vector<std::string>> max_layer_size(
    std::deque<Part> parts, const std::map<std::string, int64_t>& sizes,
    const std::vector<std::string>& no_split) {
  int64_t largest = 0;
  std::vector<std::string> names;
  while (!parts.empty()) {
    Part part = parts.front();
    parts.pop_front();
    const bool leaf = part.module == nullptr || part.module->children().empty() ||
                      is_class(*part.module, no_split);
    if (leaf) {
      const int64_t size = size_of(sizes, part.name);
      if (size > largest) {
        largest = size;
        names = {part.name};
      } else if (size == largest) {
        names.push_back(part.name);
      }
      continue;
    }
    const auto children = part.module->named_children();
    for (auto it = children.end(); it != children.begin();) {
      --it;
      parts.push_front({join(part.name, it->key()), it->value().get()});
    }
  }
  return {largest, names};
}

/// Names in `sizes` that no other name extends (accelerate's get_module_leaves).
std::vector<std::string> module_leaves(const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, int> children;
  for (const auto& entry : sizes) {
    const auto dot = entry.first.rfind('.');
    if (entry.first.empty() || dot == std::string::npos) continue;
    ++children[entry.first.substr(0, dot)];
  }
  std::vector<std::string> leaves;
  for (const auto& entry : sizes) {
    if (!entry.first.empty() && children.count(entry.first) == 0) leaves.push_back(entry.first);
  }
  return leaves;
}

void clean_under(DeviceMap& map, const std::string& module_name) {
  const std::string prefix = module_name.empty() ? "" : module_name + ".";
  std::vector<std::string> keys;
  std::set<std::string> values;
  for (const auto& entry : map) {
    if (entry.first.compare(0, prefix.size(), prefix) == 0) {
      keys.push_back(entry.first);
      values.insert(entry.second);
    }
  }
  if (values.size() == 1 && keys.size() > 1) {
    const std::string device = *values.begin();
    for (const auto& k : keys) map.erase(k);
    map[module_name] = device;
  }
  const size_t depth =
      module_name.empty()
          ? 1
          : static_cast<size_t>(std::count(module_name.begin(), module_name.end(), '.')) + 2;
  std::set<std::string> children;
  for (const auto& entry : map) {
    const std::string& k = entry.first;
    if (k.compare(0, prefix.size(), prefix) != 0 || k.size() <= module_name.size()) continue;
    // The first `depth` dotted components of k.
    size_t end = 0;
    for (size_t n = 0; n < depth && end != std::string::npos; ++n) {
      end = k.find('.', n == 0 ? 0 : end + 1);
    }
    children.insert(end == std::string::npos ? k : k.substr(0, end));
  }
  for (const auto& child : children) clean_under(map, child);
}

}  // namespace

MaxMemory parse_max_memory(const std::map<std::string, std::string>& sizes) {
  MaxMemory result;
  for (const auto& entry : sizes) {
    check_device_name(entry.first);
    result[entry.first] = parse_size(entry.second);
  }
  return result;
}

std::map<std::string, int64_t> compute_module_sizes(const torch::nn::Module& model,
                                                    std::optional<torch::ScalarType> dtype) {
  std::map<std::string, int64_t> sizes;
  sizes[""] = 0;
  for (const auto& entry : sharding::module_tensors(model)) {
    const torch::Tensor& tensor = entry.second;
    int64_t element = static_cast<int64_t>(c10::elementSize(tensor.scalar_type()));
    const bool converts =
        c10::isFloatingType(tensor.scalar_type()) || c10::isComplexType(tensor.scalar_type());
    if (dtype && converts)
      element = std::min(element, static_cast<int64_t>(c10::elementSize(*dtype)));
    const int64_t size = tensor.numel() * element;
    sizes[""] += size;
    for (size_t dot = entry.first.find('.'); dot != std::string::npos;
         dot = entry.first.find('.', dot + 1)) {
      sizes[entry.first.substr(0, dot)] += size;
    }
    sizes[entry.first] += size;
  }
  return sizes;
}

MaxMemory get_max_memory(const MaxMemory& max_memory) {
  MaxMemory result = max_memory;
  if (result.empty()) {
#ifdef ACCEL_WITH_CUDA
    for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaSetDevice(i) == cudaSuccess &&
          cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        result["cuda:" + std::to_string(i)] = static_cast<int64_t>(free_bytes);
      }
    }
#endif
    result["cpu"] = available_cpu_memory();
    return result;
  }
  // A budget given is the whole budget, as in Accelerate: a device it leaves out is not used.
  for (const auto& entry : result) {
    check_device_name(entry.first);
    TORCH_CHECK(entry.second >= 0, "accel: max_memory for ", entry.first, " is negative");
  }
  return result;
}

MaxMemory get_balanced_memory(const torch::nn::Module& model, const DeviceMapOptions& options,
                              bool low_zero) {
  const bool user_not_set = options.max_memory().empty();
  MaxMemory max_memory = get_max_memory(options.max_memory());
  std::vector<std::string> gpus;
  for (const auto& device : ordered_devices(max_memory)) {
    if (is_cuda_device(device) && max_memory[device] > 0) gpus.push_back(device);
  }
  if (gpus.empty()) return max_memory;
  if (gpus.size() == 1) {
    low_zero = false;  // nothing to balance against; keep a tenth free for activations instead
    if (user_not_set) max_memory[gpus.front()] = max_memory[gpus.front()] / 10 * 9;
  }
  auto sizes = compute_module_sizes(model, options.dtype());
  int64_t per_gpu = sizes[""] / static_cast<int64_t>(low_zero ? gpus.size() - 1 : gpus.size());

  int64_t buffer = 0;
  const auto& no_split = options.no_split_module_classes();
  if (!no_split.empty()) {
    std::set<std::string> seen;
    for (const auto& named : model.named_modules("", /*include_self=*/false)) {
      for (const auto& c : no_split) {
        if (seen.count(c) == 0 && is_class(*named.value(), {c})) {
          seen.insert(c);
          buffer = std::max(buffer, size_of(sizes, named.key()));
        }
      }
      if (seen.size() == no_split.size()) break;
    }
  }
  // Leaves at first are tensors; without them, they are the innermost modules.
  for (const auto& leaf : module_leaves(sizes)) sizes.erase(leaf);
  const auto leaves = module_leaves(sizes);
  int64_t total = 0;
  for (const auto& leaf : leaves) total += sizes[leaf];
  const int64_t mean_leaf = static_cast<int64_t>(
      static_cast<double>(total) / static_cast<double>(std::max<size_t>(leaves.size(), 1)));
  buffer = static_cast<int64_t>(1.25 * static_cast<double>(std::max(buffer, mean_leaf)));
  per_gpu += buffer;

  for (size_t i = 0; i + 1 < gpus.size(); ++i) {
    const int64_t cap = low_zero && i == 0 ? max_memory[gpus[0]] : per_gpu;
    max_memory[gpus[i]] = std::min(cap, max_memory[gpus[i]]);
  }
  if (low_zero) {
    int64_t others = 0;
    for (size_t i = 1; i < gpus.size(); ++i) others += max_memory[gpus[i]];
    max_memory[gpus[0]] = std::min(std::max<int64_t>(0, sizes[""] - others), max_memory[gpus[0]]);
  }
  return max_memory;
}

namespace {

/// Accelerate's infer_auto_device_map as a walk over a queue of parts (modules, parameters and
/// buffers): each part is placed whole on the current device, split into its children, or left
/// for the next device. The main devices (the first GPU and the CPU) keep room for the largest
/// layer still to place, which offloaded layers are brought into to run.
class DeviceMapPlanner {
 public:
  DeviceMapPlanner(const torch::nn::Module& model, const DeviceMapOptions& options)
      : max_memory_(get_max_memory(options.max_memory())),
        devices_(ordered_devices(max_memory_)),
        no_split_(options.no_split_module_classes()),
        sizes_(compute_module_sizes(model, options.dtype())),
        tied_groups_(tied_parameter_groups(model)) {
    if (std::find(devices_.begin(), devices_.end(), "disk") == devices_.end()) {
      devices_.push_back("disk");
    }
    main_devices_ = {"cpu"};
    if (is_cuda_device(devices_.front())) main_devices_ = {devices_.front(), "cpu"};
    for (const auto& part : parts_of(model, "", /*buffers=*/true)) queue_.push_back(part);
    largest_ = max_layer_size(queue_, sizes_, no_split_);
  }

  DeviceMap plan() {
    while (!queue_.empty()) {
      const Part part = queue_.front();
      queue_.pop_front();
      forget_largest_within(part);
      const std::vector<TiedModule> tied_modules = queued_tied_modules(part);
      int64_t size_with_ties = size_of(sizes_, part.name);
      for (const auto& tied : tied_modules) size_with_ties += tied.added_size;
      if (fits(size_with_ties)) {
        place(part, tied_modules, size_with_ties);
      } else if (!tied_modules.empty() && fits(size_of(sizes_, part.name)) &&
                 split_first_splittable(tied_modules)) {
        // The part fits without its tied modules: one of them was split to make room.
        queue_.push_front(part);
      } else if (!fits_strictly(size_of(sizes_, part.name)) && splittable(part)) {
        split(part);
      } else {
        next_device();
        queue_.push_front(part);
      }
    }
    return device_map_;
  }

 private:
  const std::string& device() const { return devices_[current_]; }
  bool is_main_device() const {
    return std::find(main_devices_.begin(), main_devices_.end(), device()) != main_devices_.end();
  }
  /// The current device's room for parameters: its budget, less the largest layer on a main one.
  int64_t limit() const {
    return max_memory_.at(device()) - (is_main_device() ? largest_.first : 0);
  }
  bool fits(int64_t size) { return device() == "disk" || used_[device()] + size <= limit(); }
  /// Accelerate compares with >= before splitting a part.
  bool fits_strictly(int64_t size) {
    return device() == "disk" || used_[device()] + size < limit();
  }
  bool splittable(const Part& p) const {
    return p.module != nullptr && !p.module->children().empty() && !is_class(*p.module, no_split_);
  }

  /// The largest layer may have just been taken: then find the next one.
  void forget_largest_within(const Part& part) {
    auto& names = largest_.second;
    names.erase(std::remove_if(names.begin(), names.end(),
                               [&](const std::string& n) { return is_within(n, part.name); }),
                names.end());
    if (names.empty()) largest_ = max_layer_size(modules_in_queue(), sizes_, no_split_);
  }

  /// A queued part holding a weight tied to one inside the part being placed, which must go where
  /// that part goes; `added_size` is its size without the tied weight, counted once already.
  struct TiedModule {
    Part part;
    int64_t added_size;
  };

  std::vector<TiedModule> queued_tied_modules(const Part& part) {
    std::vector<TiedModule> tied_modules;
    for (const auto& group : tied_groups_) {
      const auto inside = std::count_if(group.begin(), group.end(), [&](const std::string& n) {
        return is_within(n, part.name);
      });
      if (inside == 0 || inside == static_cast<std::ptrdiff_t>(group.size())) continue;
      for (const auto& name : group) {
        if (is_within(name, part.name)) continue;
        auto holder = std::find_if(queue_.begin(), queue_.end(),
                                   [&](const Part& p) { return is_within(name, p.name); });
        if (holder == queue_.end()) continue;  // already placed
        tied_modules.push_back({*holder, size_of(sizes_, holder->name) - size_of(sizes_, name)});
      }
    }
    return tied_modules;
  }

  void place(const Part& part, const std::vector<TiedModule>& tied_modules, int64_t size) {
    used_[device()] += size;
    device_map_[part.name] = device();
    for (const auto& tied : tied_modules) {
      auto queued = position_in_queue(tied.part.name);
      if (queued != queue_.end()) queue_.erase(queued);
      device_map_[tied.part.name] = device();
    }
  }

  /// Replaces the first splittable tied module in the queue by its children; false if none is.
  bool split_first_splittable(const std::vector<TiedModule>& tied_modules) {
    auto tied = std::find_if(tied_modules.begin(), tied_modules.end(),
                             [&](const TiedModule& t) { return splittable(t.part); });
    if (tied == tied_modules.end()) return false;
    const auto parts = parts_of(*tied->part.module, tied->part.name, /*buffers=*/true);
    auto queued = queue_.erase(position_in_queue(tied->part.name));
    queue_.insert(queued, parts.begin(), parts.end());
    largest_ = max_layer_size(modules_in_queue(), sizes_, no_split_);
    return true;
  }

  /// Puts `part`'s children at the front of the queue in its place.
  void split(const Part& part) {
    const auto parts = parts_of(*part.module, part.name, /*buffers=*/true);
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) queue_.push_front(*it);
    largest_ = max_layer_size(modules_in_queue(), sizes_, no_split_);
  }

  /// The current device is full: what it keeps for the largest layer counts as used.
  void next_device() {
    if (is_main_device()) used_[device()] += largest_.first;
    ++current_;
  }

  std::deque<Part> modules_in_queue() const {
    std::deque<Part> modules;
    for (const auto& p : queue_) {
      if (p.module != nullptr) modules.push_back(p);
    }
    return modules;
  }
  std::deque<Part>::iterator position_in_queue(const std::string& name) {
    return std::find_if(queue_.begin(), queue_.end(),
                        [&](const Part& p) { return p.name == name; });
  }

  const MaxMemory max_memory_;
  std::vector<std::string> devices_;
  std::vector<std::string> main_devices_;
  const std::vector<std::string> no_split_;
  const std::map<std::string, int64_t> sizes_;
  const std::vector<std::vector<std::string>> tied_groups_;
  std::deque<Part> queue_;
  /// The largest layer still to place: its size and the names of the layers of that size.
  std::pair<int64_t, std::vector<std::string>> largest_;
  DeviceMap device_map_;
  size_t current_ = 0;
  std::map<std::string, int64_t> used_;
};

}  // namespace

DeviceMap infer_auto_device_map(const torch::nn::Module& model, const DeviceMapOptions& options) {
  DeviceMap device_map = DeviceMapPlanner(model, options).plan();
  return options.clean_result() ? clean_device_map(std::move(device_map)) : device_map;
}

DeviceMap clean_device_map(DeviceMap device_map) {
  clean_under(device_map, "");
  return device_map;
}

const std::string& device_for(const DeviceMap& device_map, const std::string& name) {
  const std::string* found = nullptr;
  size_t found_length = 0;
  for (const auto& entry : device_map) {
    const std::string& key = entry.first;
    const bool covers = key.empty() || is_within(name, key);
    if (covers && (found == nullptr || key.size() >= found_length)) {
      found = &entry.second;
      found_length = key.size();
    }
  }
  TORCH_CHECK(found != nullptr, "accel: the device map gives no device for '", name, "'");
  return *found;
}

}  // namespace accel
