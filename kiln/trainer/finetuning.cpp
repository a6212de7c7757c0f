// BackboneFinetuning (finetuning.h): the freeze in setup, the unfreeze and the lr rule at each epoch's start,
// and the state that lets a resume re-add the backbone's group before the optimizer's state loads.
#include "kiln/trainer/finetuning.h"

#include <cstdio>
#include <set>

#include "kiln/nn/normalization.h"
#include "kiln/trainer/trainer.h"

namespace kiln::trainer {

BackboneFinetuning::BackboneFinetuning(BackboneFinetuningOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  KILN_CHECK(!o.backbone.empty(), "BackboneFinetuning: backbone is empty: expected the dotted path of a child module");
  KILN_CHECK(o.unfreeze_backbone_at_epoch >= 0, "BackboneFinetuning: unfreeze_backbone_at_epoch = ",
             o.unfreeze_backbone_at_epoch, ": expected >= 0");
  KILN_CHECK(o.backbone_initial_ratio_lr > 0, "BackboneFinetuning: backbone_initial_ratio_lr = ",
             o.backbone_initial_ratio_lr, ": expected > 0");
  KILN_CHECK(!o.backbone_initial_lr || *o.backbone_initial_lr >= 0, "BackboneFinetuning: backbone_initial_lr = ",
             o.backbone_initial_lr.value_or(0), ": expected >= 0");
  if (!options_.lambda_func) options_.lambda_func = [](int64_t) { return 2.0; };  // Lightning's `multiplicative`
}

std::vector<Tensor> BackboneFinetuning::backbone_parameters(TrainModule& module, bool frozen_only) const {
  nn::Module& backbone = module.get_submodule(options_.backbone);
  std::vector<Tensor> params;
  for (const auto& [name, m] : backbone.named_modules()) {
    const bool keeps_training = options_.train_bn && dynamic_cast<nn::BatchNormImpl*>(m.get()) != nullptr;
    if (frozen_only && keeps_training) continue;
    for (const Tensor& p : m->parameters(/*recurse=*/false)) params.push_back(p);
  }
  return params;
}

void BackboneFinetuning::setup(Trainer& trainer, TrainModule& module, Stage stage) {
  if (stage != Stage::Fit) return;
  // The servers' optimizers are made from the workers' groups when fit starts: a group added later would never
  // reach them.
  KILN_CHECK(trainer.options().strategy != "parameter_server", "BackboneFinetuning: strategy 'parameter_server' "
             "is not supported (the servers' optimizers cannot take the backbone's group added at the unfreeze); "
             "use 'ddp'");
  trainer_ = &trainer;
  module_ = &module;
  unfrozen_ = false;
  backbone_lr_ = 0;
  last_epoch_ = -1;
  for (const Tensor& p : backbone_parameters(module, /*frozen_only=*/true)) p.requires_grad_(false);
}

void BackboneFinetuning::on_fit_start(Trainer& trainer, TrainModule& module) {
  KILN_CHECK(!trainer.optimizers().empty(), "BackboneFinetuning: the module has no optimizer");
  if (unfrozen_) return;  // resumed after the unfreeze: the group is the backbone's own
  std::set<const TensorImpl*> backbone;
  for (const Tensor& p : backbone_parameters(module, /*frozen_only=*/true)) backbone.insert(p.impl());
  for (size_t i = 0; i < trainer.optimizers().size(); ++i) {
    for (const auto& group : trainer.optimizers()[i]->param_groups()) {
      for (const Tensor& p : group.params) {
        KILN_CHECK(backbone.count(p.impl()) == 0, "BackboneFinetuning: optimizer ", i, " (",
                   trainer.optimizers()[i]->name(), ") already holds parameters of the backbone '", options_.backbone,
                   "' before epoch ", options_.unfreeze_backbone_at_epoch, " unfreezes it; build it in "
                   "configure_optimizers from the parameters that train now (the head's, or those that require grad)");
      }
    }
  }
}

void BackboneFinetuning::unfreeze(Trainer& trainer, TrainModule& module, double lr) {
  // Every backbone parameter no optimizer holds yet: the frozen ones, and batch norms' under train_bn when
  // configure_optimizers left them out (Lightning's filter_on_optimizer).
  std::set<const TensorImpl*> held;
  for (const auto& opt : trainer.optimizers()) {
    for (const auto& group : opt->param_groups()) {
      for (const Tensor& p : group.params) held.insert(p.impl());
    }
  }
  std::vector<Tensor> params;
  for (const Tensor& p : backbone_parameters(module, /*frozen_only=*/false)) {
    if (!held.count(p.impl())) params.push_back(p);
  }
  for (const Tensor& p : params) p.requires_grad_(true);
  // Lightning's call: the backbone's lr, and the optimizer's defaults for every other option (not the first
  // group's current ones, which a scheduler or the user may have changed).
  optim::Optimizer& opt = *trainer.optimizers().front();
  opt.add_param_group(std::move(params), {{"lr", lr}});
  group_ = opt.param_groups().size() - 1;
  unfrozen_ = true;
  backbone_lr_ = lr;
}

void BackboneFinetuning::on_train_epoch_start(Trainer& trainer, TrainModule& module) {
  const int64_t epoch = trainer.current_epoch();
  if (epoch <= last_epoch_ || epoch < options_.unfreeze_backbone_at_epoch) return;
  optim::Optimizer& opt = *trainer.optimizers().front();
  const double head_lr = opt.param_groups().front().lr();
  if (!unfrozen_) {
    unfreeze(trainer, module, options_.backbone_initial_lr.value_or(head_lr * options_.backbone_initial_ratio_lr));
  } else {
    double next = options_.lambda_func(epoch + 1) * backbone_lr_;
    if (options_.should_align && next > head_lr) next = head_lr;
    opt.param_groups().at(group_).set_lr(next);
    backbone_lr_ = next;
  }
  last_epoch_ = epoch;
  if (options_.verbose && trainer.is_global_zero()) {
    std::fprintf(stderr, "BackboneFinetuning: epoch %lld: backbone lr %g (head %g)\n", static_cast<long long>(epoch),
                 backbone_lr_, head_lr);
  }
}

void BackboneFinetuning::teardown(Trainer& trainer, TrainModule& module, Stage stage) {
  if (stage != Stage::Fit) return;
  trainer_ = nullptr;
  module_ = nullptr;
}

CallbackState BackboneFinetuning::checkpoint_state() const {
  return {{"unfrozen", unfrozen_ ? "1" : "0"},
          {"backbone_lr", exact_text(backbone_lr_)},
          {"last_epoch", std::to_string(last_epoch_)}};
}

void BackboneFinetuning::load_checkpoint_state(const CallbackState& state) {
  if (state.empty()) return;  // a checkpoint of a run without this callback: nothing was unfrozen
  auto get = [&](const char* key) {
    auto it = state.find(key);
    KILN_CHECK(it != state.end(), "BackboneFinetuning: the checkpoint's state of this callback has no '", key,
               "' (written by another version of kiln?)");
    return it->second;
  };
  last_epoch_ = std::stoll(get("last_epoch"));
  if (get("unfrozen") != "1") return;
  KILN_CHECK(trainer_ != nullptr && module_ != nullptr, "BackboneFinetuning: its state can only be loaded by a "
             "Trainer resuming fit()");
  // Before the optimizer's state loads: the checkpoint's optimizer has the backbone's group.
  unfreeze(*trainer_, *module_, std::strtod(get("backbone_lr").c_str(), nullptr));
}

}  // namespace kiln::trainer
