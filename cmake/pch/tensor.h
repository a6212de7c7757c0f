// Precompiled for the tensor layer (cmake/kiln_layer.cmake).
#pragma once

#include "common.h"
#include "kiln/tensor/dispatch.h"
#include "kiln/tensor/factories.h"
#include "kiln/tensor/parallel.h"
#include "kiln/tensor/views.h"
