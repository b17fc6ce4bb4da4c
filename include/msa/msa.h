// Umbrella header of the msa library.
#pragma once

#include "msa/attention.h"
#include "msa/cache.h"
#include "msa/config.h"
#include "msa/decode_step.h"
#include "msa/dtype.h"
#include "msa/fused_qknorm_rope.h"
#include "msa/indexer.h"
#include "msa/metadata.h"
#include "msa/tensor.h"
#include "msa/types.h"
#include "msa/version.h"
