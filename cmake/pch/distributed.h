// Precompiled for the distributed layer (cmake/kiln_layer.cmake).
#pragma once

#include <cerrno>
#include <chrono>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "autograd.h"
#include "kiln/distributed/process_group.h"
#include "kiln/distributed/store.h"
