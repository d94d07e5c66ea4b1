import EventBusKit
import Synchronization
import SystemCalls

/// Why a module file was not loaded. ``description`` is the whole story for a log line.
public struct ModuleLoadError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The file (or a directory on its path) does not exist.
        case fileMissing
        /// The file or a directory above it could be written by another user.
        case untrusted
        /// Not an ELF file at all (a script, text…).
        case notELF
        /// Shorter than its ELF headers say: a table or a loadable segment runs past the end of
        /// the file (an interrupted copy). Mapping it would fault inside `dlopen`.
        case truncated
        /// An ELF header field out of range (an entry size, an address outside every segment…).
        case malformedELF
        /// ELF for another class, byte order or machine than this host's.
        case wrongPlatform
        /// An executable, object file or core dump: not a shared library.
        case notSharedLibrary
        /// Does not link `libEventBusKit.so` (no `DT_NEEDED` on it): not built against the SDK
        /// as a dynamic library.
        case notLinkedToSDK
        /// The entry returned NULL, or a record whose tag or factory is not readable.
        case badEntryRecord
        /// An ELF file the dynamic loader refused (wrong architecture, missing dependency,
        /// unresolved symbol — often a module built against another SDK).
        case loaderRefused
        /// A shared object without the module entry symbol: not an EventBus module.
        case missingEntry
        /// Built against another SDK (its interface fingerprint differs) or compiler.
        case abiMismatch
        /// Carries its own copy of EventBusKit or OpenCombine.
        case duplicateSDK
    }

    public var path: String
    public var kind: Kind
    public var message: String

    public var description: String { "cannot load module \(path): \(message)" }
}

/// A module library the process has loaded. Never unloaded (see ``System/openLibrary(_:)``).
public struct LoadedLibrary: @unchecked Sendable {
    // @unchecked: `ModuleFactory` is an immutable SDK class that is not marked Sendable; the
    // host calls `makeModule()` only from its control queue.

    /// The path as configured, and the file it resolved to when it was loaded.
    public let path: String
    public let resolvedPath: String
    let factory: ModuleFactory
    /// When the cached library was asked for again: whether the file on disk is no longer the
    /// one loaded (replaced by an upgrade). The loaded code stays until the host restarts.
    public internal(set) var changedOnDisk = false
    let identity: System.FileStatus

    /// A new instance of the module.
    public func makeModule() -> any EventBusModule { factory.makeModule() }

    /// What the module declares its config section may hold (``EventBusModule/configKeys``).
    public var configKeys: ModuleConfigKeys { factory.configKeys }
}

/// Loads module shared objects: checks the file, `dlopen`s it, finds the entry symbol and opens
/// its export record with the SDK's ABI check.
///
/// Each file is opened once per process and remembered by its resolved path: a library cannot
/// be unloaded, so loading it again could only return the same code, and calling its entry again
/// would leak another export record.
public final class ModuleLoader: Sendable {
    private let libraries = Mutex<[String: LoadedLibrary]>([:])

    public init() {}

    /// Loads the module at `path` (absolute), or says precisely why not.
    public func load(_ path: String) throws(ModuleLoadError) -> LoadedLibrary {
        func fail(_ kind: ModuleLoadError.Kind, _ message: String) -> ModuleLoadError {
            ModuleLoadError(path: path, kind: kind, message: message)
        }
        do {
            try FileTrust.check(path)
        } catch {
            switch error {
            case .missing(let error): throw fail(.fileMissing, error.isNoSuchFile ? "no such file" : error.reason)
            case .untrusted(let reason): throw fail(.untrusted, "refused: \(reason)")
            }
        }
        let resolved: String
        let identity: System.FileStatus
        do {
            resolved = try System.realPath(path)
            identity = try System.status(of: resolved)
        } catch {
            throw fail(.fileMissing, error.reason)
        }
        if var cached = libraries.withLock({ $0[resolved] }) {
            // Replaced (another inode, or written since), or its mode or owner changed.
            cached.changedOnDisk = !cached.identity.isSameVersion(as: identity)
                || cached.identity.mode != identity.mode || cached.identity.ownerID != identity.ownerID
            return cached
        }
        guard identity.isRegularFile else { throw fail(.notELF, "not a regular file") }
        // Read before mapped: everything dlopen would trip over (a truncated file faults inside
        // the loader) or that would load into a crash later is refused here.
        do {
            _ = try ModulePreflight.check(path: resolved)
        } catch {
            throw fail(error.kind, error.message)
        }

        let handle: UnsafeMutableRawPointer
        do { handle = try System.openLibrary(resolved) } catch { throw fail(.loaderRefused, "the dynamic loader refused it: \(error.message)") }
        guard let entry = System.symbol(moduleEntrySymbol, in: handle) else {
            throw fail(.missingEntry,
                "no \(moduleEntrySymbol) symbol: not an EventBus module (a module exports it with @_cdecl(\"\(moduleEntrySymbol)\") and exportModule)")
        }
        typealias Entry = @convention(c) () -> UnsafeRawPointer?
        let returned = unsafeBitCast(entry, to: Entry.self)()
        let record: UnsafeRawPointer
        do { record = try ExportRecordCheck.validate(returned, expectedTag: ModuleABI.buildTag) } catch { throw fail(error.kind, error.message) }
        let factory: ModuleFactory
        do {
            factory = try ModuleFactory.open(record: record)
        } catch let error as EventBusError where error.code == .moduleABIMismatch {
            throw fail(.abiMismatch, "ABI mismatch: \(error.message)")
        } catch let error as EventBusError where error.code == .duplicateSDK {
            throw fail(.duplicateSDK, "duplicate SDK: \(error.message)")
        } catch {
            throw fail(.missingEntry, "its export record was refused: \(error)")
        }
        let library = LoadedLibrary(path: path, resolvedPath: resolved, factory: factory, identity: identity)
        // Two threads loading the same new file both reach here; the first record wins, the
        // other library handle is the same mapping (dlopen counts references).
        return libraries.withLock { libraries in
            if let first = libraries[resolved] { return first }
            libraries[resolved] = library
            return library
        }
    }
}
