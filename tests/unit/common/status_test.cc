#include "common/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <set>
#include <string>

namespace tq {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = DataLossError("page 7 checksum mismatch");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "page 7 checksum mismatch");
  EXPECT_EQ(s.ToString(), "data_loss: page 7 checksum mismatch");
}

TEST(StatusTest, ContextIsPrependedAndKeepsCode) {
  Status s = NotFoundError("no such tensor").WithContext("blk.3.attn_q.weight").WithContext("model.gguf");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "model.gguf: blk.3.attn_q.weight: no such tensor");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
  EXPECT_EQ(Status::Ok().WithContext("ignored").message(), "");
}

TEST(StatusTest, EveryCodeHasADistinctName) {
  std::set<std::string_view> names;
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    names.insert(StatusCodeName(static_cast<StatusCode>(c)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(StatusCode::kInternal) + 1);
  EXPECT_EQ(names.count("unknown"), 0u);
}

TEST(StatusTest, ErrnoMapsToExpectedCodes) {
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "write page").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(ENOENT, "open").code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(EACCES, "open").code(), StatusCode::kPermissionDenied);
  Status eio = ErrnoToStatus(EIO, "read page 3");
  EXPECT_EQ(eio.code(), StatusCode::kIoError);
  EXPECT_NE(eio.message().find("read page 3: "), std::string::npos);
}

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  TQ_ASSIGN_OR_RETURN(int half, Half(x));
  TQ_ASSIGN_OR_RETURN(*out, Half(half));
  return Status::Ok();
}

Status FailIf(bool fail) { return fail ? UnavailableError("draining") : Status::Ok(); }

Status Chain(bool fail) {
  TQ_RETURN_IF_ERROR_CTX(FailIf(fail), "admit request 12");
  TQ_RETURN_IF_ERROR(Half(4));
  return Status::Ok();
}

TEST(StatusOrTest, ValueAndError) {
  StatusOr<int> good = Half(8);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 4);
  StatusOr<int> bad = Half(3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.value_or(-1), -1);
}

TEST(StatusOrTest, MoveOnlyValue) {
  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(5);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> taken = std::move(p).value();
  EXPECT_EQ(*taken, 5);
}

TEST(StatusOrTest, MacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(Quarter(12, &out).ok());
  EXPECT_EQ(out, 3);
  Status s = Quarter(6, &out);  // 6 -> 3 -> odd
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "3 is odd");
  EXPECT_TRUE(Chain(false).ok());
  EXPECT_EQ(Chain(true).message(), "admit request 12: draining");
  EXPECT_EQ(Chain(true).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tq
