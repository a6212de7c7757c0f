// TensorBoardLogger: a minimal protobuf encoder, the few messages TensorBoard needs, and TFRecord framing.
//
// Protobuf wire format, as much of it as an Event needs: every field is a key varint (field_number << 3 |
// wire_type) then its value: wire type 0 a varint, 1 eight little-endian bytes (double), 2 a varint length and
// that many bytes (strings, bytes, nested messages), 5 four little-endian bytes (float). Fields holding their
// default value are left out, as proto3 encoders do. Field numbers are TensorBoard's (tensorboard/compat/proto):
//   Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//           SessionLog session_log = 7; }
//   SessionLog { SessionStatus status = 1; }                      START = 1
//   Summary { repeated Value value = 1; }
//   Summary.Value { string tag = 1; float simple_value = 2; Image image = 4; HistogramProto histo = 5;
//                   TensorProto tensor = 8; SummaryMetadata metadata = 9; }
//   Summary.Image { int32 height = 1; int32 width = 2; int32 colorspace = 3; bytes encoded_image_string = 4; }
//                                                       colorspace: 1 grey, 3 RGB, 4 RGBA (the PNG's channels)
//   HistogramProto { double min = 1; double max = 2; double num = 3; double sum = 4; double sum_squares = 5;
//                    repeated double bucket_limit = 6 [packed]; repeated double bucket = 7 [packed]; }
//     bucket i counts the values in (bucket_limit[i - 1], bucket_limit[i]], bucket 0 those up to bucket_limit[0].
//   SummaryMetadata { PluginData plugin_data = 1; }   PluginData { string plugin_name = 1; }
//   TensorProto { DataType dtype = 1; TensorShapeProto tensor_shape = 2; repeated bytes string_val = 8; }
//   DataType DT_STRING = 7; an empty TensorShapeProto is a scalar.
#include "kiln/trainer/tensorboard_logger.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kiln/data/image.h"
#include "kiln/serialize/crc32c.h"
#include "kiln/tensor/error.h"
#include "kiln/trainer/csv_logger.h"

namespace kiln::trainer {
namespace {

std::string sys_error() { return std::strerror(errno); }

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Appends protobuf fields to a byte string; a nested message is built in its own ProtoWriter and added whole.
class ProtoWriter {
 public:
  void varint_field(uint32_t field, uint64_t value) {
    key(field, kVarint);
    varint(value);
  }
  void double_field(uint32_t field, double value) {
    key(field, kFixed64);
    uint64_t bits;
    std::memcpy(&bits, &value, 8);
    little_endian(bits, 8);
  }
  void float_field(uint32_t field, float value) {
    key(field, kFixed32);
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    little_endian(bits, 4);
  }
  void bytes_field(uint32_t field, const std::string& bytes) {
    key(field, kLengthDelimited);
    varint(bytes.size());
    out_ += bytes;
  }
  void message_field(uint32_t field, const ProtoWriter& message) { bytes_field(field, message.out_); }
  // A packed repeated double: one length-delimited field holding the values' eight bytes each.
  void packed_doubles_field(uint32_t field, const std::vector<double>& values) {
    key(field, kLengthDelimited);
    varint(values.size() * 8);
    for (double v : values) {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      little_endian(bits, 8);
    }
  }
  const std::string& bytes() const { return out_; }

 private:
  void key(uint32_t field, WireType type) { varint(uint64_t{field} << 3 | type); }
  // Seven bits a byte, low first, high bit set on all but the last. A negative int64 is its two's complement
  // as uint64 (ten bytes), as protobuf encodes int64.
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_ += static_cast<char>((v & 0x7F) | 0x80);
      v >>= 7;
    }
    out_ += static_cast<char>(v);
  }
  void little_endian(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>(v >> (8 * i));
  }
  std::string out_;
};

constexpr uint32_t kSessionStart = 1;
constexpr uint32_t kDtString = 7;

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// An Event with its time and step; the caller adds the one field of the `what` oneof.
ProtoWriter event_header(int64_t step) {
  ProtoWriter event;
  event.double_field(1, now_seconds());
  if (step != 0) event.varint_field(2, static_cast<uint64_t>(step));
  return event;
}

// An Event at `step` holding `summary`, serialized.
std::string summary_event(int64_t step, const ProtoWriter& summary) {
  ProtoWriter event = event_header(step);
  event.message_field(5, summary);
  return event.bytes();
}

// A Summary of one Value: `tag` and the message `payload` in the Value's field `field` (4 image, 5 histo).
ProtoWriter one_value(const std::string& tag, uint32_t field, const ProtoWriter& payload) {
  ProtoWriter value, summary;
  value.bytes_field(1, tag);
  value.message_field(field, payload);
  summary.message_field(1, value);
  return summary;
}

// Markdown table of the hyperparameters for TensorBoard's Text tab. '|' would end a cell and a newline a row,
// so both are escaped; hparams.yaml keeps the exact text.
std::string markdown_table(const std::map<std::string, std::string>& hparams) {
  auto cell = [](const std::string& text) {
    std::string out;
    for (char c : text) {
      if (c == '|') out += "\\|";
      else if (c == '\n') out += "<br>";
      else if (c != '\r') out += c;
    }
    return out;
  };
  std::string md = "| key | value |\n|---|---|\n";
  for (const auto& [key, value] : hparams) md += "| " + cell(key) + " | " + cell(value) + " |\n";
  return md;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

TensorBoardLogger::TensorBoardLogger(std::string save_dir, std::string name, int64_t version) {
  // In the body, not the init list: version_'s own initializer would run after log_dir_'s and undo it.
  log_dir_ = resolve_log_dir(save_dir, name, version, &version_);
}

TensorBoardLogger::~TensorBoardLogger() { close_file(); }

void TensorBoardLogger::close_file() noexcept {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

void TensorBoardLogger::open() {
  if (file_) return;
  std::error_code ec;
  std::filesystem::create_directories(log_dir_, ec);
  KILN_CHECK(!ec, "TensorBoardLogger: cannot create the run folder ", log_dir_, ": ", ec.message());
  // The counter keeps two loggers of one process in one second apart; TensorBoard reads the files of a folder
  // in name order, so a resumed run's file (a later timestamp) comes after the interrupted run's.
  static std::atomic<uint64_t> counter{0};
  char seconds[24];
  std::snprintf(seconds, sizeof seconds, "%010lld", static_cast<long long>(now_seconds()));
  std::string path = log_dir_ + "/events.out.tfevents." + seconds + "." + hostname() + "." +
                     std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  file_ = std::fopen(path.c_str(), "wbx");  // x: never append to someone else's file
  KILN_CHECK(file_, "TensorBoardLogger: cannot create ", path, ": ", sys_error());
  path_ = path;
  ProtoWriter event = event_header(0);
  event.bytes_field(3, "brain.Event:2");
  write_record(event.bytes());
}

void TensorBoardLogger::write_record(const std::string& event) {
  char header[12];
  uint64_t length = event.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(length >> (8 * i));
  uint32_t length_crc = serialize::masked_crc32c(header, 8);
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>(length_crc >> (8 * i));
  uint32_t data_crc = serialize::masked_crc32c(event.data(), event.size());
  char footer[4];
  for (int i = 0; i < 4; ++i) footer[i] = static_cast<char>(data_crc >> (8 * i));
  bool ok = std::fwrite(header, 1, 12, file_) == 12 && std::fwrite(event.data(), 1, event.size(), file_) == event.size() &&
            std::fwrite(footer, 1, 4, file_) == 4 && std::fflush(file_) == 0;
  KILN_CHECK(ok, "TensorBoardLogger: writing ", path_, ": ", sys_error());
}

void TensorBoardLogger::log_hyperparams(const std::map<std::string, std::string>& hparams) {
  open();
  for (const auto& [key, value] : hparams) hparams_[key] = value;
  save_hparams_yaml(log_dir_, hparams_);

  ProtoWriter plugin_data, metadata, shape, tensor, value, summary;
  plugin_data.bytes_field(1, "text");
  metadata.message_field(1, plugin_data);
  tensor.varint_field(1, kDtString);
  tensor.message_field(2, shape);  // no dims: a scalar string
  tensor.bytes_field(8, markdown_table(hparams_));
  value.bytes_field(1, "hparams");
  value.message_field(8, tensor);
  value.message_field(9, metadata);
  summary.message_field(1, value);
  write_record(summary_event(0, summary));
}

void TensorBoardLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  open();
  ProtoWriter summary;
  for (const auto& [tag, v] : metrics) {
    KILN_CHECK(!tag.empty(), "TensorBoardLogger: empty metric name at step ", step);
    ProtoWriter value;
    value.bytes_field(1, tag);
    // NOTE: simple_value is a float32, as TensorBoard stores scalars; the CSV keeps the full double.
    value.float_field(2, static_cast<float>(v));
    summary.message_field(1, value);
  }
  write_record(summary_event(step, summary));
}

void TensorBoardLogger::log_histogram(const std::string& tag, const Tensor& values, int64_t step, int64_t bins) {
  KILN_CHECK(!tag.empty(), "TensorBoardLogger: empty histogram name at step ", step);
  KILN_CHECK(bins >= 1, "TensorBoardLogger: histogram '", tag, "': bins must be >= 1, got ", bins);
  KILN_CHECK(values.defined() && values.numel() > 0, "TensorBoardLogger: histogram '", tag, "' at step ", step,
             ": no values (", values.defined() ? "shape " + shape_str(values.shape()) : std::string("undefined"), ")");
  const Tensor v = values.detach().to(Device::cpu()).to(kFloat64).contiguous();
  const double* x = v.data_ptr<double>();
  const int64_t n = v.numel();
  double lo = x[0], hi = x[0], sum = 0, sum_squares = 0;
  int64_t not_finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      ++not_finite;
      continue;
    }
    lo = std::isfinite(lo) ? std::min(lo, x[i]) : x[i];
    hi = std::isfinite(hi) ? std::max(hi, x[i]) : x[i];
    sum += x[i];
    sum_squares += x[i] * x[i];
  }
  KILN_CHECK(not_finite == 0, "TensorBoardLogger: histogram '", tag, "' at step ", step, ": ", not_finite, " of ", n,
             " values are NaN or infinite; a histogram takes finite values only");
  // numpy.histogram's bins: `bins` equal widths over [lo, hi] (widened by 0.5 each way when lo == hi), each
  // bin half-open but the last, which holds hi. The index from the width alone can be one off next to an edge
  // in floating point, so it is checked against the edges themselves.
  // The edges as numpy.linspace makes them (i * step + first, the last one exactly `last`), so that a value on
  // an edge lands in numpy's bin.
  const double first = lo == hi ? lo - 0.5 : lo, last = lo == hi ? hi + 0.5 : hi;
  KILN_CHECK(last > first && std::isfinite(last - first), "TensorBoardLogger: histogram '", tag, "' at step ", step,
             ": the values' range [", first, ", ", last, "] cannot be cut into ", bins,
             " bins in float64 (too narrow for their magnitude, or wider than the largest double)");
  const double width = (last - first) / static_cast<double>(bins), norm = static_cast<double>(bins) / (last - first);
  std::vector<double> edges(static_cast<size_t>(bins) + 1);
  for (int64_t i = 0; i <= bins; ++i) edges[i] = static_cast<double>(i) * width + first;
  edges[bins] = last;
  std::vector<double> counts(static_cast<size_t>(bins) + 1, 0.0);  // counts[0]: the empty bucket up to edges[0]
  for (int64_t i = 0; i < n; ++i) {
    int64_t b = std::clamp<int64_t>(static_cast<int64_t>((x[i] - first) * norm), 0, bins - 1);
    if (x[i] < edges[b]) --b;
    else if (b + 1 < bins && x[i] >= edges[b + 1]) ++b;
    counts[static_cast<size_t>(b) + 1] += 1;
  }
  // TensorBoard keeps only each bucket's right limit: the leading empty bucket carries the left edge.
  ProtoWriter histo;
  histo.double_field(1, lo);
  histo.double_field(2, hi);
  histo.double_field(3, static_cast<double>(n));
  histo.double_field(4, sum);
  histo.double_field(5, sum_squares);
  histo.packed_doubles_field(6, edges);
  histo.packed_doubles_field(7, counts);
  open();
  write_record(summary_event(step, one_value(tag, 5, histo)));
}

void TensorBoardLogger::log_image(const std::string& tag, const Tensor& image, int64_t step) {
  KILN_CHECK(!tag.empty(), "TensorBoardLogger: empty image name at step ", step);
  Tensor pixels;  // (H, W, C) uint8
  try {
    pixels = data::to_pixels(image.detach());
  } catch (const Error& e) {
    detail::throw_error(detail::concat("TensorBoardLogger: image '", tag, "' at step ", step, ": ", e.what()));
  }
  ProtoWriter img;
  img.varint_field(1, static_cast<uint64_t>(pixels.size(0)));
  img.varint_field(2, static_cast<uint64_t>(pixels.size(1)));
  img.varint_field(3, static_cast<uint64_t>(pixels.size(2)));
  img.bytes_field(4, data::encode_png(pixels.permute({2, 0, 1})));
  open();
  write_record(summary_event(step, one_value(tag, 4, img)));
}

void TensorBoardLogger::on_resume(int64_t step) {
  open();
  ProtoWriter session_log;
  session_log.varint_field(1, kSessionStart);
  ProtoWriter event = event_header(step + 1);
  event.message_field(7, session_log);
  write_record(event.bytes());
}

void TensorBoardLogger::flush() {
  if (!file_) return;
  KILN_CHECK(std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0, "TensorBoardLogger: flushing ", path_, ": ",
             sys_error());
}

void TensorBoardLogger::finalize(const std::string& status) {
  flush();
  close_file();
}

}  // namespace kiln::trainer
