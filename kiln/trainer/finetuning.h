// BackboneFinetuning (Lightning's): fine-tunes a pretrained model by training its head first, with the backbone
// frozen, then the backbone too, from epoch unfreeze_backbone_at_epoch, in a parameter group of its own whose
// learning rate starts low and grows each epoch until it catches up with the head's.
//
//   struct Classifier : trainer::TrainModule {
//     nn::Sequential backbone = ..., head = ...;          // registered as "backbone" and "head"
//     OptimizerSetup configure_optimizers() override {    // only what trains now
//       std::vector<Tensor> trainable;                   // the backbone is frozen by now (setup)
//       for (const Tensor& p : parameters()) if (p.requires_grad()) trainable.push_back(p);
//       return std::make_shared<optim::Adam>(trainable, optim::AdamOptions{.lr = 1e-3});
//     }
//   };
//   options.callbacks.push_back(std::make_shared<trainer::BackboneFinetuning>(
//       trainer::BackboneFinetuningOptions{.unfreeze_backbone_at_epoch = 5}));
//
// What it does, epoch by epoch (the backbone is the child module at the dotted path `backbone`):
//   setup (before configure_optimizers): the backbone's parameters stop requiring grad; a batch norm's weight
//     and bias keep training when train_bn (its running statistics are updated in training mode either way,
//     where Lightning's freeze also stops them).
//   start of epoch unfreeze_backbone_at_epoch: they require grad again, and every backbone parameter that no
//     optimizer holds yet (batch norms' too, when configure_optimizers left them out) joins the first
//     optimizer as a new group with lr = backbone_initial_lr, or the first group's lr times
//     backbone_initial_ratio_lr, and the optimizer's defaults for its other options (Optimizer::defaults(), as
//     Lightning's add_param_group call leaves them to torch).
//   start of each later epoch: the group's lr becomes lambda_func(epoch + 1) times its previous value (2 by
//     default, as Lightning's), at most the first group's lr when should_align.
// The optimizer must not hold the frozen parameters (build it from those that require grad, after setup): fit()
// refuses one that does. An LR scheduler of that optimizer goes on scheduling the groups it was made for and
// leaves the backbone's to this callback (kiln's rule; of PyTorch's schedulers some do the same, others scale
// every group). Under ddp the backbone must require grad when DDP is made, which the Trainer does before
// setup: DDP lets frozen parameters sit out each round, and averages them again once unfrozen. The parameter
// server is refused: its servers' optimizers are made when fit starts and cannot take the new group.
//
// Resume: its state says whether the backbone was unfrozen, at what lr and at which epoch the lr last changed.
// A resumed fit unfreezes it again and re-adds the group before the optimizer's state is loaded (the Trainer
// restores callback state first), so a checkpoint taken after the unfreeze resumes exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/trainer/callback.h"

namespace kiln::trainer {

struct BackboneFinetuningOptions {
  std::string backbone = "backbone";  // the module's child (a dotted path) to freeze, then fine-tune
  int64_t unfreeze_backbone_at_epoch = 10;
  // The factor of the backbone's lr at the start of each epoch after the unfreeze, given epoch + 1 (Lightning's
  // lambda_func). Not given: 2 every epoch (Lightning's `multiplicative`).
  std::function<double(int64_t)> lambda_func = {};
  double backbone_initial_ratio_lr = 0.1;
  std::optional<double> backbone_initial_lr;  // given: the backbone's first lr, in place of the ratio
  bool should_align = true;  // the backbone's lr never passes the first group's
  bool train_bn = true;      // batch norms in the backbone train all along
  bool verbose = false;      // print each change of the backbone's lr to stderr (rank 0)
};

class BackboneFinetuning : public Callback {
 public:
  explicit BackboneFinetuning(BackboneFinetuningOptions options = {});
  std::string state_key() const override { return "BackboneFinetuning"; }
  CallbackState checkpoint_state() const override;
  void load_checkpoint_state(const CallbackState& state) override;

  void setup(Trainer& trainer, TrainModule& module, Stage stage) override;
  void on_fit_start(Trainer& trainer, TrainModule& module) override;
  void on_train_epoch_start(Trainer& trainer, TrainModule& module) override;
  void teardown(Trainer& trainer, TrainModule& module, Stage stage) override;

  bool unfrozen() const { return unfrozen_; }
  // The backbone group's lr (0 before the unfreeze).
  double backbone_lr() const { return backbone_lr_; }

 private:
  // The backbone's parameters in the module's order: those it freezes (batch norms' left out under train_bn),
  // or all of them.
  std::vector<Tensor> backbone_parameters(TrainModule& module, bool frozen_only) const;
  // Makes the frozen ones require grad and appends every backbone parameter no optimizer holds, as a group of
  // the first optimizer at `lr`.
  void unfreeze(Trainer& trainer, TrainModule& module, double lr);

  BackboneFinetuningOptions options_;
  Trainer* trainer_ = nullptr;  // between setup and teardown of a fit: load_checkpoint_state re-adds the group
  TrainModule* module_ = nullptr;
  bool unfrozen_ = false;
  double backbone_lr_ = 0;
  size_t group_ = 0;  // the backbone's group in the first optimizer, once unfrozen
  int64_t last_epoch_ = -1;  // the epoch whose start last set the backbone's lr (a resume mid-epoch keeps it)
};

}  // namespace kiln::trainer
