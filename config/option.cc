#include "config/option.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

namespace tq::config {
namespace {

std::string Trimmed(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  return std::string(text.substr(b, e - b));
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Parses a whole string as an integer; false on any trailing garbage or overflow.
template <typename T>
bool ParseInteger(const std::string& text, T* out) {
  if (text.empty()) return false;
  const char* first = text.data();
  if (*first == '+') ++first;
  const auto [ptr, ec] = std::from_chars(first, text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

template <typename T>
class IntegerField final : public Field {
 public:
  IntegerField(T* target, T def, T min, T max) : target_(target), default_(def), min_(min), max_(max) { Reset(); }
  Status Set(std::string_view text) override {
    T value{};
    if (!ParseInteger(Trimmed(text), &value) || value < min_ || value > max_) {
      return InvalidArgumentError("'" + std::string(text) + "' is not " + Allowed());
    }
    *target_ = value;
    return Status::Ok();
  }
  std::string Get() const override { return std::to_string(*target_); }
  std::string_view TypeName() const override { return "int"; }
  std::string Allowed() const override {
    return "an integer in [" + std::to_string(min_) + ", " + std::to_string(max_) + "]";
  }
  void Reset() override { *target_ = default_; }

 private:
  T* target_;
  T default_, min_, max_;
};

// Shortest text that round-trips: 30 -> "30", 0.1 -> "0.1".
std::string FormatDouble(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

class DoubleFieldImpl final : public Field {
 public:
  DoubleFieldImpl(double* target, double def, double min, double max)
      : target_(target), default_(def), min_(min), max_(max) { Reset(); }
  Status Set(std::string_view text) override {
    const std::string s = Trimmed(text);
    char* end = nullptr;
    const double value = s.empty() ? NAN : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(value) || value < min_ || value > max_) {
      return InvalidArgumentError("'" + std::string(text) + "' is not " + Allowed());
    }
    *target_ = value;
    return Status::Ok();
  }
  std::string Get() const override { return FormatDouble(*target_); }
  std::string_view TypeName() const override { return "float"; }
  std::string Allowed() const override {
    return "a number in [" + FormatDouble(min_) + ", " + FormatDouble(max_) + "]";
  }
  void Reset() override { *target_ = default_; }

 private:
  double* target_;
  double default_, min_, max_;
};

class BoolFieldImpl final : public Field {
 public:
  BoolFieldImpl(bool* target, bool def) : target_(target), default_(def) { Reset(); }
  Status Set(std::string_view text) override {
    const std::string s = Lower(Trimmed(text));
    if (s == "true" || s == "yes" || s == "on" || s == "1") {
      *target_ = true;
    } else if (s == "false" || s == "no" || s == "off" || s == "0") {
      *target_ = false;
    } else {
      return InvalidArgumentError("'" + std::string(text) + "' is not " + Allowed());
    }
    return Status::Ok();
  }
  std::string Get() const override { return *target_ ? "true" : "false"; }
  std::string_view TypeName() const override { return "bool"; }
  std::string Allowed() const override { return "a boolean (true/false, yes/no, on/off, 1/0)"; }
  void Reset() override { *target_ = default_; }

 private:
  bool* target_;
  bool default_;
};

class StringFieldImpl final : public Field {
 public:
  StringFieldImpl(std::string* target, std::string def) : target_(target), default_(std::move(def)) { Reset(); }
  Status Set(std::string_view text) override {
    *target_ = std::string(text);
    return Status::Ok();
  }
  std::string Get() const override { return *target_; }
  std::string_view TypeName() const override { return "string"; }
  std::string Allowed() const override { return "a string"; }
  void Reset() override { *target_ = default_; }
  bool Quoted() const override { return true; }

 private:
  std::string* target_;
  std::string default_;
};

class EnumFieldImpl final : public Field {
 public:
  EnumFieldImpl(std::string* target, std::string def, std::vector<std::string> choices)
      : target_(target), default_(std::move(def)), choices_(std::move(choices)) { Reset(); }
  Status Set(std::string_view text) override {
    const std::string s = Trimmed(text);
    for (const std::string& choice : choices_) {
      if (s == choice) {
        *target_ = s;
        return Status::Ok();
      }
    }
    return InvalidArgumentError("'" + std::string(text) + "' is not " + Allowed());
  }
  std::string Get() const override { return *target_; }
  std::string_view TypeName() const override { return "enum"; }
  std::string Allowed() const override {
    std::string out = "one of: ";
    for (size_t i = 0; i < choices_.size(); ++i) out += (i ? ", " : "") + choices_[i];
    return out;
  }
  void Reset() override { *target_ = default_; }
  bool Quoted() const override { return true; }

 private:
  std::string* target_;
  std::string default_;
  std::vector<std::string> choices_;
};

struct ByteUnit {
  std::string_view suffix;  // lower case
  int64_t factor;
};
constexpr ByteUnit kByteUnits[] = {
    {"tib", int64_t{1} << 40}, {"gib", int64_t{1} << 30}, {"mib", int64_t{1} << 20}, {"kib", int64_t{1} << 10},
    {"tb", 1000LL * 1000 * 1000 * 1000}, {"gb", 1000LL * 1000 * 1000}, {"mb", 1000LL * 1000}, {"kb", 1000},
    {"b", 1},
};

std::string FormatBytes(int64_t v) {
  for (const ByteUnit& unit : {kByteUnits[0], kByteUnits[1], kByteUnits[2], kByteUnits[3]}) {
    if (v != 0 && v % unit.factor == 0) {
      std::string suffix(unit.suffix);
      suffix[0] = static_cast<char>(std::toupper(suffix[0]));
      suffix[2] = 'B';
      return std::to_string(v / unit.factor) + suffix;
    }
  }
  return std::to_string(v);
}

class BytesFieldImpl final : public Field {
 public:
  BytesFieldImpl(int64_t* target, int64_t def, int64_t min, int64_t max)
      : target_(target), default_(def), min_(min), max_(max) { Reset(); }
  Status Set(std::string_view text) override {
    std::string s = Lower(Trimmed(text));
    int64_t factor = 1;
    for (const ByteUnit& unit : kByteUnits) {
      if (s.size() > unit.suffix.size() && s.ends_with(unit.suffix)) {
        factor = unit.factor;
        s = Trimmed(s.substr(0, s.size() - unit.suffix.size()));
        break;
      }
    }
    int64_t count = 0;
    if (!ParseInteger(s, &count) || count < 0 || (count > 0 && factor > max_ / count) ||
        count * factor < min_ || count * factor > max_) {
      return InvalidArgumentError("'" + std::string(text) + "' is not " + Allowed());
    }
    *target_ = count * factor;
    return Status::Ok();
  }
  std::string Get() const override { return FormatBytes(*target_); }
  std::string_view TypeName() const override { return "bytes"; }
  std::string Allowed() const override {
    return "a size in bytes in [" + FormatBytes(min_) + ", " + FormatBytes(max_) +
           "], with an optional unit (KiB, MiB, GiB, TiB, KB, MB, GB, TB)";
  }
  void Reset() override { *target_ = default_; }

 private:
  int64_t* target_;
  int64_t default_, min_, max_;
};

}  // namespace

std::string_view SourceName(Source source) {
  switch (source) {
    case Source::kDefault: return "default";
    case Source::kFile: return "file";
    case Source::kEnv: return "env";
    case Source::kFlag: return "flag";
  }
  return "unknown";
}

std::unique_ptr<Field> IntField(int* target, int def, int min, int max) {
  return std::make_unique<IntegerField<int>>(target, def, min, max);
}
std::unique_ptr<Field> Int64Field(int64_t* target, int64_t def, int64_t min, int64_t max) {
  return std::make_unique<IntegerField<int64_t>>(target, def, min, max);
}
std::unique_ptr<Field> DoubleField(double* target, double def, double min, double max) {
  return std::make_unique<DoubleFieldImpl>(target, def, min, max);
}
std::unique_ptr<Field> BoolField(bool* target, bool def) { return std::make_unique<BoolFieldImpl>(target, def); }
std::unique_ptr<Field> StringField(std::string* target, std::string def) {
  return std::make_unique<StringFieldImpl>(target, std::move(def));
}
std::unique_ptr<Field> EnumField(std::string* target, std::string def, std::vector<std::string> choices) {
  return std::make_unique<EnumFieldImpl>(target, std::move(def), std::move(choices));
}
std::unique_ptr<Field> BytesField(int64_t* target, int64_t def, int64_t min, int64_t max) {
  return std::make_unique<BytesFieldImpl>(target, def, min, max);
}

std::string EnvName(std::string_view option_name) {
  std::string env = "TQ_";
  for (char c : option_name) {
    env += (c == '.' || c == '-') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return env;
}

}  // namespace tq::config
