#include "gradwire/strategy/ps/updater.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "gradwire/core/error.h"

namespace gradwire::strategy::ps {
namespace {

UpdaterOptions options_of(const std::string& spec, double lr, double momentum,
                          double weight_decay = 0.0) {
  UpdaterOptions o = UpdaterOptions::parse(spec);
  o.lr = lr;
  o.momentum = momentum;
  o.weight_decay = weight_decay;
  return o;
}

// One push of one slice (slice 0).
void push(Updater& u, int worker, uint64_t tau, std::vector<float>& w, const std::vector<float>& g,
          const std::vector<float>& b = {}) {
  const SliceUpdate s{0, w, g, b};
  u.apply(worker, tau, std::span<const SliceUpdate>(&s, 1));
}

void expect_floats(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "at " << i;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// ---- hand-computed examples --------------------------------------------------------------
// Numbers are chosen so that every intermediate is exact in fp32.

TEST(PsUpdater, SgdByHand) {
  // lr = 0.5, mu = 0.5, wd = 0.25.
  Updater u(options_of("sgd", 0.5, 0.5, 0.25), {2}, 1);
  std::vector<float> w{1.0f, 2.0f};
  const std::vector<float> g{0.5f, -1.0f};
  push(u, 0, /*tau=*/3, w, g);  // staleness is ignored
  // d = g + 0.25 w = [0.5 + 0.25, -1 + 0.5] = [0.75, -0.5]; v = d
  // w = w - 0.5 v = [1 - 0.375, 2 + 0.25] = [0.625, 2.25]
  expect_floats(w, {0.625f, 2.25f});
  push(u, 0, 0, w, g);
  // d = [0.5 + 0.15625, -1 + 0.5625] = [0.65625, -0.4375]
  // v = 0.5 [0.75, -0.5] + d = [0.375 + 0.65625, -0.25 - 0.4375] = [1.03125, -0.6875]
  // w = [0.625 - 0.515625, 2.25 + 0.34375] = [0.109375, 2.59375]
  expect_floats(w, {0.109375f, 2.59375f});
}

TEST(PsUpdater, AsgdStalenessByHand) {
  // lr = 0.5, mu = 0.5, wd = 0.
  Updater u(options_of("asgd-staleness", 0.5, 0.5), {2}, 4);
  std::vector<float> w{1.0f, 2.0f};
  const std::vector<float> g{1.0f, -2.0f};
  push(u, 2, /*tau=*/4, w, g);
  // d = g / max(1, 4) = [0.25, -0.5]; v = d; w = [1 - 0.125, 2 + 0.25] = [0.875, 2.25]
  expect_floats(w, {0.875f, 2.25f});
  push(u, 1, /*tau=*/0, w, g);
  // d = g / max(1, 0) = [1, -2]; v = 0.5 [0.25, -0.5] + [1, -2] = [1.125, -2.25]
  // w = [0.875 - 0.5625, 2.25 + 1.125] = [0.3125, 3.375]
  expect_floats(w, {0.3125f, 3.375f});
}

TEST(PsUpdater, DcAsgdByHand) {
  // lambda = 0.5, lr = 0.5, mu = 0.5, wd = 0.
  Updater u(options_of("dc-asgd:lambda=0.5", 0.5, 0.5), {3}, 2);
  std::vector<float> w{1.0f, 2.0f, -1.0f};
  const std::vector<float> g{1.0f, 2.0f, 2.0f};
  const std::vector<float> b{0.0f, 2.0f, 1.0f};
  push(u, 0, 1, w, g, b);
  // w - b = [1, 0, -2]; g^2 = [1, 4, 4]; c = 0.5 g^2 (w - b) = [0.5, 0, -4]
  // d = g + c = [1.5, 2, -2]; v = d; w = w - 0.5 v = [1 - 0.75, 2 - 1, -1 + 1] = [0.25, 1, 0]
  expect_floats(w, {0.25f, 1.0f, 0.0f});
  push(u, 0, 1, w, g, b);
  // w - b = [0.25, -1, -1]; c = 0.5 [1, 4, 4] [0.25, -1, -1] = [0.125, -2, -2]
  // d = [1.125, 0, 0]; v = 0.5 [1.5, 2, -2] + d = [1.875, 1, -1]
  // w = [0.25 - 0.9375, 1 - 0.5, 0 + 0.5] = [-0.6875, 0.5, 0.5]
  expect_floats(w, {-0.6875f, 0.5f, 0.5f});
}

// eps = 1e-30 vanishes next to MS in fp32, so the square roots below are exact.
constexpr const char* kAdaptive = "dc-asgd-a:lambda0=0.5,ms_decay=0.75,eps=1e-30";

TEST(PsUpdater, DcAsgdAdaptiveByHand) {
  // lambda0 = 0.5, ms_decay = 0.75, lr = 0.125, mu = 0.5, wd = 0.
  Updater u(options_of(kAdaptive, 0.125, 0.5), {2}, 2);
  std::vector<float> w{1.0f, 2.0f};
  const std::vector<float> b{0.0f, 1.0f};
  push(u, 0, 1, w, {2.0f, 4.0f}, b);
  // MS = 0.75 0 + 0.25 [4, 16] = [1, 4]; lam = 0.5 / sqrt(MS) = [0.5, 0.25]
  // w - b = [1, 1]; c = lam g^2 (w - b) = [0.5 4, 0.25 16] = [2, 4]; d = g + c = [4, 8]
  // v = d; w = w - 0.125 v = [1 - 0.5, 2 - 1] = [0.5, 1]
  expect_floats(w, {0.5f, 1.0f});
  push(u, 0, 1, w, {1.0f, 2.0f}, b);
  // MS = 0.75 [1, 4] + 0.25 [1, 4] = [1, 4]; lam = [0.5, 0.25]
  // w - b = [0.5, 0]; c = [0.5 1 0.5, 0] = [0.25, 0]; d = [1.25, 2]
  // v = 0.5 [4, 8] + [1.25, 2] = [3.25, 6]; w = [0.5 - 0.40625, 1 - 0.75] = [0.09375, 0.25]
  expect_floats(w, {0.09375f, 0.25f});
}

TEST(PsUpdater, DcAsgdAdaptiveKeepsMeanSquarePerWorker) {
  Updater u(options_of(kAdaptive, 0.125, 0.0), {2}, 2);
  std::vector<float> w{1.0f, 2.0f};
  const std::vector<float> g{2.0f, 4.0f}, b{0.0f, 1.0f};
  push(u, 0, 1, w, g, b);  // as above: MS_0 = [1, 4], c = [2, 4], w = [0.5, 1]
  expect_floats(w, {0.5f, 1.0f});
  // Worker 1's MS starts at 0: MS_1 = [1, 4] (worker 0's would now be [1.75, 7]).
  // w - b = [0.5, 0]; c = [0.5 4 0.5, 0] = [1, 0]; d = [3, 4]; mu = 0: v = d
  // w = [0.5 - 0.375, 1 - 0.5] = [0.125, 0.5]
  push(u, 1, 1, w, g, b);
  expect_floats(w, {0.125f, 0.5f});
}

// lambda0 = 0.5, ms_decay = 0.75, eps ~ 0, tau_bar_decay = 0.5.
constexpr const char* kDynamic = "ddc-asgd:lambda0=0.5,ms_decay=0.75,eps=1e-30,tau_bar_decay=0.5";

TEST(PsUpdater, DdcAsgdByHand) {
  // lr = 0.125, mu0 = 0.5, wd = 0, 2 workers: tau_bar = 1.
  Updater u(options_of(kDynamic, 0.125, 0.5), {2}, 2);
  EXPECT_EQ(u.tau_bar(), 1.0);
  std::vector<float> w{1.0f, 2.0f};
  const std::vector<float> g{2.0f, 4.0f};
  push(u, 0, /*tau=*/3, w, g, {0.5f, 1.5f});
  // a = min(1, 2 / 4) = 0.5; f = min(1, 3 / 3) = 1; mu_t = 1 - 0.5 (1 - 0.5) = 0.75
  // MS_0 = [1, 4]; lam = [0.5, 0.25]; w - b = [0.5, 0.5]; c = lam g^2 (w - b) = [1, 2]
  // ||c|| = sqrt(5) <= ||g|| = sqrt(20): no clipping
  // v = 0.75 0 + 0.5 (g + c) = 0.5 [3, 6] = [1.5, 3]
  // w = [1 - 0.1875, 2 - 0.375] = [0.8125, 1.625]
  expect_floats(w, {0.8125f, 1.625f});
  // tau_bar = 0.5 1 + 0.5 3 = 2
  EXPECT_DOUBLE_EQ(u.tau_bar(), 2.0);
  push(u, 1, /*tau=*/7, w, g, {-0.1875f, 0.625f});
  // a = min(1, 3 / 8) = 0.375; f = min(1, 5 / 7) = 5/7; mu_t = 1 - 0.375 0.5 = 0.8125
  // MS_1 = [1, 4]; lam = [0.5, 0.25]; w - b = [1, 1]
  // c = lam f g^2 (w - b) = [2 5/7, 4 5/7] = [10/7, 20/7]; ||c|| = 3.19 <= 4.47: no clipping
  // g + c = [24/7, 48/7]
  // v = 0.8125 [1.5, 3] + 0.375 [24/7, 48/7] = [1.21875 + 9/7, 2.4375 + 18/7]
  //   = [2.50446428..., 5.00892857...]
  // w = [0.8125 - 0.125 2.50446428, 1.625 - 0.125 5.00892857] = [0.49944196..., 0.99888392...]
  expect_near(w, {0.8125 - 0.125 * (1.21875 + 9.0 / 7.0), 1.625 - 0.125 * (2.4375 + 18.0 / 7.0)},
              1e-6);
  EXPECT_NEAR(w[0], 0.49944196, 1e-6);
  EXPECT_NEAR(w[1], 0.99888392, 1e-6);
  // tau_bar = 0.5 2 + 0.5 7 = 4.5
  EXPECT_DOUBLE_EQ(u.tau_bar(), 4.5);
}

TEST(PsUpdater, DdcAsgdClipsCompensationPerSlice) {
  // lr = 0.125, mu0 = 0.5, 2 workers: tau_bar = 1; tau = 1 so a = f = 1, mu_t = 0.5.
  Updater ddc(options_of(kDynamic, 0.125, 0.5), {2, 1}, 2);
  Updater dca(options_of(kAdaptive, 0.125, 0.5), {2, 1}, 2);
  std::vector<float> w0{1.0f, 2.0f}, w1{1.0f};
  std::vector<float> x0 = w0, x1 = w1;
  const std::vector<float> g0{2.0f, 4.0f}, b0{-1.0f, 0.0f}, g1{1.0f}, b1{1.0f};
  const std::vector<SliceUpdate> push_ddc{{0, w0, g0, b0}, {1, w1, g1, b1}};
  const std::vector<SliceUpdate> push_dca{{0, x0, g0, b0}, {1, x1, g1, b1}};
  ddc.apply(0, 1, push_ddc);
  dca.apply(0, 1, push_dca);
  // Slice 0: MS = [1, 4]; lam = [0.5, 0.25]; w - b = [2, 2]; c = [0.5 4 2, 0.25 16 2] = [4, 8]
  // ||c|| = sqrt(80) > ||g|| = sqrt(20): c *= sqrt(20) / sqrt(80) = 0.5 -> c = [2, 4]
  // v = g + c = [4, 8]; w = [1 - 0.5, 2 - 1] = [0.5, 1]
  expect_floats(w0, {0.5f, 1.0f});
  // dc-asgd-a does not clip: v = g + [4, 8] = [6, 12]; w = [1 - 0.75, 2 - 1.5] = [0.25, 0.5]
  expect_floats(x0, {0.25f, 0.5f});
  // Slice 1 (clipped or not on its own): w - b = 0, c = 0; v = g = 1; w = 1 - 0.125 = 0.875
  expect_floats(w1, {0.875f});
  expect_floats(x1, {0.875f});
}

// ---- references and equivalences ---------------------------------------------------------

TEST(PsUpdater, SgdMatchesTorchFormula) {
  const double lr = 0.05, mu = 0.9, wd = 1e-4;
  const std::vector<size_t> sizes{7, 5};
  Updater u(options_of("sgd", lr, mu, wd), sizes, 1);
  std::vector<std::vector<float>> w{random_vector(7, 1), random_vector(5, 2)};
  auto ref = w;
  std::vector<std::vector<float>> buf{std::vector<float>(7), std::vector<float>(5)};
  for (int step = 0; step < 8; ++step) {
    std::vector<std::vector<float>> g{random_vector(7, 10 + step), random_vector(5, 50 + step)};
    u.apply(0, 0, std::vector<SliceUpdate>{{0, w[0], g[0], {}}, {1, w[1], g[1], {}}});
    // torch::optim::SGD::step (dampening 0, no nesterov), in fp32:
    //   d_p = grad.add(p, weight_decay); buf = d_p.clone() on the first step, else
    //   buf.mul_(momentum).add_(d_p); p.add_(buf, -lr)
    for (size_t s = 0; s < 2; ++s) {
      for (size_t i = 0; i < ref[s].size(); ++i) {
        const float d = g[s][i] + static_cast<float>(wd) * ref[s][i];
        buf[s][i] = step == 0 ? d : static_cast<float>(mu) * buf[s][i] + d;
        ref[s][i] = ref[s][i] + static_cast<float>(-lr) * buf[s][i];
      }
    }
    for (size_t s = 0; s < 2; ++s) expect_floats(w[s], ref[s]);
  }
}

TEST(PsUpdater, AsgdStalenessWithoutStalenessIsSgd) {
  Updater sgd(options_of("sgd", 0.1, 0.9, 1e-3), {6}, 2);
  Updater asgd(options_of("asgd-staleness", 0.1, 0.9, 1e-3), {6}, 2);
  std::vector<float> w = random_vector(6, 3), x = w;
  for (int step = 0; step < 5; ++step) {
    const auto g = random_vector(6, 20 + step);
    push(sgd, step % 2, 5, w, g);
    push(asgd, step % 2, step % 2, x, g);  // tau 0 or 1: lr / max(1, tau) = lr
  }
  expect_floats(x, w);
}

TEST(PsUpdater, DdcAsgdWithSmallStalenessIsDcAsgdAdaptive) {
  const int workers = 4;  // tau_bar starts at 3
  const std::vector<size_t> sizes{9, 4};
  const std::string params = ":lambda0=2,ms_decay=0.95,eps=1e-7";
  Updater ddc(options_of("ddc-asgd" + params + ",tau_bar_decay=0.9", 0.05, 0.9, 1e-4), sizes,
              workers);
  Updater dca(options_of("dc-asgd-a" + params, 0.05, 0.9, 1e-4), sizes, workers);
  std::vector<std::vector<float>> w{random_vector(9, 5), random_vector(4, 6)};
  auto x = w;
  for (int step = 0; step < 12; ++step) {
    const int worker = step % workers;
    // tau <= tau_bar, so a = f = 1.
    const auto tau = static_cast<uint64_t>(step) % (static_cast<uint64_t>(ddc.tau_bar()) + 1);
    std::vector<std::vector<float>> g{random_vector(9, 100 + step), random_vector(4, 200 + step)};
    // Backups close to w keep ||c|| well under ||g|| (no clipping).
    std::vector<std::vector<float>> b = w;
    for (size_t s = 0; s < 2; ++s) {
      const auto noise = random_vector(b[s].size(), 300 + step, 1e-3f);
      for (size_t i = 0; i < b[s].size(); ++i) b[s][i] += noise[i];
    }
    ddc.apply(worker, tau, std::vector<SliceUpdate>{{0, w[0], g[0], b[0]}, {1, w[1], g[1], b[1]}});
    dca.apply(worker, tau, std::vector<SliceUpdate>{{0, x[0], g[0], b[0]}, {1, x[1], g[1], b[1]}});
    for (size_t s = 0; s < 2; ++s) expect_floats(w[s], x[s]);
  }
  EXPECT_LT(ddc.tau_bar(), 3.0);  // it moved, and every tau followed it
}

TEST(PsUpdater, TauBarIsAnEmaOfStalenessForDdcOnly) {
  Updater ddc(options_of("ddc-asgd:tau_bar_decay=0.5", 0.1, 0.9), {1}, 5);
  Updater dca(options_of("dc-asgd-a", 0.1, 0.9), {1}, 5);
  EXPECT_EQ(ddc.tau_bar(), 4.0);  // num_workers - 1
  std::vector<float> w{1.0f};
  const std::vector<float> g{0.5f}, b{1.0f};
  ddc.apply(0, 8, {});  // a push with no slices still counts: 0.5 4 + 0.5 8 = 6
  EXPECT_DOUBLE_EQ(ddc.tau_bar(), 6.0);
  push(ddc, 1, 0, w, g, b);  // 0.5 6 + 0.5 0 = 3
  EXPECT_DOUBLE_EQ(ddc.tau_bar(), 3.0);
  push(ddc, 2, 3, w, g, b);  // 0.5 3 + 0.5 3 = 3
  EXPECT_DOUBLE_EQ(ddc.tau_bar(), 3.0);
  push(dca, 0, 100, w, g, b);
  EXPECT_EQ(dca.tau_bar(), 4.0);
  // Default decay 0.99: 0.99 4 + 0.01 14 = 4.1
  Updater slow(options_of("ddc-asgd", 0.1, 0.9), {1}, 5);
  slow.apply(0, 14, {});
  EXPECT_NEAR(slow.tau_bar(), 4.1, 1e-12);
}

// ---- validation --------------------------------------------------------------------------

TEST(PsUpdater, ApplyRejectsBadPushesWithoutChangingAnything) {
  Updater u(options_of("dc-asgd", 0.1, 0.9), {2, 3}, 2);
  std::vector<float> w{1.0f, 2.0f}, w3{1.0f, 2.0f, 3.0f};
  const std::vector<float> g{1.0f, 1.0f}, g3{1.0f, 1.0f, 1.0f}, b{0.0f, 0.0f};
  const auto rejects = [&](int worker, std::vector<SliceUpdate> slices, const char* needle) {
    try {
      u.apply(worker, 0, slices);
      ADD_FAILURE() << "no exception for " << needle;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  rejects(-1, {{0, w, g, b}}, "worker -1 is out of range");
  rejects(2, {{0, w, g, b}}, "worker 2 is out of range");
  rejects(0, {{0, w, g, b}, {2, w, g, b}}, "slice 2 is out of range");
  rejects(0, {{1, w, g, b}}, "weights span has 2");
  rejects(0, {{1, w3, g, b}}, "gradient span has 2");
  rejects(0, {{0, w, g, {}}}, "backup span has 0");  // dc-asgd reads the backup
  rejects(0, {{0, w, g, b}, {0, w, g, b}}, "given twice");
  // Nothing was applied: the first slice of each rejected push is untouched.
  expect_floats(w, {1.0f, 2.0f});
  Bytes before, after;
  Updater fresh(options_of("dc-asgd", 0.1, 0.9), {2, 3}, 2);
  u.save(before);
  fresh.save(after);
  EXPECT_EQ(before, after);
  // Kinds that ignore the backup take an empty one, but not a wrong-sized one.
  Updater sgd(options_of("sgd", 0.1, 0.9), {2}, 1);
  EXPECT_NO_THROW(push(sgd, 0, 0, w, g));
  EXPECT_THROW(push(sgd, 0, 0, w, g, {1.0f}), ConfigError);
}

TEST(PsUpdater, RejectsBadOptions) {
  const auto rejects = [](UpdaterOptions o, const char* needle) {
    try {
      Updater u(o, {1}, 1);
      ADD_FAILURE() << "no exception for " << needle;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  UpdaterOptions o;
  o.lr = 0;
  rejects(o, "lr=0 is out of range (0, inf)");
  o = {};
  o.lr = NAN;
  rejects(o, "lr=");
  o = {};
  o.momentum = 1;
  rejects(o, "momentum=1 is out of range [0, 1)");
  o = {};
  o.momentum = -0.1;
  rejects(o, "momentum=");
  o = {};
  o.weight_decay = -1;
  rejects(o, "weight_decay=");
  o = {};
  o.lambda = -1;
  rejects(o, "lambda=");
  o = {};
  o.lambda0 = -1;
  rejects(o, "lambda0=");
  o = {};
  o.ms_decay = 1;
  rejects(o, "ms_decay=");
  o = {};
  o.eps = 0;
  rejects(o, "eps=");
  o = {};
  o.tau_bar_decay = 1;
  rejects(o, "tau_bar_decay=");
  EXPECT_THROW(Updater(UpdaterOptions{}, {1}, 0), ConfigError);
  EXPECT_NO_THROW(Updater(UpdaterOptions{}, {}, 1));
}

// ---- specs -------------------------------------------------------------------------------

TEST(PsUpdater, SpecIsCanonicalAndRoundTrips) {
  EXPECT_EQ(UpdaterOptions::parse("sgd").spec(), "sgd");
  EXPECT_EQ(UpdaterOptions::parse("asgd-staleness").spec(), "asgd-staleness");
  EXPECT_EQ(UpdaterOptions::parse("dc-asgd").spec(), "dc-asgd:lambda=0.04");
  EXPECT_EQ(UpdaterOptions::parse("dc-asgd-a").spec(),
            "dc-asgd-a:eps=1e-07,lambda0=2,ms_decay=0.95");
  EXPECT_EQ(UpdaterOptions::parse("ddc-asgd").spec(),
            "ddc-asgd:eps=1e-07,lambda0=2,ms_decay=0.95,tau_bar_decay=0.99");
  EXPECT_EQ(UpdaterOptions::parse(" ddc-asgd : tau_bar_decay=0.9, lambda0=1.5").spec(),
            "ddc-asgd:eps=1e-07,lambda0=1.5,ms_decay=0.95,tau_bar_decay=0.9");
  for (const std::string& name : updater_names()) {
    const UpdaterOptions o = UpdaterOptions::parse(name);
    EXPECT_EQ(updater_name(o.kind), name);
    EXPECT_EQ(UpdaterOptions::parse(o.spec()).spec(), o.spec());
    EXPECT_EQ(o.lr, UpdaterOptions{}.lr);  // not spec keys: the defaults
    EXPECT_EQ(o.momentum, UpdaterOptions{}.momentum);
  }
  UpdaterOptions o = UpdaterOptions::parse("dc-asgd-a:lambda0=0.1,ms_decay=0.3,eps=3e-9");
  const UpdaterOptions back = UpdaterOptions::parse(o.spec());
  EXPECT_EQ(back.kind, UpdaterKind::kDcAsgdAdaptive);
  EXPECT_EQ(back.lambda0, 0.1);
  EXPECT_EQ(back.ms_decay, 0.3);
  EXPECT_EQ(back.eps, 3e-9);
  o.kind = UpdaterKind::kDcAsgd;
  o.lambda = 1.0 / 3.0;  // shortest round-trip text
  EXPECT_EQ(UpdaterOptions::parse(o.spec()).lambda, 1.0 / 3.0);
  EXPECT_TRUE(reads_backup(UpdaterKind::kDcAsgd));
  EXPECT_FALSE(reads_backup(UpdaterKind::kAsgdStaleness));
}

TEST(PsUpdater, SpecErrorsListWhatExists) {
  const auto message = [](const std::string& spec) -> std::string {
    try {
      UpdaterOptions::parse(spec);
    } catch (const ConfigError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no ConfigError for " << spec;
    return "";
  };
  const std::string unknown = message("adam");
  for (const std::string& name : updater_names()) {
    EXPECT_NE(unknown.find(name), std::string::npos) << unknown;
  }
  const std::string key = message("ddc-asgd:lambda=1");
  EXPECT_NE(key.find("has no parameter lambda"), std::string::npos) << key;
  EXPECT_NE(key.find("eps, lambda0, ms_decay, tau_bar_decay"), std::string::npos) << key;
  EXPECT_NE(message("dc-asgd:lambda0=1").find("its parameters are: lambda"), std::string::npos);
  EXPECT_NE(message("sgd:lr=0.1").find("takes no parameters"), std::string::npos);
  EXPECT_NE(message("dc-asgd-a:ms_decay=1").find("ms_decay=1 is out of range"), std::string::npos);
  EXPECT_NE(message("dc-asgd:lambda=x").find("not a finite number"), std::string::npos);
  EXPECT_NE(message("ddc-asgd:tau_bar_decay=-0.5").find("tau_bar_decay"), std::string::npos);
  EXPECT_NE(message("dc-asgd-a:eps=0").find("eps=0"), std::string::npos);
}

// ---- checkpoints -------------------------------------------------------------------------

// Random pushes of random workers, with random staleness, on both slices.
void run_pushes(Updater& u, std::vector<std::vector<float>>& w, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int k = 0; k < count; ++k) {
    const int worker = static_cast<int>(rng() % static_cast<uint32_t>(u.num_workers()));
    const uint64_t tau = rng() % 6;
    std::vector<std::vector<float>> g, b;
    for (size_t s = 0; s < w.size(); ++s) {
      g.push_back(random_vector(w[s].size(), seed * 100 + k * 2 + s));
      b.push_back(random_vector(w[s].size(), seed * 100 + k * 2 + s + 50, 0.1f));
      for (size_t i = 0; i < b[s].size(); ++i) b[s][i] += w[s][i];
    }
    std::vector<SliceUpdate> slices;
    for (size_t s = 0; s < w.size(); ++s) slices.push_back({s, w[s], g[s], b[s]});
    u.apply(worker, tau, slices);
  }
}

TEST(PsUpdater, SaveLoadContinuesIdentically) {
  const std::vector<size_t> sizes{3, 2};
  for (const std::string& name : updater_names()) {
    SCOPED_TRACE(name);
    const UpdaterOptions o = options_of(name, 0.05, 0.9, 1e-3);
    Updater a(o, sizes, 3);
    std::vector<std::vector<float>> w{random_vector(3, 1), random_vector(2, 2)};
    run_pushes(a, w, 5, 7);
    Bytes saved;
    a.save(saved);
    Updater b(o, sizes, 3);
    b.load(saved);
    EXPECT_EQ(b.tau_bar(), a.tau_bar());
    auto x = w;
    run_pushes(a, w, 6, 8);
    run_pushes(b, x, 6, 8);
    for (size_t s = 0; s < w.size(); ++s) {
      for (size_t i = 0; i < w[s].size(); ++i) EXPECT_EQ(w[s][i], x[s][i]);
    }
    EXPECT_EQ(b.tau_bar(), a.tau_bar());
    Bytes sa, sb;
    a.save(sa);
    b.save(sb);
    EXPECT_EQ(sa, sb);
  }
}

TEST(PsUpdater, LoadRejectsBadBytesAndKeepsState) {
  const std::vector<size_t> sizes{3, 2};
  const UpdaterOptions o = options_of("ddc-asgd:tau_bar_decay=0.5", 0.05, 0.9);
  Updater source(o, sizes, 3);
  std::vector<std::vector<float>> w{random_vector(3, 1), random_vector(2, 2)};
  run_pushes(source, w, 4, 3);
  Bytes good;
  source.save(good);

  Updater target(o, sizes, 3);
  run_pushes(target, w, 3, 4);  // state different from source's
  Bytes before;
  target.save(before);
  ASSERT_NE(before, good);
  const auto unchanged = [&] {
    Bytes now;
    target.save(now);
    EXPECT_EQ(now, before);
  };

  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(target.load(std::span<const uint8_t>(good.data(), n)), PayloadError) << n;
  }
  unchanged();
  Bytes longer = good;
  longer.push_back(0);
  EXPECT_THROW(target.load(longer), PayloadError);
  Bytes bad_magic = good;
  bad_magic[0] ^= 0xff;
  EXPECT_THROW(target.load(bad_magic), PayloadError);
  Bytes negative_ms = good;  // the last float is an MS
  const float minus_one = -1.0f;
  std::memcpy(negative_ms.data() + negative_ms.size() - 4, &minus_one, 4);
  EXPECT_THROW(target.load(negative_ms), PayloadError);
  unchanged();

  // Other configurations: slice sizes, number of slices, workers, kind.
  const auto rejects = [&](Updater other, const char* needle) {
    Bytes theirs, after;
    other.save(theirs);
    try {
      target.load(theirs);
      ADD_FAILURE() << "no exception for " << needle;
    } catch (const PayloadError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    // and the other way round
    Bytes other_before;
    other.save(other_before);
    EXPECT_THROW(other.load(good), PayloadError);
    other.save(after);
    EXPECT_EQ(after, other_before);
  };
  rejects(Updater(o, {3, 3}, 3), "slice 1 has 3 elements");
  rejects(Updater(o, {3}, 3), "1 slices");
  rejects(Updater(o, sizes, 2), "2 workers");
  rejects(Updater(options_of("dc-asgd-a", 0.05, 0.9), sizes, 3), "saved by updater 'dc-asgd-a:");
  unchanged();

  // Same configuration with other options (lr, spec keys) loads: the state fits.
  Updater other_lr(options_of("ddc-asgd", 0.5, 0.0), sizes, 3);
  EXPECT_NO_THROW(other_lr.load(good));
  EXPECT_EQ(other_lr.tau_bar(), source.tau_bar());
  EXPECT_EQ(other_lr.options().lr, 0.5);
}

TEST(PsUpdater, StateBytes) {
  // N = 5 coordinates, M = 4 workers: 4 N, plus 4 N M for the kinds with MS.
  const std::vector<size_t> sizes{3, 2};
  EXPECT_EQ(Updater(options_of("sgd", 0.1, 0.9), sizes, 4).state_bytes(), 20u);
  EXPECT_EQ(Updater(options_of("asgd-staleness", 0.1, 0.9), sizes, 4).state_bytes(), 20u);
  EXPECT_EQ(Updater(options_of("dc-asgd", 0.1, 0.9), sizes, 4).state_bytes(), 20u);
  EXPECT_EQ(Updater(options_of("dc-asgd-a", 0.1, 0.9), sizes, 4).state_bytes(), 100u);
  EXPECT_EQ(Updater(options_of("ddc-asgd", 0.1, 0.9), sizes, 4).state_bytes(), 100u);
}

// The default momentum of asynchronous jobs: BSP's less the 1 - 1/W asynchrony adds.
TEST(AsynchronousMomentum, SubtractsTheImplicitMomentumOfWWorkers) {
  EXPECT_DOUBLE_EQ(asynchronous_momentum(0.9, 1), 0.9);
  EXPECT_NEAR(asynchronous_momentum(0.9, 2), 0.4, 1e-12);
  EXPECT_NEAR(asynchronous_momentum(0.9, 4), 0.15, 1e-12);
  EXPECT_DOUBLE_EQ(asynchronous_momentum(0.9, 16), 0.0);  // never negative
  EXPECT_DOUBLE_EQ(asynchronous_momentum(0.0, 4), 0.0);
}

}  // namespace
}  // namespace gradwire::strategy::ps
