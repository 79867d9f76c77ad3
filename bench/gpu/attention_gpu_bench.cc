// Decode attention on the GPU over a whole model's paged KV, one sequence at long context: the time of one decode
// step's attention (every layer's PagedAttention::Run, events around them, so launch gaps count), the KV bytes it
// reads and the bandwidth that gives, for each KV format side by side in one run (ratios against f16).
//
//   tq_gpu_attention_bench [--shapes smollm2-135m,llama-8b] [--ctx 8192,32768] [--formats f16,int8,tq4,tq3]
//                          [--reps 30] [--json PATH]
//
// The KV is synthetic (N(0, 1) rows encoded on the GPU by EncodePages): attention's cost depends on the number of
// tokens and the format, not on the values. Every layer has its own pages, so the KV does not sit in L2.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/kv_kernels.h"
#include "kernels/cuda/random.h"
#include "kernels/formats/codec.h"

namespace tq::gpu {
namespace {

struct Shape {
  std::string name;
  int layers, kv_heads, group, head_dim;
};

const Shape kShapes[] = {{"smollm2-135m", 30, 3, 3, 64}, {"llama-8b", 32, 8, 4, 128}};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct Result {
  std::string shape, format;
  int ctx = 0;
  double ms = 0, kv_bytes = 0, gbps = 0, ratio = 0;
};

#define BENCH_CHECK(expr)                                                        \
  do {                                                                           \
    const ::tq::Status _s = (expr);                                              \
    if (!_s.ok()) {                                                              \
      std::fprintf(stderr, "%s: %s\n", #expr, _s.ToString().c_str());            \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

template <typename T>
T Must(StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, v.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*v);
}

Result RunOne(const Shape& shape, int ctx, kernels::KvFormat format, int reps, const Stream& stream) {
  const int d = shape.head_dim;
  auto codec = Must(kernels::KvCodec::Create(format, d), "codec");
  DeviceCodecs codecs;
  const int ci = Must(codecs.Add(*codec), "codec upload");
  const size_t page_bytes = codec->layout().page_bytes;
  const int pages_per_head = ctx / kernels::kPageTokens;
  const int64_t heads = int64_t{shape.layers} * shape.kv_heads;
  const int64_t n_pages = heads * pages_per_head * 2;  // K and V
  DeviceBuffer store = Must(DeviceBuffer::Allocate(page_bytes * n_pages), "KV pages");
  // Encode in batches of up to 512 pages from random rows.
  constexpr int kBatch = 512;
  DeviceBuffer rows = Must(DeviceBuffer::Allocate(sizeof(float) * kBatch * kernels::kPageTokens * d), "rows");
  DeviceBuffer ptrs = Must(DeviceBuffer::Allocate(sizeof(uint8_t*) * kBatch), "page pointers");
  std::vector<uint8_t*> host_ptrs(kBatch);
  for (int64_t first = 0; first < n_pages; first += kBatch) {
    const int n = static_cast<int>(std::min<int64_t>(kBatch, n_pages - first));
    BENCH_CHECK(FillNormal(rows.as<float>(), int64_t{n} * kernels::kPageTokens * d, 1000 + first, 1.0f, stream.get()));
    for (int i = 0; i < n; ++i) host_ptrs[i] = store.as<uint8_t>() + page_bytes * (first + i);
    BENCH_CHECK(CudaStatus(cudaMemcpyAsync(ptrs.get(), host_ptrs.data(), sizeof(uint8_t*) * n,
                                           cudaMemcpyHostToDevice, stream.get()), "copy pointers"));
    BENCH_CHECK(EncodePages(codecs, ci, rows.as<float>(), int64_t{kernels::kPageTokens} * d, kernels::kPageTokens,
                            ptrs.as<uint8_t*>(), n, nullptr, stream.get()));
    BENCH_CHECK(stream.Synchronize());
  }
  // Per layer: the page table of its KV heads, one query per KV head.
  DeviceBuffer q = Must(DeviceBuffer::Allocate(sizeof(float) * shape.kv_heads * shape.group * d), "q");
  DeviceBuffer out = Must(DeviceBuffer::Allocate(sizeof(float) * shape.kv_heads * shape.group * d), "out");
  BENCH_CHECK(FillNormal(q.as<float>(), int64_t{shape.kv_heads} * shape.group * d, 7, 1.0f, stream.get()));
  std::vector<std::vector<GpuPage>> tables(shape.layers);
  std::vector<std::vector<GpuQuery>> queries(shape.layers);
  for (int l = 0; l < shape.layers; ++l) {
    for (int h = 0; h < shape.kv_heads; ++h) {
      const int64_t head = int64_t{l} * shape.kv_heads + h;
      GpuQuery gq;
      gq.q = q.as<float>() + int64_t{h} * shape.group * d;
      gq.out = out.as<float>() + int64_t{h} * shape.group * d;
      gq.first_page = static_cast<int>(tables[l].size());
      gq.num_pages = pages_per_head;
      gq.limit = ctx;
      for (int p = 0; p < pages_per_head; ++p) {
        GpuPage pg;
        pg.k = store.as<uint8_t>() + page_bytes * ((head * pages_per_head + p) * 2);
        pg.v = pg.k + page_bytes;
        pg.k_codec = pg.v_codec = ci;
        pg.num_tokens = kernels::kPageTokens;
        tables[l].push_back(pg);
      }
      queries[l].push_back(gq);
    }
  }
  std::vector<PagedAttention> attention(shape.layers);
  Event start = Must(Event::Create(true), "event"), stop = Must(Event::Create(true), "event");
  std::vector<float> times;
  for (int rep = 0; rep < reps + 3; ++rep) {
    BENCH_CHECK(CudaStatus(cudaEventRecord(start.get(), stream.get()), "record"));
    for (int l = 0; l < shape.layers; ++l) {
      BENCH_CHECK(attention[l].Run(codecs, tables[l], queries[l], d, shape.group, 0.0f, stream.get()));
    }
    BENCH_CHECK(CudaStatus(cudaEventRecord(stop.get(), stream.get()), "record"));
    BENCH_CHECK(stream.Synchronize());
    if (rep >= 3) times.push_back(Must(ElapsedMs(start, stop), "elapsed"));
  }
  std::sort(times.begin(), times.end());
  Result r;
  r.shape = shape.name;
  r.format = std::string(kernels::FormatName(format));
  r.ctx = ctx;
  r.ms = times[times.size() / 2];
  r.kv_bytes = static_cast<double>(page_bytes) * n_pages;
  r.gbps = r.kv_bytes / (r.ms * 1e-3) / 1e9;
  return r;
}

int Main(int argc, char** argv) {
  std::vector<std::string> shapes = {"smollm2-135m", "llama-8b"}, formats = {"f16", "int8", "tq4", "tq3"};
  std::vector<int> ctxs = {8192, 32768};
  int reps = 30;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--shapes") shapes = Split(v), ++i;
    else if (a == "--formats") formats = Split(v), ++i;
    else if (a == "--ctx") {
      ctxs.clear();
      for (const std::string& c : Split(v)) ctxs.push_back(std::atoi(c.c_str()));
      ++i;
    } else if (a == "--reps") reps = std::atoi(v.c_str()), ++i;
    else if (a == "--json") json_path = v, ++i;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  StatusOr<DeviceInfo> info = ProbeDevice();
  if (!info.ok()) {
    std::printf("skipped: no GPU (%s)\n", info.status().message().c_str());
    return 0;
  }
  std::printf("GPU: %s (sm_%d%d, %d SMs, %.1f GiB), driver %d, runtime %d\n", info->name.c_str(), info->sm_major,
              info->sm_minor, info->multiprocessors, info->total_bytes / 1073741824.0, info->driver_version,
              info->runtime_version);
  Stream stream = Must(Stream::Create(), "stream");
  std::vector<Result> results;
  std::printf("%-14s %7s %-6s %12s %14s %10s %10s\n", "shape", "ctx", "format", "attn ms/tok", "KV MB read/tok",
              "GB/s", "vs f16");
  for (const std::string& sname : shapes) {
    const Shape* shape = nullptr;
    for (const Shape& s : kShapes) {
      if (s.name == sname) shape = &s;
    }
    if (shape == nullptr) {
      std::fprintf(stderr, "unknown shape %s\n", sname.c_str());
      return 2;
    }
    for (int ctx : ctxs) {
      double f16_ms = 0;
      for (const std::string& fname : formats) {
        kernels::KvFormat f = Must(kernels::FormatFromName(fname), "format");
        Result r = RunOne(*shape, ctx, f, reps, stream);
        if (fname == "f16") f16_ms = r.ms;
        r.ratio = f16_ms > 0 ? f16_ms / r.ms : 0;
        std::printf("%-14s %7d %-6s %12.4f %14.1f %10.0f %9.2fx\n", r.shape.c_str(), r.ctx, r.format.c_str(), r.ms,
                    r.kv_bytes / 1e6, r.gbps, r.ratio);
        std::fflush(stdout);
        results.push_back(r);
      }
    }
  }
  if (!json_path.empty()) {
    nlohmann::json j;
    j["gpu"] = info->name;
    for (const Result& r : results) {
      j["results"].push_back({{"shape", r.shape}, {"ctx", r.ctx}, {"format", r.format}, {"attention_ms", r.ms},
                              {"kv_bytes", r.kv_bytes}, {"gbps", r.gbps}, {"speedup_vs_f16", r.ratio}});
    }
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace tq::gpu

int main(int argc, char** argv) { return tq::gpu::Main(argc, argv); }
