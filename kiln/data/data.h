// The data layer: datasets, samplers, the DataLoader, transforms, and IDX/CSV readers.
#pragma once

#include "kiln/data/csv.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/dataset.h"
#include "kiln/data/idx.h"
#include "kiln/data/image.h"
#include "kiln/data/random.h"
#include "kiln/data/sampler.h"
#include "kiln/data/transforms.h"
