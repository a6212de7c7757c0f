// ModelSummary: walks the module tree (named_children, so that a module not held by a shared_ptr, like a
// TrainModule on the stack, can be summarized) and prints the table.
#include "kiln/trainer/model_summary.h"

#include <algorithm>

#include "kiln/trainer/train_module.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

namespace {

void add_layers(const nn::Module& module, const std::string& prefix, int depth, int max_depth,
                std::vector<LayerSummary>& out) {
  if (max_depth >= 0 && depth > max_depth) return;
  for (const auto& [name, child] : module.named_children()) {
    LayerSummary row;
    row.name = prefix.empty() ? name : prefix + "." + name;
    row.type = child->type_name();
    for (const Tensor& p : child->parameters()) {
      row.params += p.numel();
      row.bytes += static_cast<int64_t>(p.nbytes());
    }
    out.push_back(row);
    add_layers(*child, row.name, depth + 1, max_depth, out);
  }
}

// 401920 -> "401,920"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string megabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(bytes) / 1e6);
  return buf;
}

std::string pad(const std::string& s, size_t width) { return s.size() >= width ? s : s + std::string(width - s.size(), ' '); }

}  // namespace

ModuleSummary summarize(const nn::Module& module, int max_depth) {
  KILN_CHECK(max_depth >= -1, "model_summary: max_depth = ", max_depth, ": expected -1 (all levels) or >= 0");
  ModuleSummary s;
  add_layers(module, "", 1, max_depth, s.layers);
  for (const Tensor& p : module.parameters()) {
    (p.requires_grad() ? s.trainable_params : s.non_trainable_params) += p.numel();
    s.total_bytes += static_cast<int64_t>(p.nbytes());
  }
  s.total_params = s.trainable_params + s.non_trainable_params;
  return s;
}

std::string model_summary(const nn::Module& module, int max_depth) {
  const ModuleSummary s = summarize(module, max_depth);
  std::string out;
  if (!s.layers.empty()) {
    const std::vector<std::string> head = {"", "Name", "Type", "Params", "Size (MB)"};
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < s.layers.size(); ++i) {
      const LayerSummary& l = s.layers[i];
      rows.push_back({std::to_string(i), l.name, l.type, grouped(l.params), megabytes(l.bytes)});
    }
    std::vector<size_t> width(head.size());
    for (size_t c = 0; c < head.size(); ++c) {
      width[c] = head[c].size();
      for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& r) {
      std::string l;
      for (size_t c = 0; c < r.size(); ++c) l += (c == 0 ? "" : " | ") + pad(r[c], width[c]);
      while (!l.empty() && l.back() == ' ') l.pop_back();
      return l + "\n";
    };
    const std::string header = line(head);
    const std::string rule(header.size() - 1, '-');
    out += header + rule + "\n";
    for (const auto& r : rows) out += line(r);
    out += rule + "\n";
  }
  out += pad(grouped(s.trainable_params), 10) + "Trainable params\n";
  out += pad(grouped(s.non_trainable_params), 10) + "Non-trainable params\n";
  out += pad(grouped(s.total_params), 10) + "Total params\n";
  out += pad(megabytes(s.total_bytes), 10) + "Total estimated model params size (MB)\n";
  return out;
}

ModelSummary::ModelSummary(ModelSummaryOptions options) : options_(options) {
  KILN_CHECK(options_.max_depth >= -1, "ModelSummary: max_depth = ", options_.max_depth,
             ": expected -1 (all levels) or >= 0");
  KILN_CHECK(options_.out != nullptr, "ModelSummary: out is null; pass a FILE* (stdout by default)");
}

void ModelSummary::on_fit_start(Trainer& trainer, TrainModule& module) {
  if (!trainer.is_global_zero()) return;  // under ddp, rank 0 prints for all
  const std::string text = model_summary(module, options_.max_depth);
  std::fputs(text.c_str(), options_.out);
  std::fflush(options_.out);
}

}  // namespace kiln::trainer
