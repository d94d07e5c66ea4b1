import ControlProtocol
import SystemCalls
import Testing
@testable import EventBusHost

/// A control connection's protocol state without a socket: the framing of request lines and the
/// ``SessionState`` machine, driven input by input, and the roster and access values the server
/// decides admissions and permissions with.
@Suite struct SessionStateTests {
    // MARK: Framing

    /// What the framing hands out, as text (`nil` for a line over the limit).
    private func lines(_ chunks: [String], limit: Int = 16, stopAfter: Int = .max) -> (lines: [String?], buffered: Int) {
        var framing = RequestFraming(maximumLineLength: limit)
        var found: [String?] = []
        for chunk in chunks {
            Array(chunk.utf8).withUnsafeBufferPointer { bytes in
                framing.append(bytes) { line in
                    switch line {
                    case .request(let text): found.append(String(decoding: text, as: UTF8.self))
                    case .tooLong: found.append(nil)
                    }
                    return found.count < stopAfter
                }
            }
        }
        return (found, framing.buffered)
    }

    @Test func cutsLinesAcrossReadsAndKeepsOnlyTheIncompleteRest() {
        #expect(lines(["{\"op\":", "\"stats\"}\n{\"op\"", ":\"status\"}\n"]).lines == [#"{"op":"stats"}"#, #"{"op":"status"}"#])
        let partial = lines(["a\nb\nincompl"])
        #expect(partial.lines == ["a", "b"])
        #expect(partial.buffered == "incompl".utf8.count)
        #expect(lines(["\n\n"]).lines == ["", ""], "blank lines are handed on (the session skips them)")
        #expect(lines(["x\n"]).buffered == 0, "an idle connection keeps no buffer")
    }

    @Test func refusesAnOverlongLineOnceAndCarriesOnAfterItsNewline() {
        // Whole in one read.
        #expect(lines([String(repeating: "x", count: 17) + "\nok\n"]).lines == [nil, "ok"])
        // Spread over reads: reported when the rest passes the limit, the rest skipped, not kept.
        let spread = lines(["0123456789", "0123456789", "0123456789", "tail\nnext\n"])
        #expect(spread.lines == [nil, "next"])
        let held = lines(["0123456789", "0123456789"])
        #expect(held.lines == [nil] && held.buffered == 0, "the bytes of an over-long line are dropped as they come")
        // Exactly at the limit is fine.
        #expect(lines([String(repeating: "y", count: 16) + "\n"]).lines == [String(repeating: "y", count: 16)])
    }

    @Test func stopsHandingOutLinesWhenTheSessionCloses() {
        let result = lines(["a\nb\nc\n"], stopAfter: 1)
        #expect(result.lines == ["a"])
        #expect(result.buffered == 0, "a closed session keeps nothing")
    }

    // MARK: Reading and writing

    @Test func readsOnlyWhileNoAnswersWaitAndWatchesWritabilityMeanwhile() {
        var state = SessionState()
        #expect(state.readsRequests(outputWaiting: false))
        #expect(state.interest(outputWaiting: false) == System.EventLoop.readable | System.EventLoop.peerClosedWriting)
        // Flow control: a client that does not read its answers is not read either.
        #expect(!state.readsRequests(outputWaiting: true))
        #expect(state.interest(outputWaiting: true) == System.EventLoop.writable)
        state.close()
        #expect(!state.readsRequests(outputWaiting: false))
    }

    @Test func anUnsubscribedClientThatEndsItsInputIsAnsweredThenClosed() {
        var state = SessionState()
        #expect(state.outputWritten() == .watch)
        state.peerEndedInput()
        #expect(!state.readsRequests(outputWaiting: false))
        #expect(state.interest(outputWaiting: false) == 0)
        #expect(state.interest(outputWaiting: true) == System.EventLoop.writable)
        #expect(state.outputWritten() == .close)
    }

    @Test func aSubscriberThatEndsItsInputKeepsReceiving() {
        var state = SessionState()
        state.subscribed(count: nil, windowOver: false)
        state.peerEndedInput()
        #expect(state.isSubscribed)
        #expect(state.outputWritten() == .watch)
        #expect(state.takeEvent() == .send)
        #expect(state.feedDrained() == .wait)
    }

    // MARK: Subscribing

    @Test func oneSubscriptionPerConnection() {
        var state = SessionState()
        #expect(state.maySubscribe() == .proceed)
        state.subscribed(count: nil, windowOver: false)
        #expect(state.maySubscribe() == .alreadySubscribed)
        state.finished()
        #expect(state.maySubscribe() == .closing)
        #expect(!state.isSubscribed)
    }

    @Test func aCountEndsTheStreamAtItsLastEvent() {
        var state = SessionState()
        state.subscribed(count: 3, windowOver: false)
        #expect(state.takeEvent() == .send)
        #expect(state.takeEvent() == .send)
        #expect(state.takeEvent() == .sendLast)
        #expect(state.takeEvent() == .none)
        state.finished()
        #expect(state.outputWritten() == .close)
        #expect(state.takeEvent() == .none, "nothing is sent after the end")
    }

    @Test func aWindowEndsOnceTheFeedIsDrained() {
        var over = SessionState()
        over.subscribed(count: nil, windowOver: true)
        #expect(over.feedDrained() == .finish(reason: "until"))

        var timed = SessionState()
        timed.subscribed(count: nil, windowOver: false)
        #expect(timed.feedDrained() == .wait)
        let pumps = timed.windowClosed()
        #expect(pumps, "an open stream is pumped when its until time comes")
        #expect(timed.feedDrained() == .finish(reason: "until"))

        var idle = SessionState()
        let closes = idle.windowClosed()
        #expect(!closes, "no stream: nothing to close")
    }

    // MARK: The host's shutdown

    @Test func anIdleConnectionEndsAtOnce() {
        var state = SessionState()
        #expect(state.end(reason: "shutdown") == .finish(reason: "shutdown"))
        #expect(state.endingReason == nil, "nothing to hurry")
    }

    @Test func aStreamDrainsInSmallBatchesThenEndsAndHurriesWithItsCount() {
        var state = SessionState()
        state.subscribed(count: 2, windowOver: false)
        #expect(state.batchLimit == SessionState.batchSize)
        #expect(state.end(reason: "shutdown") == .drain)
        #expect(state.end(reason: "shutdown") == .none, "ended once")
        #expect(state.batchLimit == SessionState.endingBatchSize)
        #expect(state.endingReason == "shutdown")
        #expect(state.feedDrained() == .finish(reason: "shutdown"))
        // A hurry counts what is given up against the subscription's count.
        #expect(state.takeEvent() == .send)
        #expect(state.takeEvent() == .sendLast)
        #expect(state.takeEvent() == .none)
        state.finished()
        #expect(state.endingReason == nil)
        #expect(state.end(reason: "shutdown") == .none)
        state.close()
        #expect(state.end(reason: "shutdown") == .none)
    }

    @Test func aClosedSessionNeitherEndsNorHurries() {
        var state = SessionState()
        state.subscribed(count: nil, windowOver: false)
        state.close()
        #expect(state.end(reason: "shutdown") == .none)
        #expect(state.endingReason == nil)
    }

    // MARK: Admission and access

    private final class Client {}

    @Test func theRosterCountsClientsInTotalAndPerUserButNotRoot() {
        var roster = ClientRoster<Client>()
        var admitted: [(Client, UInt32)] = []
        func admit(_ user: UInt32) -> Bool {
            guard case .admitted = roster.admit(userID: user, maxClients: 4, maxPerUser: 2) else { return false }
            let client = Client()
            roster.add(client, user: user)
            admitted.append((client, user))
            return true
        }
        #expect(admit(1000) && admit(1000))
        #expect(!admit(1000), "a third for the same user is over max_clients_per_user")
        #expect(admit(0) && admit(0), "root counts only against the total")
        #expect(!admit(0), "over max_clients")
        #expect(roster.refused == .init(limit: 2, descriptors: 0))
        roster.remove(admitted[0].0, user: 1000)
        roster.remove(admitted[0].0, user: 1000)
        #expect(roster.count == 3, "a second removal does nothing")
        #expect(admit(1000), "a freed place is taken again")
        roster.refusedForDescriptors()
        #expect(roster.refused.descriptors == 1)
    }

    @Test func accessFollowsTheGroupsAndKeepsReloadToRootAndTheHostsUser() {
        let tail = ControlSettings.Group(name: "tailers", id: 900)
        let access = ControlAccess(tailGroup: tail, postGroup: nil, hostUserID: 500)
        let member = System.StreamSocket.Peer(processID: 1, userID: 1000, groupID: 100, groups: [900])
        let stranger = System.StreamSocket.Peer(processID: 2, userID: 1001, groupID: 100, groups: [])
        let root = System.StreamSocket.Peer(processID: 3, userID: 0, groupID: 0, groups: [])
        let owner = System.StreamSocket.Peer(processID: 4, userID: 500, groupID: 500, groups: [])
        #expect(access.permits(.tail, member) && !access.permits(.post, member))
        #expect(!access.permits(.tail, stranger))
        #expect(access.permits(.tail, root) && access.permits(.post, root) && access.permits(.reload, root))
        #expect(access.permits(.reload, owner) && !access.permits(.reload, member))
        #expect(access.refusal(.tail, stranger) == "uid 1001 is neither root nor in group tailers, which may tail, status and modules")
        #expect(access.refusal(.post, member) == "only root may post (this eventbusd has no control.post_group)")
        #expect(access.refusal(.reload, member) == "only root and uid 500 (eventbusd's own user) may reload")
    }
}
