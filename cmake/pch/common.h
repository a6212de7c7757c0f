// The standard headers that most of kiln's translation units include, precompiled with each layer's own
// (cmake/kiln_layer.cmake, KILN_PCH). Only what the library's sources include anyway belongs here: a
// precompiled header is read by every file of its layer.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/tensor/tensor.h"
