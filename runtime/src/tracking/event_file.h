#pragma once

// TensorBoard's event file: a sequence of records, each
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of the data
// (little-endian; the framing TensorFlow calls TFRecord), where data is one serialized Event.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace accel {
namespace tracking {

/// CRC-32C (Castagnoli) of `size` bytes, as TFRecord uses it.
uint32_t crc32c(const void* data, size_t size);
/// TFRecord's masking of a CRC stored beside the data it covers.
uint32_t masked_crc32c(const void* data, size_t size);

/// Appends records to one event file, flushed to the operating system after each, so that
/// TensorBoard sees every logged step while the run goes on and a crash loses none of them.
class EventFileWriter {
 public:
  /// Creates `path` (a file that exists is an error: event files are never rewritten).
  explicit EventFileWriter(std::string path);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  void write_record(const std::string& data);
  /// Writes pending records to disk (fsync) and closes the file.
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tracking
}  // namespace accel
