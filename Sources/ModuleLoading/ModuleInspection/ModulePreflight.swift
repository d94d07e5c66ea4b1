import EventBusKit
import SystemCalls

/// The checks a module file must pass before the host maps it with `dlopen`: each refusal here is
/// a crash that did not happen (a truncated file faults inside the loader; a module with its own
/// OpenCombine loads and then crashes on its first subscription).
///
/// Everything is read with ``ELFFile`` from plain reads of the file. In order:
/// 1. ELF at all, of this host's class, byte order and machine (``ELFFile/Identity/host``);
/// 2. whole: headers, tables, every `PT_LOAD` segment and every section within the file;
/// 3. a shared library (`ET_DYN` with a dynamic section, not a position-independent executable);
/// 4. defines the `eventbus_module` entry symbol;
/// 5. needs `libEventBusKit.so` (`DT_NEEDED`): built against the SDK's one dynamic library;
/// 6. defines none of the SDK's own types (no copy of OpenCombine or EventBusKit inside).
///
/// A pure function of the file's bytes, run on the caller's thread.
enum ModulePreflight {
    /// Why a file is refused: the loader turns it into a ``ModuleLoadError``.
    struct Refusal: Error, Equatable, CustomStringConvertible {
        var kind: ModuleLoadError.Kind
        var message: String
        var description: String { message }
    }

    /// What was found about a file that passed.
    struct Report: Equatable {
        var identity: ELFFile.Identity
        var dynamicSymbols: Int
        var needed: [String]
    }

    /// The library every module must link dynamically.
    static let sdkLibrary = "libEventBusKit.so"

    /// The Swift modules of the SDK's one copy (the SDK and what it links statically): a module
    /// defining one of their types carries a copy of its own.
    static let sdkModules = ["OpenCombine", "OpenCombineDispatch", "OpenCombineFoundation", "EventBusKit"]

    /// Runs every check on the file at `path`.
    static func check(path: String, host: ELFFile.Identity = .host) throws(Refusal) -> Report {
        let source: System.ReadOnlyFile
        do { source = try System.ReadOnlyFile(path: path) } catch { throw Refusal(kind: .fileMissing, message: "cannot read it: \(error.message)") }
        return try check(source, host: host)
    }

    static func check(_ source: any ELFByteSource, host: ELFFile.Identity = .host) throws(Refusal) -> Report {
        func refuse(_ error: ELFError) -> Refusal {
            switch error.kind {
            case .notELF:
                return Refusal(kind: .notELF, message: "not an ELF shared object (\(error.message)); a module is a .so built with swift build")
            case .truncated:
                return Refusal(kind: .truncated, message: "truncated or damaged: \(error.message) (an interrupted copy or download? build or install it again)")
            case .malformed, .unsupported:
                return Refusal(kind: .malformedELF, message: "malformed ELF: \(error.message)")
            case .notDynamic:
                return Refusal(kind: .notSharedLibrary, message: error.message)
            case .unreadable:
                return Refusal(kind: .fileMissing, message: "cannot read it: \(error.message)")
            }
        }
        // 1. Identity, from the first bytes alone: a file for another machine is named as such
        // even when the rest would not parse.
        let identity: ELFFile.Identity
        do {
            let prefix = try source.bytes(at: 0, count: Int(min(source.size, 64)))
            identity = try ELFFile.identify(prefix, fileSize: source.size)
        } catch { throw refuse(error) }
        if identity.fileClass != host.fileClass || identity.byteOrder != host.byteOrder || identity.machine != host.machine {
            throw Refusal(kind: .wrongPlatform,
                          message: "built for \(identity.platformName), this host is \(host.platformName)")
        }
        guard identity.type == ELFFile.typeSharedObject else {
            throw Refusal(kind: .notSharedLibrary,
                          message: "an ELF \(identity.typeName), not a shared library; a module is the .so of a dynamic library product")
        }
        // 2. Whole, and 3. dynamic.
        let dynamic: ELFFile.DynamicInfo
        do {
            dynamic = try ELFFile(source).dynamicInfo()
        } catch { throw refuse(error) }
        if dynamic.flags1 & ELFFile.flag1PIE != 0 {
            throw Refusal(kind: .notSharedLibrary,
                          message: "a position-independent executable, not a shared library; a module is the .so of a dynamic library product")
        }
        // 4. The entry.
        guard dynamic.symbols.contains(where: { $0.name == moduleEntrySymbol && $0.isDefined && $0.binding != 0 }) else {
            throw Refusal(kind: .missingEntry,
                          message: "no \(moduleEntrySymbol) symbol: not an EventBus module (a module exports it with @_cdecl(\"\(moduleEntrySymbol)\") and exportModule)")
        }
        // 5. The SDK, dynamically.
        guard dynamic.needed.contains(sdkLibrary) else {
            throw Refusal(kind: .notLinkedToSDK,
                          message: "it does not link \(sdkLibrary) (its DT_NEEDED: \(dynamic.needed.isEmpty ? "none" : dynamic.needed.joined(separator: ", "))): build it against the EventBusKit product, which is a dynamic library")
        }
        // 6. No copy of the SDK inside.
        var copies: [String: [String]] = [:]
        for symbol in dynamic.symbols where symbol.isDefined {
            if let module = sdkModuleDefining(symbol.name) { copies[module, default: []].append(symbol.name) }
        }
        if let module = sdkModules.first(where: { copies[$0] != nil }), let symbols = copies[module] {
            let others = copies.keys.filter { $0 != module }.sorted()
            throw Refusal(kind: .duplicateSDK,
                          message: "duplicate SDK: it carries its own copy of \(module)\(others.isEmpty ? "" : " (and \(others.joined(separator: ", ")))"): it defines \(module)'s types itself (\(symbols[0]) and \(symbols.count - 1) more); a second copy breaks every cast between host and module. Depend only on the EventBusKit product, never on OpenCombine directly")
        }
        return Report(identity: identity, dynamicSymbols: dynamic.symbols.count, needed: dynamic.needed)
    }

    /// The SDK module whose own top-level type `name` describes, if any.
    ///
    /// Only the module that declares a type defines its context descriptor:
    /// `$s` + module + one identifier + kind (`C` class, `V` struct, `O` enum; none for a
    /// protocol) + `Mn` (nominal type) or `Mp` (protocol), e.g. `$s11OpenCombine14AnyCancellableCMn`.
    /// A module that merely *extends* an SDK type defines symbols that start with the SDK's
    /// module too (`$s11OpenCombine9PublisherP5HelloE5shoutSiyF`: an extension of `Publisher` in
    /// `Hello`), so a plain prefix match would refuse correct modules; the extension context
    /// (`…5HelloE…`) never has this exact shape.
    static func sdkModuleDefining(_ name: String) -> String? {
        var rest = Substring(name)
        guard rest.hasPrefix("$s") else { return nil }
        rest = rest.dropFirst(2)
        guard let module = readIdentifier(&rest), sdkModules.contains(String(module)) else { return nil }
        guard readIdentifier(&rest) != nil else { return nil }
        switch rest {
        case "CMn", "VMn", "OMn", "Mp": return String(module)
        default: return nil
        }
    }

    /// A mangled identifier (`<decimal length><characters>`) from the front of `text`.
    private static func readIdentifier(_ text: inout Substring) -> Substring? {
        let digits = text.prefix(while: { $0.isASCII && $0.isNumber })
        guard !digits.isEmpty, !digits.hasPrefix("0"), let length = Int(digits), length <= 1000 else { return nil }
        let body = text.dropFirst(digits.count)
        guard body.utf8.count >= length else { return nil }
        let identifierEnd = body.utf8.index(body.startIndex, offsetBy: length)
        let identifier = body[..<identifierEnd]
        text = body[identifierEnd...]
        return identifier
    }
}

extension ELFFile.Identity {
    /// This process: what every module must match.
    static var host: ELFFile.Identity {
        #if arch(x86_64)
        let machine: UInt16 = 62
        #elseif arch(arm64)
        let machine: UInt16 = 183
        #elseif arch(riscv64)
        let machine: UInt16 = 243
        #elseif arch(s390x)
        let machine: UInt16 = 22
        #elseif arch(powerpc64le) || arch(powerpc64)
        let machine: UInt16 = 21
        #else
        let machine: UInt16 = 0  // unknown: refuse every module rather than guess
        #endif
        let littleEndian = 1.littleEndian == 1
        return .init(fileClass: MemoryLayout<Int>.size == 8 ? 2 : 1, byteOrder: littleEndian ? 1 : 2,
                     type: ELFFile.typeSharedObject, machine: machine)
    }

    var platformName: String {
        let machines: [UInt16: String] = [3: "x86 (i386)", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "s390x",
                                          40: "ARM (32-bit)", 62: "x86-64", 183: "AArch64", 243: "RISC-V"]
        let bits = fileClass == 2 ? "64-bit" : "32-bit"
        let order = byteOrder == 1 ? "little-endian" : "big-endian"
        return "\(machines[machine] ?? "machine \(machine)") (ELF \(bits) \(order))"
    }

    var typeName: String {
        switch type {
        case 1: "relocatable object (.o)"
        case 2: "executable"
        case 4: "core dump"
        default: "file of type \(type)"
        }
    }
}
