// gradwire: communication-efficient distributed training for libtorch.
// Users include this one header.
#pragma once

#include "gradwire/context.h"
#include "gradwire/distributed_optimizer.h"
#include "gradwire/distributed_sampler.h"
#include "gradwire/version.h"
