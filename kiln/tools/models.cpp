#include "kiln/tools/models.h"

#include "kiln/tools/registry.h"

namespace kiln::tools {

namespace {

int64_t product(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::shared_ptr<nn::Module> make_mlp(const RunConfig::Model& c, const DataInfo& info) {
  nn::Sequential net;
  net->push_back(nn::Flatten());
  int64_t width = product(info.input_shape);
  for (int64_t h : c.hidden) {
    net->push_back(nn::Linear(width, h));
    net->push_back(nn::ReLU());
    if (c.dropout > 0) net->push_back(nn::Dropout(c.dropout));
    width = h;
  }
  net->push_back(nn::Linear(width, info.num_classes));
  return net.ptr();
}

std::shared_ptr<nn::Module> make_cnn(const RunConfig::Model& c, const DataInfo& info) {
  KILN_CHECK(info.input_shape.size() == 3, "model 'cnn' needs images (C, H, W); the data gives examples of shape ",
             shape_str(info.input_shape), " (use model.name: mlp)");
  int64_t ch = info.input_shape[0], h = info.input_shape[1], w = info.input_shape[2];
  nn::Sequential net;
  for (int64_t out : c.channels) {
    KILN_CHECK(h >= 2 && w >= 2, "model 'cnn': ", c.channels.size(), " pooling stages shrink ",
               shape_str(info.input_shape), " below 1 pixel; use fewer model.channels");
    net->push_back(nn::Conv2d(ch, out, 3, nn::Conv2dOptions{.padding = 1}));
    net->push_back(nn::ReLU());
    net->push_back(nn::MaxPool2d(2));
    ch = out, h /= 2, w /= 2;
  }
  net->push_back(nn::Flatten());
  net->push_back(nn::Linear(ch * h * w, c.fc));
  net->push_back(nn::ReLU());
  if (c.dropout > 0) net->push_back(nn::Dropout(c.dropout));
  net->push_back(nn::Linear(c.fc, info.num_classes));
  return net.ptr();
}

// conv3x3 -> bn -> relu -> conv3x3 -> bn, plus the input (through a 1x1 conv and bn when the shape changes),
// then relu.
struct BasicBlock : nn::Module {
  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn1, bn2;
  nn::Sequential shortcut;  // empty: identity

  BasicBlock(int64_t in, int64_t out, int64_t stride)
      : nn::Module("BasicBlock"),
        conv1(in, out, 3, nn::Conv2dOptions{.stride = stride, .padding = 1, .bias = false}),
        conv2(out, out, 3, nn::Conv2dOptions{.padding = 1, .bias = false}),
        bn1(out),
        bn2(out) {
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("conv2", conv2);
    register_module("bn2", bn2);
    if (stride != 1 || in != out) {
      shortcut->push_back(nn::Conv2d(in, out, 1, nn::Conv2dOptions{.stride = stride, .bias = false}));
      shortcut->push_back(nn::BatchNorm2d(out));
    }
    register_module("shortcut", shortcut);
  }
  // x: (N, in, H, W) -> (N, out, H / stride, W / stride)
  Tensor forward(const Tensor& x) override {
    Tensor y = bn2(conv2(bn1(conv1(x)).relu()));
    return (y + (shortcut->size() == 0 ? x : shortcut(x))).relu();
  }
};

std::shared_ptr<nn::Module> make_resnet_small(const RunConfig::Model& c, const DataInfo& info) {
  KILN_CHECK(info.input_shape.size() == 3, "model 'resnet-small' needs images (C, H, W); the data gives ",
             shape_str(info.input_shape));
  nn::Sequential net;
  net->push_back(nn::Conv2d(info.input_shape[0], 16, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  net->push_back(nn::BatchNorm2d(16));
  net->push_back(nn::ReLU());
  net->push_back(std::make_shared<BasicBlock>(16, 16, 1));
  net->push_back(std::make_shared<BasicBlock>(16, 32, 2));
  net->push_back(std::make_shared<BasicBlock>(32, 64, 2));
  net->push_back(nn::AdaptiveAvgPool2d(1));
  net->push_back(nn::Flatten());
  if (c.dropout > 0) net->push_back(nn::Dropout(c.dropout));
  net->push_back(nn::Linear(64, info.num_classes));
  return net.ptr();
}

std::shared_ptr<nn::Module> make_gpt_mini(const RunConfig::Model& c, const DataInfo& info) {
  KILN_CHECK(info.tokens && info.input_shape.size() == 1, "model 'gpt-mini' needs token sequences (data.name: ",
             "text); the data gives examples of shape ", shape_str(info.input_shape));
  auto model =
      std::make_shared<GptMini>(info.num_classes, info.input_shape[0], c.layers, c.heads, c.embed_dim, c.dropout);
  model->checkpoint_activations = c.checkpoint_activations;
  return model;
}

std::shared_ptr<nn::Module> make_lstm_lm(const RunConfig::Model& c, const DataInfo& info) {
  KILN_CHECK(info.tokens && info.input_shape.size() == 1, "model 'lstm-lm' needs token sequences (data.name: ",
             "text); the data gives examples of shape ", shape_str(info.input_shape));
  return std::make_shared<LstmLm>(info.num_classes, info.input_shape[0], c.layers, c.embed_dim, c.dropout);
}

}  // namespace

GptMini::GptMini(int64_t vocab_size, int64_t block_size, int64_t layers, int64_t heads, int64_t embed_dim,
                 double dropout)
    : LanguageModel("GptMini"),
      tok_emb(vocab_size, embed_dim),
      pos_emb(block_size, embed_dim),
      drop(dropout),
      norm(Shape{embed_dim}),
      head(embed_dim, vocab_size, /*bias=*/false),
      vocab_size_(vocab_size),
      block_size_(block_size) {
  KILN_CHECK(vocab_size >= 2 && block_size >= 1 && layers >= 1 && heads >= 1 && embed_dim % heads == 0,
             "GptMini: needs vocab_size >= 2, block_size >= 1, layers >= 1 and embed_dim a multiple of heads; got ",
             vocab_size, ", ", block_size, ", ", layers, ", ", embed_dim, " and ", heads);
  register_module("tok_emb", tok_emb);
  register_module("pos_emb", pos_emb);
  register_module("drop", drop);
  for (int64_t i = 0; i < layers; ++i) {
    blocks->push_back(nn::TransformerEncoderLayer(embed_dim, heads,
                                                  nn::TransformerEncoderLayerOptions{.dim_feedforward = 4 * embed_dim,
                                                                                     .dropout = dropout,
                                                                                     .activation = "gelu",
                                                                                     .batch_first = true,
                                                                                     .norm_first = true}));
  }
  register_module("blocks", blocks);
  register_module("norm", norm);
  register_module("head", head);
  // GPT-2's initialization: every embedding and weight matrix N(0, 0.02) (the N(0, 1) of nn::Embedding makes the
  // first logits large and the first steps unstable), biases and LayerNorms as they are.
  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters()) {
    if (p.dim() == 2) nn::init::normal_(p, 0.0, 0.02);
  }
}

Tensor GptMini::forward(const Tensor& tokens) {
  KILN_CHECK(tokens.dim() == 2 && tokens.dtype() == kInt64, "GptMini: tokens must be (N, S) int64, got ",
             tokens.dtype(), " of shape ", shape_str(tokens.sizes()));
  const int64_t S = tokens.size(1);
  KILN_CHECK(S >= 1 && S <= block_size_, "GptMini: a sequence of ", S, " tokens; this model takes 1 to ",
             block_size_, " (its block size)");
  const Tensor positions = arange(0, S, 1, TensorOptions(kInt64).device(tokens.device()));
  Tensor x = drop(tok_emb(tokens) + pos_emb(positions));  // (N, S, E)
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto block = blocks->at<nn::TransformerEncoderLayerImpl>(i);
    auto run = [block](const Tensor& in) { return block->forward(in, {}, {}, /*is_causal=*/true); };
    x = checkpoint_activations && is_training() ? autograd::checkpoint(run, x) : run(x);
  }
  return head(norm(x));
}

LstmLm::LstmLm(int64_t vocab_size, int64_t context_size, int64_t layers, int64_t embed_dim, double dropout)
    : LanguageModel("LstmLm"),
      tok_emb(vocab_size, embed_dim),
      lstm(embed_dim, embed_dim, nn::RNNOptions{.num_layers = layers, .batch_first = true, .dropout = dropout}),
      drop(dropout),
      head(embed_dim, vocab_size),
      vocab_size_(vocab_size),
      context_size_(context_size) {
  KILN_CHECK(vocab_size >= 2 && context_size >= 1 && layers >= 1 && embed_dim >= 1,
             "LstmLm: needs vocab_size >= 2, context_size >= 1, layers >= 1 and embed_dim >= 1; got ", vocab_size,
             ", ", context_size, ", ", layers, " and ", embed_dim);
  register_module("tok_emb", tok_emb);
  register_module("lstm", lstm);
  register_module("drop", drop);
  register_module("head", head);
  // Embeddings N(0, 0.1) rather than nn::Embedding's N(0, 1), which saturates the first gates.
  NoGradGuard no_grad;
  nn::init::normal_(tok_emb->weight, 0.0, 0.1);
}

Tensor LstmLm::forward(const Tensor& tokens) {
  KILN_CHECK(tokens.dim() == 2 && tokens.dtype() == kInt64, "LstmLm: tokens must be (N, S) int64, got ",
             tokens.dtype(), " of shape ", shape_str(tokens.sizes()));
  KILN_CHECK(tokens.size(1) >= 1 && tokens.size(1) <= context_size_, "LstmLm: a sequence of ", tokens.size(1),
             " tokens; this model takes 1 to ", context_size_, " (its context size)");
  const Tensor x = drop(tok_emb(tokens));             // (N, S, E)
  return head(drop(lstm(x, nn::RNNState{}).output));     // (N, S, vocab)
}

namespace {

std::shared_ptr<nn::Module> make_registered(const ModelSpec& spec, const RunConfig::Model& config, const DataInfo& info) {
  const std::string what = "model '" + config.name + "'";
  KILN_CHECK(info.tokens == spec.language_model, what, " was registered ",
             spec.language_model ? "as a language model (token sequences in)" : "as a classifier (features or images in)",
             ", but the data gives ", info.tokens ? "token sequences" : "examples of shape " + shape_str(info.input_shape));
  Args args("model.args", config.args);
  std::shared_ptr<nn::Module> model = spec.build(args, info);
  KILN_CHECK(model != nullptr, what, ": its build function returned no module");
  args.check_all_used(what);
  KILN_CHECK(!spec.language_model || std::dynamic_pointer_cast<LanguageModel>(model) != nullptr, what,
             " was registered as a language model, but its build function returned a module that does not derive "
             "from kiln::tools::LanguageModel (", model->type_name(), ")");
  return model;
}

}  // namespace

std::shared_ptr<nn::Module> make_model(const RunConfig::Model& config, const DataInfo& info) {
  KILN_CHECK(info.num_classes >= 2, "make_model: ", info.num_classes, " classes; a classifier needs at least 2");
  if (const ModelSpec* spec = find_registered_model(config.name)) return make_registered(*spec, config, info);
  if (config.name == "gpt-mini") return make_gpt_mini(config, info);
  if (config.name == "lstm-lm") return make_lstm_lm(config, info);
  KILN_CHECK(!info.tokens, "model '", config.name, "' takes features or images; the data gives token sequences ",
             "(use model.name: gpt-mini or lstm-lm)");
  if (config.name == "mlp") return make_mlp(config, info);
  if (config.name == "cnn") return make_cnn(config, info);
  if (config.name == "resnet-small") return make_resnet_small(config, info);
  KILN_CHECK(false, "model.name '", config.name, "': expected mlp, cnn, resnet-small, gpt-mini, lstm-lm or a ",
             "registered model (kiln/tools/registry.h)");
  return nullptr;
}

}  // namespace kiln::tools
