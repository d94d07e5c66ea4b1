import ControlProtocol
import EventBusKit
import EventSources

/// The answer to a `listing` request (``ListingRequest``): what the host's file watch on a path
/// knows exists under it, and the sequence of the last event that watch posted (``FileListing``). How a client that lost
/// events (a `gap`, an `fs.overflow`) becomes whole: it replaces its picture with the listing,
/// then applies the events whose `seq` is greater. Why a listing and not a replay: after an
/// overflow the difference can be hundreds of thousands of events, more than the client's buffer
/// or the replay ring holds (docs/files.md, "Becoming whole after a gap").
///
/// The client's own access decides, as for `subscribe` with `files`: it must be able to reach
/// the path (``PeerAccess/checkWatch(_:by:)``), and below it a non-root client sees only the
/// entries whose folder it could search.
///
/// The watch that answers is the one `subscribe` with the same `files` and `recursive` uses (or
/// a configured watch on the same tree); when none is running, a scan of the tree answers, by a
/// watch that posts nothing. A tree over the watch entry limit is refused with `too_large`
/// rather than listed as missing.
enum ListingAnswer {
    /// The `listing` response, or why there is none.
    static func answer(_ request: ListingRequest, peer: System.StreamSocket.Peer, server: ControlServer) -> Result<JSON, ControlError> {
        let path = request.path, recursive = request.recursive
        guard path.hasPrefix("/") else { return .failure(ListingRequest.needsPath) }
        let access = server.accessSettings
        let checksAccess = access.files == .caller && peer.userID != 0
        if checksAccess {
            do throws(PeerAccess.Refusal) {
                try PeerAccess.checkWatch(path, by: peer)
            } catch {
                server.logger.warning("control: refused listing from uid \(peer.userID) (pid \(peer.processID)): \(error)")
                return .failure(ControlError(.forbidden, error.description))
            }
        }
        guard server.bus.hasSource(kind: FileWatch.kind) else {
            return .failure(ControlError(.unavailable, "this eventbusd has no files source on its bus, so it has no listing"))
        }
        let listing: FileListing
        do {
            let watch = try FileWatch(path: path, recursive: recursive, entryLimit: server.watchEntries)
            if let running = FileChangeMonitor.shared.listing(of: watch) {
                listing = running
            } else {
                switch FileChangeMonitor.shared.scannedListing(of: watch) {
                case .success(let scanned): listing = scanned
                case .failure(let failure): return .failure(ControlError(.unavailable, failure.message))
                }
            }
        } catch {
            return .failure(ControlError(.unavailable, (error as? EventBusError)?.message ?? "\(error)"))
        }
        if let limit = listing.exceededEntryLimit {
            return .failure(ControlError(.tooLarge,
                "\(path) holds more than \(limit) files and directories, the limit of a watch (control.watch_entries); "
                + "its listing would not be whole. List a smaller tree\(recursive ? " (or without --recursive)" : ""), or raise the limit"))
        }

        var reachable: [Substring: Bool] = [:]
        var entries: [Listing.Entry] = []
        entries.reserveCapacity(listing.entries.count)
        for entry in listing.entries {
            if checksAccess, recursive {
                // Once per folder: the entries of one folder share its answer.
                let folder = entry.path[..<(entry.path.lastIndex(of: "/") ?? entry.path.startIndex)]
                if reachable[folder] == nil { reachable[folder] = PeerAccess.mayReach(entry.path, by: peer) }
                guard reachable[folder] == true else { continue }
            }
            entries.append(Listing.Entry(path: entry.path, isDirectory: entry.isDirectory))
        }
        return .success(Listing(root: listing.root, source: listing.source, sequence: listing.sequence,
                                rootExists: listing.rootExists, entries: entries).json)
    }
}
