// Forwarding header: the abort-on-invariant macros are part of the public API (include/dsv4).
#pragma once

#include "dsv4/check.h"
