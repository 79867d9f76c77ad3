// One row of the option table: a named, typed, range-checked field bound to a member of Config.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::config {

// Where an option's value came from; later sources override earlier ones.
enum class Source { kDefault, kFile, kEnv, kFlag };
std::string_view SourceName(Source source);

// A typed value with its default and allowed range. Set() parses text and checks the range.
class Field {
 public:
  virtual ~Field() = default;
  virtual Status Set(std::string_view text) = 0;  // invalid_argument naming what is allowed
  virtual std::string Get() const = 0;            // canonical text of the current value
  virtual std::string_view TypeName() const = 0;  // "int", "float", "string", "bool", "enum", "bytes"
  virtual std::string Allowed() const = 0;        // "an integer in [1, 65535]", "one of: text, json", ...
  virtual void Reset() = 0;                       // back to the default
  virtual bool Quoted() const { return false; }   // printed as a YAML string
};

std::unique_ptr<Field> IntField(int* target, int default_value, int min, int max);
std::unique_ptr<Field> Int64Field(int64_t* target, int64_t default_value, int64_t min, int64_t max);
std::unique_ptr<Field> DoubleField(double* target, double default_value, double min, double max);
std::unique_ptr<Field> BoolField(bool* target, bool default_value);
std::unique_ptr<Field> StringField(std::string* target, std::string default_value);
std::unique_ptr<Field> EnumField(std::string* target, std::string default_value, std::vector<std::string> choices);
// Bytes: an integer with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. "256MiB".
std::unique_ptr<Field> BytesField(int64_t* target, int64_t default_value, int64_t min, int64_t max);

struct Option {
  std::string name;  // dotted, as in the YAML file: "server.http_port"
  std::string flag;  // long flag without dashes: "http-port"
  std::string env;   // environment variable: "TQ_SERVER_HTTP_PORT"
  std::string help;
  std::unique_ptr<Field> field;
  Source source = Source::kDefault;
  bool secret = false;  // printed redacted (--print-config): API keys
};

// "server.http_port" -> "TQ_SERVER_HTTP_PORT".
std::string EnvName(std::string_view option_name);

}  // namespace tq::config
