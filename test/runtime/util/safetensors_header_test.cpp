// The safetensors header reader: a valid file, and every malformed case named with its file and
// tensor.

#include "accel_common/safetensors_header.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace accel {
namespace detail {
namespace {

std::string temp_path(const std::string& name) {
  static const accel_test::TempDir folder("accel_st");  // removed when the tests end
  return (folder / name).string();
}

// Writes an 8-byte little-endian length, `header`, then `data_bytes` zero bytes.
std::string write_file(const std::string& name, const std::string& header, size_t data_bytes,
                       uint64_t declared_length = UINT64_MAX) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  uint64_t length = declared_length == UINT64_MAX ? header.size() : declared_length;
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
  out << header << std::string(data_bytes, '\0');
  return path;
}

std::string error_of(const std::string& path) {
  try {
    read_safetensors_header(path);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  return "";
}

TEST(SafetensorsHeader, ReadsTensorsAndMetadata) {
  const auto path = write_file(
      "ok",
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})",
      32);
  const auto header = read_safetensors_header(path);
  ASSERT_EQ(header.tensors.size(), 2u);
  EXPECT_EQ(header.tensors.at("w").numel(), 6);
  EXPECT_EQ(header.tensors.at("b").dtype, "BF16");
  EXPECT_EQ(header.metadata.at("format"), "pt");
  EXPECT_EQ(header.data_bytes, 32u);
}

TEST(SafetensorsHeader, MalformedFilesNameTheFileAndTheProblem) {
  struct Case {
    std::string name, header;
    size_t data;
    uint64_t declared;
    std::string expected;
  };
  const std::string w = R"("w":{"dtype":"F32","shape":[2],"data_offsets":)";
  for (const Case& c : std::vector<Case>{
           {"long", "{}", 0, 1000, "header length 1000 runs past the end of the file"},
           {"huge", "{}", 0, 200000000, "is over the 100 MB limit"},
           {"notjson", "{nope", 0, UINT64_MAX, "header is not JSON"},
           {"dtype", R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8, UINT64_MAX,
            "tensor 'w': unknown dtype 'F33'"},
           {"size", "{" + w + "[0,12]}}", 12, UINT64_MAX,
            "tensor 'w': shape and dtype need 8 bytes but data_offsets span 12"},
           {"range", "{" + w + "[0,8]}}", 4, UINT64_MAX,
            "tensor 'w': data_offsets [0, 8) are outside the data buffer of 4 bytes"},
           {"overlap", "{" + w + R"([0,8]},"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            12, UINT64_MAX, "data overlaps the previous tensor"},
           {"gap", "{" + w + "[4,12]}}", 12, UINT64_MAX,
            "bytes 0..4 of the buffer belong to no tensor"},
           {"tail", "{" + w + "[0,8]}}", 16, UINT64_MAX,
            "the last 8 bytes of the buffer belong to no tensor"},
           {"extent", R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,8]}})",
            8, UINT64_MAX, "tensor 'w': shape holds an extent too large"},
           // 2^32 x 2^32 x 4 bytes wraps to 0 in 64 bits; it must not pass as an empty tensor.
           {"wrap", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
            0, UINT64_MAX, "tensor 'w': shape [4294967296,4294967296] is too large"},
       }) {
    const auto path = write_file(c.name, c.header, c.data, c.declared);
    const auto message = error_of(path);
    EXPECT_NE(message.find(path), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
  }
  EXPECT_NE(error_of(temp_path("missing")).find("cannot be read"), std::string::npos);
  const auto short_path = temp_path("short");
  std::ofstream(short_path, std::ios::binary) << "abc";
  EXPECT_NE(error_of(short_path).find("is 3 bytes, too short for a header"), std::string::npos);
}

TEST(SafetensorsHeader, ParsesAFileHeldInMemoryWithTheSameChecks) {
  const std::string json = R"({"w":{"dtype":"I16","shape":[3],"data_offsets":[0,6]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(json.size());
  bytes += json + std::string(6, '\0');
  const auto header = parse_safetensors_header("in-memory", bytes.data(), bytes.size());
  EXPECT_EQ(header.tensors.at("w").numel(), 3);
  try {
    parse_safetensors_header("in-memory", bytes.data(), bytes.size() - 1);
    ADD_FAILURE() << "a truncated buffer was accepted";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("in-memory"), std::string::npos) << e.what();
  }
}

// The fuzzer's seed corpus means what its names say: valid_* files parse, bad_* files are refused.
TEST(SafetensorsHeader, FuzzSeedCorpusIsValidWhereItSaysSo) {
  int seen = 0;
  // Named by CMake: __FILE__ is relative when ccache rewrites paths for reuse across checkouts.
  const auto corpus =
      std::filesystem::path(ACCEL_TEST_SOURCE_DIR) / "fuzz/corpus/safetensors_header";
  for (const auto& file : std::filesystem::directory_iterator(corpus)) {
    const std::string name = file.path().filename().string();
    std::ifstream in(file.path(), std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const bool valid = name.rfind("valid_", 0) == 0;
    ASSERT_TRUE(valid || name.rfind("bad_", 0) == 0) << name << " is neither valid_* nor bad_*";
    bool accepted = true;
    try {
      parse_safetensors_header(name, bytes.data(), bytes.size());
    } catch (const SafetensorsError& e) {
      accepted = false;
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
    EXPECT_EQ(accepted, valid) << name;
    ++seen;
  }
  EXPECT_GE(seen, 10);
}

TEST(SafetensorsIndex, NamesShardsOnceAndRejectsPathsOutsideTheFolder) {
  const auto good = temp_path("index.json");
  std::ofstream(good) << R"({"metadata":{"total_size":8},"weight_map":{"a":"s1.safetensors",)"
                      << R"("b":"s2.safetensors","c":"s1.safetensors"}})";
  const auto shards = read_safetensors_index(good);
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_NE(shards[0].find("s1.safetensors"), std::string::npos);
  const auto bad = temp_path("bad_index.json");
  std::ofstream(bad) << R"({"weight_map":{"a":"../x.safetensors"}})";
  try {
    read_safetensors_index(bad);
    ADD_FAILURE();
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the index's folder"), std::string::npos);
  }
}

}  // namespace
}  // namespace detail
}  // namespace accel
