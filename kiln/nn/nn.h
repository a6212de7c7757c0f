// The nn layer: modules, layers, losses (nn::functional) and initialization (nn::init).
#pragma once

#include "kiln/nn/activation.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/distance.h"
#include "kiln/nn/dropout.h"
#include "kiln/nn/functional.h"
#include "kiln/nn/init.h"
#include "kiln/nn/linear.h"
#include "kiln/nn/loss.h"
#include "kiln/nn/module.h"
#include "kiln/nn/normalization.h"
#include "kiln/nn/padding.h"
#include "kiln/nn/rnn.h"
#include "kiln/nn/save.h"
#include "kiln/nn/transformer.h"
