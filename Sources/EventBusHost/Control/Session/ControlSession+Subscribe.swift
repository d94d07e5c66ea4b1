import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import EventSources
import Foundation

/// A session's `subscribe`: checking what the client may watch, attaching its ``TailFeed`` to
/// the server's fan-out and replay, and opening the sources it asked for (files, journal units,
/// devices, units). On the loop's thread.
extension ControlSession {
    func subscribe(_ request: SubscribeRequest, id: JSON?) {
        switch state.maySubscribe() {
        case .proceed: break
        case .alreadySubscribed:
            error(ControlError(.alreadySubscribed, "this connection is already subscribed; open another one"), id: id)
            return
        case .closing:
            return  // the connection closes once its last answers are out
        }
        var parsed: CheckedSubscription
        do {
            parsed = try CheckedSubscription(request, maximumBuffer: server.clientBuffer.events, life: server.life)
        } catch {
            self.error(error, id: id)
            return
        }
        // The client's own access decides what it may watch (PeerAccess), before anything opens.
        let access = server.accessSettings
        do throws(PeerAccess.Refusal) {
            if access.files == .caller {
                for path in parsed.files { try PeerAccess.checkWatch(path, by: peer) }
            }
            if !parsed.journal.isEmpty { try PeerAccess.checkJournal(by: peer, groups: access.journalGroups) }
        } catch {
            server.logger.warning("control: refused subscribe from uid \(peer.userID) (pid \(peer.processID)): \(error)")
            self.error(ControlError(.forbidden, error.description), id: id)
            return
        }
        for path in parsed.files {
            do throws(System.CallError) {
                _ = try System.status(of: path)
            } catch where error.isNoSuchFile {
                // As `tail -f` does: a watch on nothing would only ever print its error.
                self.error(ControlError(.notFound, "\(path) does not exist, so there is nothing to watch (a configured watch with rearm: true waits for a path to appear)"), id: id)
                return
            } catch {}
        }
        filtersPaths = peer.userID != 0 && parsed.recursive && access.files == .caller && !parsed.files.isEmpty
        for (kind, wanted, what) in [(FileWatch.kind, !parsed.files.isEmpty, "files"), (JournalWatch.kind, !parsed.journal.isEmpty, "journal units"),
                                     (DeviceWatch.kind, !parsed.devices.isEmpty, DeviceWatch.kind), (UnitWatch.kind, !parsed.units.isEmpty, "units")]
        where wanted && !server.bus.hasSource(kind: kind) {
            error(ControlError(.unavailable, "this eventbusd has no \(kind) source on its bus, so it cannot follow \(what)"), id: id)
            return
        }
        for source in parsed.sources where !server.bus.hasSource(kind: source.kind) {
            error(ControlError(.unavailable, "this eventbusd has no \(source.kind) source on its bus"), id: id)
            return
        }
        let loop = loop
        if !parsed.follow {
            // What the host holds now and nothing after it; the ring's newest is read below
            // under the server's lock, so take every later event as past the window.
            parsed.filter.untilSequence = min(parsed.filter.untilSequence ?? .max, server.newestSequence)
        }
        let buffer = server.clientBuffer
        let feed = TailFeed(patterns: parsed.patterns, fromSequence: parsed.since ?? 0, filter: parsed.filter,
                            capacity: parsed.buffer ?? buffer.events, byteCapacity: buffer.bytes, hosts: parsed.hosts,
                            client: (id: self.id, userID: peer.userID, processID: peer.processID),
                            wake: { [weak self] in
                                guard let session = self else { return }
                                loop.execute { session.pump() }
                            })
        let attachment = server.attach(feed, since: parsed.since, last: parsed.last)
        // The client's own sources, after the feed is in place so their first events reach it.
        var subscriptions: [AnyCancellable] = []
        let server = server
        do {
            let entryLimit = server.watchEntries
            for path in parsed.files {
                let watch = try FileWatch(path: path, recursive: parsed.recursive, entryLimit: entryLimit)
                subscriptions.append(try server.bus.files(watch).sink { event in
                    server.delivered(event)
                    if feed.filter.accepts(event) { feed.offer(event, bytes: event.estimatedBytes) }
                })
            }
            // One journal reader for all the units — alternatives of one field, as
            // `.unit(a) || .unit(b)` would be — not one each: a reader is a thread and an
            // inotify instance. Clients asking for the same units share it.
            if !parsed.journal.isEmpty {
                let units = JournalMatch(terms: [["_SYSTEMD_UNIT": Set(parsed.journal)]])
                subscriptions.append(try server.bus.journal(matching: units).sink { event in
                    server.delivered(event)
                    if feed.filter.accepts(event) { feed.offer(event, bytes: event.estimatedBytes) }
                })
            }
            // One shared monitor per subsystem (or one for all): the host's, shared with its
            // config's device watches and modules asking for the same.
            for subsystem in parsed.devices {
                subscriptions.append(try server.bus.devices(subsystem: subsystem == "*" ? nil : subsystem).sink { event in
                    server.delivered(event)
                    if feed.filter.accepts(event) { feed.offer(event, bytes: event.estimatedBytes) }
                })
            }
            // Unit states are public (any user may list them on the system bus): no peer check.
            if !parsed.units.isEmpty {
                subscriptions.append(try server.bus.units(matching: UnitMatch(parsed.units)).sink { event in
                    server.delivered(event)
                    if feed.filter.accepts(event) { feed.offer(event, bytes: event.estimatedBytes) }
                })
            }
            // The registry's other kinds: one shared source per distinct value.
            for source in parsed.sources {
                subscriptions.append(try source.publisher(on: server.bus).sink { event in
                    server.delivered(event)
                    if feed.filter.accepts(event) { feed.offer(event, bytes: event.estimatedBytes) }
                })
            }
        } catch {
            subscriptions.forEach { $0.cancel() }
            server.detach(feed)
            self.error(ControlError(.unavailable, (error as? EventBusError)?.message ?? "\(error)"), id: id)
            return
        }
        self.feed = feed
        self.sourceSubscriptions = subscriptions
        var answer = Subscribed(
            patterns: parsed.patterns.map(\.description),
            oldestSequence: Int64(attachment.oldestSequence), newestSequence: Int64(attachment.newestSequence),
            oldestTime: attachment.oldestTime.map { Int64($0.timeIntervalSince1970 * 1_000_000) },
            buffer: Int64(feed.capacity), bufferBytes: Int64(feed.byteCapacity))
        answer.files = parsed.files
        answer.journal = parsed.journal
        answer.devices = parsed.devices
        answer.units = parsed.units
        answer.sources = parsed.sourceValues
        answer.replayIncomplete = attachment.replayIncomplete
        answer.life = server.life
        answer.sinceEarlierLife = parsed.sinceEarlierLife
        respond(answer.json, id: id)
        let windowOver = parsed.filter.hasEnded(newestSequence: attachment.newestSequence, now: Date())
        state.subscribed(count: parsed.count, windowOver: windowOver)
        if !windowOver, let until = parsed.filter.until {
            // Nothing may be posted after `until`: the window still closes then.
            loop.after(.milliseconds(Int64(max(0, until.timeIntervalSinceNow) * 1000) + 1)) { [weak self] in
                guard let self, self.state.windowClosed() else { return }
                self.pump()
            }
        }
        feed.schedule()
    }
}
