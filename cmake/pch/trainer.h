// Precompiled for the trainer layer, and used by tools (cmake/kiln_layer.cmake: PCH_FROM).
#pragma once

#include <charconv>
#include <filesystem>
#include <fstream>

#include "nn.h"
#include "kiln/trainer/trainer.h"
