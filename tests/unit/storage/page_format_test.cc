#include "storage/page_format.h"

#include <gtest/gtest.h>

#include <cstring>

#include "storage/io_queue.h"
#include "storage_test_util.h"

namespace tq::storage {
namespace {

TEST(PageFormat, RoundTripAndEveryByteChecked) {
  std::vector<std::byte> payload = testing::PageBytes(5, 1000);
  const uint32_t io_bytes = PageIoBytes(1000);
  EXPECT_EQ(io_bytes, 4096u);
  std::vector<std::byte> buf(io_bytes, std::byte{0x55});
  EncodePage(42, 7, payload, buf);
  StatusOr<PageHeader> h = DecodePage(buf, 4096);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->page_id, 42u);
  EXPECT_EQ(h->sequence, 7u);
  EXPECT_EQ(h->length, 1000u);
  EXPECT_EQ(std::memcmp(buf.data() + kPageHeaderBytes, payload.data(), payload.size()), 0);
  // Flipping any header or payload byte is caught.
  for (size_t i = 0; i < kPageHeaderBytes + payload.size(); i += 13) {
    buf[i] ^= std::byte{0x01};
    StatusOr<PageHeader> bad = DecodePage(buf, 4096);
    EXPECT_FALSE(bad.ok()) << "byte " << i;
    if (i >= 4) {
      EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << "byte " << i;
    }
    buf[i] ^= std::byte{0x01};
  }
}

TEST(PageFormat, EmptySlotAndLimits) {
  std::vector<std::byte> zeros(4096);
  EXPECT_EQ(DecodePage(zeros, 4096).status().code(), StatusCode::kNotFound);
  std::vector<std::byte> payload = testing::PageBytes(1, 5000);
  std::vector<std::byte> buf(PageIoBytes(5000));
  EncodePage(1, 1, payload, buf);
  EXPECT_EQ(DecodePage(buf, 4000).status().code(), StatusCode::kDataLoss);  // longer than allowed
  EXPECT_EQ(DecodePage(std::span(buf).first(4096), 8192).status().code(),
            StatusCode::kDataLoss);  // truncated
}

TEST(PageFormat, FileHeader) {
  std::vector<std::byte> buf(kFileHeaderBytes);
  EXPECT_EQ(DecodeFileHeader(buf).status().code(), StatusCode::kNotFound);
  EncodeFileHeader(8192, 16, 3, buf);
  StatusOr<FileHeader> h = DecodeFileHeader(buf);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->slot_bytes, 8192u);
  EXPECT_EQ(h->file_index, 3u);
  EXPECT_EQ(h->extent_slots, 16u);
  buf[9] ^= std::byte{1};
  EXPECT_EQ(DecodeFileHeader(buf).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tq::storage
