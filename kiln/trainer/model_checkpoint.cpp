// ModelCheckpoint: when to save, which files to keep, and the file names. The order inside one save matters:
// bookkeeping first (so the new file records itself as kept), then the new file, then last.ckpt, and only
// then the deletion of the file it pushed out of the top k.
#include "kiln/trainer/model_checkpoint.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <vector>

#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

namespace {

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double parse_double(const std::string& text, const char* key) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  KILN_CHECK(end != text.c_str() && *end == '\0', "ModelCheckpoint: checkpoint state '", key, "' = '", text,
             "' is not a number");
  return v;
}

std::string metric_names(const std::map<std::string, double>& metrics) {
  std::string out;
  for (const auto& [k, v] : metrics) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "(none)" : out;
}

// One {name:spec} replaced by its value. spec: "" (metrics: .4f; epoch and step: an integer), "d", or
// ".<digits><f|e|g>".
std::string format_value(const std::string& name, const std::string& spec, double value, bool integer) {
  char buf[64];
  if (spec.empty() && integer) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(value));
    return buf;
  }
  if (spec == "d") {
    KILN_CHECK(!std::isnan(value), "ModelCheckpoint: filename field {", name, ":d} but '", name, "' is nan");
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(std::llround(value)));
    return buf;
  }
  std::string fmt = "%.4f";
  if (!spec.empty()) {
    const bool ok = spec.size() >= 3 && spec[0] == '.' && std::string("feg").find(spec.back()) != std::string::npos &&
                    spec.find_first_not_of("0123456789", 1) == spec.size() - 1;
    KILN_CHECK(ok, "ModelCheckpoint: filename field {", name, ":", spec,
               "}: unsupported format; expected :d or :.<digits> followed by f, e or g (as :.4f)");
    fmt = "%" + spec;
  }
  std::snprintf(buf, sizeof(buf), fmt.c_str(), value);
  return buf;
}

}  // namespace

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options)
    : options_(std::move(options)), best_model_score_(kNaN) {
  const auto& o = options_;
  KILN_CHECK(o.mode == "min" || o.mode == "max", "ModelCheckpoint: mode '", o.mode, "': expected 'min' or 'max'");
  KILN_CHECK(o.save_top_k >= -1, "ModelCheckpoint: save_top_k = ", o.save_top_k,
             ": expected -1 (keep all), 0 (none) or k > 0");
  KILN_CHECK(!(o.monitor.empty() && o.save_top_k > 1), "ModelCheckpoint: save_top_k = ", o.save_top_k,
             " needs a monitor to rank the files by; with no monitor use 1 (the latest) or -1 (all)");
  KILN_CHECK(o.every_n_train_steps >= 0, "ModelCheckpoint: every_n_train_steps = ", o.every_n_train_steps,
             ": expected >= 0 (0: off)");
  KILN_CHECK(!o.every_n_epochs || *o.every_n_epochs >= 0, "ModelCheckpoint: every_n_epochs = ",
             o.every_n_epochs.value_or(0), ": expected >= 0 (0: off)");
  KILN_CHECK(o.train_time_interval >= 0 && std::isfinite(o.train_time_interval),
             "ModelCheckpoint: train_time_interval = ", o.train_time_interval, " s: expected >= 0 (0: off)");
  KILN_CHECK(!o.filename.empty(), "ModelCheckpoint: filename is empty");
  // As Lightning: the epoch cadence is on by default only when no step or time cadence is asked for.
  every_n_epochs_ = o.every_n_epochs.value_or(o.every_n_train_steps > 0 || o.train_time_interval > 0 ? 0 : 1);
  dirpath_ = o.dirpath;
}

std::string ModelCheckpoint::state_key() const {
  std::string key = "ModelCheckpoint{monitor=" + options_.monitor + ",mode=" + options_.mode +
                    ",every_n_epochs=" + std::to_string(every_n_epochs_) +
                    ",every_n_train_steps=" + std::to_string(options_.every_n_train_steps);
  if (options_.train_time_interval > 0) {  // only then, so that the keys of earlier runs' checkpoints stay valid
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", options_.train_time_interval);
    key += std::string(",train_time_interval=") + seconds;
  }
  // A given folder tells two otherwise equal callbacks apart; the default one changes with the logger's
  // version, so it stays out (a resumed run must find its state under the same key).
  if (!options_.dirpath.empty()) key += ",dirpath=" + options_.dirpath;
  return key + "}";
}

// ---- names ----

std::string ModelCheckpoint::format_checkpoint_name(int64_t epoch, int64_t step,
                                                    const std::map<std::string, double>& metrics) const {
  const std::string& t = options_.filename;
  std::string out;
  size_t i = 0;
  while (i < t.size()) {
    if (t[i] != '{') {
      out += t[i++];
      continue;
    }
    const size_t close = t.find('}', i);
    KILN_CHECK(close != std::string::npos, "ModelCheckpoint: filename '", t, "' has a '{' without a '}'");
    const std::string field = t.substr(i + 1, close - i - 1);
    const size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    KILN_CHECK(!name.empty(), "ModelCheckpoint: filename '", t, "' has an empty field {}");
    std::string safe = name;
    for (char& c : safe) c = c == '/' ? '_' : c;
    double value = kNaN;
    bool integer = false;
    if (name == "epoch") {
      value = static_cast<double>(epoch), integer = true;
    } else if (name == "step") {
      value = static_cast<double>(step), integer = true;
    } else if (auto it = metrics.find(name); it != metrics.end()) {
      value = it->second;
    }
    // auto_insert_metric_name, unless the template already says "name=" before the brace.
    const std::string prefix = safe + "=";
    if (out.size() < prefix.size() || out.compare(out.size() - prefix.size(), prefix.size(), prefix) != 0) {
      out += prefix;
    }
    out += format_value(name, spec, value, integer);
    i = close + 1;
  }
  return out;
}

std::string ModelCheckpoint::unique_path(const Trainer& trainer, const std::map<std::string, double>& metrics,
                                         const std::string& replacing) const {
  const std::string stem =
      (fs::path(dirpath_) / format_checkpoint_name(trainer.current_epoch(), trainer.global_step(), metrics)).string();
  std::string path = stem + ".ckpt";
  std::error_code ec;
  for (int v = 1; path != replacing && fs::exists(path, ec); ++v) path = stem + "-v" + std::to_string(v) + ".ckpt";
  return path;
}

// ---- ranking ----

bool ModelCheckpoint::better(double a, double b) const {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return options_.mode == "min" ? a < b : a > b;
}

std::string ModelCheckpoint::worst_path() const {
  std::string worst;
  for (const auto& [path, score] : best_k_models_) {
    if (worst.empty() || better(best_k_models_.at(worst), score)) worst = path;
  }
  return worst;
}

// ---- hooks ----

void ModelCheckpoint::setup(Trainer& trainer, TrainModule&, Stage stage) {
  if (stage != Stage::Fit) return;
  if (options_.dirpath.empty()) dirpath_ = (fs::path(trainer.log_dir()) / "checkpoints").string();
  last_global_step_saved_ = -1;
  step_at_batch_start_ = -1;
  validated_this_epoch_ = validated_ever_ = epoch_ended_ = warned_missing_ = false;
  KILN_CHECK(options_.train_time_interval == 0 || trainer.world_size() <= 1 || trainer.strategy().agree_every_batch(),
             "ModelCheckpoint: train_time_interval needs ranks that step together (ddp) to agree on when to save; "
             "under this strategy they do not (a parameter server's workers run apart): use every_n_train_steps");
}

void ModelCheckpoint::on_train_start(Trainer&, TrainModule&) { last_time_checked_ = now(); }

double ModelCheckpoint::now() const {
  if (options_.clock) return options_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool ModelCheckpoint::should_skip(const Trainer& trainer) const {
  return trainer.stage() != Stage::Fit || trainer.sanity_checking() || trainer.options().fast_dev_run > 0 ||
         last_global_step_saved_ == trainer.global_step();
}

void ModelCheckpoint::on_train_epoch_start(Trainer&, TrainModule&) { validated_this_epoch_ = false; }

void ModelCheckpoint::on_train_batch_start(Trainer& trainer, TrainModule&, const data::Batch&, int64_t) {
  step_at_batch_start_ = trainer.global_step();
}

void ModelCheckpoint::on_train_batch_end(Trainer& trainer, TrainModule&, const Tensor&, const data::Batch&,
                                         int64_t) {
  // Only right after an optimizer step: between steps, accumulated gradients would be lost on resume.
  if (trainer.global_step() == step_at_batch_start_) return;
  const int64_t n = options_.every_n_train_steps;
  const bool by_steps = n > 0 && trainer.global_step() % n == 0;
  bool by_time = false;
  if (options_.train_time_interval > 0 && trainer.stage() == Stage::Fit) {
    // Every rank asks at every step, so that all save together when any rank's clock says so.
    by_time = trainer.any_rank(now() - last_time_checked_ >= options_.train_time_interval);
  }
  if ((!by_steps && !by_time) || should_skip(trainer)) return;
  if (by_time) last_time_checked_ = now();
  save(trainer, Trigger::Step);
}

void ModelCheckpoint::on_validation_end(Trainer& trainer, TrainModule&) {
  if (trainer.stage() == Stage::Fit && !trainer.sanity_checking()) validated_this_epoch_ = validated_ever_ = true;
}

void ModelCheckpoint::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  save_at_epoch_end(trainer);
  epoch_ended_ = true;
}

void ModelCheckpoint::save_at_epoch_end(Trainer& trainer) {
  const int64_t n = every_n_epochs_;
  if (n <= 0 || (trainer.current_epoch() + 1) % n != 0 || should_skip(trainer)) return;
  // A monitored fit with validation is ranked by fresh validation scores only (as Lightning, which saves at
  // validation end): an epoch without validation would be scored with the previous epoch's value.
  if (!options_.monitor.empty() && trainer.num_val_batches() != 0 && !validated_this_epoch_) return;
  save(trainer, Trigger::Epoch);
}

// ---- saving ----

void ModelCheckpoint::save(Trainer& trainer, Trigger trigger) {
  std::map<std::string, double> metrics = trainer.callback_metrics();
  metrics["epoch"] = static_cast<double>(trainer.current_epoch());
  metrics["step"] = static_cast<double>(trainer.global_step());

  // Plan: update the bookkeeping and decide the files, before anything is written.
  std::string new_path;
  std::vector<std::string> to_delete;
  if (options_.save_top_k != 0) {
    if (options_.monitor.empty()) {
      const std::string replacing = options_.save_top_k == 1 ? best_model_path_ : "";
      new_path = unique_path(trainer, metrics, replacing);
      if (!replacing.empty()) to_delete.push_back(replacing);
      best_model_path_ = new_path;
    } else {
      auto it = metrics.find(options_.monitor);
      if (it == metrics.end()) {
        // Before the first validation or epoch end, a step-cadence save may come before the metric exists.
        if (trigger == Trigger::Step && !validated_ever_ && !epoch_ended_) {
          if (!warned_missing_) {
            std::fprintf(stderr, "kiln: ModelCheckpoint: monitor '%s' not logged yet at step %lld; not saving "
                         "until it is\n", options_.monitor.c_str(), static_cast<long long>(trainer.global_step()));
            warned_missing_ = true;
          }
        } else {
          KILN_CHECK(false, "ModelCheckpoint: monitor '", options_.monitor,
                     "' has not been logged; logged metrics: ", metric_names(metrics),
                     ". Log it with log(\"", options_.monitor, "\", value) or fix the monitor name");
        }
      } else {
        const double current = it->second;
        const auto k = static_cast<size_t>(options_.save_top_k);
        std::string replacing;
        bool keep = true;
        if (options_.save_top_k > 0 && best_k_models_.size() >= k) {
          replacing = worst_path();
          keep = better(current, best_k_models_.at(replacing));
        }
        if (keep) {
          if (!replacing.empty()) {
            best_k_models_.erase(replacing);
            to_delete.push_back(replacing);
          }
          new_path = unique_path(trainer, metrics, replacing);
          best_k_models_[new_path] = current;
          best_model_path_.clear();
          for (const auto& [path, score] : best_k_models_) {
            if (best_model_path_.empty() || better(score, best_k_models_.at(best_model_path_))) best_model_path_ = path;
          }
          best_model_score_ = best_k_models_.at(best_model_path_);
        }
      }
    }
  }
  const std::string last = options_.save_last ? (fs::path(dirpath_) / "last.ckpt").string() : "";
  if (!last.empty()) last_model_path_ = last;
  last_global_step_saved_ = trainer.global_step();

  if (!new_path.empty()) write(trainer, new_path);
  if (!last.empty()) write(trainer, last);
  // Rank 0 wrote the files (Trainer::save_checkpoint), and only it removes them; every rank keeps the same
  // bookkeeping, so a resume on any rank carries on alike.
  for (const std::string& path : to_delete) {
    if (path != new_path && path != last && trainer.is_global_zero()) remove_file(path);
  }
}

void ModelCheckpoint::write(Trainer& trainer, const std::string& path) {
  trainer.save_checkpoint(path, options_.save_weights_only);
  if (options_.verbose) {
    std::fprintf(stderr, "kiln: ModelCheckpoint: epoch %lld, step %lld: saved %s\n",
                 static_cast<long long>(trainer.current_epoch()), static_cast<long long>(trainer.global_step()),
                 path.c_str());
  }
}

void ModelCheckpoint::remove_file(const std::string& path) const {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) {
    std::fprintf(stderr, "kiln: ModelCheckpoint: could not delete %s (out of the top %lld): %s\n", path.c_str(),
                 static_cast<long long>(options_.save_top_k), ec.message().c_str());
  }
}

// ---- state ----

CallbackState ModelCheckpoint::checkpoint_state() const {
  CallbackState s;
  s["dirpath"] = dirpath_;
  s["monitor"] = options_.monitor;
  s["best_model_path"] = best_model_path_;
  s["best_model_score"] = exact_text(best_model_score_);
  s["last_model_path"] = last_model_path_;
  s["last_global_step_saved"] = std::to_string(last_global_step_saved_);
  s["best_k.count"] = std::to_string(best_k_models_.size());
  size_t i = 0;
  for (const auto& [path, score] : best_k_models_) {
    s["best_k." + std::to_string(i) + ".path"] = path;
    s["best_k." + std::to_string(i) + ".score"] = exact_text(score);
    ++i;
  }
  return s;
}

void ModelCheckpoint::load_checkpoint_state(const CallbackState& state) {
  if (state.empty()) return;
  auto get = [&](const std::string& key) -> const std::string& {
    auto it = state.find(key);
    KILN_CHECK(it != state.end(), "ModelCheckpoint: checkpoint state lacks '", key, "'");
    return it->second;
  };
  best_model_path_ = get("best_model_path");
  best_model_score_ = parse_double(get("best_model_score"), "best_model_score");
  if (get("dirpath") != dirpath_) {
    // Another folder: the files ranked there are not ours to delete; only the best is remembered.
    std::fprintf(stderr, "kiln: ModelCheckpoint: resuming with dirpath %s, the checkpoint's was %s; only "
                 "best_model_path is restored\n", dirpath_.c_str(), get("dirpath").c_str());
    return;
  }
  last_model_path_ = get("last_model_path");
  last_global_step_saved_ = std::stoll(get("last_global_step_saved"));
  best_k_models_.clear();
  const int64_t n = std::stoll(get("best_k.count"));
  for (int64_t i = 0; i < n; ++i) {
    const std::string p = "best_k." + std::to_string(i);
    best_k_models_[get(p + ".path")] = parse_double(get(p + ".score"), "best_k score");
  }
}

}  // namespace kiln::trainer
