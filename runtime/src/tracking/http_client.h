#pragma once

// JSON requests to a tracking server, through libcurl: one connection kept open between requests,
// a bounded wait, and the answer's status and body handed back rather than thrown, so that a
// tracker decides what a failed request costs (a warning, never a stopped training run).

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accel {
namespace tracking {

/// What a request came back with.
struct HttpResponse {
  /// The HTTP status; 0 when no answer came (then `error` says why: refused, timed out...).
  long status = 0;
  std::string body;
  /// libcurl's description of a request that did not complete; empty when an answer came.
  std::string error;

  bool ok() const { return error.empty() && status >= 200 && status < 300; }
  /// "HTTP 404: <body>" or "no answer: <error>", for messages.
  std::string describe() const;
};

/// How to reach the server: its address, how to authenticate and how long to wait.
struct HttpSettings {
  /// The server's root, "http://host:port" or "https://host/prefix"; paths are appended to it.
  std::string base_url;
  /// Sent as "Authorization: Bearer <token>" when set.
  std::optional<std::string> bearer_token;
  /// Sent as HTTP basic authentication when both are set (before a bearer token, as MLflow does).
  std::optional<std::string> username;
  std::optional<std::string> password;
  /// Skip the server certificate's check (https only).
  bool insecure_tls = false;
  /// A CA bundle to check the server's certificate against, instead of the system's.
  std::optional<std::string> ca_bundle;
  /// The longest one request may take, connecting included.
  long timeout_seconds = 10;
};

/// One server's client. Not thread-safe: a tracker calls it from the training thread.
class HttpClient {
 public:
  explicit HttpClient(HttpSettings settings);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// GET base_url + path (path holds its own query, already escaped).
  HttpResponse get(const std::string& path);
  /// POST base_url + path with a JSON body.
  HttpResponse post_json(const std::string& path, const std::string& json);
  /// `text` escaped for a URL's query string.
  std::string escape(const std::string& text);

  const HttpSettings& settings() const { return settings_; }
  /// The headers sent with every request besides the body's type: "Authorization: ..." when the
  /// settings say so. Exposed for tests.
  static std::vector<std::string> auth_headers(const HttpSettings& settings);

 private:
  HttpResponse perform(const std::string& path, const std::string* json);

  HttpSettings settings_;
  void* curl_ = nullptr;  // CURL*, kept so the connection is reused
};

}  // namespace tracking
}  // namespace accel
