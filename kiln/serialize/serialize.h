// The serialize layer: safetensors files (save, load, mapped and lazy loading). See safetensors.h.
#pragma once

#include "kiln/serialize/safetensors.h"
