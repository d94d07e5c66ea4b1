/// The D-Bus specification's rules for names and object paths, as the bus enforces them: what
/// a match may name at all. Each check returns what is wrong, for the error message, or nil.
enum DBusNames {
    /// Interface, bus and member names are at most 255 bytes.
    private static let maxLength = 255

    /// A unique name (`:1.42`: elements of `[A-Za-z0-9_-]`, digits first allowed) or a
    /// well-known one (`org.freedesktop.login1`: at least two elements, none starting with a digit).
    static func busNameProblem(_ name: String) -> String? {
        if name.utf8.count > maxLength { return "is longer than a bus name can be (255)" }
        let unique = name.hasPrefix(":")
        let elements = (unique ? name.dropFirst() : Substring(name)).split(separator: ".", omittingEmptySubsequences: false)
        guard elements.count >= 2 else { return "is not a bus name (two or more elements separated by dots, like org.freedesktop.login1 or :1.42)" }
        for element in elements {
            guard !element.isEmpty else { return "is not a bus name: an empty element" }
            if !element.unicodeScalars.allSatisfy({ isWordScalar($0) || $0 == "-" }) {
                return "is not a bus name: only ASCII letters, digits, '_' and '-' between the dots"
            }
            if !unique, let first = element.unicodeScalars.first, isDigit(first) {
                return "is not a bus name: an element of a well-known name starts with a digit"
            }
        }
        return nil
    }

    /// `a.b.C`: at least two elements of `[A-Za-z0-9_]`, none starting with a digit.
    static func interfaceProblem(_ name: String) -> String? {
        if name.utf8.count > maxLength { return "is longer than an interface name can be (255)" }
        let elements = name.split(separator: ".", omittingEmptySubsequences: false)
        guard elements.count >= 2 else { return "is not an interface name (two or more elements separated by dots, like org.freedesktop.login1.Manager)" }
        for element in elements {
            if let problem = elementProblem(element) { return "is not an interface name: \(problem)" }
        }
        return nil
    }

    /// `PrepareForSleep`: `[A-Za-z0-9_]`, not starting with a digit.
    static func memberProblem(_ name: String) -> String? {
        if name.utf8.count > maxLength { return "is longer than a member name can be (255)" }
        if let problem = elementProblem(Substring(name)) { return "is not a member name: \(problem)" }
        return nil
    }

    /// `/` or `/a/b_c`: elements of `[A-Za-z0-9_]`, no empty one, no trailing `/`.
    static func objectPathProblem(_ path: String) -> String? {
        guard path.hasPrefix("/") else { return "is not an object path: it must start with '/'" }
        if path == "/" { return nil }
        for element in path.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            guard !element.isEmpty else { return "is not an object path: an empty element (\"//\" or a trailing '/')" }
            guard element.unicodeScalars.allSatisfy(isWordScalar) else {
                return "is not an object path: only ASCII letters, digits and '_' between the slashes"
            }
        }
        return nil
    }

    private static func elementProblem(_ element: Substring) -> String? {
        guard let first = element.unicodeScalars.first else { return "an empty element" }
        if isDigit(first) { return "an element starts with a digit" }
        if !element.unicodeScalars.allSatisfy(isWordScalar) { return "only ASCII letters, digits and '_' are allowed" }
        return nil
    }

    private static func isDigit(_ scalar: Unicode.Scalar) -> Bool { scalar >= "0" && scalar <= "9" }

    private static func isWordScalar(_ scalar: Unicode.Scalar) -> Bool {
        (scalar >= "a" && scalar <= "z") || (scalar >= "A" && scalar <= "Z") || isDigit(scalar) || scalar == "_"
    }
}
