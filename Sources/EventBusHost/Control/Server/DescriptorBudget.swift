import EventBusMetrics

/// The file descriptors the control socket leaves to the rest of eventbusd.
///
/// Every client is a descriptor, and so is what the host itself opens while it runs: a worker's
/// socket pair when a crashed module is restarted, the config file on SIGHUP, an inotify or
/// journal reader for a new watch, a metrics scrape. Clients that took every descriptor left
/// the host unable to do any of that — a crashed worker's restarts failed (`socketpair: Too many
/// open files`) until the module hit its start limit and stayed down. So a client is admitted
/// only while, with it, at least `control.reserved_files` descriptors stay free (by default 64,
/// or a quarter of `RLIMIT_NOFILE` when that is less); past that it is refused with a
/// `too_many_clients` line, like one over `max_clients`.
///
/// Open descriptors are counted from `/proc/self/fd` — on every admission when the last count
/// left less than twice the reserve free or is a second old, from the last count plus the
/// clients since otherwise — so connection churn far from the limit costs no directory read.
/// The loop's thread only.
struct DescriptorBudget {
    /// The soft `RLIMIT_NOFILE` (read at start; eventbusd raises it before).
    let limit: Int
    /// Open descriptors that are not clients, at the last count.
    private var others: Int?
    private var countedAt = ContinuousClock.now

    init(limit: Int) {
        self.limit = limit
    }

    /// The descriptors to keep free: `configured`, else 64 or a quarter of the limit.
    func reserve(configured: Int?) -> Int {
        configured ?? min(64, limit / 4)
    }

    /// Whether a client just accepted (its descriptor open) may stay, with `clients` others
    /// already served, keeping `reserve` descriptors free.
    mutating func admits(clients: Int, reserve: Int) -> Bool {
        guard reserve > 0 else { return true }  // nothing kept back: accept's EMFILE is the bound
        let now = ContinuousClock.now
        if let others, now - countedAt < .seconds(1), limit - (others + clients + 1) >= 2 * reserve {
            return true
        }
        guard let open = ProcessFigures.openDescriptorCount() else { return false }
        others = open - clients - 1
        countedAt = now
        return limit - open >= reserve
    }
}
