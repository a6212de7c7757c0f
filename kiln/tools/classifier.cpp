#include "kiln/tools/classifier.h"

#include "kiln/nn/functional.h"
#include "kiln/optim/optim.h"
#include "kiln/trainer/trainer.h"

namespace kiln::tools {

Classifier::Classifier(std::shared_ptr<nn::Module> net, RunConfig config)
    : TrainModule("Classifier"), net_(std::move(net)), config_(std::move(config)) {
  register_module("net", net_);
  save_hyperparameters({{"config", dump(config_)},
                        {"model", config_.model.name},
                        {"data", config_.data.name},
                        {"optimizer", config_.optimizer.name},
                        {"lr", std::to_string(config_.optimizer.lr)},
                        {"batch_size", std::to_string(config_.data.batch_size)}});
}

Tensor Classifier::evaluate(const data::Batch& batch, const std::string& split) {
  KILN_CHECK(batch.size() == 2, "Classifier: a batch must be (examples, labels); got ", batch.size(), " fields");
  const Tensor& x = batch[0];
  Tensor y = batch[1];
  Tensor scores = (*net_)(x);  // (N, K), or (N, S, K) for sequences labelled per position (y: (N, S))
  if (scores.dim() == 3) {
    KILN_CHECK(y.dim() == 2 && y.size(0) == scores.size(0) && y.size(1) == scores.size(1), "Classifier: scores of ",
               "shape ", shape_str(scores.sizes()), " need labels (N, S) = (", scores.size(0), ", ", scores.size(1),
               "), got ", shape_str(y.sizes()));
    scores = scores.reshape({-1, scores.size(2)});  // every position one example: the mean over tokens
    y = y.reshape({-1});
  }
  Tensor loss = nn::F::cross_entropy(scores, y);
  Tensor acc;
  {
    NoGradGuard no_grad;
    acc = (scores.argmax(1) == y).to(kFloat32).mean();
  }
  const bool train = split == "train";
  log(split + "/loss", loss, {.prog_bar = train});
  log(split + "/acc", acc, {.on_step = false, .on_epoch = true, .prog_bar = !train});
  return loss;
}

Tensor Classifier::training_step(const data::Batch& batch, int64_t) {
  const int64_t every = config_.logger.histogram_every_n_steps;
  if (every > 0) {
    // The weights about to be updated by this step, under the network's own names ("weights/0.weight").
    const int64_t step = trainer().global_step();
    if (step % every == 0 && step != last_histogram_step_) {
      last_histogram_step_ = step;
      for (const auto& [name, p] : net_->named_parameters()) log_histogram("weights/" + name, p.detach());
    }
  }
  return evaluate(batch, "train");
}

Tensor Classifier::validation_step(const data::Batch& batch, int64_t) {
  evaluate(batch, "val");
  return {};
}

Tensor Classifier::test_step(const data::Batch& batch, int64_t) {
  evaluate(batch, "test");
  return {};
}

Tensor Classifier::predict_step(const data::Batch& batch, int64_t) {
  const Tensor scores = (*net_)(batch.at(0));
  return softmax(scores, scores.dim() - 1);
}

std::shared_ptr<optim::Optimizer> make_optimizer(const RunConfig::Optimizer& c, std::vector<Tensor> params) {
  const std::pair<double, double> betas{c.betas.at(0), c.betas.at(1)};
  const double eps = c.eps.value_or(1e-8);  // the Adam family's and RMSprop's default; the others name theirs
  if (c.name == "sgd") {
    return std::make_shared<optim::SGD>(std::move(params), optim::SGDOptions{.lr = c.lr,
                                                                             .momentum = c.momentum,
                                                                             .weight_decay = c.weight_decay,
                                                                             .nesterov = c.nesterov});
  }
  if (c.name == "adam") {
    return std::make_shared<optim::Adam>(
        std::move(params),
        optim::AdamOptions{.lr = c.lr, .betas = betas, .eps = eps, .weight_decay = c.weight_decay, .amsgrad = c.amsgrad});
  }
  if (c.name == "adamw") {
    return std::make_shared<optim::AdamW>(
        std::move(params),
        optim::AdamWOptions{.lr = c.lr, .betas = betas, .eps = eps, .weight_decay = c.weight_decay, .amsgrad = c.amsgrad});
  }
  if (c.name == "rmsprop") {
    return std::make_shared<optim::RMSprop>(std::move(params), optim::RMSpropOptions{.lr = c.lr,
                                                                                     .alpha = c.alpha.value_or(0.99),
                                                                                     .eps = eps,
                                                                                     .weight_decay = c.weight_decay,
                                                                                     .momentum = c.momentum});
  }
  if (c.name == "adagrad") {
    return std::make_shared<optim::Adagrad>(
        std::move(params),
        optim::AdagradOptions{.lr = c.lr, .weight_decay = c.weight_decay, .eps = c.eps.value_or(1e-10)});
  }
  if (c.name == "adamax") {
    return std::make_shared<optim::Adamax>(
        std::move(params),
        optim::AdamaxOptions{.lr = c.lr, .betas = betas, .eps = eps, .weight_decay = c.weight_decay});
  }
  if (c.name == "nadam") {
    return std::make_shared<optim::NAdam>(
        std::move(params),
        optim::NAdamOptions{.lr = c.lr, .betas = betas, .eps = eps, .weight_decay = c.weight_decay});
  }
  if (c.name == "radam") {
    return std::make_shared<optim::RAdam>(
        std::move(params),
        optim::RAdamOptions{.lr = c.lr, .betas = betas, .eps = eps, .weight_decay = c.weight_decay});
  }
  if (c.name == "adadelta") {
    return std::make_shared<optim::Adadelta>(
        std::move(params),
        optim::AdadeltaOptions{.lr = c.lr, .rho = c.rho, .eps = c.eps.value_or(1e-6), .weight_decay = c.weight_decay});
  }
  if (c.name == "rprop") {
    return std::make_shared<optim::Rprop>(std::move(params), optim::RpropOptions{.lr = c.lr,
                                                                                 .etaminus = c.etas.at(0),
                                                                                 .etaplus = c.etas.at(1),
                                                                                 .step_size_min = c.step_sizes.at(0),
                                                                                 .step_size_max = c.step_sizes.at(1)});
  }
  if (c.name == "asgd") {
    return std::make_shared<optim::ASGD>(std::move(params), optim::ASGDOptions{.lr = c.lr,
                                                                               .lambd = c.lambd,
                                                                               .alpha = c.alpha.value_or(0.75),
                                                                               .t0 = c.t0,
                                                                               .weight_decay = c.weight_decay});
  }
  KILN_CHECK(false, "optimizer.name '", c.name,
             "': expected sgd, adam, adamw, rmsprop, adagrad, adamax, nadam, radam, adadelta, rprop or asgd");
  return nullptr;
}

std::optional<trainer::SchedulerConfig> make_scheduler(const RunConfig::Scheduler& c, optim::Optimizer& opt,
                                                       int64_t epochs, int64_t steps_per_epoch) {
  if (c.name == "none") return std::nullopt;
  trainer::SchedulerConfig s;
  s.interval = c.interval;
  // The run's length in the scheduler's unit.
  const int64_t length = c.interval == "step" ? epochs * steps_per_epoch : epochs;
  const int64_t t_max = c.t_max.value_or(std::max<int64_t>(1, length));
  if (c.name == "step") {
    s.scheduler = std::make_shared<optim::StepLR>(opt, c.step_size, c.gamma);
  } else if (c.name == "multistep") {
    s.scheduler = std::make_shared<optim::MultiStepLR>(opt, c.milestones, c.gamma);
  } else if (c.name == "exponential") {
    s.scheduler = std::make_shared<optim::ExponentialLR>(opt, c.gamma);
  } else if (c.name == "cosine") {
    s.scheduler = std::make_shared<optim::CosineAnnealingLR>(opt, t_max, c.eta_min);
  } else if (c.name == "linear") {
    s.scheduler = std::make_shared<optim::LinearLR>(opt, c.start_factor, 1.0, t_max);
  } else if (c.name == "onecycle") {
    s.interval = "step";  // one cycle over every optimizer step of the run
    s.scheduler = std::make_shared<optim::OneCycleLR>(
        opt, optim::OneCycleOptions{.max_lr = c.max_lr.value_or(opt.param_groups().at(0).lr() * 10),
                                    .total_steps = std::max<int64_t>(1, epochs * steps_per_epoch)});
  } else if (c.name == "warmup_cosine") {
    KILN_CHECK(c.warmup >= 1 && c.warmup < t_max, "scheduler.warmup = ", c.warmup,
               ": warmup_cosine needs 1 <= warmup < the run's length (", t_max, ")");
    auto warm = std::make_shared<optim::LinearLR>(opt, c.start_factor, 1.0, c.warmup);
    auto cos = std::make_shared<optim::CosineAnnealingLR>(opt, t_max - c.warmup, c.eta_min);
    s.scheduler = std::make_shared<optim::SequentialLR>(
        opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warm, cos}, std::vector<int64_t>{c.warmup});
  } else if (c.name == "cosine_restarts") {
    s.scheduler = std::make_shared<optim::CosineAnnealingWarmRestarts>(opt, c.t_0, c.t_mult, c.eta_min);
  } else if (c.name == "polynomial") {
    s.scheduler = std::make_shared<optim::PolynomialLR>(opt, t_max, c.power);
  } else if (c.name == "cyclic") {
    s.interval = "step";  // cycles are counted in optimizer steps
    const auto& first = opt.param_groups().at(0).options;
    const double lr = first.at("lr");
    const int64_t up = c.step_size_up.value_or(std::max<int64_t>(1, 2 * steps_per_epoch));
    // Momentum cycles against lr where the optimizer has some (Adam's beta1, or momentum switched on).
    const bool has_momentum = first.count("beta1") || (first.count("momentum") && first.at("momentum") > 0);
    s.scheduler = std::make_shared<optim::CyclicLR>(
        opt, optim::CyclicOptions{.base_lr = c.base_lr.value_or(lr), .max_lr = c.max_lr.value_or(10 * lr),
                                  .step_size_up = up, .mode = c.cycle_mode, .gamma = c.gamma,
                                  .cycle_momentum = has_momentum});
  } else if (c.name == "plateau") {
    s.plateau = std::make_shared<optim::ReduceLROnPlateau>(
        opt, optim::ReduceLROnPlateauOptions{.mode = c.mode, .factor = c.factor, .patience = c.patience});
    s.monitor = c.monitor;
  } else {
    KILN_CHECK(false, "scheduler.name '", c.name, "': not a scheduler kiln knows");
  }
  return s;
}

trainer::OptimizerSetup Classifier::configure_optimizers() {
  auto opt = make_optimizer(config_.optimizer, parameters());
  trainer::OptimizerSetup setup(opt);
  const trainer::Trainer& t = trainer();
  const int64_t acc = t.options().accumulate_grad_batches;
  const int64_t steps_per_epoch = (t.num_training_batches() + acc - 1) / acc;
  const int64_t epochs = t.options().max_epochs > 0 ? t.options().max_epochs : 1;
  if (auto s = make_scheduler(config_.scheduler, *opt, epochs, steps_per_epoch)) setup.schedulers.push_back(*s);
  return setup;
}

}  // namespace kiln::tools
