// The MLflow tracker: an experiment, one run, its params, metrics and tags, sent over MLflow's REST
// API to the tracking server MLFLOW_TRACKING_URI names, with the variables MLflow's own clients
// read. A request that fails is reported and dropped; training never waits on the server for
// longer than one request's timeout.

#include "builtin_trackers.h"
#include "distributed/environment.h"
#include "http_client.h"

#include <accel_common/contract.h>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <set>
#include <utility>

namespace accel {
namespace tracking {
namespace {

using nlohmann::json;

constexpr const char kApi[] = "/api/2.0/mlflow/";
// MLflow's limits on one log-batch request, and on a key and a param's value.
constexpr size_t kMetricsPerBatch = 1000;
constexpr size_t kParamsPerBatch = 100;
constexpr size_t kLongestKey = 250;
constexpr size_t kLongestParamValue = 6000;
/// The tag that ties a run to one `accel launch`, so that a restarted group finds it again.
constexpr const char kLaunchTag[] = "accel.run_id";

int64_t milliseconds_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Why MLflow's server would refuse `key` as a metric or param name, or none when it takes it:
/// letters, digits, '_', '-', '.', ' ', ':' and '/' between non-empty parts, at most 250 bytes.
std::optional<std::string> why_key_is_refused(const std::string& key) {
  if (key.empty()) return "it is empty";
  if (key.size() > kLongestKey) return "it is longer than 250 characters";
  for (unsigned char c : key) {
    const bool allowed = std::isalnum(c) || c >= 0x80 || c == '_' || c == '-' || c == '.' ||
                         c == ' ' || c == ':' || c == '/';
    if (!allowed) {
      return std::string("it holds '") + static_cast<char>(c) +
             "' (MLflow takes letters, digits, _ - . : / and spaces)";
    }
  }
  // MLflow keeps a key as a path: it must already be in normal form.
  size_t begin = 0;
  while (true) {
    const size_t end = key.find('/', begin);
    const std::string part = key.substr(begin, end == std::string::npos ? end : end - begin);
    if (part.empty() || part == "." || part == "..") {
      return "as a path it is not in normal form (an empty, '.' or '..' part)";
    }
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return std::nullopt;
}

/// The settings MLflow's clients take from the environment.
HttpSettings settings_from(const distributed::EnvLookup& env, const std::string& uri) {
  HttpSettings settings;
  settings.base_url = uri;
  while (!settings.base_url.empty() && settings.base_url.back() == '/')
    settings.base_url.pop_back();
  settings.bearer_token = distributed::env_string(env, "MLFLOW_TRACKING_TOKEN");
  settings.username = distributed::env_string(env, "MLFLOW_TRACKING_USERNAME");
  settings.password = distributed::env_string(env, "MLFLOW_TRACKING_PASSWORD");
  settings.insecure_tls =
      distributed::env_bool(env, "MLFLOW_TRACKING_INSECURE_TLS").value_or(false);
  settings.ca_bundle = distributed::env_string(env, "MLFLOW_TRACKING_SERVER_CERT_PATH");
  if (auto timeout = distributed::env_int(env, "MLFLOW_HTTP_REQUEST_TIMEOUT")) {
    TORCH_CHECK(*timeout > 0, "accel: invalid MLFLOW_HTTP_REQUEST_TIMEOUT: ", *timeout,
                " (expected seconds > 0)");
    settings.timeout_seconds = static_cast<long>(*timeout);
  }
  return settings;
}

class MlflowTracker final : public GeneralTracker {
 public:
  explicit MlflowTracker(distributed::EnvLookup env) : env_(std::move(env)) {}

  ~MlflowTracker() override {
    // A program that ends without end_training still closes its run: failed when leaving by an
    // exception, finished otherwise (as MLflow's Python client does at exit).
    if (client_ && !run_id_.empty() && !ended_) {
      try {
        end_run(std::uncaught_exceptions() > 0 ? "FAILED" : "FINISHED");
      } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor reports nothing more
      }
    }
  }

  std::string name() const override { return "mlflow"; }

  void start(const std::string& project, const std::string&,
             const TrackerValues& options) override {
    std::optional<std::string> uri = distributed::env_string(env_, "MLFLOW_TRACKING_URI");
    std::optional<std::string> run_name;
    std::optional<std::string> description;
    for (const auto& [key, value] : options) {
      if (key == "run_name") {
        run_name = value.text();
      } else if (key == "description") {
        description = value.text();
      } else if (key == "tracking_uri") {
        if (!uri) uri = value.text();  // MLFLOW_TRACKING_URI wins, as in Accelerate
      } else {
        TORCH_CHECK(false, "init_kwargs for 'mlflow' has '", key,
                    "'; it takes run_name, description and tracking_uri");
      }
    }
    TORCH_CHECK(uri.has_value(),
                "the mlflow tracker needs a tracking server: set MLFLOW_TRACKING_URI (or "
                "init_kwargs' tracking_uri) to its address, e.g. http://127.0.0.1:5000");
    TORCH_CHECK(uri->rfind("http://", 0) == 0 || uri->rfind("https://", 0) == 0,
                "the mlflow tracker talks to a tracking server over HTTP; MLFLOW_TRACKING_URI is '",
                *uri,
                "' (file and database stores are written by MLflow's server: run `mlflow "
                "server --backend-store-uri ",
                *uri, "` and give its http:// address)");
    uri_ = *uri;
    client_ = std::make_unique<HttpClient>(settings_from(env_, uri_));

    const std::string experiment =
        distributed::env_string(env_, "MLFLOW_EXPERIMENT_NAME").value_or(project);
    experiment_id_ = find_or_create_experiment(experiment);
    if (auto run_id = distributed::env_string(env_, "MLFLOW_RUN_ID")) {
      continue_run(*run_id);
      return;
    }
    // A group restarted by `accel launch --max_restarts` continues its first start's run.
    const auto launch = distributed::env_string(env_, contract::kRunId);
    if (launch && distributed::env_int(env_, contract::kRestartCount).value_or(0) > 0) {
      if (auto run_id = find_run_of_launch(*launch)) {
        continue_run(*run_id);
        return;
      }
    }
    create_run(run_name, description, launch);
  }

  void store_init_configuration(const TrackerValues& config) override {
    json params = json::array();
    for (const auto& [key, value] : config) {
      if (refused(key, "param")) continue;
      std::string text = value.text();
      if (text.size() > kLongestParamValue) {
        std::fprintf(stderr,
                     "accel: mlflow: the value of param '%s' is %zu characters, over MLflow's "
                     "%zu; left out\n",
                     key.c_str(), text.size(), kLongestParamValue);
        continue;
      }
      params.push_back({{"key", key}, {"value", std::move(text)}});
      if (params.size() == kParamsPerBatch)
        send_batch("params", std::exchange(params, json::array()));
    }
    if (!params.empty()) send_batch("params", std::move(params));
  }

  void log(const TrackerValues& values, std::optional<int64_t> step) override {
    const int64_t timestamp = milliseconds_now();
    json metrics = json::array();
    for (const auto& [key, value] : values) {
      if (!value.is_number()) {
        // MLflow's metrics are numbers; as Accelerate, text is left out, said once per name.
        if (text_named_.insert(key).second) {
          std::fprintf(stderr,
                       "accel: mlflow: '%s' is text, and MLflow's metrics are numbers; it is "
                       "left out (log it with another tracker, or set it as a tag)\n",
                       key.c_str());
        }
        continue;
      }
      if (refused(key, "metric")) continue;
      metrics.push_back({{"key", key},
                         {"value", value.number()},
                         {"timestamp", timestamp},
                         {"step", step.value_or(0)}});
      if (metrics.size() == kMetricsPerBatch) {
        send_batch("metrics", std::exchange(metrics, json::array()));
      }
    }
    if (!metrics.empty()) send_batch("metrics", std::move(metrics));
  }

  void finish() override {
    if (client_ && !run_id_.empty() && !ended_) end_run("FINISHED");
  }

 private:
  /// POST to the API; the answer's JSON, or a c10::Error naming the server and its status.
  json call(const std::string& method, const json& body) {
    const HttpResponse response = client_->post_json(kApi + method, body.dump());
    TORCH_CHECK(response.ok(), "accel: mlflow: ", uri_, " ", method, ": ", response.describe());
    return json::parse(response.body, nullptr, false);
  }

  std::string find_or_create_experiment(const std::string& name) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      const HttpResponse found = client_->get(
          std::string(kApi) + "experiments/get-by-name?experiment_name=" + client_->escape(name));
      if (found.ok()) {
        const json answer = json::parse(found.body, nullptr, false);
        TORCH_CHECK(answer.contains("experiment"), "accel: mlflow: ", uri_,
                    " answered experiments/get-by-name without an experiment: ", found.body);
        const json& experiment = answer["experiment"];
        TORCH_CHECK(experiment.value("lifecycle_stage", "active") == "active",
                    "accel: mlflow: ", uri_, " has experiment '", name,
                    "' deleted; restore it in MLflow or choose another name "
                    "(MLFLOW_EXPERIMENT_NAME)");
        return experiment.at("experiment_id").get<std::string>();
      }
      TORCH_CHECK(found.status == 404, "accel: mlflow: ", uri_,
                  " experiments/get-by-name: ", found.describe());
      const HttpResponse created =
          client_->post_json(std::string(kApi) + "experiments/create", json{{"name", name}}.dump());
      if (created.ok()) {
        return json::parse(created.body, nullptr, false).at("experiment_id").get<std::string>();
      }
      // Another program created it between the two requests: look it up again.
      TORCH_CHECK(created.body.find("RESOURCE_ALREADY_EXISTS") != std::string::npos,
                  "accel: mlflow: ", uri_, " experiments/create: ", created.describe());
    }
    TORCH_CHECK(false, "accel: mlflow: ", uri_, " neither finds nor creates experiment '", name,
                "'");
    return {};  // not reached
  }

  std::optional<std::string> find_run_of_launch(const std::string& launch) {
    const json answer = call(
        "runs/search", {{"experiment_ids", {experiment_id_}},
                        {"filter", std::string("tags.`") + kLaunchTag + "` = '" + launch + "'"},
                        {"max_results", 1}});
    if (!answer.contains("runs") || answer["runs"].empty()) return std::nullopt;
    return answer["runs"][0].at("info").at("run_id").get<std::string>();
  }

  void continue_run(const std::string& run_id) {
    run_id_ = run_id;
    call("runs/update", {{"run_id", run_id_}, {"status", "RUNNING"}});
  }

  void create_run(const std::optional<std::string>& run_name,
                  const std::optional<std::string>& description,
                  const std::optional<std::string>& launch) {
    json tags = json::array();
    auto tag = [&](const std::string& key, const std::string& value) {
      tags.push_back({{"key", key}, {"value", value}});
    };
    tag("mlflow.source.type", "LOCAL");
    if (auto user = distributed::env_string(env_, "USER")) tag("mlflow.user", *user);
    if (launch) tag(kLaunchTag, *launch);
    if (description) tag("mlflow.note.content", *description);
    // MLFLOW_TAGS: a JSON object of more tags, as Accelerate reads it.
    if (auto extra = distributed::env_string(env_, "MLFLOW_TAGS")) {
      const json parsed = json::parse(*extra, nullptr, false);
      TORCH_CHECK(parsed.is_object(), "accel: invalid MLFLOW_TAGS: '", *extra,
                  "' (expected a JSON object of tag names to values)");
      for (const auto& [key, value] : parsed.items()) {
        tag(key, value.is_string() ? value.get<std::string>() : value.dump());
      }
    }
    json request = {{"experiment_id", experiment_id_},
                    {"start_time", milliseconds_now()},
                    {"tags", std::move(tags)}};
    if (run_name) request["run_name"] = *run_name;
    const json answer = call("runs/create", request);
    TORCH_CHECK(answer.contains("run"), "accel: mlflow: ", uri_,
                " answered runs/create without a run");
    run_id_ = answer["run"].at("info").at("run_id").get<std::string>();
  }

  void end_run(const std::string& status) {
    ended_ = true;
    const HttpResponse response = client_->post_json(
        std::string(kApi) + "runs/update",
        json{{"run_id", run_id_}, {"status", status}, {"end_time", milliseconds_now()}}.dump());
    if (!response.ok()) report("end run " + run_id_ + " as " + status, response);
  }

  /// One log-batch request; a failure is reported, and training goes on without those values.
  void send_batch(const char* field, json entries) {
    const size_t count = entries.size();
    const HttpResponse response =
        client_->post_json(std::string(kApi) + "runs/log-batch",
                           json{{"run_id", run_id_}, {field, std::move(entries)}}.dump());
    if (!response.ok()) report("log " + std::to_string(count) + " " + field, response);
  }

  /// A failed request's warning: the first three, then one in a hundred, so that a server that
  /// stays down does not fill the log.
  void report(const std::string& what, const HttpResponse& response) {
    ++failures_;
    if (failures_ > 3 && failures_ % 100 != 0) return;
    std::fprintf(stderr, "accel: mlflow: could not %s at %s (%s); training goes on%s\n",
                 what.c_str(), uri_.c_str(), response.describe().c_str(),
                 failures_ == 3 ? " (further failures: one warning in 100)" : "");
  }

  bool refused(const std::string& key, const char* kind) {
    const auto why = why_key_is_refused(key);
    if (!why) return false;
    if (refused_named_.insert(key).second) {
      std::fprintf(stderr, "accel: mlflow: %s '%s' is left out: %s\n", kind, key.c_str(),
                   why->c_str());
    }
    return true;
  }

  distributed::EnvLookup env_;
  std::string uri_;
  std::unique_ptr<HttpClient> client_;
  std::string experiment_id_;
  std::string run_id_;
  bool ended_ = false;
  int64_t failures_ = 0;
  std::set<std::string> text_named_;
  std::set<std::string> refused_named_;
};

}  // namespace

std::unique_ptr<GeneralTracker> make_mlflow_tracker(distributed::EnvLookup env) {
  return std::make_unique<MlflowTracker>(env ? std::move(env) : distributed::process_environment());
}

}  // namespace tracking
}  // namespace accel
