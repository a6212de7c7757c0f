// PLACEHOLDER: replaced by the indexing frontends.
#include "kiln/tensor/ops/indexing.h"
