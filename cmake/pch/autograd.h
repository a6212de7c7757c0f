// Precompiled for the autograd layer, and used by data and optim (cmake/kiln_layer.cmake: PCH_FROM).
#pragma once

#include "common.h"
#include "kiln/autograd/record.h"
#include "kiln/tensor/ops.h"
