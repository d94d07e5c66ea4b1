// libsystemd's journal API (sd-journal), for the journal source; sd-bus, for the units source. Headers come from
// libsystemd-dev (found through pkg-config's libsystemd).
#include <systemd/sd-journal.h>
#include <systemd/sd-id128.h>
// sd-device and the sd-event loop its monitor runs on, for the devices source.
#include <systemd/sd-device.h>
#include <systemd/sd-event.h>
// sd-bus, for the units source (systemd's manager over D-Bus).
#include <systemd/sd-bus.h>
