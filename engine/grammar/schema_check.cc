#include "engine/grammar/schema_check.h"

#include <set>
#include <string>

namespace tq::engine {
namespace {

using json = nlohmann::ordered_json;

// Keywords that describe and never constrain: allowed anywhere.
const std::set<std::string, std::less<>> kAnnotations = {"title",   "description", "$schema",    "$comment", "$id",
                                                         "examples", "default",     "deprecated", "readOnly", "writeOnly"};
// Keywords that constrain a value of each type, as the mask engine enforces them.
const std::set<std::string, std::less<>> kObjectKeywords = {"properties",        "required",      "additionalProperties",
                                                            "patternProperties", "propertyNames", "minProperties",
                                                            "maxProperties"};
const std::set<std::string, std::less<>> kArrayKeywords = {"items", "prefixItems", "minItems", "maxItems"};
const std::set<std::string, std::less<>> kStringKeywords = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string, std::less<>> kIntegerKeywords = {"minimum", "maximum", "exclusiveMinimum",
                                                             "exclusiveMaximum", "multipleOf"};
const std::set<std::string, std::less<>> kNumberKeywords = {"minimum", "maximum", "exclusiveMinimum",
                                                            "exclusiveMaximum"};
const std::set<std::string, std::less<>> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};
const std::set<std::string, std::less<>> kFormats = {"email", "date", "time", "date-time", "duration", "hostname",
                                                     "uuid"};
// One of these decides the value alone; beside it only annotations (and "type" beside enum/const) may appear.
const char* const kCombinators[] = {"$ref", "const", "enum", "anyOf", "allOf", "oneOf"};

std::string Escape(const std::string& key) {  // JSON pointer (RFC 6901)
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

class Checker {
 public:
  explicit Checker(int max_depth) : max_depth_(max_depth) {}

  Status Check(const json& s, const std::string& at, int depth) {
    if (depth > max_depth_) {
      return InvalidArgumentError("JSON schema nests deeper than " + std::to_string(max_depth_) + " levels at " +
                                  Where(at));
    }
    if (s.is_boolean()) return Status::Ok();
    if (!s.is_object()) return InvalidArgumentError("JSON schema at " + Where(at) + " must be an object or a boolean");
    for (const char* defs : {"$defs", "definitions"}) {
      if (auto it = s.find(defs); it != s.end()) {
        if (!it->is_object()) return Bad(at, defs, "must be an object of schemas");
        for (const auto& [name, sub] : it->items()) {
          TQ_RETURN_IF_ERROR(Check(sub, at + "/" + defs + "/" + Escape(name), depth + 1));
        }
      }
    }
    const char* combinator = nullptr;
    for (const char* c : kCombinators) {
      if (!s.contains(c)) continue;
      if (combinator) return Unsupported(at, c, std::string("beside '") + combinator + "'");
      combinator = c;
    }
    if (combinator) return CheckCombinator(s, combinator, at, depth);
    return CheckTyped(s, at, depth);
  }

 private:
  static std::string Where(const std::string& at) { return at.empty() ? "the root" : at; }

  static Status Bad(const std::string& at, const std::string& key, const std::string& what) {
    return InvalidArgumentError("JSON schema keyword '" + key + "' at " + Where(at) + " " + what);
  }
  static Status Unsupported(const std::string& at, const std::string& key, const std::string& why = "") {
    return InvalidArgumentError("unsupported JSON schema keyword '" + key + "' at " + Where(at) +
                                (why.empty() ? "" : " (" + why + ")"));
  }

  Status CheckCombinator(const json& s, const std::string& c, const std::string& at, int depth) {
    for (const auto& [key, value] : s.items()) {
      if (key == c || kAnnotations.count(key) || key == "$defs" || key == "definitions") continue;
      if (key == "type" && (c == "enum" || c == "const")) continue;
      return Unsupported(at, key, "beside '" + c + "'");
    }
    const json& v = s[c];
    if (c == "$ref") {
      if (!v.is_string() || v.get<std::string>().rfind('#', 0) != 0) {
        return Bad(at, c, "must be a reference inside the schema (\"#/...\")");
      }
      return Status::Ok();
    }
    if (c == "const") return Status::Ok();
    if (c == "enum") {
      if (!v.is_array() || v.empty()) return Bad(at, c, "must be a non-empty array");
      return Status::Ok();
    }
    if (c == "oneOf") return Unsupported(at, c, "use anyOf: exactly-one-of cannot be enforced token by token");
    if (!v.is_array() || v.empty()) return Bad(at, c, "must be a non-empty array of schemas");
    if (c == "allOf" && v.size() != 1) return Unsupported(at, c, "with more than one schema");
    for (size_t i = 0; i < v.size(); ++i) {
      TQ_RETURN_IF_ERROR(Check(v[i], at + "/" + c + "/" + std::to_string(i), depth + 1));
    }
    return Status::Ok();
  }

  Status CheckTyped(const json& s, const std::string& at, int depth) {
    std::set<std::string, std::less<>> types;
    if (auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.insert(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const json& t : *it) {
          if (!t.is_string()) return Bad(at, "type", "must be a type name or a list of them");
          types.insert(t.get<std::string>());
        }
      } else {
        return Bad(at, "type", "must be a type name or a list of them");
      }
      for (const std::string& t : types) {
        if (!kTypes.count(t)) return Bad(at, "type", "names an unknown type '" + t + "'");
      }
    } else {
      types = kTypes;  // untyped: any keyword of any type may narrow it
    }
    for (const auto& [key, value] : s.items()) {
      if (key == "type" || kAnnotations.count(key) || key == "$defs" || key == "definitions") continue;
      const bool allowed = (types.count("object") && kObjectKeywords.count(key)) ||
                           (types.count("array") && kArrayKeywords.count(key)) ||
                           (types.count("string") && kStringKeywords.count(key)) ||
                           (types.count("integer") && kIntegerKeywords.count(key)) ||
                           (types.count("number") && kNumberKeywords.count(key));
      if (!allowed) {
        if (key == "multipleOf") return Unsupported(at, key, "only for integers");
        bool known = kObjectKeywords.count(key) || kArrayKeywords.count(key) || kStringKeywords.count(key) ||
                     kIntegerKeywords.count(key);
        return known ? Unsupported(at, key, "for type " + s["type"].dump()) : Unsupported(at, key);
      }
    }
    if (s.contains("format")) {
      const json& f = s["format"];
      if (!f.is_string() || !kFormats.count(f.get<std::string>())) {
        return Unsupported(at, "format", "supported formats: email, date, time, date-time, duration, hostname, uuid");
      }
    }
    if ((s.contains("pattern") || s.contains("format")) && (s.contains("minLength") || s.contains("maxLength"))) {
      return Unsupported(at, s.contains("minLength") ? "minLength" : "maxLength", "together with pattern or format");
    }
    if (s.contains("pattern") && !s["pattern"].is_string()) return Bad(at, "pattern", "must be a string");
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) return Bad(at, "required", "must be an array of property names");
      for (const json& name : r) {
        if (!name.is_string()) return Bad(at, "required", "must be an array of property names");
      }
    }
    for (const char* map : {"properties", "patternProperties"}) {
      if (auto it = s.find(map); it != s.end()) {
        if (!it->is_object()) return Bad(at, map, "must be an object of schemas");
        for (const auto& [name, sub] : it->items()) {
          TQ_RETURN_IF_ERROR(Check(sub, at + "/" + map + "/" + Escape(name), depth + 1));
        }
      }
    }
    for (const char* one : {"additionalProperties", "propertyNames", "items"}) {
      if (auto it = s.find(one); it != s.end()) {
        if (std::string(one) == "items" && it->is_array()) {
          return Unsupported(at, "items", "as a list: use prefixItems");
        }
        TQ_RETURN_IF_ERROR(Check(*it, at + "/" + one, depth + 1));
      }
    }
    if (auto it = s.find("prefixItems"); it != s.end()) {
      if (!it->is_array()) return Bad(at, "prefixItems", "must be an array of schemas");
      for (size_t i = 0; i < it->size(); ++i) {
        TQ_RETURN_IF_ERROR(Check((*it)[i], at + "/prefixItems/" + std::to_string(i), depth + 1));
      }
    }
    for (const char* n : {"minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"}) {
      if (auto it = s.find(n); it != s.end() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
        return Bad(at, n, "must be a non-negative integer");
      }
    }
    for (const char* n : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}) {
      if (auto it = s.find(n); it != s.end() && !it->is_number()) return Bad(at, n, "must be a number");
    }
    return Status::Ok();
  }

  int max_depth_;
};

}  // namespace

Status CheckJsonSchema(const json& schema, int max_depth) { return Checker(max_depth).Check(schema, "", 0); }

}  // namespace tq::engine
