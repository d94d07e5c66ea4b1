import ControlProtocol
import Foundation
import Testing

/// `post` with `events` (a batch) through a real eventbusd: good items posted in order, bad
/// ones refused by index, a request that is no batch refused whole while the connection goes
/// on, and batches from several posters reaching a tail each exactly once.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct BatchPostTests {
    @Test func aBatchPostsTheGoodItemsAndRefusesTheBadOnesByIndex() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        defer { withExtendedLifetime(daemon) {} }
        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "3", "batch.>"], in: directory)
        #expect(await waitForTailing(socket, count: 1))

        let (connection, _) = try rawConnection(socket)
        try connection.send(["op": "post", "id": "b1", "events": [
            ["name": "batch.one", "fields": ["n": .int(1)]],
            ["name": "bad..name"],
            ["name": "batch.nested", "fields": ["n": ["x": .int(1)]]],
            "not an object",
            ["name": "batch.extra", "extra": .bool(true)],
            ["fields": ["n": .int(3)]],
            ["name": "batch.four", "fields": ["n": .int(4)]],
            ["name": "batch.five"],
        ]])
        let answer = try #require(try connection.readJSON())
        #expect(answer["type"] == "posted" && answer["id"] == "b1" && answer["count"] == .int(3), "\(answer)")
        let sequences = try #require(answer["seqs"]?.arrayValue)
        #expect(sequences.count == 8)
        #expect(sequences.indices.filter { sequences[$0] != .null } == [0, 6, 7])
        let posted = sequences.compactMap(\.intValue)
        #expect(posted == posted.sorted() && Set(posted).count == 3)
        let errors = try #require(answer["errors"]?.arrayValue)
        #expect(errors.compactMap { $0["index"]?.intValue } == [1, 2, 3, 4, 5])
        #expect(errors.compactMap { $0["code"]?.stringValue } == ["invalid_name", "bad_request", "bad_request", "bad_request", "bad_request"])
        #expect(errors[0]["message"]?.stringValue?.contains(#"event name "bad..name""#) == true, "\(errors[0])")
        #expect(errors[1]["message"]?.stringValue?.contains(#"field "n": a value is a string, number or boolean"#) == true)
        #expect(errors[3]["message"]?.stringValue?.contains(#"unknown member "extra""#) == true)
        #expect(errors[4]["message"]?.stringValue?.contains(#""name""#) == true)

        let received = await tail.finish()
        #expect(received.status == 0, "\(received.stderr)")
        #expect(received.jsonLines.compactMap { $0["seq"]?.intValue } == posted)
        #expect(received.jsonLines.compactMap { $0["name"]?.stringValue } == ["batch.one", "batch.four", "batch.five"])
        #expect(received.jsonLines.first?["source"] == "user")
    }

    @Test func aRequestThatIsNoBatchIsRefusedWholeAndTheConnectionCarriesOn() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        defer { withExtendedLifetime(daemon) {} }
        let postedBefore = try #require(try ask(socket, ["op": "stats"])["posted"]?.intValue)

        let (connection, _) = try rawConnection(socket)
        let limit = ControlProtocol.maximumPostBatch
        let overTheLimit = JSON.array((0...limit).map { _ in ["name": "limit.x"] })
        let refused: [(JSON, String)] = [
            (["op": "post", "id": .int(1), "events": overTheLimit], "holds 1 to \(limit) events, found \(limit + 1); nothing was posted"),
            (["op": "post", "id": .int(2), "events": []], "found 0"),
            (["op": "post", "id": .int(3), "events": ["name": "limit.x"]], #""events" must be a list"#),
            (["op": "post", "id": .int(4), "name": "limit.x", "events": [["name": "limit.x"]]], #"a post has "events" or "name", not both"#),
        ]
        for (request, words) in refused {
            try connection.send(request)
            let answer = try #require(try connection.readJSON())
            #expect(answer["type"] == "error" && answer["code"] == "bad_request" && answer["id"] == request["id"], "\(answer)")
            #expect(answer["message"]?.stringValue?.contains(words) == true, "\(answer)")
        }
        // A batch cut off in the middle is not JSON: one error, nothing posted.
        try connection.send(Array(#"{"op":"post","events":[{"name":"limit.x"},"#.utf8) + [0x0A])
        #expect(try connection.readJSON()?["code"] == "bad_json")
        #expect(try ask(socket, ["op": "stats"])["posted"]?.intValue == postedBefore)

        // The same connection posts a batch of exactly the limit.
        try connection.send(["op": "post", "id": .int(5), "events": .array((1...limit).map { ["name": "limit.x", "fields": ["n": .int(Int64($0))]] })])
        let answer = try #require(try connection.readJSON())
        #expect(answer["type"] == "posted" && answer["count"] == .int(Int64(limit)) && answer["errors"] == nil, "\(answer)")
        let sequences = answer["seqs"]?.arrayValue?.compactMap(\.intValue) ?? []
        #expect(sequences.count == limit && sequences == sequences.sorted())
        #expect(try ask(socket, ["op": "stats"])["posted"]?.intValue == postedBefore + Int64(limit))
    }

    @Test func batchesFromSeveralPostersReachATailEachExactlyOnce() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory, control: "  client_buffer: 50000")
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        defer { withExtendedLifetime(daemon) {} }
        let perPoster = 6000
        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "\(3 * perPoster)", "mix.>"], in: directory)
        #expect(await waitForTailing(socket, count: 1))

        // Two `post --stdin` (batches of up to 1024) and one client posting single requests, at once.
        var posters: [CLIProcess] = []
        for poster in ["a", "b"] {
            let lines = (1...perPoster).map { #"{"name":"mix.\#(poster)","fields":{"n":\#($0)}}"# }
            let input = try directory.write("\(poster).jsonl", lines.joined(separator: "\n") + "\n")
            posters.append(try CLIProcess(["post", "--stdin", "--print-seq", "--socket", socket], in: directory, input: input))
        }
        try postMany(socket, name: "mix.c", count: perPoster)
        var acknowledged: [[Int64]] = []
        for poster in posters {
            let result = await poster.finish()
            #expect(result.status == 0, "\(result.stderr)")
            let sequences = result.lines.compactMap { EventCursor($0)?.sequence }.map(Int64.init)
            #expect(sequences.count == perPoster && sequences == sequences.sorted())
            acknowledged.append(sequences)
        }

        let received = await tail.finish()
        #expect(received.status == 0, "\(received.stderr)")
        let seen = received.jsonLines.compactMap { $0["seq"]?.intValue }
        #expect(seen.count == 3 * perPoster && Set(seen).count == seen.count, "every event once")
        #expect(seen == seen.sorted())
        #expect(Set(acknowledged.joined()).isSubset(of: Set(seen)))
        for name in ["mix.a", "mix.b", "mix.c"] {
            let values = received.jsonLines.filter { $0["name"]?.stringValue == name }.compactMap { $0["fields"]?["n"]?.intValue }
            #expect(values == (1...Int64(perPoster)).map { $0 }, "\(name) in its posting order")
        }
    }
}
