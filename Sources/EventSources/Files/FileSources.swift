import EventBusKit

/// The host's file-change sources: what makes `bus.files(at:)` work.
public enum FileSources {
    /// Registers the `files` source kind on `bus`: every ``FileWatch`` asked for through it is
    /// served by `monitor` (by default the process's one inotify instance). The host calls this
    /// once at start-up; a plain `Bus()` has no file sources.
    public static func register(on bus: Bus, monitor: FileChangeMonitor = .shared) {
        bus.registerSource(FileWatch.self) { options, id in
            // The bus calls a driver only with options of the kind it was registered for.
            FileWatchSource(id: id, options: options as! FileWatch, monitor: monitor)
        }
    }
}
