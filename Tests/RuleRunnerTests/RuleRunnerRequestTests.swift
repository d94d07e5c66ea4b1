import ControlProtocol
import Foundation
import Glibc
import RuleRunnerProtocol
import Testing

/// The runner's requests as bytes: what a client sends decodes to itself, and every line a
/// hostile client might send is refused with a clear error, never half-read.
@Suite struct RuleRunnerRequestTests {
    static let event: JSON = ["type": "event", "seq": .int(7), "name": "deploy.done", "source": "user",
                              "time": "2026-11-29T08:00:00.000001Z", "mono": .int(123), "fields": ["path": "/etc/x"]]

    func decode(_ text: String) -> Result<RuleRunnerRequest, RuleRunnerError> {
        Array(text.utf8).withUnsafeBufferPointer(RuleRunnerRequest.decode)
    }

    func decode(_ request: RuleRunnerRequest) -> Result<RuleRunnerRequest, RuleRunnerError> {
        Array(request.line.dropLast()).withUnsafeBufferPointer(RuleRunnerRequest.decode)
    }

    @Test func runAndStopDecodeToThemselves() {
        let run = RuleRunnerRequest.run(RuleRunRequest(rule: "reload-nginx", action: 2, run: "9f3a-12", events: [Self.event, Self.event]))
        #expect(decode(run) == .success(run))
        #expect(decode(.stop) == .success(.stop))
        #expect(run.line.last == UInt8(ascii: "\n"))
        #expect(run.line.dropLast().contains(UInt8(ascii: "\n")) == false)
    }

    static let hostile: [(line: String, says: String)] = [
        ("", "not JSON"),
        ("{", "not JSON"),
        ("[1,2]", "a JSON object"),
        ("\"run\"", "a JSON object"),
        (#"{"op":"exec","argv":["/bin/sh"]}"#, "unknown op \"exec\""),
        (#"{"rule":"r"}"#, "needs \"op\""),
        (#"{"op":"stop","run":"1"}"#, "unknown member \"run\""),
        (#"{"op":"run","rule":"r","action":1,"run":"a-1","events":[{}],"argv":["/bin/sh"]}"#, "unknown member \"argv\""),
        (#"{"op":"run","rule":"r","action":1,"run":"a-1","events":[{}],"user":"root"}"#, "unknown member \"user\""),
        (#"{"op":"run","action":1,"run":"a-1","events":[{}]}"#, "\"rule\""),
        (#"{"op":"run","rule":"","action":1,"run":"a-1","events":[{}]}"#, "\"rule\""),
        (#"{"op":"run","rule":"r","action":0,"run":"a-1","events":[{}]}"#, "\"action\""),
        (#"{"op":"run","rule":"r","action":-1,"run":"a-1","events":[{}]}"#, "\"action\""),
        (#"{"op":"run","rule":"r","action":"1","run":"a-1","events":[{}]}"#, "\"action\""),
        (#"{"op":"run","rule":"r","action":1.5,"run":"a-1","events":[{}]}"#, "\"action\""),
        (#"{"op":"run","rule":"r","action":1,"run":"../../etc/passwd","events":[{}]}"#, "\"run\""),
        (#"{"op":"run","rule":"r","action":1,"run":"a b","events":[{}]}"#, "\"run\""),
        (#"{"op":"run","rule":"r","action":1,"run":"x.service","events":[{}]}"#, "\"run\""),
        (#"{"op":"run","rule":"r","action":1,"run":"","events":[{}]}"#, "\"run\""),
        (#"{"op":"run","rule":"r","action":1,"run":"a-1","events":[]}"#, "\"events\""),
        (#"{"op":"run","rule":"r","action":1,"run":"a-1","events":{}}"#, "\"events\""),
        (#"{"op":"run","rule":"r","action":1,"run":"a-1","events":["x"]}"#, "events[0]"),
        (#"{"op":"run","op":"stop"}"#, "not JSON"),
    ]

    @Test(arguments: hostile)
    func aHostileLineIsABadRequestSayingWhat(_ example: (line: String, says: String)) {
        guard case .failure(let error) = decode(example.line) else {
            Issue.record("decoded: \(example.line)")
            return
        }
        #expect(error.code == .badRequest)
        #expect(error.message.contains(example.says), "\(error.message)")
    }

    @Test func aRunIDLongerThanAUnitNameAllowsIsRefused() {
        let long = String(repeating: "a", count: 65)
        #expect(RuleRunnerProtocol.isValidRunID(String(repeating: "a", count: 64)))
        #expect(!RuleRunnerProtocol.isValidRunID(long))
        #expect(!RuleRunnerProtocol.isValidRunID("a\u{0}b"))
        #expect(!RuleRunnerProtocol.isValidRunID("ä"))
    }

    /// A line over the bound is refused once the bound is passed, not read to its end.
    @Test func aLineLongerThanTheBoundIsRefusedWithoutReadingItAll() throws {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        let (reading, writing) = (fds[0], fds[1])
        let writer = Thread {
            let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 64 * 1024)
            // Far more than the bound, never a newline; stops once the reader has gone.
            for _ in 0..<200 where UnixStream.write(chunk, to: writing) {}
            close(writing)
        }
        writer.start()
        var reader = BoundedLineReader(fd: reading, limit: 1 << 20)
        #expect(reader.next() == .failure(RuleRunnerError(.lineTooLong, "a line longer than \(1 << 20) bytes")))
        close(reading)
    }

    @Test func linesUpToTheBoundAndALastLineWithoutNewlineAreRead() {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]) }
        let exact = [UInt8](repeating: UInt8(ascii: "b"), count: 1000)
        #expect(UnixStream.write(exact + [10] + Array("{\"op\":\"stop\"}".utf8), to: fds[1]))
        close(fds[1])
        var reader = BoundedLineReader(fd: fds[0], limit: 1000)
        #expect(reader.next() == .success(exact))
        #expect(reader.next() == .success(Array("{\"op\":\"stop\"}".utf8)))
        #expect(reader.next() == .success(nil))
    }
}
