#include "kernels/formats/format.h"

#include <string>

#include "kernels/formats/page.h"

namespace tq::kernels {

const FormatInfo& GetFormatInfo(KvFormat format) {
  for (const FormatInfo& info : kFormatTable) {
    if (info.format == format) return info;
  }
  assert(false && "KvFormat missing from kFormatTable");
  return kFormatTable[0];
}

StatusOr<KvFormat> FormatFromName(std::string_view name) {
  for (const FormatInfo& info : kFormatTable) {
    if (info.name == name) return info.format;
  }
  std::string known;
  for (const FormatInfo& info : kFormatTable) {
    if (!known.empty()) known += ", ";
    known += info.name;
  }
  return InvalidArgumentError("unknown KV format '" + std::string(name) + "' (known: " + known + ")");
}

StatusOr<KvFormat> FormatFromId(uint8_t id) {
  for (const FormatInfo& info : kFormatTable) {
    if (static_cast<uint8_t>(info.format) == id) return info.format;
  }
  return InvalidArgumentError("unknown KV format id " + std::to_string(id));
}

bool IsRotated(KvFormat format) {
  switch (GetFormatInfo(format).kind) {
    case FormatKind::kFloat16:
    case FormatKind::kInt8:
    case FormatKind::kPlainF32:
      return false;
    case FormatKind::kTqMse:
    case FormatKind::kTqOutlier:
    case FormatKind::kTqProd:
      return true;
  }
  return false;
}

Status CheckSupported(KvFormat format, int head_dim) {
  if (!IsPaged(format)) {
    return InvalidArgumentError("format " + std::string(FormatName(format)) +
                                " is kept in plain rows, not in pages: it takes a whole layer's K and V "
                                "(kv.k_format and kv.v_format both " + std::string(FormatName(format)) + ")");
  }
  if (head_dim < kMinHeadDim || head_dim > kMaxHeadDim || head_dim % 16 != 0) {
    return InvalidArgumentError("format " + std::string(FormatName(format)) + " does not support head_dim " +
                                std::to_string(head_dim) + " (supported: multiples of 16 in [" +
                                std::to_string(kMinHeadDim) + ", " + std::to_string(kMaxHeadDim) + "])");
  }
  if (GetFormatInfo(format).kind == FormatKind::kTqOutlier && head_dim < 32) {
    return InvalidArgumentError("format " + std::string(FormatName(format)) + " needs head_dim >= 32");
  }
  return Status::Ok();
}

int OutlierChannels(KvFormat format, int head_dim) {
  if (GetFormatInfo(format).kind != FormatKind::kTqOutlier) return 0;
  return (head_dim / 4) / 8 * 8;
}

int CodeBitsPerVector(KvFormat format, int head_dim) {
  const FormatInfo& info = GetFormatInfo(format);
  switch (info.kind) {
    case FormatKind::kFloat16:
    case FormatKind::kInt8:
    case FormatKind::kPlainF32:
    case FormatKind::kTqMse:
    case FormatKind::kTqProd:  // (bits-1) MSE bits + 1 sign bit
      return info.bits * head_dim;
    case FormatKind::kTqOutlier:
      return info.bits * head_dim + OutlierChannels(format, head_dim);
  }
  return 0;
}

double BytesPerVector(KvFormat format, int head_dim) {
  const FormatInfo& info = GetFormatInfo(format);
  double bytes = CodeBitsPerVector(format, head_dim) / 8.0 + static_cast<double>(info.norm_bytes) * info.norms;
  if (info.kind == FormatKind::kInt8 || HasPageScale(format)) bytes += 4.0 / kPageTokens;  // one fp32 scale per page
  return bytes;
}

double BitsPerValue(KvFormat format, int head_dim) { return 8.0 * BytesPerVector(format, head_dim) / head_dim; }

double PageBitsPerValue(KvFormat format, int head_dim) {
  const FormatInfo& info = GetFormatInfo(format);
  const double bytes = double{kPageHeaderBytes} + static_cast<double>(info.norm_bytes) * info.norms * kPageTokens +
                       CodeBitsPerVector(format, head_dim) / 8.0 * kPageTokens;
  return 8.0 * bytes / (double{kPageTokens} * head_dim);
}

}  // namespace tq::kernels
