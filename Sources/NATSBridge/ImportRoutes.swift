import EventBusKit
import Foundation

/// What an importer does with messages on each subject, worked out once per subject: the
/// subject's split into origin host and event name, the checks of ``ImportRules``, the echo
/// and pattern decisions, and the payload shape last seen there. A message on a known subject
/// costs no `String`, no validation and no pattern matching — a subject's checks cost more than
/// decoding its payload (a durable import thread spent 45 % of its time validating names).
///
/// Threads: one table per core subscription (its delivery thread) and one for the durable
/// importer (its thread); never shared.
final class ImportRoutes {
    /// What to do with messages on one subject. A class: a route is handed out per message, and
    /// a struct of five references cost five retains and releases each time.
    final class Route {
        enum Action { case post, echo, skip, refused }
        let subject: [UInt8]
        let action: Action
        let host: String
        let name: String
        /// Why a refused route is refused, and its subject as it can be shown.
        let refusal: ImportRules.Refusal?
        /// The payload shape last seen on this subject (see ``WireFormat/ShapeCache``).
        let shapes = WireFormat.ShapeCache()
        /// Core: the origin's last export of this name received, to count what was missed.
        var received = ReceivedNumbers()

        init(subject: [UInt8], action: Action, host: String, name: String, refusal: ImportRules.Refusal? = nil) {
            self.subject = subject
            self.action = action
            self.host = host
            self.name = name
            self.refusal = refusal
        }
    }

    private let subjects: Subjects
    private let patterns: [EventPattern]
    /// Core: the index of the subscription's pattern — a name two patterns match reaches both
    /// subscriptions and only the first pattern's posts. Durable (nil): one consumer for every
    /// pattern, a name is posted when any pattern matches it.
    private let patternIndex: Int?
    /// Routes by subject (FNV-1a of its bytes).
    private var routes: [UInt64: Route] = [:]
    /// What `routes` holds of subjects, bounded by ``bytesLimit``.
    private var routeBytes = 0
    /// The route used last: messages come in runs of one subject, and comparing its bytes
    /// costs less than hashing them and looking the hash up.
    private var last: Route?

    init(subjects: Subjects, patterns: [EventPattern], patternIndex: Int?) {
        self.subjects = subjects
        self.patterns = patterns
        self.patternIndex = patternIndex
    }

    /// What a route costs the table, counted against ``bytesLimit``: its subject three times
    /// (the bytes, the host and the name) and the most its payload shape keeps
    /// (``WireFormat/ShapeCache/keyBytesLimit``), rounded up.
    static func cost(subjectLength: Int) -> Int { 3 * subjectLength + WireFormat.ShapeCache.keyBytesLimit + 256 }

    /// The routes of one table hold at most this (a subject may be 4 KiB, nats-server's control
    /// line): 4 096 routes of short subjects fit, a flood of long distinct names clears the
    /// table sooner instead of pinning tens of megabytes.
    static let bytesLimit = 8 << 20

    /// The route of `subject` (a C string).
    func route(_ subject: UnsafePointer<CChar>) -> Route {
        // strncmp, not memcmp: it stops at the end of a shorter subject instead of reading past it.
        if let last, last.subject.withUnsafeBufferPointer({ known in
            known.withMemoryRebound(to: CChar.self) { strncmp($0.baseAddress!, subject, $0.count) == 0 } && subject[known.count] == 0
        }) {
            return last
        }
        let route = lookUp(subject)
        last = route
        return route
    }

    private func lookUp(_ subject: UnsafePointer<CChar>) -> Route {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        var length = 0
        while subject[length] != 0 {
            hash = (hash ^ UInt64(UInt8(bitPattern: subject[length]))) &* 0x100_0000_01b3
            length += 1
        }
        if let known = routes[hash], known.subject.count == length,
           known.subject.withUnsafeBytes({ memcmp($0.baseAddress!, subject, length) == 0 }) {
            return known
        }
        let route = make(Array(UnsafeRawBufferPointer(start: subject, count: length)))
        let cost = Self.cost(subjectLength: length)
        if routes.count >= 4_096 || routeBytes + cost > Self.bytesLimit {
            routes.removeAll(keepingCapacity: true)
            routeBytes = 0
        }
        routes[hash] = route
        routeBytes += cost
        return route
    }

    /// The route for a subject not seen before (slow path).
    private func make(_ subject: [UInt8]) -> Route {
        let (host, nameText): (String, String)
        switch subject.withUnsafeBytes({ ImportRules.split($0, subjects) }) {
        case .success(let split): (host, nameText) = split
        case .failure(let refusal): return Route(subject: subject, action: .refused, host: "", name: "", refusal: refusal)
        }
        let action: Route.Action
        if host == subjects.host {
            action = .echo
        } else if patterns.count > 1, let patternIndex, patterns.firstIndex(where: { $0.matches(nameText) }) != patternIndex {
            action = .skip  // the subscription of the first matching pattern posts it
        } else if patterns.count > 1, patternIndex == nil, !patterns.contains(where: { $0.matches(nameText) }) {
            action = .skip  // the shared consumer's filter is wider than the patterns
        } else {
            action = .post
        }
        return Route(subject: subject, action: action, host: host, name: nameText)
    }
}
