#pragma once

// TensorBoard Event messages, serialized. Compiled apart from LibTorch: the torch wheel ships
// an older protobuf's headers, which would shadow the protobuf the messages are generated for.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace accel {
namespace tracking {
namespace tensorboard_events {

/// A hyperparameter for the hparams plugin.
struct HParam {
  enum class Kind { boolean, number, text };
  std::string name;
  Kind kind = Kind::number;
  bool boolean = false;
  double number = 0;
  std::string text;
};

/// The first record of every event file ("brain.Event:2").
std::string file_version(double wall_time);
/// One step's values: numbers as scalars (TensorBoard's 32-bit simple_value), strings through
/// the text plugin.
std::string step(double wall_time, int64_t step,
                 const std::vector<std::pair<std::string, double>>& scalars,
                 const std::vector<std::pair<std::string, std::string>>& texts);
/// The hparams plugin's experiment (names and types) and session start (values), two records.
std::vector<std::string> hparams_start(double wall_time, const std::vector<HParam>& hparams);
/// The hparams plugin's session end (status: success).
std::string hparams_end(double wall_time);

}  // namespace tensorboard_events
}  // namespace tracking
}  // namespace accel
