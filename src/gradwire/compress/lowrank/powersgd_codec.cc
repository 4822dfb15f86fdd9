// `powersgd`: rank-r PowerSGD (Vogels et al. 2019; ALGORITHMS.md 3), spec
// `powersgd:rank=2,ef=1,seed=0,start=0,min_rate=0`. `start`: the first `start` steps go
// dense (fp32, exact), as DDP's start_powerSGD_iter: compression from the first step costs
// accuracy that later steps do not win back (the error feedback starts from a poor Q).
// `min_rate`: DDP's min_compression_rate. A matrix is compressed only when its factors are
// at least that many times smaller than it, (n + m) r min_rate < n m; otherwise it goes
// dense like a vector (fp32, exact, no collective of its own). 0 compresses every matrix;
// DDP's default is 2, which sends cnn's conv1 (32 x 25, rank 8: 456 floats for 800) and
// fc2 (10 x 128) dense.
//
// A tensor of two or more dimensions is a matrix M of n = shape[0] rows and m = numel/n
// columns (a convolution weight: C_out x C_in*kh*kw). Q starts N(0, 1) from a generator
// seeded by `seed` and the tensor's name, so every rank starts from the same Q, and is warm
// started from step to step. Error feedback (E) is the codec's own (key `ef`, on by
// default), because the low-rank protocol computes the error itself.
//
// One step, as DDP's powerSGD_hook: Q's columns orthonormalised, P = M Q, P averaged and
// orthonormalised, Q = M^T P, Q averaged, M ~ P Q^T. Orthonormalising Q first does not
// change span(P) but its conditioning: a warm Q = M^T P has columns of norm sigma_i, so
// without it P = M M^T P has columns of norm sigma_i^2, and the weak directions of a high
// rank drown in fp32 rounding beside the strong ones; small in L2, they are what AdamW
// amplifies (docs/results/powersgd-side-by-side: gpt's AdamW step error at rank 16 was
// 1.47x DDP's hook's before this, equal after). Gram-Schmidt runs twice
// ("twice is enough": orthogonal to working precision, as the QR that DDP uses from rank
// 3) with no epsilon: a column that vanishes (M of rank below r) becomes zero, so P P^T
// stays a projection and E keeps what it does not send.
//
// Faces:
//  * low rank (allreduce strategy): LowRankFace in codec.h, two allreduces per step.
//  * message (other strategies): the local factors. encode: M = a + E, P = orth(M Q),
//    Q = M^T P, send P and Q^T; decode_add: accum += P Q^T. Body: u32 rows | u32 cols |
//    u32 rank | f32 P[rows*rank] | f32 Qt[rank*cols]; during the dense start rank is 0 and
//    the body holds the rows*cols values.
// Tensors of fewer than two dimensions are not compressed: they behave exactly like `none`
// (additive, fp32), as in the reference implementation.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/layer_codecs.h"
#include "gradwire/compress/lowrank/low_rank_kernels.h"

namespace gradwire::compress {
namespace {

inline constexpr uint8_t kPowerSgdVersion = 1;
constexpr uint8_t kStateVersion = 1;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// N(0, 1) by Box-Muller over splitmix64: the same numbers on every platform.
void fill_normal(std::span<float> out, uint64_t seed) {
  uint64_t state = seed;
  for (size_t i = 0; i < out.size(); i += 2) {
    const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(radius * std::cos(2 * M_PI * u2));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(radius * std::sin(2 * M_PI * u2));
  }
}

uint64_t name_hash(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

class PowerSgdCodec final : public Codec, public LowRankFace {
 public:
  PowerSgdCodec(const TensorInfo& tensor, size_t rank, bool ef, uint64_t seed, size_t start,
                double min_rate, std::string spec)
      : spec_(std::move(spec)), ef_(ef), start_(start) {
    const size_t numel = tensor.numel();
    // A vector, or a matrix below min_rate: numel x 1, sent as it is.
    rows_ = numel;
    cols_ = 1;
    if (tensor.shape.size() < 2 || numel == 0) return;
    const size_t rows = static_cast<size_t>(tensor.shape[0]);
    const size_t cols = numel / rows;
    const size_t r = std::min({rank, rows, cols});
    if (static_cast<double>((rows + cols) * r) * min_rate >= static_cast<double>(numel)) return;
    matrix_ = true;
    rows_ = rows;
    cols_ = cols;
    rank_ = r;
    qt_.resize(rank_ * cols_);
    q_seed_ = seed ^ name_hash(tensor.name);
    fill_normal(qt_, q_seed_);
  }

  CodecId id() const override { return CodecId::kPowerSgd; }
  std::string spec() const override { return spec_; }
  std::optional<WireType> additive_wire() const override {
    return matrix_ ? std::nullopt : std::optional<WireType>(WireType::kFloat32);
  }
  LowRankFace* low_rank() override { return matrix_ ? this : nullptr; }

  // Vectors: plain fp32, like `none`.
  void to_wire(std::span<const float> input, float scale, void* wire) override {
    auto* out = static_cast<float*>(wire);
    for (size_t i = 0; i < input.size(); ++i) out[i] = scale * input[i];
  }
  void from_wire(const void* wire, std::span<float> out) const override {
    std::memcpy(out.data(), wire, out.size_bytes());
  }

  bool dense_now() const override { return steps_ < start_; }
  void count_dense_step() override { ++steps_; }

  size_t p_size() const override { return rows_ * rank_; }
  size_t q_size() const override { return rank_ * cols_; }

  void begin(std::span<const float> gradient, std::span<float> p) override {
    check_size(gradient.size());
    m_.resize(rows_ * cols_);
    if (ef_ && error_.size() == m_.size()) {
      for (size_t i = 0; i < m_.size(); ++i) m_[i] = gradient[i] + error_[i];
    } else {
      std::copy(gradient.begin(), gradient.end(), m_.begin());
    }
    prepare_q();
    multiply_mq(p);
  }

  void middle(std::span<const float> p_mean, std::span<float> q) override {
    p_.assign(p_mean.begin(), p_mean.end());
    orthonormalise_p();
    multiply_mtp(q);
  }

  void end(std::span<const float> q_mean, std::span<float> gradient) override {
    qt_.assign(q_mean.begin(), q_mean.end());
    reconstruct(gradient);
    if (ef_) {
      error_.resize(m_.size());
      for (size_t i = 0; i < m_.size(); ++i) error_[i] = m_[i] - gradient[i];
    }
    ++steps_;
  }

  void encode(std::span<const float> input, Bytes& out) override {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kPowerSgd, kPowerSgdVersion, checked_count(input.size(), id())}.write(
        writer);
    if (!matrix_ || dense_now()) {
      writer.put<uint32_t>(static_cast<uint32_t>(rows_));
      writer.put<uint32_t>(static_cast<uint32_t>(cols_));
      writer.put<uint32_t>(0);
      writer.put_array<float>(input);
      if (matrix_) count_dense_step();
      return;
    }
    p_.resize(p_size());
    std::vector<float> q(q_size());
    begin(input, p_);
    middle(p_, q);
    scratch_.resize(input.size());
    end(q, scratch_);
    writer.put<uint32_t>(static_cast<uint32_t>(rows_));
    writer.put<uint32_t>(static_cast<uint32_t>(cols_));
    writer.put<uint32_t>(static_cast<uint32_t>(rank_));
    writer.put_array<float>(p_);
    writer.put_array<float>(qt_);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kPowerSgd, kPowerSgdVersion, accum.size());
    const uint32_t rows = reader.get<uint32_t>("rows");
    const uint32_t cols = reader.get<uint32_t>("cols");
    const uint32_t rank = reader.get<uint32_t>("rank");
    // Rank 0: dense values (a vector, or a matrix during the dense start).
    if (rows != rows_ || cols != cols_ || (rank != 0 && (!matrix_ || rank != rank_))) {
      throw MismatchError(
          "'powersgd' payload is " + std::to_string(rows) + "x" + std::to_string(cols) +
          " of rank " + std::to_string(rank) + ", this tensor is " + std::to_string(rows_) + "x" +
          std::to_string(cols_) + " of rank " + std::to_string(matrix_ ? rank_ : 0));
    }
    if (rank == 0) {
      const auto values = reader.get_bytes(accum.size() * sizeof(float), "values");
      reader.expect_end("'powersgd' payload");
      for (size_t i = 0; i < accum.size(); ++i) accum[i] += load_f32(values.data(), i);
      return;
    }
    std::vector<float> p(size_t{rows} * rank), qt(size_t{rank} * cols);
    reader.get_array<float>(p, "P");
    reader.get_array<float>(qt, "Q");
    reader.expect_end("'powersgd' payload");
    add_p_qt(shape(), p, qt, accum);
  }

  // Checkpoints (matrices only; a vector is sent as it is and has no state): the steps so
  // far (the dense start), Q (the next step's warm start) and, with error feedback, the
  // error of the last approximation (none before the first compressed step).
  void save_state(Bytes& out) const override {
    if (!matrix_) return;
    write_state_header(out, *this, kStateVersion, rows_ * cols_);
    ByteWriter writer(out);
    writer.put<uint64_t>(steps_);
    writer.put<uint64_t>(qt_.size());
    writer.put_array<float>(qt_);
    writer.put<uint64_t>(error_.size());
    writer.put_array<float>(error_);
  }
  void load_state(ByteReader& in) override {
    if (!matrix_) return;
    read_state_header(in, *this, kStateVersion, rows_ * cols_);
    const auto steps = in.get<uint64_t>("powersgd steps");
    const auto q_size = in.get<uint64_t>("powersgd Q size");
    if (q_size != qt_.size()) {
      throw PayloadError("corrupt 'powersgd' state: a Q of " + std::to_string(q_size) +
                         " values where this codec's Q (rank " + std::to_string(rank_) + ", " +
                         std::to_string(cols_) + " columns) has " + std::to_string(qt_.size()));
    }
    std::vector<float> qt(qt_.size());
    in.get_array<float>(std::span<float>(qt), "powersgd Q");
    const auto error_size = in.get<uint64_t>("powersgd error size");
    const uint64_t error_full = ef_ ? rows_ * cols_ : 0;
    if (error_size != 0 && error_size != error_full) {
      throw PayloadError("corrupt 'powersgd' state: an error of " + std::to_string(error_size) +
                         " values where this codec keeps 0 or " + std::to_string(error_full));
    }
    std::vector<float> error(static_cast<size_t>(error_size));
    in.get_array<float>(std::span<float>(error), "powersgd error");
    steps_ = static_cast<size_t>(steps);
    qt_ = std::move(qt);
    error_ = std::move(error);
  }

 private:
  void check_size(size_t n) const {
    if (n != rows_ * cols_) {
      throw Error("'powersgd' codec for " + std::to_string(rows_ * cols_) + " elements was given " +
                  std::to_string(n));
    }
  }

  LowRankShape shape() const { return {rows_, cols_, rank_}; }

  // P = M Q: p[i][c] = M[i,:] . Qt[c,:]
  void multiply_mq(std::span<float> p) const { multiply_m_q(shape(), m_, qt_, p); }

  // Q = M^T P: Qt[c,:] = sum_i P[i][c] M[i,:]
  void multiply_mtp(std::span<float> q) const { multiply_mt_p(shape(), m_, p_, q); }

  // out = P Q^T: out[i,:] = sum_c P[i][c] Qt[c,:]
  void reconstruct(std::span<float> out) const {
    std::fill(out.begin(), out.end(), 0.0f);
    add_p_qt(shape(), p_, qt_, out);
  }

  // Q's columns (Qt's rows) orthonormalised. One that vanished (a zero gradient made
  // Q = M^T P zero) restarts from a seeded normal one, the same on every rank (Q is the
  // ranks' mean, steps_ their count), so a layer whose gradient was zero for a step is not
  // stuck at zero from then on.
  void prepare_q() {
    orthonormalise_vectors(qt_, rank_, cols_);
    bool refilled = false;
    for (size_t c = 0; c < rank_; ++c) {
      const std::span<float> column(&qt_[c * cols_], cols_);
      if (std::any_of(column.begin(), column.end(), [](float v) { return v != 0.0f; })) continue;
      fill_normal(column, q_seed_ + 0x9E3779B97F4A7C15ULL * (steps_ + 1) + c);
      refilled = true;
    }
    if (refilled) orthonormalise_vectors(qt_, rank_, cols_);
  }

  // P's columns (P is rows x rank, row-major) orthonormalised through a column-major copy.
  void orthonormalise_p() {
    column_.resize(rows_ * rank_);
    for (size_t i = 0; i < rows_; ++i) {
      for (size_t c = 0; c < rank_; ++c) column_[c * rows_ + i] = p_[i * rank_ + c];
    }
    orthonormalise_vectors(column_, rank_, rows_);
    for (size_t i = 0; i < rows_; ++i) {
      for (size_t c = 0; c < rank_; ++c) p_[i * rank_ + c] = column_[c * rows_ + i];
    }
  }

  std::string spec_;
  bool ef_;
  size_t start_ = 0;  // dense steps first
  size_t steps_ = 0;  // steps exchanged so far (dense or not)
  bool matrix_ = false;
  size_t rows_ = 0, cols_ = 0, rank_ = 0;
  uint64_t q_seed_ = 0;  // of the first Q, and of a column that vanished
  std::vector<float> m_, p_, qt_, error_, column_, scratch_;
};

}  // namespace

std::unique_ptr<Codec> make_powersgd_codec(SpecReader& reader, const TensorInfo& tensor) {
  const long long rank = reader.get_int_in("rank", 2, 1, 1024);
  const bool ef = reader.get_bool("ef", true);
  const long long seed = reader.get_int_in("seed", 0, 0, INT64_MAX);
  const long long start = reader.get_int_in("start", 0, 0, INT64_MAX);
  const double min_rate = reader.get_double_in("min_rate", 0, 0, 1e6);
  std::string spec = "powersgd:ef=" + std::string(ef ? "1" : "0") +
                     ",min_rate=" + format_number(min_rate) + ",rank=" + std::to_string(rank) +
                     ",seed=" + std::to_string(seed) + ",start=" + std::to_string(start);
  return std::make_unique<PowerSgdCodec>(tensor, static_cast<size_t>(rank), ef,
                                         static_cast<uint64_t>(seed), static_cast<size_t>(start),
                                         min_rate, std::move(spec));
}

}  // namespace gradwire::compress
