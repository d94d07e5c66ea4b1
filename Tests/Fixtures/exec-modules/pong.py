#!/usr/bin/env python3
# A Python exec module written with the helper (examples/modules/eventbus_module.py): answers
# each user.ping with a user.pong carrying its n and the config's prefix (ExecModuleTests).
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "../../../examples/modules"))
from eventbus_module import Module  # noqa: E402

module = Module()
module.log("pong ready, prefix %s" % module.config.get("prefix", ""))


@module.on("user.ping")
def ping(event):
    module.post("user.pong", {"n": event.fields.get("n", 0), "prefix": module.config.get("prefix", "")})


@module.on_gap
def gap(gap):
    module.post("user.pong.gap", {"dropped": gap.dropped})


module.run()
