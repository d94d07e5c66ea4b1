// nats.c (libnats-dev, 3.4.1 on Debian 12): core NATS and JetStream, for the NATS bridge.
// Headers come from pkg-config's libnats.
#include <nats/nats.h>

// Frees a message at once. libnats exports it (it is what `natsMsg_Destroy` calls for a message
// that is not garbage-collected) but nats.h does not declare it. `natsMsg_Destroy` hands every
// received message to the library's single garbage-collector thread instead — a lock shared
// with that thread and a wake-up whenever it sleeps, for each message: at full import speed
// about a sixth of the bridge's CPU went there. The core importer frees the messages its
// subscription callbacks own with this; everything else uses `natsMsg_Destroy`.
void natsMsg_free(void *object);
