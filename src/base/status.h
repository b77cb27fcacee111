// Forwarding header: Status / Expected are part of the public API (include/dsv4).
#pragma once

#include "dsv4/status.h"
