import ArgumentParser
import ControlProtocol
import Foundation

/// `eventbus files PATH`: what the host's file watch on PATH knows exists under it — the
/// listing a client reconciles with after it lost events (`tail --files` showed a gap or an
/// `fs.overflow`): replace the picture with it, then apply the events whose seq is greater.
struct FilesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "files",
        abstract: "List what eventbusd's file watch on PATH knows exists under it (one path a line, folders with a trailing /).",
        discussion: """
            The listing stands at one point of the watch's event stream: with --json it says which \
            (seq), so a client that lost events replaces its picture with the listing and applies \
            only the events with a greater seq. Use the same --recursive as the tail it reconciles.
            """)

    @Argument(help: ArgumentHelp("The watched file or folder.", valueName: "path"))
    var path: String

    @Flag(help: "The watch that covers folders below PATH too (as tail --files PATH --recursive).")
    var recursive = false

    @Flag(help: "The host's listing response as one JSON object (root, source, seq, root_exists, entries).")
    var json = false

    @OptionGroup var socket: SocketOptions

    func run() throws {
        let here = FileManager.default.currentDirectoryPath
        let absolute = path.hasPrefix("/") ? path
            : URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: here + "/")).standardizedFileURL.path
        let listing = try socket.ask(ControlRequest(.listing(ListingRequest(path: absolute, recursive: recursive))))
        if json {
            print(String(decoding: JSONWriter.line(listing).dropLast(), as: UTF8.self))
            return
        }
        let typed = try HostConnection.decode(listing, as: "listing") { if case .listing(let taken) = $0 { taken } else { nil } }
        if !typed.rootExists {
            throw CommandError("\(absolute) does not exist")
        }
        var text = ""
        for entry in typed.entries {
            text += entry.path + (entry.isDirectory ? "/\n" : "\n")
        }
        FileHandle.standardOutput.write(Data(text.utf8))
    }
}
