// The optim layer's public API: optimizers, LR schedulers and gradient clipping.
#pragma once

#include "kiln/optim/adagrad.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/adamax.h"
#include "kiln/optim/clip_grad.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/lbfgs.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/nadam.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/radam.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/sgd.h"
#include "kiln/optim/save.h"
#include "kiln/optim/swa.h"
