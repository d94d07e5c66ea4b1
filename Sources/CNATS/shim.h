// nats.c (libnats-dev, 3.4.1 on Debian 12): core NATS and JetStream, for the NATS bridge.
// Headers come from pkg-config's libnats.
#include <nats/nats.h>
