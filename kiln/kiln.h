// kiln's core API in one include: tensors, autograd, nn, optim, data and serialize. The Trainer
// (kiln/trainer/trainer.h, with its callbacks and loggers beside it) and the distributed layer (kiln/distributed/)
// have headers of their own, so a program that only computes does not compile them.
#pragma once

#include "kiln/autograd/autograd.h"
#include "kiln/data/data.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/serialize/serialize.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/determinism.h"
#include "kiln/tensor/kernel_lab.h"
#include "kiln/tensor/ops.h"
#include "kiln/tensor/profiler.h"
