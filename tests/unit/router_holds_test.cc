#include "router_fake.h"
