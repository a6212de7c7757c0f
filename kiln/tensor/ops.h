// Every tensor-level op, by family, without autograd (namespace kiln::ops); see tensor.h for who calls them.
#pragma once

#include "kiln/tensor/factories.h"
#include "kiln/tensor/ops/along_dim.h"
#include "kiln/tensor/ops/binary.h"
#include "kiln/tensor/ops/decompositions.h"
#include "kiln/tensor/ops/indexing.h"
#include "kiln/tensor/ops/linalg.h"
#include "kiln/tensor/ops/reduce.h"
#include "kiln/tensor/ops/unary.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/tensor.h"
#include "kiln/tensor/views.h"
