@testable import ModuleLoading
import Foundation
import SystemCalls
import TestSupport
import Testing

/// The ELF reader and the preflight on bytes: real modules read as `nm` and `readelf` read them,
/// and every header field of a real module pushed out of range gives a clear error, never a crash.
@Suite struct ELFFileTests {
    static let counter = BuildProducts.fixture("FixtureCounter")

    func bytes(_ path: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

    @discardableResult
    func refusal(_ bytes: [UInt8], _ kind: ModuleLoadError.Kind, _ fragment: String,
                 sourceLocation: SourceLocation = #_sourceLocation) -> ModulePreflight.Refusal? {
        do {
            let report = try ModulePreflight.check(ELFBuffer(bytes))
            Issue.record("passed: \(report)", sourceLocation: sourceLocation)
            return nil
        } catch {
            #expect(error.kind == kind, "\(error.message)", sourceLocation: sourceLocation)
            #expect(error.message.contains(fragment), "\(error.message)", sourceLocation: sourceLocation)
            return error
        }
    }

    // MARK: Real files

    /// Modules, the SDK, a module with its own OpenCombine (~2,000 more symbols) and system
    /// libraries with versioned symbols: the same defined symbols and needed libraries as
    /// binutils, an independent reader of the same files, finds.
    @Test(arguments: ["FixtureCounter", "EventBusKit", "FixtureOwnOpenCombine",
                      "/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libc.so.6"])
    func readsRealLibrariesAsNmAndReadelfDo(_ name: String) async throws {
        let path = name.hasPrefix("/") ? name : BuildProducts.fixture(name)
        try #require(FileManager.default.fileExists(atPath: path))
        let file = try ELFFile(System.ReadOnlyFile(path: path))
        #expect(file.identity.machine == ELFFile.Identity.host.machine)
        let dynamic = try file.dynamicInfo()
        let nm = try await run("/usr/bin/nm", ["-D", "--defined-only", "--without-symbol-versions", path])
        let nmNames = Set(nm.output.split(separator: "\n").compactMap { $0.split(separator: " ").last.map(String.init) })
        let ours = Set(dynamic.symbols.filter(\.isDefined).map(\.name))
        #expect(!ours.isEmpty && ours == nmNames, "\(ours.symmetricDifference(nmNames).prefix(10))")
        let readelf = try await run("/usr/bin/readelf", ["-d", path])
        let needed = readelf.output.split(separator: "\n").filter { $0.contains("(NEEDED)") }
            .compactMap { $0.split(separator: "[").last?.dropLast().description }
        #expect(dynamic.needed == needed)
        if !name.hasPrefix("/") && name != "EventBusKit" {
            #expect(dynamic.needed.contains("libEventBusKit.so"))
            #expect(dynamic.symbols.contains { $0.name == "eventbus_module" && $0.isDefined && $0.type == 2 })
        }
    }

    @Test func theHostIdentityIsThisProcess() throws {
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let identity = try ELFFile(System.ReadOnlyFile(path: exe)).identity
        #expect(identity.fileClass == ELFFile.Identity.host.fileClass)
        #expect(identity.byteOrder == ELFFile.Identity.host.byteOrder)
        #expect(identity.machine == ELFFile.Identity.host.machine)
    }

    @Test func everyBuiltModulePasses() throws {
        for name in ["Hello", "Follower", "RateSummary", "FixtureCounter", "FixtureStalled"] {
            let report = try ModulePreflight.check(path: BuildProducts.fixture(name))
            #expect(report.needed.contains("libEventBusKit.so"), "\(name)")
        }
    }

    /// A module that extends SDK types defines symbols that start with the SDK's module names;
    /// only a copy of the SDK defines the SDK's own type descriptors.
    @Test func extensionsOfSDKTypesAreNotACopy() {
        #expect(ModulePreflight.sdkModuleDefining("$s11OpenCombine14AnyCancellableCMn") == "OpenCombine")
        #expect(ModulePreflight.sdkModuleDefining("$s11OpenCombine9PublisherMp") == "OpenCombine")
        #expect(ModulePreflight.sdkModuleDefining("$s11EventBusKit3BusCMn") == "EventBusKit")
        #expect(ModulePreflight.sdkModuleDefining("$s19OpenCombineDispatch16DispatchTimeIntervalVMn") == nil)  // wrong length
        #expect(ModulePreflight.sdkModuleDefining("$s11OpenCombine14AnyCancellableC3ExtE6NestedVMn") == nil)
        #expect(ModulePreflight.sdkModuleDefining("$s11OpenCombine9PublisherP3ExtE5shoutSiyF") == nil)
        #expect(ModulePreflight.sdkModuleDefining("$s11EventBusKit0B0C3ExtE5extrayyF") == nil)
        #expect(ModulePreflight.sdkModuleDefining("$s5Hello5HelloCMn") == nil)
        #expect(ModulePreflight.sdkModuleDefining("$s99") == nil)
        #expect(ModulePreflight.sdkModuleDefining("$s11OpenCombine") == nil)
    }

    // MARK: Crafted headers

    @Test func shortAndForeignIdentities() throws {
        let real = try bytes(Self.counter)
        refusal([], .notELF, "ELF magic")
        refusal(Array("#!/bin/sh\n".utf8), .notELF, "ELF magic")
        refusal(Array(real[0..<4]), .truncated, "identification needs 20 bytes, the file has 4")
        refusal(Array(real[0..<19]), .truncated, "the file has 19")
        refusal(Array(real[0..<40]), .truncated, "ELF header needs 64 bytes, the file has 40")

        var wrong = real
        wrong[4] = 1  // 32-bit
        refusal(wrong, .wrongPlatform, "ELF 32-bit")
        wrong = real
        wrong[5] = 2  // big-endian: the machine field reads differently too
        refusal(wrong, .wrongPlatform, "big-endian")
        wrong = real
        put16(&wrong, 18, 183)
        refusal(wrong, .wrongPlatform, "built for AArch64 (ELF 64-bit little-endian), this host is x86-64")
        wrong = real
        wrong[4] = 7
        refusal(wrong, .malformedELF, "unknown ELF class 7")
        wrong = real
        wrong[6] = 0
        refusal(wrong, .malformedELF, "unknown ELF version 0")
        wrong = real
        put16(&wrong, 16, 1)
        refusal(wrong, .notSharedLibrary, "relocatable object")
        wrong = real
        put16(&wrong, 16, 2)
        refusal(wrong, .notSharedLibrary, "an ELF executable")
    }

    @Test func headerFieldsOutOfRange() throws {
        let real = try bytes(Self.counter)
        func patched(_ body: (inout [UInt8]) -> Void) -> [UInt8] {
            var copy = real
            body(&copy)
            return copy
        }
        refusal(patched { put32(&$0, 20, 0) }, .malformedELF, "e_version is 0")
        refusal(patched { put16(&$0, 52, 52) }, .malformedELF, "e_ehsize is 52")
        refusal(patched { put16(&$0, 54, 32) }, .malformedELF, "e_phentsize is 32")
        refusal(patched { put16(&$0, 56, 0xFFFF) }, .malformedELF, "PN_XNUM")
        refusal(patched { put16(&$0, 56, 0xFFF0) }, .truncated, "its program headers up to byte")
        refusal(patched { put64(&$0, 32, UInt64.max - 8) }, .malformedELF, "past 2^64")
        refusal(patched { put64(&$0, 32, UInt64(real.count)) }, .truncated, "its program headers")
        refusal(patched { put64(&$0, 40, UInt64.max) }, .malformedELF, "past 2^64")
        refusal(patched { put64(&$0, 40, UInt64(real.count) - 10) }, .truncated, "its section headers")
        refusal(patched { put16(&$0, 58, 40) }, .malformedELF, "e_shentsize is 40")
        refusal(patched { put16(&$0, 60, 0xFFFF) }, .truncated, "its section headers")
        // No program headers at all: nothing to load.
        refusal(patched { put16(&$0, 56, 0) }, .notSharedLibrary, "no dynamic section")
    }

    @Test func programHeadersAndDynamicEntriesOutOfRange() throws {
        let real = try bytes(Self.counter)
        let file = try ELFFile(ELFBuffer(real))
        let phoff = Int(read64(real, 32))
        let load = try #require(file.programHeaders.firstIndex { $0.type == ELFFile.loadSegment })
        let dynamicIndex = try #require(file.programHeaders.firstIndex { $0.type == ELFFile.dynamicSegment })
        let loadBase = phoff + load * 56, dynamicBase = phoff + dynamicIndex * 56
        func patched(_ body: (inout [UInt8]) -> Void) -> [UInt8] {
            var copy = real
            body(&copy)
            return copy
        }
        refusal(patched { put64(&$0, loadBase + 8, UInt64(real.count)) }, .truncated, "(PT_LOAD) places bytes up to byte")
        refusal(patched { put64(&$0, loadBase + 8, UInt64.max - 1) }, .malformedELF, "past 2^64")
        refusal(patched { put64(&$0, loadBase + 32, UInt64.max) }, .malformedELF, "p_filesz")
        refusal(patched { put64(&$0, dynamicBase + 8, UInt64(real.count) - 8) }, .truncated, "(PT_DYNAMIC) places bytes")

        // The dynamic entries: find DT_STRTAB (5), DT_STRSZ (10), DT_SYMTAB (6), DT_GNU_HASH, DT_NEEDED (1).
        let dynamic = file.programHeaders[dynamicIndex]
        func entry(_ tag: UInt64) -> Int? {
            for index in 0..<Int(dynamic.fileSize / 16) where read64(real, Int(dynamic.offset) + index * 16) == tag {
                return Int(dynamic.offset) + index * 16
            }
            return nil
        }
        let strtab = try #require(entry(5)), strsz = try #require(entry(10)), symtab = try #require(entry(6))
        let needed = try #require(entry(1))
        refusal(patched { put64(&$0, strtab + 8, 0x7fff_0000_0000) }, .malformedELF, "the dynamic string table")
        refusal(patched { put64(&$0, strsz + 8, UInt64.max) }, .malformedELF, "not inside any loadable segment")
        refusal(patched { put64(&$0, symtab + 8, UInt64.max - 4) }, .malformedELF, "the dynamic symbol table")
        refusal(patched { put64(&$0, needed + 8, 0xFFFF_FFFF) }, .malformedELF, "a DT_NEEDED name")
        refusal(patched { put64(&$0, strtab, 0x7000_0000) }, .malformedELF, "no string table")  // retagged: gone
        refusal(patched { put64(&$0, symtab, 0x7000_0000) }, .malformedELF, "no symbol table")
        if let gnuHash = entry(0x6fff_fef5) {
            refusal(patched { put64(&$0, gnuHash, 0x7000_0000) }, .malformedELF, "no symbol hash table")
            refusal(patched { put64(&$0, gnuHash + 8, 0x7fff_0000_0000) }, .malformedELF, "DT_GNU_HASH")
        }
        if let syment = entry(11) {
            refusal(patched { put64(&$0, syment + 8, 16) }, .malformedELF, "DT_SYMENT is 16")
        }
        // A module whose DT_NEEDED on the SDK is renamed: not linked against it.
        let sdkName = try #require(indexOf(Array("libEventBusKit.so".utf8), in: real))
        refusal(patched { $0[sdkName + 3] = UInt8(ascii: "X") }, .notLinkedToSDK, "it does not link libEventBusKit.so")
        // …and whose entry symbol is renamed: not a module.
        let entryName = try #require(indexOf(Array("eventbus_module\0".utf8), in: real))
        refusal(patched { $0[entryName] = UInt8(ascii: "f") }, .missingEntry, "no eventbus_module symbol")
    }

    /// Every prefix of a real module, byte by byte up to the end of its program headers and then
    /// at sizes up to the whole file: refused as truncated, never passed.
    @Test func everyPrefixIsRefused() throws {
        let real = try bytes(Self.counter)
        var sizes = Array(0...1024)
        var size = 1024
        while size < real.count { sizes.append(size); size += size / 4 + 1 }
        sizes += [4096, 8192, 16384, 32768, real.count - 1]
        for size in sizes where size < real.count {
            do {
                _ = try ModulePreflight.check(ELFBuffer(Array(real[0..<size])))
                Issue.record("a \(size)-byte prefix of a \(real.count)-byte module passed")
            } catch {
                #expect(error.kind == (size < 4 ? .notELF : .truncated), "\(size): \(error.message)")
            }
        }
    }

    /// Random truncations and bit flips of a real module (a fixed seed, so a failure repeats):
    /// the preflight answers every one, passes or refuses, and never crashes or hangs. A file
    /// whose flip lands in code passes (nothing here reads code); this loop never `dlopen`s.
    @Test func fuzzedModulesNeverCrashThePreflight() throws {
        let real = try bytes(Self.counter)
        var random = SplitMix(seed: 0x5EED_E1F)
        var refused = 0, passed = 0
        for round in 0..<3000 {
            var copy = real
            // Half the rounds flip bits in the headers and tables the reader reads (the first
            // pages and the tail with the section headers), half anywhere.
            let flips = 1 + Int(random.next() % 8)
            for _ in 0..<flips {
                let region = round % 2 == 0 ? min(copy.count, 8192) : copy.count
                var index = Int(random.next() % UInt64(region))
                if round % 4 == 2 { index = copy.count - 1 - Int(random.next() % UInt64(min(copy.count, 4096))) }
                copy[index] ^= UInt8(1) << UInt8(random.next() % 8)
            }
            if round % 3 == 0 { copy.removeLast(Int(random.next() % UInt64(copy.count))) }
            do {
                _ = try ModulePreflight.check(ELFBuffer(copy))
                passed += 1
            } catch {
                #expect(!error.message.isEmpty)
                refused += 1
            }
        }
        #expect(refused > 1000, "refused \(refused), passed \(passed)")
    }
}

// MARK: Byte helpers

private func put16(_ bytes: inout [UInt8], _ offset: Int, _ value: UInt16) {
    for index in 0..<2 { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt16(index))) }
}

private func put32(_ bytes: inout [UInt8], _ offset: Int, _ value: UInt32) {
    for index in 0..<4 { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(index))) }
}

private func put64(_ bytes: inout [UInt8], _ offset: Int, _ value: UInt64) {
    for index in 0..<8 { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(index))) }
}

private func read64(_ bytes: [UInt8], _ offset: Int) -> UInt64 {
    (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[offset + $1]) << (8 * UInt64($1)) }
}

private func indexOf(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
    guard let first = needle.first, haystack.count >= needle.count else { return nil }
    var index = 0
    while index <= haystack.count - needle.count {
        if haystack[index] == first && Array(haystack[index..<(index + needle.count)]) == needle { return index }
        index += 1
    }
    return nil
}
