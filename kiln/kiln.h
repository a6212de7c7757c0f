// The whole of kiln's public API.
#pragma once

#include "kiln/autograd/autograd.h"
#include "kiln/data/data.h"
#include "kiln/nn/nn.h"
#include "kiln/optim/optim.h"
#include "kiln/serialize/serialize.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/cuda/cuda.h"
#include "kiln/tensor/determinism.h"
#include "kiln/tensor/ops.h"
#include "kiln/tensor/profiler.h"
