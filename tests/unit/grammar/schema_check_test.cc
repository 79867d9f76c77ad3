// The JSON-schema subset check: every supported keyword passes, each unsupported one is refused by name and
// JSON pointer, and the depth limit holds.
#include "engine/grammar/schema_check.h"

#include <gtest/gtest.h>

#include <string>

namespace tq::engine {
namespace {

using Json = nlohmann::ordered_json;

Status Check(const std::string& text, int depth = 32) { return CheckJsonSchema(Json::parse(text), depth); }

TEST(SchemaCheckTest, SupportedSchemasPass) {
  const char* ok[] = {
      R"({})",
      R"(true)",
      R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}, "required": ["a"],
          "additionalProperties": false, "title": "t", "description": "d"})",
      R"({"type": "array", "items": {"enum": [1, "x", null]}, "minItems": 1, "maxItems": 4})",
      R"({"type": "array", "prefixItems": [{"type": "integer"}], "items": false})",
      R"({"type": "integer", "minimum": 0, "exclusiveMaximum": 10, "multipleOf": 2})",
      R"({"type": "number", "minimum": -1.5, "maximum": 1e3})",
      R"({"type": "string", "pattern": "^[a-z]+$"})",
      R"({"type": "string", "format": "date-time"})",
      R"({"type": ["string", "null"], "maxLength": 4})",
      R"({"anyOf": [{"type": "integer"}, {"type": "boolean"}], "description": "either"})",
      R"({"allOf": [{"type": "integer"}]})",
      R"({"$defs": {"p": {"type": "integer"}}, "type": "object", "properties": {"x": {"$ref": "#/$defs/p"}}})",
      R"({"type": "string", "enum": ["a", "b"]})",
      R"({"const": 3})",
      R"({"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "propertyNames": {"maxLength": 3},
          "minProperties": 1, "maxProperties": 2})",
  };
  for (const char* s : ok) EXPECT_TRUE(Check(s).ok()) << s << ": " << Check(s).ToString();
}

TEST(SchemaCheckTest, UnsupportedKeywordsAreNamedWithTheirPointer) {
  struct Case {
    const char* schema;
    const char* keyword;
    const char* at;
  };
  const Case cases[] = {
      {R"({"type": "object", "not": {}})", "'not'", "the root"},
      {R"({"type": "object", "properties": {"a/b": {"type": "string", "if": {}}}})", "'if'", "/properties/a~1b"},
      {R"({"oneOf": [{"type": "string"}]})", "'oneOf'", "the root"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'", "the root"},
      {R"({"type": "array", "items": {"type": "array", "contains": {}}})", "'contains'", "/items"},
      {R"({"type": "number", "multipleOf": 0.5})", "'multipleOf'", "the root"},
      {R"({"type": "string", "format": "ipv4"})", "'format'", "the root"},
      {R"({"type": "string", "pattern": "a", "maxLength": 3})", "'maxLength'", "the root"},
      {R"({"type": "string", "minimum": 3})", "'minimum'", "the root"},
      {R"({"anyOf": [{"type": "string"}], "properties": {}})", "'properties'", "the root"},
      {R"({"enum": [1], "anyOf": [{}]})", "'anyOf'", "the root"},
      {R"({"allOf": [{}, {}]})", "'allOf'", "the root"},
      {R"({"type": "array", "items": [{"type": "string"}]})", "'items'", "the root"},
      {R"({"$defs": {"a": {"type": "object", "dependentRequired": {}}}})", "'dependentRequired'", "/$defs/a"},
      {R"({"type": "object", "unevaluatedProperties": false})", "'unevaluatedProperties'", "the root"},
  };
  for (const Case& c : cases) {
    const Status s = Check(c.schema);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.schema;
    EXPECT_NE(s.message().find(c.keyword), std::string::npos) << c.schema << ": " << s.message();
    EXPECT_NE(s.message().find(c.at), std::string::npos) << c.schema << ": " << s.message();
  }
}

TEST(SchemaCheckTest, MalformedValuesAreRefused) {
  const char* bad[] = {
      R"(5)",
      R"({"type": "strin"})",
      R"({"type": 3})",
      R"({"required": "a"})",
      R"({"properties": []})",
      R"({"minLength": -1})",
      R"({"maximum": "3"})",
      R"({"$ref": "http://example.com/s.json"})",
      R"({"enum": []})",
  };
  for (const char* s : bad) EXPECT_EQ(Check(s).code(), StatusCode::kInvalidArgument) << s;
}

TEST(SchemaCheckTest, DepthLimit) {
  std::string s = R"({"type": "integer"})";
  for (int i = 0; i < 5; ++i) s = R"({"type": "array", "items": )" + s + "}";
  EXPECT_TRUE(Check(s, 5).ok());
  const Status deep = Check(s, 4);
  EXPECT_EQ(deep.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(deep.message().find("deeper than 4"), std::string::npos) << deep.message();
}

}  // namespace
}  // namespace tq::engine
