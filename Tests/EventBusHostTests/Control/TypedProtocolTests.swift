import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation
import Testing
@testable import EventBusHost

/// The typed control protocol without a socket: request lines decoded to ``ControlRequest`` (and
/// encoded back), answers encoded by the host's types and decoded by the clients' one reader,
/// the stream lines' fixed layout.
@Suite struct TypedProtocolTests {
    private func decode(_ text: String, validName: (String) -> ControlError? = { _ in nil }) -> Result<ControlRequest?, ControlError> {
        Array(text.utf8).withUnsafeBufferPointer { ControlRequest.decodeRequest($0, validName: validName) }
    }

    private func failure(_ text: String, validName: (String) -> ControlError? = { _ in nil }) -> ControlError? {
        if case .failure(let error) = decode(text, validName: validName) { return error }
        return nil
    }

    // MARK: Requests

    @Test func decodesEveryOpAndKeepsTheID() throws {
        #expect(try decode("  \t\r").get() == nil, "a blank line is no request")
        #expect(try decode(#"{"op":"status","id":7}"#).get() == ControlRequest(.status, id: .int(7)))
        #expect(try decode(#"{"op":"modules"}"#).get() == ControlRequest(.modules))
        #expect(try decode(#"{"op":"metrics"}"#).get() == ControlRequest(.metrics))
        #expect(try decode(#"{"op":"reload","id":"r"}"#).get() == ControlRequest(.reload, id: "r"))
        #expect(try decode(#"{"op":"stats"}"#).get() == ControlRequest(.stats(detail: false)))
        #expect(try decode(#"{"op":"stats","detail":true}"#).get() == ControlRequest(.stats(detail: true)))
        var subscribe = SubscribeRequest()
        subscribe.patterns = ["a.>"]
        subscribe.count = 2
        subscribe.match = ["unit": ["nginx.service"], "code": [.int(1), .int(2)]]
        #expect(try decode(#"{"op":"subscribe","patterns":"a.>","count":2,"match":{"unit":"nginx.service","code":[1,2]}}"#).get()?.body
                == .subscribe(subscribe), "a single string or value reads as a list of one")
        #expect(try decode(#"{"op":"listing","path":"/srv"}"#).get()?.body == .listing(ListingRequest(path: "/srv")))
    }

    @Test func subscribeAndListingMembersAreCheckedByKind() {
        #expect(failure(#"{"op":"subscribe","since":5}"#)?.message
                == "subscribe has no member \"since\"; it takes buffer, count, devices, files, follow, hosts, journal, last, life, match, patterns, recursive, since_seq, since_time, sources, units, until_seq, until_time")
        #expect(failure(#"{"op":"subscribe","files":[1]}"#)?.message == #""files" must be a list of strings, found an integer in it"#)
        #expect(failure(#"{"op":"subscribe","units":{}}"#)?.message == #""units" must be a list of strings, found an object"#)
        #expect(failure(#"{"op":"subscribe","follow":"no"}"#)?.message == #""follow" must be true or false, found a string"#)
        #expect(failure(#"{"op":"subscribe","count":1.5}"#)?.message == #""count" must be an integer, found a number"#)
        #expect(failure(#"{"op":"subscribe","match":[]}"#)?.message == #""match" must be an object of field: value(s), found a list"#)
        #expect(failure(#"{"op":"subscribe","life":3}"#)?.message == #""life" must be a string, found an integer"#)
        #expect(failure(#"{"op":"listing"}"#) == ListingRequest.needsPath)
        #expect(failure(#"{"op":"listing","path":"/a","deep":true}"#)?.message == #"listing has no member "deep"; it takes path, recursive"#)
        #expect(failure(#"{"op":"listing","path":"/a","recursive":1}"#)?.message == #""recursive" must be true or false, found an integer"#)
    }

    @Test func aBatchWriterWritesWhatTheDecoderReadsAsTheSameBatch() throws {
        var writer = PostBatchWriter()
        var predicted = 0
        for item in [#"{"name":"a.b","fields":{"n":1}}"#, #"{"name":"c"}"#] {
            predicted = writer.length(adding: item.utf8.count)
            if writer.count == 0 { #expect(predicted == PostBatchWriter.framing + item.utf8.count) }
            Array(item.utf8).withUnsafeBufferPointer { writer.append($0) }
        }
        let line = writer.finish()
        #expect(line.count == predicted, "length(adding:) is the line's length with the newline")
        #expect(writer.count == 0 && writer.bytes.isEmpty, "finishing starts anew")
        #expect(line.last == 0x0A)
        let request = try line.dropLast().withUnsafeBufferPointer { try ControlRequest.decodeRequest($0).get() }
        #expect(request == ControlRequest(.post(.batch([.success(PostedEvent(name: "a.b", fields: ["n": .int(1)])), .success(PostedEvent(name: "c"))]))))
    }

    @Test func malformedAndUnknownRequestsGetTheirCodes() {
        #expect(failure("{nope")?.code == .badJSON)
        #expect(failure("[1]")?.code == .badRequest)
        #expect(failure("[1]")?.message == "a request is a JSON object with an \"op\", found a list")
        #expect(failure(#"{"id":1}"#)?.code == .badRequest)
        #expect(failure(#"{"op":"dance"}"#)?.code == .unknownOp)
        #expect(failure(#"{"op":"dance"}"#)?.message == #"unknown op "dance"; expected one of subscribe, post, status, modules, rules, stats, listing, metrics, reload"#)
        #expect(failure(#"{"op":"stats","detail":1}"#)?.code == .badRequest)
        // The id comes back with the error when the envelope was read.
        let line = Array(#"{"op":"dance","id":"x"}"#.utf8)
        let decoded = line.withUnsafeBufferPointer { ControlRequest.decode($0) }
        #expect(decoded == .failure(ControlError(.unknownOp, #"unknown op "dance"; expected one of subscribe, post, status, modules, rules, stats, listing, metrics, reload"#), id: "x"))
    }

    @Test func aPostIsCheckedNameFirstThenFields() throws {
        let post = try decode(#"{"op":"post","name":"a.b","fields":{"s":"x","i":1,"d":0.5,"b":true}}"#).get()
        #expect(post?.body == .post(.one(PostedEvent(name: "a.b", fields: ["s": "x", "i": .int(1), "d": .double(0.5), "b": .bool(true)]))))
        #expect(failure(#"{"op":"post"}"#) == .badRequest("post needs \"name\": the event's name"))
        #expect(failure(#"{"op":"post","name":"a","fields":[]}"#) == .badRequest("\"fields\" must be an object, found a list"))
        #expect(failure(#"{"op":"post","name":"a","fields":{"n":null}}"#)?.message == #"field "n": a value is a string, number or boolean, found null"#)
        let refuse = { (name: String) in name == "bad" ? ControlError(.invalidName, "no") : nil }
        #expect(failure(#"{"op":"post","name":"bad","fields":[]}"#, validName: refuse)?.code == .invalidName,
                "the name is checked before the fields")
    }

    @Test func aBatchRefusesWholeOnlyWhenItIsNoBatchAndItemsOneByOne() throws {
        #expect(failure(#"{"op":"post","events":{}}"#)?.code == .badRequest)
        #expect(failure(#"{"op":"post","events":[],"name":"a"}"#)?.message == #"a post has "events" or "name", not both"#)
        #expect(failure(#"{"op":"post","events":[]}"#)?.message == #""events" holds 1 to 1024 events, found 0; nothing was posted"#)
        let tooMany = "[" + Array(repeating: #"{"name":"a"}"#, count: ControlProtocol.maximumPostBatch + 1).joined(separator: ",") + "]"
        #expect(failure(#"{"op":"post","events":"# + tooMany + "}")?.code == .badRequest)
        let refuse = { (name: String) in name == "bad" ? ControlError(.invalidName, "no") : nil }
        let batch = try decode(#"{"op":"post","events":[{"name":"a"},3,{"name":"a","extra":1},{"name":"bad"},{"name":"b","fields":{"k":[]}}]}"#,
                               validName: refuse).get()
        guard case .post(.batch(let items))? = batch?.body else {
            Issue.record("not a batch: \(String(describing: batch))")
            return
        }
        #expect(items.count == 5)
        #expect(items[0] == .success(PostedEvent(name: "a")))
        #expect(items[1] == .failure(.badRequest("an event is an object with \"name\" and \"fields\", found an integer")))
        #expect(items[2] == .failure(.badRequest(#"unknown member "extra": an event has "name" and "fields""#)))
        #expect(items[3] == .failure(ControlError(.invalidName, "no")))
        #expect(items[4] == .failure(.badRequest(#"field "k": a value is a string, number or boolean, found a list"#)))
    }

    @Test func requestsEncodeToLinesTheDecoderReadsBack() throws {
        var tail = SubscribeRequest()
        tail.patterns = ["x.>"]
        tail.match = ["path": ["/etc/*.conf"]]
        tail.count = 5
        tail.sinceTime = 1_700_000_000_000_000
        tail.untilSequence = 90
        tail.follow = false
        tail.files = ["/srv"]
        tail.recursive = true
        tail.devices = ["*"]
        tail.hosts = ["local"]
        let requests = [
            ControlRequest(.post(.one(PostedEvent(name: "deploy.done", fields: ["env": "prod", "n": .int(3)]))), id: .int(1)),
            ControlRequest(.stats(detail: true)),
            ControlRequest(.status, id: "s"),
            ControlRequest(.listing(ListingRequest(path: "/srv", recursive: true))),
            ControlRequest(.subscribe(tail), id: "tail"),
        ]
        for request in requests {
            let line = request.line
            #expect(line.last == 0x0A && line.filter { $0 == 0x0A }.count == 1)
            let back = try line.dropLast().withUnsafeBufferPointer { try ControlRequest.decodeRequest($0).get() }
            #expect(back == request)
        }
    }

    // MARK: Answers

    private func roundTrip(_ json: JSON) throws -> ControlResponse {
        let line = JSONWriter.line(json)
        return try ControlResponse.decode(line.dropLast().withUnsafeBufferPointer { try JSON.parse($0) })
    }

    @Test func answersDecodeToTheirTypes() throws {
        let hello = Hello(may: ["tail", "post"], processID: 42, userID: 1000)
        #expect(try roundTrip(hello.json) == .hello(hello))
        let refusal = ControlError(.tooManyClients, "full")
        #expect(try roundTrip(refusal.json) == .error(refusal))
        #expect(try roundTrip(Posted(name: "a", sequence: 9).json) == .posted(Posted(name: "a", sequence: 9)))
        #expect(try roundTrip(StreamEnd.json(reason: "count")) == .end(reason: "count"))
        var subscribed = Subscribed(patterns: ["a.>"], oldestSequence: 1, newestSequence: 9, oldestTime: 1_700_000_000_000_000,
                                    buffer: 100, bufferBytes: 1 << 20)
        subscribed.files = ["/srv"]
        subscribed.replayIncomplete = true
        #expect(try roundTrip(subscribed.json) == .subscribed(subscribed))
        #expect(try roundTrip(Reloaded.json(message: "ok")) == .reloaded(message: "ok"))
        #expect(try roundTrip(MetricsAnswer.json(text: "x 1\n")) == .metrics(text: "x 1\n"))
        #expect(try roundTrip(["type": "future_thing", "n": .int(1)]) == .other(type: "future_thing", ["type": "future_thing", "n": .int(1)]))
        #expect(try roundTrip(["type": "error", "code": "brand_new", "message": "m"]) == .error(ControlError(.init(rawValue: "brand_new"), "m")),
                "a code this client does not know is kept")
        #expect(throws: ResponseDecodingError.self) { try roundTrip(["type": "posted", "name": "a"]) }
        #expect(throws: ResponseDecodingError.self) { try roundTrip(["no": "type"]) }
    }

    @Test func reportsReadBackAsTheyWereWritten() throws {
        let module = ModuleReport(name: "m", path: "/m.so", state: "failed", reason: "boom", delivered: 5, dropped: 1, queued: 2,
                                  queuedBytes: 300, errors: 1, reportedName: "M", version: "1.0", isolation: "process", restarts: 2,
                                  workerProcessID: 77, lastCrash: "SIGSEGV", lastCrashTime: "2026-01-01T00:00:00Z", configNotApplied: nil)
        let status = StatusReport(
            processID: 1, configFile: "/etc/eventbus.yaml", started: "2026-01-01T00:00:00Z", uptimeSeconds: 1.5, posted: 10,
            subscriptions: 3, sources: [.init(id: "journal", subscriptions: 1, state: "following")], modules: [module],
            control: .init(socket: "/run/s", clients: 2, tailing: 1,
                           replay: .init(capacity: 100, held: 10, byteCapacity: 1000, bytes: 500, oldestSequence: 1, newestSequence: 10),
                           refusedForLimit: 4, refusedForDescriptors: 5),
            bridge: ["state": "connected"])
        guard case .status(let back) = try roundTrip(status.json) else {
            Issue.record("not a status answer")
            return
        }
        #expect(back.json == status.json)
        let stats = StatsReport(
            processID: 1, uptimeSeconds: 2, posted: 10, subscriptions: 3, clients: 2,
            process: .init(residentBytes: 30_000_000, openFiles: 20, threads: 9),
            modules: [.init(name: "m", state: "active", delivered: 5, dropped: 0, queued: 1, errors: 0,
                            handlerSeconds: .init(bounds: [0.001, 0.01], counts: [1, 3, 4]))],
            tailing: [.init(client: 3, userID: 0, processID: 99, delivered: 8, dropped: 1, queued: 2, queuedBytes: 40)])
        guard case .stats(let statsBack) = try roundTrip(stats.json) else {
            Issue.record("not a stats answer")
            return
        }
        #expect(statsBack.json == stats.json)
        #expect(statsBack.process == stats.process && statsBack.modules == stats.modules && statsBack.tailing == stats.tailing)
        #expect(try roundTrip(ModulesAnswer(modules: [module]).json) == .modules([module]))
    }

    @Test func histogramQuantilesInterpolateAsPrometheusDoes() {
        let histogram = StatsReport.Histogram(bounds: [1, 2, 4], counts: [0, 50, 100, 100])
        #expect(histogram.quantile(0.5) == .value(2))
        #expect(histogram.quantile(0.99) == .value(2 + 2 * 0.98))
        #expect(StatsReport.Histogram(bounds: [1], counts: [0, 5]).quantile(0.99) == .above(1), "past the last bound")
        #expect(StatsReport.Histogram(bounds: [1], counts: [0, 0]).quantile(0.99) == nil, "nothing observed")
        let later = StatsReport.Histogram(bounds: [1, 2, 4], counts: [10, 60, 110, 110])
        #expect(later.since(histogram) == StatsReport.Histogram(bounds: [1, 2, 4], counts: [10, 10, 10, 10]))
    }

    // MARK: Stream lines

    @Test func eventLinesHaveTheLayoutTheirTypeDocuments() throws {
        let bus = Bus()
        let events = Collected<[Event]>([])
        let subscription = bus.publisher(for: EventPattern.all).sink { event in events.update { $0.append(event) } }
        bus.post("deploy.done", fields: ["z": 1, "a": "x \"quoted\""])
        subscription.cancel()
        var encoder = EventJSON()
        var writer = JSONWriter()
        encoder.event(try #require(events.value.first), into: &writer)
        let line = String(decoding: writer.bytes, as: UTF8.self)
        #expect(writer.bytes.starts(with: Array(String(describing: EventLine.start).utf8)))
        #expect(line.hasSuffix(String(describing: EventLine.end)))
        // The members, in the order the protocol fixes.
        let positions = EventLine.memberOrder.map { line.range(of: "\"\($0)\":")?.lowerBound }
        #expect(positions.allSatisfy { $0 != nil } && positions.map { $0! } == positions.map { $0! }.sorted(), "\(line)")
        guard case .event(let parsed) = try ControlResponse.decode(JSON.parse(line)) else {
            Issue.record("not an event line: \(line)")
            return
        }
        #expect(parsed["fields"] == ["a": "x \"quoted\"", "z": .int(1)])
    }

    @Test func gapAndBatchAnswersAreWrittenByHandAndReadBackTyped() throws {
        var writer = JSONWriter()
        writer.gapLine(dropped: 3, first: 10, last: 12, reason: .slowClient)
        #expect(writer.bytes.starts(with: Array(String(describing: GapLine.start).utf8)))
        guard case .gap(let gap) = try roundTrip(writer.bytes.dropLast().withUnsafeBufferPointer { try JSON.parse($0) }) else {
            Issue.record("not a gap")
            return
        }
        #expect(gap.reason == "slow_client" && gap.dropped == 3 && gap.first == 10 && gap.last == 12)

        var batch = JSONWriter()
        PostedBatch.write(items: 3, posted: 2, id: "b", into: &batch) { index in
            index == 1 ? .failure(ControlError(.invalidName, "bad name")) : .success(UInt64(100 + index))
        }
        let answer = try batch.bytes.dropLast().withUnsafeBufferPointer { try JSON.parse($0) }
        #expect(answer == ["type": "posted", "count": .int(2), "seqs": [.int(100), .null, .int(102)], "id": "b",
                           "errors": [["index": .int(1), "code": "invalid_name", "message": "bad name"]]])
        #expect(try roundTrip(answer) == .postedBatch(PostedBatch.Answer(items: [
            .posted(sequence: 100), .refused(ControlError(.invalidName, "bad name")), .posted(sequence: 102)])))
        let listing = Listing(root: "/srv", source: "files:/srv", sequence: 7, rootExists: true,
                              entries: [.init(path: "/srv/a", isDirectory: false), .init(path: "/srv/d", isDirectory: true)])
        #expect(try roundTrip(listing.json) == .listing(listing))
    }
}
