// GgufFile parsing: every read is bounds-checked against the file size before it happens.
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "engine/model/gguf.h"

namespace tq::engine {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 4;        // nested arrays deeper than this are refused
constexpr int kMaxDims = 4;

// Fixed size in bytes of a scalar of `type`; 0 for string, array and unknown types.
uint64_t ScalarSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

bool KnownValueType(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufValueType::kFloat64);
}

// A bounds-checked little-endian reader over the file.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  const uint8_t* here() const { return bytes_.data() + pos_; }

  Status Need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return DataLossError("file truncated: " + std::string(what) + " needs " + std::to_string(n) +
                           " bytes at offset " + std::to_string(pos_) + ", file has " +
                           std::to_string(bytes_.size()));
    }
    return Status::Ok();
  }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    TQ_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, here(), sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status Skip(uint64_t n, std::string_view what) {
    TQ_RETURN_IF_ERROR(Need(n, what));
    pos_ += n;
    return Status::Ok();
  }

  Status ReadString(std::string_view* out, std::string_view what) {
    uint64_t len = 0;
    TQ_RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return DataLossError(std::string(what) + " has length " + std::to_string(len) + " but only " +
                           std::to_string(remaining()) + " bytes are left in the file");
    }
    *out = std::string_view(reinterpret_cast<const char*>(here()), len);
    pos_ += len;
    return Status::Ok();
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

Status ReadValue(Cursor& cur, GgufValueType type, int depth, GgufValue* out);

Status ReadArray(Cursor& cur, int depth, GgufValue* out) {
  if (depth >= kMaxArrayDepth) {
    return DataLossError("arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  }
  uint32_t elem = 0;
  TQ_RETURN_IF_ERROR(cur.Read(&elem, "array element type"));
  if (!KnownValueType(elem)) return DataLossError("unknown array element type " + std::to_string(elem));
  out->elem_type = static_cast<GgufValueType>(elem);
  TQ_RETURN_IF_ERROR(cur.Read(&out->count, "array length"));
  // Every element takes at least this many bytes, which bounds the count before anything is allocated.
  const uint64_t scalar = ScalarSize(out->elem_type);
  const uint64_t min_elem = scalar != 0 ? scalar : (out->elem_type == GgufValueType::kString ? 8 : 12);
  if (out->count > cur.remaining() / min_elem) {
    return DataLossError("array of " + std::to_string(out->count) + " " +
                         std::string(GgufValueTypeName(out->elem_type)) + " elements does not fit in the " +
                         std::to_string(cur.remaining()) + " bytes left in the file");
  }
  if (scalar != 0) {
    out->raw = cur.here();
    return cur.Skip(out->count * scalar, "array elements");
  }
  if (out->elem_type == GgufValueType::kString) {
    out->strings.resize(out->count);
    for (uint64_t k = 0; k < out->count; ++k) {
      TQ_RETURN_IF_ERROR_CTX(cur.ReadString(&out->strings[k], "string"), "element " + std::to_string(k));
    }
    return Status::Ok();
  }
  out->arrays.resize(out->count);
  for (uint64_t k = 0; k < out->count; ++k) {
    TQ_RETURN_IF_ERROR_CTX(ReadValue(cur, GgufValueType::kArray, depth + 1, &out->arrays[k]),
                           "element " + std::to_string(k));
  }
  return Status::Ok();
}

template <typename T>
Status ReadScalar(Cursor& cur, T* out) {
  return cur.Read(out, "value");
}

Status ReadValue(Cursor& cur, GgufValueType type, int depth, GgufValue* out) {
  out->type = type;
  switch (type) {
    case GgufValueType::kUint8: {
      uint8_t v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->u = v;
      break;
    }
    case GgufValueType::kUint16: {
      uint16_t v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->u = v;
      break;
    }
    case GgufValueType::kUint32: {
      uint32_t v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->u = v;
      break;
    }
    case GgufValueType::kUint64: {
      uint64_t v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->u = v;
      break;
    }
    case GgufValueType::kInt8: {
      int8_t v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->i = v;
      break;
    }
    case GgufValueType::kInt16: {
      int16_t v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->i = v;
      break;
    }
    case GgufValueType::kInt32: {
      int32_t v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->i = v;
      break;
    }
    case GgufValueType::kInt64: {
      int64_t v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->i = v;
      break;
    }
    case GgufValueType::kFloat32: {
      float v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->f = v;
      break;
    }
    case GgufValueType::kFloat64: {
      double v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      out->f = v;
      break;
    }
    case GgufValueType::kBool: {
      uint8_t v = 0;
      TQ_RETURN_IF_ERROR(ReadScalar(cur, &v));
      if (v > 1) return DataLossError("bool value " + std::to_string(v) + " is neither 0 nor 1");
      out->b = v != 0;
      break;
    }
    case GgufValueType::kString: return cur.ReadString(&out->str, "string value");
    case GgufValueType::kArray: return ReadArray(cur, depth, out);
  }
  return Status::Ok();
}

// a + b when it does not overflow.
bool AddOk(uint64_t a, uint64_t b, uint64_t* sum) {
  return !__builtin_add_overflow(a, b, sum);
}

}  // namespace

Status GgufFile::ParseAll() {
  Cursor cur(bytes_);
  if (bytes_.empty()) return DataLossError("file is empty");
  uint32_t magic = 0;
  TQ_RETURN_IF_ERROR(cur.Read(&magic, "magic"));
  if (magic != kMagic) return InvalidArgumentError("not a GGUF file (bad magic)");
  TQ_RETURN_IF_ERROR(cur.Read(&version_, "version"));
  if (version_ == 1) return UnimplementedError("GGUF version 1 is not supported (versions 2 and 3 are)");
  if (version_ != 2 && version_ != 3) {
    return UnimplementedError("unsupported GGUF version " + std::to_string(version_) +
                              (__builtin_bswap32(version_) <= 3 ? " (a big-endian file?)" : ""));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  TQ_RETURN_IF_ERROR(cur.Read(&n_tensors, "tensor count"));
  TQ_RETURN_IF_ERROR(cur.Read(&n_kv, "metadata count"));
  // Lower bounds on record sizes: a key/value takes >= 13 bytes, a tensor info >= 32.
  if (n_kv > cur.remaining() / 13) {
    return DataLossError("metadata count " + std::to_string(n_kv) + " is larger than the file can hold");
  }
  if (n_tensors > cur.remaining() / 32) {
    return DataLossError("tensor count " + std::to_string(n_tensors) + " is larger than the file can hold");
  }

  kvs_.resize(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    GgufKv& kv = kvs_[k];
    const std::string where = "metadata entry " + std::to_string(k);
    TQ_RETURN_IF_ERROR_CTX(cur.ReadString(&kv.key, "key"), where);
    if (kv.key.empty()) return DataLossError(where + " has an empty key");
    const std::string key_ctx = "GGUF key '" + std::string(kv.key) + "'";
    uint32_t type = 0;
    TQ_RETURN_IF_ERROR_CTX(cur.Read(&type, "value type"), key_ctx);
    if (!KnownValueType(type)) return DataLossError(key_ctx + ": unknown value type " + std::to_string(type));
    TQ_RETURN_IF_ERROR_CTX(ReadValue(cur, static_cast<GgufValueType>(type), 0, &kv.value), key_ctx);
    if (!kv_index_.emplace(kv.key, k).second) return DataLossError(key_ctx + " appears twice");
  }

  if (const GgufValue* align = Find("general.alignment")) {
    if (align->type != GgufValueType::kUint32) {
      return InvalidArgumentError("GGUF key 'general.alignment': expected uint32, got " +
                                  std::string(GgufValueTypeName(align->type)));
    }
    if (align->u == 0 || !std::has_single_bit(align->u) || align->u > (1u << 30)) {
      return InvalidArgumentError("GGUF key 'general.alignment': " + std::to_string(align->u) +
                                  " is not a power of two up to 2^30");
    }
    alignment_ = static_cast<uint32_t>(align->u);
  }

  tensors_.resize(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo& info = tensors_[t];
    const std::string where = "tensor info " + std::to_string(t);
    TQ_RETURN_IF_ERROR_CTX(cur.ReadString(&info.name, "tensor name"), where);
    const std::string ctx = "tensor '" + std::string(info.name) + "'";
    uint32_t n_dims = 0;
    TQ_RETURN_IF_ERROR_CTX(cur.Read(&n_dims, "dimension count"), ctx);
    if (n_dims == 0 || n_dims > kMaxDims) {
      return DataLossError(ctx + ": " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    }
    info.n_dims = static_cast<int>(n_dims);
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      TQ_RETURN_IF_ERROR_CTX(cur.Read(&dim, "dimension"), ctx);
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim)) {
        return DataLossError(ctx + ": dimensions overflow 64 bits");
      }
      elements *= dim;
      info.dims[d] = static_cast<int64_t>(dim);
    }
    uint32_t type = 0;
    TQ_RETURN_IF_ERROR_CTX(cur.Read(&type, "type"), ctx);
    const kernels::WeightTypeInfo* type_info = kernels::FindWeightType(type);
    if (type_info == nullptr) return DataLossError(ctx + ": unknown tensor type id " + std::to_string(type));
    info.type = type_info->type;
    TQ_RETURN_IF_ERROR_CTX(cur.Read(&info.offset, "data offset"), ctx);
    if (info.dims[0] % type_info->block_size != 0) {
      return DataLossError(ctx + ": row length " + std::to_string(info.dims[0]) + " is not a multiple of " +
                           std::string(type_info->name) + "'s block size " +
                           std::to_string(type_info->block_size));
    }
    const uint64_t blocks = elements / static_cast<uint64_t>(type_info->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(type_info->block_bytes)) {
      return DataLossError(ctx + ": size overflows 64 bits");
    }
    info.bytes = blocks * static_cast<uint64_t>(type_info->block_bytes);
    if (info.offset % alignment_ != 0) {
      return DataLossError(ctx + ": data offset " + std::to_string(info.offset) +
                           " is not a multiple of the " + "alignment " + std::to_string(alignment_));
    }
    if (!tensor_index_.emplace(info.name, t).second) return DataLossError(ctx + " appears twice");
  }

  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t end_of_infos = cur.pos();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  for (GgufTensorInfo& info : tensors_) {
    uint64_t begin = 0, end = 0;
    if (!AddOk(data_offset_, info.offset, &begin) || !AddOk(begin, info.bytes, &end) || end > bytes_.size()) {
      return DataLossError("tensor '" + std::string(info.name) + "': data [" + std::to_string(info.offset) +
                           ", +" + std::to_string(info.bytes) +
                           ") runs past the end of the file (data section " + "at " +
                           std::to_string(data_offset_) + ", file size " + std::to_string(bytes_.size()) +
                           "; file truncated?)");
    }
    info.data = bytes_.data() + begin;
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->bytes_ = bytes;
  TQ_RETURN_IF_ERROR(file->ParseAll());
  return file;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  TQ_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->file_ = std::move(mapped);
  file->bytes_ = file->file_.bytes();
  TQ_RETURN_IF_ERROR_CTX(file->ParseAll(), path);
  return file;
}

}  // namespace tq::engine
