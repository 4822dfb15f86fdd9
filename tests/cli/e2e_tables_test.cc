// `gradwire bench e2e`'s matrix and its tables, without a cluster: the order of the runs
// (seed by seed, configurations interleaved), what a metrics file says (times to the steep
// and the plateau accuracy), each run against the compute floor of its own seed, and the
// tables plot_e2e.py writes from them: means and ranges over seeds and verdicts, checked
// against values computed by hand from the inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../../tools/gradwire/e2e_matrix.h"
#include "../common/command_runner.h"
#include "gradwire/strategy/adaptive/adaptive_strategy.h"

namespace {

namespace e2e = gradwire::cli::e2e;
using gradwire::testing::run_command;

std::string temp_path(const std::string& name) {
  return gradwire::testing::temp_path("gradwire_e2e_tables_test_", name);
}

e2e::Settings settings(int seeds) {
  e2e::Settings s;
  s.hosts = 2;
  s.models = {"cnn"};
  s.bandwidths = {"100mbit"};
  s.configs = {"ddp:fp16", "int8", "powersgd"};
  s.seeds = seeds;
  s.seed = 7;
  s.targets["cnn"] = {0.85, 0.88};
  return s;
}

TEST(E2eMatrixTest, SeedsRunInRoundsEachWithItsFloorFirst) {
  const auto runs = e2e::build_matrix(settings(2));
  std::vector<std::string> ids;
  for (const auto& run : runs) ids.push_back(run.id);
  EXPECT_EQ(ids, (std::vector<std::string>{
                     "cnn-floor-gradwire-none-r1", "cnn-100mbit-ddp-fp16-r1",
                     "cnn-100mbit-gradwire-int8-r1", "cnn-100mbit-gradwire-powersgd-r1",
                     "cnn-floor-gradwire-none-r2", "cnn-100mbit-ddp-fp16-r2",
                     "cnn-100mbit-gradwire-int8-r2", "cnn-100mbit-gradwire-powersgd-r2"}));
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].index, static_cast<int>(i) + 1);
  // Round r trains with seed SEED + r - 1, DDP as gradwire.
  const auto seed_of = [&](const e2e::Run& run) {
    const auto cmd = e2e::run_command(settings(2), run, "gradwire", "peer.py", "m.jsonl");
    const auto at = std::find(cmd.begin(), cmd.end(), "--seed");
    return at == cmd.end() ? std::string() : *(at + 1);
  };
  EXPECT_EQ(seed_of(runs[1]), "7");
  EXPECT_EQ(seed_of(runs[4]), "8");
  EXPECT_EQ(seed_of(runs[5]), "8");
}

// ddp:gradwire-CODEC runs the DDP peer with gradwire's hook (the Python module) and CODEC.
TEST(E2eMatrixTest, DdpWithGradwiresHookParses) {
  const e2e::Config c = e2e::parse_config("ddp:gradwire-powersgd:rank=8");
  EXPECT_EQ(c.system, "ddp");
  EXPECT_EQ(c.hook, "gradwire");
  EXPECT_EQ(c.codec, "powersgd:rank=8");
  EXPECT_EQ(e2e::parse_config("ddp:gradwire-auto").codec, "auto");
  EXPECT_THROW(e2e::parse_config("ddp:gradwire-zip"), gradwire::ConfigError);
}

// The default matrix compares PowerSGD configured alike: DDP's at auto's rank with the
// shortest dense start PyTorch allows, and gradwire's fixed PowerSGD as auto's plan.
TEST(E2eMatrixTest, TheDefaultMatrixRunsDdpPowerSgdAsAutosPlan) {
  const int rank = gradwire::strategy::AdaptiveOptions{}.rank;
  bool ddp = false, ours = false;
  for (const auto& text : e2e::default_configs()) {
    const e2e::Config c = e2e::parse_config(text);  // every one parses
    if (c.system == "ddp" && c.hook == "powersgd") {
      ddp = true;
      EXPECT_EQ(c.powersgd_rank, rank) << text;
      EXPECT_EQ(c.powersgd_start, 2) << text;
    }
    if (c.codec.rfind("powersgd", 0) == 0) {
      ours = true;
      EXPECT_EQ(c.codec, "powersgd:min_rate=2,rank=" + std::to_string(rank));
    }
  }
  EXPECT_TRUE(ddp && ours);
}

// diloco:KEY=VALUE,.../CODEC runs `gradwire train --strategy diloco` with those flags, the
// codec as the outer gradient's and the link told; malformed ones fail naming the form.
// The command of a 4-worker cnn run of `c` at 10 Mbit.
std::vector<std::string> command_at_10mbit(const e2e::Config& c) {
  e2e::Run run;
  run.config = c;
  run.model = "cnn";
  run.bandwidth = "10mbit";
  run.workers = 4;
  run.id = "x";
  return e2e::run_command(settings(1), run, "gradwire", "peer.py", "m.jsonl");
}

// The value after `flag` in a command, "(absent)" without one.
std::string flag_value(const std::vector<std::string>& cmd, const std::string& flag) {
  const auto at = std::find(cmd.begin(), cmd.end(), flag);
  return at == cmd.end() || at + 1 == cmd.end() ? std::string("(absent)") : *(at + 1);
}

// CODEC+PATH runs gradwire's allreduce (or its DDP hook) with that quantized path; a layer
// policy's @tensor names and a spec without the suffix are left as they are.
TEST(E2eMatrixTest, ACodecsQuantizedPathParses) {
  const e2e::Config rs = e2e::parse_config("int8+reduce-scatter");
  EXPECT_EQ(rs.codec, "int8");
  EXPECT_EQ(rs.quantized_path, "reduce-scatter");
  EXPECT_EQ(flag_value(command_at_10mbit(rs), "--quantized-path"), "reduce-scatter");
  EXPECT_EQ(flag_value(command_at_10mbit(e2e::parse_config("fp16")), "--quantized-path"),
            "(absent)");
  const e2e::Config hook = e2e::parse_config("ddp:gradwire-fp16+ring");
  EXPECT_EQ(hook.codec, "fp16");
  EXPECT_EQ(flag_value(command_at_10mbit(hook), "--gradwire-quantized-path"), "ring");
  EXPECT_EQ(e2e::parse_config("other=none,@fc1.weight=int8").codec, "other=none,@fc1.weight=int8");
  EXPECT_THROW(e2e::parse_config("int8+nowhere"), gradwire::ConfigError);
}

// ddp:powersgd:...,buckets=ddp runs DDP's PowerSGD in DDP's buckets (the peer's
// bucket_order.py); one bucket by default.
TEST(E2eMatrixTest, DdpPowerSgdBucketsAreOneOrDdps) {
  const auto value = [](const std::string& text) {
    return flag_value(command_at_10mbit(e2e::parse_config(text)), "--powersgd-buckets");
  };
  EXPECT_EQ(value("ddp:powersgd:rank=8,start=2"), "one");
  EXPECT_EQ(value("ddp:powersgd:rank=8,start=2,buckets=ddp"), "ddp");
  EXPECT_THROW(e2e::parse_config("ddp:powersgd:buckets=two"), gradwire::ConfigError);
}

// ddp:localsgd:period=H,warmup=W runs the peer with PyTorch's local SGD and those two.
TEST(E2eMatrixTest, DdpLocalSgdRunsThePeerWithItsPeriodAndWarmup) {
  const e2e::Config c = e2e::parse_config("ddp:localsgd:period=40,warmup=5");
  EXPECT_EQ(c.system, "ddp");
  EXPECT_EQ(c.hook, "localsgd");
  const auto cmd = command_at_10mbit(c);
  EXPECT_EQ(flag_value(cmd, "--hook"), "localsgd");
  EXPECT_EQ(flag_value(cmd, "--localsgd-period"), "40");
  EXPECT_EQ(flag_value(cmd, "--localsgd-warmup"), "5");
  const auto defaults = command_at_10mbit(e2e::parse_config("ddp:localsgd"));
  EXPECT_EQ(flag_value(defaults, "--localsgd-period"), "10");
  EXPECT_EQ(flag_value(defaults, "--localsgd-warmup"), "0");
  EXPECT_THROW(e2e::parse_config("ddp:localsgd:period=0"), gradwire::ConfigError);
  EXPECT_THROW(e2e::parse_config("ddp:localsgd:every=4"), gradwire::ConfigError);
}

// python:diloco:... runs the same flags through the peer's PyTorch loop (gradwire.DiLoCo).
TEST(E2eMatrixTest, PythonDiLoCoRunsThePeerWithTheTrainersFlags) {
  const std::string text = "python:diloco:inner_steps=50,fragments=2,delay=5,epochs=2/int4";
  const e2e::Config c = e2e::parse_config(text);
  EXPECT_EQ(c.system, "python");
  EXPECT_EQ(c.name, text);
  EXPECT_TRUE(c.runs_peer());
  const auto cmd = command_at_10mbit(c);
  ASSERT_GE(cmd.size(), 2u);
  EXPECT_EQ(cmd[0], "/usr/bin/python3");
  EXPECT_EQ(cmd[1], "peer.py");
  const auto value = [&](const std::string& flag) { return flag_value(cmd, flag); };
  EXPECT_EQ(value("--strategy"), "diloco");
  EXPECT_EQ(value("--inner-steps"), "50");
  EXPECT_EQ(value("--fragment-delay"), "5");
  EXPECT_EQ(value("--compressor"), "int4");
  EXPECT_EQ(value("--link-bandwidth"), "10mbit");
  EXPECT_EQ(value("--hook"), "(absent)");
  EXPECT_THROW(e2e::parse_config("python:int8"), gradwire::ConfigError);
  // Its runs are named apart from the C++ strategy's.
  e2e::Settings s = settings(1);
  s.configs = {text, text.substr(7)};
  s.compute_floor = false;
  const auto runs = e2e::build_matrix(s);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_NE(runs[0].id, runs[1].id);
}

TEST(E2eMatrixTest, DiLoCoConfigurationsBecomeTrainFlags) {
  const e2e::Config c =
      e2e::parse_config("diloco:inner_steps=50,fragments=4,delay=2,epochs=2/int4");
  EXPECT_TRUE(c.diloco());
  EXPECT_EQ(c.codec, "int4");
  const auto cmd = command_at_10mbit(c);
  const auto value = [&](const std::string& flag) { return flag_value(cmd, flag); };
  EXPECT_EQ(value("--strategy"), "diloco");
  EXPECT_EQ(value("--inner-steps"), "50");
  EXPECT_EQ(value("--fragments"), "4");
  EXPECT_EQ(value("--fragment-delay"), "2");
  EXPECT_EQ(value("--compressor"), "int4");
  EXPECT_EQ(value("--link-bandwidth"), "10mbit");
  // Its own epochs, in place of the matrix's.
  const auto last_epochs = std::find(cmd.rbegin(), cmd.rend(), "--epochs");
  ASSERT_NE(last_epochs, cmd.rend());
  EXPECT_EQ(*(last_epochs - 1), "2");
  // No /CODEC: the trainer's default outer codec, as `gradwire train --strategy diloco`.
  EXPECT_EQ(e2e::parse_config("diloco:inner_steps=auto").codec, "int4");
  for (const char* bad : {"diloco:inner_steps=0", "diloco:h=5", "diloco:inner_steps=5/nope"}) {
    try {
      e2e::parse_config(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const gradwire::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("diloco:inner_steps=H"), std::string::npos) << e.what();
    }
  }
}

// diloco:...,batch=B,lr=LR trains at its own per-rank batch and learning rate: both come
// in place of the matrix's in the command, and the run's steps an epoch,
// its evaluation spacing and its progress are counted at that batch.
TEST(E2eMatrixTest, DiLoCoConfigurationsMayTakeTheirOwnBatchAndLearningRate) {
  const e2e::Config c = e2e::parse_config("diloco:inner_steps=auto,batch=128,lr=0.1/int4");
  EXPECT_EQ(c.batch_size, 128);
  ASSERT_TRUE(c.lr.has_value());
  EXPECT_DOUBLE_EQ(*c.lr, 0.1);
  const auto cmd = command_at_10mbit(c);
  const auto last = [&](const std::string& flag) {
    const auto at = std::find(cmd.rbegin(), cmd.rend(), flag);
    return at == cmd.rend() ? std::string("(absent)") : *(at - 1);
  };
  EXPECT_EQ(last("--batch-size"), "128");
  EXPECT_EQ(last("--lr"), "0.1");
  // Once each: the run's own values replace the matrix's (64, no --lr).
  EXPECT_EQ(std::count(cmd.begin(), cmd.end(), "--batch-size"), 1);
  EXPECT_EQ(std::count(cmd.begin(), cmd.end(), "--lr"), 1);

  e2e::Settings s = settings(1);
  s.train_sizes["cnn"] = 60000;
  e2e::Run run;
  run.config = c;
  run.model = "cnn";
  run.workers = 4;
  EXPECT_EQ(e2e::run_batch_size(s, run), 128);
  // 15000 samples a worker: 235 steps at the matrix's 64, 118 at 128.
  EXPECT_EQ(e2e::steps_per_epoch(s, "cnn", 4), 235u);
  EXPECT_EQ(e2e::run_steps_per_epoch(s, run), 118u);
  run.bandwidth = "10mbit";
  // An evaluation every quarter of the run's own epoch; with --eval-every, as often in
  // samples as the matrix's runs (32 steps of 64, 16 of 128).
  EXPECT_EQ(flag_value(e2e::run_command(s, run, "gradwire", "peer.py", "m.jsonl"), "--eval-every"),
            "30");
  s.eval_every = 32;
  EXPECT_EQ(flag_value(e2e::run_command(s, run, "gradwire", "peer.py", "m.jsonl"), "--eval-every"),
            "16");
  s.eval_every = 0;
  // Without them, the matrix's.
  run.config = e2e::parse_config("diloco:inner_steps=auto/int4");
  EXPECT_EQ(e2e::run_batch_size(s, run), 64);
  const auto plain = e2e::run_command(s, run, "gradwire", "peer.py", "m.jsonl");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), "--batch-size"), 1);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), "--lr"), 0);
  for (const char* bad : {"diloco:batch=-1", "diloco:lr=0", "diloco:lr=-0.1"}) {
    EXPECT_THROW(e2e::parse_config(bad), gradwire::ConfigError) << bad;
  }
}

// A run's metrics as the trainer and the DDP peer write them.
void write_metrics(const std::string& path, const std::vector<std::pair<double, double>>& evals,
                   double final_accuracy, double train_s) {
  std::ofstream out(path, std::ios::trunc);
  size_t step = 0;
  for (const auto& [t, acc] : evals) {
    out << R"({"event":"eval","step":)" << (step += 10) << R"(,"test_accuracy":)" << acc
        << R"(,"train_s":)" << t << "}\n";
  }
  out << R"({"event":"summary","codec":"c","test_accuracy":)" << final_accuracy << R"(,"train_s":)"
      << train_s << R"(,"steps":100,"bytes_contributed":200000,)"
      << R"("bytes_on_wire":300000})"
      << "\n";
}

// A run reaches a target between two evaluations: the crossing is interpolated in training
// time (accuracy from below, loss from above); at the first evaluation its own time; never:
// none.
TEST(E2eTablesTest, CrossingsAreInterpolatedBetweenEvaluations) {
  const e2e::Targets accuracy{0.85, 0.88, "test_accuracy", true};
  const std::vector<std::pair<double, double>> rising = {{10, 0.80}, {20, 0.90}, {30, 0.87}};
  EXPECT_DOUBLE_EQ(e2e::crossing_time(rising, accuracy, 0.85).value_or(-1), 15);
  EXPECT_DOUBLE_EQ(e2e::crossing_time(rising, accuracy, 0.80).value_or(-1), 10);
  EXPECT_FALSE(e2e::crossing_time(rising, accuracy, 0.95));
  EXPECT_FALSE(e2e::crossing_time({}, accuracy, 0.85));
  const e2e::Targets loss{2.0, 1.6, "val_loss", false};
  const std::vector<std::pair<double, double>> falling = {{10, 2.5}, {20, 1.5}};
  EXPECT_DOUBLE_EQ(e2e::crossing_time(falling, loss, 2.0).value_or(-1), 15);
}

// What each run of the table test trains: final accuracy, training seconds, when it
// reached 85% and 88% (negative: never).
struct Fake {
  double accuracy, train_s, steep_s, target_s;
};

TEST(E2eTablesTest, EachSeedAgainstItsOwnFloorAndTheBestDdpWithAVerdictFromThreeSeeds) {
  const std::string dir = temp_path("out");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/runs");
  const auto s = settings(3);
  const auto runs = e2e::build_matrix(s);
  ASSERT_EQ(runs.size(), 12u);
  // Per round: floor, ddp:fp16, int8, powersgd.
  const std::vector<Fake> fakes = {
      {0.880, 60, 30, 40}, {0.881, 90, 40, 60}, {0.886, 75, 20, 66}, {0.870, 100, 35, 70},
      {0.885, 62, 31, 41}, {0.884, 93, 41, 62}, {0.884, 80, 25, 55}, {0.871, 100, 36, -1},
      {0.890, 64, 32, 42}, {0.889, 96, 42, 64}, {0.893, 70, 30, 50}, {0.872, 100, 37, 70}};
  std::map<int, e2e::Outcome> outcomes;
  std::map<int, std::string> status;
  e2e::Floors floors;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Fake& f = fakes[i];
    // Each evaluation lands on its target, so the interpolated crossings are its times.
    std::vector<std::pair<double, double>> evals = {{f.steep_s / 2, 0.80}, {f.steep_s, 0.85}};
    if (f.target_s > 0) evals.push_back({f.target_s, 0.88});
    const std::string metrics = dir + "/runs/" + runs[i].id + ".jsonl";
    write_metrics(metrics, evals, f.accuracy, f.train_s);
    const e2e::Outcome o = e2e::read_outcome(metrics, s.targets.at("cnn"), 2, 64);
    ASSERT_TRUE(o.complete);
    ASSERT_TRUE(o.time_to_steep_s);
    EXPECT_DOUBLE_EQ(*o.time_to_steep_s, f.steep_s);
    EXPECT_EQ(o.time_to_target_s.has_value(), f.target_s > 0);
    outcomes[runs[i].index] = o;
    status[runs[i].index] = "ok";
    if (runs[i].floor) floors[{runs[i].model, runs[i].repeat}] = o.train_s;
  }
  e2e::write_csv(dir + "/results.csv", s, runs, outcomes, status, floors, "runs");

  // The CSV: int8 of round 2 against round 2's floor (80 / 62 - 1), with its seed.
  std::ifstream csv(dir + "/results.csv");
  std::vector<std::string> rows;
  for (std::string line; std::getline(csv, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 13u);
  EXPECT_EQ(rows[7].rfind("gradwire,int8,c,cnn,100mbit,2,8,ok,test_accuracy,0.85,25.00,0.88,55.00,"
                          "0.884,80,62,0.2903,",
                          0),
            0u)
      << rows[7];

  const auto r = run_command("/usr/bin/python3 " GRADWIRE_PLOT_E2E " " + dir, 120);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream md_in(dir + "/results.md");
  const std::string md((std::istreambuf_iterator<char>(md_in)), std::istreambuf_iterator<char>());
  const auto row_of = [&](const std::string& config) {
    const auto at = md.find("| " + config + " |");
    return at == std::string::npos ? std::string() : md.substr(at, md.find('\n', at) - at);
  };
  // Columns: system, configuration, seeds, a rank's step (empty: these metrics files name
  // no batch), training (s), training / floor, time to 85%, time to 88%, time to the
  // strict target, final accuracy, minus the floor's, time to 88% / DDP's, verdict, time to
  // the strict target / DDP's, verdict, training / DDP's, verdict, bytes per step on the
  // wire, bytes on the wire to 88% / the floor's and / the best DDP configuration's (each
  // fake run reaches 88% at its third evaluation, step 30, as its floor and DDP do: 1).
  // The strict target is the round's floor's final accuracy less 0.3 points: 87.7% in
  // round 1, crossed 0.9 of the way from the 85% evaluation to the 88% one; 88.2% and
  // 88.7% in rounds 2 and 3, above every evaluation: reached in round 1 only.
  EXPECT_NE(md.find("### cnn, 100mbit per host: 3 seeds, mean [min, max]; times to a target "
                    "interpolated between evaluations"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("time to 88% / `ddp:fp16`'s"), std::string::npos) << md;
  EXPECT_NE(md.find("| time to the floor's final accuracy - 0.3 points (s) |"), std::string::npos)
      << md;
  // Floor: 60, 62, 64 s; 30, 31, 32 s to 85%; 40, 41, 42 s to 88%; 30 + 0.9 x 10 s to
  // 87.7% in round 1.
  EXPECT_EQ(row_of("floor"),
            "| floor | `none`, unshaped links (compute floor) | 3 |  | 62.0 [60.0, 64.0] "
            "| 1.000 [1.000, 1.000] "
            "| 31.0 [30.0, 32.0] | 41.0 [40.0, 42.0] | 39.0 (1/3) | 88.50 [88.00, 89.00] "
            "|  |  |  |  |  |  |  | 1,500 | 1.0000 [1.0000, 1.0000] |  |");
  // DDP: 40 + 0.9 x 20 = 58 s to the strict target in round 1.
  EXPECT_NE(row_of("ddp | `ddp:fp16`").find("| 58.0 (1/3) |"), std::string::npos) << md;
  // The best DDP configuration is the baseline of the ratio columns, not a ratio of 1.
  EXPECT_NE(
      row_of("ddp | `ddp:fp16`").find("| the baseline |  | the baseline |  | the baseline |  |"),
      std::string::npos)
      << md;
  EXPECT_NE(row_of("ddp | `ddp:fp16`").find("| 1.0000 [1.0000, 1.0000] | the baseline |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("on the wire to 88% / `ddp:fp16`'s"), std::string::npos) << md;
  // int8: 75/60, 80/62, 70/64 of the floor; 66/60, 55/62, 50/64 of DDP's time to 88% (one
  // above 1: not resolved); the strict target at 20 + 0.9 x 46 = 61.4 s in round 1, 61.4 /
  // 58 of DDP's (one seed: no verdict); 75/90, 80/93, 70/96 of its training (all below:
  // faster); accuracy +0.6, -0.1, +0.3 points against the floor's.
  EXPECT_EQ(row_of("gradwire | `int8`"),
            "| gradwire | `int8` | 3 |  | 75.0 [70.0, 80.0] | 1.211 [1.094, 1.290] "
            "| 25.0 [20.0, 30.0] "
            "| 57.0 [50.0, 66.0] | 61.4 (1/3) | 88.77 [88.40, 89.30] | +0.27 [-0.10, +0.60] "
            "| 0.92x [0.78, 1.10] | not resolved | 1.06x | no verdict (1 seed) "
            "| 0.81x [0.73, 0.86] | faster | 1,500 "
            "| 1.0000 [1.0000, 1.0000] | 1.0000 [1.0000, 1.0000] |");
  // powersgd: 88% not reached in seed 2 (never faster than a seed that reached it); the
  // strict target at 35 + 0.9 x 35 = 66.5 s in round 1, 66.5 / 58 of DDP's; 100 s of
  // training against 90, 93, 96: slower.
  EXPECT_EQ(row_of("gradwire | `powersgd`"),
            "| gradwire | `powersgd` | 3 |  | 100.0 [100.0, 100.0] | 1.614 [1.562, 1.667] "
            "| 36.0 [35.0, 37.0] "
            "| 70.0 [70.0, 70.0] (2/3) | 66.5 (1/3) | 87.10 [87.00, 87.20] "
            "| -1.40 [-1.80, -1.00] "
            "| 1.13x [1.09, 1.17] (+1 not reached) | slower | 1.15x | no verdict (1 seed) "
            "| 1.08x [1.04, 1.11] | slower "
            "| 1,500 | 1.0000 [1.0000, 1.0000] | 1.0000 [1.0000, 1.0000] (2/3) |");
  std::filesystem::remove_all(dir);
}

// gpt is measured by its validation loss: a target is reached from above, the peer starts
// from gradwire's initial weights, each side trains with the model's own recipe (no SGD
// options forced on it), and the tables show losses.
TEST(E2eTablesTest, ALossIsReachedFromAboveAndTheTablesShowLosses) {
  const std::string dir = temp_path("loss");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/runs");
  e2e::Settings s;
  s.hosts = 2;
  s.models = {"gpt"};
  s.bandwidths = {"100mbit"};
  s.configs = {"ddp:allreduce", "none"};
  s.seed = 4;
  s.batch_size = 8;
  s.accumulate = 2;
  s.train_sizes["gpt"] = 1000;
  s.weights_dir = dir + "/weights";
  s.targets["gpt"] = {2.0, 1.6, "val_loss", false};
  const auto runs = e2e::build_matrix(s);
  ASSERT_EQ(runs.size(), 3u);
  // 1000 windows over 2 workers in steps of 8 x 2: 32 steps an epoch.
  EXPECT_EQ(e2e::steps_per_epoch(s, "gpt", 2), 32u);
  const auto ddp = e2e::run_command(s, runs[1], "gradwire", "peer.py", "m.jsonl");
  const auto has = [](const std::vector<std::string>& cmd, const std::string& word) {
    return std::find(cmd.begin(), cmd.end(), word) != cmd.end();
  };
  ASSERT_TRUE(has(ddp, "--initial-weights"));
  EXPECT_EQ(*(std::find(ddp.begin(), ddp.end(), "--initial-weights") + 1),
            dir + "/weights/gpt-seed4.weights");
  EXPECT_TRUE(has(ddp, "--accumulate"));
  for (const auto& cmd : {ddp, e2e::run_command(s, runs[2], "gradwire", "peer.py", "m.jsonl")}) {
    EXPECT_FALSE(has(cmd, "--lr"));
    EXPECT_FALSE(has(cmd, "--momentum"));
  }
  // Timelines: gradwire's allreduce runs and DDP's (the peer's --timeline) record one
  // each, named by the run.
  s.timeline_dir = dir + "/timelines";
  for (size_t i : {1, 2}) {
    const auto traced = e2e::run_command(s, runs[i], "gradwire", "peer.py", "m.jsonl");
    ASSERT_TRUE(has(traced, "--timeline"));
    EXPECT_EQ(*(std::find(traced.begin(), traced.end(), "--timeline") + 1),
              dir + "/timelines/" + runs[i].id + ".trace.json");
  }
  // Flush-to-zero mode: every run's processes, gradwire's and the peer's alike.
  EXPECT_FALSE(has(ddp, "--flush-denormal"));
  s.flush_denormal = true;
  for (const auto& run : runs) {
    EXPECT_TRUE(has(e2e::run_command(s, run, "gradwire", "peer.py", "m.jsonl"), "--flush-denormal"))
        << run.id;
  }
  std::map<int, e2e::Outcome> outcomes;
  std::map<int, std::string> status;
  e2e::Floors floors;
  for (const auto& run : runs) {
    const std::string metrics = dir + "/runs/" + run.id + ".jsonl";
    std::ofstream out(metrics);
    const double slow = run.config.system == "ddp" ? 2 : 1;
    out << R"({"event":"eval","step":10,"val_loss":2.5,"train_s":)" << 10 * slow << "}\n"
        << R"({"event":"eval","step":20,"val_loss":1.9,"train_s":)" << 20 * slow << "}\n"
        << R"({"event":"eval","step":30,"val_loss":1.55,"train_s":)" << 30 * slow << "}\n"
        << R"({"event":"summary","codec":"c","val_loss":1.55,"train_s":)" << 30 * slow
        << R"(,"steps":32,"batch_size":8,"recipe":{"accumulate":2})"
        << R"(,"bytes_contributed":100,"bytes_on_wire":150})"
        << "\n";
    out.close();
    const e2e::Outcome o = e2e::read_outcome(metrics, s.targets.at("gpt"), 2, 16);
    ASSERT_TRUE(o.complete);
    // Crossings interpolated: loss 2.0 at 10 + 10 (0.5 / 0.6), 1.6 at 20 + 10 (0.3 / 0.35).
    EXPECT_NEAR(o.time_to_steep_s.value_or(-1), (10 + 10 * 0.5 / 0.6) * slow, 1e-9);
    EXPECT_NEAR(o.time_to_target_s.value_or(-1), (20 + 10 * 0.3 / 0.35) * slow, 1e-9);
    EXPECT_DOUBLE_EQ(o.final_quality, 1.55);
    outcomes[run.index] = o;
    status[run.index] = "ok";
    if (run.floor) floors[{run.model, run.repeat}] = o.train_s;
  }
  e2e::write_csv(dir + "/results.csv", s, runs, outcomes, status, floors, "runs");
  const auto r = run_command("/usr/bin/python3 " GRADWIRE_PLOT_E2E " --tables-only " + dir, 120);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream md_in(dir + "/results.md");
  const std::string md((std::istreambuf_iterator<char>(md_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(md.find("| time to loss 2.00 (s) | time to loss 1.60 (s) "
                    "| time to the floor's final loss + 1% (s) | final validation loss |"),
            std::string::npos)
      << md;
  // A rank's step: 8 windows of 128 bytes, 2 micro-batches, as the runs' summaries say.
  // The strict target, the floor's final loss 1.55 plus 1% (1.5655), from above at
  // 20 + 10 x (1.9 - 1.5655) / 0.35 = 29.6 s.
  EXPECT_NE(md.find("| gradwire | `none` | 1 | 16 x 128 B | 30.0 | 1.000 | 18.3 | 28.6 | 29.6 "
                    "| 1.5500 "
                    "| +0.0000 "
                    "| 0.50x |"),
            std::string::npos)
      << md;
  std::filesystem::remove_all(dir);
}

}  // namespace
