#include "bench/lib/format_measure.h"

#include <cmath>
#include <vector>

#include "kernels/formats/codec.h"
#include "kernels/formats/rng.h"

namespace tq::kernels {

StatusOr<FormatQuality> MeasureFormat(KvFormat format, int head_dim, int vectors, uint64_t seed) {
  if (vectors < 1) return InvalidArgumentError("MeasureFormat: need at least one vector");
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<KvCodec> codec, KvCodec::Create(format, head_dim));
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<KvCodec> nearest, KvCodec::Create(format, head_dim));
  nearest->set_scale_search(false);
  const int d = head_dim;
  Rng rng(seed);
  std::vector<uint8_t> page(codec->layout().page_bytes);
  std::vector<float> x(static_cast<size_t>(kPageTokens) * d), q(x.size()), out(x.size()),
      out_nearest(x.size());
  double mse_sum = 0, nearest_sum = 0, ip_sq = 0, ip_sum = 0, scale_sum = 0;
  long count = 0;
  while (count < vectors) {
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<float>(rng.Gaussian());
      q[i] = static_cast<float>(rng.Gaussian());
    }
    TQ_RETURN_IF_ERROR(codec->EncodePage(x.data(), kPageTokens, page));
    TQ_RETURN_IF_ERROR(codec->DecodePage(page, out.data()));
    TQ_RETURN_IF_ERROR(nearest->EncodePage(x.data(), kPageTokens, page));
    TQ_RETURN_IF_ERROR(nearest->DecodePage(page, out_nearest.data()));
    for (int t = 0; t < kPageTokens; ++t) {
      double err = 0, err_nearest = 0, xx = 0, qq = 0, qx = 0, qx_hat = 0;
      for (int i = 0; i < d; ++i) {
        const double a = x[t * d + i], b = out[t * d + i], c = q[t * d + i], n = out_nearest[t * d + i];
        err += (a - b) * (a - b);
        err_nearest += (a - n) * (a - n);
        xx += a * a;
        qq += c * c;
        qx += c * a;
        qx_hat += c * b;
      }
      mse_sum += err / xx;
      nearest_sum += err_nearest / xx;
      ip_sq += (qx - qx_hat) * (qx - qx_hat);
      ip_sum += qx_hat - qx;
      scale_sum += qq * xx;
      ++count;
    }
  }
  FormatQuality quality;
  quality.mse = mse_sum / count;
  quality.mse_nearest = nearest_sum / count;
  quality.ip_err = d * (ip_sq / count) / (scale_sum / count);
  quality.ip_bias = (ip_sum / count) / std::sqrt(scale_sum / count / d);
  return quality;
}

}  // namespace tq::kernels
