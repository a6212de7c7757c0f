// The Trainer's profiler option (TrainerOptions::profiler): a profiler::Profiler around each fit, validate,
// test and predict, the hooks' event names, and the report each stage writes when it ends. The loops' own
// ranges (training_step, backward, ...) sit in trainer.cpp and trainer_eval.cpp, where those actions run.
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <typeindex>
#include <unordered_map>

#include "kiln/trainer/csv_logger.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

void Trainer::start_profiler() {
  if (options_.profiler.empty() || options_.profiler == "none") return;
  profiler::Options po;
  po.kernels = po.backward = options_.profiler == "ops";
  profiler_ = std::make_unique<profiler::Profiler>(po);
}

void Trainer::finish_profiler(Stage stage) {
  if (!profiler_) return;
  profiler_->stop();
  // The stage itself has succeeded: a report that cannot be written is a warning, not the stage's failure.
  if (is_global_zero()) {
    std::printf("\n%s", profiler_->table(20).c_str());
    try {
      const std::filesystem::path dir = log_dir();
      std::filesystem::create_directories(dir);
      const std::string stem = (dir / stage_name(stage)).string();
      write_file_atomically(stem + "-profile.txt", profiler_->table(0), "Trainer profiler");
      std::printf("every row: %s-profile.txt", stem.c_str());
      if (options_.profiler == "ops") {
        profiler_->write_chrome_trace(stem + "-trace.json");
        std::printf(", timeline: %s-trace.json", stem.c_str());
      }
      std::printf("\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "\nTrainer: the profile of %s() was not written: %s\n", stage_name(stage), e.what());
    }
    std::fflush(stdout);
  }
  profiler_.reset();
}

std::string Trainer::hook_event_name(const Callback& callback, const char* hook) {
  // The dynamic type's name without its namespaces ("kiln::trainer::ModelCheckpoint" -> "ModelCheckpoint"),
  // demangled once per type.
  static std::mutex mu;
  static std::unordered_map<std::type_index, std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = names.try_emplace(std::type_index(typeid(callback)));
  if (inserted) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(typeid(callback).name(), nullptr, nullptr, &status);
    std::string name = status == 0 && demangled ? demangled : typeid(callback).name();
    std::free(demangled);
    if (const size_t colon = name.rfind("::", name.find('<')); colon != std::string::npos) name.erase(0, colon + 2);
    it->second = std::move(name);
  }
  return it->second + "." + hook;
}

}  // namespace kiln::trainer
