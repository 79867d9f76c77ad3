// bench_cold_tier: random page reads from one file through the cold tier's IoQueue backends, side by side
// with fio on the same file and flags.
//
//   bench_cold_tier [--dir D] [--file-mb N] [--seconds S] [--sizes 4,16,64,256] [--depths 1,8,32,128]
//                   [--repeat R] [--buffered] [--no-fio]
//
// Every cell keeps `depth` reads of `size` KiB in flight at uniformly random aligned offsets for S seconds, R
// times per engine with the engines interleaved (io_uring, pread, fio, io_uring, ...); the table shows the
// median of the R runs, which matters on shared or virtual disks whose speed drifts by tens of percent. Both
// backends open the file with O_DIRECT (unless --buffered) and register it and their buffers; the pread
// backend runs one worker per unit of depth. fio runs with ioengine=io_uring, the same O_DIRECT flag, block
// size and depth, fixedbufs and registerfiles; the last column is io_uring MB/s over fio MB/s.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "storage/crc32c.h"
#include "storage/io_queue.h"

namespace tq::storage {
namespace {

struct Args {
  std::string dir = "/tmp";
  uint64_t file_mb = 1024;
  double seconds = 1.0;
  int repeat = 3;
  std::vector<uint32_t> sizes_kib = {4, 16, 64, 256};
  std::vector<uint32_t> depths = {1, 8, 32, 128};
  bool direct = true;
  bool fio = true;
  bool json = false;  // a JSON list of cells on stdout instead of the table
};

std::vector<uint32_t> ParseList(const char* s) {
  std::vector<uint32_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(static_cast<uint32_t>(std::stoul(item)));
  return out;
}

std::optional<Args> ParseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (k == "--buffered")
      a.direct = false;
    else if (k == "--no-fio")
      a.fio = false;
    else if (k == "--json")
      a.json = true;
    else if ((v = next()) == nullptr)
      return std::nullopt;
    else if (k == "--dir")
      a.dir = v;
    else if (k == "--file-mb")
      a.file_mb = std::stoull(v);
    else if (k == "--seconds")
      a.seconds = std::stod(v);
    else if (k == "--repeat")
      a.repeat = std::max(1, std::stoi(v));
    else if (k == "--sizes")
      a.sizes_kib = ParseList(v);
    else if (k == "--depths")
      a.depths = ParseList(v);
    else
      return std::nullopt;
  }
  return a;
}

// Creates (or keeps, when it already has the size) the benchmark file filled with non-zero bytes.
Status PrepareFile(const std::string& path, uint64_t bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == bytes) return Status::Ok();
  std::fprintf(stderr, "writing %llu MiB to %s ...\n", static_cast<unsigned long long>(bytes >> 20),
               path.c_str());
  TQ_ASSIGN_OR_RETURN(IoFile f, OpenIoFile(path, true, true));
  constexpr size_t kChunk = 4 << 20;
  AlignedBuffer buf(kChunk);
  for (size_t i = 0; i < kChunk; ++i) buf.data()[i] = static_cast<std::byte>(i * 131 + 7);
  for (uint64_t off = 0; off < bytes; off += kChunk) {
    if (::pwrite(f.fd, buf.data(), kChunk, static_cast<off_t>(off)) != static_cast<ssize_t>(kChunk)) {
      Status s = ErrnoToStatus(errno, "write " + path);
      ::close(f.fd);
      return s;
    }
  }
  ::fsync(f.fd);
  ::close(f.fd);
  return Status::Ok();
}

struct Result {
  double mb_s = 0, iops = 0;
};

StatusOr<Result> RunQueue(const Args& a, const std::string& path, const std::string& backend, uint32_t size,
                          uint32_t depth) {
  TQ_ASSIGN_OR_RETURN(IoFile f, OpenIoFile(path, false, a.direct));
  TQ_ASSIGN_OR_RETURN(auto q, MakeIoQueue(IoQueueOptions{backend, depth, depth}));
  TQ_RETURN_IF_ERROR(q->RegisterFiles({&f.fd, 1}));
  AlignedBuffer bufs(uint64_t{size} * depth);
  iovec region{bufs.data(), bufs.size()};
  TQ_RETURN_IF_ERROR(q->RegisterBuffers({&region, 1}));
  const uint64_t blocks = (a.file_mb << 20) / size;
  uint64_t rng = 0x9E3779B97F4A7C15ull ^ (uint64_t{size} << 20) ^ depth;
  auto next_offset = [&] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (rng % blocks) * size;
  };
  std::vector<IoCompletion> done;
  uint64_t completed = 0;
  Status error;
  auto issue = [&](uint32_t slot) {
    return q->Enqueue({IoOp::kRead, 0, next_offset(), bufs.data() + uint64_t{slot} * size, size, slot});
  };
  for (uint32_t s = 0; s < depth; ++s) TQ_RETURN_IF_ERROR(issue(s));
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration<double>(a.seconds);
  auto now = start;
  while (now < end) {
    done.clear();
    TQ_RETURN_IF_ERROR(q->Wait(&done, 1));
    for (const IoCompletion& c : done) {
      TQ_RETURN_IF_ERROR(c.status);
      ++completed;
      TQ_RETURN_IF_ERROR(issue(static_cast<uint32_t>(c.user_data)));
    }
    now = std::chrono::steady_clock::now();  // the next Wait submits the new reads and waits in one call
  }
  const double elapsed = std::chrono::duration<double>(now - start).count();
  done.clear();
  q->Wait(&done, q->outstanding()).IgnoreError();
  q.reset();
  ::close(f.fd);
  return Result{completed * double(size) / elapsed / 1e6, completed / elapsed};
}

std::optional<Result> RunFio(const Args& a, const std::string& path, uint32_t size, uint32_t depth) {
  std::ostringstream cmd;
  cmd << "fio --name=tq --filename=" << path << " --rw=randread --bs=" << size << " --iodepth=" << depth
      << " --ioengine=io_uring --direct=" << (a.direct ? 1 : 0) << " --fixedbufs=1 --registerfiles=1"
      << " --size=" << (a.file_mb << 20) << " --runtime=" << a.seconds << " --time_based --norandommap"
      << " --randrepeat=0 --output-format=json 2>/dev/null";
  FILE* p = ::popen(cmd.str().c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (::pclose(p) != 0) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("jobs") || j["jobs"].empty()) return std::nullopt;
  const auto& read = j["jobs"][0]["read"];
  return Result{read.value("bw_bytes", 0.0) / 1e6, read.value("iops", 0.0)};
}

// Median by MB/s (IOPS follow: same block size).
Result Median(std::vector<Result> v) {
  if (v.empty()) return Result{};
  std::sort(v.begin(), v.end(), [](const Result& x, const Result& y) { return x.mb_s < y.mb_s; });
  return v[v.size() / 2];
}

// What ColdStore adds to every read on top of the I/O: a CRC32C over the page and a copy out of the staging
// buffer.
void PrintPerReadCpuCost() {
  constexpr size_t kBytes = 256 * 1024;
  constexpr int kRounds = 4000;
  AlignedBuffer src(kBytes), dst(kBytes);
  for (size_t i = 0; i < kBytes; ++i) src.data()[i] = static_cast<std::byte>(i * 31);
  uint32_t crc = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < kRounds; ++r) crc = Crc32c({src.data(), kBytes}, crc);
  auto t1 = std::chrono::steady_clock::now();
  for (int r = 0; r < kRounds; ++r) {
    std::memcpy(dst.data(), src.data(), kBytes);
    src.data()[r % kBytes] = dst.data()[(r * 7) % kBytes];  // keeps the copies from being folded away
  }
  auto t2 = std::chrono::steady_clock::now();
  const double total = double(kBytes) * kRounds;
  std::printf("per-read CPU cost of the ColdStore: CRC32C %.1f GB/s, copy %.1f GB/s (crc %08x)\n",
              total / std::chrono::duration<double>(t1 - t0).count() / 1e9,
              total / std::chrono::duration<double>(t2 - t1).count() / 1e9, crc);
}

bool HaveFio() {
  return std::system("fio --version >/dev/null 2>&1") == 0;
}

int Main(int argc, char** argv) {
  std::optional<Args> args = ParseArgs(argc, argv);
  if (!args) {
    std::fprintf(stderr,
                 "usage: bench_cold_tier [--dir D] [--file-mb N] [--seconds S] [--sizes 4,16,64,256] "
                 "[--depths 1,8,32,128] [--repeat R] [--buffered] [--no-fio] [--json]\n");
    return 2;
  }
  const Args& a = *args;
  const std::string path = a.dir + "/tq-bench-cold.dat";
  if (Status s = PrepareFile(path, a.file_mb << 20); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  bool fio = a.fio && HaveFio();
  if (a.fio && !fio)
    std::fprintf(stderr, "fio not installed (Debian package fio): its columns are skipped\n");
  StatusOr<IoFile> probe = OpenIoFile(path, false, a.direct);
  if (!probe.ok()) {
    std::fprintf(stderr, "%s\n", probe.status().ToString().c_str());
    return 1;
  }
  bool direct = probe->direct;
  ::close(probe->fd);
  nlohmann::json cells = nlohmann::json::array();
  if (!a.json) {
    std::printf("file %s, %llu MiB, %s, random reads, median of %d runs of %.1f s per cell and engine\n",
                path.c_str(), static_cast<unsigned long long>(a.file_mb), direct ? "O_DIRECT" : "buffered",
                a.repeat, a.seconds);
    PrintPerReadCpuCost();
    std::printf("%7s %6s | %10s %9s | %10s %9s | %10s %9s | %9s\n", "size", "depth", "uring MB/s", "IOPS",
                "pread MB/s", "IOPS", "fio MB/s", "IOPS", "uring/fio");
  }
  for (uint32_t kib : a.sizes_kib) {
    for (uint32_t depth : a.depths) {
      const uint32_t size = kib * 1024;
      std::vector<Result> us, ps, fs;
      for (int r = 0; r < a.repeat; ++r) {
        StatusOr<Result> u = RunQueue(a, path, "io_uring", size, depth);
        StatusOr<Result> p = RunQueue(a, path, "pread", size, depth);
        if (!u.ok()) std::fprintf(stderr, "io_uring: %s\n", u.status().ToString().c_str());
        if (!p.ok()) std::fprintf(stderr, "pread: %s\n", p.status().ToString().c_str());
        if (u.ok()) us.push_back(*u);
        if (p.ok()) ps.push_back(*p);
        if (std::optional<Result> f = fio ? RunFio(a, path, size, depth) : std::nullopt) fs.push_back(*f);
      }
      Result ur = Median(us), pr = Median(ps);
      std::optional<Result> f;
      if (!fs.empty()) f = Median(fs);
      if (a.json) {
        nlohmann::json cell = {{"size_kib", kib}, {"depth", depth}, {"direct", direct},
                               {"uring_mb_s", ur.mb_s}, {"pread_mb_s", pr.mb_s}};
        if (f) cell["fio_mb_s"] = f->mb_s;
        cells.push_back(std::move(cell));
        continue;
      }
      std::printf("%5uKiB %6u | %10.1f %9.0f | %10.1f %9.0f | ", kib, depth, ur.mb_s, ur.iops, pr.mb_s,
                  pr.iops);
      if (f)
        std::printf("%10.1f %9.0f | %9.2f\n", f->mb_s, f->iops, f->mb_s > 0 ? ur.mb_s / f->mb_s : 0.0);
      else
        std::printf("%10s %9s | %9s\n", "-", "-", "-");
      std::fflush(stdout);
    }
  }
  if (a.json) std::printf("%s\n", cells.dump(1).c_str());
  return 0;
}

}  // namespace
}  // namespace tq::storage

int main(int argc, char** argv) {
  return tq::storage::Main(argc, argv);
}
