// libsystemd's journal API (sd-journal), for the journal source; sd-bus, for the units source. Headers come from
// libsystemd-dev (found through pkg-config's libsystemd).
#include <systemd/sd-journal.h>
#include <systemd/sd-id128.h>
#include <systemd/sd-bus.h>
