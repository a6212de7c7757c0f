// The built-in models of `kiln train` (model.name in a run.yaml): plain nn modules, built from the config and
// the shape of the data, usable from C++ without the command line too.
//   mlp           flatten -> [linear -> relu (-> dropout)] per model.hidden -> linear to the classes
//   cnn           [conv 3x3 pad 1 -> relu -> max-pool 2] per model.channels -> flatten -> linear(model.fc)
//                 -> relu (-> dropout) -> linear to the classes (the main job's network with [32, 64], 128)
//   resnet-small  a stem conv, three stages of one residual block each (16, 32, 64 channels, the last two
//                 halving the resolution), global average pooling, linear: a CIFAR-style ResNet-8
#pragma once

#include <memory>

#include "kiln/nn/nn.h"
#include "kiln/tools/run_config.h"

namespace kiln::tools {

// What a model needs to know about its input: one example's shape ((C, H, W) for images, (F) for features)
// and the number of classes.
struct DataInfo {
  Shape input_shape;
  int64_t num_classes = 0;
};

std::shared_ptr<nn::Module> make_model(const RunConfig::Model& config, const DataInfo& info);

}  // namespace kiln::tools
