#include "kiln/optim/swa.h"

#include <cmath>
#include <numbers>
#include <utility>

#include "kiln/nn/normalization.h"

namespace kiln::optim {

namespace {
// The tensors an average follows: the parameters, and the buffers with use_buffers (persistent or not, as
// PyTorch's AveragedModel takes them).
std::vector<std::pair<std::string, Tensor>> followed(const nn::Module& model, bool use_buffers) {
  std::vector<std::pair<std::string, Tensor>> out = model.named_parameters();
  if (use_buffers)
    for (auto& named : model.named_buffers()) out.push_back(std::move(named));
  return out;
}
}  // namespace

AveragedWeights::AveragedWeights(const nn::Module& model, AveragedWeightsOptions options) : options_(options) {
  KILN_CHECK(!options.decay || (*options.decay >= 0 && *options.decay <= 1), "AveragedWeights: decay must be in "
             "[0, 1], got ", *options.decay);
  NoGradGuard no_grad;
  for (const auto& [name, t] : followed(model, options.use_buffers))
    if (t.defined()) averages_[name] = t.detach().clone();
  KILN_CHECK(!averages_.empty(), "AveragedWeights: ", model.type_name(), " has no parameters",
             options.use_buffers ? " or buffers" : "", " to average");
}

std::vector<std::pair<Tensor, Tensor>> AveragedWeights::pairs(const nn::Module& model, const char* op) const {
  std::vector<std::pair<Tensor, Tensor>> out;
  size_t found = 0;
  for (const auto& [name, t] : followed(model, options_.use_buffers)) {
    auto it = averages_.find(name);
    if (it == averages_.end() || !t.defined()) continue;
    KILN_CHECK(t.sizes() == it->second.sizes(), "AveragedWeights::", op, ": ", model.type_name(), "'s \"", name,
               "\" has shape ", shape_str(t.sizes()), ", the average ", shape_str(it->second.sizes()));
    out.emplace_back(t, it->second);
    ++found;
  }
  if (found != averages_.size()) {
    for (const auto& [name, avg] : averages_) {
      bool present = false;
      for (const auto& [n, t] : followed(model, options_.use_buffers)) present |= n == name && t.defined();
      KILN_CHECK(present, "AveragedWeights::", op, ": ", model.type_name(), " has no \"", name,
                 "\", which the average holds");
    }
  }
  return out;
}

void AveragedWeights::update(const nn::Module& model) {
  const auto tensors = pairs(model, "update");
  NoGradGuard no_grad;
  const double w = num_updates_ == 0 ? 1.0
                   : options_.decay  ? 1.0 - *options_.decay
                                     : 1.0 / static_cast<double>(num_updates_ + 1);
  for (const auto& [current, average] : tensors) {
    const Tensor now = current.to(average.device(), average.dtype());
    if (w == 1.0 || !average.is_floating_point()) {
      average.copy_(now);  // the first update, and integer buffers (num_batches_tracked)
    } else {
      average.add_(now - average, w);
    }
  }
  ++num_updates_;
}

void AveragedWeights::copy_to(nn::Module& model) const {
  const auto tensors = pairs(model, "copy_to");
  NoGradGuard no_grad;
  for (const auto& [target, average] : tensors) target.copy_(average);
}

void AveragedWeights::swap(nn::Module& model) {
  const auto tensors = pairs(model, "swap");
  NoGradGuard no_grad;
  for (const auto& [target, average] : tensors) {
    const Tensor own = target.clone();
    target.copy_(average);
    average.copy_(own);
  }
}

void AveragedWeights::load(const nn::StateDict& averages, int64_t num_updates) {
  KILN_CHECK(num_updates >= 0, "AveragedWeights::load: num_updates must be non-negative, got ", num_updates);
  KILN_CHECK(averages.size() == averages_.size(), "AveragedWeights::load: ", averages.size(),
             " tensors given, the average holds ", averages_.size());
  NoGradGuard no_grad;
  for (auto& [name, average] : averages_) {
    auto it = averages.find(name);
    KILN_CHECK(it != averages.end(), "AveragedWeights::load: \"", name, "\" is missing");
    KILN_CHECK(it->second.sizes() == average.sizes(), "AveragedWeights::load: \"", name, "\" has shape ",
               shape_str(it->second.sizes()), ", expected ", shape_str(average.sizes()));
    average.copy_(it->second);
  }
  num_updates_ = num_updates;
}

// ---- SWALR ----

SWALR::SWALR(Optimizer& optimizer, std::vector<double> swa_lrs, int64_t anneal_epochs,
             const std::string& anneal_strategy)
    : LRScheduler(optimizer), anneal_epochs_(anneal_epochs), cosine_(anneal_strategy == "cos") {
  const size_t groups = optimizer.param_groups().size();
  KILN_CHECK(swa_lrs.size() == 1 || swa_lrs.size() == groups, "SWALR: ", swa_lrs.size(), " swa_lrs for ", groups,
             " parameter groups; expected one, or one per group");
  KILN_CHECK(anneal_strategy == "cos" || anneal_strategy == "linear", "SWALR: anneal_strategy must be 'cos' or "
             "'linear', got '", anneal_strategy, "'");
  KILN_CHECK(anneal_epochs >= 0, "SWALR: anneal_epochs must be non-negative, got ", anneal_epochs);
  swa_lrs_ = swa_lrs.size() == 1 ? std::vector<double>(groups, swa_lrs[0]) : std::move(swa_lrs);
  initial_step();
}

double SWALR::anneal(double t) const { return cosine_ ? (1.0 - std::cos(std::numbers::pi * t)) / 2.0 : t; }

// PyTorch's get_lr: the lr the group holds now is taken back to where the annealing started (undoing the last
// step's share), then the next share of swa_lr goes in. So the schedule starts from whatever lr the group has
// at SWALR's first step (the standard recipe runs another scheduler until then), not from the lr at
// construction. Not a closed form of the epoch alone, unlike the other schedulers here.
double SWALR::lr_at(int64_t epoch, size_t group) const {
  const double step = anneal_epochs_ == 0 ? static_cast<double>(std::max<int64_t>(1, epoch)) : static_cast<double>(epoch);
  const double span = static_cast<double>(std::max<int64_t>(1, anneal_epochs_));
  const double prev = anneal(std::clamp((step - 1) / span, 0.0, 1.0)), next = anneal(std::clamp(step / span, 0.0, 1.0));
  const double swa = swa_lrs_[group], now = optimizer_.param_groups()[group].lr();
  const double start = prev == 1.0 ? swa : (now - prev * swa) / (1.0 - prev);
  return swa * next + start * (1.0 - next);
}

// ---- update_bn ----

void update_bn(data::DataLoader& loader, nn::Module& model, std::optional<Device> device) {
  struct Saved {
    nn::BatchNormImpl* bn;
    std::optional<double> momentum;
  };
  std::vector<Saved> saved;
  for (const auto& m : model.modules()) {
    auto* bn = dynamic_cast<nn::BatchNormImpl*>(m.get());
    if (bn == nullptr || !bn->running_mean.defined()) continue;
    saved.push_back({bn, bn->options().momentum});
    bn->reset_running_stats();
    bn->options().momentum = std::nullopt;  // the plain mean over the pass
  }
  if (saved.empty()) return;
  const bool was_training = model.is_training();
  model.train();
  auto restore = [&] {
    for (const Saved& s : saved) s.bn->options().momentum = s.momentum;
    model.train(was_training);
  };
  try {
    NoGradGuard no_grad;
    for (data::Batch& batch : loader) {
      KILN_CHECK(!batch.empty(), "update_bn: the loader gave an empty batch");
      model(device ? batch[0].to(*device) : batch[0]);
    }
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

}  // namespace kiln::optim
