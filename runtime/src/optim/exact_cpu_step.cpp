// LibTorch's SGD, Adam and AdamW updates on the CPU, one pass over each parameter, rounded as
// LibTorch's op-by-op step rounds them (see exact_cpu_step.h for why each operation matches).
//
// Compiled with -ffp-contract=off and -fno-trapping-math (runtime/CMakeLists.txt): the compiler
// must not fuse a multiply and an add that ATen rounds twice, and may vectorize the selects below.
// Where ATen fuses them, the fused form is written out (__builtin_fma) and the loop is compiled
// for AVX2 and FMA on x86 (ATen fuses only in its AVX2 and AVX512 kernels, which need FMA).

#include "exact_cpu_step.h"

#include "util/torch_compat.h"

#include <ATen/Parallel.h>
#include <ATen/ops/add.h>
#include <ATen/ops/addcmul.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/sqrt.h>
#include <c10/util/Exception.h>
#include <c10/util/ParallelGuard.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) || defined(__i386__)
#define ACCEL_FMA_TARGET __attribute__((target("avx2,fma")))
#else
#define ACCEL_FMA_TARGET  // FMA is part of the base instruction set (AArch64)
#endif

namespace accel {
namespace optim {
namespace {

// A parameter this large is split over the intra-op threads; smaller ones are one range.
constexpr int64_t kGrain = 1 << 18;
// Adam's square roots are ATen's, taken a block at a time while the block is in cache: through
// ATen's op, whose dispatch costs microseconds, in large blocks; straight from MKL's vector sqrt
// (ATen's own on an MKL build, checked against it) in blocks that stay in the first-level cache.
constexpr int64_t kRootBlock = 131072;
constexpr int64_t kDirectRootBlock = 1024;

template <typename T>
[[gnu::always_inline]] inline T fused_multiply_add(T a, T b, T c) {
  if constexpr (std::is_same_v<T, float>) {
    return __builtin_fmaf(a, b, c);
  } else {
    return __builtin_fma(a, b, c);
  }
}

/// ATen's add(self, other, alpha): self + alpha * other.
template <typename T, bool kFused>
[[gnu::always_inline]] inline T add_scaled(T self, T other, T alpha) {
  if constexpr (kFused) {
    return fused_multiply_add(other, alpha, self);
  } else {
    const T product = alpha * other;
    return self + product;
  }
}

/// ATen's addcmul(self, t1, t2, value): self + value * t1 * t2, multiplied left to right.
template <typename T, bool kFused>
[[gnu::always_inline]] inline T add_product(T self, T t1, T t2, T value) {
  const T scaled = value * t1;
  if constexpr (kFused) {
    return fused_multiply_add(scaled, t2, self);
  } else {
    const T product = scaled * t2;
    return self + product;
  }
}

/// ATen's maximum: NaN wins.
template <typename T>
[[gnu::always_inline]] inline T maximum(T a, T b) {
  return (a != a || a > b) ? a : b;
}

/// Calls body(begin, end) on ranges of [0, size) across at::get_num_threads() threads. Not
/// at::parallel_for: its OpenMP form is an inline `#pragma omp parallel`, which this library,
/// compiled without -fopenmp, would run on one thread. Each worker marks itself inside a parallel
/// region, so the ATen ops it calls (Adam's square roots) do not spread out again.
template <typename Body>
void parallel_ranges(int64_t size, const Body& body) {
  const int64_t threads =
      std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), size / kGrain));
  if (threads == 1) {
    body(0, size);
    return;
  }
  const int64_t chunk = (size + threads - 1) / threads;
  std::vector<std::thread> workers;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  for (int64_t t = 1; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        c10::ParallelGuard in_parallel_region(true);
        body(t * chunk, std::min(size, (t + 1) * chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        failure = std::current_exception();
      }
    });
  }
  {
    c10::ParallelGuard in_parallel_region(true);
    body(0, std::min(size, chunk));
  }
  for (auto& worker : workers) worker.join();
  if (failure) std::rethrow_exception(failure);
}

template <typename F>
void with_flag(bool value, F&& f) {
  if (value) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// ---------------------------------------------------------------------------------------------
// SGD

enum class Momentum { none, first, carried };

template <typename T>
struct SgdArgs {
  T* param;
  const T* grad;
  T* buffer;
  T weight_decay, momentum, one_minus_dampening, negative_lr;
};

// LibTorch: d_p = grad (+ weight_decay * p); buf = clone(d_p) or buf * momentum + (1 -
// dampening) * d_p; d_p = buf or d_p + momentum * buf (nesterov); p += -lr * d_p.
template <typename T, bool kFused, Momentum kMomentum, bool kDecay, bool kNesterov>
[[gnu::always_inline]] inline void sgd_body(const SgdArgs<T>& args, int64_t begin, int64_t end) {
  T* __restrict param = args.param;
  const T* __restrict grad = args.grad;
  T* __restrict buffer = args.buffer;
  const T weight_decay = args.weight_decay, momentum = args.momentum;
  const T one_minus_dampening = args.one_minus_dampening, negative_lr = args.negative_lr;
  for (int64_t i = begin; i < end; ++i) {
    T d_p = grad[i];
    if constexpr (kDecay) d_p = add_scaled<T, kFused>(d_p, param[i], weight_decay);
    if constexpr (kMomentum != Momentum::none) {
      T buf = d_p;
      if constexpr (kMomentum == Momentum::carried) {
        const T decayed = buffer[i] * momentum;
        buf = add_scaled<T, kFused>(decayed, d_p, one_minus_dampening);
      }
      buffer[i] = buf;
      d_p = kNesterov ? add_scaled<T, kFused>(d_p, buf, momentum) : buf;
    }
    param[i] = add_scaled<T, kFused>(param[i], d_p, negative_lr);
  }
}

template <typename T, Momentum kMomentum, bool kDecay, bool kNesterov>
void sgd_separate(const SgdArgs<T>& args, int64_t begin, int64_t end) {
  sgd_body<T, false, kMomentum, kDecay, kNesterov>(args, begin, end);
}

template <typename T, Momentum kMomentum, bool kDecay, bool kNesterov>
ACCEL_FMA_TARGET void sgd_fused(const SgdArgs<T>& args, int64_t begin, int64_t end) {
  sgd_body<T, true, kMomentum, kDecay, kNesterov>(args, begin, end);
}

template <typename T, Momentum kMomentum>
void sgd_dispatch(const SgdArgs<T>& args, int64_t size, const SgdUpdate& update, bool fused) {
  with_flag(update.weight_decay != 0, [&](auto decay) {
    with_flag(update.nesterov, [&](auto nesterov) {
      constexpr bool kDecay = decltype(decay)::value, kNesterov = decltype(nesterov)::value;
      parallel_ranges(size, [&](int64_t begin, int64_t end) {
        if (fused) {
          sgd_fused<T, kMomentum, kDecay, kNesterov>(args, begin, end);
        } else {
          sgd_separate<T, kMomentum, kDecay, kNesterov>(args, begin, end);
        }
      });
    });
  });
}

template <typename T>
void sgd_update(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& buffer,
                bool first_step, const SgdUpdate& update, bool fused) {
  // The scalars as ATen hands them to its kernels: computed in double, then cast to T.
  const SgdArgs<T> args{param.data_ptr<T>(),
                        grad.data_ptr<T>(),
                        buffer.defined() ? buffer.data_ptr<T>() : nullptr,
                        static_cast<T>(update.weight_decay),
                        static_cast<T>(update.momentum),
                        static_cast<T>(1 - update.dampening),
                        static_cast<T>(-1 * update.lr)};
  const int64_t size = param.numel();
  if (update.momentum == 0) {
    sgd_dispatch<T, Momentum::none>(args, size, update, fused);
  } else if (first_step) {
    sgd_dispatch<T, Momentum::first>(args, size, update, fused);
  } else {
    sgd_dispatch<T, Momentum::carried>(args, size, update, fused);
  }
}

// ---------------------------------------------------------------------------------------------
// Square roots

template <typename T>
using VmlSqrt =
    std::conditional_t<std::is_same_v<T, float>, util::VmlSqrtFloat, util::VmlSqrtDouble>;

/// MKL's vector sqrt where calling it directly gives, bit for bit, what ATen's sqrt op gives on
/// probe values (magnitudes from denormal to huge, zeros, infinity and NaN, in pieces of every
/// length up to a few vector widths at odd offsets); else null, and the op is called instead.
template <typename T>
VmlSqrt<T> direct_sqrt() {
  static const VmlSqrt<T> checked = []() -> VmlSqrt<T> {
    VmlSqrt<T> sqrt_of = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      sqrt_of = util::mkl_vml_sqrt_float();
    } else {
      sqrt_of = util::mkl_vml_sqrt_double();
    }
    if (!sqrt_of) return nullptr;
    constexpr int64_t kCount = 4099;
    std::mt19937_64 generator(17);  // our own: the program's random state stays untouched
    std::normal_distribution<double> normal;
    std::vector<T> values(kCount);
    for (int64_t i = 0; i < kCount; ++i) {
      const double n = normal(generator);
      values[i] = static_cast<T>(n * n * std::pow(10.0, static_cast<double>(i % 61) - 30));
    }
    values[0] = 0;
    values[1] = std::numeric_limits<T>::denorm_min();
    values[2] = std::numeric_limits<T>::infinity();
    values[3] = std::numeric_limits<T>::quiet_NaN();
    values[4] = std::numeric_limits<T>::max();
    // ATen's answer written into memory of our own: the probe allocates nothing through ATen's
    // allocator (a sharded prepare's peak host memory is held to its shards, and the probe runs
    // when a step is first proven).
    const auto options = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
    std::vector<T> expected(kCount);
    at::Tensor out = at::from_blob(expected.data(), {kCount}, options);
    at::sqrt_out(out, at::from_blob(values.data(), {kCount}, options));
    std::vector<T> got(kCount);
    for (int64_t offset = 0, length = 1; offset < kCount;
         offset += length, length = length % 67 + 1) {
      const int64_t n = std::min(length, kCount - offset);
      sqrt_of(n, values.data() + offset, got.data() + offset, util::kAtenVmlMode);
    }
    if (std::memcmp(got.data(), expected.data(), sizeof(T) * kCount) != 0) return nullptr;
    return sqrt_of;
  }();
  return checked;
}

// ---------------------------------------------------------------------------------------------
// Adam and AdamW

template <typename T>
struct AdamArgs {
  T* param;
  const T* grad;
  T* exp_avg;
  T* exp_avg_sq;
  T* max_exp_avg_sq;
  T decay_factor, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2;
  T root_correction, eps, negative_step_size;
};

// LibTorch, before the square root: p *= 1 - lr * weight_decay (AdamW) or grad = grad +
// weight_decay * p (Adam); exp_avg = exp_avg * beta1 + (1 - beta1) * grad; exp_avg_sq =
// exp_avg_sq * beta2 + (1 - beta2) * grad * grad; max_exp_avg_sq = max(max_exp_avg_sq,
// exp_avg_sq) (amsgrad).
template <typename T, bool kFused, bool kDecoupled, bool kDecay, bool kAmsgrad>
[[gnu::always_inline]] inline void adam_moments_body(const AdamArgs<T>& args, int64_t begin,
                                                     int64_t end) {
  T* __restrict param = args.param;
  const T* __restrict grad = args.grad;
  T* __restrict exp_avg = args.exp_avg;
  T* __restrict exp_avg_sq = args.exp_avg_sq;
  T* __restrict max_exp_avg_sq = args.max_exp_avg_sq;
  const T decay_factor = args.decay_factor, weight_decay = args.weight_decay;
  const T beta1 = args.beta1, one_minus_beta1 = args.one_minus_beta1;
  const T beta2 = args.beta2, one_minus_beta2 = args.one_minus_beta2;
  for (int64_t i = begin; i < end; ++i) {
    T g = grad[i];
    if constexpr (kDecay && kDecoupled) param[i] = param[i] * decay_factor;
    if constexpr (kDecay && !kDecoupled) g = add_scaled<T, kFused>(g, param[i], weight_decay);
    exp_avg[i] = add_scaled<T, kFused>(exp_avg[i] * beta1, g, one_minus_beta1);
    const T second = add_product<T, kFused>(exp_avg_sq[i] * beta2, g, g, one_minus_beta2);
    exp_avg_sq[i] = second;
    if constexpr (kAmsgrad) max_exp_avg_sq[i] = maximum(second, max_exp_avg_sq[i]);
  }
}

// LibTorch, after it: denom = sqrt(...) / sqrt(bias_correction2) + eps; p = p + (-step_size *
// exp_avg) / denom (addcdiv). `root` holds ATen's square roots of elements begin..end.
template <typename T>
[[gnu::always_inline]] inline void adam_update_body(const AdamArgs<T>& args, const T* root,
                                                    int64_t begin, int64_t end) {
  T* __restrict param = args.param;
  const T* __restrict exp_avg = args.exp_avg;
  const T* __restrict roots = root;
  const T root_correction = args.root_correction, eps = args.eps;
  const T negative_step_size = args.negative_step_size;
  for (int64_t i = begin; i < end; ++i) {
    const T denom = roots[i - begin] / root_correction + eps;
    const T scaled = negative_step_size * exp_avg[i];
    param[i] = param[i] + scaled / denom;
  }
}

template <typename T, bool kDecoupled, bool kDecay, bool kAmsgrad>
void adam_moments_separate(const AdamArgs<T>& args, int64_t begin, int64_t end) {
  adam_moments_body<T, false, kDecoupled, kDecay, kAmsgrad>(args, begin, end);
}

template <typename T, bool kDecoupled, bool kDecay, bool kAmsgrad>
ACCEL_FMA_TARGET void adam_moments_fused(const AdamArgs<T>& args, int64_t begin, int64_t end) {
  adam_moments_body<T, true, kDecoupled, kDecay, kAmsgrad>(args, begin, end);
}

template <typename T>
ACCEL_FMA_TARGET void adam_update_vectorized(const AdamArgs<T>& args, const T* root, int64_t begin,
                                             int64_t end) {
  adam_update_body(args, root, begin, end);
}

template <typename T>
void adam_update_plain(const AdamArgs<T>& args, const T* root, int64_t begin, int64_t end) {
  adam_update_body(args, root, begin, end);
}

template <typename T>
void adam_update(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                 const at::Tensor& exp_avg_sq, const at::Tensor& max_exp_avg_sq, int64_t step,
                 const AdamUpdate& update, bool fused) {
  // The same double arithmetic as LibTorch's step, each scalar then cast to T as ATen does.
  const double bias_correction1 = 1 - std::pow(update.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(update.beta2, static_cast<double>(step));
  const AdamArgs<T> args{param.data_ptr<T>(),
                         grad.data_ptr<T>(),
                         exp_avg.data_ptr<T>(),
                         exp_avg_sq.data_ptr<T>(),
                         update.amsgrad ? max_exp_avg_sq.data_ptr<T>() : nullptr,
                         static_cast<T>(1 - update.lr * update.weight_decay),
                         static_cast<T>(update.weight_decay),
                         static_cast<T>(update.beta1),
                         static_cast<T>(1 - update.beta1),
                         static_cast<T>(update.beta2),
                         static_cast<T>(1 - update.beta2),
                         static_cast<T>(std::sqrt(bias_correction2)),
                         static_cast<T>(update.eps),
                         static_cast<T>(-(update.lr / bias_correction1))};
  // The square roots are of the second moment, or of its maximum under amsgrad.
  const at::Tensor& rooted = update.amsgrad ? max_exp_avg_sq : exp_avg_sq;
  const T* rooted_data = rooted.data_ptr<T>();
  const int64_t size = param.numel();
  with_flag(update.decoupled_weight_decay, [&](auto decoupled) {
    with_flag(update.weight_decay != 0, [&](auto decay) {
      with_flag(update.amsgrad, [&](auto amsgrad) {
        constexpr bool kDecoupled = decltype(decoupled)::value, kDecay = decltype(decay)::value;
        constexpr bool kAmsgrad = decltype(amsgrad)::value;
        const VmlSqrt<T> sqrt_of = direct_sqrt<T>();
        const int64_t block_size = sqrt_of ? kDirectRootBlock : kRootBlock;
        // The op's input, flattened once (the direct path reads rooted_data and needs no view).
        const at::Tensor flat = sqrt_of ? at::Tensor() : rooted.view({-1});
        parallel_ranges(size, [&](int64_t begin, int64_t end) {
          // Through MKL, a buffer of the thread's own and no ATen op at all (a small model's
          // step is mostly per-parameter overhead); through the op, a tensor it writes into.
          thread_local std::vector<T> direct_roots;
          at::Tensor roots;
          T* root = nullptr;
          if (sqrt_of) {
            direct_roots.resize(static_cast<size_t>(block_size));
            root = direct_roots.data();
          } else {
            roots = at::empty({std::min(block_size, end - begin)}, rooted.options());
            root = roots.data_ptr<T>();
          }
          for (int64_t block = begin; block < end; block += block_size) {
            const int64_t block_end = std::min(block + block_size, end);
            const int64_t length = block_end - block;
            if (fused) {
              adam_moments_fused<T, kDecoupled, kDecay, kAmsgrad>(args, block, block_end);
            } else {
              adam_moments_separate<T, kDecoupled, kDecay, kAmsgrad>(args, block, block_end);
            }
            if (sqrt_of) {
              sqrt_of(length, rooted_data + block, root, util::kAtenVmlMode);
            } else {
              auto out = roots.narrow(0, 0, length);
              at::sqrt_out(out, flat.narrow(0, block, length));
            }
            if (fused) {
              adam_update_vectorized(args, root, block, block_end);
            } else {
              adam_update_plain(args, root, block, block_end);
            }
          }
        });
      });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// ATen's rounding

/// Which rounding ATen's add(alpha) and addcmul give on `count` probe values: both fused, both
/// separate, or (nullopt) something else.
template <typename T>
std::optional<AtenRounding> measure_rounding() {
  // Values from a generator of our own: the program's torch random state stays untouched.
  constexpr int64_t kCount = 1031;  // vector bodies of every width, and a scalar tail
  std::mt19937_64 generator(59);
  std::normal_distribution<double> normal;
  std::vector<T> a(kCount), b(kCount), c(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    a[i] = static_cast<T>(normal(generator));
    b[i] = static_cast<T>(normal(generator));
    c[i] = static_cast<T>(normal(generator));
  }
  const at::TensorOptions options = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  auto tensor = [&](std::vector<T>& values) -> at::Tensor {
    at::Tensor out = at::empty({kCount}, options);
    std::memcpy(out.data_ptr(), values.data(), sizeof(T) * values.size());
    return out;
  };
  const double alpha = 0.1, value = 1e-3;
  const at::Tensor added = at::add(tensor(a), tensor(b), alpha);
  const at::Tensor multiplied = at::addcmul(tensor(a), tensor(b), tensor(c), value);
  const T* add_out = static_cast<const T*>(added.data_ptr());
  const T* mul_out = static_cast<const T*>(multiplied.data_ptr());
  bool fused = true, separate = true;
  const T alpha_t = static_cast<T>(alpha), value_t = static_cast<T>(value);
  for (int64_t i = 0; i < kCount; ++i) {
    fused = fused && add_out[i] == add_scaled<T, true>(a[i], b[i], alpha_t) &&
            mul_out[i] == add_product<T, true>(a[i], b[i], c[i], value_t);
    separate = separate && add_out[i] == add_scaled<T, false>(a[i], b[i], alpha_t) &&
               mul_out[i] == add_product<T, false>(a[i], b[i], c[i], value_t);
  }
  // Both can hold only if the probe values never tell the two apart, which they do here.
  if (fused == separate) return std::nullopt;
#if defined(__x86_64__) || defined(__i386__)
  // The fused loops are compiled for AVX2 and FMA, which ATen's fusing kernels need too.
  if (fused && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    return std::nullopt;
  }
#endif
  return AtenRounding{fused};
}

}  // namespace

bool exact_cpu_dtype(c10::ScalarType type) { return type == c10::kFloat || type == c10::kDouble; }

std::optional<AtenRounding> aten_rounding(c10::ScalarType type) {
  // Once per process and dtype: ATen picks its CPU kernels once (ATEN_CPU_CAPABILITY).
  static const std::optional<AtenRounding> for_float = measure_rounding<float>();
  static const std::optional<AtenRounding> for_double = measure_rounding<double>();
  if (type == c10::kFloat) return for_float;
  if (type == c10::kDouble) return for_double;
  return std::nullopt;
}

bool direct_square_roots(c10::ScalarType type) {
  if (type == c10::kFloat) return direct_sqrt<float>() != nullptr;
  if (type == c10::kDouble) return direct_sqrt<double>() != nullptr;
  return false;
}

void exact_sgd_update(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& buffer,
                      bool first_step, const SgdUpdate& update, AtenRounding rounding) {
  const auto contiguous_grad = grad.contiguous();
  if (param.scalar_type() == c10::kFloat) {
    sgd_update<float>(param, contiguous_grad, buffer, first_step, update, rounding.fused);
  } else {
    TORCH_CHECK(param.scalar_type() == c10::kDouble, "accel: internal error: exact step dtype");
    sgd_update<double>(param, contiguous_grad, buffer, first_step, update, rounding.fused);
  }
}

void exact_adam_update(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                       const at::Tensor& exp_avg_sq, const at::Tensor& max_exp_avg_sq, int64_t step,
                       const AdamUpdate& update, AtenRounding rounding) {
  const auto contiguous_grad = grad.contiguous();
  if (param.scalar_type() == c10::kFloat) {
    adam_update<float>(param, contiguous_grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, update,
                       rounding.fused);
  } else {
    TORCH_CHECK(param.scalar_type() == c10::kDouble, "accel: internal error: exact step dtype");
    adam_update<double>(param, contiguous_grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, update,
                        rounding.fused);
  }
}

}  // namespace optim
}  // namespace accel
