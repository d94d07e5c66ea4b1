/// The control socket's clients, counted for its limits: `control.max_clients` in total and
/// `max_clients_per_user` per uid (root counts only against the total), and the refusals since
/// start, for `status` and the metrics.
///
/// A value kept under the server's lock (admissions happen on the loop, the counts are read by
/// reports from any thread); it decides, the server carries out.
struct ClientRoster<Client: AnyObject> {
    private(set) var clients: [ObjectIdentifier: Client] = [:]
    private var byUser: [UInt32: Int] = [:]
    private var lastID = 0
    private(set) var refused = RefusalCounts()

    /// Clients refused since start.
    struct RefusalCounts: Equatable {
        /// For `max_clients` or `max_clients_per_user`.
        var limit = 0
        /// For want of file descriptors (``DescriptorBudget``, or `accept` failing with `EMFILE`).
        var descriptors = 0
    }

    var count: Int { clients.count }

    enum Admission {
        /// Admitted under this id: make the client and ``add(_:user:)`` it.
        case admitted(id: Int)
        /// Refused, in words for the client and the log.
        case refused(String)
    }

    /// Whether a client of `userID` may join.
    mutating func admit(userID: UInt32, maxClients: Int, maxPerUser: Int) -> Admission {
        if clients.count >= maxClients {
            refused.limit += 1
            return .refused("eventbusd already serves \(clients.count) client(s), its limit (control.max_clients)")
        }
        let mine = byUser[userID, default: 0]
        if userID != 0, mine >= maxPerUser {
            refused.limit += 1
            return .refused("uid \(userID) already has \(mine) connection(s) to eventbusd, its limit (control.max_clients_per_user)")
        }
        lastID += 1
        return .admitted(id: lastID)
    }

    mutating func add(_ client: Client, user userID: UInt32) {
        clients[ObjectIdentifier(client)] = client
        byUser[userID, default: 0] += 1
    }

    /// Forgets `client` (once; a second call does nothing).
    mutating func remove(_ client: Client, user userID: UInt32) {
        guard clients.removeValue(forKey: ObjectIdentifier(client)) != nil else { return }
        let left = byUser[userID, default: 1] - 1
        byUser[userID] = left > 0 ? left : nil
    }

    mutating func refusedForDescriptors() { refused.descriptors += 1 }
}
