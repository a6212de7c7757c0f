// Precompiled for the nn layer (cmake/kiln_layer.cmake).
#pragma once

#include "autograd.h"
#include "kiln/nn/functional.h"
#include "kiln/nn/module.h"
