/// A read-only reader of the parts of an ELF64 file the dynamic loader uses: the header, the
/// program headers, the section headers, the dynamic section, and the dynamic symbol table.
///
/// Why it exists: `dlopen` maps a file as its headers describe it, so a truncated or corrupt file
/// faults inside the loader (SIGBUS on a page past the end of the file) and takes the host down.
/// This reader runs first, on plain reads of the file (``ELFByteSource``, never a mapping), and
/// checks every offset and size against the file's size with overflow-checked arithmetic before
/// it reads anything; whatever does not fit is an ``ELFError`` naming the field, never a crash.
///
/// It reads only ELF64 (the class of every 64-bit host Swift runs on) in either byte order; the
/// caller compares ``identify(_:)`` with the host's own identity first. Runs on the caller's
/// thread and keeps no state beyond the tables it has read.
struct ELFFile {
    /// `e_ident`, `e_type` and `e_machine`: what decides whether the file is for this host at all.
    struct Identity: Equatable, Sendable {
        /// `EI_CLASS`: 1 = 32-bit, 2 = 64-bit.
        var fileClass: UInt8
        /// `EI_DATA`: 1 = little-endian, 2 = big-endian.
        var byteOrder: UInt8
        /// `e_type`: 1 = relocatable, 2 = executable, 3 = shared object (or position-independent
        /// executable), 4 = core.
        var type: UInt16
        /// `e_machine`: 62 = x86-64, 183 = AArch64, …
        var machine: UInt16

        var isLittleEndian: Bool { byteOrder == ELFFile.littleEndian }
    }

    struct ProgramHeader: Equatable {
        var type: UInt32
        var offset: UInt64
        var virtualAddress: UInt64
        var fileSize: UInt64
        var memorySize: UInt64
    }

    struct SectionHeader: Equatable {
        var type: UInt32
        var offset: UInt64
        var size: UInt64
    }

    /// A `.dynsym` entry: what other objects can link against.
    struct Symbol: Equatable {
        var name: String
        /// `STB_*`: 0 local, 1 global, 2 weak.
        var binding: UInt8
        /// `STT_*`: 0 none, 1 object, 2 function, …
        var type: UInt8
        /// `SHN_UNDEF` (0) when the symbol is only referenced, not defined, here.
        var sectionIndex: UInt16

        var isDefined: Bool { sectionIndex != 0 }
    }

    /// What the dynamic section says: the libraries the file needs, its flags and its symbols.
    struct DynamicInfo {
        /// `DT_NEEDED`, in order.
        var needed: [String]
        /// `DT_FLAGS_1`, 0 when absent (`DF_1_PIE` marks a position-independent executable).
        var flags1: UInt64
        var symbols: [Symbol]
    }

    static let magic: [UInt8] = [0x7F, 0x45, 0x4C, 0x46]
    static let class64: UInt8 = 2
    static let littleEndian: UInt8 = 1
    static let typeSharedObject: UInt16 = 3
    static let loadSegment: UInt32 = 1
    static let dynamicSegment: UInt32 = 2
    static let flag1PIE: UInt64 = 0x0800_0000
    private static let headerSize = 64
    private static let programHeaderSize = 56
    private static let sectionHeaderSize = 64
    private static let symbolSize = 24
    /// `PN_XNUM`: the real program-header count is elsewhere; no module needs 65535 of them.
    private static let manyProgramHeaders: UInt16 = 0xFFFF

    let source: any ELFByteSource
    let identity: Identity
    let programHeaders: [ProgramHeader]
    let sectionHeaders: [SectionHeader]

    /// Reads and checks the `e_ident`, `e_type` and `e_machine` at the start of `prefix` (at
    /// least 20 bytes, the common start of ELF32 and ELF64 headers).
    static func identify(_ prefix: [UInt8], fileSize: UInt64) throws(ELFError) -> Identity {
        guard prefix.count >= 4, Array(prefix[0..<4]) == magic else {
            throw ELFError(.notELF, "it does not start with the ELF magic bytes")
        }
        guard prefix.count >= 20 else {
            throw ELFError(.truncated, "the ELF identification needs 20 bytes, the file has \(fileSize)")
        }
        guard prefix[4] == 1 || prefix[4] == 2 else { throw ELFError(.malformed, "unknown ELF class \(prefix[4])") }
        guard prefix[5] == 1 || prefix[5] == 2 else { throw ELFError(.malformed, "unknown ELF byte order \(prefix[5])") }
        guard prefix[6] == 1 else { throw ELFError(.malformed, "unknown ELF version \(prefix[6])") }
        let reader = ByteReader(bytes: prefix, littleEndian: prefix[5] == littleEndian)
        return Identity(fileClass: prefix[4], byteOrder: prefix[5], type: reader.u16(16), machine: reader.u16(18))
    }

    /// Reads the header, program headers and section headers, and checks that everything they
    /// place in the file (the tables themselves, every loadable segment, every section with
    /// contents) lies within it.
    init(_ source: any ELFByteSource) throws(ELFError) {
        self.source = source
        let size = source.size
        let prefix = try source.bytes(at: 0, count: Int(min(UInt64(Self.headerSize), size)))
        identity = try Self.identify(prefix, fileSize: size)
        guard identity.fileClass == Self.class64 else {
            throw ELFError(.unsupported, "a 32-bit ELF file; this reader reads 64-bit ones")
        }
        guard prefix.count == Self.headerSize else {
            throw ELFError(.truncated, "the ELF header needs \(Self.headerSize) bytes, the file has \(size)")
        }
        let header = ByteReader(bytes: prefix, littleEndian: identity.isLittleEndian)
        guard header.u32(20) == 1 else { throw ELFError(.malformed, "e_version is \(header.u32(20)), not 1") }
        guard header.u16(52) == Self.headerSize else {
            throw ELFError(.malformed, "e_ehsize is \(header.u16(52)), not \(Self.headerSize)")
        }

        // Program headers.
        let phoff = header.u64(32), phnum = header.u16(56), phentsize = header.u16(54)
        guard phnum != Self.manyProgramHeaders else { throw ELFError(.malformed, "e_phnum is PN_XNUM (65535 or more program headers)") }
        if phnum > 0 {
            guard phentsize == Self.programHeaderSize else {
                throw ELFError(.malformed, "e_phentsize is \(phentsize), not \(Self.programHeaderSize)")
            }
        }
        let phTable = try Self.table(at: phoff, count: UInt64(phnum), entrySize: Self.programHeaderSize,
                                     what: "its program headers", in: source)
        let phReader = ByteReader(bytes: phTable, littleEndian: identity.isLittleEndian)
        var programs: [ProgramHeader] = []
        for index in 0..<Int(phnum) {
            let base = index * Self.programHeaderSize
            programs.append(ProgramHeader(type: phReader.u32(base), offset: phReader.u64(base + 8),
                                          virtualAddress: phReader.u64(base + 16),
                                          fileSize: phReader.u64(base + 32), memorySize: phReader.u64(base + 40)))
        }
        for (index, program) in programs.enumerated() where program.type == Self.loadSegment || program.type == Self.dynamicSegment {
            let name = program.type == Self.loadSegment ? "PT_LOAD" : "PT_DYNAMIC"
            guard program.fileSize <= program.memorySize || program.type != Self.loadSegment else {
                throw ELFError(.malformed, "program header \(index) (PT_LOAD) has p_filesz \(program.fileSize) > p_memsz \(program.memorySize)")
            }
            try Self.require(offset: program.offset, size: program.fileSize, within: size,
                             what: "program header \(index) (\(name)) places bytes")
        }
        programHeaders = programs

        // Section headers: not needed by the loader, but a file cut short loses them first, and
        // a table that runs past the end is as sure a sign of a damaged file as any.
        let shoff = header.u64(40), shentsize = header.u16(58)
        var shnum = UInt64(header.u16(60))
        if shoff != 0 {
            guard shentsize == Self.sectionHeaderSize else {
                throw ELFError(.malformed, "e_shentsize is \(shentsize), not \(Self.sectionHeaderSize)")
            }
            if shnum == 0 {
                // SHN_XINDEX convention: more than 65279 sections, the count is section 0's sh_size.
                let first = try Self.table(at: shoff, count: 1, entrySize: Self.sectionHeaderSize,
                                           what: "its section headers", in: source)
                shnum = ByteReader(bytes: first, littleEndian: identity.isLittleEndian).u64(32)
            }
        } else {
            shnum = 0
        }
        let shTable = try Self.table(at: shoff, count: shnum, entrySize: Self.sectionHeaderSize,
                                     what: "its section headers", in: source)
        let shReader = ByteReader(bytes: shTable, littleEndian: identity.isLittleEndian)
        var sections: [SectionHeader] = []
        for index in 0..<Int(shnum) {
            let base = index * Self.sectionHeaderSize
            let section = SectionHeader(type: shReader.u32(base + 4), offset: shReader.u64(base + 24), size: shReader.u64(base + 32))
            // SHT_NULL (0) and SHT_NOBITS (8, .bss) occupy no bytes of the file.
            if section.type != 0 && section.type != 8 {
                try Self.require(offset: section.offset, size: section.size, within: size,
                                 what: "section header \(index) places bytes")
            }
            sections.append(section)
        }
        sectionHeaders = sections
    }

    /// Reads the dynamic section, the libraries it names and the dynamic symbol table — all
    /// found the way the loader finds them (addresses mapped through the `PT_LOAD` segments),
    /// not through section headers, which the loader ignores.
    func dynamicInfo() throws(ELFError) -> DynamicInfo {
        guard let dynamic = programHeaders.first(where: { $0.type == Self.dynamicSegment }) else {
            throw ELFError(.notDynamic, "it has no dynamic section (PT_DYNAMIC): a static executable or an object file, not a shared library")
        }
        let count = dynamic.fileSize / 16
        let table = try read(at: dynamic.offset, count: count * 16, what: "the dynamic section")
        let entries = ByteReader(bytes: table, littleEndian: identity.isLittleEndian)
        var needed: [UInt64] = []
        var values: [UInt64: UInt64] = [:]
        for index in 0..<Int(count) {
            let tag = entries.u64(index * 16), value = entries.u64(index * 16 + 8)
            if tag == 0 { break }  // DT_NULL
            if tag == 1 { needed.append(value) } else if values[tag] == nil { values[tag] = value }
        }
        // DT_STRTAB 5, DT_STRSZ 10, DT_SYMTAB 6, DT_SYMENT 11, DT_HASH 4, DT_GNU_HASH, DT_FLAGS_1.
        guard let strtab = values[5], let strsz = values[10] else {
            throw ELFError(.malformed, "the dynamic section has no string table (DT_STRTAB, DT_STRSZ)")
        }
        let strings = try read(at: try fileOffset(ofAddress: strtab, size: strsz, what: "the dynamic string table"),
                               count: strsz, what: "the dynamic string table")
        func string(_ offset: UInt64, _ what: String) throws(ELFError) -> String {
            guard offset < UInt64(strings.count), let end = strings[Int(offset)...].firstIndex(of: 0) else {
                throw ELFError(.malformed, "\(what) at string table offset \(offset) is not a string within the table")
            }
            return String(decoding: strings[Int(offset)..<end], as: UTF8.self)
        }
        var neededNames: [String] = []
        for offset in needed { neededNames.append(try string(offset, "a DT_NEEDED name")) }

        guard let symtab = values[6] else { throw ELFError(.malformed, "the dynamic section has no symbol table (DT_SYMTAB)") }
        if let syment = values[11], syment != UInt64(Self.symbolSize) {
            throw ELFError(.malformed, "DT_SYMENT is \(syment), not \(Self.symbolSize)")
        }
        let symbolCount = try self.symbolCount(hash: values[4], gnuHash: values[0x6fff_fef5])
        let symbolBytes = try multiply(symbolCount, UInt64(Self.symbolSize), what: "the dynamic symbol table")
        let symbolTable = try read(at: try fileOffset(ofAddress: symtab, size: symbolBytes, what: "the dynamic symbol table"),
                                   count: symbolBytes, what: "the dynamic symbol table")
        let reader = ByteReader(bytes: symbolTable, littleEndian: identity.isLittleEndian)
        var symbols: [Symbol] = []
        symbols.reserveCapacity(Int(symbolCount))
        for index in 0..<Int(symbolCount) {
            let base = index * Self.symbolSize
            let info = symbolTable[base + 4]
            symbols.append(Symbol(name: try string(UInt64(reader.u32(base)), "the name of dynamic symbol \(index)"),
                                  binding: info >> 4, type: info & 0xF, sectionIndex: reader.u16(base + 6)))
        }
        return DynamicInfo(needed: neededNames, flags1: values[0x6fff_fffb] ?? 0, symbols: symbols)
    }

    // MARK: Symbol count

    /// How many entries `.dynsym` has: the loader never needs the number, so ELF only implies it,
    /// by `DT_HASH`'s chain count or by walking `DT_GNU_HASH` to its last chain.
    private func symbolCount(hash: UInt64?, gnuHash: UInt64?) throws(ELFError) -> UInt64 {
        if let hash {
            let words = try read(at: try fileOffset(ofAddress: hash, size: 8, what: "DT_HASH"), count: 8, what: "DT_HASH")
            return UInt64(ByteReader(bytes: words, littleEndian: identity.isLittleEndian).u32(4))
        }
        guard let gnuHash else {
            throw ELFError(.malformed, "the dynamic section has no symbol hash table (DT_HASH or DT_GNU_HASH)")
        }
        let base = try fileOffset(ofAddress: gnuHash, size: 16, what: "DT_GNU_HASH")
        let header = ByteReader(bytes: try read(at: base, count: 16, what: "DT_GNU_HASH"), littleEndian: identity.isLittleEndian)
        let buckets = UInt64(header.u32(0)), symbolOffset = UInt64(header.u32(4)), bloomWords = UInt64(header.u32(8))
        let bloomBytes = try multiply(bloomWords, 8, what: "DT_GNU_HASH's bloom filter")
        let bucketsStart = try add(base, 16, bloomBytes, what: "DT_GNU_HASH's buckets")
        let bucketBytes = try read(at: bucketsStart, count: try multiply(buckets, 4, what: "DT_GNU_HASH's buckets"),
                                   what: "DT_GNU_HASH's buckets")
        let bucketReader = ByteReader(bytes: bucketBytes, littleEndian: identity.isLittleEndian)
        var last: UInt64 = 0
        for index in 0..<Int(buckets) { last = max(last, UInt64(bucketReader.u32(index * 4))) }
        if last == 0 { return symbolOffset }  // no hashed symbols: only the unhashed ones below symoffset
        guard last >= symbolOffset else {
            throw ELFError(.malformed, "DT_GNU_HASH has bucket \(last) below its symbol offset \(symbolOffset)")
        }
        // Walk the last bucket's chain to its end (bit 0 set); reads in pages, bounded by the file.
        let chainStart = try add(bucketsStart, bucketBytes.count, 0, what: "DT_GNU_HASH's chains")
        var index = last
        while true {
            let at = try add(chainStart, 0, try multiply(index - symbolOffset, 4, what: "DT_GNU_HASH's chains"),
                             what: "DT_GNU_HASH's chains")
            let remaining = source.size > at ? (source.size - at) / 4 * 4 : 0
            guard remaining > 0 else {
                throw ELFError(.truncated, "DT_GNU_HASH's last chain runs past the end of the file (\(source.size) bytes)")
            }
            let chunk = try read(at: at, count: min(4096, remaining), what: "DT_GNU_HASH's chains")
            let chain = ByteReader(bytes: chunk, littleEndian: identity.isLittleEndian)
            for offset in stride(from: 0, to: chunk.count, by: 4) {
                if chain.u32(offset) & 1 == 1 { return index + 1 }
                index += 1
            }
        }
    }

    // MARK: Bounds

    /// The file offset of `size` bytes at virtual address `address`: inside the file-backed part
    /// of one `PT_LOAD` segment, or an error.
    func fileOffset(ofAddress address: UInt64, size: UInt64, what: String) throws(ELFError) -> UInt64 {
        for segment in programHeaders where segment.type == Self.loadSegment {
            guard address >= segment.virtualAddress else { continue }
            let delta = address - segment.virtualAddress
            let (end, overflow) = delta.addingReportingOverflow(size)
            if !overflow, end <= segment.fileSize { return segment.offset + delta }
        }
        throw ELFError(.malformed, "\(what) (\(size) bytes at address 0x\(String(address, radix: 16))) is not inside any loadable segment")
    }

    /// `count` bytes at `offset`, or `.truncated` when the file ends before them.
    private func read(at offset: UInt64, count: UInt64, what: String) throws(ELFError) -> [UInt8] {
        try Self.require(offset: offset, size: count, within: source.size, what: what)
        return try source.bytes(at: offset, count: Int(count))
    }

    private static func table(at offset: UInt64, count: UInt64, entrySize: Int, what: String,
                              in source: any ELFByteSource) throws(ELFError) -> [UInt8] {
        let (bytes, overflow) = count.multipliedReportingOverflow(by: UInt64(entrySize))
        guard !overflow else { throw ELFError(.malformed, "\(what): \(count) entries overflow 64 bits") }
        if bytes == 0 { return [] }
        try require(offset: offset, size: bytes, within: source.size, what: what)
        return try source.bytes(at: offset, count: Int(bytes))
    }

    /// Throws unless bytes `offset ..< offset + size` lie within a file of `fileSize` bytes.
    static func require(offset: UInt64, size: UInt64, within fileSize: UInt64, what: String) throws(ELFError) {
        let (end, overflow) = offset.addingReportingOverflow(size)
        guard !overflow else {
            throw ELFError(.malformed, "\(what) at offset \(offset) with size \(size), past 2^64")
        }
        guard end <= fileSize else {
            throw ELFError(.truncated, "\(what) up to byte \(end), but the file has only \(fileSize) bytes")
        }
    }

    private func multiply(_ a: UInt64, _ b: UInt64, what: String) throws(ELFError) -> UInt64 {
        let (product, overflow) = a.multipliedReportingOverflow(by: b)
        guard !overflow else { throw ELFError(.malformed, "\(what): size overflows 64 bits") }
        return product
    }

    private func add(_ a: UInt64, _ b: some BinaryInteger, _ c: UInt64, what: String) throws(ELFError) -> UInt64 {
        let (partial, overflow1) = a.addingReportingOverflow(UInt64(b))
        let (sum, overflow2) = partial.addingReportingOverflow(c)
        guard !overflow1, !overflow2 else { throw ELFError(.malformed, "\(what): offset overflows 64 bits") }
        return sum
    }
}

/// Why an ELF file could not be read.
struct ELFError: Error, Equatable, CustomStringConvertible {
    enum Kind: Equatable {
        /// No ELF magic at the start.
        case notELF
        /// Shorter than its headers say: a table, segment or section runs past the end.
        case truncated
        /// A header field out of range (an entry size, a version, an address outside every
        /// segment, a string without its terminator…).
        case malformed
        /// Valid ELF this reader does not read (32-bit).
        case unsupported
        /// No dynamic section: not something `dlopen` can load.
        case notDynamic
        /// The file could not be read at all (`errno` text in the message).
        case unreadable
    }

    var kind: Kind
    var message: String

    init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    var description: String { message }
}

/// Little- or big-endian integers at byte offsets of a buffer the caller has sized: every
/// offset passed in is within it by construction (a table read whole, entries indexed inside it).
private struct ByteReader {
    let bytes: [UInt8]
    let littleEndian: Bool

    func u16(_ offset: Int) -> UInt16 { UInt16(truncatingIfNeeded: value(offset, 2)) }
    func u32(_ offset: Int) -> UInt32 { UInt32(truncatingIfNeeded: value(offset, 4)) }
    func u64(_ offset: Int) -> UInt64 { value(offset, 8) }

    private func value(_ offset: Int, _ width: Int) -> UInt64 {
        var result: UInt64 = 0
        for index in 0..<width {
            let byte = UInt64(bytes[offset + (littleEndian ? width - 1 - index : index)])
            result = result << 8 | byte
        }
        return result
    }
}
