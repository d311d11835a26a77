#include "event_file.h"

#include <c10/util/Exception.h>

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace accel {
namespace tracking {
namespace {

/// The byte-at-a-time table of the reflected Castagnoli polynomial 0x82F63B78.
const std::array<uint32_t, 256>& crc32c_table() {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
      t[i] = crc;
    }
    return t;
  }();
  return table;
}

void put_le(unsigned char* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto& table = crc32c_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

EventFileWriter::EventFileWriter(std::string path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "wbx");
  TORCH_CHECK(file_ != nullptr, "accel: cannot create the event file ", path_, ": ",
              std::strerror(errno));
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventFileWriter::write_record(const std::string& data) {
  TORCH_CHECK(file_ != nullptr, "accel: the event file ", path_, " is closed");
  unsigned char header[12];
  put_le(header, data.size(), 8);
  put_le(header + 8, masked_crc32c(header, 8), 4);
  unsigned char footer[4];
  put_le(footer, masked_crc32c(data.data(), data.size()), 4);
  const bool written = std::fwrite(header, 1, sizeof header, file_) == sizeof header &&
                       std::fwrite(data.data(), 1, data.size(), file_) == data.size() &&
                       std::fwrite(footer, 1, sizeof footer, file_) == sizeof footer &&
                       std::fflush(file_) == 0;
  TORCH_CHECK(written, "accel: cannot write to the event file ", path_, ": ", std::strerror(errno));
}

void EventFileWriter::close() {
  if (file_ == nullptr) return;
  const bool synced = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const int saved = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  TORCH_CHECK(synced && closed, "accel: cannot finish the event file ", path_, ": ",
              std::strerror(synced ? errno : saved));
}

}  // namespace tracking
}  // namespace accel
