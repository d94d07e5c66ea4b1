@_spi(EventBusHost) import EventBusKit
import Foundation
import Synchronization

/// Turns the frames the host sends a worker into an exec module's JSON lines, as its
/// ``FrameChannel`` takes them for writing: the module's subscriptions, mailbox, holding across
/// a restart and flow control stay those of a Swift worker (``ModuleForwarding``), and only the
/// last step — the bytes on the program's standard input — differs.
///
/// - An event: its `eventbus tail --json` line — once, though several of the program's
///   subscriptions matched it (each is one host subscription, and their copies arrive one after
///   the other: the mailbox keeps bus order), and only when its subscription's field matches
///   accept it.
/// - A gap notice (`bus.gap`, its mailbox dropped events for it): a `gap` line with the count
///   and the sequence range.
/// - A JSON frame (the `hello`): its JSON as a line.
///
/// Runs on whichever thread the channel writes on, never two at once (see ``FrameChannel``).
final class ExecLines: @unchecked Sendable {
    // @unchecked: `encode` and `lastSequence` are used only while the channel writes (one
    // thread at a time); `filters` has its own lock.
    private let encode: (Event, inout [UInt8]) -> Void
    private let makeFilter: @Sendable ([String: [String]]) -> @Sendable (Event) -> Bool
    /// The module's subscriptions' ids and field matches, over its program's restarts.
    let subscriptions: ExecSubscriptions
    private var lastSequence: UInt64 = 0
    /// The events translations took in: they left the host for the program
    /// (``WorkerSession/handled``).
    let taken = Atomic<UInt64>(0)

    init(format: ExecLineFormat, subscriptions: ExecSubscriptions) {
        encode = format.makeEncoder()
        makeFilter = format.makeFilter
        self.subscriptions = subscriptions
    }

    /// A new id for `subscription`, whose events pass only when its field matches accept them:
    /// called before the subscription is made.
    func register(_ subscription: ExecSubscription) -> UInt64 {
        subscriptions.register(subscription.matches.isEmpty ? nil : makeFilter(subscription.matches))
    }

    /// Replaces `bytes` (whole frames, as ``FrameBuffer`` writes them) with their lines.
    func translate(_ bytes: inout [UInt8]) {
        var lines: [UInt8] = []
        lines.reserveCapacity(bytes.count * 2)
        var events: UInt64 = 0
        let filters = subscriptions.filters
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset + 5 <= raw.count {
                let length = Int(raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian)
                guard length >= 1, offset + 4 + length <= raw.count else { break }
                let type = FrameType(rawValue: raw[offset + 4])
                let payload = UnsafeRawBufferPointer(rebasing: raw[(offset + 5)..<(offset + 4 + length)])
                offset += 4 + length
                guard type == .events else {
                    lines.append(contentsOf: payload)
                    lines.append(UInt8(ascii: "\n"))
                    continue
                }
                var decoder = WireDecoder(payload)
                guard let count = try? decoder.integer(UInt32.self) else { continue }
                for _ in 0..<count {
                    guard let id = try? decoder.integer(UInt64.self), let event = try? decoder.event() else { break }
                    events += 1
                    line(for: event, filter: filters[id], into: &lines)
                }
            }
        }
        bytes = lines
        if events > 0 { taken.add(events, ordering: .relaxed) }
    }

    private func line(for event: Event, filter: (@Sendable (Event) -> Bool)?, into lines: inout [UInt8]) {
        if let gap = event.gap {
            lines.append(contentsOf: Array("{\"type\":\"gap\",\"reason\":\"slow_client\",\"dropped\":\(gap.dropped),\"first_seq\":\(gap.firstSequence),\"last_seq\":\(gap.lastSequence)}\n".utf8))
            return
        }
        guard event.sequence > lastSequence, filter?(event) ?? true else { return }
        lastSequence = event.sequence
        encode(event, &lines)
    }
}
