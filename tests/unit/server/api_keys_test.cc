// API keys (server/api_keys.h): inline and file keys, Bearer parsing, reload keeping the old set on error.
#include "server/api_keys.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace tq::server {
namespace {

class ApiKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tq-keys-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    file_ = (dir_ / "keys").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& text) { std::ofstream(file_) << text; }

  std::filesystem::path dir_;
  std::string file_;
};

TEST_F(ApiKeysTest, NoKeysAcceptsEverything) {
  auto keys = ApiKeys::Load("", "");
  ASSERT_TRUE(keys.ok());
  EXPECT_FALSE((*keys)->required());
  EXPECT_TRUE((*keys)->Accepts(""));
}

TEST_F(ApiKeysTest, InlineKeysNeedTheBearerForm) {
  auto keys = ApiKeys::Load(" k1 , k2,,", "");
  ASSERT_TRUE(keys.ok());
  const ApiKeys& k = **keys;
  EXPECT_TRUE(k.required());
  EXPECT_TRUE(k.Accepts("Bearer k1"));
  EXPECT_TRUE(k.Accepts("Bearer k2"));
  EXPECT_FALSE(k.Accepts("k1"));
  EXPECT_FALSE(k.Accepts("Bearer k"));
  EXPECT_FALSE(k.Accepts("Bearer k12"));
  EXPECT_FALSE(k.Accepts("Bearer "));
  EXPECT_FALSE(k.Accepts(""));
  EXPECT_FALSE(k.Accepts("bearer k1"));
}

TEST_F(ApiKeysTest, EachKeyIsATenantAndAdminKeysAreMarked) {
  Write("# keys\nk3\nadmin k4\n");
  auto keys = ApiKeys::Load("k1,k2", file_, "root");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  const ApiKeys& k = **keys;
  const Caller a = k.Identify("Bearer k1"), b = k.Identify("Bearer k2"), c = k.Identify("Bearer k3");
  EXPECT_TRUE(a.accepted && b.accepted && c.accepted);
  EXPECT_FALSE(a.admin || b.admin || c.admin);
  EXPECT_EQ(a.tenant.size(), 16u);
  EXPECT_NE(a.tenant, b.tenant);
  EXPECT_NE(b.tenant, c.tenant);
  EXPECT_EQ(a.tenant, k.Identify("Bearer k1").tenant);  // stable
  EXPECT_EQ(a.tenant.find("k1"), std::string::npos);   // names the key without holding it
  EXPECT_TRUE(k.Identify("Bearer root").admin);
  EXPECT_TRUE(k.Identify("Bearer k4").admin);
  EXPECT_FALSE(k.Identify("Bearer admin k4").accepted);
  EXPECT_FALSE(k.Identify("Bearer nope").accepted);
  auto none = ApiKeys::Load("", "");
  ASSERT_TRUE(none.ok());
  const Caller anyone = (*none)->Identify("");
  EXPECT_TRUE(anyone.accepted && anyone.admin);
  EXPECT_EQ(anyone.tenant, "");
}

TEST_F(ApiKeysTest, FileKeysReloadAndKeepTheOldSetOnError) {
  Write("# comment\nf1\n\n  f2  \n");
  auto loaded = ApiKeys::Load("inline", file_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ApiKeys& k = **loaded;
  EXPECT_TRUE(k.Accepts("Bearer f1"));
  EXPECT_TRUE(k.Accepts("Bearer f2"));
  EXPECT_TRUE(k.Accepts("Bearer inline"));
  EXPECT_FALSE(k.Accepts("Bearer # comment"));

  Write("f3\n");
  auto n = k.Reload();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2u);  // f3 and the inline key
  EXPECT_FALSE(k.Accepts("Bearer f1"));
  EXPECT_TRUE(k.Accepts("Bearer f3"));

  Write("# nothing\n");
  EXPECT_EQ(k.Reload().status().code(), StatusCode::kInvalidArgument);
  std::filesystem::remove(file_);
  EXPECT_EQ(k.Reload().status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(k.Accepts("Bearer f3"));  // still in force
}

TEST_F(ApiKeysTest, AMissingOrEmptyFileFailsTheLoad) {
  EXPECT_EQ(ApiKeys::Load("", file_).status().code(), StatusCode::kNotFound);
  Write("\n# none\n");
  EXPECT_EQ(ApiKeys::Load("", file_).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tq::server
