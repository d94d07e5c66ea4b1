/// Numbers this instance's exports per event name — 1, 2, 3… for each name — so that a core
/// importer can count what it missed of an origin (``ReceivedNumbers``).
///
/// Why per name, not one number per origin: a core importer subscribes to the names it imports
/// (`<prefix>.*.<pattern>`, the server filters), so it receives every export of those names and
/// none of the others; numbered across all of an origin's exports, every export of a name it
/// does not import would look like a loss.
///
/// An export takes its number when nats.c has taken it (``commit()``): one nats.c refuses (its
/// reconnect buffer full, a name NATS cannot carry) never leaves, is announced by this host, and
/// takes none, so importers do not count it again.
///
/// Bounded: at most ``nameLimit`` names are remembered; past that all are forgotten and every
/// name is numbered from 1 again — which an importer takes for a new start of the numbering,
/// not for a loss (``ReceivedNumbers``). Events come in runs of one name, so the table is
/// consulted only when the name changes.
///
/// Threads: the exporter thread only.
struct ExportNumbers {
    /// Names remembered at most (each costs its name and a number).
    static let nameLimit = 4_096

    private var numbers: [String: UInt64] = [:]
    /// The name of the last export and its last number: the run being numbered.
    private var name = ""
    private var last: UInt64 = 0

    /// The number the next export of `name` takes, once committed.
    mutating func next(for name: String) -> UInt64 {
        if name != self.name {
            if !self.name.isEmpty {
                if numbers.count >= Self.nameLimit, numbers[self.name] == nil { numbers.removeAll(keepingCapacity: true) }
                numbers[self.name] = last
            }
            self.name = name
            last = numbers[name] ?? 0
        }
        return last + 1
    }

    /// The export numbered by the last ``next(for:)`` was taken by nats.c.
    mutating func commit() {
        last += 1
    }
}

/// What a core importer received last of one origin's exports of one name (one per route:
/// origin host and name), and how many it missed before each new one.
///
/// A jump in the numbers within an instance of the origin is exports the importer did not
/// receive: lost while it was disconnected, dropped by nats.c (its pending limits) or by a
/// server, or lost by the origin after nats.c took them (its reconnect buffer's or socket's
/// bytes when its connection broke). A newer instance (the origin restarted) whose first export
/// received is number n missed the n − 1 before it — if this importer had received the older
/// instance, so was listening before the new one began. Not counted: the first export received
/// of a name (nothing to compare with), what an instance exported after the last one received
/// when the next is of a newer instance (its last number is unknown), exports of a name the
/// origin never sends again, and a numbering that starts again (the origin forgot the name,
/// ``ExportNumbers/nameLimit``; a number at or below the last is taken as that, not counted).
struct ReceivedNumbers {
    private var instance: UInt64 = 0
    private var number: UInt64 = 0

    /// Takes in an export's instance and number (0: a payload without numbers, version 1 or 2);
    /// returns how many exports of the name were missed just before it.
    mutating func receive(instance: UInt64, number: UInt64) -> UInt64 {
        guard number > 0, instance >= self.instance else { return 0 }  // not numbered, or of an older life
        defer { (self.instance, self.number) = (instance, number) }
        if instance == self.instance {
            return number > self.number ? number - self.number - 1 : 0
        }
        return self.instance == 0 ? 0 : number - 1
    }
}
