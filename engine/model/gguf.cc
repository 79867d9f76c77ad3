// GgufFile lookups and typed getters.
#include "engine/model/gguf.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace tq::engine {

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

namespace {

bool IsUnsignedType(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 || t == GgufValueType::kUint32 ||
         t == GgufValueType::kUint64;
}
bool IsSignedType(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}
bool IsFloatType(GgufValueType t) {
  return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
}

Status WrongType(std::string_view key, std::string_view expected, const GgufValue& v) {
  std::string got(GgufValueTypeName(v.type));
  if (v.IsArray()) got = "array of " + std::string(GgufValueTypeName(v.elem_type));
  return InvalidArgumentError("GGUF key '" + std::string(key) + "': expected " + std::string(expected) +
                              ", got " + got);
}

template <typename T>
T LoadRaw(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

bool GgufValue::IsInteger() const {
  return IsUnsignedType(type) || IsSignedType(type);
}

double GgufValue::NumericElement(uint64_t k) const {
  switch (elem_type) {
    case GgufValueType::kUint8: return raw[k];
    case GgufValueType::kBool: return raw[k] != 0;
    case GgufValueType::kInt8: return static_cast<int8_t>(raw[k]);
    case GgufValueType::kUint16: return LoadRaw<uint16_t>(raw + 2 * k);
    case GgufValueType::kInt16: return LoadRaw<int16_t>(raw + 2 * k);
    case GgufValueType::kUint32: return LoadRaw<uint32_t>(raw + 4 * k);
    case GgufValueType::kInt32: return LoadRaw<int32_t>(raw + 4 * k);
    case GgufValueType::kFloat32: return LoadRaw<float>(raw + 4 * k);
    case GgufValueType::kUint64: return static_cast<double>(LoadRaw<uint64_t>(raw + 8 * k));
    case GgufValueType::kInt64: return static_cast<double>(LoadRaw<int64_t>(raw + 8 * k));
    case GgufValueType::kFloat64: return LoadRaw<double>(raw + 8 * k);
    case GgufValueType::kString:
    case GgufValueType::kArray: break;
  }
  assert(false && "NumericElement on a non-numeric array");
  return 0.0;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

#define TQ_GGUF_FIND(v, key)      \
  const GgufValue* v = Find(key); \
  if (v == nullptr) return NotFoundError("GGUF key '" + std::string(key) + "' is missing")

StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  TQ_GGUF_FIND(v, key);
  if (IsUnsignedType(v->type)) return v->u;
  if (IsSignedType(v->type)) {
    if (v->i < 0)
      return InvalidArgumentError("GGUF key '" + std::string(key) + "': negative value " +
                                  std::to_string(v->i));
    return static_cast<uint64_t>(v->i);
  }
  return WrongType(key, "an unsigned integer", *v);
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  TQ_GGUF_FIND(v, key);
  if (IsSignedType(v->type)) return v->i;
  if (IsUnsignedType(v->type)) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgumentError("GGUF key '" + std::string(key) + "': value out of range");
    }
    return static_cast<int64_t>(v->u);
  }
  return WrongType(key, "an integer", *v);
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  TQ_GGUF_FIND(v, key);
  if (IsFloatType(v->type)) return v->f;
  if (IsUnsignedType(v->type)) return static_cast<double>(v->u);
  if (IsSignedType(v->type)) return static_cast<double>(v->i);
  return WrongType(key, "a number", *v);
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  TQ_GGUF_FIND(v, key);
  if (v->type != GgufValueType::kBool) return WrongType(key, "bool", *v);
  return v->b;
}

StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  TQ_GGUF_FIND(v, key);
  if (v->type != GgufValueType::kString) return WrongType(key, "string", *v);
  return v->str;
}

StatusOr<std::span<const std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  TQ_GGUF_FIND(v, key);
  if (!v->IsArray() || v->elem_type != GgufValueType::kString) return WrongType(key, "array of string", *v);
  return std::span<const std::string_view>(v->strings);
}

StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  TQ_GGUF_FIND(v, key);
  if (!v->IsArray() || v->elem_type == GgufValueType::kString || v->elem_type == GgufValueType::kArray ||
      v->elem_type == GgufValueType::kBool) {
    return WrongType(key, "array of numbers", *v);
  }
  std::vector<float> out(v->count);
  for (uint64_t k = 0; k < v->count; ++k) out[k] = static_cast<float>(v->NumericElement(k));
  return out;
}

StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  TQ_GGUF_FIND(v, key);
  if (!v->IsArray() || !(IsSignedType(v->elem_type) || IsUnsignedType(v->elem_type))) {
    return WrongType(key, "array of integers", *v);
  }
  std::vector<int64_t> out(v->count);
  for (uint64_t k = 0; k < v->count; ++k) {
    if (v->elem_type == GgufValueType::kUint64) {
      const uint64_t u = LoadRaw<uint64_t>(v->raw + 8 * k);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidArgumentError("GGUF key '" + std::string(key) + "': element " + std::to_string(k) +
                                    " out of range");
      }
      out[k] = static_cast<int64_t>(u);
    } else if (v->elem_type == GgufValueType::kInt64) {
      out[k] = LoadRaw<int64_t>(v->raw + 8 * k);
    } else {
      out[k] = static_cast<int64_t>(v->NumericElement(k));
    }
  }
  return out;
}

#undef TQ_GGUF_FIND

StatusOr<uint64_t> GgufFile::GetUintOr(std::string_view key, uint64_t fallback) const {
  return Find(key) == nullptr ? StatusOr<uint64_t>(fallback) : GetUint(key);
}
StatusOr<double> GgufFile::GetFloatOr(std::string_view key, double fallback) const {
  return Find(key) == nullptr ? StatusOr<double>(fallback) : GetFloat(key);
}
StatusOr<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  return Find(key) == nullptr ? StatusOr<bool>(fallback) : GetBool(key);
}
StatusOr<std::string_view> GgufFile::GetStringOr(std::string_view key, std::string_view fallback) const {
  return Find(key) == nullptr ? StatusOr<std::string_view>(fallback) : GetString(key);
}

namespace {

std::string Quote(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  for (size_t k = 0; k < s.size() && k < max_chars; ++k) {
    const char c = s[k];
    if (c == '\n')
      out += "\\n";
    else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20)
      out += '?';
    else
      out += c;
  }
  if (s.size() > max_chars) out += "...";
  return out + "\"";
}

std::string NumberText(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15)
    return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", v);
  return buf;
}

}  // namespace

std::string GgufValueToString(const GgufValue& v, size_t max_chars) {
  if (IsUnsignedType(v.type)) return std::to_string(v.u);
  if (IsSignedType(v.type)) return std::to_string(v.i);
  if (IsFloatType(v.type)) return NumberText(v.f);
  if (v.type == GgufValueType::kBool) return v.b ? "true" : "false";
  if (v.type == GgufValueType::kString) return Quote(v.str, max_chars);
  std::string out = "[" + std::string(GgufValueTypeName(v.elem_type)) + " x " + std::to_string(v.count) + "]";
  constexpr uint64_t kShown = 4;
  for (uint64_t k = 0; k < v.count && k < kShown; ++k) {
    out += k == 0 ? " " : ", ";
    if (v.elem_type == GgufValueType::kString)
      out += Quote(v.strings[k], 16);
    else if (v.elem_type == GgufValueType::kArray)
      out += GgufValueToString(v.arrays[k], 16);
    else
      out += NumberText(v.NumericElement(k));
  }
  if (v.count > kShown) out += ", ...";
  return out;
}

}  // namespace tq::engine
