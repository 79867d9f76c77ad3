// libFuzzer target: a restart reading back a cold directory someone else wrote. Each input becomes the pages of a
// cold file (valid cold-store page headers and checksums around fuzzed page records and bytes, so the input
// reaches the records, not only the checksum), then the real path runs: KvPageStore::Open (ColdStore scan,
// Recover: DecodeRecord and the fingerprint check), PrefixCache::Adopt (grouping by prefix hash, completeness,
// rooting at the fingerprint), a Lookup along every chain the input names and a Pin of every page found.
// Model shape: 2 layers x 2 KV heads, head_dim 8. Checks: no crash or sanitizer report; every page the prefix cache
// hands out is in the store; no more pages are recovered than the input wrote.
//
// Input: repeated [mode u8][...]: mode bit 0 = raw (u16 length, then that many record+page bytes as is),
// else structured: u8 field selectors, u8 float count, u16 page length, page bytes (fields drawn from small sets so
// that complete, rooted groups of 4 pages are reachable).
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/kv/page_record.h"
#include "engine/kv/page_store.h"
#include "engine/kv/prefix_cache.h"
#include "storage/page_format.h"

namespace {

using tq::engine::PageRecord;

constexpr int kLayers = 2, kKvHeads = 2, kHeadDim = 8;
constexpr uint64_t kFingerprint = 0x1234567890abcdefULL;
constexpr uint32_t kPageBytes = 4096;  // class page bytes of every class (at least a cold slot)
const uint64_t kHashes[4] = {0x1111, 0x2222, 0x3333, 0};

std::string g_dir;
std::vector<std::byte> g_file_header;  // the header the store writes for cold-0000.tqc
uint32_t g_slot_bytes = 0, g_extent_slots = 0;

tq::engine::KvStoreOptions Options() {
  tq::engine::KvStoreOptions o;
  o.hot_bytes = 1 << 20;
  o.warm_bytes = 1 << 20;
  o.cold_dir = g_dir;
  o.cold_bytes = 1 << 20;
  o.cold_cache_bytes = 1 << 20;
  o.io_backend = "pread";
  o.io_depth = 1;  // the staging buffers (depth x extent) dominate an exec otherwise
  o.direct_io = false;
  o.fingerprint = kFingerprint;
  o.head_dim = kHeadDim;
  return o;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "prefix_recovery_fuzz: %s\n", what);
    std::abort();
  }
}

struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t U8() { return n ? (--n, *p++) : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  std::vector<uint8_t> Bytes(size_t want) {
    const size_t k = std::min(want, n);
    std::vector<uint8_t> out(p, p + k);
    p += k;
    n -= k;
    return out;
  }
};

// One page's cold payload (record + page bytes) from the input; empty when the input is spent.
std::vector<uint8_t> NextPayload(Reader& in) {
  const uint8_t mode = in.U8();
  if (mode & 1) return in.Bytes(in.U16() % 2048);
  const uint8_t a = in.U8(), b = in.U8(), c = in.U8();
  PageRecord r;
  r.layout_fingerprint = (a & 1) ? kFingerprint : kFingerprint ^ 1;
  r.prefix_hash = kHashes[(a >> 1) & 3];
  r.parent_hash = (a >> 3) & 1 ? kFingerprint : kHashes[(a >> 4) & 3];
  r.page_index = (a >> 6) & 3;
  r.layer = b % (kLayers + 1);
  r.kv_head = (b >> 2) % (kKvHeads + 1);
  r.cls = static_cast<tq::engine::PrecisionClass>(c % 3);
  r.k = static_cast<tq::kernels::KvFormat>((c >> 2) % 4);
  r.v = static_cast<tq::kernels::KvFormat>((c >> 4) % 4);
  const uint8_t floats = in.U8() % 3;
  if (floats & 1) r.transform.v_scale.assign(kHeadDim, 1.5f);
  if (floats & 2) r.transform.k_mean.assign(kHeadDim, -0.5f);
  const uint32_t page = in.U16() % (2 * kPageBytes);
  std::vector<uint8_t> out(tq::engine::RecordBytes(tq::engine::TransformFloats(r.transform)));
  tq::engine::EncodeRecord(r, out);
  std::vector<uint8_t> bytes = in.Bytes(page);
  bytes.resize(page, 0);
  out.insert(out.end(), bytes.begin(), bytes.end());
  return out;
}

// cold-0000.tqc: the store's own file header, then each payload as a valid page in its own run of slots.
size_t WriteColdFile(const uint8_t* data, size_t size) {
  std::vector<std::byte> file = g_file_header;
  Reader in{data, size};
  size_t pages = 0;
  uint64_t slot = 0;
  const uint64_t max_slots = (uint64_t{1} << 20) / g_slot_bytes;
  while (in.n > 0 && slot < max_slots) {
    const std::vector<uint8_t> payload = NextPayload(in);
    const uint32_t io = tq::storage::PageIoBytes(static_cast<uint32_t>(payload.size()));
    const uint64_t span = (io + g_slot_bytes - 1) / g_slot_bytes;
    if (span > g_extent_slots) continue;
    if (slot % g_extent_slots + span > g_extent_slots) slot += g_extent_slots - slot % g_extent_slots;
    if (slot + span > max_slots) break;
    file.resize(tq::storage::kFileHeaderBytes + (slot + span) * g_slot_bytes);
    tq::storage::EncodePage(pages + 1, pages + 1, std::as_bytes(std::span<const uint8_t>(payload)),
                            std::span<std::byte>(file).subspan(tq::storage::kFileHeaderBytes + slot * g_slot_bytes));
    slot += span;
    ++pages;
  }
  const std::string path = g_dir + "/cold-0000.tqc";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  Check(fd >= 0, "cannot write the cold file");
  Check(::write(fd, file.data(), file.size()) == static_cast<ssize_t>(file.size()), "short write");
  ::close(fd);
  return pages;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::err);  // every open logs what it found; only errors are worth seeing here
  const char* shm = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
  g_dir = std::string(shm) + "/tq-prefix-recovery-fuzz-" + std::to_string(::getpid());
  std::filesystem::remove_all(g_dir);
  // Let the store lay out an empty directory once, and keep the file header it writes.
  {
    auto store = tq::engine::KvPageStore::Open(Options(), {kPageBytes, kPageBytes, kPageBytes});
    if (!store.ok()) std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    Check(store.ok(), "cannot open an empty store");
  }
  std::vector<std::byte> header(tq::storage::kFileHeaderBytes);
  const int fd = ::open((g_dir + "/cold-0000.tqc").c_str(), O_RDONLY);
  Check(fd >= 0 && ::pread(fd, header.data(), header.size(), 0) == static_cast<ssize_t>(header.size()),
        "cannot read the file header");
  ::close(fd);
  auto h = tq::storage::DecodeFileHeader(header);
  Check(h.ok(), "the store wrote a header it cannot read");
  g_file_header = header;
  g_slot_bytes = h->slot_bytes;
  g_extent_slots = h->extent_slots;
  std::atexit([] { std::filesystem::remove_all(g_dir); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const size_t written = WriteColdFile(data, size);
  auto opened = tq::engine::KvPageStore::Open(Options(), {kPageBytes, kPageBytes, kPageBytes});
  if (!opened.ok()) std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
  Check(opened.ok(), "the store did not open over pages with valid headers");
  tq::engine::KvPageStore& store = **opened;
  std::vector<tq::engine::RecoveredPage> recovered = store.TakeRecovered();
  Check(recovered.size() <= written, "more pages recovered than written");
  for (const auto& p : recovered) {
    Check(store.Info(p.id) != nullptr, "a recovered page is not in the store");
    Check(p.info.prefix_hash != 0, "a recovered page no prefix names");
  }
  {
    tq::engine::PrefixCache cache(&store, kLayers, kKvHeads, 1 << 20, 0);
    cache.Adopt(std::move(recovered), kFingerprint);
    for (const uint64_t first : kHashes) {
      for (const uint64_t second : kHashes) {
        const uint64_t chain[3] = {first, second, kHashes[2]};
        const auto now = tq::engine::PrefixCache::Clock::now();
        for (const tq::engine::PrefixEntry* e : cache.Lookup(chain, now)) {
          Check(e->pages.size() == static_cast<size_t>(kLayers * kKvHeads), "an entry without a page per head");
          for (const tq::engine::PageId id : e->pages) {
            // (A page of the wrong length may be adopted; SequenceKv::AttachPrefix refuses it against the layout.)
            Check(store.Info(id) != nullptr, "an entry's page is not in the store");
            auto pinned = store.Pin(id);
            Check(!pinned.ok() || pinned->data != nullptr, "a pinned page without bytes");
          }
        }
      }
    }
  }
  return 0;
}
