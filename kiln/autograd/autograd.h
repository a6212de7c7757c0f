// The autograd layer's public API: differentiable ops (functions.h, and Tensor's methods), backward and grad
// (engine.h), grad modes (grad_mode.h), custom functions (function.h), activation checkpointing
// (checkpoint.h), gradcheck and the graph in DOT.
#pragma once

#include "kiln/autograd/autocast.h"
#include "kiln/autograd/checkpoint.h"
#include "kiln/autograd/engine.h"
#include "kiln/autograd/function.h"
#include "kiln/autograd/functions.h"
#include "kiln/autograd/gradcheck.h"
#include "kiln/autograd/grad_mode.h"
#include "kiln/autograd/graph_dot.h"
#include "kiln/autograd/linalg.h"
#include "kiln/autograd/node.h"
