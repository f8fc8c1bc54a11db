// Umbrella header of the qobs library.
#pragma once

#include "qobs/args.h"
#include "qobs/dtype.h"
#include "qobs/error.h"
#include "qobs/formats.h"
#include "qobs/layout.h"
#include "qobs/numeric.h"
#include "qobs/observer.h"
#include "qobs/qparams.h"
#include "qobs/tensor.h"
