#include "tensorboard_events.h"

#include "proto/tensorboard.pb.h"

#include <stdexcept>

namespace accel {
namespace tracking {
namespace tensorboard_events {
namespace {

namespace tb = accel::tensorboard;

std::string serialized(const google::protobuf::MessageLite& message) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    throw std::runtime_error("accel: cannot serialize a TensorBoard " + message.GetTypeName());
  }
  return bytes;
}

/// An event holding one summary value of the hparams plugin.
std::string hparams_event(double wall_time, const std::string& tag,
                          const tb::HParamsPluginData& content) {
  tb::Event event;
  event.set_wall_time(wall_time);
  auto* value = event.mutable_summary()->add_value();
  value->set_tag(tag);
  auto* plugin = value->mutable_metadata()->mutable_plugin_data();
  plugin->set_plugin_name("hparams");
  plugin->set_content(serialized(content));
  return serialized(event);
}

}  // namespace

std::string file_version(double wall_time) {
  tb::Event event;
  event.set_wall_time(wall_time);
  event.set_file_version("brain.Event:2");
  return serialized(event);
}

std::string step(double wall_time, int64_t step,
                 const std::vector<std::pair<std::string, double>>& scalars,
                 const std::vector<std::pair<std::string, std::string>>& texts) {
  tb::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [tag, number] : scalars) {
    auto* value = summary->add_value();
    value->set_tag(tag);
    value->set_simple_value(static_cast<float>(number));
  }
  for (const auto& [tag, text] : texts) {
    auto* value = summary->add_value();
    value->set_tag(tag);
    value->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
    auto* tensor = value->mutable_tensor();
    tensor->set_dtype(tb::DT_STRING);
    tensor->mutable_tensor_shape();  // a scalar: no dimensions
    tensor->add_string_val(text);
  }
  return serialized(event);
}

std::vector<std::string> hparams_start(double wall_time, const std::vector<HParam>& hparams) {
  tb::HParamsPluginData experiment_data;
  auto* experiment = experiment_data.mutable_experiment();
  experiment->set_time_created_secs(wall_time);
  tb::HParamsPluginData session_data;
  auto* session = session_data.mutable_session_start_info();
  session->set_start_time_secs(wall_time);
  for (const auto& hparam : hparams) {
    auto* info = experiment->add_hparam_infos();
    info->set_name(hparam.name);
    google::protobuf::Value value;
    switch (hparam.kind) {
      case HParam::Kind::boolean:
        info->set_type(tb::DATA_TYPE_BOOL);
        value.set_bool_value(hparam.boolean);
        break;
      case HParam::Kind::number:
        info->set_type(tb::DATA_TYPE_FLOAT64);
        value.set_number_value(hparam.number);
        break;
      case HParam::Kind::text:
        info->set_type(tb::DATA_TYPE_STRING);
        value.set_string_value(hparam.text);
        break;
    }
    (*session->mutable_hparams())[hparam.name] = value;
  }
  return {hparams_event(wall_time, "_hparams_/experiment", experiment_data),
          hparams_event(wall_time, "_hparams_/session_start_info", session_data)};
}

std::string hparams_end(double wall_time) {
  tb::HParamsPluginData data;
  data.mutable_session_end_info()->set_status(tb::STATUS_SUCCESS);
  data.mutable_session_end_info()->set_end_time_secs(wall_time);
  return hparams_event(wall_time, "_hparams_/session_end_info", data);
}

}  // namespace tensorboard_events
}  // namespace tracking
}  // namespace accel
