import EventBusKit
import EventSources
import Foundation

// A journal consumer with a persisted position, for the resume tests: follows the journal files
// in a directory from the head, entries tagged with one syslog identifier, and for each entry
// writes one line `MESSAGE<TAB>CURSOR` to stdout — with a single write(2), so a SIGKILL never
// leaves half a line — and then acknowledges it. Gap notices are written as
// `GAP<TAB>LOST<TAB>RESUMED`. Exits 0 after acknowledging the entry whose message is `--last`.
//
// usage: journal-consumer-fixture DIRECTORY STATE-DIRECTORY CONSUMER IDENTIFIER LAST-MESSAGE

let arguments = CommandLine.arguments
guard arguments.count == 6 else {
    FileHandle.standardError.write(Data("usage: journal-consumer-fixture DIR STATE CONSUMER IDENTIFIER LAST\n".utf8))
    exit(2)
}
let (directory, state, consumer, identifier, last) = (arguments[1], arguments[2], arguments[3], arguments[4], arguments[5])

func emit(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    let written = bytes.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
    if written != bytes.count { exit(3) }
}

let bus = Bus()
JournalDriver.register(on: bus, configuration: .init(stateDirectory: state, retryInterval: .milliseconds(50)))
let subscription = try bus.journal(matching: .identifier(identifier), from: .directory(directory), start: .head,
                                   consumer: consumer)
    .sink { event in
        if let entry = event.journalEntry {
            emit(entry.message + "\t" + entry.cursor)
            do {
                try bus.acknowledge(entry)
            } catch {
                FileHandle.standardError.write(Data("acknowledge failed: \(error)\n".utf8))
                exit(4)
            }
            if entry.message == last { exit(0) }
        } else if let gap = event.journalGap {
            emit("GAP\t\(gap.lostCursor)\t\(gap.resumedCursor ?? "-")")
        } else if let status = event.journalStatus {
            FileHandle.standardError.write(Data("status \(status.state): \(status.reason)\n".utf8))
        }
    }
withExtendedLifetime(subscription) { dispatchMain() }
