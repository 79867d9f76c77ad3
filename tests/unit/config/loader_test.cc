#include "config/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <fstream>
#include <string>

#include "common/kv_format_table.h"

namespace tq::config {
namespace {

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tq_config_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  std::filesystem::path dir_;
};

TEST_F(LoaderTest, DefaultsWhenNoSource) {
  Loader loader;
  { Status s = loader.Load({.env = {{"HOME", "/home/u"}}}); ASSERT_TRUE(s.ok()) << s.ToString(); }
  EXPECT_EQ(loader.config().server.http_port, 8080);
  EXPECT_EQ(loader.config().server.grpc_port, 50051);
  EXPECT_EQ(loader.config().log.format, "text");
  EXPECT_EQ(loader.config().model.dir, "/home/u/.cache/tqserve/models");
  for (const Option& o : loader.options()) EXPECT_EQ(o.source, Source::kDefault) << o.name;
}

TEST_F(LoaderTest, EveryRowIsComplete) {
  Loader loader;
  std::set<std::string> names, flags, envs;
  for (const Option& o : loader.options()) {
    EXPECT_FALSE(o.help.empty()) << o.name;
    EXPECT_FALSE(o.flag.empty()) << o.name;
    EXPECT_EQ(o.env, EnvName(o.name));
    EXPECT_EQ(std::count(o.name.begin(), o.name.end(), '.'), 1) << o.name << " must be section.key";
    EXPECT_TRUE(names.insert(o.name).second) << "duplicate " << o.name;
    EXPECT_TRUE(flags.insert(o.flag).second) << "duplicate flag " << o.flag;
    EXPECT_TRUE(envs.insert(o.env).second) << "duplicate env " << o.env;
    // The default must be a value the field accepts.
    EXPECT_TRUE(o.field->Set(o.field->Get()).ok()) << o.name;
  }
}

TEST_F(LoaderTest, YamlFileSetsNestedOptions) {
  const std::string path = WriteFile("a.yaml",
                                     "server:\n  http_port: 9000\n  drain_timeout_s: 2.5\n"
                                     "log:\n  format: json\nengine:\n  threads: ~\n");
  Loader loader;
  { Status s = loader.Load({.file = path}); ASSERT_TRUE(s.ok()) << s.ToString(); }
  EXPECT_EQ(loader.config().server.http_port, 9000);
  EXPECT_DOUBLE_EQ(loader.config().server.drain_timeout_s, 2.5);
  EXPECT_EQ(loader.config().log.format, "json");
  EXPECT_EQ(loader.config().engine.threads, 0);  // null keeps the default
}

TEST_F(LoaderTest, EnvironmentSetsOptions) {
  Loader loader;
  ASSERT_TRUE(loader.Load({.env = {{"TQ_SERVER_GRPC_PORT", "0"}, {"TQ_MODEL_DIR", "/models"}, {"PATH", "/bin"}}})
                  .ok());
  EXPECT_EQ(loader.config().server.grpc_port, 0);
  EXPECT_EQ(loader.config().model.dir, "/models");
}

TEST_F(LoaderTest, DeviceAndGpuWarmFraction) {
  Loader loader;
  {
    Status s = loader.Load({.env = {{"TQ_KV_GPU_WARM_FRACTION", "0.25"}}, .flags = {{"device", "cuda"}}});
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(loader.config().engine.device, "cuda");
  EXPECT_DOUBLE_EQ(loader.config().kv.gpu_warm_fraction, 0.25);
  Loader defaults;
  ASSERT_TRUE(defaults.Load({}).ok());
  EXPECT_EQ(defaults.config().engine.device, "cpu");
}

TEST_F(LoaderTest, PrecedenceIsDefaultFileEnvFlag) {
  const std::string path = WriteFile("p.yaml", "server:\n  http_port: 1001\n  grpc_port: 1002\n  host: filehost\n");
  Loader loader;
  Sources sources;
  sources.file = path;
  sources.env = {{"TQ_SERVER_GRPC_PORT", "2002"}, {"TQ_SERVER_HOST", "envhost"}};
  sources.flags = {{"host", "flaghost"}};
  { Status s = loader.Load(sources); ASSERT_TRUE(s.ok()) << s.ToString(); }
  EXPECT_EQ(loader.config().server.http_port, 1001);  // file only
  EXPECT_EQ(loader.config().server.grpc_port, 2002);  // env beats file
  EXPECT_EQ(loader.config().server.host, "flaghost");  // flag beats env and file
  EXPECT_EQ(loader.config().engine.max_running, 32);  // default
  const std::string yaml = loader.ToYaml();
  EXPECT_NE(yaml.find("http_port: 1001  # file"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("grpc_port: 2002  # env"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("host: \"flaghost\"  # flag"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("max_running: 32  # default"), std::string::npos) << yaml;
}

TEST_F(LoaderTest, ConfigFileFromEnvironment) {
  const std::string path = WriteFile("e.yaml", "engine:\n  max_running: 7\n");
  Loader loader;
  { Status s = loader.Load({.env = {{"TQ_CONFIG", path}}}); ASSERT_TRUE(s.ok()) << s.ToString(); }
  EXPECT_EQ(loader.config().engine.max_running, 7);
}

TEST_F(LoaderTest, PrintedConfigLoadsBackIdentically) {
  Loader first;
  ASSERT_TRUE(first.Load({.env = {{"TQ_LOG_LEVEL", "debug"}}, .flags = {{"http-port", "1234"},
                                                                        {"drain-timeout", "0.25"}}})
                  .ok());
  const std::string path = WriteFile("round.yaml", first.ToYaml());
  Loader second;
  ASSERT_TRUE(second.Load({.file = path}).ok());
  for (size_t i = 0; i < first.options().size(); ++i) {
    EXPECT_EQ(first.options()[i].field->Get(), second.options()[i].field->Get()) << first.options()[i].name;
  }
}

TEST_F(LoaderTest, PrintedConfigRedactsKeysAndEntryPointDefaultsApply) {
  Loader loader;
  ASSERT_TRUE(loader.Load({.defaults = {{"kv.preset", ""}}, .flags = {{"api-keys", "s3cret,other"}}}).ok());
  const std::string yaml = loader.ToYaml();
  EXPECT_EQ(yaml.find("s3cret"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("api_keys: \"<redacted>\"  # flag, redacted"), std::string::npos) << yaml;
  EXPECT_EQ(loader.config().kv.preset, "");  // the entry point's default
  EXPECT_EQ(loader.config().server.api_keys, "s3cret,other");
  // A flag still beats an entry point's default; an unknown name in the defaults is an error.
  ASSERT_TRUE(loader.Load({.defaults = {{"kv.preset", ""}}, .flags = {{"kv-preset", "chat"}}}).ok());
  EXPECT_EQ(loader.config().kv.preset, "chat");
  EXPECT_FALSE(loader.Load({.defaults = {{"kv.nope", "1"}}}).ok());
}

struct BadCase {
  std::string what;
  Sources sources;
  std::string must_mention;
};

TEST_F(LoaderTest, BadValuesNameTheOptionAndWhatIsAllowed) {
  const std::vector<BadCase> cases = {
      {"out of range env", {.env = {{"TQ_SERVER_HTTP_PORT", "70000"}}}, "server.http_port"},
      {"wrong type env", {.env = {{"TQ_ENGINE_THREADS", "many"}}}, "an integer in [0, 1024]"},
      {"unknown env", {.env = {{"TQ_HTTP_PORT", "80"}}}, "TQ_HTTP_PORT"},
      {"bad enum flag", {.flags = {{"log-format", "xml"}}}, "one of: text, json"},
      {"negative float", {.flags = {{"drain-timeout", "-1"}}}, "server.drain_timeout_s"},
      {"trailing garbage", {.flags = {{"http-port", "80x"}}}, "'80x'"},
      {"unknown flag", {.flags = {{"no-such-flag", "1"}}}, "--no-such-flag"},
      {"nan float", {.flags = {{"drain-timeout", "nan"}}}, "a number in [0, 3600]"},
      {"unknown device", {.flags = {{"device", "tpu"}}}, "one of: cpu, cuda"},
      {"warm fraction above 1", {.env = {{"TQ_KV_GPU_WARM_FRACTION", "1.5"}}}, "kv.gpu_warm_fraction"},
  };
  for (const BadCase& c : cases) {
    Loader loader;
    Status s = loader.Load(c.sources);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(s.message().find(c.must_mention), std::string::npos) << c.what << ": " << s.message();
  }
}

// The KV format options take exactly auto, f32 and the names of the format table (common/kv_format_table.h).
TEST_F(LoaderTest, KvFormatNamesComeFromTheFormatTable) {
  for (const FormatInfo& f : kFormatTable) {
    Loader loader;
    Status s = loader.Load({.flags = {{"kv-k", std::string(f.name)}, {"kv-v", std::string(f.name)}}});
    ASSERT_TRUE(s.ok()) << f.name << ": " << s.ToString();
    EXPECT_EQ(loader.config().kv.k_format, f.name);
  }
  Loader plain;
  ASSERT_TRUE(plain.Load({.flags = {{"kv-k", "f32"}}}).ok());
  Loader bad;
  const Status s = bad.Load({.flags = {{"kv-v", "tq5"}}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(std::string(kFormatTable.back().name)), std::string::npos) << s.ToString();
}

TEST_F(LoaderTest, BadFilesAreRefused) {
  Loader loader;
  Status unknown = loader.Load({.file = WriteFile("u.yaml", "server:\n  htp_port: 80\n")});
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("server.htp_port"), std::string::npos) << unknown.message();

  Status type = loader.Load({.file = WriteFile("t.yaml", "server:\n  http_port: [1, 2]\n")});
  EXPECT_NE(type.message().find("server.http_port"), std::string::npos) << type.message();

  Status syntax = loader.Load({.file = WriteFile("s.yaml", "server: {http_port: 1\n")});
  EXPECT_EQ(syntax.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(syntax.message().find("not valid YAML"), std::string::npos) << syntax.message();

  Status top = loader.Load({.file = WriteFile("l.yaml", "- a\n- b\n")});
  EXPECT_EQ(top.code(), StatusCode::kInvalidArgument);

  Status missing = loader.Load({.file = (dir_ / "nope.yaml").string()});
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);

  EXPECT_TRUE(loader.Load({.file = WriteFile("empty.yaml", "")}).ok());
}

TEST(FieldTest, BytesAcceptUnits) {
  int64_t v = 0;
  auto f = BytesField(&v, 1024, 0, int64_t{1} << 50);
  EXPECT_EQ(v, 1024);
  ASSERT_TRUE(f->Set("256MiB").ok());
  EXPECT_EQ(v, 256LL << 20);
  EXPECT_EQ(f->Get(), "256MiB");
  ASSERT_TRUE(f->Set("3 GB").ok());
  EXPECT_EQ(v, 3000000000LL);
  ASSERT_TRUE(f->Set("17").ok());
  EXPECT_EQ(v, 17);
  EXPECT_FALSE(f->Set("1.5GiB").ok());
  EXPECT_FALSE(f->Set("-1").ok());
  EXPECT_FALSE(f->Set("99999999999TiB").ok());  // overflow
}

TEST(FieldTest, BoolSpellings) {
  bool b = false;
  auto f = BoolField(&b, false);
  for (const char* t : {"true", "YES", "on", "1"}) {
    ASSERT_TRUE(f->Set(t).ok()) << t;
    EXPECT_TRUE(b) << t;
  }
  for (const char* t : {"false", "No", "off", "0"}) {
    ASSERT_TRUE(f->Set(t).ok()) << t;
    EXPECT_FALSE(b) << t;
  }
  EXPECT_FALSE(f->Set("maybe").ok());
}

TEST(FieldTest, EnvNames) {
  EXPECT_EQ(EnvName("server.http_port"), "TQ_SERVER_HTTP_PORT");
  EXPECT_TRUE(IsReservedEnv("TQ_CONFIG"));
  EXPECT_TRUE(IsReservedEnv("TQ_TEST_SOURCE_DIR"));
  EXPECT_FALSE(IsReservedEnv("TQ_MODEL_DIR"));
}

}  // namespace
}  // namespace tq::config
