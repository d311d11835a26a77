// The HTTP client trackers talk to servers with: libcurl's easy interface.

#include "http_client.h"

#include <c10/util/Exception.h>
#include <curl/curl.h>

#include <mutex>

namespace accel {
namespace tracking {
namespace {

size_t append_to_string(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

/// curl_global_init is not thread-safe and must run before the first handle: once per process.
void initialize_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
    TORCH_CHECK(code == CURLE_OK, "accel: libcurl did not initialise: ", curl_easy_strerror(code));
  });
}

std::string base64(const std::string& text) {
  static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < text.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(text[i]) << 16) |
                       (static_cast<unsigned char>(text[i + 1]) << 8) |
                       static_cast<unsigned char>(text[i + 2]);
    out += {digits[(v >> 18) & 63], digits[(v >> 12) & 63], digits[(v >> 6) & 63], digits[v & 63]};
  }
  if (i + 1 == text.size()) {
    const unsigned v = static_cast<unsigned char>(text[i]) << 16;
    out += {digits[(v >> 18) & 63], digits[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == text.size()) {
    const unsigned v = (static_cast<unsigned char>(text[i]) << 16) |
                       (static_cast<unsigned char>(text[i + 1]) << 8);
    out += {digits[(v >> 18) & 63], digits[(v >> 12) & 63], digits[(v >> 6) & 63], '='};
  }
  return out;
}

}  // namespace

std::string HttpResponse::describe() const {
  if (!error.empty()) return "no answer: " + error;
  std::string text = "HTTP " + std::to_string(status);
  if (!body.empty()) text += ": " + (body.size() > 300 ? body.substr(0, 300) + "..." : body);
  return text;
}

HttpClient::HttpClient(HttpSettings settings) : settings_(std::move(settings)) {
  initialize_curl_once();
  curl_ = curl_easy_init();
  TORCH_CHECK(curl_ != nullptr, "accel: libcurl could not make a handle");
}

HttpClient::~HttpClient() {
  if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

std::vector<std::string> HttpClient::auth_headers(const HttpSettings& settings) {
  // MLflow's clients: basic authentication when a user name and password are both given, else a
  // bearer token. Built here rather than by CURLOPT_USERPWD so both forms are one header.
  if (settings.username && settings.password) {
    return {"Authorization: Basic " + base64(*settings.username + ":" + *settings.password)};
  }
  if (settings.bearer_token) return {"Authorization: Bearer " + *settings.bearer_token};
  return {};
}

std::string HttpClient::escape(const std::string& text) {
  char* escaped =
      curl_easy_escape(static_cast<CURL*>(curl_), text.data(), static_cast<int>(text.size()));
  TORCH_CHECK(escaped != nullptr, "accel: libcurl could not escape '", text, "'");
  std::string out(escaped);
  curl_free(escaped);
  return out;
}

HttpResponse HttpClient::get(const std::string& path) { return perform(path, nullptr); }

HttpResponse HttpClient::post_json(const std::string& path, const std::string& json) {
  return perform(path, &json);
}

HttpResponse HttpClient::perform(const std::string& path, const std::string* json) {
  CURL* curl = static_cast<CURL*>(curl_);
  curl_easy_reset(curl);  // keeps the open connection, forgets the last request's options
  HttpResponse response;
  const std::string url = settings_.base_url + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for timeouts: training owns signals
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, settings_.timeout_seconds);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, settings_.timeout_seconds);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_to_string);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  if (settings_.insecure_tls) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (settings_.ca_bundle) curl_easy_setopt(curl, CURLOPT_CAINFO, settings_.ca_bundle->c_str());

  curl_slist* headers = nullptr;
  for (const auto& header : auth_headers(settings_)) {
    headers = curl_slist_append(headers, header.c_str());
  }
  if (json != nullptr) {
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(json->size()));
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  } else {
    response.error = error[0] != '\0' ? error : curl_easy_strerror(code);
  }
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  return response;
}

}  // namespace tracking
}  // namespace accel
