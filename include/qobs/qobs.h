// Umbrella header of the qobs library: every public header (tools/check_layers.py
// keeps it complete).
#pragma once

#include "qobs/args.h"
#include "qobs/collective.h"
#include "qobs/cuda.h"
#include "qobs/dtype.h"
#include "qobs/error.h"
#include "qobs/formats.h"
#include "qobs/host_device.h"
#include "qobs/io.h"
#include "qobs/layout.h"
#include "qobs/numeric.h"
#include "qobs/observer.h"
#include "qobs/packing.h"
#include "qobs/pipeline.h"
#include "qobs/qparams.h"
#include "qobs/reference.h"
#include "qobs/storage.h"
#include "qobs/tensor.h"
