import ControlProtocol
import EventBusHost
import Foundation
import Testing

/// `eventbus files PATH` and the control socket's `listing` request, against the real eventbusd
/// as a child process: the listing is the tree as the watch knows it, stands at a sequence of
/// its stream, is authorized by the caller's own access like `tail --files`, and a watch opened
/// only to answer it is released.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct FileListingTests {
    @Test func filesListsWhatTheWatchKnowsByTheCallersOwnAccess() async throws {
        let directory = try TemporaryDirectory()
        chmod(directory.path, 0o711)
        let suffix = uniqueSuffix()
        let tailGroup = try TestGroup("ebt\(suffix)")
        let user = try TestUser("ebf\(suffix)", groups: [tailGroup.name])
        let (yaml, socket) = controlConfig(directory, control: "  tail_group: \(tailGroup.name)")
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        let open = directory.path + "/open", secret = directory.path + "/secret"
        for folder in [open, open + "/sub", open + "/hidden", secret] {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        }
        try directory.write("open/a.txt", "a")
        try directory.write("open/sub/b.txt", "b")
        try directory.write("open/hidden/payroll.txt", "x")
        chmod(open, 0o755)
        chmod(open + "/sub", 0o755)
        chmod(open + "/hidden", 0o700)
        chmod(secret, 0o700)

        // Root sees everything, folders with a trailing slash, sorted.
        let all = try await eventbus(["files", "--socket", socket, "--recursive", open], in: directory)
        #expect(all.status == 0, "\(all.stderr)")
        #expect(all.lines == ["a.txt", "hidden/", "hidden/payroll.txt", "sub/", "sub/b.txt"].map { "\(open)/\($0)" })
        // Without --recursive: the watch of the folder itself.
        let flat = try await eventbus(["files", "--socket", socket, open], in: directory)
        #expect(flat.lines == ["a.txt", "hidden/", "sub/"].map { "\(open)/\($0)" }, "\(flat.stdout)")

        // A user sees what it could reach: the closed folder, not what is in it.
        let mine = try await eventbus(["files", "--socket", socket, "--recursive", open], as: user, in: directory)
        #expect(mine.status == 0, "\(mine.stderr)")
        #expect(mine.lines == ["a.txt", "hidden/", "sub/", "sub/b.txt"].map { "\(open)/\($0)" }, "\(mine.stdout)")
        let refused = try await eventbus(["files", "--socket", socket, secret], as: user, in: directory)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("eventbusd refused: uid \(user.userID) may not watch \(secret)"), "\(refused.stderr)")
        #expect(await daemon.waitFor("control: refused listing from uid \(user.userID)"))

        // The JSON says where the listing stands in the watch's stream.
        let json = try await eventbus(["files", "--socket", socket, "--json", "--recursive", open], in: directory)
        let listing = try #require(json.jsonLines.first)
        #expect(listing["type"] == "listing")
        #expect(listing["source"]?.stringValue == "files:\(open) recursive limit \(ControlSettings.defaultWatchEntries)")
        #expect(listing["root_exists"]?.boolValue == true)
        #expect(listing["seq"]?.intValue != nil)
        #expect(listing["entries"]?.arrayValue?.count == 5)

        // Bad requests are told why; the watches opened to answer are gone.
        #expect(try ask(socket, ["op": "listing", "path": "relative"])["code"] == "bad_request")
        #expect(try ask(socket, ["op": "listing", "path": .string(open), "depth": .int(1)])["code"] == "bad_request")
        let missing = try await eventbus(["files", "--socket", socket, open + "/nothing"], in: directory)
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("\(open)/nothing does not exist"), "\(missing.stderr)")
        #expect(await eventually { listedFileSources(socket) == 0 })
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }

    /// A tree over the watch entry limit is refused naming the limit — not answered "does not
    /// exist" — and the watches opened only to answer listings post nothing: a `fs.>` tail sees
    /// none of their notices. A configured watch on the tree answers for it, at its own place in
    /// the stream.
    @Test func aListingOverTheWatchLimitNamesTheLimitAndTellsNoSubscriber() async throws {
        let directory = try TemporaryDirectory()
        let big = directory.path + "/big", configured = directory.path + "/configured"
        for folder in [big, configured] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false) }
        for n in 0..<40 { try directory.write("big/f\(n)", "") }
        let (yaml, socket) = controlConfig(directory, control: "  watch_entries: 25", rest: """
            sources:
              files:
                - name: configured
                  path: \(configured)
                  recursive: true
            """)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        defer { withExtendedLifetime(daemon) {} }
        let first = try #require(try ask(socket, ["op": "post", "name": "test.start"])["seq"]?.intValue)

        let over = try await eventbus(["files", "--socket", socket, "--recursive", big], in: directory)
        #expect(over.status == 1)
        #expect(over.stderr.contains("\(big) holds more than 25 files and directories, the limit of a watch (control.watch_entries)"), "\(over.stderr)")
        #expect(!over.stderr.contains("does not exist"), "\(over.stderr)")
        #expect(try ask(socket, ["op": "listing", "path": .string(big), "recursive": .bool(true)])["code"] == "too_large")
        let missing = try await eventbus(["files", "--socket", socket, big + "/nothing"], in: directory)
        #expect(missing.stderr.contains("\(big)/nothing does not exist"), "\(missing.stderr)")

        try directory.write("configured/a.txt", "a")
        var listing: JSON = [:]
        #expect(await eventually {
            listing = (try? ask(socket, ["op": "listing", "path": .string(configured), "recursive": .bool(true)])) ?? [:]
            return listing["entries"]?.arrayValue?.count == 1
        }, "\(listing)")
        #expect(listing["source"]?.stringValue?.hasPrefix("files:\(configured) recursive") == true, "\(listing)")
        #expect((listing["seq"]?.intValue ?? 0) > first, "the configured watch's place in its stream: \(listing)")

        let last = try #require(try ask(socket, ["op": "post", "name": "test.end"])["seq"]?.intValue)
        let seen = try await eventbus(["tail", "--socket", socket, "--json", "--no-follow", "--since", "\(first)", "fs.>", "test.*"], in: directory)
        #expect(seen.status == 0, "\(seen.stderr)")
        let names = seen.jsonLines.compactMap { $0["name"]?.stringValue }
        // The configured watch's events of a.txt may still be arriving (fs.closed after test.end).
        #expect(names.first == "test.start" && names.contains("test.end"), "\(names)")
        #expect(!names.contains("fs.error"), "a listing's own watch posted: \(seen.stdout)")
        #expect(seen.jsonLines.first { $0["name"]?.stringValue == "test.end" }?["seq"]?.intValue == last)
        #expect(await eventually { listedFileSources(socket) == 1 }, "only the configured watch runs")
    }
}

/// Running files sources, from `status`.
private func listedFileSources(_ socket: String) -> Int {
    let sources = (try? ask(socket, ["op": "status"]))?["sources"]?.arrayValue ?? []
    return sources.filter { $0["id"]?.stringValue?.hasPrefix("files:") == true }.count
}
