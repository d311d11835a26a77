#include <accel/safetensors.h>

#include "accel_common/safetensors_header.h"
#include "durable_file.h"
#include "safetensors_dtypes.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>

namespace accel {
namespace {

struct DtypeName {
  torch::ScalarType type;
  const char* name;
};

constexpr DtypeName kDtypes[] = {{torch::kBool, "BOOL"},   {torch::kUInt8, "U8"},
                                 {torch::kInt8, "I8"},     {torch::kInt16, "I16"},
                                 {torch::kInt32, "I32"},   {torch::kInt64, "I64"},
                                 {torch::kFloat16, "F16"}, {torch::kBFloat16, "BF16"},
                                 {torch::kFloat32, "F32"}, {torch::kFloat64, "F64"}};

}  // namespace

const char* util::safetensors_dtype_name(torch::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  return nullptr;
}

std::optional<torch::ScalarType> util::safetensors_torch_dtype(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return d.type;
  }
  return std::nullopt;
}

namespace {

/// A read-only file mapped copy-on-write; unmapped when the last tensor viewing it goes.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    TORCH_CHECK(fd >= 0, "accel: cannot read ", path, ": ", std::strerror(errno));
    struct stat info {};
    if (::fstat(fd, &info) == 0) size_ = static_cast<size_t>(info.st_size);
    if (size_ > 0) {
      void* data = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
      if (data != MAP_FAILED) data_ = static_cast<char*>(data);
    }
    const int error = errno;
    ::close(fd);
    TORCH_CHECK(size_ == 0 || data_ != nullptr, "accel: cannot map ", path, ": ",
                std::strerror(error));
  }
  ~Mapping() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

int64_t safetensors_data_bytes(const NamedTensors& tensors) {
  int64_t total = 0;
  for (const auto& entry : tensors) total += entry.second.numel() * entry.second.element_size();
  return total;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Data in name order, so the same tensors always give the same bytes.
  std::vector<const std::pair<std::string, torch::Tensor>*> ordered;
  std::set<std::string> names;
  for (const auto& entry : tensors) {
    TORCH_CHECK(names.insert(entry.first).second, "accel: cannot write ", path,
                ": the tensor name '", entry.first, "' appears twice");
    TORCH_CHECK(entry.second.defined(), "accel: cannot write ", path, ": tensor '", entry.first,
                "' is undefined");
    TORCH_CHECK(util::safetensors_dtype_name(entry.second.scalar_type()) != nullptr,
                "accel: cannot write ", path, ": tensor '", entry.first, "' has dtype ",
                entry.second.scalar_type(), ", which safetensors cannot store");
    ordered.push_back(&entry);
  }
  std::sort(ordered.begin(), ordered.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* entry : ordered) {
    const auto& t = entry->second;
    const auto bytes = static_cast<uint64_t>(t.numel() * t.element_size());
    header[entry->first] = {{"dtype", util::safetensors_dtype_name(t.scalar_type())},
                            {"shape", t.sizes().vec()},
                            {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as safetensors
  char length[8];
  uint64_t n = json.size();
  for (char& byte : length) {
    byte = static_cast<char>(n & 0xff);
    n >>= 8;
  }

  util::DurableFile file(path);
  file.write(length, sizeof length);
  file.write(json);
  for (const auto* entry : ordered) {
    // One tensor at a time on the CPU, so writing needs no more memory than the largest tensor.
    const auto cpu = entry->second.detach().to(torch::kCPU).contiguous();
    file.write(cpu.data_ptr(), static_cast<size_t>(cpu.numel() * cpu.element_size()));
  }
  file.commit();
}

std::map<std::string, torch::Tensor> load_safetensors(const std::string& path) {
  detail::SafetensorsHeader header;
  try {
    header = detail::read_safetensors_header(path);
  } catch (const detail::SafetensorsError& e) {
    TORCH_CHECK(false, "accel: ", e.what());
  }
  auto mapping = std::make_shared<Mapping>(path);
  const uint64_t data_start = 8 + header.header_bytes;
  TORCH_CHECK(mapping->size() >= data_start + header.data_bytes, "accel: ", path,
              " changed while it was being read");

  std::map<std::string, torch::Tensor> out;
  for (const auto& entry : header.tensors) {
    const auto type = util::safetensors_torch_dtype(entry.second.dtype);
    TORCH_CHECK(type.has_value(), "accel: ", path, ": tensor '", entry.first, "' has dtype ",
                entry.second.dtype, ", which LibTorch does not have");
    const auto options = torch::TensorOptions().dtype(*type);
    if (entry.second.begin == entry.second.end) {
      out.emplace(entry.first, torch::empty(entry.second.shape, options));
      continue;
    }
    char* data = mapping->data() + data_start + entry.second.begin;
    auto view = torch::from_blob(
        data, entry.second.shape, [mapping](void*) {}, options);
    const auto alignment = static_cast<uintptr_t>(c10::elementSize(*type));
    // A file from another writer may leave a tensor unaligned for its dtype: copy that one.
    if (reinterpret_cast<uintptr_t>(data) % alignment != 0) {
      auto copy = torch::empty(entry.second.shape, options);
      std::memcpy(copy.data_ptr(), data, entry.second.end - entry.second.begin);
      view = copy;
    }
    out.emplace(entry.first, std::move(view));
  }
  return out;
}

}  // namespace accel
