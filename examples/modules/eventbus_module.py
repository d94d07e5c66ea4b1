"""An EventBus handler module in Python, with nothing but the standard library.

eventbusd runs the program named by a module's ``exec:`` entry and speaks JSON lines with it
(the protocol: docs/modules-any-language.md). This helper reads the host's ``hello``, hands
events to handlers and writes posts and log lines::

    #!/usr/bin/env python3
    from eventbus_module import Module

    module = Module()                  # reads the hello: module.name, module.config

    @module.on("user.disk.*")
    def disk(event):
        if event.fields.get("percent", 0) >= module.config.get("threshold", 90):
            module.post("disk.alert", {"path": event.fields["path"]})

    module.run()                       # until eventbusd closes standard input

or, as a loop::

    for event in module.events("user.disk.*"):
        ...

Standard output is the protocol's: print diagnostics to standard error (eventbusd logs it
under the module's name) or use ``module.log()``.
"""

import json
import sys

PROTOCOL = 1

__all__ = ["Module", "Event", "Gap", "ProtocolError", "matches"]


class ProtocolError(Exception):
    """The host said something this helper does not understand (another protocol version)."""


class Event:
    """One event, as ``eventbus tail --json`` prints it."""

    __slots__ = ("seq", "name", "source", "time", "mono", "fields")

    def __init__(self, line):
        self.seq = line.get("seq")
        self.name = line.get("name")
        self.source = line.get("source")
        self.time = line.get("time")
        self.mono = line.get("mono")
        self.fields = line.get("fields") or {}

    def __repr__(self):
        return "Event(seq=%r, name=%r, source=%r, fields=%r)" % (self.seq, self.name, self.source, self.fields)


class Gap:
    """Events the host dropped for this module (its mailbox was full): how many, and which."""

    __slots__ = ("dropped", "first_seq", "last_seq")

    def __init__(self, line):
        self.dropped = line.get("dropped", 0)
        self.first_seq = line.get("first_seq")
        self.last_seq = line.get("last_seq")

    def __repr__(self):
        return "Gap(dropped=%r, first_seq=%r, last_seq=%r)" % (self.dropped, self.first_seq, self.last_seq)


def matches(pattern, name):
    """Whether an event name matches a pattern as the bus matches them: tokens split at '.',
    '*' is any one token, '>' (last) is one or more tokens."""
    want = pattern.split(".")
    have = name.split(".")
    for index, token in enumerate(want):
        if token == ">":
            return len(have) > index
        if index >= len(have) or (token != "*" and token != have[index]):
            return False
    return len(have) == len(want)


class Module:
    """The program's side of the protocol. Reads the ``hello`` line when made."""

    def __init__(self, input=None, output=None):
        self._input = input if input is not None else sys.stdin.buffer
        self._output = output if output is not None else sys.stdout.buffer
        self._handlers = []
        self._gap_handlers = []
        self.gaps = 0
        hello = self._read_line()
        if hello is None:
            raise ProtocolError("standard input ended before the hello line (is this run by eventbusd?)")
        if hello.get("type") != "hello":
            raise ProtocolError("the first line is not a hello: %r" % (hello,))
        if hello.get("protocol") != PROTOCOL:
            raise ProtocolError("protocol %r, this helper speaks %d" % (hello.get("protocol"), PROTOCOL))
        self.name = hello.get("module")
        self.config = hello.get("config") or {}
        self.subscriptions = list(hello.get("subscriptions") or [])

    # Writing

    def post(self, name, fields=None, **more):
        """Posts an event on the bus (its source is the module's name)."""
        all_fields = dict(fields or {})
        all_fields.update(more)
        self._write({"type": "post", "name": name, "fields": all_fields})

    def log(self, message, level="info"):
        """A line in eventbusd's log under the module's name (debug, info, notice, warning, error)."""
        self._write({"type": "log", "level": level, "message": str(message)})

    def subscribe(self, *patterns):
        """Asks for more events: patterns, each optionally with FIELD=VALUE matches
        (``"unit.state active=failed"``)."""
        patterns = [p for p in patterns if p not in self.subscriptions]
        if patterns:
            self.subscriptions.extend(patterns)
            self._write({"type": "subscribe", "patterns": patterns})

    # Reading

    def on(self, *patterns):
        """Decorator: calls the function with each event whose name matches one of the
        patterns (subscribed when ``run()`` starts). A pattern may carry field matches
        (``"unit.state active=failed"``): they narrow what the host sends, and the handler is
        chosen by the name alone."""
        def register(handler):
            self._handlers.append((patterns, handler))
            return handler
        return register

    def on_gap(self, handler):
        """Decorator: calls the function with each ``Gap``."""
        self._gap_handlers.append(handler)
        return handler

    def events(self, *patterns):
        """Subscribes to ``patterns`` (if any) and yields each ``Event`` and ``Gap`` until
        standard input ends."""
        self.subscribe(*patterns)
        while True:
            line = self._read_line()
            if line is None:
                return
            kind = line.get("type")
            if kind == "event":
                yield Event(line)
            elif kind == "gap":
                self.gaps += line.get("dropped", 0)
                yield Gap(line)

    def run(self):
        """Subscribes the handlers' patterns and calls them until standard input ends."""
        wanted = [pattern for patterns, _ in self._handlers for pattern in patterns]
        for item in self.events(*wanted):
            if isinstance(item, Gap):
                for handler in self._gap_handlers:
                    handler(item)
                continue
            for patterns, handler in self._handlers:
                if any(matches(pattern.split()[0], item.name) for pattern in patterns):
                    handler(item)

    # The lines

    def _read_line(self):
        while True:
            raw = self._input.readline()
            if not raw:
                return None
            raw = raw.strip()
            if raw:
                return json.loads(raw)

    def _write(self, message):
        self._output.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self._output.flush()
