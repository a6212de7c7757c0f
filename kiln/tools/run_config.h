// The configuration of `kiln train`: every key a run.yaml may hold, as plain structs with their defaults.
//
//   kiln train --config configs/fashion_mnist_cnn.yaml --set trainer.max_epochs=5 --set model.hidden=[256,128]
//
// Each section is a struct whose members carry the defaults; run_config.cpp binds each member to its dotted
// key once (kiln/trainer/config.h), which gives loading, `--set` overrides, errors naming key, file and line,
// the dump the Trainer saves beside its logs, and `kiln train --help`. Key names follow PyTorch
// Lightning's where Lightning has one (trainer.*, callbacks.checkpoint.*, callbacks.early_stopping.*), so a
// Lightning user's config reads the same. Enumerations stay strings ("cuda", "adamw"): the code that builds
// the run compares them, and the schema has already refused any other spelling.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/trainer/config.h"

namespace kiln::tools {

using trainer::BatchLimit;

struct RunConfig {
  struct Trainer {
    int64_t max_epochs = 3;  // -1: no epoch limit
    int64_t min_epochs = 0;
    int64_t max_steps = -1;  // -1: no step limit
    std::string accelerator = "auto";  // auto | cpu | cuda
    int devices = 1;
    std::string strategy = "auto";  // auto | single | ddp | parameter_server
    std::string ddp_backend = "tcp";  // tcp | gloo | mpi (those built): the process group under ddp
    bool ddp_find_unused_parameters = false;  // DDPOptions::find_unused_parameters
    bool sync_batchnorm = false;  // TrainerOptions::sync_batchnorm
    std::string precision = "32";  // 32 | 16-mixed | bf16-mixed
    int64_t accumulate_grad_batches = 1;
    double gradient_clip_val = 0.0;  // 0: no clipping
    std::string gradient_clip_algorithm = "norm";  // norm | value
    BatchLimit val_check_interval = BatchLimit::of_fraction(1.0);
    int64_t check_val_every_n_epoch = 1;
    BatchLimit limit_train_batches = BatchLimit::of_fraction(1.0);
    BatchLimit overfit_batches = BatchLimit::of_fraction(0.0);  // 0: off
    BatchLimit limit_val_batches = BatchLimit::of_fraction(1.0);
    BatchLimit limit_test_batches = BatchLimit::of_fraction(1.0);
    BatchLimit limit_predict_batches = BatchLimit::of_fraction(1.0);
    int64_t num_sanity_val_steps = 2;
    int64_t log_every_n_steps = 50;
    bool deterministic = false;
    std::optional<int64_t> seed;
    std::string default_root_dir = "runs";
    std::optional<double> max_time;  // seconds; written as seconds or "DD:HH:MM:SS"
    std::string profiler = "none";  // none | simple | ops
    bool enable_progress_bar = true;
    bool enable_checkpointing = true;
    bool enable_model_summary = true;
    int64_t fast_dev_run = 0;  // true means 1, false 0
    bool detect_anomaly = false;  // TrainerOptions::detect_anomaly
    bool handle_signals = true;   // TrainerOptions::handle_signals: Ctrl-C or SIGTERM stops at a step boundary
    std::optional<std::string> ckpt_path;  // a checkpoint file, or "last"
    struct PS {
      int64_t servers = 0;               // 0: as many as `kiln launch --servers` started
      std::string mode = "sync";         // sync | async | ssp
      int64_t staleness = 0;             // ssp's bound, in steps
      std::string optimizer = "server";  // server | worker
      bool operator==(const PS&) const = default;
    };
    PS ps;  // under strategy parameter_server
    bool operator==(const Trainer&) const = default;
  };

  struct Model {
    std::string name = "cnn";  // mlp | cnn | resnet-small | gpt-mini | lstm-lm | a registered model
    std::vector<int64_t> hidden{512, 256};
    std::vector<int64_t> channels{32, 64};
    int64_t fc = 128;
    int64_t layers = 4;       // gpt-mini: transformer blocks
    int64_t heads = 4;        // gpt-mini: attention heads per block
    int64_t embed_dim = 128;  // gpt-mini: width of the token vectors (a multiple of heads)
    double dropout = 0.0;
    bool checkpoint_activations = false;  // gpt-mini: each block recomputed in backward (autograd::checkpoint)
    std::optional<int64_t> num_classes;  // null: from the data
    // A registered model's own arguments (kiln/tools/registry.h); the built-in models take none.
    trainer::yaml::Node args = trainer::yaml::Node::mapping();
    bool operator==(const Model&) const = default;
  };

  struct Data {
    std::string name = "fashion-mnist";  // fashion-mnist | mnist | idx | csv | synthetic | text | a registered one
    std::optional<std::string> path;  // null: the dataset's standard place (see data_path)
    int64_t batch_size = 64;
    std::optional<int64_t> val_batch_size;  // null: batch_size
    int64_t num_workers = 0;
    bool pin_memory = true;
    bool shuffle = true;
    int64_t val_size = 5000;
    bool normalize = true;
    int64_t random_crop_padding = 0;
    bool horizontal_flip = false;
    std::string label_column = "label";
    int64_t num_samples = 1024;
    int64_t num_features = 32;
    int64_t num_classes = 10;
    int64_t block_size = 64;  // text: tokens of context per example
    int64_t seed = 0;
    // A registered dataset's own arguments (kiln/tools/registry.h); the built-in datasets take none.
    trainer::yaml::Node args = trainer::yaml::Node::mapping();
    bool operator==(const Data&) const = default;
  };

  struct Optimizer {
    // sgd | adam | adamw | rmsprop | adagrad | adamax | nadam | radam | adadelta | rprop | asgd
    std::string name = "adam";
    double lr = 1e-3;
    double momentum = 0.0;
    double weight_decay = 0.0;
    std::vector<double> betas{0.9, 0.999};
    std::optional<double> eps;    // null: the optimizer's own (1e-8; adagrad 1e-10, adadelta 1e-6)
    bool nesterov = false;
    bool amsgrad = false;
    std::optional<double> alpha;  // rmsprop's smoothing (0.99) or asgd's power of eta's decay (0.75); null: those
    double rho = 0.9;             // adadelta
    std::vector<double> etas{0.5, 1.2};         // rprop: the step's factors down and up
    std::vector<double> step_sizes{1e-6, 50.0};  // rprop: the step's bounds
    double lambd = 1e-4;                        // asgd: the decay term
    double t0 = 1e6;                            // asgd: the step at which averaging starts
    bool operator==(const Optimizer&) const = default;
  };

  struct Scheduler {
    // none | step | multistep | exponential | cosine | linear | onecycle | plateau | warmup_cosine |
    // cosine_restarts | polynomial | cyclic
    std::string name = "none";
    std::string interval = "epoch";  // epoch | step
    int64_t step_size = 1;
    double gamma = 0.1;
    std::vector<int64_t> milestones;
    std::optional<int64_t> t_max;  // null: the run's length
    double eta_min = 0.0;
    int64_t warmup = 0;
    double start_factor = 1.0 / 3.0;
    std::optional<double> max_lr;
    int64_t t_0 = 10;   // cosine_restarts
    int64_t t_mult = 1;
    double power = 1.0;  // polynomial
    std::optional<double> base_lr;          // cyclic (null: optimizer.lr)
    std::optional<int64_t> step_size_up;    // cyclic (null: two epochs of steps)
    std::string cycle_mode = "triangular";  // cyclic: triangular | triangular2 | exp_range
    std::string monitor = "val/loss";
    std::string mode = "min";  // min | max
    double factor = 0.1;
    int64_t patience = 10;
    bool operator==(const Scheduler&) const = default;
  };

  struct Callbacks {
    struct Checkpoint {
      std::optional<std::string> monitor;  // null: keep the latest
      std::string mode = "min";
      int64_t save_top_k = 1;
      bool save_last = true;
      bool save_weights_only = false;
      int64_t every_n_epochs = 1;
      int64_t every_n_train_steps = 0;
      double train_time_interval = 0;
      std::string filename = "epoch={epoch}-step={step}";
      std::optional<std::string> dirpath;  // null: <run folder>/checkpoints
      bool operator==(const Checkpoint&) const = default;
    };
    struct EarlyStopping {
      bool enabled = false;
      std::string monitor = "val/loss";
      std::string mode = "min";
      int64_t patience = 3;
      double min_delta = 0.0;
      std::optional<double> stopping_threshold;
      std::optional<double> divergence_threshold;
      bool check_finite = true;
      bool operator==(const EarlyStopping&) const = default;
    };
    struct Timer {
      std::optional<double> duration;  // seconds
      bool operator==(const Timer&) const = default;
    };
    struct WeightAveraging {
      bool enabled = false;
      std::optional<double> decay;  // null: SWA's equal mean at each epoch's end
      int64_t start_epoch = 0;
      bool use_buffers = true;
      bool operator==(const WeightAveraging&) const = default;
    };
    struct ThroughputMonitor {
      bool enabled = false;
      int64_t window_size = 100;
      bool operator==(const ThroughputMonitor&) const = default;
    };
    struct DeviceStatsMonitor {
      bool enabled = false;
      bool cpu_stats = false;
      bool operator==(const DeviceStatsMonitor&) const = default;
    };
    Checkpoint checkpoint;
    EarlyStopping early_stopping;
    bool lr_monitor = false;
    ThroughputMonitor throughput_monitor;
    DeviceStatsMonitor device_stats_monitor;
    bool on_exception_checkpoint = true;  // an OnExceptionCheckpoint beside ModelCheckpoint's files
    // [[first epoch, factor], ...]: a GradientAccumulationScheduler (empty: none)
    std::vector<std::vector<int64_t>> accumulate_grad_schedule;
    Timer timer;
    WeightAveraging weight_averaging;
    bool operator==(const Callbacks&) const = default;
  };

  struct Logger {
    bool csv = true;
    bool tensorboard = true;
    std::string name = "kiln";
    std::optional<int64_t> version;
    int64_t histogram_every_n_steps = 0;  // 0: off; else every parameter's histogram to TensorBoard that often
    bool operator==(const Logger&) const = default;
  };

  Trainer trainer;
  Model model;
  Data data;
  Optimizer optimizer;
  Scheduler scheduler;
  Callbacks callbacks;
  Logger logger;
  bool operator==(const RunConfig&) const = default;
};

// The schema every function below uses (built once).
const trainer::Schema<RunConfig>& run_config_schema();

// Defaults, then the file at `path`, then each "key=value" of `overrides` in order, then the checks across
// keys; any mistake is a kiln::Error naming the key, the value and where it was written.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from text; `source` names it in errors.
RunConfig load_run_config_text(const std::string& text, const std::string& source,
                               const std::vector<std::string>& overrides = {});
// The checks across keys (batch_size >= 1, ddp for several GPUs, ...), which the loaders already ran.
void check_run_config(const RunConfig& config);

// Every key, resolved, as YAML that load_run_config reads back to an equal config.
std::string dump(const RunConfig& config);
// Every key with its type, default and doc, grouped by section.
std::string run_config_help();

// Where the data lies: data.path, or the standard place of a dataset that has one (fashion-mnist:
// /usr/share/datasets/fashion-mnist, where Debian's dataset-fashion-mnist puts it). Throws when neither.
std::string data_path(const RunConfig::Data& data);

}  // namespace kiln::tools
