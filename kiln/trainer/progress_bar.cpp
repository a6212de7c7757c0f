// ProgressBar: the live line (terminal) and the plain lines (everything else). The live line is padded with
// spaces to the previous line's width rather than cleared with an ANSI escape, so that force_tty output written
// to a file holds only text and '\r'; it is cut to the terminal's width, since a line that wraps can no longer
// be redrawn in place.
#include "kiln/trainer/progress_bar.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/ioctl.h>
#include <unistd.h>
#endif

#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

namespace {

// Display columns of UTF-8 text (every code point one column: all this bar prints).
size_t columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string truncate_columns(const std::string& s, size_t max_columns) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && n++ == max_columns) return s.substr(0, i);
  }
  return s;
}

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-:--:--";
  const auto s = static_cast<long long>(seconds);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string value_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

}  // namespace

ProgressBar::ProgressBar(ProgressBarOptions options) : options_(options) {
  KILN_CHECK(options_.out != nullptr, "ProgressBar: out is null; pass a FILE* (stdout by default)");
  KILN_CHECK(options_.refresh_seconds >= 0, "ProgressBar: refresh_seconds = ", options_.refresh_seconds,
             ": expected >= 0");
  KILN_CHECK(options_.print_every_n_batches >= 0, "ProgressBar: print_every_n_batches = ",
             options_.print_every_n_batches, ": expected >= 0 (0: about ten lines per epoch)");
  KILN_CHECK(options_.bar_width >= 1, "ProgressBar: bar_width = ", options_.bar_width, ": expected >= 1");
  tty_ = options_.force_tty;
#if defined(__unix__) || defined(__APPLE__)
  const int fd = fileno(options_.out);
  if (fd >= 0 && isatty(fd)) {
    tty_ = true;
    winsize ws{};
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) terminal_columns_ = ws.ws_col;
  }
#endif
}

double ProgressBar::seconds_since(Clock::time_point t) const {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string ProgressBar::epoch_label(const Trainer& trainer) const {
  char buf[64];
  const auto epoch = static_cast<long long>(trainer.current_epoch() + 1);
  if (trainer.options().max_epochs > 0) {
    std::snprintf(buf, sizeof(buf), "Epoch %lld/%lld", epoch, static_cast<long long>(trainer.options().max_epochs));
  } else {
    std::snprintf(buf, sizeof(buf), "Epoch %lld", epoch);
  }
  return buf;
}

std::string ProgressBar::progress(int64_t done, int64_t total, double elapsed) const {
  const int width = options_.bar_width;
  const double frac = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  const int full = static_cast<int>(frac * width);
  std::string bar;
  for (int i = 0; i < width; ++i) {
    if (i < full) {
      bar += options_.ascii ? "=" : "━";
    } else if (i == full && full > 0) {
      bar += options_.ascii ? ">" : "╸";
    } else {
      bar += options_.ascii ? "." : "─";
    }
  }
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  char buf[128];
  if (total < 0) {  // a stream: no total, no time left
    std::snprintf(buf, sizeof(buf), " %lld/? %s %.1f it/s", static_cast<long long>(done), clock_text(elapsed).c_str(),
                  rate);
    return buf + 1;
  }
  const double remaining = rate > 0 ? static_cast<double>(total - done) / rate : NAN;
  std::snprintf(buf, sizeof(buf), " %lld/%lld %s<%s %.1f it/s", static_cast<long long>(done),
                static_cast<long long>(total), clock_text(elapsed).c_str(), clock_text(remaining).c_str(), rate);
  return bar + buf;
}

std::string ProgressBar::metrics_text(const Trainer& trainer, bool with_val) const {
  std::map<std::string, double> shown = trainer.progress_bar_metrics();
  for (const std::string& name : with_val ? val_names_ : std::set<std::string>{}) {
    auto it = trainer.callback_metrics().find(name);
    if (it != trainer.callback_metrics().end()) shown[name] = it->second;
  }
  std::string out;
  for (const auto& [k, v] : shown) out += (out.empty() ? "" : " ") + k + "=" + value_text(v);
  return out;
}

void ProgressBar::setup(Trainer& trainer, TrainModule&, Stage) { silent_ = !trainer.is_global_zero(); }

void ProgressBar::draw(const std::string& text) {
  if (silent_) return;
  std::string line = terminal_columns_ > 1 ? truncate_columns(text, terminal_columns_ - 1) : text;
  const size_t cols = columns(line);
  if (cols < line_columns_) line.append(line_columns_ - cols, ' ');
  std::fprintf(options_.out, "\r%s", line.c_str());
  std::fflush(options_.out);
  line_columns_ = std::max<size_t>(cols, 1);
  last_draw_ = Clock::now();
}

void ProgressBar::end_line() {
  if (silent_ || line_columns_ == 0) return;
  std::fputc('\n', options_.out);
  std::fflush(options_.out);
  line_columns_ = 0;
}

void ProgressBar::print_line(const std::string& line) {
  if (silent_) return;
  end_line();
  std::fprintf(options_.out, "%s\n", line.c_str());
  std::fflush(options_.out);
}

// ---- training ----

void ProgressBar::on_train_epoch_start(Trainer& trainer, TrainModule&) {
  epoch_start_ = Clock::now();
  last_draw_ = Clock::time_point{};
  validated_this_epoch_ = false;
  if (tty_) draw(epoch_label(trainer) + " " + progress(trainer.batch_in_epoch(), trainer.num_training_batches(), 0));
}

void ProgressBar::on_train_batch_end(Trainer& trainer, TrainModule&, const Tensor&, const data::Batch&,
                                     int64_t batch_idx) {
  const int64_t done = batch_idx + 1, total = trainer.num_training_batches();
  const double elapsed = seconds_since(epoch_start_);
  if (tty_) {
    if (seconds_since(last_draw_) < options_.refresh_seconds && done != total) return;
    const std::string m = metrics_text(trainer, true);
    draw(epoch_label(trainer) + " " + progress(done, total, elapsed) + (m.empty() ? "" : " " + m));
    return;
  }
  const int64_t every =
      options_.print_every_n_batches > 0 ? options_.print_every_n_batches
                                         : total < 0 ? 100 : std::max<int64_t>(1, total / 10);
  if (done % every != 0 || done == total) return;  // the epoch's summary covers its last batch
  char buf[96];
  const std::string total_text = total < 0 ? "?" : std::to_string(total);
  std::snprintf(buf, sizeof(buf), " [%lld/%s] %.1f it/s", static_cast<long long>(done), total_text.c_str(),
                elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0);
  const std::string m = metrics_text(trainer, false);
  print_line(epoch_label(trainer) + buf + (m.empty() ? "" : " " + m));
}

void ProgressBar::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  const double elapsed = seconds_since(epoch_start_);
  // The live line keeps the last validation's values (as Lightning's bar does); a summary line shows only
  // this epoch's.
  const std::string m = metrics_text(trainer, tty_ || validated_this_epoch_);
  if (tty_) {
    draw(epoch_label(trainer) + " " + progress(trainer.batch_in_epoch(), trainer.num_training_batches(), elapsed) +
         (m.empty() ? "" : " " + m));
    end_line();
    return;
  }
  const int64_t done = trainer.batch_in_epoch();
  char buf[128];
  std::snprintf(buf, sizeof(buf), ": %lld batches in %.1fs (%.1f it/s)", static_cast<long long>(done), elapsed,
                elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0);
  print_line(epoch_label(trainer) + buf + (m.empty() ? "" : " " + m));
}

// ---- validation and test ----

void ProgressBar::learn_eval_names(const Trainer& trainer, std::set<std::string>& names) const {
  for (const auto& [k, v] : trainer.callback_metrics()) {
    auto it = eval_start_metrics_.find(k);
    if (it == eval_start_metrics_.end() || !same_value(it->second, v)) names.insert(k);
  }
}

std::string ProgressBar::eval_summary(const Trainer& trainer, const char* label,
                                      const std::set<std::string>& names) const {
  std::string out = label;
  out += ":";
  for (const std::string& name : names) {
    auto it = trainer.callback_metrics().find(name);
    if (it != trainer.callback_metrics().end()) out += " " + name + "=" + value_text(it->second);
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), " (%lld batches in %.1fs)", static_cast<long long>(trainer.num_eval_batches()),
                seconds_since(eval_start_));
  return out + buf;
}

void ProgressBar::eval_batch(const Trainer& trainer, const char* label, int64_t batch_idx) {
  if (!tty_ || trainer.sanity_checking()) return;
  const int64_t done = batch_idx + 1, total = trainer.num_eval_batches();
  if (seconds_since(last_draw_) < options_.refresh_seconds && done != total) return;
  draw(std::string(label) + " " + progress(done, total, seconds_since(eval_start_)));
}

void ProgressBar::on_validation_start(Trainer& trainer, TrainModule&) {
  eval_start_ = Clock::now();
  eval_start_metrics_ = trainer.callback_metrics();
}

void ProgressBar::on_validation_batch_end(Trainer& trainer, TrainModule&, const Tensor&, const data::Batch&,
                                          int64_t batch_idx) {
  eval_batch(trainer, "Validation", batch_idx);
}

void ProgressBar::on_validation_end(Trainer& trainer, TrainModule&) {
  if (trainer.sanity_checking()) return;
  learn_eval_names(trainer, val_names_);
  if (trainer.stage() == Stage::Fit) {
    // Inside fit: the epoch's line takes its place back, now with the validation metrics.
    validated_this_epoch_ = true;
    if (tty_) {
      const std::string m = metrics_text(trainer, true);
      draw(epoch_label(trainer) + " " +
           progress(trainer.batch_in_epoch(), trainer.num_training_batches(), seconds_since(epoch_start_)) +
           (m.empty() ? "" : " " + m));
    }
    return;
  }
  if (tty_) end_line();
  print_line(eval_summary(trainer, "Validation", val_names_));
}

void ProgressBar::on_test_start(Trainer& trainer, TrainModule&) {
  eval_start_ = Clock::now();
  eval_start_metrics_ = trainer.callback_metrics();
}

void ProgressBar::on_test_batch_end(Trainer& trainer, TrainModule&, const Tensor&, const data::Batch&,
                                    int64_t batch_idx) {
  eval_batch(trainer, "Testing", batch_idx);
}

void ProgressBar::on_test_end(Trainer& trainer, TrainModule&) {
  learn_eval_names(trainer, test_names_);
  if (tty_) end_line();
  print_line(eval_summary(trainer, "Test", test_names_));
}

void ProgressBar::on_exception(Trainer&, TrainModule&, const std::exception&) {
  // The error message that follows should start on a line of its own.
  end_line();
}

}  // namespace kiln::trainer
