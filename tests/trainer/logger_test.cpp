// The metrics loggers, checked against things they did not produce: CRC-32C against published test vectors,
// event files through tfevents_reader.h (a decoder written from the format spec, itself tested on corrupted
// files), CSV files against literal RFC 4180 text and strtod.
//
// Set KILN_KEEP_TFEVENTS=<dir> to keep one run's event files (and an expected.txt) in <dir> for
// tests/trainer/tensorboard_check.py, which reads them with TensorBoard's own loader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "kiln/serialize/crc32c.h"
#include "kiln/tensor/error.h"
#include "kiln/trainer/csv_logger.h"
#include "kiln/trainer/tensorboard_logger.h"
#include "data/png_reader.h"
#include "error_of.h"
#include "trainer/tfevents_reader.h"
#include "trainer/trainer_test_util.h"

namespace kiln::test {
namespace {

namespace fs = std::filesystem;
using serialize::crc32c;
using serialize::crc32c_portable;
using trainer::CSVLogger;
using trainer::TensorBoardLogger;

// A fresh folder per test under the system's temporary folder, removed afterwards.
class LoggerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("kiln_logger_test_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++) + "_" + info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

  fs::path dir_;
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> files_in(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// events.out.tfevents.<10 digits>.<host>.<pid>.<counter>; the host may hold dots of its own.
bool is_event_file_name(std::string name) {
  auto all_digits = [](const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const std::string prefix = "events.out.tfevents.";
  if (name.rfind(prefix, 0) != 0 || name.size() < prefix.size() + 11) return false;
  name = name.substr(prefix.size());
  if (!all_digits(name.substr(0, 10)) || name[10] != '.') return false;
  name = name.substr(11);
  for (int part = 0; part < 2; ++part) {  // counter, then pid
    size_t dot = name.rfind('.');
    if (dot == std::string::npos || !all_digits(name.substr(dot + 1))) return false;
    name = name.substr(0, dot);
  }
  return !name.empty();  // the host
}

// ---- CRC-32C ----

TEST(Crc32c, PublishedCheckValues) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<uint8_t>(i), descending[i] = static_cast<uint8_t>(31 - i);
  // The CRC catalogue's check value, then the iSCSI vectors of RFC 3720, appendix B.4.
  for (auto fn : {&crc32c, &crc32c_portable}) {
    EXPECT_EQ(fn("123456789", 9, 0), 0xE3069283u);
    EXPECT_EQ(fn(zeros.data(), 32, 0), 0x8A9136AAu);
    EXPECT_EQ(fn(ones.data(), 32, 0), 0x62A8AB43u);
    EXPECT_EQ(fn(ascending.data(), 32, 0), 0x46DD794Eu);
    EXPECT_EQ(fn(descending.data(), 32, 0), 0x113FDB5Cu);
    EXPECT_EQ(fn("", 0, 0), 0u);
  }
}

TEST(Crc32c, ExtendsAcrossSplitsAndMatchesThePortablePath) {
  std::mt19937 rng(1234);
  std::vector<uint8_t> data(1000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (int trial = 0; trial < 300; ++trial) {
    // Random start (so unaligned loads are exercised), length and split point.
    size_t start = rng() % 16, n = rng() % (data.size() - start), cut = n ? rng() % (n + 1) : 0;
    const uint8_t* p = data.data() + start;
    uint32_t whole = crc32c(p, n);
    ASSERT_EQ(whole, crc32c_portable(p, n)) << "start " << start << " length " << n;
    EXPECT_EQ(crc32c(p + cut, n - cut, crc32c(p, cut)), whole) << "split at " << cut << " of " << n;
    EXPECT_EQ(crc32c_portable(p + cut, n - cut, crc32c_portable(p, cut)), whole);
  }
}

TEST(Crc32c, MaskIsTheTfRecordRotation) {
  // Rotating right by 15 then adding the constant; 0 masks to the constant itself.
  EXPECT_EQ(serialize::mask_crc32c(0), 0xa282ead8u);
  EXPECT_EQ(serialize::mask_crc32c(0x00008000u), 0xa282ead9u);  // bit 15 rotates down to bit 0
  EXPECT_EQ(serialize::mask_crc32c(1), 0xa282ead8u + 0x00020000u);
  EXPECT_EQ(serialize::masked_crc32c("123456789", 9), serialize::mask_crc32c(0xE3069283u));
}

// ---- next_version ----

TEST_F(LoggerTest, NextVersionCountsOnlyVersionFolders) {
  EXPECT_EQ(trainer::next_version(dir(), "run"), 0);  // <dir>/run does not exist yet
  fs::create_directories(dir_ / "run");
  EXPECT_EQ(trainer::next_version(dir(), "run"), 0);
  for (const char* d : {"version_0", "version_3", "version_x", "version_", "version_-5", "version_2b", "other"}) {
    fs::create_directories(dir_ / "run" / d);
  }
  std::ofstream(dir_ / "run" / "version_9");  // a file, not a folder
  EXPECT_EQ(trainer::next_version(dir(), "run"), 4);
  EXPECT_EQ(trainer::next_version(dir(), "other_run"), 0);
}

TEST_F(LoggerTest, LoggersMadeTogetherShareAFolder) {
  fs::create_directories(dir_ / "kiln" / "version_1");
  CSVLogger csv(dir());
  TensorBoardLogger tb(dir());
  csv.log_metrics({{"loss", 1.0}}, 1);  // creates version_2, which tb must not then skip past
  tb.log_metrics({{"loss", 1.0}}, 1);
  EXPECT_EQ(csv.version(), 2);
  EXPECT_EQ(tb.version(), 2);
  EXPECT_EQ(csv.log_dir(), tb.log_dir());
  EXPECT_EQ(csv.log_dir(), (dir_ / "kiln" / "version_2").string());
  EXPECT_THROW(CSVLogger(dir(), "kiln", -2), Error);
  EXPECT_THROW(CSVLogger(dir(), "a/b"), Error);
}

// ---- CSVLogger ----

// RFC 4180 records of a whole file, for reading back what CSVLogger wrote.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1, std::vector<std::string>(1));
  bool in_quotes = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    std::string& cell = rows.back().back();
    if (in_quotes && c == '"' && i + 1 < text.size() && text[i + 1] == '"') cell += '"', ++i;
    else if (c == '"') in_quotes = !in_quotes;
    else if (!in_quotes && c == ',') rows.back().emplace_back();
    else if (!in_quotes && c == '\n') rows.emplace_back(1);
    else cell += c;
  }
  EXPECT_FALSE(in_quotes);
  EXPECT_TRUE(rows.back().size() == 1 && rows.back()[0].empty()) << "the last line lacks its newline";
  rows.pop_back();
  return rows;
}

using Rows = std::vector<std::vector<std::string>>;

TEST_F(LoggerTest, CsvRowsLeaveUnloggedMetricsEmpty) {
  CSVLogger logger(dir(), "run", 0);
  logger.log_metrics({{"b", 2.0}, {"a", 1.0}}, 1);
  logger.log_metrics({{"a", 3.5}}, 2);
  logger.log_metrics({}, 3);
  logger.finalize("success");
  EXPECT_EQ(read_text(logger.metrics_path()), "step,a,b\n1,1,2\n2,3.5,\n3,,\n");
}

TEST_F(LoggerTest, CsvWidensOnANewMetricWithoutLosingRows) {
  CSVLogger logger(dir(), "run", 0);
  for (int s = 0; s < 5; ++s) logger.log_metrics({{"train/loss", 1.0 / (s + 1)}}, s);
  logger.log_metrics({{"train/loss", 0.125}, {"lr", 0.01}}, 5);
  logger.log_metrics({{"acc", 0.75}}, 6);
  logger.log_metrics({{"train/loss", 0.0625}}, 7);
  Rows rows = parse_csv(read_text(logger.metrics_path()));
  ASSERT_EQ(rows.size(), 9u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"step", "acc", "lr", "train/loss"}));
  for (int s = 0; s < 5; ++s) {
    EXPECT_EQ(rows[s + 1], (std::vector<std::string>{std::to_string(s), "", "", trainer::format_metric(1.0 / (s + 1))}));
  }
  EXPECT_EQ(rows[6], (std::vector<std::string>{"5", "", "0.01", "0.125"}));
  EXPECT_EQ(rows[7], (std::vector<std::string>{"6", "0.75", "", ""}));
  EXPECT_EQ(rows[8], (std::vector<std::string>{"7", "", "", "0.0625"}));
  EXPECT_EQ(files_in(logger.log_dir(), "metrics.csv.tmp").size(), 0u) << "a temporary file was left behind";
}

TEST_F(LoggerTest, CsvQuotesNamesThatNeedIt) {
  CSVLogger logger(dir(), "run", 0);
  logger.log_metrics({{"a,b", 1}, {"say \"hi\"", 2}, {"two\nlines", 3}, {"train/loss", 4}}, 0);
  logger.flush();
  // RFC 4180: fields holding a comma, quote or line break are quoted, inner quotes doubled.
  EXPECT_EQ(read_text(logger.metrics_path()), "step,\"a,b\",\"say \"\"hi\"\"\",train/loss,\"two\nlines\"\n0,1,2,4,3\n");
  logger.log_metrics({{"a,b", 5}, {"zz", 6}}, 1);  // widening re-reads the quoted header
  Rows rows = parse_csv(read_text(logger.metrics_path()));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (std::vector<std::string>{"step", "a,b", "say \"hi\"", "train/loss", "two\nlines", "zz"}));
  EXPECT_EQ(rows[2], (std::vector<std::string>{"1", "5", "", "", "", "6"}));
  EXPECT_THROW(logger.log_metrics({{"step", 1}}, 2), Error);
  EXPECT_THROW(logger.log_metrics({{"", 1}}, 2), Error);
}

TEST_F(LoggerTest, CsvDoublesRoundTripExactly) {
  std::mt19937_64 rng(7);
  std::vector<double> values = {0.1, 1.0 / 3, -2.5e-300, 5e-324, 1.7976931348623157e308, 123456789012345678.0, -0.0};
  while (values.size() < 200) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, 8);
    if (std::isfinite(d)) values.push_back(d);
  }
  CSVLogger logger(dir(), "run", 0);
  for (size_t i = 0; i < values.size(); ++i) logger.log_metrics({{"x", values[i]}}, static_cast<int64_t>(i));
  logger.log_metrics({{"x", std::nan("")}}, 1000);
  logger.log_metrics({{"x", INFINITY}}, 1001);
  logger.log_metrics({{"x", -INFINITY}}, 1002);
  Rows rows = parse_csv(read_text(logger.metrics_path()));
  ASSERT_EQ(rows.size(), values.size() + 4);
  for (size_t i = 0; i < values.size(); ++i) {
    double back = std::strtod(rows[i + 1][1].c_str(), nullptr);
    EXPECT_EQ(std::memcmp(&back, &values[i], 8), 0) << rows[i + 1][1];
    EXPECT_LE(rows[i + 1][1].size(), 24u) << "not the shortest form: " << rows[i + 1][1];
  }
  EXPECT_EQ(rows[values.size() + 1][1], "nan");
  EXPECT_EQ(rows[values.size() + 2][1], "inf");
  EXPECT_EQ(rows[values.size() + 3][1], "-inf");
}

TEST_F(LoggerTest, CsvResumeDropsLaterRowsAndAppends) {
  {
    CSVLogger first(dir(), "run");
    for (int s = 1; s <= 10; ++s) first.log_metrics({{"loss", s * 0.5}}, s);
    // Crash: no finalize; the destructor only closes the file.
  }
  CSVLogger resumed(dir(), "run", 0);
  resumed.on_resume(4);
  EXPECT_EQ(read_text(resumed.metrics_path()), "step,loss\n1,0.5\n2,1\n3,1.5\n4,2\n");
  resumed.log_metrics({{"loss", 9.0}, {"lr", 0.5}}, 5);
  resumed.finalize("success");
  EXPECT_EQ(read_text(resumed.metrics_path()), "step,loss,lr\n1,0.5,\n2,1,\n3,1.5,\n4,2,\n5,9,0.5\n");
}

TEST_F(LoggerTest, CsvDropsATornLastLine) {
  CSVLogger first(dir(), "run", 0);
  first.log_metrics({{"loss", 1.0}}, 1);
  first.finalize("failed");
  std::ofstream(first.metrics_path(), std::ios::app) << "2,0.12";  // a write cut short by a crash
  CSVLogger again(dir(), "run", 0);
  again.log_metrics({{"loss", 0.5}}, 2);
  EXPECT_EQ(read_text(again.metrics_path()), "step,loss\n1,1\n2,0.5\n");
}

TEST_F(LoggerTest, HparamsYamlQuotesWhatYamlWouldMisread) {
  CSVLogger logger(dir(), "run", 0);
  logger.log_hyperparams({{"lr", "0.001"}, {"optimizer", "adamw"}, {"steps", "1000"}, {"amp", "true"}});
  logger.log_hyperparams({{"flag", "yes"}, {"none", "null"}, {"small", "1e-05"}, {"note", "a: b # c"},
                          {"empty", ""}, {"multi", "x\n\"y\"\\"}, {"date", "2024-01-02"}, {"octal", "0755"},
                          {"neg", "-3"}, {"data/path", "runs/exp-1.v2"}, {"on", "1"}});
  EXPECT_EQ(read_text(fs::path(logger.log_dir()) / "hparams.yaml"),
            "amp: true\n"
            "data/path: runs/exp-1.v2\n"
            "date: \"2024-01-02\"\n"
            "empty: \"\"\n"
            "flag: \"yes\"\n"
            "lr: 0.001\n"
            "multi: \"x\\n\\\"y\\\"\\\\\"\n"
            "neg: -3\n"
            "none: \"null\"\n"
            "note: \"a: b # c\"\n"
            "octal: \"0755\"\n"
            "\"on\": 1\n"
            "optimizer: adamw\n"
            "small: \"1e-05\"\n"
            "steps: 1000\n");
}

// ---- TensorBoardLogger ----

TEST_F(LoggerTest, TensorBoardEventsReadBack) {
  double t0 = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  TensorBoardLogger logger(dir(), "run", 3);
  logger.log_hyperparams({{"lr", "0.001"}, {"name", "a|b"}});
  logger.log_metrics({{"train/loss", 0.1}, {"lr", 1e-3}}, 1);
  logger.log_metrics({{"train/loss", 0.05}, {"odd", INFINITY}, {"bad", std::nan("")}}, int64_t{1} << 40);
  logger.finalize("success");
  double t1 = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();

  std::vector<std::string> files = files_in(logger.log_dir(), "events.out.tfevents.");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0], logger.event_file());
  EXPECT_TRUE(is_event_file_name(fs::path(files[0]).filename().string())) << files[0];
  EXPECT_TRUE(fs::exists(fs::path(logger.log_dir()) / "hparams.yaml"));

  std::vector<TfEvent> events = read_tfevents(files[0]);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_FALSE(events[0].has_summary);
  for (const TfEvent& e : events) {
    EXPECT_GE(e.wall_time, std::floor(t0));
    EXPECT_LE(e.wall_time, t1 + 1);
  }

  const TfEvent& hp = events[1];
  ASSERT_EQ(hp.values.size(), 1u);
  EXPECT_EQ(hp.values[0].tag, "hparams");
  EXPECT_EQ(hp.values[0].plugin_name, "text");
  EXPECT_EQ(hp.values[0].tensor_dtype, 7);  // DT_STRING
  EXPECT_EQ(hp.values[0].tensor_rank, 0);
  ASSERT_EQ(hp.values[0].string_val.size(), 1u);
  EXPECT_EQ(hp.values[0].string_val[0], "| key | value |\n|---|---|\n| lr | 0.001 |\n| name | a\\|b |\n");

  const TfEvent& first = events[2];
  EXPECT_EQ(first.step, 1);
  ASSERT_EQ(first.values.size(), 2u);
  EXPECT_EQ(first.values[0].tag, "lr");  // one Value per metric, in name order
  EXPECT_EQ(first.values[0].simple_value, 1e-3f);
  EXPECT_EQ(first.values[1].tag, "train/loss");
  EXPECT_EQ(first.values[1].simple_value, 0.1f);

  const TfEvent& second = events[3];
  EXPECT_EQ(second.step, int64_t{1} << 40);
  ASSERT_EQ(second.values.size(), 3u);
  EXPECT_EQ(second.values[0].tag, "bad");
  EXPECT_TRUE(std::isnan(*second.values[0].simple_value));
  EXPECT_EQ(second.values[1].tag, "odd");
  EXPECT_EQ(second.values[1].simple_value, INFINITY);
  EXPECT_EQ(second.values[2].simple_value, 0.05f);
}

TEST_F(LoggerTest, TensorBoardResumeWritesASessionStart) {
  {
    TensorBoardLogger first(dir(), "run");
    for (int s = 1; s <= 10; ++s) first.log_metrics({{"loss", s * 0.5}}, s);
  }
  TensorBoardLogger resumed(dir(), "run", 0);
  resumed.on_resume(4);
  resumed.log_metrics({{"loss", 7.0}}, 5);
  resumed.flush();
  std::vector<std::string> files = files_in(resumed.log_dir(), "events.out.tfevents.");
  ASSERT_EQ(files.size(), 2u);
  std::vector<TfEvent> events = read_tfevents(resumed.event_file());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].step, 5);
  EXPECT_EQ(events[1].session_status, 1);  // START
  EXPECT_FALSE(events[1].has_summary);
  EXPECT_EQ(events[2].step, 5);
  EXPECT_EQ(events[2].values.at(0).simple_value, 7.0f);
}

TEST_F(LoggerTest, ReaderReportsCorruption) {
  TensorBoardLogger logger(dir(), "run", 0);
  logger.log_metrics({{"loss", 0.5}}, 1);
  logger.finalize("success");
  const std::string good = read_file_bytes(logger.event_file());
  ASSERT_EQ(read_records(good).size(), 2u);
  size_t second = 12 + read_records(good)[0].size() + 4;  // where the second record starts

  auto expect_error = [](const std::string& bytes, const std::string& part) {
    try {
      read_records(bytes);
      ADD_FAILURE() << "no error, expected one mentioning \"" << part << "\"";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  std::string bad = good;
  bad[second + 12 + 3] ^= 0x01;  // a byte of the second record's data
  expect_error(bad, "record 1 at byte " + std::to_string(second) + ": data CRC mismatch");
  bad = good;
  bad[second] ^= 0x01;  // its length
  expect_error(bad, "length CRC mismatch");
  bad = good;
  bad[bad.size() - 1] ^= 0x80;  // its stored data CRC
  expect_error(bad, "data CRC mismatch");
  expect_error(good.substr(0, good.size() - 1), "truncated");
  expect_error(good.substr(0, second + 5), "truncated length header");
}

// One run, interrupted after step 9 and resumed from step 5, kept for tensorboard_check.py when
// KILN_KEEP_TFEVENTS names a folder. What TensorBoard should show is written to <folder>/expected.txt:
// one `tag step value` line per point, after the resume has purged steps 6..9 of the first run.
TEST_F(LoggerTest, TensorBoardRunForTheIndependentCheck) {
  const char* keep = std::getenv("KILN_KEEP_TFEVENTS");
  std::string root = keep && *keep ? keep : dir();
  std::map<std::string, std::map<int64_t, float>> expected;
  int64_t version;
  {
    TensorBoardLogger first(root, "check");
    version = first.version();
    first.log_hyperparams({{"lr", "0.001"}, {"optimizer", "adamw"}});
    for (int s = 0; s <= 9; ++s) {
      std::map<std::string, double> m = {{"train/loss", 1.0 / (s + 1)}};
      if (s % 2 == 0) m["val/acc"] = 0.1 * s;
      first.log_metrics(m, s);
      for (const auto& [tag, v] : m) {
        if (s <= 5) expected[tag][s] = static_cast<float>(v);
      }
    }
    // A histogram and an image that survive the resume (steps 2 and 3), and a histogram that does not (7).
    first.log_histogram("weights/hand", tensor(std::vector<double>{0, 1, 2, 3, 4, 9.5, 10}), 2, 4);
    first.log_image("samples/rgb", tensor(std::vector<float>{1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1}, {3, 2, 2}), 3);
    first.log_histogram("weights/hand", tensor(std::vector<double>{-1, 1}), 7, 2);
    first.finalize("interrupted");
  }
  // TensorBoard reads a folder's files in name order; the second file must not share the first one's second.
  auto second_of = [] { return std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch()).count(); };
  for (auto s = second_of(); second_of() == s;) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  TensorBoardLogger resumed(root, "check", version);
  resumed.on_resume(5);
  for (int s = 6; s <= 8; ++s) {
    resumed.log_metrics({{"train/loss", 10.0 + s}}, s);
    expected["train/loss"][s] = static_cast<float>(10.0 + s);
  }
  resumed.finalize("success");

  // Through the test's reader: both files decode, the resume marker is in the second.
  std::vector<std::string> files = files_in(resumed.log_dir(), "events.out.tfevents.");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(read_tfevents(files[0]).size(), 15u);  // version, hparams, 10 steps, 2 histograms, an image
  EXPECT_EQ(read_tfevents(files[1]).at(1).session_status, 1);

  std::ofstream out(fs::path(resumed.log_dir()) / "expected.txt");
  for (const auto& [tag, points] : expected) {
    for (const auto& [step, value] : points) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.9g", value);  // 9 significant digits round-trip a float
      out << tag << ' ' << step << ' ' << buf << '\n';
    }
  }
  // The histogram and the image, as tensorboard_check.py compares them: bucket limits and counts as TensorBoard
  // reads them (its leading empty bucket included), the image's size and its pixels, row by row.
  std::ofstream media(fs::path(resumed.log_dir()) / "expected_media.txt");
  media << "histogram weights/hand 2 min=0 max=10 num=7 sum=29.5 limits=0,2.5,5,7.5,10 counts=0,3,2,0,2\n";
  media << "image samples/rgb 3 width=2 height=2 channels=3 pixels=255,0,0,0,255,0,0,0,255,255,255,255\n";
  if (keep && *keep) std::printf("kept the run in %s\n", resumed.log_dir().c_str());
}

// ---- histograms and images ----

// The counts of numpy.histogram(values, bins) by its definition, by binary search over edges computed here:
// bin i holds edges[i] <= v < edges[i + 1], the last bin also v == edges[bins].
std::vector<double> reference_counts(const std::vector<double>& values, const std::vector<double>& edges) {
  std::vector<double> counts(edges.size() - 1, 0.0);
  for (double v : values) {
    auto it = std::upper_bound(edges.begin(), edges.end(), v);
    size_t bin = static_cast<size_t>(it - edges.begin()) - 1;
    if (bin == counts.size()) --bin;  // v == the last edge
    counts[bin] += 1;
  }
  return counts;
}

TEST_F(LoggerTest, TensorBoardHistogramsReadBack) {
  TensorBoardLogger logger(dir(), "h", 0);
  // Hand-worked: 4 bins over [0, 10] have edges 0, 2.5, 5, 7.5, 10 and hold {0, 1, 2}, {3, 4}, {}, {9.5, 10}.
  logger.log_histogram("hand", tensor(std::vector<double>{0, 1, 2, 3, 4, 9.5, 10}), 3, 4);
  // Every value equal: numpy's range [v - 0.5, v + 0.5]; an int64 tensor.
  logger.log_histogram("flat", full({5}, 2, kInt64), 4, 2);
  manual_seed(11);
  const Tensor normal = randn({20000}, kFloat32);
  logger.log_histogram("weights/normal", normal.reshape({100, 200}).t(), 5);  // any shape and strides
  EXPECT_EQ(error_of([&] { logger.log_histogram("nan", tensor(std::vector<float>{1, NAN, INFINITY}), 6); }),
            "TensorBoardLogger: histogram 'nan' at step 6: 2 of 3 values are NaN or infinite; a histogram takes "
            "finite values only");
  EXPECT_EQ(error_of([&] { logger.log_histogram("none", zeros({0}), 6); }),
            "TensorBoardLogger: histogram 'none' at step 6: no values (shape (0))");
  // 1e16 +- 0.5 rounds back to 1e16: no range to cut (numpy: "Too many bins for data range").
  EXPECT_NE(error_of([&] { logger.log_histogram("flat", full({3}, 1e16, kFloat64), 6); }).find("cannot be cut into"),
            std::string::npos);
  // Values on edges, against numpy 2.4's np.histogram: edges are linspace's i * step + first, so 0.3 lies below
  // the fourth edge (0.30000000000000004) of 10 bins over [0, 1].
  logger.log_histogram("edges10", tensor(std::vector<double>{0, 0.3, 1}), 7, 10);
  std::vector<double> tenths;
  for (int i = 0; i <= 10; ++i) tenths.push_back(0.1 * i);
  tenths.push_back(0.35);
  tenths.push_back(0.7);
  logger.log_histogram("edges7", tensor(tenths), 8, 7);
  logger.finalize("success");

  const std::vector<TfEvent> events = read_tfevents(logger.event_file());
  ASSERT_EQ(events.size(), 6u);  // the version, then one event per histogram logged
  const TfHistogram e10 = *events[4].values.at(0).histo, e7 = *events[5].values.at(0).histo;
  EXPECT_EQ(e10.bucket_limit.at(3), 0.30000000000000004);
  EXPECT_EQ(e10.bucket, (std::vector<double>{0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(e7.bucket, (std::vector<double>{0, 2, 1, 3, 1, 3, 1, 2}));
  const TfHistogram hand = *events[1].values.at(0).histo;
  EXPECT_EQ(events[1].step, 3);
  EXPECT_EQ(events[1].values[0].tag, "hand");
  EXPECT_EQ(hand.min, 0);
  EXPECT_EQ(hand.max, 10);
  EXPECT_EQ(hand.num, 7);
  EXPECT_EQ(hand.sum, 29.5);
  EXPECT_EQ(hand.sum_squares, 0 + 1 + 4 + 9 + 16 + 90.25 + 100);
  // TensorBoard keeps right limits only: an empty leading bucket carries the left edge.
  EXPECT_EQ(hand.bucket_limit, (std::vector<double>{0, 2.5, 5, 7.5, 10}));
  EXPECT_EQ(hand.bucket, (std::vector<double>{0, 3, 2, 0, 2}));

  const TfHistogram flat = *events[2].values.at(0).histo;
  EXPECT_EQ(flat.bucket_limit, (std::vector<double>{1.5, 2, 2.5}));
  EXPECT_EQ(flat.bucket, (std::vector<double>{0, 0, 5}));  // 2 is the second bin's left edge
  EXPECT_EQ(flat.sum, 10);

  const TfHistogram h = *events[3].values.at(0).histo;
  const std::vector<float> f = normal.to_vector<float>();
  const std::vector<double> values(f.begin(), f.end());
  EXPECT_EQ(h.min, *std::min_element(values.begin(), values.end()));
  EXPECT_EQ(h.max, *std::max_element(values.begin(), values.end()));
  ASSERT_EQ(h.bucket_limit.size(), 65u);  // 64 bins by default
  EXPECT_EQ(h.bucket_limit.front(), h.min);
  EXPECT_EQ(h.bucket_limit.back(), h.max);
  std::vector<double> counts(h.bucket.begin() + 1, h.bucket.end());
  EXPECT_EQ(counts, reference_counts(values, h.bucket_limit));
  EXPECT_EQ(h.bucket[0], 0);
  double sum = 0;
  for (double v : values) sum += v;
  EXPECT_NEAR(h.sum, sum, 1e-9 * values.size());
}

TEST_F(LoggerTest, TensorBoardImagesHoldAPng) {
  TensorBoardLogger logger(dir(), "i", 0);
  // (3, 2, 2) RGB: red, green / blue, white.
  const Tensor img = tensor(std::vector<float>{1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1}, {3, 2, 2});
  logger.log_image("samples/rgb", img, 7);
  logger.log_image("samples/grid", data::make_grid(full({3, 1, 4, 4}, 0.5), {.nrow = 3}), 8);
  EXPECT_EQ(error_of([&] { logger.log_image("bad", zeros({2, 3, 3}), 9); }),
            "TensorBoardLogger: image 'bad' at step 9: to_pixels: expected 1, 3 or 4 channels (grey, RGB, RGBA) in "
            "dim 0, got shape (2, 3, 3)");
  logger.finalize("success");
  const std::vector<TfEvent> events = read_tfevents(logger.event_file());
  ASSERT_EQ(events.size(), 3u);
  const TfImage rgb = *events[1].values.at(0).image;
  EXPECT_EQ(events[1].step, 7);
  EXPECT_EQ(rgb.height, 2);
  EXPECT_EQ(rgb.width, 2);
  EXPECT_EQ(rgb.colorspace, 3);
  const PngImage png = decode_png(rgb.encoded);
  EXPECT_EQ(png.pixels, (std::vector<uint8_t>{255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255}));
  const TfImage grid = *events[2].values.at(0).image;
  EXPECT_EQ(grid.width, 3 * 6 + 2);
  EXPECT_EQ(grid.height, 4 + 4);
  EXPECT_EQ(decode_png(grid.encoded).pixels.at((2 * grid.width + 2) * 3), 128);  // 0.5 -> 128
}

// A regression module that logs its weights' histogram every training step and one image per validation.
struct HistogramRegressor : Regressor {
  Tensor training_step(const data::Batch& b, int64_t i) override {
    log_histogram("fc/weight", fc->weight);
    return Regressor::training_step(b, i);
  }
};

TEST_F(LoggerTest, TrainModulesLogHistogramsAndImagesAtTheGlobalStep) {
  auto logger = std::make_shared<TensorBoardLogger>(dir(), "t", 0);
  HistogramRegressor module;
  module.on_validation = [](Regressor& m, const data::Batch& b) { m.log_image("val/inputs", b[0].unsqueeze(0).sigmoid()); };
  trainer::TrainerOptions o;
  o.max_epochs = 2;
  o.num_sanity_val_steps = 1;
  o.loggers = {logger};
  o.enable_checkpointing = false;
  o.enable_progress_bar = false;
  o.enable_model_summary = false;
  o.default_root_dir = dir();
  trainer::Trainer t(o);
  auto train = loader(regression_data(32), 8);
  auto val = loader(regression_data(8, 9), 8);
  t.fit(module, *train, val.get());
  std::vector<int64_t> histogram_steps, image_steps;
  for (const TfEvent& e : read_tfevents(logger->event_file())) {
    for (const TfValue& v : e.values) {
      if (v.histo) histogram_steps.push_back(e.step);
      if (v.image) image_steps.push_back(e.step);
    }
  }
  // The histogram before each of the 8 optimizer steps (global step 0 .. 7); one image per epoch's
  // validation (after steps 4 and 8), none from the sanity check.
  EXPECT_EQ(histogram_steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(image_steps, (std::vector<int64_t>{4, 8}));
  // Outside a Trainer: an error, as log().
  HistogramRegressor alone;
  EXPECT_EQ(error_of([&] { alone.log_histogram("w", alone.fc->weight); }),
            "Regressor: log_histogram(\"w\") outside a Trainer's fit, validate or test");
}

}  // namespace
}  // namespace kiln::test
